-- A three-tier policy the usual way: GCRA (burst rate period_ms) on a TAT string key, then two
-- fixed windows (limit window_ms each) on per-window counter keys; admitted only if all three
-- admit, and only then counted. KEYS[1] names the subject (the window keys are derived from
-- it, so this script is not cluster-safe as written); ARGV: burst rate period_ms limit1
-- window1_ms limit2 window2_ms cost. Replies like RL.LIMIT: the binding tier's five fields and
-- its index (the fewest remaining when admitted, the longest wait when denied).
local a = {}
for i = 1, #ARGV do a[i] = tonumber(ARGV[i]) end
local burst, rate, period, cost = a[1], a[2], a[3], a[8]
local t = redis.call('TIME')
local now = t[1] * 1000 + t[2] / 1000
local interval = period / rate
local tolerance = burst * interval
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local new_tat = tat + cost * interval
local tiers = {}
if new_tat - now <= tolerance then
  tiers[1] = {1, burst, math.floor((tolerance - (new_tat - now)) / interval), 0, math.ceil(new_tat - now)}
else
  tiers[1] = {0, burst, math.floor((tolerance - (tat - now)) / interval),
              math.ceil(new_tat - tolerance - now), math.ceil(tat - now)}
end
local windows = {}
for w = 1, 2 do
  local limit, window = a[2 + 2 * w], a[3 + 2 * w]
  local index = math.floor(math.floor(now) / window)
  local key = KEYS[1] .. ':' .. w .. ':' .. index
  local reset = (index + 1) * window - math.floor(now)
  local count = tonumber(redis.call('GET', key)) or 0
  windows[w] = {key, reset}
  if count + cost <= limit then
    tiers[w + 1] = {1, limit, limit - count - cost, 0, reset}
  else
    tiers[w + 1] = {0, limit, limit - count, reset, reset}
  end
end
local binding, all = 1, true
for i = 1, 3 do
  local r, b = tiers[i], tiers[binding]
  if r[1] == 0 then all = false end
  if (r[1] == 0 and b[1] == 1) or (r[1] == b[1] and r[1] == 1 and r[3] < b[3])
     or (r[1] == 0 and b[1] == 0 and r[4] > b[4]) then
    binding = i
  end
end
if all then
  redis.call('SET', KEYS[1], tostring(new_tat), 'PX', math.ceil(new_tat - now))
  for w = 1, 2 do
    local count = redis.call('INCRBY', windows[w][1], cost)
    if count == cost then redis.call('PEXPIRE', windows[w][1], windows[w][2]) end
  end
end
local r = tiers[binding]
return {r[1], r[2], r[3], r[4], r[5], binding - 1}
