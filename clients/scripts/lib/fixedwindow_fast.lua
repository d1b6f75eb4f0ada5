-- RL.FIXEDWINDOW's fast path, before the common part is defined (clients/scripts/README.md,
-- "One source"): a plain admission, `limit window` and nothing else, on a fresh key or on one written
-- with the same parameters and no BLOCK. It takes the same steps as lib/fixedwindow.lua's
-- FW.check and common's admit() for that case (cost 1) and replies, writes and expires as they
-- do. Anything else goes on to the general path, which parses and reads again (and reports any
-- error): `fw_now` hands it the TIME this path read, so the clock is read once.
local fw_now
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
      local h = redis.pcall('HMGET', key, 'a', 'k', 'p', 's', 'c')
      local fresh = not h.err and not h[1] and redis.call('EXISTS', key) == 0
      local s, c
      if not fresh and not h.err and h[1] == 'fw1' and not h[2] and h[3] == p and h[4] and h[5] then
        s, c = tonumber(h[4]), tonumber(h[5])
      end
      if fresh or (s and c) then
        local now = test_us
        if not now then
          local t = redis.call('TIME')
          now = tonumber(t[1]) * 1000000 + tonumber(t[2])
          fw_now = now < 7881299347898368 and now or nil
        end
        if fw_now or test_us then
          local start = now - math.fmod(now, window)
          local count, counted_until = 0, now
          if s and now < s + window then
            count, counted_until = c, s + window
          end
          local allowed = count + 1 <= limit
          local used, reset_at = 0, now
          if allowed then
            used, reset_at = count + 1, start + window
          elseif count > 0 then
            used, reset_at = count, counted_until
          end
          local retry, reset, m = 0, reset_at - now, nil
          m = math.fmod(reset, 1000)
          reset = (reset - m) / 1000 + (m > 0 and 1 or 0)
          if not allowed then
            retry = counted_until - now
            m = math.fmod(retry, 1000)
            retry = (retry - m) / 1000 + (m > 0 and 1 or 0)
          end
          reply = { allowed and 1 or 0, limit, used < limit and limit - used or 0, retry, reset }
          if allowed then
            local st, ct = string.format('%d', start), string.format('%d', used)
            if fresh then
              redis.call('HSET', key, 'a', 'fw1', 'p', p, 's', st, 'c', ct)
            else
              redis.call('HSET', key, 's', st, 'c', ct)
            end
            redis.call('PEXPIRE', key, reset)
          end
        end
      end
    end
  end
  if reply then
    return reply
  end
end
