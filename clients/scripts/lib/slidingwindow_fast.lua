-- RL.SLIDINGWINDOW's fast path, before the common part is defined (clients/scripts/README.md,
-- "One source"): a plain admission, `limit window` and nothing else, on a fresh key or on one written
-- with the same parameters and no BLOCK, that is admitted. It takes the same steps as
-- lib/slidingwindow.lua's sw_counts for that case (cost 1: the counts as of now, the estimate,
-- and the settled time of the counts written, which is start + 2 × window - floor((window - 1) /
-- current)) and replies, writes and expires as admit() does. Anything else (a refusal, a wide
-- product) goes on to the general path, which parses and reads again (and reports any error):
-- `sw_now` hands it the TIME this path read, so the clock is read once.
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
        if weighted < 4503599627370496 then -- 2^52: exact
          local estimate = (weighted - math.fmod(weighted, window)) / window + current
          if estimate + 1 <= limit then
            current = current + 1
            local q = window - 1
            q = (q - math.fmod(q, current)) / current
            local reset = fast_ceil(start + 2 * window - q - now, 1000)
            estimate = estimate + 1
            reply = { 1, limit, estimate < limit and limit - estimate or 0, 0, reset }
            local f = string.format
            fast_write(key, fresh, 'sw1', p, reset, 's', f('%d', start), 'c', f('%d', current), 'v',
              f('%d', previous))
          end
        end
      end
    end
  end
  if reply then
    return reply
  end
end
