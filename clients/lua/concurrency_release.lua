-- RL.CONCURRENCY.RELEASE as a server-side script, reply for reply the module's
-- (clients/lua/README.md). RTT and DROPPED are read as the module reads them and change
-- nothing, as on the module's keys that are not adaptive (the only kind a script keeps).
-- EVALSHA <sha> 1 key token [RTT duration] [DROPPED]
-- needs: common concurrency

-- An RTT as the module's duration_us reads it: a number and `us`, or a duration.
local function rtt(s)
  local number = s:match('^(.*)[uU][sS]$')
  if number then
    local us = cc_digits(number)
    return us and us >= 1 and us <= MAX_DURATION_MS * 1000
  end
  return pcall(duration_ms, s, 'RTT')
end

-- concurrency::release: 1 when the token's lease is active (then the ended leases go with it,
-- and the key expires when the last lease ends, or goes); 0, changing nothing, otherwise.
return run(function()
  if #KEYS ~= 1 then
    fail('ERR the script takes exactly one key: EVALSHA sha 1 key token [RTT duration] [DROPPED]')
  end
  local n, now = test_clock(ARGV)
  if n < 1 then
    arity('RL.CONCURRENCY.RELEASE key token [RTT rtt] [DROPPED]')
  end
  local rtt_given, dropped = false, false
  local i = 2
  while i <= n do
    local word = ARGV[i]:upper()
    if word == 'RTT' then
      if rtt_given then
        fail('ERR RTT given more than once')
      end
      if i + 1 > n or not rtt(ARGV[i + 1]) then
        fail('ERR RTT needs a value: a duration from 1us to 10 years: a number and us, ms, s, m, h '
          .. 'or d (a bare number is ms)')
      end
      rtt_given = true
      i = i + 2
    elseif word == 'DROPPED' then
      if dropped then
        fail('ERR DROPPED given more than once')
      end
      dropped = true
      i = i + 1
    else
      fail(format("ERR unknown option '%s' at argument %d: expected RTT duration or DROPPED, each "
        .. 'once', quote(ARGV[i]), i + 1))
    end
  end
  now = clock(now)
  local key = KEYS[1]
  local member = 't' .. ARGV[1]
  if not cc_read(key) or not cc_active(key, member, now) then
    return 0
  end
  cc_drop_ended(key, now)
  redis.call('ZREM', key, member)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  local ends = last[2] and tonumber(last[2])
  if ends and ends > now then
    redis.call('PEXPIRE', key, cc_ms(ends, now))
  else
    redis.call('DEL', key)
  end
  return 1
end)
