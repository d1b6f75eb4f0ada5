-- The ratelimit module's counters for redis_exporter, which exports what a script returns:
--
--   prometheus-redis-exporter --script /path/to/redis_exporter.lua
--
-- gives one gauge per counter, each a redis_script_values series named by its `key` label
-- (redis_exporter reads INFO ALL, which leaves module sections out, so it never sees
-- INFO ratelimit by itself):
--
--   per command, from INFO ratelimit_commandstats
--     (ratelimit_rl.gcra:calls=10,admitted=6,denied=2,shadow_denied=1,errors=1)
--       redis_script_values{key="rl.gcra_denied"} 2
--   per policy, from INFO ratelimit_policystats
--     (ratelimit_api:calls=7,admitted=4,denied=2,shadow_denied=1)
--       redis_script_values{key="policy:api:denied"} 2
--   per rule, from INFO ratelimit_rulestats (ratelimit_api.1:shadow=1,denied=1)
--       redis_script_values{key="rule:api.1:denied"} 1
--       redis_script_values{key="rule:api.1:shadow"} 1
--
-- A policy name is as INFO writes it (bytes other than letters, digits, _ - . as %XX), so
-- it never holds a colon; prometheus/ratelimit.rules.yml turns the keys into labels.
-- The script returns name/value pairs of strings, which is what the --script option expects.
local out = {}
local function add(name, value)
  out[#out + 1] = name
  out[#out + 1] = value
end
local function lines(section, each)
  local info = redis.call('INFO', section)
  for name, counters in string.gmatch(info, 'ratelimit_([^:\r\n]+):([^\r\n]+)') do
    for field, value in string.gmatch(counters, '([%a_]+)=(%d+)') do
      each(name, field, value)
    end
  end
end
lines('ratelimit_commandstats', function(command, field, value)
  add(command .. '_' .. field, value)
end)
lines('ratelimit_policystats', function(policy, field, value)
  add('policy:' .. policy .. ':' .. field, value)
end)
lines('ratelimit_rulestats', function(rule, field, value)
  add('rule:' .. rule .. ':' .. field, value)
end)
return out
