-- RL.GCRA as a server-side script, reply for reply the module's (clients/lua/README.md).
-- EVALSHA <sha> 1 key burst rate period [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]
-- needs: fast gcra_fast gcra_go common gcra

return run(function()
  if #KEYS ~= 1 then
    fail('ERR the script takes exactly one key: EVALSHA sha 1 key burst rate period [options]')
  end
  local n, now = test_clock(ARGV)
  if n < 3 then
    arity('RL.GCRA key burst rate period [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]')
  end
  local params = gcra_params(count(ARGV[1], 'burst', 1, MAX_COUNT), count(ARGV[2], 'rate', 1, MAX_COUNT),
    duration_ms(ARGV[3], 'period'))
  local o = options(ARGV, 4, n, 5, nil, 'COST n, ATMOST max, DRYRUN, BLOCK duration or SHADOW')
  return admit(GCRA, KEYS[1], params, o, clock(now or gcra_now))
end)
