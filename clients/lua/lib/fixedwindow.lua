-- algorithms/src/fixed_window.rs: windows aligned to the Unix epoch, in µs. The hash keeps the
-- window's start `s` and its count `c`; every value stays below 2^53 (plain doubles).
local FW = { tag = 'fw1', command = 'RL.FIXEDWINDOW', fields = { 'a', 'k', 'p', 's', 'c' } }

local function fw_params(limit, window_ms)
  return { limit = limit, window_ms = window_ms, window = window_ms * 1000,
    text = format('%d %d', limit, window_ms) }
end

function FW.load(h)
  local limit, window_ms = (h.p or ''):match('^(%d+) (%d+)$')
  if not (limit and h.s and h.c) then
    fail(WRONGTYPE)
  end
  return { params = fw_params(tonumber(limit), tonumber(window_ms)), start = tonumber(h.s),
    count = tonumber(h.c) }
end

function FW.save(params, state)
  return { 'p', params.text, 's', format('%d', state.start), 'c', format('%d', state.count) }
end

function FW.check(p, stored, now, cost, write)
  local start = now - fmod(now, p.window)
  -- The stored count counts until its own window ends (under the length it was written with).
  local count, counted_until = 0, now
  if stored then
    local ends = stored.start + stored.params.window
    if now < ends then
      count, counted_until = stored.count, ends
    end
  end
  local allowed = count + cost <= p.limit
  local used, reset_at = 0, now
  if allowed and cost > 0 then
    used, reset_at = count + cost, start + p.window
  elseif count > 0 then
    used, reset_at = count, counted_until
  end
  local retry = ZERO
  if not allowed then
    retry = cost <= p.limit and { counted_until - now, 1 } or nil
  end
  return { allowed = allowed, limit = p.limit, remaining = used < p.limit and p.limit - used or 0,
    retry = retry, reset = { reset_at - now, 1 } }, { start = start, count = used }
end

local function fw_counting(stored, now)
  return now < stored.start + stored.params.window and stored.count or 0
end

-- largest_cost: limit - count, the count being the stored one while its window lasts.
function FW.largest(p, stored, now)
  local count = stored and fw_counting(stored, now) or 0
  return count < p.limit and p.limit - count or 0
end

-- refund: the window's count falls by `given`, not below 0.
function FW.refund(stored, now, units)
  local given = min(fw_counting(stored, now), units)
  if given == 0 then
    return 0
  end
  return given, { start = stored.start, count = stored.count - given }
end
