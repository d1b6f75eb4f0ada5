-- A key of any admission script, as RL.REFUND and a policy read one: its algorithm by layout
-- tag, and every field the algorithms keep but a log's entries (and `g`, a policy rule key's
-- generation: lib/policy.lua).
local ALGORITHMS = { gcra1 = GCRA, tb1 = TB, fw1 = FW, lb1 = LB, sw1 = SW, sl1 = SL, wu1 = WU }
local FIELDS = { 'a', 'k', 'p', 't', 'f', 'n', 'u', 's', 'c', 'v', 'b', 'h', 'e', 'z', 'x', 'g' }

-- RL.REFUND's arguments, `units [DRYRUN]`: the units, whether DRYRUN, and the clock.
local function refund_args(args)
  local n, now = test_clock(args)
  if n < 1 or n > 2 then
    arity('RL.REFUND key units [DRYRUN]')
  end
  local units = count(args[1], 'units', 0, MAX_COUNT)
  if n == 2 and args[2]:upper() ~= 'DRYRUN' then
    fail(format("ERR unknown option '%s' at argument 3: expected DRYRUN", quote(args[2])))
  end
  return units, n == 2, clock(now)
end
