-- RL.CONCURRENCY.ACQUIRE as a server-side script, reply for reply the module's
-- (clients/lua/README.md). ADAPTIVE (and its MIN and MAX) needs the module.
-- EVALSHA <sha> 1 key limit lease [ID token] [DRYRUN] [SHADOW]
-- needs: common concurrency

-- commands/concurrency.rs's options: each once, in any order, any case; ADAPTIVE's algorithm
-- and MIN's and MAX's values as the module reads them, then refused (ADAPTIVE).
local function acquire_options(args, n)
  local o = { dryrun = false, shadow = false }
  local kind, min_given, max_given = false, false, false
  local i = 3
  while i <= n do
    local word = args[i]:upper()
    if word == 'ID' then
      if o.id then
        fail('ERR ID given more than once')
      end
      local token = i + 1 <= n and args[i + 1]
      if not token or #token < 1 or #token > 256 then
        fail('ERR ID needs a value: a token of 1 to 256 bytes')
      end
      o.id = token
      i = i + 2
    elseif word == 'SHADOW' or word == 'DRYRUN' then
      local flag = word:lower()
      if o[flag] then
        fail('ERR ' .. word .. ' given more than once')
      end
      o[flag] = true
      i = i + 1
    elseif word == 'ADAPTIVE' then
      if kind then
        fail('ERR ADAPTIVE given more than once')
      end
      local k = i + 1 <= n and args[i + 1]:upper()
      if k ~= 'AIMD' and k ~= 'VEGAS' and k ~= 'GRADIENT2' then
        fail('ERR ADAPTIVE needs a value: AIMD, VEGAS or GRADIENT2')
      end
      kind = true
      i = i + 2
    elseif word == 'MIN' or word == 'MAX' then
      if (word == 'MIN' and min_given) or (word == 'MAX' and max_given) then
        fail('ERR ' .. word .. ' given more than once')
      end
      local v = i + 1 <= n and cc_digits(args[i + 1])
      if not v or v < 1 or v > CC_MAX_LIMIT then
        fail('ERR ' .. word .. ' needs a value: a limit from 1 to the setting '
          .. 'ratelimit.concurrency-max-limit')
      end
      if word == 'MIN' then
        min_given = true
      else
        max_given = true
      end
      i = i + 2
    else
      fail(format("ERR unknown option '%s' at argument %d: expected ID token, DRYRUN, SHADOW, "
        .. 'ADAPTIVE algorithm, MIN n or MAX n, each once', quote(args[i]), i + 1))
    end
  end
  if kind then
    fail(ADAPTIVE)
  end
  if min_given or max_given then
    fail('ERR MIN and MAX bound an adaptive limit: give them with ADAPTIVE AIMD|VEGAS|GRADIENT2')
  end
  return o
end

-- concurrency::acquire: admitted when it renews an active lease of its token or fewer than
-- `limit` leases are active; a write drops the ended leases and (re)sets the token's.
return run(function()
  if #KEYS ~= 1 then
    fail('ERR the script takes exactly one key: EVALSHA sha 1 key limit lease [options]')
  end
  local n, now = test_clock(ARGV)
  if n < 2 then
    arity('RL.CONCURRENCY.ACQUIRE key limit lease [ID token] [DRYRUN] [SHADOW] [ADAPTIVE <AIMD | '
      .. 'VEGAS | GRADIENT2>] [MIN min] [MAX max]')
  end
  local limit = cc_digits(ARGV[1])
  if not limit or limit < 1 or limit > CC_MAX_LIMIT then
    fail(format('ERR invalid limit: expected an integer from 1 to %d (the module setting '
      .. 'ratelimit.concurrency-max-limit bounds it)', CC_MAX_LIMIT))
  end
  local lease_ms = duration_ms(ARGV[2], 'lease')
  local o = acquire_options(ARGV, n)
  now = clock(now)
  local key = KEYS[1]
  local stored = cc_read(key)
  local issued = stored and stored.issued or 0
  local held = stored and redis.call('ZCOUNT', key, '(' .. format('%d', now), '+inf') or 0
  local token = o.id or format('%x-%x', now, issued)
  local member = 't' .. token
  local replaced = stored and cc_active(key, member, now)
  local reply
  local allowed = (o.id and replaced) or held < limit
  if not allowed then
    -- Denied: until the first active lease ends, or, above the limit (it went down), the
    -- (held - limit + 1)-th; reset when the last one ends.
    local first = cc_nth(key, now, held > limit and held - limit or 0)
    reply = { 0, limit, 0, first and cc_ms(first, now) or -1,
      cc_ms(cc_last(key, now, nil) or now, now), false }
  else
    -- The leases once this one is taken (the token's own lease, if active, replaced).
    local ends = now + lease_ms * 1000
    local last = stored and cc_last(key, now, replaced and member) or nil
    if not last or last < ends then
      last = ends
    end
    local count = held + (replaced and 0 or 1)
    local reset = cc_ms(last, now)
    reply = { 1, limit, count < limit and limit - count or 0, 0, reset, token }
    if o.dryrun then
      reply[6] = false -- what the request would be told, without a lease (nil)
    else
      if stored then
        cc_drop_ended(key, now)
      end
      redis.call('ZADD', key, '-1', 'a', format('%d', -limit), 'l', format('%d', -lease_ms), 'w',
        format('%d', -(o.id and issued or issued + 1)), 'i', format('%d', ends), member)
      redis.call('PEXPIRE', key, reset)
    end
  end
  if o.shadow then
    reply[1] = 1
    reply[#reply + 1] = allowed and 0 or 1
  end
  return reply
end)
