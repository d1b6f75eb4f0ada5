-- RL.LIMIT as a server-side script, over rules the application defines instead of a policy set
-- with RL.POLICY.SET: reply for reply the module's for the same rules (clients/lua/README.md,
-- "Policies"). One key per rule, the keys sharing a hash tag; more keys than rules (those of an
-- earlier, longer policy) with the number of rules before them.
-- EVALSHA <sha> <keys> key1 .. keyK [N] rule1 .. ruleN [COST n | ATMOST max] [DRYRUN] [BLOCK duration] [SHADOW]
--   a rule: [SHADOW] GCRA burst rate period | TOKENBUCKET capacity refill_amount refill_period
--   [INTERVAL] | LEAKYBUCKET capacity leak_amount leak_period | FIXEDWINDOW limit window |
--   SLIDINGWINDOW limit window | SLIDINGLOG limit window | WARMUP rate period warmup [COLDFACTOR f]
-- needs: common gcra tokenbucket fixedwindow leakybucket slidingwindow slidinglog warmup anykey policy

return run(function()
  if #KEYS < 1 or #KEYS > 16 then
    fail('ERR the script takes one key per rule, 1 to 16: EVALSHA sha K key1 .. keyK [N] rule1 .. ruleN [options]')
  end
  local n, now = test_clock(ARGV)
  local wanted, start = policy_count(ARGV, n, #KEYS)
  local rules, first = policy_rules(ARGV, n, wanted, start)
  local o = options(ARGV, first, n, 3, nil, 'COST n, ATMOST max, DRYRUN, BLOCK duration or SHADOW')
  return policy_admit(KEYS, rules, o, clock(now))
end)
