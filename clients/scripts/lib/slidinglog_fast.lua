-- RL.SLIDINGLOG's fast path, before the common part is defined (clients/scripts/README.md,
-- "One source"): a plain admission, `limit window` and nothing else, on a fresh key or on a log of at
-- most 64 entries written with the same parameters and no BLOCK, that is admitted without a
-- rebase or a re-encoding. It takes the same steps as lib/slidinglog.lua for that case (cost 1:
-- sl_scan, sl_decide, sl_plan's same or fresh log, sl_admit, SL.save) and replies, writes and
-- expires as admit() does. Anything else goes on to the general path, which parses and reads
-- again (and reports any error): `sl_now` hands it the TIME this path read, so the clock is read
-- once.
local sl_now
do
  local ms, pms, test_us = fast_words(1, 12)
  local reply
  local l = ms and ARGV[1]
  if ms and #l <= 7 and tonumber(l) <= 1000000 then
    do
      local key, limit, window = KEYS[1], tonumber(l), ms * 1000
      local p = l .. ' ' .. pms
      local g, fresh = fast_read(key, 'a', 'k', 'p', 'b', 'u', 'h', 'e', 'z')
      local base, u, h, e, z
      if not fresh and not g.err and g[1] == 'sl1' and not g[2] and g[3] == p and g[4] and g[5]
          and g[6] and g[7] and g[8] then
        base, u, h, e, z = tonumber(g[4]), tonumber(g[5]), tonumber(g[6]), tonumber(g[7]),
          tonumber(g[8])
      end
      -- The entries h .. e - 1, read whole: offsets and cumulative units.
      local off, cum = {}, {}
      if base and u and h and z and e and e >= h and e - h <= 64 then
        if e > h then
          local names = {}
          for i = h, e - 1 do
            names[#names + 1] = i
          end
          local got = redis.call('HMGET', key, unpack(names))
          for i = h, e - 1 do
            local o, c = (got[i - h + 1] or ''):match('^(%d+) (%d+)$')
            if not o then
              e = nil
              break
            end
            off[i], cum[i] = tonumber(o), tonumber(c)
          end
        end
      else
        e = nil
      end
      if fresh or e then
        local now
        now, sl_now = fast_now(test_us)
        local needed = 1 -- unit_for: the smallest power of two with window / unit < 2^29
        while window >= 536870912 * needed do
          needed = needed * 2
        end
        -- sl_scan: the first entry in the window, and the units from it on.
        local first, active, before = nil, 0, 0
        if e then
          for i = h, e - 1 do
            if base + off[i] * u + window > now then
              first = i
              break
            end
          end
          if first then
            before = first == h and z or cum[first - 1]
            active = cum[e - 1] - before
          end
        end
        local offset, at -- sl_plan: the new entry's offset and time; nil: not this path's
        if not first then
          base, u, offset, at = now, needed, 0, now
        elseif u >= needed then
          local newest = base + off[e - 1] * u
          local k = math.ceil(((now > newest and now or newest) - base) / u)
          if k <= 2147483647 then
            offset, at = k, base + k * u
          end
        end
        if (sl_now or test_us) and offset and active + 1 <= limit then
          local used = active + 1
          local reset = fast_ceil(at + window - now, 1000)
          reply = { 1, limit, used < limit and limit - used or 0, 0, reset }
          -- sl_admit: the expired entries dropped (all of them for a fresh log), the request
          -- appended to the newest entry at the same offset or as a new one.
          local gone_from, gone_to
          if not first then
            if e and e > h then
              gone_from, gone_to = h, e
            end
            h, e, z = 1, 1, 0
          elseif first > h then
            gone_from, gone_to = h, first
            h, z = first, before
          end
          if gone_from then
            local names = {}
            for i = gone_from, gone_to - 1 do
              names[#names + 1] = i
            end
            redis.call('HDEL', key, unpack(names))
          end
          local last, entry = e - 1, nil
          if last >= h and off[last] == offset then
            entry = last
            cum[last] = cum[last] + 1
          else
            entry = e
            off[e], cum[e] = offset, (last >= h and cum[last] or z) + 1
            e = e + 1
          end
          local f = string.format
          fast_write(key, true, 'sl1', p, reset, 'b', f('%d', base), 'u', f('%d', u),
            'h', f('%d', h), 'e', f('%d', e), 'z', f('%d', z), f('%d', entry),
            f('%d %d', off[entry], cum[entry]))
        end
      end
    end
  end
  if reply then
    return reply
  end
end
