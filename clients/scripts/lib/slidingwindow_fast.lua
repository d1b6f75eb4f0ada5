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
  local args, reply = ARGV, nil
  local n, test_us = #args, nil
  if n == 4 and args[3] == 'NOW' then
    test_us = args[4]
    if not test_us:find('^[0-9]+$') or #test_us > 16 then
      n = 0
    else
      test_us = tonumber(test_us)
      n = test_us < 7881299347898368 and 2 or 0 -- 2^53 - 2^50, the general path's MAX_NOW
    end
  end
  local l, digits, unit = args[1], nil, nil
  if n == 2 and #KEYS == 1 then
    digits, unit = args[2]:match('^([1-9][0-9]*)(%a*)$')
  end
  if digits and #l <= 12 and #digits <= 12 and l:find('^[1-9][0-9]*$') then
    local scale = unit == '' and 1
      or ({ ms = 1, s = 1000, m = 60000, h = 3600000, d = 86400000 })[unit:lower()]
    local ms = scale and tonumber(digits) * scale
    if ms and ms <= 315360000000 then -- ten 365-day years, the general path's MAX_DURATION_MS
      local key, limit, window = KEYS[1], tonumber(l), ms * 1000
      local p = l .. ' ' .. (scale == 1 and digits or string.format('%d', ms))
      local h = redis.pcall('HMGET', key, 'a', 'k', 'p', 's', 'c', 'v')
      local fresh = not h.err and not h[1] and redis.call('EXISTS', key) == 0
      local s, c, v
      if not fresh and not h.err and h[1] == 'sw1' and not h[2] and h[3] == p and h[4] and h[5]
          and h[6] then
        s, c, v = tonumber(h[4]), tonumber(h[5]), tonumber(h[6])
      end
      if fresh or (s and c and v) then
        local now = test_us
        if not now then
          local t = redis.call('TIME')
          now = tonumber(t[1]) * 1000000 + tonumber(t[2])
          sw_now = now < 7881299347898368 and now or nil
        end
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
              local reset = start + 2 * window - q - now
              local m = math.fmod(reset, 1000)
              reset = (reset - m) / 1000 + (m > 0 and 1 or 0)
              estimate = estimate + 1
              reply = { 1, limit, estimate < limit and limit - estimate or 0, 0, reset }
              local st, ct, vt = string.format('%d', start), string.format('%d', current),
                string.format('%d', previous)
              if fresh then
                redis.call('HSET', key, 'a', 'sw1', 'p', p, 's', st, 'c', ct, 'v', vt)
              else
                redis.call('HSET', key, 's', st, 'c', ct, 'v', vt)
              end
              redis.call('PEXPIRE', key, reset)
            end
          end
        end
      end
    end
  end
  if reply then
    return reply
  end
end
