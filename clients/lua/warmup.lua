-- RL.WARMUP as a server-side script, reply for reply the module's (clients/lua/README.md).
-- EVALSHA <sha> 1 key rate period warmup [COLDFACTOR factor] [COST n | ATMOST max] [DRYRUN]
--   [BLOCK duration] [SHADOW]
-- needs: common gcra warmup

return run(function()
  if #KEYS ~= 1 then
    fail('ERR the script takes exactly one key: EVALSHA sha 1 key rate period warmup [options]')
  end
  local n, now = test_clock(ARGV)
  if n < 3 then
    arity('RL.WARMUP key rate period warmup [COLDFACTOR factor] [COST n | ATMOST max] [DRYRUN] '
      .. '[BLOCK duration] [SHADOW]')
  end
  -- As the module: the options first, then the parameters, COLDFACTOR's value last.
  local o, cold = options(ARGV, 4, n, 5, { 'COLDFACTOR', 'an integer from 2 to 10' },
    'COST n, ATMOST max, DRYRUN, BLOCK duration, SHADOW or COLDFACTOR factor')
  local rate = count(ARGV[1], 'rate', 1, MAX_COUNT)
  local period_ms = duration_ms(ARGV[2], 'period')
  local warmup_ms = duration_ms(ARGV[3], 'warmup')
  local k = cold and count(cold, 'COLDFACTOR', 2, 10) or 3
  return admit(WU, KEYS[1], wu_params(rate, period_ms, warmup_ms, k), o, clock(now))
end)
