-- RL.TOKENBUCKET's fast path, before the common part is defined (clients/scripts/README.md,
-- "One source"): a plain admission, `capacity refill_amount refill_period` and nothing else (a
-- continuous refill), on a fresh key or on one written with the same parameters and no BLOCK,
-- that is admitted. It takes the same steps as lib/tokenbucket.lua's TB.check for that case
-- (cost 1: refilled up to now, one token taken, the time until full) and replies, writes and
-- expires as admit() does. Anything else (a refusal, a wide value) goes on to the general path,
-- which parses and reads again (and reports any error): `tb_now` hands it the TIME this path
-- read, so the clock is read once.
local tb_now
do
  local args, reply = ARGV, nil
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
  local c, a, digits, unit = args[1], args[2], nil, nil
  if n == 3 and #KEYS == 1 then
    digits, unit = args[3]:match('^([1-9][0-9]*)(%a*)$')
  end
  if digits and #c <= 12 and #a <= 12 and #digits <= 12 and c:find('^[1-9][0-9]*$')
      and a:find('^[1-9][0-9]*$') then
    local scale = unit == '' and 1
      or ({ ms = 1, s = 1000, m = 60000, h = 3600000, d = 86400000 })[unit:lower()]
    local ms = scale and tonumber(digits) * scale
    local capacity, amount = tonumber(c), tonumber(a)
    local period = ms and ms * 1000
    if ms and ms <= 315360000000 and capacity * period < 1125899906842624 then -- 2^50
      local key, full = KEYS[1], capacity * period
      local p = c .. ' ' .. a .. ' ' .. (scale == 1 and digits or string.format('%d', ms)) .. ' 0'
      local h = redis.pcall('HMGET', key, 'a', 'k', 'p', 'n', 'u')
      local fresh = not h.err and not h[1] and redis.call('EXISTS', key) == 0
      local tokens, updated
      if not fresh and not h.err and h[1] == 'tb1' and not h[2] and h[3] == p and h[4] and h[5]
          and #h[4] <= 15 then
        tokens, updated = tonumber(h[4]), tonumber(h[5])
      end
      if fresh or (tokens and updated) then
        local now = test_us
        if not now then
          local t = redis.call('TIME')
          now = tonumber(t[1]) * 1000000 + tonumber(t[2])
          tb_now = now < 7881299347898368 and now or nil
        end
        if tb_now or test_us then
          -- Refilled up to now (a reading before `updated` refills nothing).
          if fresh then
            tokens, updated = full, now
          else
            if tokens > full then
              tokens = full
            end
            local gained = now > updated and amount * (now - updated) or 0
            tokens = gained >= full - tokens and full or tokens + gained
            updated = updated > now and updated or now
          end
          local ahead = (updated - now) * amount -- after a clock step back
          if tokens >= period and ahead < 4503599627370496 then -- 2^52: exact
            tokens = tokens - period
            local left = ahead + full - tokens
            local den = amount * 1000
            local m = math.fmod(left, den)
            local reset = (left - m) / den + (m > 0 and 1 or 0)
            m = math.fmod(tokens, period)
            reply = { 1, capacity, (tokens - m) / period, 0, reset }
            local nt, ut = string.format('%d', tokens), string.format('%d', updated)
            if fresh then
              redis.call('HSET', key, 'a', 'tb1', 'p', p, 'n', nt, 'u', ut)
            else
              redis.call('HSET', key, 'n', nt, 'u', ut)
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
