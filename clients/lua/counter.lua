-- RL.COUNTER as a server-side script, reply for reply the module's (clients/lua/README.md): a
-- fixed window kept as a plain integer string whose TTL is set at its first hit, as INCRBY and
-- PEXPIRE keep it (rate-limiter-flexible's, express-rate-limit's stores' and limits' own format).
-- EVALSHA <sha> 1 key window [BY n] [XX]
-- needs: common

-- The count beyond which a reply would leave the doubles' exact range: |value| below 10^15 and
-- |BY| at most 10^12 keep every sum below 2^53.
local EXACT_COUNT = 1000000000000000
local NOT_INTEGER = 'ERR value is not an integer or out of range' -- INCRBY's own text
local BEYOND = 'ERR a count beyond 10^15 needs the ratelimit module: a script replies exact '
  .. 'integers below 2^53 only'

-- BY's value: a signed integer as the module's grammar writes it, |n| at most 10^12.
local function signed(s)
  if (s == '0' or s:find('^-?[1-9][0-9]*$')) and #s <= 14 then
    local n = tonumber(s)
    if n >= -MAX_COUNT and n <= MAX_COUNT then
      return n
    end
  end
  fail(format('ERR invalid BY: expected an integer from %d to %d', -MAX_COUNT, MAX_COUNT))
end

-- The key's value as INCRBY reads it (string2ll: an optional '-', digits without a leading
-- zero, within a signed 64-bit integer), as a number; beyond 10^15 the script's own error.
local function stored(s)
  local digits = s:match('^-?([1-9][0-9]*)$')
  if s == '0' then
    return 0
  end
  if not digits or #digits > 19 then
    fail(NOT_INTEGER)
  end
  if #digits == 19 then
    local most = s:sub(1, 1) == '-' and '9223372036854775808' or '9223372036854775807'
    if digits > most then
      fail(NOT_INTEGER)
    end
  end
  local v = tonumber(s)
  if v <= -EXACT_COUNT or v >= EXACT_COUNT then
    fail(BEYOND)
  end
  return v
end

return run(function()
  if #KEYS ~= 1 then
    fail('ERR the script takes exactly one key: EVALSHA sha 1 key window [BY n] [XX]')
  end
  local n = test_clock(ARGV) -- read as the other scripts read it, and unused: no clock here
  if n < 1 then
    arity('RL.COUNTER key window [BY n] [XX]')
  end
  local window = duration_ms(ARGV[1], 'window')
  local by, seen_by, xx = 1, false, false
  local i = 2
  while i <= n do
    local word = ARGV[i]:upper()
    if word == 'BY' then
      if seen_by then
        fail('ERR BY given more than once')
      end
      if i + 1 > n then
        fail(format('ERR BY needs a value: an integer from %d to %d', -MAX_COUNT, MAX_COUNT))
      end
      by, seen_by = signed(ARGV[i + 1]), true
      i = i + 2
    elseif word == 'XX' then
      if xx then
        fail('ERR XX given more than once')
      end
      xx = true
      i = i + 1
    else
      fail(format("ERR unknown option '%s' at argument %d: expected BY n or XX, each once", quote(ARGV[i]), i + 1))
    end
  end
  local key = KEYS[1]
  local got = redis.call('GET', key) -- another type: Redis's own WRONGTYPE, as the module's
  if not got then
    if by == 0 or xx then
      return { 0, -2 } -- a read, or XX on no key: nothing written
    end
    redis.call('INCRBY', key, by)
    redis.call('PEXPIRE', key, window)
    return { by, window }
  end
  local value = stored(got)
  if by == 0 then
    return { value, redis.call('PTTL', key) }
  end
  redis.call('INCRBY', key, by) -- keeps the TTL
  local pttl = redis.call('PTTL', key)
  if pttl == -1 then -- a key without a TTL gets the window, as rate-limiter-flexible's script does
    redis.call('PEXPIRE', key, window)
    pttl = window
  end
  return { value + by, pttl }
end)
