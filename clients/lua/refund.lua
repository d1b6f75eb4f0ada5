-- RL.REFUND as a server-side script, for the keys of every admission script, reply for reply
-- the module's (clients/lua/README.md).
-- EVALSHA <sha> 1 key units [DRYRUN]
-- needs: common gcra tokenbucket fixedwindow leakybucket slidingwindow slidinglog warmup anykey

-- commands/refund.rs and Key::refund: up to `units` of what the key has taken, under the
-- parameters it was written with; the key's expiry set anew, or the key gone when fresh.
return run(function()
  if #KEYS ~= 1 then
    fail('ERR the script takes exactly one key: EVALSHA sha 1 key units [DRYRUN]')
  end
  local units, dryrun, now = refund_args(ARGV)
  local key = KEYS[1]
  local h = read(key, FIELDS)
  if not h then
    return 0
  end
  local A = ALGORITHMS[h.a]
  if h.a == 'cc1' then
    fail('ERR RL.REFUND does not apply to a concurrency key: use RL.CONCURRENCY.RELEASE key token')
  end
  if not A then
    fail(WRONGTYPE)
  end
  local stored = A.load(h, key)
  local given, state = A.refund(stored, now, units)
  if dryrun or given == 0 then
    return given
  end
  -- The key as of now after the refund (view_now), a BLOCK in force included.
  state.params = stored.params
  local d = A.check(stored.params, state, now, 0, false)
  if h.k then
    penalize(d, value(h.k), now)
  end
  if d.reset[1] ~= 0 then
    ceil_ms(d.reset) -- refused before anything is written when beyond 2^53 ms
  end
  redis.call('HSET', key, unpack(A.save(stored.params, state)))
  expire(key, d.reset)
  return given
end)
