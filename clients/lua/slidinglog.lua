-- RL.SLIDINGLOG as a server-side script, reply for reply the module's
-- (clients/lua/README.md).
-- EVALSHA <sha> 1 key limit window [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]
-- needs: fast slidinglog_fast common slidinglog

return run(function()
  if #KEYS ~= 1 then
    fail('ERR the script takes exactly one key: EVALSHA sha 1 key limit window [options]')
  end
  local n, now = test_clock(ARGV)
  if n < 2 then
    arity('RL.SLIDINGLOG key limit window [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]')
  end
  local params = sl_params(sl_limit(ARGV[1]), duration_ms(ARGV[2], 'window'))
  local o = options(ARGV, 3, n, 4, nil, 'COST n, ATMOST max, DRYRUN, BLOCK duration or SHADOW')
  return admit(SL, KEYS[1], params, o, clock(now or sl_now))
end)
