-- RL.LIMIT over rules the application defines (algorithms/src/rule_set.rs): every rule checked
-- at once, all or nothing, the binding rule's reply. The module keeps a policy key's rules in one
-- key; the scripts keep rule i's state in the call's key i (KEYS[i], the keys sharing a hash tag,
-- so that they share a slot), as that algorithm's script keeps it, with `g`: the generation of the
-- write that last wrote the rule keys together, and on the first key `r`: how many rule keys that
-- write wrote (clients/lua/README.md, "Policies"). A call may name more keys than it has
-- rules (an earlier, longer policy's), and must name every key the first key's `r` counts.

-- Every field a rule key may hold but a log's entries: an algorithm's, `g`, and the first key's `r`.
local POLICY_FIELDS = { unpack(FIELDS) }
POLICY_FIELDS[#POLICY_FIELDS + 1] = 'r'

-- The rules a policy may name, as RL.POLICY.SET parses them (src/args/rules.rs): the algorithm,
-- its positional arguments, its flag (INTERVAL) or its option with a value (COLDFACTOR).
local RULE_KINDS = {
  GCRA = { A = GCRA, n = 3, usage = 'burst rate period', parse = function(w)
    return gcra_params(count(w[1], 'burst', 1, MAX_COUNT), count(w[2], 'rate', 1, MAX_COUNT),
      duration_ms(w[3], 'period'))
  end },
  TOKENBUCKET = { A = TB, n = 3, flag = 'INTERVAL', usage = 'capacity refill_amount refill_period [INTERVAL]',
    parse = function(w, interval)
      return tb_params(count(w[1], 'capacity', 1, MAX_COUNT), count(w[2], 'refill_amount', 1, MAX_COUNT),
        duration_ms(w[3], 'refill_period'), interval)
    end },
  LEAKYBUCKET = { A = LB, n = 3, usage = 'capacity leak_amount leak_period', parse = function(w)
    return gcra_params(count(w[1], 'capacity', 1, MAX_COUNT), count(w[2], 'leak_amount', 1, MAX_COUNT),
      duration_ms(w[3], 'leak_period'))
  end },
  FIXEDWINDOW = { A = FW, n = 2, usage = 'limit window', parse = function(w)
    return fw_params(count(w[1], 'limit', 1, MAX_COUNT), duration_ms(w[2], 'window'))
  end },
  SLIDINGWINDOW = { A = SW, n = 2, usage = 'limit window', parse = function(w)
    return sw_params(count(w[1], 'limit', 1, MAX_COUNT), duration_ms(w[2], 'window'))
  end },
  SLIDINGLOG = { A = SL, n = 2, usage = 'limit window', parse = function(w)
    return sl_params(sl_limit(w[1]), duration_ms(w[2], 'window'))
  end },
  WARMUP = { A = WU, n = 3, valued = 'COLDFACTOR', usage = 'rate period warmup [COLDFACTOR factor]',
    parse = function(w)
      if #w == 4 then
        fail('ERR COLDFACTOR needs a value: an integer from 2 to 10')
      end
      local rate = count(w[1], 'rate', 1, MAX_COUNT)
      local period_ms = duration_ms(w[2], 'period')
      local warmup_ms = duration_ms(w[3], 'warmup')
      return wu_params(rate, period_ms, warmup_ms, w[5] and count(w[5], 'COLDFACTOR', 2, 10) or 3)
    end },
}

-- How many rules the call gives, and the index of their first word: the number before them when
-- there is one (a call that names more keys than rules), else one rule per key.
local function policy_count(args, n, keys)
  local word = args[1]
  if n < 1 or not word:find('^[0-9]+$') then
    return keys, 1
  end
  local wanted = tonumber(word)
  if #word > 2 or wanted < 1 or wanted > keys then
    fail(format('ERR the rule count before the rules must be 1 to the number of keys, %d: got %s', keys,
      quote(word)))
  end
  return wanted, 2
end

-- `wanted` rules from args[start..n], each `[SHADOW] ALGORITHM arguments...`, with RL.POLICY.SET's
-- errors and positions (as `RL.POLICY.SET name rule ...` counts them). Returns the rules
-- ({ A, params, shadow }) and the index of the first word after them.
local function policy_rules(args, n, wanted, start)
  local rules, i, enforced = {}, start, false
  while #rules < wanted do
    if i > n then
      fail(format('ERR %d rules expected, %d given: the script takes one key per rule, or more keys (an earlier '
        .. 'policy\'s) and the number of rules before them', wanted, #rules))
    end
    local position, word, shadow = i + 2 - start, args[i], false
    if word:upper() == 'SHADOW' then
      if i + 1 > n then
        fail(format('ERR SHADOW at argument %d must be followed by a rule, as in SHADOW GCRA 5 5 1s',
          position))
      end
      shadow, i, position = true, i + 1, position + 1
      word = args[i]
    end
    local name = word:upper()
    name = name:match('^RL%.(.*)$') or name
    local kind = RULE_KINDS[name]
    if not kind then
      fail(format("ERR unknown algorithm '%s' at argument %d: expected a rule, one of GCRA, TOKENBUCKET, "
        .. 'LEAKYBUCKET, FIXEDWINDOW, SLIDINGWINDOW, SLIDINGLOG or WARMUP with its arguments', quote(word),
        position))
    end
    local take = kind.n
    if kind.valued and i + take + 1 <= n and args[i + take + 1]:upper() == kind.valued then
      take = (take + 2 < n - i) and take + 2 or n - i
    end
    if i + take > n then
      fail(format('ERR the %s rule at argument %d needs its arguments: %s %s', name, position, name, kind.usage))
    end
    local words = {}
    for j = 1, take do
      words[j] = args[i + j]
    end
    i = i + take + 1
    local flag = false
    if kind.flag and i <= n and args[i]:upper() == kind.flag then
      flag, i = true, i + 1
    end
    local ok, params = pcall(kind.parse, words, flag)
    if not ok then
      if type(params) == 'table' and params.rl then
        fail(format('ERR the %s rule at argument %d: %s', name, position, (params.rl:gsub('^ERR ', ''))))
      end
      error(params, 0)
    end
    rules[#rules + 1] = { A = kind.A, params = params, shadow = shadow }
    enforced = enforced or not shadow
  end
  if not enforced then
    fail('ERR a policy needs at least one rule without SHADOW (to try a whole policy, call RL.LIMIT '
      .. 'with SHADOW)')
  end
  return rules, i
end

-- The rule keys' states as the module's one key holds them: key i counts when the first key
-- exists and key i was written with it (the same generation `g`), so a key an earlier, longer
-- policy left, or one that outlived the first key, is not read (nor its BLOCK). A call must name
-- every key the first key's `r` counts (its generation's), or it is refused: RULEKEYS r, and the
-- packages call again with that many. Returns the states in order ({ A, h, key, stored }, from
-- the first key on) and the highest generation in any of the keys.
local function policy_read(keys)
  local hs, top = {}, 0
  for i = 1, #keys do
    local h = read(keys[i], POLICY_FIELDS)
    if h then
      if not ALGORITHMS[h.a] then
        fail(WRONGTYPE)
      end
      local g = tonumber(h.g or '0') or 0
      if g > top then
        top = g
      end
    end
    hs[i] = h
    local held = i == 1 and h and tonumber(h.r or '')
    if held and held > #keys then
      fail(format('RULEKEYS %d the first key holds a policy of %d rule keys, and the call names %d: call '
        .. 'again with all %d (clients/lua/README.md, Policies)', held, held, #keys, held))
    end
  end
  local old, g = {}, hs[1] and hs[1].g
  for i = 1, #keys do
    local h = hs[i]
    if not (g and h and h.g == g) then
      break
    end
    local A = ALGORITHMS[h.a]
    old[i] = { A = A, h = h, key = keys[i], stored = A.load(h, keys[i]) }
  end
  return old, top
end

-- A rule's period or window in ms: what makes two rules of one algorithm count the same span.
local function policy_period(params)
  return params.period_ms or params.window_ms
end

-- Which stored state each rule takes (`matches`): one state to one rule at most, in three passes
-- over the rules still unmatched, each in the policy's order: an identical rule, a rule over the
-- same period or window, the first of the same algorithm.
local POLICY_PASSES = {
  function(o, r) return o.stored.params.text == r.params.text end,
  function(o, r) return policy_period(o.stored.params) == policy_period(r.params) end,
  function() return true end,
}

local function policy_matches(rules, old)
  local found, used = {}, {}
  for _, pass in ipairs(POLICY_PASSES) do
    local left = false
    for i, r in ipairs(rules) do
      if not found[i] then
        for j, o in ipairs(old) do
          if not used[j] and o.A == r.A and pass(o, r) then
            found[i], used[j] = j, true
            break
          end
        end
        left = left or not found[i]
      end
    end
    if not left then
      break
    end
  end
  return found
end

local function span_us(span)
  return ceildiv(span[1], span[2])
end

-- binds_before: a refusal over an admission; between refusals, the longer (never is longest);
-- between admissions, fewer remaining.
local function binds_before(a, b)
  if a.allowed ~= b.allowed then
    return not a.allowed
  end
  if a.allowed then
    return a.remaining < b.remaining
  end
  if not b.retry then
    return false
  end
  return not a.retry or cmp(span_us(a.retry), span_us(b.retry)) > 0
end

local function later(reset, span)
  return not reset or cmp(span_us(span), span_us(reset)) > 0
end

-- step_shadow without the write: every rule asked on its own state. Returns the request's
-- decision (the binding rule's, `allowed` all the enforced rules', `reset` the longest of all),
-- the binding rule's index and own decision, and whether a shadow rule refused.
local function policy_decide(rules, old, found, now, cost)
  local binding, own, allowed, reset, shadow_denied = nil, nil, true, nil, false
  local function stored(i)
    return found[i] and old[found[i]].stored or nil
  end
  for i, r in ipairs(rules) do
    local d = r.A.check(r.params, stored(i), now, cost, false)
    if later(reset, d.reset) then
      reset = d.reset
    end
    if r.shadow then
      shadow_denied = shadow_denied or not d.allowed
    else
      allowed = allowed and d.allowed
      if not own or binds_before(d, own) then
        binding, own = i, d
      end
    end
  end
  if not allowed and cost > 0 then
    -- Refused, the request takes nothing: the key is fresh when every rule is, each as a request
    -- of no units sees it.
    reset = nil
    for i, r in ipairs(rules) do
      local d = r.A.check(r.params, stored(i), now, 0, false)
      if later(reset, d.reset) then
        reset = d.reset
      end
    end
  end
  local d = { allowed = allowed, limit = own.limit, remaining = own.remaining, retry = own.retry,
    reset = reset }
  return d, binding, own, shadow_denied
end

-- Every key's TTL after a write: the key's reset (`expire`), or every key gone when it is fresh.
local function policy_expire(keys, n, reset)
  for i = 1, n do
    expire(keys[i], reset)
  end
end

-- HSET in batches: Lua's unpack takes a few thousand values at most.
local function hset_all(key, words)
  for first = 1, #words, 1000 do
    redis.call('HSET', key, unpack(words, first, math.min(first + 999, #words)))
  end
end

-- An admitted request's write (step_shadow's): every rule counts it, each on the state it took;
-- a shadow rule that refused keeps its state as it was, or starts afresh (shadow_fresh: a
-- request of no units', or of one unit for an algorithm that keeps nothing for none) when it had
-- none or the policy changed it. A state that moved to another key,
-- or a key that held none of its rule's, is written afresh; a log's entries move with it.
local function policy_write(keys, rules, old, found, now, cost, g)
  local raw = {}
  for i, r in ipairs(rules) do
    local j = found[i]
    if j and j ~= i and r.A == SL then
      raw[i] = redis.call('HGETALL', keys[j]) -- before any key is written
      for f = #raw[i] - 1, 1, -2 do
        -- Not the first key's count, nor a BLOCK: an admission ends any (a clock stepped back
        -- would find it in force again).
        if raw[i][f] == 'r' or raw[i][f] == 'k' then
          table.remove(raw[i], f + 1)
          table.remove(raw[i], f)
        end
      end
    end
  end
  for i, r in ipairs(rules) do
    local from = found[i] and old[found[i]]
    if found[i] ~= i then
      redis.call('DEL', keys[i])
      if raw[i] then
        hset_all(keys[i], raw[i])
        from = { h = from.h, key = keys[i], stored = SL.load(read(keys[i], FIELDS), keys[i]) }
      end
    end
    local stored = from and from.stored
    local d, state = r.A.check(r.params, stored, now, cost, true)
    if not d.allowed then
      if stored and stored.params.text == r.params.text then
        -- As it was: a log read again (a check may have laid out its entries anew in memory).
        state = r.A == SL and SL.load(from.h, from.key) or stored
      else
        -- Fresh, or changed by the policy: its state is in its old parameters' units.
        local least = (r.A == FW or r.A == SW or r.A == SL) and 1 or 0
        d, state = r.A.check(r.params, nil, now, least, true)
      end
    end
    local words = r.A.save(r.params, state)
    words[#words + 1] = 'a'
    words[#words + 1] = r.A.tag
    words[#words + 1] = 'g'
    words[#words + 1] = format('%d', g)
    if i == 1 then
      words[#words + 1] = 'r'
      words[#words + 1] = format('%d', #rules)
    end
    hset_all(keys[i], words)
    if found[i] == i and from.h.k then
      redis.call('HDEL', keys[i], 'k')
    end
  end
end

-- RL.LIMIT (commands/limit.rs, over admission::run_with and Key::update): ATMOST's grant, a BLOCK
-- in force or started (it locks every rule), the write and the keys' expiry; the binding rule's
-- reply with its index, then `granted`, then `shadow_denied`.
local function policy_admit(keys, rules, o, now)
  local old, top = policy_read(keys)
  local found = policy_matches(rules, old)
  local cost = o.atmost and 1 or o.cost
  local write = cost > 0 and not o.dryrun
  local take, grant = o.cost, nil
  if o.atmost then
    grant = MAX_COUNT
    for i, r in ipairs(rules) do
      if not r.shadow then
        local most = r.A.largest(r.params, found[i] and old[found[i]].stored or nil, now)
        if cmp(most, grant) < 0 then
          grant = most
        end
      end
    end
    if grant > o.atmost then
      grant = o.atmost
    end
    take = grant > 0 and grant or 1
  end
  local blocked = old[1] and old[1].h.k and value(old[1].h.k) or 0
  local d, binding, own, shadow_rules = policy_decide(rules, old, found, now, take)
  local wrote, block_until = false, nil
  if old[1] and cmp(blocked, now) > 0 then
    penalize(d, blocked, now)
    block_until = blocked
  elseif d.allowed and write then
    wrote = true
  elseif old[1] and o.block_ms and not o.shadow and not d.allowed and write and d.retry then
    block_until = now + o.block_ms * 1000
    penalize(d, block_until, now)
    wrote = true
  end
  if block_until then
    penalize(own, block_until, now)
  end
  local reply = { own.allowed and 1 or 0, own.limit, own.remaining, own.retry and ceil_ms(own.retry) or -1,
    ceil_ms(own.reset), binding - 1 }
  if grant then
    reply[#reply + 1] = d.allowed and grant or 0
  end
  if o.shadow then
    reply[1] = 1
    reply[#reply + 1] = (not own.allowed or shadow_rules) and 1 or 0
  end
  if wrote then
    local reset = ceil_ms(d.reset) -- refused before anything is written when beyond 2^53 ms
    if block_until then
      for i = 1, #old do
        redis.call('HSET', keys[i], 'k', text(block_until))
      end
      policy_expire(keys, #old, d.reset)
    else
      -- The generation: above every key's, and the clock's µs, so that a key left from before
      -- the first key last expired cannot pass for one of this write.
      policy_write(keys, rules, old, found, now, take, top < now and now or top + 1)
      policy_expire(keys, #rules, d.reset)
      if #old > #rules then
        -- The states of the rules the policy no longer has (any a rule took moved to its key).
        redis.call('DEL', unpack(keys, #rules + 1, #old))
      end
    end
  end
  return reply
end

-- RL.REFUND on a policy's keys (Limit::refund): every rule the keys hold gets the units back,
-- each up to what it holds as taken, under the parameters it was written with; the reply is the
-- most any rule gave back. The keys' expiry is set anew as of now (a BLOCK in force included).
local function policy_refund(keys, units, dryrun, now)
  local old = policy_read(keys)
  local given, after = 0, {}
  for j, o in ipairs(old) do
    local g, state = o.A.refund(o.stored, now, units)
    if g > given then
      given = g
    end
    after[j] = state
  end
  if dryrun or given == 0 then
    return given
  end
  local reset
  for j, o in ipairs(old) do
    local state = after[j] or o.stored
    state.params = o.stored.params
    local d = o.A.check(o.stored.params, state, now, 0, false)
    if later(reset, d.reset) then
      reset = d.reset
    end
  end
  local d = { reset = reset }
  if old[1].h.k then
    penalize(d, value(old[1].h.k), now)
  end
  if d.reset[1] ~= 0 then
    ceil_ms(d.reset) -- refused before anything is written when beyond 2^53 ms
  end
  for j, o in ipairs(old) do
    if after[j] then
      hset_all(o.key, o.A.save(o.stored.params, after[j]))
    end
  end
  policy_expire(keys, #old, d.reset)
  return given
end
