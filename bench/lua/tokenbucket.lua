-- Token bucket the usual way: a hash {tokens, ts} with PEXPIRE. KEYS[1]; ARGV: capacity refill_amount refill_period_ms cost.
local capacity, amount, period, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local t = redis.call('TIME')
local now = t[1] * 1000 + t[2] / 1000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens, ts = tonumber(state[1]) or capacity, tonumber(state[2]) or now
tokens = math.min(capacity, tokens + (now - ts) * amount / period)
local per_token = period / amount
if tokens >= cost then
  tokens = tokens - cost
  local ttl = math.ceil((capacity - tokens) * per_token)
  redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
  redis.call('PEXPIRE', KEYS[1], math.max(ttl, 1))
  return {1, capacity, math.floor(tokens), 0, ttl}
end
return {0, capacity, math.floor(tokens), math.ceil((cost - tokens) * per_token),
        math.ceil((capacity - tokens) * per_token)}
