-- algorithms/src/sliding_log.rs (and sliding_log/): the exact sliding window, a log of the
-- admitted requests still in the window. Entry times are kept as the module keeps them, to the
-- µs: an offset from a base time `b`, in a unit `u` (a power of two of µs, unit_for), rounded up;
-- a new entry stamped max(now, newest entry); the log rebased, or re-encoded in a coarser unit,
-- when and as the module's ring is (regrid.rs). So every time a reply says is the module's.
--
-- The hash keeps the log as one field per entry, its sequence number (decimal) -> "offset cum",
-- `cum` the units of the entries up to and including it since the log's origin; `h` is the
-- first entry's number, `e` one past the last, `z` the units before `h`. So the units between
-- two entries are one subtraction, and the searches the module makes over its words and index
-- (the first entry in the window, the entry by which enough units leave, a refund's cut) are
-- binary searches here: O(log n) HGETs. Requests at the same offset are one entry (their units
-- add up): every reply reads the log by time and units only, so it is the module's. A log of
-- at most 64 entries is read whole, in one HMGET; a longer one, an entry at a time as needed.
local SL = { tag = 'sl1', command = 'RL.SLIDINGLOG', fields = { 'a', 'k', 'p', 'b', 'u', 'h', 'e', 'z' } }
local SL_MAX_LIMIT = 1000000 -- the module setting sliding-log-max-limit's default
local MAX_OFFSET = 2147483647 -- 2^31 - 1: a word's offset bits
local SL_READ_WHOLE = 64

local function sl_params(limit, window_ms)
  return { limit = limit, window_ms = window_ms, window = window_ms * 1000,
    text = format('%d %d', limit, window_ms) }
end

-- The limit, up to the module's own cap: its setting sliding-log-max-limit at its default (a
-- script cannot read a module's setting, and there is no module).
local function sl_limit(s)
  local ok, limit = pcall(count, s, 'limit', 1, SL_MAX_LIMIT)
  if not ok then
    fail(format('ERR invalid limit: expected an integer from 1 to %d (the module setting '
      .. 'ratelimit.sliding-log-max-limit bounds it)', SL_MAX_LIMIT))
  end
  return limit
end

-- unit_for: the smallest power of two with window / unit < 2^29.
local function sl_unit_for(window)
  local unit = 1
  while window >= 536870912 * unit do
    unit = unit * 2
  end
  return unit
end

-- A log of no entries (State::empty), for the key KEYS[1].
local function sl_empty(params, base, unit)
  return { key = KEYS[1], params = params, base = base, unit = unit, h = 1, e = 1, z = 0,
    ent = {}, dirty = {}, gone = {} }
end

-- Reads entries i .. j - 1 that are not read yet, in one HMGET.
local function sl_fetch(r, i, j)
  local names = {}
  for n = i, j - 1 do
    if not r.ent[n] then
      names[#names + 1] = format('%d', n)
    end
  end
  for first = 1, #names, 1000 do
    local part = { unpack(names, first, math.min(first + 999, #names)) }
    local got = redis.call('HMGET', r.key, unpack(part))
    for m = 1, #part do
      local offset, cum = (got[m] or ''):match('^(%d+) (%d+)$')
      if not offset then
        fail(WRONGTYPE)
      end
      r.ent[tonumber(part[m])] = { tonumber(offset), tonumber(cum) }
    end
  end
end

local function sl_entry(r, i)
  local x = r.ent[i]
  if not x then
    sl_fetch(r, i, i + 1)
    x = r.ent[i]
  end
  return x
end

function SL.load(h, key)
  local limit, window_ms = (h.p or ''):match('^(%d+) (%d+)$')
  if not (limit and h.b and h.u and h.h and h.e and h.z) then
    fail(WRONGTYPE)
  end
  local r = { key = key, params = sl_params(tonumber(limit), tonumber(window_ms)),
    base = tonumber(h.b), unit = tonumber(h.u), h = tonumber(h.h), e = tonumber(h.e),
    z = tonumber(h.z), ent = {}, dirty = {}, gone = {} }
  if r.e - r.h <= SL_READ_WHOLE then
    sl_fetch(r, r.h, r.e)
  end
  return r
end

-- Writes what changed: the entries gone, those new or changed; returns the other fields, and
-- the last (or only) batch of entries, which the caller's HSET writes with them.
function SL.save(params, r)
  for _, range in ipairs(r.gone) do
    for first = range[1], range[2] - 1, 1000 do
      local names = {}
      for n = first, math.min(first + 999, range[2] - 1) do
        names[#names + 1] = format('%d', n)
      end
      redis.call('HDEL', r.key, unpack(names))
    end
  end
  local batch = {}
  for i in pairs(r.dirty) do
    if i >= r.h and i < r.e then
      local x = r.ent[i]
      batch[#batch + 1] = format('%d', i)
      batch[#batch + 1] = format('%d %d', x[1], x[2])
      if #batch >= 1000 then
        redis.call('HSET', r.key, unpack(batch))
        batch = {}
      end
    end
  end
  local fields = { 'p', params.text, 'b', format('%d', r.base), 'u', format('%d', r.unit),
    'h', format('%d', r.h), 'e', format('%d', r.e), 'z', format('%d', r.z) }
  for i = 1, #batch do
    fields[#fields + 1] = batch[i]
  end
  return fields
end

local function sl_time(r, offset)
  return r.base + offset * r.unit
end

-- The units before entry i (i from h to e).
local function sl_before(r, i)
  if i == r.h then
    return r.z
  end
  return sl_entry(r, i - 1)[2]
end

-- scan: the first entry in the window (time + window > now), found as the module finds it
-- (galloping from the front, then halving), and the units of the entries from it on.
local function sl_scan(r, now, window)
  local h, e = r.h, r.e
  local function live(i)
    return sl_time(r, sl_entry(r, i)[1]) + window > now
  end
  local lo, hi, step = h, h, 0
  while hi < e and not live(hi) do
    lo = hi + 1
    step = step * 2 + 1
    hi = h + step
  end
  if hi > e then
    hi = e
  end
  while lo < hi do
    local mid = floor((lo + hi) / 2)
    if live(mid) then
      hi = mid
    else
      lo = mid + 1
    end
  end
  if lo >= e then
    return { active = 0 }
  end
  local before = sl_before(r, lo)
  return { first = lo, before = before, active = sl_entry(r, e - 1)[2] - before,
    oldest = sl_entry(r, lo)[1] }
end

-- Index::reaching: the first entry from `first` by which the entries from it hold at least
-- `units` units (`before`: the units before `first`).
local function sl_reaching(r, first, before, units)
  local lo, hi = first, r.e
  while lo < hi do
    local mid = floor((lo + hi) / 2)
    if sl_entry(r, mid)[2] - before >= units then
      hi = mid
    else
      lo = mid + 1
    end
  end
  return lo < r.e and lo or nil
end

-- regrid: an offset in another unit, rounded up (exact: the units are powers of two).
local function sl_regrid(offset, from, to)
  if from == to then
    return offset
  end
  return math.ceil(offset * from / to)
end

-- plan: where an admitted request at now goes (regrid.rs): a fresh log, the same one, or the
-- log re-encoded (a coarser unit, or rebased when the new offset would not fit 31 bits).
local function sl_plan(r, scan, p, now)
  local needed = sl_unit_for(p.window)
  if not scan.first then
    return { fresh = true, unit = needed, base = now, offset = 0, time = now }
  end
  local from, base = r.unit, r.base
  local newest = sl_entry(r, r.e - 1)[1]
  local function offset_in(to)
    local newest_us = base + sl_regrid(newest, from, to) * to
    local stamp = now > newest_us and now or newest_us
    return math.ceil((stamp - base) / to)
  end
  local to = from > needed and from or needed
  local k = offset_in(to)
  if k > MAX_OFFSET and to ~= needed then
    to = needed
    k = offset_in(to)
  end
  local shift = 0
  if k > MAX_OFFSET then
    shift = sl_regrid(scan.oldest, from, to)
    if k - MAX_OFFSET > shift then
      shift = k - MAX_OFFSET
    end
  end
  return { same = shift == 0 and from == to, from = from, shift = shift, unit = to,
    base = base + shift * to, offset = k - shift, time = base + k * to }
end

-- Every entry goes (the numbers start again at 1).
local function sl_clear(r)
  if r.e > r.h then
    r.gone[#r.gone + 1] = { r.h, r.e }
  end
  r.h, r.e, r.z = 1, 1, 0
end

-- Appends `cost` units at `offset`: to the newest entry when it has the same offset.
local function sl_push(r, offset, cost)
  local last = r.e - 1
  if last >= r.h and sl_entry(r, last)[1] == offset then
    local x = sl_entry(r, last)
    x[2] = x[2] + cost
    r.dirty[last] = true
    return
  end
  local cum = last >= r.h and sl_entry(r, last)[2] or r.z
  r.ent[r.e] = { offset, cum + cost }
  r.dirty[r.e] = true
  r.e = r.e + 1
end

-- admit: the expired entries dropped, the log laid out as planned, the request appended.
local function sl_admit(r, scan, plan, cost)
  if plan.fresh then
    sl_clear(r)
  else
    if scan.first > r.h then
      r.gone[#r.gone + 1] = { r.h, scan.first }
      r.h, r.z = scan.first, scan.before
    end
    if not plan.same then
      -- Every entry rewritten in the new unit, rounded up, moved `shift` units back (not
      -- below 0); the units counted from the log's origin again.
      sl_fetch(r, r.h, r.e)
      for i = r.h, r.e - 1 do
        local x = r.ent[i]
        local offset = sl_regrid(x[1], plan.from, plan.unit) - plan.shift
        x[1] = offset < 0 and 0 or (offset > MAX_OFFSET and MAX_OFFSET or offset)
        x[2] = x[2] - r.z
        r.dirty[i] = true
      end
      r.z = 0
    end
  end
  r.base, r.unit = plan.base, plan.unit
  sl_push(r, plan.offset, cost)
end

-- decide: the decision on the log as it is, and for an admitted request where it goes.
local function sl_decide(p, r, now, cost)
  local limit, window = p.limit, p.window
  local scan = sl_scan(r, now, window)
  local allowed = cost <= limit and scan.active + cost <= limit
  local newest, used, plan = nil, scan.active, nil
  if scan.first then
    newest = sl_time(r, sl_entry(r, r.e - 1)[1])
  end
  if allowed and cost > 0 then
    plan = sl_plan(r, scan, p, now)
    newest, used = plan.time, scan.active + cost
  end
  local reset = ZERO
  if newest then
    reset = { newest + window > now and newest + window - now or 0, 1 }
  end
  local retry = ZERO
  if not allowed then
    retry = nil
    if cost <= limit then
      retry = reset
      local at = sl_reaching(r, scan.first or r.e, scan.before or 0, scan.active + cost - limit)
      if at then
        local t = sl_time(r, sl_entry(r, at)[1]) + window
        retry = { t > now and t - now or 0, 1 }
      end
    end
  end
  return { allowed = allowed, limit = limit, remaining = used < limit and limit - used or 0,
    retry = retry, reset = reset }, scan, plan
end

function SL.check(p, stored, now, cost, write)
  local r, own = stored, nil
  if r and r.params.text ~= p.text then
    -- own_reset: a key stored under other parameters lives by them until a request under the
    -- new ones writes; once fresh under its own, it is gone, a fresh key.
    own = sl_decide(r.params, r, now, 0).reset
    if own[1] == 0 then
      sl_clear(r)
      r.base, r.unit = now, sl_unit_for(p.window)
    end
  end
  if not r then
    r = sl_empty(p, now, sl_unit_for(p.window))
  end
  local d, scan, plan = sl_decide(p, r, now, cost)
  if own and not (d.allowed and cost > 0) then
    -- within_own_reset: a call that writes nothing waits no longer than the key lives.
    if d.reset[1] > own[1] then
      d.reset = own
    end
    if d.retry and d.retry[1] > own[1] then
      d.retry = own
    end
  end
  if plan and write then
    sl_admit(r, scan, plan, cost)
  end
  return d, r
end

-- largest_cost: limit - the units in the window (none when the key is gone under its own).
function SL.largest(p, r, now)
  if not r then
    return p.limit
  end
  if r.params.text ~= p.text and sl_decide(r.params, r, now, 0).reset[1] == 0 then
    return p.limit
  end
  local active = sl_scan(r, now, p.window).active
  return active < p.limit and p.limit - active or 0
end

-- refund: the newest units in the window go, whole entries from the newest and part of the
-- last one reached; nothing left in the window, the log starts afresh.
function SL.refund(r, now, units)
  local scan = sl_scan(r, now, r.params.window)
  local given = scan.active < units and scan.active or units
  if given == 0 then
    return 0
  end
  local keep = scan.active - given
  if keep == 0 then
    sl_clear(r)
    return given, r
  end
  local at = sl_reaching(r, scan.first, scan.before, keep)
  if at + 1 < r.e then
    r.gone[#r.gone + 1] = { at + 1, r.e }
  end
  sl_entry(r, at)[2] = scan.before + keep
  r.dirty[at] = true
  r.e = at + 1
  return given, r
end
