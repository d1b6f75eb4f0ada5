-- Fixed window the usual way: INCRBY on a per-window key, PEXPIRE on the first hit. KEYS[1]; ARGV: limit window_ms cost.
local limit, window, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local index = math.floor(now / window)
local key = KEYS[1] .. ':' .. index
local reset = (index + 1) * window - now
local count = tonumber(redis.call('GET', key)) or 0
if count + cost <= limit then
  count = redis.call('INCRBY', key, cost)
  if count == cost then redis.call('PEXPIRE', key, reset) end
  return {1, limit, limit - count, 0, reset}
end
return {0, limit, limit - count, reset, reset}
