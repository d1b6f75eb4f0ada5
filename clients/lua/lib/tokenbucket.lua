-- algorithms/src/token_bucket.rs. The module counts tokens in units of 1/period_us of a token
-- (a continuous refill is then exact), and so does the hash: `n` = tokens × period_us, `u` =
-- the instant they were counted at (with INTERVAL: the last refill boundary, the phase anchor).
local TB = { tag = 'tb1', command = 'RL.TOKENBUCKET', fields = { 'a', 'k', 'p', 'n', 'u' } }

local function tb_params(capacity, amount, period_ms, interval)
  local period_us = period_ms * 1000
  return { capacity = capacity, amount = amount, period_ms = period_ms, period = period_us,
    interval = interval, full = mul(capacity, period_us),
    text = format('%d %d %d %d', capacity, amount, period_ms, interval and 1 or 0) }
end

function TB.load(h)
  local capacity, amount, period_ms, interval = (h.p or ''):match('^(%d+) (%d+) (%d+) ([01])$')
  if not (capacity and h.n and h.u) then
    fail(WRONGTYPE)
  end
  return { params = tb_params(tonumber(capacity), tonumber(amount), tonumber(period_ms),
    interval == '1'), tokens = value(h.n), updated = tonumber(h.u) }
end

function TB.save(params, state)
  return { 'p', params.text, 'n', text(state.tokens), 'u', format('%d', state.updated) }
end

-- State::refilled: the bucket refilled up to now under p (a reading before `updated` refills
-- nothing and does not move it back).
local function tb_refilled(p, b, now)
  local tokens = min(b.tokens, p.full)
  local elapsed = now > b.updated and now - b.updated or 0
  if p.interval then
    local _, part = divmod(tokens, p.period)
    local periods = divmod(elapsed, p.period)
    local refilled = add(sub(tokens, part), mul(mul(periods, p.amount), p.period))
    return { tokens = min(refilled, p.full), updated = b.updated + periods * p.period }
  end
  return { tokens = min(add(tokens, mul(p.amount, elapsed)), p.full),
    updated = b.updated > now and b.updated or now }
end

-- State::converted: a bucket refilled under `old`, under `new`: rescaled down, re-anchored
-- where the mode or the beat changes, clamped; a full one is a fresh key.
local function tb_converted(old, new, b, now)
  if old.text == new.text then
    return b
  end
  local now_or_later = b.updated > now and b.updated or now
  if cmp(b.tokens, old.full) >= 0 then
    return { tokens = new.full, updated = now_or_later }
  end
  local tokens = b.tokens
  if old.period ~= new.period then
    local whole, part = divmod(tokens, old.period)
    tokens = add(mul(whole, new.period), (divmod(mul(part, new.period), old.period)))
  end
  local updated = b.updated
  if not old.interval and new.interval then
    local _, part = divmod(tokens, new.period)
    tokens = sub(tokens, part)
    updated = now_or_later
  elseif old.interval and (not new.interval or old.period ~= new.period) then
    updated = now_or_later
  end
  return { tokens = min(tokens, new.full), updated = updated }
end

-- State::time_until: how long until the bucket (refilled up to now) holds `target` units.
local function tb_until(p, b, target, now)
  if cmp(b.tokens, target) >= 0 then
    return ZERO
  end
  local deficit = sub(target, b.tokens)
  if p.interval then
    local refills = ceildiv(ceildiv(deficit, p.period), p.amount)
    return { sub(add(b.updated, mul(refills, p.period)), now), 1 }
  end
  local ahead = b.updated > now and b.updated - now or 0 -- after a clock step back
  return { add(mul(ahead, p.amount), deficit), p.amount }
end

-- decide(): a request of `cost` on the bucket as of now.
local function tb_decide(p, b, now, cost)
  local need = mul(cost, p.period)
  local allowed = cmp(b.tokens, need) >= 0
  local after, retry = b, ZERO
  if allowed then
    after = { tokens = sub(b.tokens, need), updated = b.updated }
  else
    retry = cost <= p.capacity and tb_until(p, b, need, now) or nil
  end
  return { allowed = allowed, limit = p.capacity, remaining = (divmod(after.tokens, p.period)),
    retry = retry, reset = tb_until(p, after, p.full, now) }, after
end

function TB.check(p, stored, now, cost, write)
  if not stored then
    return tb_decide(p, { tokens = p.full, updated = now }, now, cost)
  end
  local own = stored.params
  if own.text == p.text then
    return tb_decide(p, tb_refilled(p, stored, now), now, cost)
  end
  -- changed(): a call that writes nothing reads its times on the key's own bucket (own_wait).
  local b = tb_refilled(own, stored, now)
  local d, after = tb_decide(p, tb_converted(own, p, b, now), now, cost)
  if not (d.allowed and cost > 0) then
    if not d.allowed then
      d.retry = cost <= p.capacity
        and tb_until(own, b, mul(cost < own.capacity and cost or own.capacity, own.period), now) or nil
    end
    local tokens = p.capacity < own.capacity and p.capacity or own.capacity
    d.reset = tb_until(own, b, mul(tokens, own.period), now)
  end
  return d, after
end

-- largest_cost: the whole tokens in the bucket now, refilled and converted.
function TB.largest(p, stored, now)
  local b = { tokens = p.full }
  if stored then
    b = tb_converted(stored.params, p, tb_refilled(stored.params, stored, now), now)
  end
  return (divmod(b.tokens, p.period))
end

-- refund: exactly `given` tokens back, not above the capacity; INTERVAL keeps its phase.
function TB.refund(stored, now, units)
  local p = stored.params
  local b = tb_refilled(p, stored, now)
  local given = min(ceildiv(sub(p.full, b.tokens), p.period), units)
  if given == 0 then
    return 0
  end
  return given, { tokens = min(add(b.tokens, mul(given, p.period)), p.full), updated = b.updated }
end
