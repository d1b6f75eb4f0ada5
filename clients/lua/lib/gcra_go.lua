-- RL.GCRA's fast path (lib/gcra_fast.lua): its reply, or on to the general path with the clock.
local gcra_now
do
  local reply
  reply, gcra_now = gcra_fast('gcra1', false)
  if reply then
    return reply
  end
end
