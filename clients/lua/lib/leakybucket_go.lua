-- RL.LEAKYBUCKET's fast path (lib/gcra_fast.lua, the reply with delay_ms): its reply, or on to
-- the general path with the clock.
local gcra_now
do
  local reply
  reply, gcra_now = gcra_fast('lb1', true)
  if reply then
    return reply
  end
end
