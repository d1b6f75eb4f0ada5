-- RL.REFUND as a server-side script, for the keys of policy.lua: reply for reply the module's on
-- a policy key (clients/lua/README.md, "Policies"). The keys: at least those the first key's
-- generation wrote (else RULEKEYS, as policy.lua).
-- EVALSHA <sha> <keys> key1 .. keyK units [DRYRUN]
-- needs: common gcra tokenbucket fixedwindow leakybucket slidingwindow slidinglog warmup anykey policy

return run(function()
  if #KEYS < 1 or #KEYS > 16 then
    fail('ERR the script takes the policy\'s keys, 1 to 16: EVALSHA sha K key1 .. keyK units [DRYRUN]')
  end
  local units, dryrun, now = refund_args(ARGV)
  return policy_refund(KEYS, units, dryrun, now)
end)
