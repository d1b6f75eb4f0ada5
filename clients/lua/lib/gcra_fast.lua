-- The fast path of RL.GCRA and RL.LEAKYBUCKET, before the common part is defined
-- (clients/lua/README.md, "One source"): a plain admission, `burst rate period` and nothing
-- else, on a fresh key or on one written with the same parameters and no BLOCK, while every
-- value is a double far below 2^53. It takes the same steps as lib/gcra.lua's GCRA.check (and
-- lib/leakybucket.lua's delay) and common's admit() for that case (cost 1, the key's own
-- schedule, no conversion) and replies, writes and expires as they do. Anything else, or a
-- shape it is not sure of, goes on to the general path, which parses and reads again (and
-- reports any error). Returns the reply, or nil and the TIME it read (nil: none), which the
-- general path then uses, so the clock is read once. `tag` is the key's layout tag; `delay`:
-- the reply has the leaky bucket's delay_ms.
local function gcra_fast(tag, delay)
  local ms, pms, test_us = fast_words(2, 7)
  local reply, gcra_now
  if ms then
    local burst, rate, interval = tonumber(ARGV[1]), tonumber(ARGV[2]), ms * 1000
    if (burst + 1) * interval < 562949953421312 then -- 2^49: see owed below
      local key = KEYS[1]
      local p = ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. pms
      local h, fresh = fast_read(key, 'a', 'k', 'p', 't', 'f')
      local tat, frac
      if not fresh and not h.err and h[1] == tag and not h[2] and h[3] == p and h[4] and h[5]
          and #h[4] <= 16 and h[4]:find('^[0-9]+$') then
        tat, frac = tonumber(h[4]), tonumber(h[5])
      end
      if fresh or frac then
        local now
        now, gcra_now = fast_now(test_us)
        local owed = 0
        if tat and tat >= now then
          owed = (tat - now) * rate + frac
        end
        local tolerance = burst * interval
        if (gcra_now or test_us) and owed + interval < 562949953421312 then
          -- 2^49: exact, and now + new / rate below 2^53
          local new = owed + interval
          local allowed = new <= tolerance
          local ttl = allowed and new or owed
          local den = rate * 1000
          local used = fast_ceil(ttl, interval)
          local reset = fast_ceil(ttl, den)
          local retry = allowed and 0 or fast_ceil(new - tolerance, den)
          reply = { allowed and 1 or 0, burst, used < burst and burst - used or 0, retry, reset }
          if delay then
            -- The queue's wait before the request joins: owed, over rate, in whole ms.
            reply[6] = allowed and fast_ceil(owed, den) or -1
          end
          if allowed then
            local f = math.fmod(new, rate)
            fast_write(key, fresh, tag, p, reset, 't', string.format('%d', now + (new - f) / rate),
              'f', string.format('%d', f))
          end
        end
      end
    end
  end
  return reply, gcra_now
end
