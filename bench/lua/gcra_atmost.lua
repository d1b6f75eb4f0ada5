-- GCRA with a partial grant the usual way (RL.GCRA ... ATMOST max): the TAT in a string key.
-- KEYS[1]; ARGV: burst rate period_ms max. Replies like RL.GCRA with ATMOST: the five
-- fields, then granted.
local burst, rate, period, max = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local t = redis.call('TIME')
local now = t[1] * 1000 + t[2] / 1000
local interval = period / rate
local tolerance = burst * interval
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local grant = math.min(max, math.floor((tolerance - (tat - now)) / interval))
if grant >= 1 then
  local new_tat = tat + grant * interval
  local ttl = math.ceil(new_tat - now)
  redis.call('SET', KEYS[1], tostring(new_tat), 'PX', ttl)
  return {1, burst, math.floor((tolerance - (new_tat - now)) / interval), 0, ttl, grant}
end
return {0, burst, 0, math.ceil(tat + interval - tolerance - now), math.ceil(tat - now), 0}
