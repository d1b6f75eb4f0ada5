-- The steps every fast path (lib/*_fast.lua) takes alike, defined before them and before the
-- common part (clients/lua/README.md, "One source"): a plain call's words, the key's fields,
-- the clock, and a division rounded up. A call these do not take goes on to the general path,
-- which parses and reads again and reports any error.
local FAST_MAX_NOW = 7881299347898368 -- 2^53 - 2^50, the general path's MAX_NOW

-- A plain call's words: `counts` counts of at most `digits` digits each, then a duration (its
-- number of at most `digits` digits) of at most ten years (the general path's MAX_DURATION_MS),
-- then nothing but the test clock (`NOW µs`). Returns the duration in ms, its text as the key's
-- `p` holds it, and the test clock (nil: none); nil for any other shape.
local function fast_words(counts, digits)
  local args = ARGV
  local n, test_us = #args, nil
  if n == counts + 3 and args[counts + 2] == 'NOW' then
    test_us = args[counts + 3]
    if not test_us:find('^[0-9]+$') or #test_us > 16 then
      return nil
    end
    test_us = tonumber(test_us)
    if test_us >= FAST_MAX_NOW then
      return nil
    end
    n = counts + 1
  end
  if n ~= counts + 1 or #KEYS ~= 1 then
    return nil
  end
  for i = 1, counts do
    local w = args[i]
    if #w > digits or not w:find('^[1-9][0-9]*$') then
      return nil
    end
  end
  local d, unit = args[counts + 1]:match('^([1-9][0-9]*)(%a*)$')
  if not d or #d > digits then
    return nil
  end
  -- The unit's scale, by comparisons (a table here would be built at every call).
  local scale = 1
  if unit ~= '' then
    unit = unit:lower()
    scale = unit == 's' and 1000 or unit == 'm' and 60000 or unit == 'ms' and 1
      or unit == 'h' and 3600000 or unit == 'd' and 86400000 or nil
  end
  local ms = scale and tonumber(d) * scale
  if not ms or ms > 315360000000 then -- ten 365-day years
    return nil
  end
  return ms, scale == 1 and d or string.format('%d', ms), test_us
end

-- The key's fields by HMGET (an error for a key of another type), and whether the key is missing.
local function fast_read(key, ...)
  local h = redis.pcall('HMGET', key, ...)
  return h, not h.err and not h[1] and redis.call('EXISTS', key) == 0
end

-- The clock in µs: the test's, or TIME's. The second value is TIME's reading for the general
-- path, when below FAST_MAX_NOW; nil for the test's clock or a reading the general path refuses
-- (then the fast path does not decide either).
local function fast_now(test_us)
  if test_us then
    return test_us, nil
  end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return now, now < FAST_MAX_NOW and now or nil
end

-- ceil(x / d), for x and d below 2^53.
local function fast_ceil(x, d)
  local m = math.fmod(x, d)
  return (x - m) / d + (m > 0 and 1 or 0)
end

-- An admitted call's state: the fields given (name, value, ...), with the layout tag `a` and
-- the parameters `p` when the key is fresh, and the key's TTL, its reply's reset_after_ms.
local function fast_write(key, fresh, tag, p, reset, ...)
  if fresh then
    redis.call('HSET', key, 'a', tag, 'p', p, ...)
  else
    redis.call('HSET', key, ...)
  end
  redis.call('PEXPIRE', key, reset)
end
