"""The script backend's scripts (clients/scripts/*.lua) give the module's replies, field by field
(issue 28; SPEC §8, the script backend).

One redis-server with the module and its debug clock; each step runs the module's command on key
``m:…`` at the debug clock and the script on key ``s:…`` with the test-only ``NOW <µs>`` pair at
the same instant, in one MULTI/EXEC, and asserts the replies equal (or the same error text), and
both keys' TTLs the reply's reset_after_ms. The debug clock is set in whole ms (``RL.DEBUG.CLOCK
SET`` takes ms), so the random sequences move in ms; the µs-exact cases the module's own tests fix
are checked on the scripts alone (``test_microseconds``).

Key TTLs follow the real clock for both (docs/commands.md, RL.DEBUG.CLOCK), so the PTTLs are
compared right after the step that wrote them and then both keys are PERSISTed, in the step's
MULTI/EXEC (Redis 7.2+ expires nothing within one): a key must not expire in real time while the
frozen clock says it still counts (both backends would agree, but not at the same real instant).
Expiry itself is stood for by deleting both keys now and then (every algorithm treats a missing
key as fresh).

The server is $RATELIMIT_SERVER (Redis 7.0, 8.2 or Valkey 8.1), as for the other tests; the
sizes are $SCRIPT_EQUAL_SEQUENCES sequences (default 200) of $SCRIPT_EQUAL_STEPS steps (default
60) per algorithm, seeded by $SCRIPT_EQUAL_SEED (default 28).
"""

from __future__ import annotations

import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import redis

from conftest import T0_MS, Server

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
NAMES = ("gcra", "tokenbucket", "fixedwindow", "refund")

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
def rl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("script-equal"))
    s.freeze(T0_MS)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def shas(rl: Server) -> dict[str, str]:
    with rl.client(protocol=2) as c:
        return {name: c.script_load(source(name)) for name in NAMES}


# --- one source ------------------------------------------------------------------------------


def test_each_script_names_the_parts_it_needs() -> None:
    """Every part in lib/ is needed by some script, and every script's parts exist: one source
    for each piece, assembled when loaded."""
    named = set()
    for name in NAMES:
        entry = (SCRIPTS / f"{name}.lua").read_text()
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
    """An algorithm as the test drives it: new parameters, the positional words and the flags
    they put among the options, the limit costs are drawn against, the module's command."""

    name: str
    command: str
    params: Callable[[random.Random], tuple[Any, ...]]
    words: Callable[[random.Random, tuple[Any, ...]], tuple[list[str], list[str]]]
    limit: Callable[[tuple[Any, ...]], int]
    period: Callable[[tuple[Any, ...]], int]


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
                         [rng.choice(["INTERVAL", "interval"])] if p[3] else []),
         lambda p: p[0], lambda p: p[2]),
    Algo("fixedwindow", "RL.FIXEDWINDOW", fw_params,
         lambda rng, p: ([str(p[0]), spell(rng, p[1])], []),
         lambda p: p[0], lambda p: p[1]),
]


def word(rng: random.Random, w: str) -> str:
    return w if rng.random() < 0.8 else rng.choice([w.lower(), w.capitalize()])


def admission_args(rng: random.Random, algo: Algo, p: tuple[Any, ...], block: float = 0.12) -> list[str]:
    positional, flags = algo.words(rng, p)
    limit = algo.limit(p)
    options: list[list[str]] = [[f] for f in flags]
    if rng.random() < 0.15:
        options.append([word(rng, "ATMOST"), str(max(1, some_units(rng, limit)))])
    elif rng.random() < 0.7:
        options.append([word(rng, "COST"), str(some_units(rng, limit))])
    if rng.random() < 0.15:
        options.append([word(rng, "DRYRUN")])
    if rng.random() < block:
        options.append([word(rng, "BLOCK"), spell(rng, rng.randint(1, max(1, min(3 * algo.period(p), TEN_YEARS))))])
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
        if pick < 0.3:
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


def too_large(reply: Any) -> bool:
    return isinstance(reply, list) and any(v >= EXACT for v in reply[3:5])


def explain(seq: Sequence, got: Any, want: Any) -> str:
    recent = "\n  ".join(seq.history[-12:])
    return (f"{seq.algo.name} sequence {seq.n} (seed {SEED}): script {got!r} != module {want!r}\n"
            f"last steps:\n  {recent}")


def ttl_slack(c: redis.Redis) -> int:
    """How far apart, in ms, the two keys' TTLs may be. Redis 7.2+ and Valkey give a transaction
    one clock reading, which the module (RedisModule_CachedMicroseconds) and the script's PEXPIRE
    both use; Redis 7.0 has none, the module reads the system clock at its call and the script
    at its own, so the real time between the two calls (more on a loaded machine) shows."""
    info = c.info("server")
    version = tuple(int(x) for x in str(info.get("valkey_version") or info["redis_version"]).split(".")[:2])
    return 5 if "valkey_version" in info or version >= (7, 2) else 200


