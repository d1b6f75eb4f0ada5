-- algorithms/src/leaky_bucket.rs: GCRA's admission and state (lib/gcra.lua: the queue is empty
-- at the TAT), with capacity as the burst and leak_amount per leak_period as the rate; and each
-- admitted request's delay, the time the units queued before it take to leave.
local LB = { tag = 'lb1', command = 'RL.LEAKYBUCKET', fields = GCRA.fields, load = GCRA.load,
  save = GCRA.save, largest = GCRA.largest, refund = GCRA.refund, delay = true }

function LB.check(p, stored, now, cost, write)
  -- The queue's wait converted to the request's parameters (0 when empty), before it joins.
  local wait = 0
  if stored then
    wait = gcra_converted(gcra_owed(stored, now), stored.params, p)
  end
  local d, state = GCRA.check(p, stored, now, cost, write)
  d.delay = d.allowed and { wait, p.rate } or nil
  return d, state
end
