-- RL.TOKENBUCKET's fast path, before the common part is defined (clients/lua/README.md,
-- "One source"): a plain admission, `capacity refill_amount refill_period` and nothing else (a
-- continuous refill), on a fresh key or on one written with the same parameters and no BLOCK,
-- that is admitted. It takes the same steps as lib/tokenbucket.lua's TB.check for that case
-- (cost 1: refilled up to now, one token taken, the time until full) and replies, writes and
-- expires as admit() does. Anything else (a refusal, a wide value) goes on to the general path,
-- which parses and reads again (and reports any error): `tb_now` hands it the TIME this path
-- read, so the clock is read once.
local tb_now
do
  local ms, pms, test_us = fast_words(2, 12)
  local reply
  if ms then
    local capacity, amount, period = tonumber(ARGV[1]), tonumber(ARGV[2]), ms * 1000
    if capacity * period < 1125899906842624 then -- 2^50
      local key, full = KEYS[1], capacity * period
      local p = ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. pms .. ' 0'
      local h, fresh = fast_read(key, 'a', 'k', 'p', 'n', 'u')
      local tokens, updated
      if not fresh and not h.err and h[1] == 'tb1' and not h[2] and h[3] == p and h[4] and h[5]
          and #h[4] <= 15 then
        tokens, updated = tonumber(h[4]), tonumber(h[5])
      end
      if fresh or (tokens and updated) then
        local now
        now, tb_now = fast_now(test_us)
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
            local reset = fast_ceil(ahead + full - tokens, amount * 1000)
            local m = math.fmod(tokens, period)
            reply = { 1, capacity, (tokens - m) / period, 0, reset }
            fast_write(key, fresh, 'tb1', p, reset, 'n', string.format('%d', tokens), 'u',
              string.format('%d', updated))
          end
        end
      end
    end
  end
  if reply then
    return reply
  end
end
