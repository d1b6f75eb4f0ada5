-- Leaky bucket as a queue the usual way: a hash {level, ts} with PEXPIRE. KEYS[1]; ARGV: capacity leak_amount leak_period_ms cost.
-- Replies {allowed, limit, remaining, retry_after_ms, reset_after_ms, delay_ms}.
local capacity, amount, period, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local t = redis.call('TIME')
local now = t[1] * 1000 + t[2] / 1000
local state = redis.call('HMGET', KEYS[1], 'level', 'ts')
local level, ts = tonumber(state[1]) or 0, tonumber(state[2]) or now
level = math.max(0, level - (now - ts) * amount / period)
local per_unit = period / amount
if level + cost <= capacity then
  local delay = math.ceil(level * per_unit)
  level = level + cost
  local ttl = math.ceil(level * per_unit)
  redis.call('HSET', KEYS[1], 'level', tostring(level), 'ts', tostring(now))
  redis.call('PEXPIRE', KEYS[1], math.max(ttl, 1))
  return {1, capacity, math.floor(capacity - level), 0, ttl, delay}
end
return {0, capacity, math.floor(capacity - level), math.ceil((level + cost - capacity) * per_unit),
        math.ceil(level * per_unit), -1}
