"""The script backend's scripts (clients/lua/*.lua) give the module's replies, field by field
(issue 28; docs/managed.md, the script backend).

One redis-server with the module and its debug clock; each step runs the module's command on key
``m:…`` at the debug clock and the script on key ``s:…`` with the test-only ``NOW <µs>`` pair at
the same instant, in one MULTI/EXEC, and asserts the replies equal (or the same error text), both
keys' TTLs the reply's reset_after_ms, and the state the module's RL.INSPECT shows (to the µs, or
finer: stored permits in millionths) equal to the script's hash read the same way. The debug
clock is set in whole ms (``RL.DEBUG.CLOCK SET`` takes ms), so the random sequences move in ms;
the state check sees what the ms replies cannot yet, and the µs-exact cases the module's own
tests fix are checked on the scripts alone (``test_microseconds``).

Key TTLs follow the real clock for both (docs/commands.md, RL.DEBUG.CLOCK), so the PTTLs are
compared right after the step that wrote them and then both keys are PERSISTed, in the step's
MULTI/EXEC: a key must not expire in real time while the frozen clock says it still counts (both
backends would agree, but not at the same real instant). Redis 7.2+ and Valkey expire nothing
within one; Redis 7.0 reads its clock at each command, so the transaction is timed by the
server's TIME before and after it (``timed_transaction``), and the TTLs may differ by that time
and no more. Expiry itself is stood for by deleting both keys now and then (every algorithm
treats a missing key as fresh).

The server is $RATELIMIT_SERVER (Redis 7.0, 8.2 or Valkey 8.1), as for the other tests; the
sizes are $SCRIPT_EQUAL_SEQUENCES sequences (default 200) of $SCRIPT_EQUAL_STEPS steps (default
60) per algorithm, seeded by $SCRIPT_EQUAL_SEED (default 28), and for the sliding log what those
seldom reach: logs written for hours (rebased, re-encoded) and logs of hundreds of entries.
"""

from __future__ import annotations

import json
import os
import random
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable
from typing import Sequence as Sequence_

import pytest
import redis

from conftest import T0_MS, Server

SCRIPTS = Path(__file__).resolve().parents[2] / "lua"
NAMES = ("gcra", "tokenbucket", "fixedwindow", "leakybucket", "slidingwindow", "slidinglog", "warmup", "refund")

SEQUENCES = int(os.environ.get("SCRIPT_EQUAL_SEQUENCES", "200"))
STEPS = int(os.environ.get("SCRIPT_EQUAL_STEPS", "60"))
SEED = int(os.environ.get("SCRIPT_EQUAL_SEED", "28"))

EXACT = 2**53
TOO_LARGE = "a time beyond 2^53 ms (285,000 years) needs the ratelimit module"
SCRIPT_WRONGTYPE = "WRONGTYPE the key holds a value of another type"
MODULE_WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
SECOND, MINUTE, HOUR, DAY = 1000, 60_000, 3_600_000, 86_400_000
TEN_YEARS = 3650 * DAY
PERIODS = [1, 7, 999, SECOND, 3 * SECOND, MINUTE, HOUR, DAY, 30 * DAY, TEN_YEARS]
# Periods a ms apart: converted between them, a part-paid interval rounds onto a ms boundary.
EDGE_PERIODS = [999, 1000, 1001, 1999, 2000, 2001, 2999, 3000, 3001]


def part(name: str) -> str:
    return (SCRIPTS / "lib" / f"{name}.lua").read_text()


def source(name: str) -> str:
    """A script as a package sends it: the parts its ``-- needs:`` line names, in that order,
    then the entry file (a script cannot include another)."""
    entry = (SCRIPTS / f"{name}.lua").read_text()
    needs = re.search(r"^-- needs: (.+)$", entry, re.M)
    assert needs, f"{name}.lua names no parts"
    return "".join(part(n) for n in needs.group(1).split()) + entry


@pytest.fixture(scope="module")
def rl(module_server: Server) -> Server:
    return module_server


# After a step, in its MULTI/EXEC: both keys' PTTLs, PERSISTed, whether they still exist, and
# the script key's hash, as one JSON text. One reply instead of seven: the test's time is mostly
# the client's, per reply and per element. (RL.INSPECT is called as a command: in Lua its
# integers would be doubles.)
PROBE = """
local out = {}
for i = 1, 2 do
  out[i] = string.format('%d', redis.call('PTTL', KEYS[i])) -- cjson keeps 14 digits
  redis.call('PERSIST', KEYS[i])
  out[i + 2] = redis.call('EXISTS', KEYS[i])
end
out[5] = redis.call('HGETALL', KEYS[2])
return cjson.encode(out)
"""


@pytest.fixture(scope="module")
def shas(rl: Server) -> dict[str, str]:
    with rl.client(protocol=2) as c:
        return {name: c.script_load(source(name)) for name in NAMES} | {"probe": c.script_load(PROBE)}


# --- one source ------------------------------------------------------------------------------


def test_each_script_names_the_parts_it_needs() -> None:
    """Every part in lib/ is needed by some script, and every script's parts exist: one source
    for each piece, assembled when loaded."""
    named = set()
    for path in SCRIPTS.glob("*.lua"):
        name, entry = path.stem, path.read_text()
        needs = re.search(r"^-- needs: (.+)$", entry, re.M)
        assert needs, name
        for n in needs.group(1).split():
            assert (SCRIPTS / "lib" / f"{n}.lua").is_file(), (name, n)
            named.add(n)
    assert named == {p.stem for p in (SCRIPTS / "lib").glob("*.lua")}


# --- the wide integers -----------------------------------------------------------------------

HARNESS = """
local op, a = ARGV[1], value(ARGV[2])
if op == 'text' then return text(a) end
if op == 'divmod' then
  local q, r = divmod(a, tonumber(ARGV[3]))
  return { text(q), text(r) }
end
if op == 'ceildiv' then return text(ceildiv(a, tonumber(ARGV[3]))) end
local b = value(ARGV[3])
if op == 'add' then return text(add(a, b)) end
if op == 'sub' then return text(sub(a, b)) end
if op == 'mul' then return text(mul(a, b)) end
if op == 'cmp' then return cmp(a, b) end
if op == 'type' then return type(a) end
"""


def interesting(rng: random.Random, bits: int) -> int:
    """A non-negative integer below 2^bits, often near a limb or 2^53 boundary."""
    pick = rng.random()
    if pick < 0.3:
        edge = 2 ** rng.choice([24, 48, 53, 72, 96, min(bits - 1, 106)])
        return max(0, edge + rng.randint(-3, 3))
    if pick < 0.4:
        return rng.randint(0, 1000)
    return rng.getrandbits(rng.randint(1, bits))


