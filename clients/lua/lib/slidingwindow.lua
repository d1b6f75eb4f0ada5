-- algorithms/src/sliding_window.rs: the counts of the current aligned window and of the one
-- before, the previous one weighted by what is left of now's window. The hash keeps the
-- current window's start `s`, its count `c` and the previous count `v`. Times are plain
-- doubles (below 2^53: the clock is below 2^53 - 2^50, two windows at most 2^49.2); the
-- weighted products (previous × µs left) may be wide.
local SW = { tag = 'sw1', command = 'RL.SLIDINGWINDOW', fields = { 'a', 'k', 'p', 's', 'c', 'v' } }

local function sw_params(limit, window_ms)
  return { limit = limit, window_ms = window_ms, window = window_ms * 1000,
    text = format('%d %d', limit, window_ms) }
end

function SW.load(h)
  local limit, window_ms = (h.p or ''):match('^(%d+) (%d+)$')
  if not (limit and h.s and h.c and h.v) then
    fail(WRONGTYPE)
  end
  return { params = sw_params(tonumber(limit), tonumber(window_ms)), start = tonumber(h.s),
    current = tonumber(h.c), previous = tonumber(h.v) }
end

function SW.save(params, state)
  return { 'p', params.text, 's', format('%d', state.start), 'c', format('%d', state.current),
    'v', format('%d', state.previous) }
end

local function sw_start(t, window)
  return t - fmod(t, window)
end

-- Counts::from: the counts from `now` on, rolled on the key's own schedule, as three segments
-- [from, to): as they are until the window ends, then (0, current) for one window, then (0, 0)
-- for good. An empty segment (from >= to) is a stage already past.
local function sw_segments(held, now)
  local first_end = held.start + held.window
  local second_end = first_end + held.window
  return {
    { from = now, to = first_end, current = held.current, previous = held.previous },
    { from = first_end > now and first_end or now, to = second_end, current = 0,
      previous = held.current },
    { from = second_end > now and second_end or now, to = math.huge, current = 0, previous = 0 },
  }
end

-- The counts as of now: the first segment that is not empty.
local function sw_here(segments)
  for i = 1, 3 do
    if segments[i].from < segments[i].to then
      return segments[i]
    end
  end
  return segments[3]
end

-- Segment::estimate: floor(previous × left / window) + current at t.
local function sw_estimate(seg, window, t)
  local left = window - fmod(t, window)
  return (divmod(mul(seg.previous, left), window)) + seg.current
end

-- Segment::least_elapsed: the least time into a window from which floor(previous × (window -
-- e) / window) <= allowance; `window` when none will do.
local function sw_least_elapsed(seg, window, allowance)
  if seg.previous == 0 then
    return 0
  end
  local bound = sub(mul(allowance + 1, window), 1)
  return sub(window, (divmod(bound, seg.previous)))
end

-- Segment::first_fit: the least time in the segment at which estimate + cost <= limit.
local function sw_first_fit(seg, window, cost, limit)
  local allowance = limit - seg.current - cost
  if allowance < 0 then
    return nil
  end
  local e = sw_least_elapsed(seg, window, allowance)
  if e >= window then
    return nil
  end
  local first = sw_start(seg.from, window)
  local t = first + e > seg.from and first + e or seg.from
  if t < first + window and t < seg.to then
    return t
  end
  t = first + window + e
  if t < seg.to then
    return t
  end
  return nil
end

-- Segment::zero_from: the least time from which the estimate is 0 until the segment ends.
local function sw_zero_from(seg, window)
  if seg.current > 0 then
    return seg.to
  end
  if seg.previous == 0 then
    return seg.from
  end
  local t = sw_start(seg.to - 1, window) + sw_least_elapsed(seg, window, 0)
  t = t > seg.from and t or seg.from
  return t < seg.to and t or seg.to
end

-- settled: the least time from which the estimate stays 0.
local function sw_settled(segments, window, now)
  local settle = now
  for i = 3, 1, -1 do
    local seg = segments[i]
    if seg.from < seg.to then
      settle = sw_zero_from(seg, window)
      if settle > seg.from then
        break
      end
    end
  end
  return settle
end

-- check_counts: the key stored under the same window (or none), `limit` applied to the counts
-- as they are.
local function sw_counts(p, stored, now, cost)
  local window = p.window
  local start = sw_start(now, window)
  local held = { start = start, window = window, current = 0, previous = 0 }
  if stored then
    held = { start = stored.start, window = stored.params.window, current = stored.current,
      previous = stored.previous }
  end
  local segments = sw_segments(held, now)
  local here = sw_here(segments)
  local estimate = sw_estimate(here, window, now)
  local allowed = estimate + cost <= p.limit
  local after, reset_at
  if allowed and cost > 0 then
    local made = { start = start, window = window, current = here.current + cost,
      previous = here.previous }
    after, reset_at = estimate + cost, sw_settled(sw_segments(made, now), window, now)
  else
    after, reset_at = estimate, sw_settled(segments, window, now)
  end
  local retry = ZERO
  if not allowed then
    retry = nil
    if cost <= p.limit then
      for i = 1, 3 do
        local seg = segments[i]
        local t = seg.from < seg.to and sw_first_fit(seg, window, cost, p.limit)
        if t then
          retry = { t - now, 1 }
          break
        end
      end
    end
  end
  return { allowed = allowed, limit = p.limit, remaining = after < p.limit and p.limit - after or 0,
    retry = retry, reset = { reset_at - now, 1 } },
    { start = start, current = here.current + cost, previous = here.previous }
end

function SW.check(p, stored, now, cost, write)
  if not stored or stored.params.window == p.window then
    return sw_counts(p, stored, now, cost)
  end
  -- check_new_window: the key's own estimate on its own schedule, against the new limit; an
  -- admitted request writes it, its cost included, as the count of now's window under the new
  -- length.
  local d = sw_counts(sw_params(p.limit, stored.params.window_ms), stored, now, cost)
  if not (d.allowed and cost > 0) then
    return d
  end
  local start = sw_start(now, p.window)
  local counted = p.limit - d.remaining
  local made = { start = start, window = p.window, current = counted, previous = 0 }
  d.reset = { sw_settled(sw_segments(made, now), p.window, now) - now, 1 }
  return d, { start = start, current = counted, previous = 0 }
end

-- largest_cost: limit - the key's own estimate on its own schedule.
function SW.largest(p, stored, now)
  local estimate = 0
  if stored then
    local held = { start = stored.start, window = stored.params.window, current = stored.current,
      previous = stored.previous }
    estimate = sw_estimate(sw_here(sw_segments(held, now)), held.window, now)
  end
  return estimate < p.limit and p.limit - estimate or 0
end

-- refund: from the current window's count first, then from the previous one's weighted share:
-- the previous count becomes the largest whose share now is exactly that much lower.
function SW.refund(stored, now, units)
  local window = stored.params.window
  local start = sw_start(now, window)
  local held = { start = stored.start, window = window, current = stored.current,
    previous = stored.previous }
  local here = sw_here(sw_segments(held, now))
  local from_current = here.current < units and here.current or units
  local left = window - (now - start)
  local share = (divmod(mul(here.previous, left), window))
  local from_previous = units - from_current
  from_previous = share < from_previous and share or from_previous
  local previous = here.previous
  if from_previous > 0 then
    local target = share - from_previous
    previous = (divmod(sub(mul(target + 1, window), 1), left))
    previous = min(previous, here.previous)
  end
  local given = from_current + from_previous
  if given == 0 then
    return 0
  end
  return given, { start = start, current = here.current - from_current, previous = previous }
end
