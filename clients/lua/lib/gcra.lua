-- algorithms/src/gcra.rs, with the TAT kept relative to now. The module keeps the TAT in units
-- of 1/rate µs, TAT = tat_us × rate + frac (0 <= frac < rate), and so does the hash: `t` =
-- tat_us, `f` = frac. Every step works on owed = max(TAT - now × rate, 0) in those units, which
-- is below 2^53 for ordinary limits (burst × period below 285 years) and a wide integer beyond.
local GCRA = { tag = 'gcra1', command = 'RL.GCRA', fields = { 'a', 'k', 'p', 't', 'f' } }

local function gcra_params(burst, rate, period_ms)
  local period_us = period_ms * 1000 -- the emission interval T, in units of 1/rate µs
  return { burst = burst, rate = rate, period_ms = period_ms, interval = period_us,
    tolerance = mul(burst, period_us), text = format('%d %d %d', burst, rate, period_ms) }
end

function GCRA.load(h)
  local burst, rate, period_ms = (h.p or ''):match('^(%d+) (%d+) (%d+)$')
  if not (burst and h.t and h.f) then
    fail(WRONGTYPE)
  end
  return { params = gcra_params(tonumber(burst), tonumber(rate), tonumber(period_ms)),
    tat = value(h.t), frac = tonumber(h.f) }
end

function GCRA.save(params, state)
  return { 'p', params.text, 't', text(state.tat), 'f', format('%d', state.frac) }
end

-- What the stored schedule owes at `now`, in units of 1/rate µs of its own rate: 0 when paid off.
local function gcra_owed(stored, now)
  if cmp(stored.tat, now) < 0 then
    return 0
  end
  return add(mul(sub(stored.tat, now), stored.params.rate), stored.frac)
end

-- The schedule `owed` units ahead of now, as the hash keeps it.
local function gcra_state(now, owed, rate)
  local whole, frac = divmod(owed, rate)
  return { tat = add(now, whole), frac = frac }
end

-- State::converted, relative to now: the owed intervals carried over, each a new interval long,
-- rounded up.
local function gcra_converted(owed, from, to)
  if (from.rate == to.rate and from.period_ms == to.period_ms) or owed == 0 then
    return owed
  end
  local whole, part = divmod(owed, from.interval)
  return add(mul(whole, to.interval), ceildiv(mul(part, to.interval), from.interval))
end

-- decide(): a request of `cost` on a schedule `owed` ahead of now.
local function gcra_decide(p, owed, cost)
  local new = add(owed, mul(cost, p.interval))
  local allowed = cmp(new, p.tolerance) <= 0
  local ttl, retry = new, ZERO
  if not allowed then
    ttl = owed
    retry = cost <= p.burst and { sub(new, p.tolerance), p.rate } or nil
  end
  local used = ceildiv(ttl, p.interval)
  local remaining = 0
  if type(used) == 'number' and used < p.burst then
    remaining = p.burst - used
  end
  return { allowed = allowed, limit = p.burst, remaining = remaining, retry = retry,
    reset = { ttl, p.rate } }, new
end

function GCRA.check(p, stored, now, cost, write)
  if not stored then
    local d, new = gcra_decide(p, 0, cost)
    return d, gcra_state(now, new, p.rate)
  end
  local own = stored.params
  local owed = gcra_owed(stored, now)
  local d, new = gcra_decide(p, gcra_converted(owed, own, p), cost)
  if (own.rate ~= p.rate or own.period_ms ~= p.period_ms) and not (d.allowed and cost > 0) then
    -- changed(): a call that writes nothing reads its times on the key's own schedule
    -- (Schedule::until_owing).
    if not d.allowed then
      d.retry = cost <= p.burst and { sub(owed, mul(p.burst - cost, own.interval)), own.rate } or nil
    end
    d.reset = { owed, own.rate }
  end
  return d, gcra_state(now, new, p.rate)
end

-- largest_cost: the whole intervals of tolerance left.
function GCRA.largest(p, stored, now)
  local owed = 0
  if stored then
    owed = gcra_converted(gcra_owed(stored, now), stored.params, p)
  end
  return (divmod(sub(p.tolerance, owed), p.interval))
end

-- refund: the TAT moves back by exactly `given` intervals, not before now.
function GCRA.refund(stored, now, units)
  local p = stored.params
  local owed = gcra_owed(stored, now)
  local given = min(ceildiv(owed, p.interval), units)
  if given == 0 then
    return 0
  end
  return given, gcra_state(now, sub(owed, mul(given, p.interval)), p.rate)
end
