-- algorithms/src/warmup.rs: Guava's SmoothWarmingUp in the module's exact integers. Time is in
-- ticks of 1/rate µs, and stored permits are scaled by D = 2·P·(1+k) (P the period in µs, k
-- the cold factor): threshold·D = W·R·(1+k), max·D = W·R·(5+k) (W the warm-up in µs, R the
-- rate), and cool-down adds 5+k scaled permits a tick. The hash keeps the scaled stored permits
-- `x` and next_free as GCRA keeps its TAT (lib/gcra.lua): whole µs `t` and a rest `f` below
-- the rate. Every step works on the time owed from now (or the idle time since next_free), so
-- now × R is never formed; the permits and the area term are wide integers when large.
local WU = { tag = 'wu1', command = 'RL.WARMUP', fields = { 'a', 'k', 'p', 'x', 't', 'f' } }

local function wu_params(rate, period_ms, warmup_ms, k)
  local period_us = period_ms * 1000
  local wr = mul(warmup_ms * 1000, rate)
  local threshold = mul(wr, 1 + k)
  return { rate = rate, period_ms = period_ms, warmup_ms = warmup_ms, k = k,
    interval = period_us, scale = 2 * period_us * (1 + k), threshold = threshold,
    max = mul(wr, 5 + k), cooldown = 5 + k, area_den = mul(threshold, 16),
    text = format('%d %d %d %d', rate, period_ms, warmup_ms, k) }
end

function WU.load(h)
  local rate, period_ms, warmup_ms, k = (h.p or ''):match('^(%d+) (%d+) (%d+) (%d+)$')
  if not (rate and h.x and h.t and h.f) then
    fail(WRONGTYPE)
  end
  return { params = wu_params(tonumber(rate), tonumber(period_ms), tonumber(warmup_ms), tonumber(k)),
    stored = value(h.x), tat = value(h.t), frac = tonumber(h.f) }
end

function WU.save(params, state)
  return { 'p', params.text, 'x', text(state.stored), 't', text(state.tat),
    'f', format('%d', state.frac) }
end

-- State::resynced under the key's own parameters: the stored permits (idle time since
-- next_free gives permits back, up to max) and the ticks owed from now.
local function wu_resynced(st, now)
  local own = st.params
  local stored = min(st.stored, own.max)
  if cmp(st.tat, now) >= 0 then
    return stored, add(mul(sub(st.tat, now), own.rate), st.frac)
  end
  local idle = sub(mul(now - st.tat, own.rate), st.frac)
  return min(add(stored, mul(idle, own.cooldown)), own.max), 0
end

-- State::at: the stored permits and the ticks owed as a request under p sees them: converted
-- when the key was written under other parameters (the permits keep their fraction of max,
-- rounded up; the time owed converts as GCRA's, lib/gcra.lua).
local function wu_at(p, st, now)
  if not st then
    return p.max, 0
  end
  local own = st.params
  local stored, owed = wu_resynced(st, now)
  if own.text == p.text then
    return stored, owed
  end
  owed = gcra_converted(owed, own, p)
  if cmp(own.max, p.max) ~= 0 then
    stored = min(mul_div_ceil(stored, p.max, own.max), p.max)
  end
  return stored, owed
end

-- spend: the stored permits a request of `cost` takes, and its time in ticks: cost × P plus
-- the area above the stable line, rounded up.
local function wu_spend(p, stored, cost)
  local taken = min(mul(cost, p.scale), stored)
  local extra = 0
  if cmp(stored, p.threshold) > 0 then
    local v = sub(stored, p.threshold)
    local u = sub(max(sub(stored, taken), p.threshold), p.threshold)
    extra = mul_div_ceil(mul(p.k - 1, sub(v, u)), add(v, u), p.area_den)
  end
  return taken, add(mul(cost, p.interval), extra)
end

function WU.check(p, st, now, cost, write)
  local stored, owed = wu_at(p, st, now)
  local allowed = owed == 0
  local retry = ZERO
  if allowed then
    local taken, wait = wu_spend(p, stored, cost)
    stored, owed = sub(stored, taken), wait
  else
    retry = { owed, p.rate }
  end
  local to_cold = ceildiv(sub(p.max, stored), p.cooldown)
  local d = { allowed = allowed, limit = 1, remaining = owed == 0 and 1 or 0, retry = retry,
    reset = { add(owed, to_cold), p.rate } }
  if st and st.params.text ~= p.text and not (allowed and cost > 0) then
    -- changed(): a call that writes nothing reads its times on the key's own schedule
    -- (State::own_times): admitted once the own schedule is paid, and fresh once, besides,
    -- its stored permits convert to the new maximum.
    local own = st.params
    local own_stored, own_owed = wu_resynced(st, now)
    local cold_enough = add(sub(own.max, mul_div_ceil(own.max, 1, p.max)), 1)
    d.reset = { add(own_owed, ceildiv(sub(cold_enough, own_stored), own.cooldown)), own.rate }
    if not allowed then
      d.retry = { own_owed, own.rate }
    end
  end
  local state = gcra_state(now, owed, p.rate)
  state.stored = stored
  return d, state
end

-- largest_cost: any cost (10^12) while the schedule is paid, none while it is not.
function WU.largest(p, st, now)
  local _, owed = wu_at(p, st, now)
  return owed == 0 and MAX_COUNT or 0
end

-- refund: the schedule moves back one stable interval per unit, not before now; the stored
-- permits stay as they are.
function WU.refund(st, now, units)
  local p = st.params
  if cmp(st.tat, now) < 0 then
    return 0
  end
  local owed = add(mul(sub(st.tat, now), p.rate), st.frac)
  if owed == 0 then
    return 0
  end
  local given = min(ceildiv(owed, p.interval), units)
  local state = gcra_state(now, sub(owed, mul(given, p.interval)), p.rate)
  state.stored = st.stored
  return given, state
end
