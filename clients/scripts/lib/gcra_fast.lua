-- The fast path of RL.GCRA and RL.LEAKYBUCKET, before the common part is defined
-- (clients/scripts/README.md, "One source"): a plain admission, `burst rate period` and nothing
-- else, on a fresh key or on one written with the same parameters and no BLOCK, while every
-- value is a double far below 2^53. It takes the same steps as lib/gcra.lua's GCRA.check (and
-- lib/leakybucket.lua's delay) and common's admit() for that case (cost 1, the key's own
-- schedule, no conversion) and replies, writes and expires as they do. Anything else, or a
-- shape it is not sure of, goes on to the general path, which parses and reads again (and
-- reports any error). Returns the reply, or nil and the TIME it read (nil: none), which the
-- general path then uses, so the clock is read once. `tag` is the key's layout tag; `delay`:
-- the reply has the leaky bucket's delay_ms.
local function gcra_fast(tag, delay)
  local args, reply, gcra_now = ARGV, nil, nil
  local n, test_us = #args, nil
  if n == 5 and args[4] == 'NOW' then
    test_us = args[5]
    if not test_us:find('^[0-9]+$') or #test_us > 16 then
      n = 0
    else
      test_us = tonumber(test_us)
      n = test_us < 7881299347898368 and 3 or 0 -- 2^53 - 2^50, the general path's MAX_NOW
    end
  end
  local b, r, digits, unit = args[1], args[2], nil, nil
  if n == 3 and #KEYS == 1 then
    digits, unit = args[3]:match('^([1-9][0-9]*)(%a*)$')
  end
  if digits and #b <= 7 and #r <= 7 and #digits <= 7 and b:find('^[1-9][0-9]*$')
      and r:find('^[1-9][0-9]*$') then
    local scale = unit == '' and 1 or ({ ms = 1, s = 1000, m = 60000, h = 3600000 })[unit:lower()]
    local ms = scale and tonumber(digits) * scale
    local burst, rate = tonumber(b), tonumber(r)
    local interval = ms and ms * 1000
    if ms and (burst + 1) * interval < 562949953421312 then -- 2^49: see owed below
      local key = KEYS[1]
      local p = b .. ' ' .. r .. ' ' .. (scale == 1 and digits or string.format('%d', ms))
      local h = redis.pcall('HMGET', key, 'a', 'k', 'p', 't', 'f')
      local fresh = not h.err and not h[1] and redis.call('EXISTS', key) == 0
      local tat, frac
      if not fresh and not h.err and h[1] == tag and not h[2] and h[3] == p and h[4] and h[5]
          and #h[4] <= 16 and h[4]:find('^[0-9]+$') then
        tat, frac = tonumber(h[4]), tonumber(h[5])
      end
      if fresh or frac then
        local now = test_us
        if not now then
          local t = redis.call('TIME')
          now = tonumber(t[1]) * 1000000 + tonumber(t[2])
          gcra_now = now < 7881299347898368 and now or nil
        end
        local owed = 0
        if tat and tat >= now then
          owed = (tat - now) * rate + frac
        end
        local tolerance = burst * interval
        if gcra_now or test_us then
          if owed + interval < 562949953421312 then -- 2^49: exact, and now + new / rate below 2^53
            local new = owed + interval
            local allowed = new <= tolerance
            local ttl = allowed and new or owed
            local den = rate * 1000
            local m = math.fmod(ttl, interval)
            local used = (ttl - m) / interval + (m > 0 and 1 or 0)
            m = math.fmod(ttl, den)
            local reset = (ttl - m) / den + (m > 0 and 1 or 0)
            local retry = 0
            if not allowed then
              local late = new - tolerance
              m = math.fmod(late, den)
              retry = (late - m) / den + (m > 0 and 1 or 0)
            end
            reply = { allowed and 1 or 0, burst, used < burst and burst - used or 0, retry, reset }
            if delay then
              -- The queue's wait before the request joins: owed, over rate, in whole ms.
              m = math.fmod(owed, den)
              reply[6] = allowed and (owed - m) / den + (m > 0 and 1 or 0) or -1
            end
            if allowed then
              local f = math.fmod(new, rate)
              local at = string.format('%d', now + (new - f) / rate)
              if fresh then
                redis.call('HSET', key, 'a', tag, 'p', p, 't', at, 'f', string.format('%d', f))
              else
                redis.call('HSET', key, 't', at, 'f', string.format('%d', f))
              end
              redis.call('PEXPIRE', key, reset)
            end
          end
        end
      end
    end
  end
  return reply, gcra_now
end
