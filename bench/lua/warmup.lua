-- Guava's SmoothWarmingUp the usual way: stored permits and next_free (ms) in a hash with
-- PEXPIRE, in floating point (RL.WARMUP is exact integer arithmetic; this twin may differ from it
-- by rounding). KEYS[1]; ARGV: rate period_ms warmup_ms coldfactor cost.
-- Replies like RL.WARMUP: {allowed, 1, remaining, retry_after_ms, reset_after_ms}.
local rate, period, warmup = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local factor, cost = tonumber(ARGV[4]), tonumber(ARGV[5])
local t = redis.call('TIME')
local now = t[1] * 1000 + t[2] / 1000
local stable = period / rate
local cold = stable * factor
local threshold = 0.5 * warmup / stable
local max = threshold + 2 * warmup / (stable + cold)
local slope = (cold - stable) / (max - threshold)
local state = redis.call('HMGET', KEYS[1], 's', 'n')
local stored = tonumber(state[1]) or max
local next_free = tonumber(state[2]) or now
if now > next_free then
  stored = math.min(max, stored + (now - next_free) * max / warmup)
  next_free = now
end
local function reset_after()
  return math.ceil(math.max(next_free - now, 0) + (max - stored) * warmup / max)
end
if next_free > now then
  return {0, 1, 0, math.ceil(next_free - now), reset_after()}
end
-- Guava's reserveEarliestAvailable and storedPermitsToWaitTime.
local spend = math.min(cost, stored)
local take = spend
local wait = 0
local above = stored - threshold
if above > 0 then
  local part = math.min(above, take)
  wait = part * (2 * stable + slope * (2 * above - part)) / 2
  take = take - part
end
wait = wait + stable * (take + cost - spend)
next_free = next_free + wait
stored = stored - spend
local ttl = reset_after()
if ttl > 0 then
  redis.call('HSET', KEYS[1], 's', string.format('%.17g', stored), 'n', string.format('%.17g', next_free))
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return {1, 1, next_free <= now and 1 or 0, 0, ttl}
