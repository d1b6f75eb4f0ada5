-- RL.SLIDINGWINDOW's fast path, before the common part is defined (clients/lua/README.md,
-- "One source"): a plain call, `limit window` and nothing else, on a fresh key or on one written
-- with the same parameters and no BLOCK. It takes the same steps as lib/slidingwindow.lua's
-- sw_counts for that case (cost 1: the counts as of now, the estimate; admitted, the settled
-- time of the counts written, which is start + 2 × window - floor((window - 1) / current);
-- refused, sw_fast_denial below) and replies, writes and expires as admit() does (a refusal
-- writes nothing; an admission in the same window writes only the count). Anything else (a wide
-- product) goes on to the general path, which parses and reads again (and reports any error):
-- `sw_now` hands it the TIME this path read, so the clock is read once.

-- A refusal (cost 1, the key's own parameters), as sw_counts makes it: nothing written; the
-- retry is the first time from now at which the estimate leaves room for one (Segment::first_fit
-- over the three stages of the stored counts: as they are until their window ends, the current
-- count as the previous one for a window, then none), and the reset the time from which the
-- estimate stays 0 (settled). Every product is below 2^52 (the caller checks). The reply's
-- `remaining` is the caller's.
local function sw_fast_denial(s, c, v, window, limit, now)
  local e1, e2, fmod = s + window, s + 2 * window, math.fmod
  -- Stage i's [from, to), current and previous counts (no tables: this path is hot).
  local retry
  for i = 1, 3 do
    local from, to, current, previous = now, e1, c, v
    if i == 2 then
      from, to, current, previous = e1 > now and e1 or now, e2, 0, c
    elseif i == 3 then
      from, to, current, previous = e2 > now and e2 or now, math.huge, 0, 0
    end
    local allowance = limit - current - 1
    if from < to and allowance >= 0 then
      local e = 0 -- least_elapsed(previous, allowance)
      if previous > 0 then
        local bound = (allowance + 1) * window - 1
        e = window - (bound - fmod(bound, previous)) / previous
      end
      if e < window then
        local first = from - fmod(from, window)
        local t = first + e > from and first + e or from
        if t < first + window and t < to then
          retry = t
          break
        elseif first + window + e < to then
          retry = first + window + e
          break
        end
      end
    end
  end
  local settle = now
  for i = 3, 1, -1 do
    local from, to, current, previous = now, e1, c, v
    if i == 2 then
      from, to, current, previous = e1 > now and e1 or now, e2, 0, c
    elseif i == 3 then
      from, to, current, previous = e2 > now and e2 or now, math.huge, 0, 0
    end
    if from < to then
      if current > 0 then
        settle = to
      elseif previous == 0 then
        settle = from
      else
        local bound = window - 1 -- least_elapsed(previous, 0)
        local t = to - 1
        t = t - fmod(t, window) + window - (bound - fmod(bound, previous)) / previous
        t = t > from and t or from
        settle = t < to and t or to
      end
      if settle > from then
        break
      end
    end
  end
  return { 0, limit, 0, fast_ceil(retry - now, 1000), fast_ceil(settle - now, 1000) }
end

local sw_now
do
  local ms, pms, test_us = fast_words(1, 12)
  local reply
  if ms then
    local key, l, window = KEYS[1], ARGV[1], ms * 1000
    local limit, p = tonumber(l), l .. ' ' .. pms
    local h, fresh = fast_read(key, 'a', 'k', 'p', 's', 'c', 'v')
    local s, c, v
    if not fresh and not h.err and h[1] == 'sw1' and not h[2] and h[3] == p and h[4] and h[5]
        and h[6] then
      s, c, v = tonumber(h[4]), tonumber(h[5]), tonumber(h[6])
    end
    if fresh or (s and c and v) then
      local now
      now, sw_now = fast_now(test_us)
      if sw_now or test_us then
        local into = math.fmod(now, window)
        local start = now - into
        -- The counts as of now: the stored ones until their window ends, then the current
        -- count as the previous one for a window, then none.
        local current, previous = 0, 0
        if s then
          if now < s + window then
            current, previous = c, v
          elseif now < s + 2 * window then
            previous = c
          end
        end
        local weighted = previous * (window - into)
        if weighted < 4503599627370496 and (limit + 1) * window < 4503599627370496 then
          -- 2^52: exact (and so is least_elapsed's (allowance + 1) × window below)
          local estimate = (weighted - math.fmod(weighted, window)) / window + current
          if estimate + 1 <= limit then
            current = current + 1
            local q = window - 1
            q = (q - math.fmod(q, current)) / current
            local reset = fast_ceil(start + 2 * window - q - now, 1000)
            estimate = estimate + 1
            reply = { 1, limit, estimate < limit and limit - estimate or 0, 0, reset }
            local f = string.format
            if s == start then
              -- The same window: its start and the previous count are written already.
              fast_write(key, false, 'sw1', p, reset, 'c', f('%d', current))
            else
              fast_write(key, fresh, 'sw1', p, reset, 's', f('%d', start), 'c', f('%d', current),
                'v', f('%d', previous))
            end
          elseif s then
            reply = sw_fast_denial(s, c, v, window, limit, now)
            reply[3] = estimate < limit and limit - estimate or 0
          end
        end
      end
    end
  end
  if reply then
    return reply
  end
end
