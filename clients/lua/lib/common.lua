local floor, fmod, format = math.floor, math.fmod, string.format
local MAX_COUNT = 1000000000000 -- 10^12, the module's largest count
local MAX_DURATION_MS = 315360000000 -- ten 365-day years
local EXACT = 9007199254740992 -- 2^53: every integer below it is exact in a double
local MAX_NOW = EXACT - 1125899906842624 -- 2^53 - 2^50 µs (the year 2219): now + two durations stay exact
local LIMB = 16777216 -- 2^24, one limb of a wide integer
local WRONGTYPE = 'WRONGTYPE the key holds a value of another type (a ratelimit module key, or data '
  .. 'that is not a limiter\'s): the script backend keeps a limiter in a hash of its own'
local TOO_LARGE = 'ERR a time beyond 2^53 ms (285,000 years) needs the ratelimit module: a script '
  .. 'replies exact integers below 2^53 only'
-- The algorithm each layout tag belongs to, as the errors name it.
local COMMANDS = { gcra1 = 'RL.GCRA', tb1 = 'RL.TOKENBUCKET', fw1 = 'RL.FIXEDWINDOW',
  lb1 = 'RL.LEAKYBUCKET', sw1 = 'RL.SLIDINGWINDOW', sl1 = 'RL.SLIDINGLOG', wu1 = 'RL.WARMUP',
  cc1 = 'RL.CONCURRENCY.ACQUIRE' }

-- An error reply: raised with error(), turned into the reply by run() (see the end).
local function fail(message)
  error({ rl = message })
end

-- Exact non-negative integers. A value below 2^53 is a plain number; a larger one is a table of
-- base-2^24 limbs, least significant first, with no leading zero limb (see norm). Every result
-- below 2^53 is a number again, so the common case is plain double arithmetic.

-- x (a number that is a whole number of any size, or a table) as limbs.
local function limbs(x)
  if type(x) == 'table' then
    return x
  end
  local t, i = {}, 1
  repeat
    local r = fmod(x, LIMB)
    t[i] = r
    x = (x - r) / LIMB
    i = i + 1
  until x == 0
  return t
end

-- Limbs without leading zeros, as a number when below 2^53.
local function norm(t)
  local n = #t
  while n > 1 and t[n] == 0 do
    t[n] = nil
    n = n - 1
  end
  if n <= 2 or (n == 3 and t[3] < 32) then
    local v = 0
    for i = n, 1, -1 do
      v = v * LIMB + t[i]
    end
    return v
  end
  return t
end

-- A double near x (exact below 2^53).
local function approx(x)
  if type(x) == 'number' then
    return x
  end
  local v = 0
  for i = #x, 1, -1 do
    v = v * LIMB + x[i]
  end
  return v
end

local function cmp(a, b)
  if type(a) == 'number' and type(b) == 'number' then
    return a < b and -1 or (a > b and 1 or 0)
  end
  a, b = limbs(a), limbs(b)
  if #a ~= #b then
    return #a < #b and -1 or 1
  end
  for i = #a, 1, -1 do
    if a[i] ~= b[i] then
      return a[i] < b[i] and -1 or 1
    end
  end
  return 0
end

