-- RL.FIXEDWINDOW's fast path, before the common part is defined (clients/lua/README.md,
-- "One source"): a plain call, `limit window` and nothing else, on a fresh key or on one written
-- with the same parameters and no BLOCK. It takes the same steps as lib/fixedwindow.lua's
-- FW.check and common's admit() for that case (cost 1) and replies, writes and expires as they
-- do (a refusal writes nothing; an admission in the same window writes only the count).
-- Anything else goes on to the general path, which parses and reads again (and reports any
-- error): `fw_now` hands it the TIME this path read, so the clock is read once.
local fw_now
do
  local ms, pms, test_us = fast_words(1, 12)
  local reply
  if ms then
    local key, l, window = KEYS[1], ARGV[1], ms * 1000
    local limit, p = tonumber(l), l .. ' ' .. pms
    local h, fresh = fast_read(key, 'a', 'k', 'p', 's', 'c')
    local s, c
    if not fresh and not h.err and h[1] == 'fw1' and not h[2] and h[3] == p and h[4] and h[5] then
      s, c = tonumber(h[4]), tonumber(h[5])
    end
    if fresh or (s and c) then
      local now
      now, fw_now = fast_now(test_us)
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
        local reset = fast_ceil(reset_at - now, 1000)
        local retry = allowed and 0 or fast_ceil(counted_until - now, 1000)
        reply = { allowed and 1 or 0, limit, used < limit and limit - used or 0, retry, reset }
        if allowed and s == start then
          -- The same window: its start is written already.
          fast_write(key, false, 'fw1', p, reset, 'c', string.format('%d', used))
        elseif allowed then
          fast_write(key, fresh, 'fw1', p, reset, 's', string.format('%d', start), 'c',
            string.format('%d', used))
        end
      end
    end
  end
  if reply then
    return reply
  end
end
