-- GCRA the usual way: the TAT in a string key with PEXPIRE. KEYS[1]; ARGV: burst rate period_ms cost.
-- Replies like RL.GCRA: {allowed, limit, remaining, retry_after_ms, reset_after_ms}.
local burst, rate, period, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local t = redis.call('TIME')
local now = t[1] * 1000 + t[2] / 1000
local interval = period / rate
local tolerance = burst * interval
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local new_tat = tat + cost * interval
if new_tat - now <= tolerance then
  local ttl = math.ceil(new_tat - now)
  redis.call('SET', KEYS[1], tostring(new_tat), 'PX', ttl)
  return {1, burst, math.floor((tolerance - (new_tat - now)) / interval), 0, ttl}
end
return {0, burst, math.floor((tolerance - (tat - now)) / interval),
        math.ceil(new_tat - tolerance - now), math.ceil(tat - now)}
