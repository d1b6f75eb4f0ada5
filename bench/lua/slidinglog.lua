-- Sliding log the usual way: a sorted set of request times. KEYS[1]; ARGV: limit window_ms cost.
local limit, window, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local window_us = window * 1000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window_us)
local count = redis.call('ZCARD', KEYS[1])
if count + cost <= limit then
  for i = 1, cost do
    redis.call('ZADD', KEYS[1], now, now .. ':' .. (count + i))
  end
  redis.call('PEXPIRE', KEYS[1], window)
  return {1, limit, limit - count - cost, 0, window}
end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local retry = math.ceil((tonumber(oldest[2]) + window_us - now) / 1000)
return {0, limit, limit - count, retry, window}
