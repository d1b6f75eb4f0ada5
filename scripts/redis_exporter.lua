-- The ratelimit module's counters for redis_exporter, which exports what a script returns:
--
--   redis_exporter --script /path/to/redis_exporter.lua
--
-- gives one gauge per command and counter, e.g.
--   redis_script_values{key="rl.gcra_denied"} 42
-- (redis_exporter reads INFO ALL, which leaves module sections out, so it never sees
-- INFO ratelimit by itself). The script reads INFO ratelimit_commandstats, lines such as
--   ratelimit_rl.gcra:calls=10,admitted=7,denied=2,errors=1
-- and returns them as name/value pairs of strings, which is what the --script option expects.
local out = {}
local info = redis.call('INFO', 'ratelimit_commandstats')
for command, counters in string.gmatch(info, 'ratelimit_([%w%.%-_]+):([^\r\n]+)') do
  for name, value in string.gmatch(counters, '(%a+)=(%d+)') do
    out[#out + 1] = command .. '_' .. name
    out[#out + 1] = value
  end
end
return out
