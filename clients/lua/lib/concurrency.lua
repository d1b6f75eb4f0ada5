-- algorithms/src/concurrency.rs: at most `limit` leases held at once, each ending on release
-- or `lease` after it was taken. A lease key is a sorted set (clients/lua/README.md, State):
-- one member per lease, `t` and its token, scored with when it ends (µs since the Unix epoch);
-- and four members scored at or below 0, so that they sort before every lease: `a` at -1 (the
-- layout, cc1), `l` at -limit and `w` at -lease_ms (the parameters of the key's last write),
-- `i` at -issued (the tokens generated on the key). The leases ordered by their ends are the
-- module's `by_end`, so every step is a sorted-set step: O(log n) in the leases held.
local CC = 'RL.CONCURRENCY.ACQUIRE' -- the command the errors name, for both scripts
local CC_MAX_LIMIT = 100000 -- the module setting concurrency-max-limit at its default
local ADAPTIVE = 'ERR ADAPTIVE needs the ratelimit module: the script backend keeps a fixed '
  .. 'concurrency limit (an adaptive limit learns from the samples only the module keeps)'

-- A count as the module's digits() reads it (no sign, no leading zero, at most 20 digits), or
-- nil; exact below 2^53, and large enough to be out of every range above.
local function cc_digits(s)
  if #s >= 1 and #s <= 20 and (s == '0' or s:find('^[1-9][0-9]*$')) then
    return tonumber(s)
  end
  return nil
end

-- The key's layout and its generated tokens so far, or nil for a missing key. A key of another
-- type, or a sorted set without the layout, is refused as read() refuses it; an admission
-- script's hash gets the module's text for another algorithm's key (cc_hash).
local function cc_hash(key)
  local a = redis.pcall('HGET', key, 'a')
  if type(a) == 'string' and a ~= 'cc1' then
    expect({ a = a }, 'cc1', CC)
  end
  return nil
end

local function cc_read(key)
  local got = fetched(redis.pcall('ZMSCORE', key, 'a', 'i'), key, cc_hash)
  if not got then
    return nil
  end
  if got[1] ~= '-1' or not got[2] then
    fail(WRONGTYPE)
  end
  return { issued = -tonumber(got[2]) }
end

-- When the lease `member` ends, if it is active at `now`; else nil.
local function cc_active(key, member, now)
  local e = redis.call('ZSCORE', key, member)
  e = e and tonumber(e)
  if e and e > now then
    return e
  end
  return nil
end

-- The first lease to end after `now` (with `skip` leases before it), or nil.
local function cc_nth(key, now, skip)
  local r = redis.call('ZRANGEBYSCORE', key, '(' .. format('%d', now), '+inf', 'WITHSCORES',
    'LIMIT', skip, 1)
  return r[2] and tonumber(r[2]) or nil
end

-- When the last active lease ends, `member`'s aside (it is being replaced), or nil.
local function cc_last(key, now, member)
  local r = redis.call('ZREVRANGEBYSCORE', key, '+inf', '(' .. format('%d', now), 'WITHSCORES',
    'LIMIT', 0, 2)
  if r[1] and r[1] ~= member then
    return tonumber(r[2])
  end
  return r[4] and tonumber(r[4]) or nil
end

-- Drops every lease that has ended by `now`, as every write of the module does.
local function cc_drop_ended(key, now)
  redis.call('ZREMRANGEBYSCORE', key, 1, format('%d', now))
end

-- Whole ms from now to `us`, rounded up (Span::ceil_ms on whole µs).
local function cc_ms(us, now)
  return ceildiv(us - now, 1000)
end