def run_sequence(c: redis.Redis, shas: dict[str, str], seq: Sequence, steps: int) -> dict[str, int]:
    counts = {"steps": 0, "admitted": 0, "denied": 0, "refunds": 0, "errors": 0, "too_large": 0, "lapsed": 0}
    c.delete(seq.m, seq.s)
    algo, rng, slack = seq.algo, seq.rng, ttl_slack(c)
    for _ in range(steps):
        seq.ms += seq.gap()
        if rng.random() < 0.03:
            c.delete(seq.m, seq.s)
            seq.history.append(f"@{seq.ms - T0_MS} DEL (expiry)")
        if rng.random() < 0.1:
            seq.params = changed(rng, algo.params, seq.params)
        refund = rng.random() < 0.12
        if refund:
            args = [str(some_units(rng, algo.limit(seq.params)))]
            if rng.random() < 0.2:
                args.append(word(rng, "DRYRUN"))
            module, sha = ["RL.REFUND", seq.m, *args], shas["refund"]
        else:
            args = admission_args(rng, algo, seq.params, seq.block)
            module, sha = [algo.command, seq.m, *args], shas[algo.name]
        seq.history.append(f"@{seq.ms - T0_MS} {' '.join(module)}")
        # One MULTI/EXEC: Redis holds its expiry clock still in a transaction, so a key written
        # with a TTL of a ms is PERSISTed before real time can expire it.
        pipe = c.pipeline(transaction=True)
        pipe.execute_command("RL.DEBUG.CLOCK", "SET", seq.ms)
        pipe.execute_command(*module)
        pipe.evalsha(sha, 1, seq.s, *args, "NOW", seq.ms * 1000)
        pipe.pttl(seq.m)
        pipe.pttl(seq.s)
        pipe.persist(seq.m)
        pipe.persist(seq.s)
        pipe.exists(seq.m)
        pipe.exists(seq.s)
        _, want, got, ttl_m, ttl_s, _, _, in_m, in_s = pipe.execute(raise_on_error=False)
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
            counts["admitted" if want[0] else "denied"] += 1
        # Both set their TTL from the real clock, a little apart (Redis 7.2+ gives a transaction
        # one clock reading; 7.0 does not, and its module reads the system clock); a key whose TTL
        # was a ms or two may be gone in real time already (lifetime 0). -1: neither wrote.
        ttls = explain(seq, (got, "pttl", ttl_s, in_s), (want, "pttl", ttl_m, in_m))
        life_m, life_s = max(ttl_m, 0), max(ttl_s, 0)
        if ttl_m >= 0 or ttl_s >= 0:  # a write (-2 beside it: lapsed in real time already)
            assert -1 not in (ttl_m, ttl_s) and abs(life_m - life_s) <= slack, ttls
            if isinstance(want, list):
                # An admission that wrote: its TTL is reset_after_ms, less the real time since.
                assert want[4] - slack <= life_m <= want[4] and want[4] - slack <= life_s <= want[4], ttls
        else:  # no write: both without a TTL (PERSISTed before), or both missing
            assert ttl_m == ttl_s, ttls
        if in_m != in_s:
            # Only a key about to expire may have expired before its PERSIST: both go.
            assert 0 <= min(life_m, life_s) <= 2, ttls
            c.delete(seq.m, seq.s)
            counts["lapsed"] += 1
    return counts


@pytest.mark.parametrize("algo", ALGOS, ids=[a.name for a in ALGOS])
def test_random_sequences_reply_as_the_module(rl: Server, shas: dict[str, str], algo: Algo) -> None:
    """Random sequences per algorithm: costs 0 to limit + 2, ATMOST, DRYRUN, BLOCK, refunds
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
    assert totals["admitted"] and totals["denied"] and totals["refunds"] and totals["errors"]


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
    "refund": [[], ["1", "DRYRUN", "x"], ["-1"], ["1000000000001"], ["01"], ["1", "FAST"], ["1", "dryrunx"]],
}
COMMAND = {"gcra": "RL.GCRA", "tokenbucket": "RL.TOKENBUCKET", "fixedwindow": "RL.FIXEDWINDOW", "refund": "RL.REFUND"}


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
                if want[0] == "error" and "SHADOW" not in args:
                    assert got == want, (name, args, key)
                elif "SHADOW" in args:  # a known difference: the scripts do not take SHADOW yet
                    assert got[0] == "error", (name, args)
                    assert got[1] in ("SHADOW needs the ratelimit module: the script backend does not take it yet",
                                      want[1] if want[0] == "error" else None), (name, args)
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
        calls = [("gcra", [5, 1, "1s"]), ("tokenbucket", [5, 1, "1s"]), ("fixedwindow", [5, "1s"]), ("refund", [1])]
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
        for name, args in [("gcra", [5, 1, "1s"]), ("fixedwindow", [5, "1s"])]:
            want = outcome(lambda: c.execute_command(COMMAND[name], "tb", *args))
            assert want[0] == "error" and "the key holds RL.TOKENBUCKET state" in want[1]
            assert outcome(lambda: c.evalsha(shas[name], 1, "stb", *args, "NOW", now)) == want
        assert c.hgetall("stb")[b"a"] == b"tb1"


# --- what the debug clock cannot reach: µs, and the clock the packages use -----------------------


def test_microseconds(rl: Server, shas: dict[str, str]) -> None:
    """The module's own exactness cases (algorithms/src/gcra.rs tests), at µs, on the scripts: 3
    per second is 333333.3 µs apart, 3000 units at 3 a second take exactly 1000 s, a million a
    second is one µs apart."""
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
        assert [gcra("u3", at, 1, 1_000_000, 1000)[0] for at in (0, 0, 1, 1, 2)] == [1, 0, 1, 0, 1]
        # A token bucket of 3 refilled 3 a second: a token every 333333.3 µs.
        tb = lambda at, *a: c.evalsha(shas["tokenbucket"], 1, "u4", 3, 3, 1000, *a, "NOW", t0 + at)  # noqa: E731
        assert tb(0, "COST", 3)[0] == 1
        assert tb(333_333)[0] == 0 and tb(333_334)[0] == 1
        # Without NOW the script reads TIME: a fresh key admits, and its PTTL is the reply's.
        reply = c.evalsha(shas["fixedwindow"], 1, "u5", 5, "1h")
        assert reply[:3] == [1, 5, 4] and 0 < reply[4] <= 3_600_000
        assert abs(c.pttl("u5") - reply[4]) <= 5
