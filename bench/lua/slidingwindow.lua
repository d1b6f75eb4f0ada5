-- Sliding window counter the usual way: two per-window counters. KEYS[1]; ARGV: limit window_ms cost.
local limit, window, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local index = math.floor(now / window)
local elapsed = now - index * window
local current_key = KEYS[1] .. ':' .. index
local counts = redis.call('MGET', KEYS[1] .. ':' .. (index - 1), current_key)
local previous, current = tonumber(counts[1]) or 0, tonumber(counts[2]) or 0
local estimate = math.floor(previous * (window - elapsed) / window) + current
if estimate + cost <= limit then
  redis.call('INCRBY', current_key, cost)
  redis.call('PEXPIRE', current_key, 2 * window - elapsed)
  return {1, limit, limit - estimate - cost, 0, 2 * window - elapsed}
end
return {0, limit, math.max(0, limit - estimate), window - elapsed, 2 * window - elapsed}
