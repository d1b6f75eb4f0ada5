-- RL.LIMIT as a server-side script, over rules the application defines instead of a policy set
-- with RL.POLICY.SET: reply for reply the module's for the same rules (clients/scripts/README.md,
-- "Policies"). One key per rule, the keys sharing a hash tag.
-- EVALSHA <sha> <rules> key1 .. keyN rule1 .. ruleN [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]
--   a rule: [SHADOW] GCRA burst rate period | TOKENBUCKET capacity refill_amount refill_period
--   [INTERVAL] | LEAKYBUCKET capacity leak_amount leak_period | FIXEDWINDOW limit window |
--   SLIDINGWINDOW limit window | SLIDINGLOG limit window | WARMUP rate period warmup [COLDFACTOR f]
-- needs: common gcra tokenbucket fixedwindow leakybucket slidingwindow slidinglog warmup anykey policy

return run(function()
  if #KEYS < 1 or #KEYS > 16 then
    fail('ERR the script takes one key per rule, 1 to 16: EVALSHA sha N key1 .. keyN rule1 .. ruleN [options]')
  end
  local n, now = test_clock(ARGV)
  local rules, first = policy_rules(ARGV, n, #KEYS)
  local o = options(ARGV, first, n, 3, nil, 'COST n, ATMOST max, DRYRUN, BLOCK duration or SHADOW')
  return policy_admit(KEYS, rules, o, clock(now))
end)