def test_wide_integers_are_exact(rl: Server) -> None:
    """The common part's integers against Python's: sums, saturating differences, products,
    quotients and remainders by divisors below 2^53, comparisons, text both ways, and values
    below 2^53 kept as plain numbers."""
    rng = random.Random(SEED)
    harness = part("common") + HARNESS
    with rl.client(protocol=2) as c:
        sha = c.script_load(harness)
        for _ in range(3000):
            a, b = interesting(rng, 110), interesting(rng, 110)
            d = max(1, interesting(rng, 53) % EXACT)
            pipe = c.pipeline(transaction=False)
            for op, x, y in [("add", a, b), ("sub", a, b), ("mul", a % 2**60, b % 2**60), ("cmp", a, b),
                             ("divmod", a, d), ("ceildiv", a, d), ("text", a, 0), ("type", a, 0)]:
                pipe.evalsha(sha, 0, op, str(x), str(y))
            got = pipe.execute()
            want = [
                str(a + b), str(max(a - b, 0)), str((a % 2**60) * (b % 2**60)), (a > b) - (a < b),
                [str(a // d).encode(), str(a % d).encode()], str(-(-a // d)), str(a),
                "number" if a < EXACT else "table",
            ]
            got = [g.decode() if isinstance(g, bytes) else g for g in got]
            assert got == want, (a, b, d)


# --- the differential test -------------------------------------------------------------------


def spell(rng: random.Random, ms: int) -> str:
    """A duration as a client might write it: bare ms, or with a unit that divides it."""
    units = [("", 1), ("ms", 1), ("s", SECOND), ("m", MINUTE), ("h", HOUR), ("d", DAY)]
    fits = [(u, n) for u, n in units if ms % n == 0 and ms // n > 0]
    unit, n = rng.choice(fits)
    if rng.random() < 0.2:
        unit = unit.upper()
    return f"{ms // n}{unit}"


def some_units(rng: random.Random, limit: int) -> int:
    """A cost or a refund for a limit: 0 to limit + 2, often at the edges."""
    if limit <= 40:
        return rng.randint(0, limit + 2)
    return rng.choice([0, 1, 2, 3, limit // 2, limit - 1, limit, limit + 1, limit + 2,
                       rng.randint(0, limit + 2), rng.randint(0, 1000)])


def short_period(rng: random.Random) -> int:
    return rng.choice(PERIODS + [rng.randint(1, 10_000)])


def wide_rate(rng: random.Random, burst: int, period_ms: int) -> int:
    """A rate up to 10^9 that keeps burst × period / rate below 2^50 ms: every reply exact."""
    least = max(1, -(-burst * period_ms // 2**50))
    return rng.randint(least, max(least, 10**9))


@dataclass
class Algo:
    """An algorithm as the test drives it: new parameters, the positional words and the options
    of its own they put among the others (INTERVAL, COLDFACTOR k), the limit costs are drawn
    against, the time its gaps are drawn against, the module's command."""

    name: str
    command: str
    params: Callable[[random.Random], tuple[Any, ...]]
    words: Callable[[random.Random, tuple[Any, ...]], tuple[list[str], list[list[str]]]]
    limit: Callable[[tuple[Any, ...]], int]
    period: Callable[[tuple[Any, ...]], int]
    # A cost or a refund, for a limit.
    units: Callable[[random.Random, int], int] = some_units


def gcra_params(rng: random.Random) -> tuple[int, int, int]:
    kind = rng.random()
    if kind < 0.45:
        return rng.randint(1, 20), rng.randint(1, 20), short_period(rng)
    if kind < 0.65:
        return rng.randint(1, 10), rng.choice([1, 2, 3]), rng.choice(EDGE_PERIODS)
    if kind < 0.93:
        burst, period = rng.choice([rng.randint(1, 10**9), 10**9, rng.randint(1, 10**6)]), short_period(rng)
        return burst, wide_rate(rng, burst, period), period
    # Beyond the ordinary: a TAT past 2^53 µs, or a reply past 2^53 ms (refused by the script).
    return rng.randint(1, 10**12), rng.randint(1, 10), rng.choice(PERIODS)


def tb_params(rng: random.Random) -> tuple[int, int, int, bool]:
    interval = rng.random() < 0.5
    kind = rng.random()
    if kind < 0.45:
        return rng.randint(1, 20), rng.randint(1, 20), short_period(rng), interval
    if kind < 0.65:
        return rng.randint(1, 10), rng.choice([1, 2, 3]), rng.choice(EDGE_PERIODS), interval
    if kind < 0.95:
        capacity, period = rng.choice([rng.randint(1, 10**9), 10**9, rng.randint(1, 10**6)]), short_period(rng)
        return capacity, wide_rate(rng, capacity, period), period, interval
    return rng.randint(1, 10**12), rng.randint(1, 10), rng.choice(PERIODS), interval


def fw_params(rng: random.Random) -> tuple[int, int]:
    if rng.random() < 0.7:
        return rng.randint(1, 20), short_period(rng)
    return rng.choice([rng.randint(1, 10**12), 10**12]), short_period(rng)


def sw_params(rng: random.Random) -> tuple[int, int]:
    kind = rng.random()
    if kind < 0.6:
        return rng.randint(1, 20), short_period(rng)
    if kind < 0.75:
        return rng.randint(1, 10), rng.choice(EDGE_PERIODS)
    return rng.choice([rng.randint(1, 10**12), 10**12, rng.randint(1, 10**6)]), short_period(rng)


# The sliding log's windows: its unit (a power of two of µs) is 1 below 2^29 µs (536870.912 ms)
# and coarser above: 2 µs for 10 minutes, 8 for an hour, 256 for a day, 2^20 for ten years.
LOG_WINDOWS = [536_870, 536_871, 300_000, 600_000, HOUR, 1_073_741, 1_073_742]
LOG_MAX = 10**6  # the module setting sliding-log-max-limit, at its default


def sl_params(rng: random.Random) -> tuple[int, int]:
    kind = rng.random()
    window = rng.choice(PERIODS + LOG_WINDOWS) if rng.random() < 0.6 else rng.choice(LOG_WINDOWS)
    if kind < 0.65:
        return rng.randint(1, 20), window
    if kind < 0.8:
        return rng.randint(1, 4), rng.choice(EDGE_PERIODS)
    if kind < 0.98:
        return rng.choice([rng.randint(1, LOG_MAX), LOG_MAX, rng.randint(1, 1000)]), window
    return LOG_MAX + rng.choice([1, rng.randint(1, 10**12 - LOG_MAX)]), window  # refused by both


def wu_params(rng: random.Random) -> tuple[int, int, int, int | None]:
    """rate, period, warm-up, COLDFACTOR (None: not given, the default 3)."""
    cold = rng.choice([None, None, 3, rng.randint(2, 10), 2, 10])
    kind = rng.random()
    if kind < 0.5:
        return rng.randint(1, 20), rng.choice([SECOND, MINUTE, 7, 3 * SECOND, rng.randint(1, 10_000)]), \
            rng.choice([10 * SECOND, SECOND, 3, 20 * SECOND, MINUTE, rng.randint(1, 100_000)]), cold
    if kind < 0.75:
        return rng.randint(1, 20), short_period(rng), short_period(rng), cold
    # Wide: rates to 10^12, warm-ups to ten years (the area term past 2^128).
    return rng.choice([rng.randint(1, 10**12), 10**12, rng.randint(1, 10**6)]), short_period(rng), \
        rng.choice([short_period(rng), TEN_YEARS]), cold


def wu_words(rng: random.Random, p: tuple[Any, ...]) -> tuple[list[str], list[list[str]]]:
    own = [[word(rng, "COLDFACTOR"), str(p[3])]] if p[3] is not None else []
    return [str(p[0]), spell(rng, p[1]), spell(rng, p[2])], own


Params = tuple[Any, ...]


def changed(rng: random.Random, new: Callable[[random.Random], Params], old: Params) -> Params:
    """New parameters: all new, or one of them changed."""
    fresh = new(rng)
    if rng.random() < 0.5:
        return fresh
    i = rng.randrange(len(old))
    return tuple(fresh[j] if j == i else old[j] for j in range(len(old)))


ALGOS = [
    Algo("gcra", "RL.GCRA", gcra_params,
         lambda rng, p: ([str(p[0]), str(p[1]), spell(rng, p[2])], []),
         lambda p: p[0], lambda p: p[2]),
    Algo("tokenbucket", "RL.TOKENBUCKET", tb_params,
         lambda rng, p: ([str(p[0]), str(p[1]), spell(rng, p[2])],
                         [[rng.choice(["INTERVAL", "interval"])]] if p[3] else []),
         lambda p: p[0], lambda p: p[2]),
    Algo("fixedwindow", "RL.FIXEDWINDOW", fw_params,
         lambda rng, p: ([str(p[0]), spell(rng, p[1])], []),
         lambda p: p[0], lambda p: p[1]),
    Algo("leakybucket", "RL.LEAKYBUCKET", gcra_params,
         lambda rng, p: ([str(p[0]), str(p[1]), spell(rng, p[2])], []),
         lambda p: p[0], lambda p: p[2]),
    Algo("slidingwindow", "RL.SLIDINGWINDOW", sw_params,
         lambda rng, p: ([str(p[0]), spell(rng, p[1])], []),
         lambda p: p[0], lambda p: p[1]),
    Algo("slidinglog", "RL.SLIDINGLOG", sl_params,
         lambda rng, p: ([str(p[0]), spell(rng, p[1])], []),
         lambda p: min(p[0], LOG_MAX), lambda p: p[1]),
    # Costs to the rate (pre-consumption), gaps against the warm-up (cold again after one).
    Algo("warmup", "RL.WARMUP", wu_params, wu_words,
         lambda p: min(p[0], 30), lambda p: max(p[1], p[2])),
]


def word(rng: random.Random, w: str) -> str:
    return w if rng.random() < 0.8 else rng.choice([w.lower(), w.capitalize()])


def admission_args(rng: random.Random, algo: Algo, p: tuple[Any, ...], block: float = 0.12) -> list[str]:
    positional, flags = algo.words(rng, p)
    limit = algo.limit(p)
    options: list[list[str]] = [list(f) for f in flags]
    if rng.random() < 0.15:
        options.append([word(rng, "ATMOST"), str(max(1, algo.units(rng, limit)))])
    elif rng.random() < 0.7:
        options.append([word(rng, "COST"), str(algo.units(rng, limit))])
    if rng.random() < 0.15:
        options.append([word(rng, "DRYRUN")])
    if rng.random() < block:
        options.append([word(rng, "BLOCK"), spell(rng, rng.randint(1, max(1, min(3 * algo.period(p), TEN_YEARS))))])
    if rng.random() < 0.15:  # a denial answered as admitted, writing nothing and starting no BLOCK
        options.append([word(rng, "SHADOW")])
    if rng.random() < 0.02:  # a bad argument: an error from both, and the key untouched
        options.append(rng.choice([["COST", "-1"], ["FAST"], ["BLOCK", "0"], ["ATMOST", "0"], ["DRYRUN", "DRYRUN"]]))
    rng.shuffle(options)
    return positional + [w for option in options for w in option]


@dataclass
class Sequence:
    algo: Algo
    n: int
    rng: random.Random
    ms: int
    params: tuple[Any, ...]
    # How often the clock steps back and a request gives BLOCK: some sequences do it a lot.
    back: float = 0.05
    block: float = 0.12
    # The clock's moves, when not the usual (rng, period) -> ms; how often keys go (expiry).
    gaps: Callable[[random.Random, int], int] | None = None
    expire: float = 0.03
    history: list[str] = field(default_factory=list)

    @property
    def m(self) -> str:
        return f"m:{self.algo.name}:{self.n}"

    @property
    def s(self) -> str:
        return f"s:{self.algo.name}:{self.n}"

    def gap(self) -> int:
        """The next step's clock move in ms: none, within a period, several periods, back."""
        rng, period = self.rng, self.algo.period(self.params)
        pick = rng.random()
        if self.gaps:
            step = self.gaps(rng, period)
        elif pick < 0.3:
            step = 0
        elif pick < 0.7:
            step = rng.randint(1, max(1, min(period, 3 * DAY)))
        elif pick < 0.97 - self.back:
            step = rng.randint(period, 4 * period) if period <= 30 * DAY else rng.randint(1, 400 * DAY)
        elif pick < 0.97:
            step = -rng.randint(1, max(1, min(period, 10 * SECOND)))
        else:
            step = rng.choice([999, 1000, 1001, 59_999, 60_000, 3_600_000])
        # The clock stays between 2023 and 2123: every algorithm's µs stay below 2^53.
        lo, hi = T0_MS - DAY, T0_MS + 100 * 365 * DAY
        return step if lo <= self.ms + step <= hi else -step if lo <= self.ms - step <= hi else 0


# Each algorithm's parameters as RL.INSPECT names them, in the order of a script key's `p`.
PARAM_NAMES = {"gcra": ["burst", "rate", "period_ms"],
               "tokenbucket": ["capacity", "refill_amount", "refill_period_ms", "interval"],
               "leakybucket": ["capacity", "leak_amount", "leak_period_ms"], "fixedwindow": ["limit", "window_ms"],
               "slidingwindow": ["limit", "window_ms"], "slidinglog": ["limit", "window_ms"],
               "warmup": ["rate", "period_ms", "warmup_ms", "coldfactor"]}


def state_of(name: str, f: dict[str, str], now_us: int) -> dict[str, int]:
    """The state RL.INSPECT shows of a module key (what it stores, to the µs or finer), from the
    script's hash of the same key at now_us: equal state, equal replies from then on, including
    those the ms clock of these sequences cannot reach."""
    p = [int(x) for x in f["p"].split()]
    shown = dict(zip(PARAM_NAMES[name], p))
    if name in ("gcra", "leakybucket"):  # the TAT, whole µs and a rest in 1/rate µs, rounded up
        shown["tat_us" if name == "gcra" else "empty_at_us"] = int(f["t"]) + (int(f["f"]) > 0)
    elif name == "tokenbucket":  # tokens × period_µs, shown as whole tokens
        shown["tokens"] = int(f["n"]) // (p[2] * 1000)
        shown["last_refill_us" if p[3] else "updated_us"] = int(f["u"])
    elif name == "fixedwindow":
        shown.update(window_start_us=int(f["s"]), count=int(f["c"]))
    elif name == "slidingwindow":
        shown.update(window_start_us=int(f["s"]), current=int(f["c"]), previous=int(f["v"]))
    elif name == "slidinglog":  # the entries the log holds, and the units of those in its window
        base, unit, first, end, before = (int(f[x]) for x in "buhez")
        entries = [[int(x) for x in f[str(i)].split()] for i in range(first, end)]
        times, active = [base + offset * unit for offset, _ in entries], 0
        for (_, cum), t in zip(entries, times):
            active += cum - before if t + p[1] * 1000 > now_us else 0
            before = cum
        shown.update(active=active, oldest_us=times[0] if times else 0, newest_us=times[-1] if times else 0)
    else:  # warm-up: the stored permits (in millionths) and next_free (ticks of 1/rate µs), as of now
        rate, period_ms, warmup_ms, k = p
        scale, most = 2 * period_ms * 1000 * (1 + k), warmup_ms * 1000 * rate * (5 + k)
        stored, next_free, now = min(int(f["x"]), most), int(f["t"]) * rate + int(f["f"]), now_us * rate
        if now > next_free:
            stored, next_free = min(stored + (now - next_free) * (5 + k), most), now
        shown.update(stored_micropermits=stored * 10**6 // scale, next_free_us=-(-next_free // rate))
    return {k: min(v, 2**63 - 1) for k, v in shown.items()}  # RL.INSPECT's integers saturate


def too_large(reply: Any) -> bool:
    """A time in the reply past 2^53 ms: retry_after, reset_after, or the leaky bucket's delay
    (a sixth field that is not a delay is a grant, at most 10^12)."""
    return isinstance(reply, list) and any(v >= EXACT for v in reply[3:6])


def explain(seq: Sequence, got: Any, want: Any) -> str:
    recent = "\n  ".join(seq.history[-12:])
    return (f"{seq.algo.name} sequence {seq.n} (seed {SEED}): script {got!r} != module {want!r}\n"
            f"last steps:\n  {recent}")


def transaction(conn: Any, commands: list[Sequence_[Any]]) -> list[Any]:
    """`commands` in one MULTI/EXEC on a connection, their replies (errors as values). Written
    and read here rather than by the client's pipeline: the test's time is mostly the client's
    (RESP in Python), per command and per argument."""
    out = [b"*1\r\n$5\r\nMULTI\r\n"]
    for command in commands:
        out.append(b"*%d\r\n" % len(command))
        for arg in command:
            a = arg if isinstance(arg, bytes) else str(arg).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    out.append(b"*1\r\n$4\r\nEXEC\r\n")
    conn.send_packed_command([b"".join(out)])
    for _ in range(len(commands) + 1):  # OK, then QUEUED for each
        conn.read_response()
    return conn.read_response()


def timed_transaction(conn: Any, commands: Sequence_[Sequence_[Any]]) -> tuple[list[Any], int]:
    """`commands` in one MULTI/EXEC between two TIMEs: their replies, and how far the server's
    clock moved from the first TIME to the last, in ms rounded up. Redis 7.0 reads its clock at
    each command of a transaction (TIME, PEXPIRE, PTTL, a script's expiry check, the module's
    clock), so TTLs written and read in it may be that much apart; 7.2+ and Valkey hold one
    reading for the whole transaction, TIME's too: 0. The TTLs are set and read in whole ms of
    that clock, and whole ms read d µs apart differ by at most d / 1000 rounded up: no more
    slack is needed."""
    first, *replies, last = transaction(conn, [("TIME",), *commands, ("TIME",)])
    elapsed_us = (int(last[0]) - int(first[0])) * 1_000_000 + int(last[1]) - int(first[1])
    return replies, -(-elapsed_us // 1000)


def run_sequence(c: redis.Redis, shas: dict[str, str], seq: Sequence, steps: int) -> dict[str, int]:
    counts = {"steps": 0, "admitted": 0, "denied": 0, "shadow_denied": 0, "refunds": 0, "errors": 0,
              "too_large": 0, "lapsed": 0}
    c.delete(seq.m, seq.s)
    algo, rng = seq.algo, seq.rng
    conn = c.connection_pool.get_connection()
    try:
        for _ in range(steps):
            seq.ms += seq.gap()
            if rng.random() < seq.expire:
                c.delete(seq.m, seq.s)
                seq.history.append(f"@{seq.ms - T0_MS} DEL (expiry)")
            if rng.random() < 0.1:
                seq.params = changed(rng, algo.params, seq.params)
            refund = rng.random() < 0.12
            if refund:
                args = [str(algo.units(rng, algo.limit(seq.params)))]
                if rng.random() < 0.2:
                    args.append(word(rng, "DRYRUN"))
                module, sha = ["RL.REFUND", seq.m, *args], shas["refund"]
            else:
                args = admission_args(rng, algo, seq.params, seq.block)
                module, sha = [algo.command, seq.m, *args], shas[algo.name]
            seq.history.append(f"@{seq.ms - T0_MS} {' '.join(module)}")
            # One MULTI/EXEC: Redis 7.2+ holds its expiry clock still in a transaction, so a key
            # written with a TTL of a ms is PERSISTed before real time can expire it; on 7.0 it may
            # not be, and `elapsed` is how far the clock moved (0 where it stands still).
            (_, want, got, inspect, probe), elapsed = timed_transaction(conn, [
                ("RL.DEBUG.CLOCK", "SET", seq.ms), module, ("EVALSHA", sha, 1, seq.s, *args, "NOW", seq.ms * 1000),
                ("RL.INSPECT", seq.m), ("EVALSHA", shas["probe"], 2, seq.m, seq.s)])
            ttl_m, ttl_s, in_m, in_s, hash_s = json.loads(probe)
            ttl_m, ttl_s = int(ttl_m), int(ttl_s)
            counts["steps"] += 1
            counts["refunds"] += refund
            if isinstance(got, redis.ResponseError) and TOO_LARGE in str(got):
                # The script refuses what it cannot reply exactly, before writing anything; the
                # module's reply (or its key's TTL, for a refund) has such a time. Start afresh.
                assert too_large(want) or (refund and ttl_m >= EXACT - 10**6), explain(seq, got, want)
                counts["too_large"] += 1
                c.delete(seq.m, seq.s)
                continue
            if isinstance(want, Exception) or isinstance(got, Exception):
                assert type(got) is type(want) and str(got) == str(want), explain(seq, got, want)
                counts["errors"] += 1
                continue
            assert got == want, explain(seq, got, want)
            if isinstance(want, list):
                shadow_denied = not refund and "SHADOW" in (a.upper() for a in args) and want[-1] == 1
                counts["shadow_denied" if shadow_denied else "admitted" if want[0] else "denied"] += 1
            # Both set their TTL from the real clock, at most `elapsed` ms apart (Redis 7.2+ gives a
            # transaction one clock reading; 7.0 does not); a key whose TTL was shorter than that may
            # be gone in real time already (lifetime 0). -1: neither wrote.
            ttls = explain(seq, (got, "pttl", ttl_s, in_s), (want, "pttl", ttl_m, in_m))
            life_m, life_s = max(ttl_m, 0), max(ttl_s, 0)
            if ttl_m >= 0 or ttl_s >= 0:  # a write (-2 beside it: lapsed in real time already)
                assert -1 not in (ttl_m, ttl_s) and abs(life_m - life_s) <= elapsed, ttls
                if isinstance(want, list):
                    # An admission that wrote: its TTL is reset_after_ms, less the real time since.
                    assert want[4] - elapsed <= life_m <= want[4] and want[4] - elapsed <= life_s <= want[4], ttls
            else:  # no write: both without a TTL (PERSISTed before), or both missing
                assert ttl_m == ttl_s, ttls
            if in_m != in_s:
                # One key expired in real time before its PERSIST: its TTL, the other's too, was
                # shorter than the transaction, and the other's PTTL is at most that TTL. Both go.
                assert max(ttl_m, ttl_s) < elapsed, ttls
                c.delete(seq.m, seq.s)
                counts["lapsed"] += 1
            elif in_m:
                shown = dict(zip(inspect[::2], inspect[1::2]))
                mine = state_of(algo.name, dict(zip(hash_s[::2], hash_s[1::2])), seq.ms * 1000)
                theirs = {k: shown[k.encode()] for k in mine}
                assert mine == theirs, explain(seq, (got, "state", mine), (want, "RL.INSPECT", theirs))
        return counts
    finally:
        c.connection_pool.release(conn)


@pytest.mark.parametrize("algo", ALGOS, ids=[a.name for a in ALGOS])
def test_random_sequences_reply_as_the_module(rl: Server, shas: dict[str, str], algo: Algo) -> None:
    """Random sequences per algorithm: costs 0 to limit + 2, ATMOST, DRYRUN, BLOCK, SHADOW, refunds
    (and their DRYRUN), parameter changes (all or one of them, INTERVAL on and off), idle gaps
    from none to several periods, clock steps back, keys gone (as if expired); small limits,
    limits to 10^9 (wide integers inside, every reply exact), and some past the exact range."""
    totals: dict[str, int] = {}
    with rl.client(protocol=2) as c:
        for n in range(SEQUENCES):
            rng = random.Random(f"{SEED}:{algo.name}:{n}")
            seq = Sequence(algo, n, rng, T0_MS + rng.randint(0, 10 * DAY), algo.params(rng))
            if n % 4 == 3:
                seq.back, seq.block = 0.25, 0.4
            for k, v in run_sequence(c, shas, seq, STEPS).items():
                totals[k] = totals.get(k, 0) + v
        c.execute_command("RL.DEBUG.CLOCK", "SET", T0_MS)
    print(f"\n{algo.name}: {totals}")
    assert totals["steps"] == SEQUENCES * STEPS
    # The sequences reach every kind of reply.
    assert totals["admitted"] and totals["denied"] and totals["shadow_denied"] and totals["refunds"]
    assert totals["errors"]


def busy_log(rng: random.Random) -> tuple[int, int]:
    """A log written every few minutes for hours, under windows of 1 µs units and of 2 µs units
    in turn: its offsets outgrow 31 bits, in either unit."""
    return rng.randint(4, 12), rng.choice([299_999, 300_000, 536_870, 536_871, 600_000])


def coarse_log(rng: random.Random) -> tuple[int, int]:
    """The same for hours-long windows, of 8 to 32 µs units: a log rebased in the window's finer
    unit keeps entries at whole ms, in the coarser one it would round them up."""
    return rng.randint(4, 12), rng.choice([HOUR, 2 * HOUR, 2 * HOUR + 1, 5 * HOUR])


def long_log(rng: random.Random) -> tuple[int, int]:
    """A log of hundreds of entries, a few ms apart."""
    return rng.randint(200, 600), rng.choice([10 * SECOND, MINUTE, 600_000])


LOGS = next(a for a in ALGOS if a.name == "slidinglog")
# kind: the algorithm as driven (parameters, units), the clock's moves, sequences, steps.
LOG_KINDS: dict[str, tuple[Algo, Callable[[random.Random, int], int], int, int]] = {
    "busy": (replace(LOGS, params=busy_log, units=lambda rng, limit: rng.choice([1, 1, 1, 0, 2])),
             lambda rng, period: rng.choice([0, rng.randint(1, 1000), *[rng.randint(30_000, 150_000)] * 2]),
             12, 150),
    "coarse": (replace(LOGS, params=coarse_log, units=lambda rng, limit: rng.choice([1, 1, 1, 0, 2])),
               lambda rng, period: rng.choice([0, rng.randint(1, 1000), *[rng.randint(10 * MINUTE, 50 * MINUTE)] * 2]),
               12, 150),
    "long": (replace(LOGS, params=long_log,
                     units=lambda rng, limit: rng.choice([1] * 16 + [0, 2, rng.randint(1, limit // 4)])),
             lambda rng, period: rng.choice([0, *[rng.randint(1, 30)] * 3, rng.randint(1, 3000)]),
             6, 250),
}


@pytest.mark.parametrize("kind", list(LOG_KINDS))
def test_logs_rebased_re_encoded_and_long(rl: Server, shas: dict[str, str], kind: str) -> None:
    """What the sliding log's random sequences seldom reach. Busy: a log that never empties for
    hours, under windows of 1 and 2 µs units in turn, so that its offsets outgrow 31 bits and it
    is rebased (in its own unit, or in the window's finer one) and re-encoded; coarse: the same
    over days, windows of hours (8 to 32 µs units, which round whole ms). Long: logs of
    hundreds of entries, costs mostly 1, so that they are read an entry at a time (past 64),
    refunds cut them in the middle, and their expired entries go by the hundred."""
    algo, gaps, sequences, steps = LOG_KINDS[kind]
    totals: dict[str, int] = {}
    with rl.client(protocol=2) as c:
        for n in range(sequences):
            rng = random.Random(f"{SEED}:{kind}:{n}")
            seq = Sequence(algo, 1000 + n, rng, T0_MS + rng.randint(0, 10 * DAY), algo.params(rng),
                           back=0.0, block=0.02, gaps=gaps, expire=0.002)
            for k, v in run_sequence(c, shas, seq, steps).items():
                totals[k] = totals.get(k, 0) + v
        c.execute_command("RL.DEBUG.CLOCK", "SET", T0_MS)
    print(f"\n{kind} logs: {totals}")
    assert totals["steps"] == sequences * steps and totals["admitted"] and totals["refunds"]


# --- errors ----------------------------------------------------------------------------------

BAD = {
    "gcra": [
        [], ["5"], ["5", "1"], ["0", "1", "1s"], ["5", "0", "1s"], ["05", "1", "1s"], ["-1", "1", "1s"],
        ["1000000000001", "1", "1s"], ["99999999999999999999999", "1", "1s"], ["5", "1", "0"],
        ["5", "1", "05s"], ["5", "1", "1.5s"], ["5", "1", "3651d"], ["5", "1", "5x"], ["5", "1", "ms"],
        ["5", "1", "1s", "COST"], ["5", "1", "1s", "COST", "-1"], ["5", "1", "1s", "COST", "1", "COST", "2"],
        ["5", "1", "1s", "COST", "1000000000001"], ["5", "1", "1s", "ATMOST", "0"], ["5", "1", "1s", "ATMOST"],
        ["5", "1", "1s", "ATMOST", "1", "ATMOST", "2"], ["5", "1", "1s", "COST", "2", "ATMOST", "5"],
        ["5", "1", "1s", "ATMOST", "5", "cost", "0"], ["5", "1", "1s", "DRYRUN", "dryrun"],
        ["5", "1", "1s", "BLOCK"], ["5", "1", "1s", "BLOCK", "0"], ["5", "1", "1s", "BLOCK", "1m", "BLOCK", "1m"],
        ["5", "1", "1s", "FAST"], ["5", "1", "1s", "DRYRUN", "x" * 40], ["5", "1", "1s", "it's\r\n"],
        ["5", "1", "1s", "INTERVAL"], ["5", "1", "1s", "SHADOW", "SHADOW"], ["5", "1", "1s", "COST", "x", "FAST"],
    ],
    "tokenbucket": [
        [], ["5", "1"], ["0", "1", "1s"], ["5", "0", "1s"], ["5", "1", "0s"],
        ["5", "1", "1s", "INTERVAL", "INTERVAL"], ["5", "1", "1s", "EVERY"], ["5", "1", "1s", "interval", "COST"],
        ["5", "1", "1s", "COST", "1", "cost", "1"], ["5", "1", "1s", "SHADOW", "INTERVAL", "INTERVAL"],
    ],
    "fixedwindow": [
        [], ["5"], ["0", "1m"], ["5", "0"], ["5", "1y"], ["5", "1m", "INTERVAL"],
        ["5", "1m", "COST", "2", "ATMOST", "1"], ["5", "1m", "BLOCK", "-1s"],
    ],
    "leakybucket": [
        [], ["5", "1"], ["0", "1", "1s"], ["5", "0", "1s"], ["5", "1", "0s"], ["5", "1", "1s", "INTERVAL"],
        ["5", "1", "1s", "COST", "1", "ATMOST", "2"], ["5", "1", "1s", "BLOCK"], ["5", "1", "1s", "SHADOW", "FAST"],
    ],
    "slidingwindow": [
        [], ["5"], ["0", "1m"], ["5", "0"], ["5", "1m", "INTERVAL"], ["5", "1m", "COST", "x"], ["5", "1m", "ATMOST"],
    ],
    "slidinglog": [
        [], ["5"], ["0", "1m"], ["1000001", "1m"], ["1000000000001", "1m"], ["99999999999999999999", "1m"],
        ["05", "1m"], ["5", "0"], ["2000000", "0"], ["5", "1m", "FAST"], ["1000001", "1m", "FAST"],
        ["5", "1m", "COST", "2", "COST", "2"],
    ],
    # The options are read before the parameters, COLDFACTOR's value last.
    "warmup": [
        [], ["1", "1s"], ["0", "1s", "10s"], ["1", "0", "10s"], ["1", "1s", "0"], ["1", "1s", "3651d"],
        ["1", "1s", "10s", "COLDFACTOR"], ["1", "1s", "10s", "COLDFACTOR", "1"], ["1", "1s", "10s", "coldfactor", "11"],
        ["1", "1s", "10s", "COLDFACTOR", "x"], ["1", "1s", "10s", "COLDFACTOR", "3", "coldfactor", "3"],
        ["0", "1s", "10s", "FAST"], ["0", "1s", "10s", "COLDFACTOR", "11"],
        ["1", "1s", "10s", "COLDFACTOR", "11", "COST", "-1"],
        ["1", "1s", "10s", "INTERVAL"], ["0", "1s", "10s", "SHADOW"], ["1", "1s", "10s", "COLDFACTOR", "0", "SHADOW"],
    ],
    "refund": [[], ["1", "DRYRUN", "x"], ["-1"], ["1000000000001"], ["01"], ["1", "FAST"], ["1", "dryrunx"]],
}
COMMAND = {"gcra": "RL.GCRA", "tokenbucket": "RL.TOKENBUCKET", "fixedwindow": "RL.FIXEDWINDOW",
           "leakybucket": "RL.LEAKYBUCKET", "slidingwindow": "RL.SLIDINGWINDOW", "slidinglog": "RL.SLIDINGLOG",
           "warmup": "RL.WARMUP", "refund": "RL.REFUND"}


def outcome(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except redis.ResponseError as e:
        return ("error", str(e))


@pytest.mark.parametrize("name", list(BAD), ids=list(BAD))
def test_bad_arguments_get_the_module_errors(rl: Server, shas: dict[str, str], name: str) -> None:
    """The same bad arguments, the same error text, checked before the key is touched."""
    with rl.client(protocol=2) as c:
        c.set("str", "v")
        for args in BAD[name]:
            for key in ("nokey", "str"):
                want = outcome(lambda: c.execute_command(COMMAND[name], key, *args))
                got = outcome(lambda: c.evalsha(shas[name], 1, key, *args, "NOW", T0_MS * 1000))
                if want[0] == "error":
                    assert got == want, (name, args, key)
                else:
                    assert want[0] == "error" or key == "str", (name, args)


def test_a_key_of_the_other_backend_is_refused(rl: Server, shas: dict[str, str]) -> None:
    """A module key and a script key refuse the other backend; a hash that is not a limiter's
    and a string are refused by both; a script key of another algorithm gets the module's text."""
    now = T0_MS * 1000
    with rl.client(protocol=2) as c:
        c.execute_command("RL.DEBUG.CLOCK", "SET", T0_MS)
        c.delete("mk", "sk", "tb", "stb", "h", "str")
        c.execute_command("RL.GCRA", "mk", 5, 1, "1s")
        c.evalsha(shas["gcra"], 1, "sk", 5, 1, "1s", "NOW", now)
        calls = [("gcra", [5, 1, "1s"]), ("tokenbucket", [5, 1, "1s"]), ("fixedwindow", [5, "1s"]),
                 ("leakybucket", [5, 1, "1s"]), ("slidingwindow", [5, "1s"]), ("slidinglog", [5, "1s"]),
                 ("warmup", [5, "1s", "10s"]), ("refund", [1])]
        for name, args in calls:
            got = outcome(lambda: c.evalsha(shas[name], 1, "mk", *args, "NOW", now))
            assert got[0] == "error" and got[1].startswith(SCRIPT_WRONGTYPE), (name, got)
            assert outcome(lambda: c.execute_command(COMMAND[name], "sk", *args)) == ("error", MODULE_WRONGTYPE)
        c.hset("h", "x", "1")
        c.set("str", "v")
        for key in ("h", "str"):
            got = outcome(lambda: c.evalsha(shas["gcra"], 1, key, 5, 1, "1s", "NOW", now))
            assert got[0] == "error" and got[1].startswith(SCRIPT_WRONGTYPE)
            assert outcome(lambda: c.execute_command("RL.GCRA", key, 5, 1, "1s")) == ("error", MODULE_WRONGTYPE)
        # Another algorithm's key: the module's own text, from both.
        c.execute_command("RL.TOKENBUCKET", "tb", 5, 1, "1s")
        c.evalsha(shas["tokenbucket"], 1, "stb", 5, 1, "1s", "NOW", now)
        for name, args in [("gcra", [5, 1, "1s"]), ("fixedwindow", [5, "1s"]), ("leakybucket", [5, 1, "1s"]),
                           ("slidingwindow", [5, "1s"]), ("slidinglog", [5, "1s"]), ("warmup", [5, "1s", "10s"])]:
            want = outcome(lambda: c.execute_command(COMMAND[name], "tb", *args))
            assert want[0] == "error" and "the key holds RL.TOKENBUCKET state" in want[1]
            assert outcome(lambda: c.evalsha(shas[name], 1, "stb", *args, "NOW", now)) == want
        assert c.hgetall("stb")[b"a"] == b"tb1"
        # And the other way round: a key of each new script named by the module's text.
        for name, args in [("leakybucket", [5, 1, "1s"]), ("slidingwindow", [5, "1s"]), ("slidinglog", [5, "1s"]),
                           ("warmup", [5, "1s", "10s"])]:
            c.delete("other", "sother")
            c.execute_command(COMMAND[name], "other", *args)
            c.evalsha(shas[name], 1, "sother", *args, "NOW", now)
            want = outcome(lambda: c.execute_command("RL.GCRA", "other", 5, 1, "1s"))
            assert want[0] == "error" and f"the key holds {COMMAND[name]} state" in want[1]
            assert outcome(lambda: c.evalsha(shas["gcra"], 1, "sother", 5, 1, "1s", "NOW", now)) == want


def test_shadow_as_the_commands_page_shows(rl: Server, shas: dict[str, str]) -> None:
    """docs/commands.md's SHADOW example on both backends, and the field's place after a sixth
    field and `granted`: a would-be denial answered as admitted with the denial's other fields,
    nothing written (the hash as it was, no BLOCK started), a BLOCK in force still answering."""
    ms = 1_699_999_980_000
    with rl.client(protocol=2) as c:
        c.execute_command("RL.DEBUG.CLOCK", "SET", ms)
        c.delete("m:sh", "s:sh", "m:shl", "s:shl")

        def both(key: str, name: str, *args: Any) -> list[int]:
            want = c.execute_command(COMMAND[name], f"m:{key}", *args)
            got = c.evalsha(shas[name], 1, f"s:{key}", *args, "NOW", ms * 1000)
            assert got == want, (name, args, got, want)
            return got

        assert both("sh", "gcra", 2, 1, "1s") == [1, 2, 1, 0, 1000]
        assert both("sh", "gcra", 2, 1, "1s") == [1, 2, 0, 0, 2000]
        before = c.hgetall("s:sh")
        assert both("sh", "gcra", 2, 1, "1s", "SHADOW") == [1, 2, 0, 1000, 2000, 1]
        assert both("sh", "gcra", 2, 1, "1s") == [0, 2, 0, 1000, 2000]
        assert both("sh", "gcra", 2, 1, "1s", "BLOCK", "1m", "SHADOW") == [1, 2, 0, 1000, 2000, 1]
        assert both("sh", "gcra", 2, 1, "1s", "ATMOST", 3, "shadow") == [1, 2, 0, 1000, 2000, 0, 1]
        assert both("sh", "gcra", 2, 1, "1s", "DRYRUN", "SHADOW") == [1, 2, 0, 1000, 2000, 1]
        assert c.hgetall("s:sh") == before  # no BLOCK, no state
        # A BLOCK in force answers a SHADOW call, as admitted with shadow_denied 1.
        assert both("sh", "gcra", 2, 1, "1s", "BLOCK", "1m") == [0, 2, 0, 60000, 60000]
        ms += 5000
        c.execute_command("RL.DEBUG.CLOCK", "SET", ms)
        assert both("sh", "gcra", 2, 1, "1s", "SHADOW") == [1, 2, 0, 55000, 55000, 1]
        # The leaky bucket: delay_ms -1 as the denial's, then granted, then shadow_denied.
        assert both("shl", "leakybucket", 1, 1, "1s", "SHADOW") == [1, 1, 0, 0, 1000, 0, 0]
        assert both("shl", "leakybucket", 1, 1, "1s", "ATMOST", 2, "SHADOW") == [1, 1, 0, 1000, 1000, -1, 0, 1]
        c.execute_command("RL.DEBUG.CLOCK", "SET", T0_MS)


# --- what the debug clock cannot reach: µs, and the clock the packages use -----------------------


def test_microseconds(rl: Server, shas: dict[str, str]) -> None:
    """The module's own exactness cases (the algorithms' unit tests), at µs, on the scripts: 3
    per second is 333333.3 µs apart, 3000 units at 3 a second take exactly 1000 s, a million a
    second is one µs apart; the leaky bucket's turns, the sliding window's least time, the
    sliding log's units, the warm-up's batch."""
    t0 = 1_700_000_000_000_000
    with rl.client(protocol=2) as c:

        def gcra(key: str, at: int, *args: Any) -> list[int]:
            return c.evalsha(shas["gcra"], 1, key, *args, "NOW", t0 + at)

        c.delete("u1", "u2", "u3", "u4", "u5")
        assert gcra("u1", 0, 1, 3, 1000)[0] == 1
        assert gcra("u1", 0, 1, 3, 1000)[3] == 334
        assert gcra("u1", 333_333, 1, 3, 1000)[0] == 0
        assert gcra("u1", 333_334, 1, 3, 1000)[0] == 1
        assert gcra("u2", 0, 3000, 3, 1000, "COST", 3000)[4] == 1_000_000
        # A key a µs long lives a millisecond of the server's real time: the five calls go in one
        # transaction, during which the server's clock stands still (Redis 7.0+, Valkey), so that
        # none finds it expired however busy the machine (one by one, a busy machine let the
        # second call come after that millisecond and admitted it: [1, 1, 1, 0, 1]).
        with c.pipeline(transaction=True) as p:
            for at in (0, 0, 1, 1, 2):
                p.evalsha(shas["gcra"], 1, "u3", 1, 1_000_000, 1000, "NOW", t0 + at)
            assert [reply[0] for reply in p.execute()] == [1, 0, 1, 0, 1]
        # A token bucket of 3 refilled 3 a second: a token every 333333.3 µs.
        tb = lambda at, *a: c.evalsha(shas["tokenbucket"], 1, "u4", 3, 3, 1000, *a, "NOW", t0 + at)  # noqa: E731
        assert tb(0, "COST", 3)[0] == 1
        assert tb(333_333)[0] == 0 and tb(333_334)[0] == 1
        # Leaky bucket (leaky_bucket.rs): at 3 a second, four at once act 0, 1/3, 2/3 and 1 s
        # later; a queue of 1 admits again exactly 333333.3 µs on.
        c.delete("u6", "u7", "u8", "u9", "u10")
        lb = lambda key, at, *a: c.evalsha(shas["leakybucket"], 1, key, *a, "NOW", t0 + at)  # noqa: E731
        assert [lb("u6", 0, 10, 3, 1000)[5] for _ in range(4)] == [0, 334, 667, 1000]
        assert lb("u7", 0, 1, 3, 1000)[0] == 1
        assert lb("u7", 333_333, 1, 3, 1000)[0] == 0 and lb("u7", 333_334, 1, 3, 1000)[:6] == [1, 1, 0, 0, 334, 0]
        # Sliding window (sliding_window.rs): 7 a minute, 5 in the last minute and 4 in this one,
        # 18 s into it: the next fits 6.000001 s later, and not a µs before.
        t2 = 1_699_927_200_000_000
        sw = lambda at, *a: c.evalsha(shas["slidingwindow"], 1, "u8", 7, 60_000, *a, "NOW", t2 + at)  # noqa: E731
        sw(10_000_000, "COST", 5), sw(65_000_000, "COST", 3), sw(78_000_000)
        assert sw(78_000_000, "DRYRUN")[:4] == [0, 7, 0, 6001]
        assert sw(84_000_000, "DRYRUN")[0] == 0 and sw(84_000_001, "DRYRUN")[0] == 1
        # Sliding log (sliding_log/regrid.rs): a 10-minute window keeps times in 2 µs units,
        # rounded up: a request at +3 µs leaves the window at +4 µs, one unit late.
        t3, w = 1_700_002_800_000_000, 600_000_000
        sl = lambda at, *a: c.evalsha(shas["slidinglog"], 1, "u9", 2, "10m", *a, "NOW", t3 + at)  # noqa: E731
        sl(0), sl(3)
        assert sl(w + 3, "COST", 2, "DRYRUN")[:4] == [0, 2, 1, 1]
        assert sl(w + 4, "COST", 2, "DRYRUN")[0] == 1
        # Warm-up (warmup/tests.rs): 10 a second, 10 s warm-up: a batch of 100 takes every stored
        # permit, 10 s of trapezoid and 5 s of stable ones; the next waits exactly 15 s.
        wu = lambda at, *a: c.evalsha(shas["warmup"], 1, "u10", 10, "1s", "10s", *a, "NOW", t0 + at)  # noqa: E731
        assert wu(0, "COST", 100)[0] == 1 and wu(0)[:5] == [0, 1, 0, 15_000, 25_000]
        assert wu(14_999_999)[0] == 0 and wu(15_000_000, "COST", 200)[0] == 1
        # Without NOW the script reads TIME: a fresh key admits, and its PTTL is the reply's.
        # (In one transaction, the clock standing still: PTTL reads the script's TTL, whatever
        # time a busy machine lets pass between the two.)
        with c.pipeline(transaction=True) as p:
            p.evalsha(shas["fixedwindow"], 1, "u5", 5, "1h")
            p.pttl("u5")
            reply, pttl = p.execute()
        assert reply[:3] == [1, 5, 4] and 0 < reply[4] <= 3_600_000
        assert abs(pttl - reply[4]) <= 1
