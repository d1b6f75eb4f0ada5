-- RL.REFUND on a GCRA key the usual way: the TAT in a string key, as gcra.lua keeps it.
-- KEYS[1]; ARGV: rate period_ms units. Replies like RL.REFUND: the units given back.
local rate, period, units = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = t[1] * 1000 + t[2] / 1000
local tat = tonumber(redis.call('GET', KEYS[1]))
if not tat or tat <= now then return 0 end
local interval = period / rate
local given = math.min(units, math.ceil((tat - now) / interval))
if given <= 0 then return 0 end
local new_tat = math.max(tat - given * interval, now)
if new_tat <= now then
  redis.call('DEL', KEYS[1])
  return given
end
redis.call('SET', KEYS[1], tostring(new_tat), 'PX', math.ceil(new_tat - now))
return given
