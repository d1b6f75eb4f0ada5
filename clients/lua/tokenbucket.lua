-- RL.TOKENBUCKET as a server-side script, reply for reply the module's
-- (clients/lua/README.md).
-- EVALSHA <sha> 1 key capacity refill_amount refill_period [INTERVAL] [COST n | ATMOST max]
--   [DRYRUN] [BLOCK duration] [SHADOW]
-- needs: fast tokenbucket_fast common tokenbucket

return run(function()
  if #KEYS ~= 1 then
    fail('ERR the script takes exactly one key: EVALSHA sha 1 key capacity refill_amount '
      .. 'refill_period [options]')
  end
  local n, now = test_clock(ARGV)
  if n < 3 then
    arity('RL.TOKENBUCKET key capacity refill_amount refill_period [INTERVAL] [COST n | ATMOST max] '
      .. '[DRYRUN] [BLOCK duration] [SHADOW]')
  end
  local capacity = count(ARGV[1], 'capacity', 1, MAX_COUNT)
  local amount = count(ARGV[2], 'refill_amount', 1, MAX_COUNT)
  local period_ms = duration_ms(ARGV[3], 'refill_period')
  local o, interval = options(ARGV, 4, n, 5, 'INTERVAL',
    'COST n, ATMOST max, DRYRUN, BLOCK duration, SHADOW or INTERVAL')
  return admit(TB, KEYS[1], tb_params(capacity, amount, period_ms, interval), o, clock(now or tb_now))
end)