local function add(a, b)
  if type(a) == 'number' and type(b) == 'number' then
    local s = a + b
    if s < EXACT then
      return s
    end
  end
  a, b = limbs(a), limbs(b)
  local t, carry = {}, 0
  for i = 1, (#a > #b and #a or #b) do
    local s = (a[i] or 0) + (b[i] or 0) + carry
    if s >= LIMB then
      t[i], carry = s - LIMB, 1
    else
      t[i], carry = s, 0
    end
  end
  t[#t + 1] = carry
  return norm(t)
end

-- a - b, or 0 when b > a (the module's saturating_sub).
local function sub(a, b)
  if type(a) == 'number' and type(b) == 'number' and a < EXACT then
    return a > b and a - b or 0
  end
  if cmp(a, b) <= 0 then
    return 0
  end
  a, b = limbs(a), limbs(b)
  local t, borrow = {}, 0
  for i = 1, #a do
    local s = a[i] - (b[i] or 0) - borrow
    if s < 0 then
      t[i], borrow = s + LIMB, 1
    else
      t[i], borrow = s, 0
    end
  end
  return norm(t)
end

local function mul(a, b)
  if type(a) == 'number' and type(b) == 'number' then
    local p = a * b
    if p < EXACT then
      return p
    end
  end
  a, b = limbs(a), limbs(b)
  local na, nb, t = #a, #b, {}
  for i = 1, na + nb do
    t[i] = 0
  end
  for i = 1, na do
    local ai, carry = a[i], 0
    if ai ~= 0 then
      for j = 1, nb do
        local s = t[i + j - 1] + ai * b[j] + carry -- below 2^49 + 2^25: exact
        carry = floor(s / LIMB)
        t[i + j - 1] = s - carry * LIMB
      end
      local k = i + nb
      while carry > 0 do
        local s = t[k] + carry
        carry = floor(s / LIMB)
        t[k] = s - carry * LIMB
        k = k + 1
      end
    end
  end
  return norm(t)
end

-- floor(a / d) and a mod d, d a number from 1 to 2^53 - 1.
local function divmod(a, d)
  local q = 0
  while type(a) == 'table' do
    -- An estimate of the quotient that is never above it (the double's errors are far below
    -- the 2^-40 taken off), then the exact remainder; a few rounds at most.
    local e = floor(approx(a) / d * (1 - 2 ^ -40))
    if e < 1 then
      e = 1
    end
    q = add(q, e)
    a = sub(a, mul(e, d))
  end
  local r = fmod(a, d) -- fmod is exact
  return add(q, (a - r) / d), r
end

local function ceildiv(a, d)
  local q, r = divmod(a, d)
  if r > 0 then
    return add(q, 1)
  end
  return q
end

-- floor(a / d) and a mod d for any d >= 1, a number or limbs: as divmod, an estimate of the
-- quotient that is never above it, then the exact remainder; a few rounds.
local function divmod_any(a, d)
  if type(d) == 'number' then
    return divmod(a, d)
  end
  local q = 0
  while cmp(a, d) >= 0 do
    local e = floor(approx(a) / approx(d) * (1 - 2 ^ -40))
    if e < 1 then
      e = 1
    end
    q = add(q, e)
    a = sub(a, mul(e, d))
  end
  return q, a
end

-- ceil(a × b / d), exact (warmup.rs's mul_div_ceil).
local function mul_div_ceil(a, b, d)
  local q, r = divmod_any(mul(a, b), d)
  if cmp(r, 0) > 0 then
    return add(q, 1)
  end
  return q
end

local function min(a, b)
  return cmp(a, b) <= 0 and a or b
end

local function max(a, b)
  return cmp(a, b) >= 0 and a or b
end

-- Decimal text of a value, and back (a hash keeps the state as text).
local function text(x)
  if type(x) == 'number' then
    return format('%d', x)
  end
  local parts = {}
  while type(x) == 'table' do
    local q, r = divmod(x, 10000000)
    parts[#parts + 1] = format('%07d', r)
    x = q
  end
  local s = format('%d', x)
  for i = #parts, 1, -1 do
    s = s .. parts[i]
  end
  return s
end

local function value(s)
  if #s <= 15 then
    return tonumber(s)
  end
  local head = #s % 7
  if head == 0 then
    head = 7
  end
  local v = tonumber(s:sub(1, head))
  for i = head + 1, #s, 7 do
    v = add(mul(v, 10000000), tonumber(s:sub(i, i + 6)))
  end
  return v
end

-- Spans of time: {num, den}, num / den µs, as the module's Span. Whole ms rounded up, as
-- Span::ceil_ms; a reply's time must be below 2^53 ms.
local ZERO = { 0, 1 }

local function ceil_ms(span)
  local ms = ceildiv(span[1], span[2] * 1000)
  if type(ms) ~= 'number' then
    fail(TOO_LARGE)
  end
  return ms
end

-- The argument grammar (src/args/mod.rs): the same values accepted, the same errors.
local function count(s, arg, least, most)
  if (s == '0' or s:find('^[1-9][0-9]*$')) and #s <= 13 then
    local n = tonumber(s)
    if n >= least and n <= most then
      return n
    end
  end
  fail(format('ERR invalid %s: expected an integer from %d to %d', arg, least, most))
end

local SCALES = { [''] = 1, ms = 1, s = 1000, m = 60000, h = 3600000, d = 86400000 }

local function duration_ms(s, arg)
  local number, unit = s:match('^([0-9]*)(.*)$')
  local scale = SCALES[unit:lower()]
  if scale and (number == '0' or number:find('^[1-9]')) and #number <= 15 then
    local ms = tonumber(number) * scale
    if ms >= 1 and ms <= MAX_DURATION_MS then
      return ms
    end
  end
  fail(format('ERR invalid %s: expected a duration from 1ms to 10 years (%dms): an integer with '
    .. 'an optional unit ms, s, m, h or d (1500, 1500ms, 90s, 1m, 24h, 7d)', arg, MAX_DURATION_MS))
end

-- A client's token as an error quotes it: printable ASCII but ', at most 32 bytes.
local function quote(s)
  local q = s:sub(1, 32):gsub("[^\33-\38\40-\126]", '?')
  if #s > 32 then
    q = q .. '...'
  end
  return q
end

local function arity(usage)
  local name = usage:match('^(%S+)')
  fail(format("ERR wrong number of arguments for '%s': expected %s", name, usage))
end

-- The options after an admission command's parameters, args[first..last], args[first] being
-- argument number `position` of the call (the key is 1); `flag` is the command's own flag
-- (INTERVAL), or its own option with a value as { word, expected } (COLDFACTOR), or nil. As
-- parse_options: in any order, any case, each at most once. Returns the options, and whether
-- the flag was given (or the option's value, unparsed).
local function options(args, first, last, position, flag, accepted)
  local o = { cost = 1, dryrun = false, shadow = false }
  if first > last then
    return o, false -- none: the common case, without the parser's closure
  end
  local seen_cost, has_flag = false, false
  local valued
  if type(flag) == 'table' then
    valued, flag = flag, nil
  end
  local i = first
  local function value_of(option, expected, given)
    if given then
      fail('ERR ' .. option .. ' given more than once')
    end
    if i + 1 > last then
      fail('ERR ' .. option .. ' needs a value: ' .. expected)
    end
    return args[i + 1]
  end
  while i <= last do
    local word = args[i]:upper()
    if word == 'COST' then
      local v = value_of('COST', 'an integer from 0 to 1000000000000', seen_cost)
      seen_cost = true
      o.cost = count(v, 'COST', 0, MAX_COUNT)
      i = i + 2
    elseif word == 'ATMOST' then
      local v = value_of('ATMOST', 'an integer from 1 to 1000000000000', o.atmost ~= nil)
      o.atmost = count(v, 'ATMOST', 1, MAX_COUNT)
      i = i + 2
    elseif word == 'BLOCK' then
      local v = value_of('BLOCK', 'a duration from 1ms to 10 years', o.block_ms ~= nil)
      o.block_ms = duration_ms(v, 'BLOCK')
      i = i + 2
    elseif word == 'SHADOW' then
      if o.shadow then
        fail('ERR SHADOW given more than once')
      end
      o.shadow = true
      i = i + 1
    elseif valued and word == valued[1] then
      has_flag = value_of(valued[1], valued[2], has_flag)
      i = i + 2
    elseif word == 'DRYRUN' then
      if o.dryrun then
        fail('ERR DRYRUN given more than once')
      end
      o.dryrun = true
      i = i + 1
    elseif flag and word == flag then
      if has_flag then
        fail('ERR ' .. flag .. ' given more than once')
      end
      has_flag = true
      i = i + 1
    else
      fail(format("ERR unknown option '%s' at argument %d: expected %s", quote(args[i]),
        position + i - first, accepted))
    end
  end
  if seen_cost and o.atmost then
    fail('ERR COST and ATMOST cannot be used together: COST n takes exactly n units, ATMOST max as '
      .. 'many as the key allows now, up to max')
  end
  return o, has_flag
end

-- The arguments without the test clock: a trailing `NOW <µs>` pair, which only tests send.
-- Returns the number of arguments left and the reading (nil: read TIME when needed).
local function test_clock(args)
  local n = #args
  if n >= 2 and args[n - 1] == 'NOW' then
    local us = args[n]
    if not us:find('^[0-9]+$') or #us > 16 or tonumber(us) >= MAX_NOW then
      fail('ERR invalid NOW: expected µs since the Unix epoch, below 2^53 - 2^50')
    end
    return n - 2, tonumber(us)
  end
  return n, nil
end

-- The clock: the test's reading, else the server's TIME in µs.
local function clock(now)
  if now then
    return now
  end
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if now >= MAX_NOW then
    fail('ERR the server clock is past the year 2219, beyond the script backend\'s exact range')
  end
  return now
end

-- redis.pcall's reply `got` to a read of `key` whose first value is the layout: the reply; nil
-- for a missing key; for a key of another type, `other(key)` if it gives a value (a caller's own
-- reading of it), else the refusal, as for a key without the layout.
local function fetched(got, key, other)
  if got.err then
    if got.err:find('^WRONGTYPE') then
      local seen = other(key)
      if seen then
        return seen
      end
      fail(WRONGTYPE)
    end
    fail(got.err)
  end
  if not got[1] then
    if redis.call('EXISTS', key) == 1 then
      fail(WRONGTYPE)
    end
    return nil
  end
  return got
end

-- A lease key (a sorted set, lib/concurrency.lua) read as a hash: { a = 'cc1' }, for the
-- caller's error.
local function lease_layout(key)
  if redis.pcall('ZSCORE', key, 'a') == '-1' then
    return { a = 'cc1' }
  end
  return nil
end

-- The key's fields `names` (the first is the layout tag `a`) as a table, or nil for a missing
-- key. A key of another type, or a hash that is not a limiter's, is refused; a lease key is
-- read as { a = 'cc1' }, for its caller's error.
local function read(key, names)
  local got = fetched(redis.pcall('HMGET', key, unpack(names)), key, lease_layout)
  if not got or got.a then
    return got
  end
  local h = {}
  for i = 1, #names do
    h[names[i]] = got[i] or nil
  end
  return h
end

-- The key holds `tag`'s state, or the error the module gives for another algorithm's key.
local function expect(h, tag, command)
  if h.a ~= tag then
    local other = COMMANDS[h.a]
    if other then
      fail(format('ERR the key holds %s state, not %s: use %s on it, or another key', other, command,
        other))
    end
    fail(WRONGTYPE)
  end
end

-- A BLOCK in force until `until_us` refuses (penalty::apply).
local function penalize(d, until_us, now)
  if until_us <= now then
    return
  end
  local left = until_us - now
  d.allowed = false
  d.remaining = 0
  d.retry = { left, 1 }
  d.delay = nil
  if cmp(left, ceildiv(d.reset[1], d.reset[2])) > 0 then
    d.reset = { left, 1 }
  end
end

-- The key's expiry after a write: reset_after from now, or gone when it is fresh.
local function expire(key, reset)
  if reset[1] == 0 then
    redis.call('DEL', key)
  else
    redis.call('PEXPIRE', key, ceil_ms(reset))
  end
end

-- An admission request of algorithm A on `key` (commands/admission.rs and storage/key.rs):
-- ATMOST's grant, a BLOCK in force or started, the write and the expiry; the reply.
-- A: tag, command, fields (HMGET names), load(h, key) -> stored, check, largest, save; and
-- delay: the reply has RL.LEAKYBUCKET's sixth field, d.delay (nil: -1).
-- SHADOW: a denial (which writes nothing and starts no BLOCK) is answered as admitted, its
-- other fields the denial's, and the reply ends with shadow_denied (0 or 1).
local function admit(A, key, params, o, now)
  local h = read(key, A.fields)
  local stored
  if h then
    expect(h, A.tag, A.command)
    stored = A.load(h, key)
  end
  local cost = o.atmost and 1 or o.cost -- ATMOST asks for at least one unit
  local write = cost > 0 and not o.dryrun
  local take, grant = o.cost, nil
  if o.atmost then
    grant = A.largest(params, stored, now)
    if grant > o.atmost then
      grant = o.atmost
    end
    take = grant > 0 and grant or 1
  end
  local blocked = h and h.k and value(h.k) or 0
  local d, state, wrote, block_until
  if stored and cmp(blocked, now) > 0 then
    d = A.check(params, stored, now, take, false)
    penalize(d, blocked, now)
  else
    d, state = A.check(params, stored, now, take, write)
    if d.allowed and write then
      wrote = true
    elseif stored and o.block_ms and not o.shadow and not d.allowed and write and d.retry then
      block_until = now + o.block_ms * 1000
      penalize(d, block_until, now)
      wrote = true
    end
  end
  local reply = { d.allowed and 1 or 0, d.limit, d.remaining, d.retry and ceil_ms(d.retry) or -1,
    ceil_ms(d.reset) }
  if A.delay then
    reply[#reply + 1] = d.delay and ceil_ms(d.delay) or -1
  end
  if grant then
    reply[#reply + 1] = d.allowed and grant or 0
  end
  if o.shadow then -- after the command's own fields and granted
    reply[1] = 1
    reply[#reply + 1] = d.allowed and 0 or 1
  end
  if wrote then
    if block_until then
      redis.call('HSET', key, 'k', text(block_until))
    else
      redis.call('HSET', key, 'a', A.tag, unpack(A.save(params, state)))
      if h and h.k then
        redis.call('HDEL', key, 'k')
      end
    end
    expire(key, d.reset)
  end
  return reply
end

-- Runs main(), turning a fail() into its error reply. A command's error (a redis.call refused:
-- READONLY on a replica, OOM, the ACL) reaches this pcall as its text, code first ("READONLY
-- You can't ..."): it is replied as it is, since raised again the server would take it for a
-- Lua error and put "ERR " before it ("ERR READONLY ...": a client no longer sees a read-only
-- replica, and an error read "ERR ERR ..."), with this line's number instead of the command's.
-- Anything else (a Lua error: a bug) is raised again, with its own position in its text.
local function run(main)
  local ok, result = pcall(main)
  if ok then
    return result
  end
  if type(result) == 'table' and result.rl then
    return redis.error_reply(result.rl)
  end
  if type(result) == 'string' and result:find('^%u+ ') then
    return redis.error_reply(result)
  end
  error(result, 0)
end
