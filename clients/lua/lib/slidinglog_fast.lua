-- RL.SLIDINGLOG's fast path, before the common part is defined (clients/lua/README.md,
-- "One source"): a plain call, `limit window` and nothing else, on a fresh key or on a log
-- written with the same parameters and no BLOCK, whose expired entries are among its four
-- oldest (a log written regularly loses one or two a request), and, when admitted, needs no
-- rebase or re-encoding. It reads, in one HMGET, those four oldest entries and the newest: of
-- any log, whatever its length, that is what a plain call needs (the first entry in the window,
-- the units before it, the newest entry's offset and units). It takes the same steps as
-- lib/slidinglog.lua for that case (cost 1: sl_scan, sl_decide, sl_plan's same or fresh log,
-- sl_admit, SL.save) and replies, writes and expires as admit() does; a denial (the log full:
-- its retry is when its first entry in the window leaves, its reset when its newest does)
-- writes nothing. Anything else goes on to the general path, which parses and reads again (and
-- reports any error): `sl_now` hands it the TIME this path read, so the clock is read once.
local sl_now
do
  local ms, pms, test_us = fast_words(1, 12)
  local reply
  local l = ms and ARGV[1]
  if ms and #l <= 7 and tonumber(l) <= 1000000 then
    local key, limit, window = KEYS[1], tonumber(l), ms * 1000
    local p = l .. ' ' .. pms
    local g, fresh = fast_read(key, 'a', 'k', 'p', 'b', 'u', 'h', 'e', 'z')
    local base, u, h, e, z
    if not fresh and not g.err and g[1] == 'sl1' and not g[2] and g[3] == p and g[4] and g[5]
        and g[6] and g[7] and g[8] then
      base, u, h, e, z = tonumber(g[4]), tonumber(g[5]), tonumber(g[6]), tonumber(g[7]),
        tonumber(g[8])
    end
    -- The four oldest entries and the newest, in one HMGET (numbers past e - 1 are absent):
    -- `got[k]` is entry h + k - 1, `got[5]` entry e - 1, each "offset cum".
    local read = base and u and h and z and e and e >= h
    local got = read and e > h and redis.call('HMGET', key, h, h + 1, h + 2, h + 3, e - 1)
    local newest, newest_cum -- the newest entry's offset and cum
    if got then
      newest, newest_cum = (got[5] or ''):match('^(%d+) (%d+)$')
      read = newest and true
      newest, newest_cum = tonumber(newest), tonumber(newest_cum)
    end
    if fresh or read then
      local now
      now, sl_now = fast_now(test_us)
      local needed = 1 -- unit_for: the smallest power of two with window / unit < 2^29
      while window >= 536870912 * needed do
        needed = needed * 2
      end
      -- sl_scan: the first entry in the window (`first`, its offset `oldest`), and the units
      -- from it on. `known`: found among the entries read (or none in the window, when the
      -- newest has left). Each entry read is parsed when used.
      local first, oldest, active, before, known = nil, nil, 0, z, true
      if got and base + newest * u + window > now then
        for k = 1, 5 do
          local i = h + k - 1
          if i == e - 1 then
            first, oldest = i, newest
            break
          elseif k == 5 then
            known = false
            break
          end
          local o, c = (got[k] or ''):match('^(%d+) (%d+)$')
          if not o then
            known = false
            break
          end
          o = tonumber(o)
          if base + o * u + window > now then
            first, oldest = i, o
            break
          end
          before = tonumber(c)
        end
        if first then
          active = newest_cum - before
        end
      end
      local offset, at -- sl_plan: the new entry's offset and time; nil: not this path's
      if not first then
        base, u, offset, at = now, needed, 0, now
      elseif u >= needed then
        local newest_at = base + newest * u
        local k = math.ceil(((now > newest_at and now or newest_at) - base) / u)
        if k <= 2147483647 then
          offset, at = k, base + k * u
        end
      end
      if not (sl_now or test_us) or not known then
        reply = nil
      elseif active + 1 > limit then
        -- sl_decide's denial: the log is full (active = limit under its own parameters), so the
        -- first entry in the window frees the unit a request needs.
        if active == limit then
          reply = { 0, limit, 0, fast_ceil(base + oldest * u + window - now, 1000),
            fast_ceil(base + newest * u + window - now, 1000) }
        end
      elseif offset and (first or not read or e - h <= 1000) then
        local used = active + 1
        local reset = fast_ceil(at + window - now, 1000)
        reply = { 1, limit, used < limit and limit - used or 0, 0, reset }
        -- sl_admit: the expired entries dropped (all of them for a fresh log), the request
        -- appended to the newest entry at the same offset or as a new one.
        local gone_from, gone_to
        local f = string.format
        if not first then
          if read and e > h then
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
        local entry, units
        if e > h and newest == offset then
          entry, units = e - 1, newest_cum + 1
        else
          entry, units = e, (e > h and newest_cum or z) + 1
          e = e + 1
        end
        -- SL.save's fields, those that may have changed: all of them for a fresh key, the base
        -- and unit for a log started again, the first entry and the units before it when
        -- entries left.
        local text = f('%d %d', offset, units)
        if fresh then
          redis.call('HSET', key, 'a', 'sl1', 'p', p, 'b', f('%d', base), 'u', f('%d', u),
            'h', f('%d', h), 'e', f('%d', e), 'z', f('%d', z), f('%d', entry), text)
        elseif not first then
          redis.call('HSET', key, 'b', f('%d', base), 'u', f('%d', u), 'h', f('%d', h),
            'e', f('%d', e), 'z', f('%d', z), f('%d', entry), text)
        elseif gone_from then
          redis.call('HSET', key, 'h', f('%d', h), 'e', f('%d', e), 'z', f('%d', z),
            f('%d', entry), text)
        else
          redis.call('HSET', key, 'e', f('%d', e), f('%d', entry), text)
        end
        redis.call('PEXPIRE', key, reset)
      end
    end
  end
  if reply then
    return reply
  end
end
