"""The script backend's concurrency leases (clients/lua/concurrency_acquire.lua and
concurrency_release.lua) give the module's replies, field by field (issue 28; docs/managed.md, the
script backend).

As test_script_equal.py does for the admission scripts: one redis-server with the module and
its debug clock; each step runs RL.CONCURRENCY.ACQUIRE or RL.CONCURRENCY.RELEASE on ``m:…`` at
the debug clock and the script on ``s:…`` with the test-only ``NOW <µs>`` pair at the same
instant, in one MULTI/EXEC, and asserts the replies (or the error texts) equal, both keys'
TTLs equal (and equal to the key's reset_after_ms) but for the real time the server's clock
moved in the transaction (Redis 7.0), and the state RL.INSPECT shows of the module's key equal
to the script's sorted set read the same way. Generated tokens are the module's
(``<now µs hex>-<issued hex>``), so one token releases both keys' leases.

$LEASES_EQUAL_SEQUENCES sequences (default 400) of $LEASES_EQUAL_STEPS steps (default 60),
seeded by $SCRIPT_EQUAL_SEED (default 28).
"""

from __future__ import annotations

import json
import os
import random
from typing import Any

import pytest
import redis

from conftest import T0_MS, Server
from test_script_equal import outcome, source, timed_transaction

SEQUENCES = int(os.environ.get("LEASES_EQUAL_SEQUENCES", "400"))
STEPS = int(os.environ.get("LEASES_EQUAL_STEPS", "60"))
SEED = int(os.environ.get("SCRIPT_EQUAL_SEED", "28"))

SCRIPT_WRONGTYPE = "WRONGTYPE the key holds a value of another type"
MODULE_WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
ADAPTIVE = "ADAPTIVE needs the ratelimit module"
SECOND, MINUTE, HOUR, DAY = 1000, 60_000, 3_600_000, 86_400_000
LEASES = [1, 2, 7, 999, SECOND, 1001, 5 * SECOND, MINUTE, HOUR, DAY, 3650 * DAY]
ACQUIRE, RELEASE = "RL.CONCURRENCY.ACQUIRE", "RL.CONCURRENCY.RELEASE"

# After a step, in its MULTI/EXEC: both keys' PTTLs, PERSISTed, whether they exist, and the
# script key's sorted set (members and scores), as one JSON text.
PROBE = """
local out = {}
for i = 1, 2 do
  out[i] = string.format('%d', redis.call('PTTL', KEYS[i]))
  redis.call('PERSIST', KEYS[i])
  out[i + 2] = redis.call('EXISTS', KEYS[i])
end
out[5] = {}
if out[4] == 1 then -- the members by their first byte (a lease's token may be any bytes)
  local z = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
  for i = 1, #z, 2 do
    out[5][#out[5] + 1] = { z[i]:sub(1, 1), z[i + 1] }
  end
end
return cjson.encode(out)
"""


@pytest.fixture(scope="module")
def rl(module_server: Server) -> Server:
    return module_server


@pytest.fixture(scope="module")
def shas(rl: Server) -> dict[str, str]:
    with rl.client(protocol=2) as c:
        names = ("concurrency_acquire", "concurrency_release", "gcra", "refund")
        return {n: c.script_load(source(n)) for n in names} | {"probe": c.script_load(PROBE)}


def state_of(zset: list[list[str]], now_us: int) -> dict[str, int]:
    """The script's lease key (its members by first byte, and their scores) as RL.INSPECT shows
    a module key: its parameters, the leases held now, the tokens issued, remaining and
    reset_after_ms."""
    ends = [int(float(v)) for k, v in zset if k == "t"]
    pairs = {k: v for k, v in zset if k != "t"}
    assert len(pairs) == 4 and len(ends) == len(zset) - 4, zset
    active = [e for e in ends if e > now_us]
    limit = -int(float(pairs["l"]))
    assert pairs["a"] == "-1"
    return {"limit": limit, "lease_ms": -int(float(pairs["w"])), "held": len(active),
            "issued": -int(float(pairs["i"])), "remaining": max(limit - len(active), 0),
            "reset_after_ms": -(-(max(active) - now_us) // 1000) if active else 0}


class Sequence:
    def __init__(self, n: int) -> None:
        self.n = n
        self.rng = rng = random.Random(f"{SEED}:leases:{n}")
        self.m, self.s = f"m:cc:{n}", f"s:cc:{n}"
        self.ms = T0_MS + rng.randint(0, 10 * DAY)
        self.limit, self.lease = self.new_limit(), rng.choice(LEASES)
        self.tokens: list[bytes] = []  # tokens both keys were given
        self.names = [b"w0", b"w1", b"w2", b"job-7", rng.choice([b"x" * 256, b"it's \r\n", b"\x00\xff", b"t"])]
        self.history: list[str] = []

    def new_limit(self) -> int:
        rng = self.rng
        return rng.choice([1, 1, 2, 2, 3, 4, 5, 6, rng.randint(1, 40), rng.choice([99_999, 100_000])])

    def gap(self) -> int:
        rng = self.rng
        pick = rng.random()
        if pick < 0.3:
            return 0
        if pick < 0.6:
            return rng.randint(1, max(1, self.lease // 3))
        if pick < 0.8:
            return self.lease + rng.randint(-2, 2)
        if pick < 0.85:
            return -rng.randint(1, max(1, self.lease // 2))  # the clock steps back
        return rng.randint(1, 3 * min(self.lease, DAY))

    def token(self) -> bytes:
        rng = self.rng
        if self.tokens and rng.random() < 0.7:
            return rng.choice(self.tokens[-3:] if rng.random() < 0.6 else self.tokens)
        return rng.choice(self.names)

    def word(self, w: str) -> str:
        return w.lower() if self.rng.random() < 0.2 else w

    def step(self) -> tuple[str, list[Any]]:
        """A command and its arguments after the key."""
        rng = self.rng
        pick = rng.random()
        if pick < 0.25:
            groups: list[list[Any]] = []
            if rng.random() < 0.3:
                groups.append([self.word("RTT"), rng.choice(["5", "250us", "3ms", "2s", "1US"])])
            if rng.random() < 0.2:
                groups.append([self.word("DROPPED")])
            rng.shuffle(groups)
            return RELEASE, [self.token(), *(w for g in groups for w in g)]
        if pick < 0.28:
            return rng.choice([
                (ACQUIRE, [self.limit]), (ACQUIRE, [0, "1s"]), (ACQUIRE, [100_001, "1s"]),
                (ACQUIRE, ["05", "1s"]), (ACQUIRE, [2, "0"]), (ACQUIRE, [2, "1s", "ID"]),
                (ACQUIRE, [2, "1s", "ID", ""]), (ACQUIRE, [2, "1s", "ID", "x" * 257]),
                (ACQUIRE, [2, "1s", "FAST"]), (ACQUIRE, [2, "1s", "MIN", 3]),
                (ACQUIRE, [2, "1s", "SHADOW", "shadow"]), (ACQUIRE, [2, "1s", "ADAPTIVE", "X"]),
                (RELEASE, []), (RELEASE, ["t", "RTT"]), (RELEASE, ["t", "RTT", "0"]),
                (RELEASE, ["t", "DROPPED", "dropped"]), (RELEASE, ["t", "FAST"]),
            ])
        if rng.random() < 0.1:
            self.limit = self.new_limit()
        if rng.random() < 0.1:
            self.lease = rng.choice(LEASES)
        args = [self.limit, self.spell(self.lease)]
        groups = []
        if rng.random() < 0.45:
            groups.append([self.word("ID"), self.token()])
        if rng.random() < 0.12:
            groups.append([self.word("DRYRUN")])
        if rng.random() < 0.12:
            groups.append([self.word("SHADOW")])
        rng.shuffle(groups)
        return ACQUIRE, args + [w for g in groups for w in g]

    def spell(self, ms: int) -> str:
        units = [("", 1), ("ms", 1), ("s", SECOND), ("m", MINUTE), ("h", HOUR), ("d", DAY)]
        unit, n = self.rng.choice([(u, n) for u, n in units if ms % n == 0])
        return f"{ms // n}{unit}"

    def explain(self, got: Any, want: Any) -> str:
        recent = "\n  ".join(self.history[-12:])
        return f"sequence {self.n} (seed {SEED}): script {got!r} != module {want!r}\nlast steps:\n  {recent}"


def run_sequence(c: redis.Redis, shas: dict[str, str], seq: Sequence, steps: int, counts: dict[str, int]) -> None:
    c.delete(seq.m, seq.s)
    rng = seq.rng
    conn = c.connection_pool.get_connection()
    try:
        for _ in range(steps):
            seq.ms += seq.gap()
            if rng.random() < 0.03:
                c.delete(seq.m, seq.s)
                seq.history.append(f"@{seq.ms - T0_MS} DEL (expiry)")
            command, args = seq.step()
            name = "concurrency_acquire" if command == ACQUIRE else "concurrency_release"
            seq.history.append(f"@{seq.ms - T0_MS} {command} {' '.join(map(repr, args))}")
            (_, want, got, inspect, probe), elapsed = timed_transaction(conn, [
                ("RL.DEBUG.CLOCK", "SET", seq.ms), (command, seq.m, *args),
                ("EVALSHA", shas[name], 1, seq.s, *args, "NOW", seq.ms * 1000),
                ("RL.INSPECT", seq.m), ("EVALSHA", shas["probe"], 2, seq.m, seq.s)])
            ttl_m, ttl_s, in_m, in_s, zset = json.loads(probe)
            ttl_m, ttl_s = int(ttl_m), int(ttl_s)
            counts["steps"] += 1
            if isinstance(want, Exception) or isinstance(got, Exception):
                assert type(got) is type(want) and str(got) == str(want), seq.explain(got, want)
                counts["errors"] += 1
                continue
            assert got == want, seq.explain(got, want)
            upper = [str(a).upper() for a in args]
            if command == ACQUIRE:
                shadow_denied = "SHADOW" in upper and want[-1] == 1
                counts["shadow_denied" if shadow_denied else "dryrun" if "DRYRUN" in upper
                       else "admitted" if want[0] else "denied"] += 1
                if want[5] is not None and want[5] not in seq.tokens:
                    seq.tokens.append(want[5])
            else:
                counts["released" if want == 1 else "not_held"] += 1
            ttls = seq.explain((got, "pttl", ttl_s, in_s), (want, "pttl", ttl_m, in_m))
            if in_m != in_s:
                # One key expired in real time before its PERSIST (Redis 7.0 reads its clock at
                # each command): its TTL, the other's too, was shorter than the transaction, and
                # the other's PTTL is at most that TTL. Both go.
                assert max(ttl_m, ttl_s) < elapsed, ttls
                c.delete(seq.m, seq.s)
                counts["lapsed"] = counts.get("lapsed", 0) + 1
                continue
            if not in_m:
                continue
            shown = dict(zip(inspect[::2], inspect[1::2]))
            theirs = {k.decode(): v for k, v in shown.items() if k != b"algorithm"}
            if command == ACQUIRE and want[0] == 0 and theirs["held"] > theirs["limit"]:
                counts["denied_above_limit"] += 1  # retry_after: the (held - limit + 1)-th end
            mine = state_of(zset, seq.ms * 1000)
            assert mine == theirs, seq.explain((got, "state", mine), (want, "RL.INSPECT", theirs))
            if ttl_m >= 0 or ttl_s >= 0:  # written now: the TTL is the key's reset_after_ms, less the time since
                assert -1 not in (ttl_m, ttl_s) and abs(ttl_m - ttl_s) <= elapsed, ttls
                reset = theirs["reset_after_ms"]
                assert reset - elapsed <= ttl_m <= reset and reset - elapsed <= ttl_s <= reset, ttls
                counts["written"] += 1
            else:
                assert ttl_m == ttl_s == -1, ttls
    finally:
        c.connection_pool.release(conn)


def test_random_sequences_reply_as_the_module(rl: Server, shas: dict[str, str]) -> None:
    """Acquisitions with and without ID, renewals of held tokens, DRYRUN, SHADOW, releases of
    held, unknown and ended tokens (with RTT and DROPPED), limits up and down (more leases held
    than the limit, then the (held - limit + 1)-th to end frees one), leases from 1 ms to ten
    years, idle gaps that end leases, clock steps back, keys deleted as if expired, and bad
    arguments."""
    counts = {k: 0 for k in ("steps", "admitted", "denied", "dryrun", "shadow_denied", "released",
                             "not_held", "errors", "written", "denied_above_limit")}
    with rl.client(protocol=2) as c:
        for n in range(SEQUENCES):
            run_sequence(c, shas, Sequence(n), STEPS, counts)
        c.execute_command("RL.DEBUG.CLOCK", "SET", T0_MS)
    print(f"\nleases: {counts}")
    assert counts["steps"] == SEQUENCES * STEPS
    assert all(counts[k] for k in counts), counts


def test_above_a_lowered_limit_and_many_leases(rl: Server, shas: dict[str, str]) -> None:
    """Hundreds of leases of different lengths, then a limit of 1: a refusal waits for the
    (held - limit + 1)-th lease to end, on both; then they end one by one."""
    ms = T0_MS
    with rl.client(protocol=2) as c:
        c.delete("m:many", "s:many")

        def both(command: str, *args: Any) -> Any:
            c.execute_command("RL.DEBUG.CLOCK", "SET", ms)
            want = outcome(lambda: c.execute_command(command, "m:many", *args))
            name = "concurrency_acquire" if command == ACQUIRE else "concurrency_release"
            got = outcome(lambda: c.evalsha(shas[name], 1, "s:many", *args, "NOW", ms * 1000))
            assert got == want, (command, args, ms)
            return want

        rng = random.Random(SEED)
        tokens = []
        for i in range(400):
            ms += rng.choice([0, 0, 1, 3])
            r = both(ACQUIRE, 1000, f"{rng.randint(1, 5000)}ms", *(["ID", f"id{i}"] if i % 3 else []))
            tokens.append(r[5])
        for _ in range(60):
            ms += rng.randint(0, 150)
            r = both(ACQUIRE, rng.choice([1, 2, 50, 1000]), "1s", *rng.choice([[], ["DRYRUN"], ["ID", rng.choice(tokens)]]))
            if rng.random() < 0.3:
                both(RELEASE, rng.choice(tokens))
        c.execute_command("RL.DEBUG.CLOCK", "SET", T0_MS)


def test_the_concurrency_page_example(rl: Server, shas: dict[str, str]) -> None:
    """docs/concurrency.md's session, on the script, with the clock at 1700000000000 ms."""
    now = 1_700_000_000_000_000
    with rl.client(protocol=2) as c:
        c.delete("s:jobs")

        def script(name: str, *args: Any) -> Any:
            return c.evalsha(shas[name], 1, "s:jobs", *args, "NOW", now)

        assert script("concurrency_acquire", 2, "30s") == [1, 2, 1, 0, 30000, b"60a24181e4000-0"]
        assert script("concurrency_acquire", 2, "30s", "ID", "worker-7") == [1, 2, 0, 0, 30000, b"worker-7"]
        assert script("concurrency_acquire", 2, "30s") == [0, 2, 0, 30000, 30000, None]
        assert script("concurrency_release", "worker-7") == 1
        assert script("concurrency_release", "worker-7") == 0
        assert script("concurrency_acquire", 2, "30s", "SHADOW") == [1, 2, 0, 0, 30000, b"60a24181e4000-1", 0]
        assert script("concurrency_acquire", 2, "30s", "SHADOW") == [1, 2, 0, 30000, 30000, None, 1]
        assert script("concurrency_acquire", 3, "30s", "DRYRUN") == [1, 3, 0, 0, 30000, None]


BAD_ACQUIRE = [
    [], ["2"], ["0", "1s"], ["100001", "1s"], ["-1", "1s"], ["05", "1s"], ["99999999999999999999", "1s"],
    ["2", "0"], ["2", "1y"], ["2", "1s", "ID"], ["2", "1s", "ID", ""], ["2", "1s", "ID", "x" * 257],
    ["2", "1s", "ID", "a", "id", "b"], ["2", "1s", "FAST"], ["2", "1s", "DRYRUN", "dryrun"],
    ["2", "1s", "SHADOW", "SHADOW"], ["2", "1s", "MIN", "3"], ["2", "1s", "MAX", "3"], ["2", "1s", "MIN", "0"],
    ["2", "1s", "MAX", "100001"], ["2", "1s", "MIN", "03"], ["2", "1s", "ADAPTIVE"], ["2", "1s", "ADAPTIVE", "X"],
    ["2", "1s", "ADAPTIVE", "AIMD", "ADAPTIVE", "VEGAS"], ["2", "1s", "MIN", "3", "MIN", "4"],
    ["2", "1s", "ADAPTIVE", "AIMD", "FAST"], ["2", "1s", "COST", "1"], ["0", "1s", "FAST"],
    ["2", "1s", "it's\r\n" + "x" * 40],
]
BAD_RELEASE = [
    [], ["t", "RTT"], ["t", "RTT", "0"], ["t", "RTT", "0us"], ["t", "RTT", "us"], ["t", "RTT", "1mus"],
    ["t", "RTT", "315360000000001us"], ["t", "RTT", "3651d"], ["t", "RTT", "1x"], ["t", "RTT", "05"],
    ["t", "RTT", "5", "RTT", "5"], ["t", "DROPPED", "DROPPED"], ["t", "FAST"], ["t", "DROPPED", "x"],
]
# Accepted by both (RTT and DROPPED change nothing on a key that is not adaptive).
GOOD_RELEASE = [["t", "RTT", "1us"], ["t", "rtt", "315360000000000US"], ["t", "RTT", "3650d", "dropped"],
                ["t", "DROPPED", "RTT", "1500"], ["t", "RTT", "2s"]]


def test_bad_arguments_get_the_module_errors(rl: Server, shas: dict[str, str]) -> None:
    """The same bad arguments, the same error text, checked before the key is touched; valid
    ADAPTIVE (and MIN, MAX with it) is refused by the script as needing the module."""
    with rl.client(protocol=2) as c:
        c.set("str", "v")
        c.delete("nokey")
        now = T0_MS * 1000
        for name, command, bad in [("concurrency_acquire", ACQUIRE, BAD_ACQUIRE),
                                   ("concurrency_release", RELEASE, BAD_RELEASE + GOOD_RELEASE)]:
            for args in bad:
                for key in ("nokey", "str"):
                    want = outcome(lambda: c.execute_command(command, key, *args))
                    got = outcome(lambda: c.evalsha(shas[name], 1, key, *args, "NOW", now))
                    if key == "str" and want == ("error", MODULE_WRONGTYPE):
                        assert got[0] == "error" and got[1].startswith(SCRIPT_WRONGTYPE), (args, got)
                    else:
                        assert got == want, (name, args, key)
        for args in (["2", "1s", "ADAPTIVE", "AIMD"], ["2", "1s", "adaptive", "vegas", "MIN", "1", "MAX", "10"],
                     ["2", "1s", "ADAPTIVE", "GRADIENT2", "MIN", "30", "MAX", "4"], ["2", "1s", "MAX", "9", "ADAPTIVE", "AIMD"]):
            got = outcome(lambda: c.evalsha(shas["concurrency_acquire"], 1, "nokey", *args, "NOW", now))
            assert got[0] == "error" and got[1].startswith(ADAPTIVE), (args, got)
        assert c.exists("nokey") == 0
        # One key, as every script.
        got = outcome(lambda: c.evalsha(shas["concurrency_acquire"], 2, "a", "b", 2, "1s"))
        assert got[0] == "error" and "exactly one key" in got[1]


def test_a_key_of_the_other_backend_is_refused(rl: Server, shas: dict[str, str]) -> None:
    """A module lease key and a script lease key refuse the other backend; a string, a hash and
    a sorted set that are not a limiter's are refused; an admission script's key and a lease key
    name each other as the module does; RL.REFUND refuses a lease key with the module's text."""
    now = T0_MS * 1000
    with rl.client(protocol=2) as c:
        c.execute_command("RL.DEBUG.CLOCK", "SET", T0_MS)
        c.delete("mk", "sk", "mg", "sg", "h", "z", "str")
        c.execute_command(ACQUIRE, "mk", 2, "1s")
        c.evalsha(shas["concurrency_acquire"], 1, "sk", 2, "1s", "NOW", now)
        for name, args in [("concurrency_acquire", [2, "1s"]), ("concurrency_release", ["t"])]:
            got = outcome(lambda: c.evalsha(shas[name], 1, "mk", *args, "NOW", now))
            assert got[0] == "error" and got[1].startswith(SCRIPT_WRONGTYPE), (name, got)
        for command, args in [(ACQUIRE, [2, "1s"]), (RELEASE, ["t"]), ("RL.GCRA", [5, 1, "1s"])]:
            assert outcome(lambda: c.execute_command(command, "sk", *args)) == ("error", MODULE_WRONGTYPE)
        c.hset("h", "x", "1")
        c.hset("hcc", "a", "cc1")
        c.zadd("z", {"a": 1, "x": 2})
        c.set("str", "v")
        for key in ("h", "hcc", "z", "str"):
            for name, args in [("concurrency_acquire", [2, "1s"]), ("concurrency_release", ["t"])]:
                got = outcome(lambda: c.evalsha(shas[name], 1, key, *args, "NOW", now))
                assert got[0] == "error" and got[1].startswith(SCRIPT_WRONGTYPE), (key, name, got)
        # An admission key under a lease command, and a lease key under an admission command
        # and RL.REFUND: the module's texts, from both.
        c.execute_command("RL.GCRA", "mg", 5, 1, "1s")
        c.evalsha(shas["gcra"], 1, "sg", 5, 1, "1s", "NOW", now)
        for command, name, args in [(ACQUIRE, "concurrency_acquire", [2, "1s"]), (RELEASE, "concurrency_release", ["t"])]:
            want = outcome(lambda: c.execute_command(command, "mg", *args))
            assert want[0] == "error" and "the key holds RL.GCRA state" in want[1]
            assert outcome(lambda: c.evalsha(shas[name], 1, "sg", *args, "NOW", now)) == want
        for command, name, args in [("RL.GCRA", "gcra", [5, 1, "1s"]), ("RL.GCRA", "gcra", [5, 1, "1s", "SHADOW"]),
                                    ("RL.REFUND", "refund", [1]), ("RL.REFUND", "refund", [1, "DRYRUN"])]:
            want = outcome(lambda: c.execute_command(command, "mk", *args))
            assert want[0] == "error" and "concurrency" in want[1].lower(), want
            assert outcome(lambda: c.evalsha(shas[name], 1, "sk", *args, "NOW", now)) == want


def test_a_generated_token_that_names_a_held_lease(rl: Server, shas: dict[str, str]) -> None:
    """A caller's ID that is the token the key generates next: the generated one takes its lease
    over (no second slot) when a slot is free, and is refused when none is (a generated token
    never renews), as on the module."""
    ms = T0_MS
    with rl.client(protocol=2) as c:
        c.execute_command("RL.DEBUG.CLOCK", "SET", ms)
        for limit in (1, 2):
            c.delete("m:gen", "s:gen")
            for args in ([limit, "1s", "ID", f"{ms * 1000:x}-0"], [limit, "1s"], [limit, "1s", "DRYRUN"], [limit, "1s"]):
                want = c.execute_command(ACQUIRE, "m:gen", *args)
                got = c.evalsha(shas["concurrency_acquire"], 1, "s:gen", *args, "NOW", ms * 1000)
                assert got == want, (limit, args, got, want)
            assert dict(zip(*[iter(c.execute_command("RL.INSPECT", "m:gen"))] * 2))[b"held"] == limit


def test_microseconds(rl: Server, shas: dict[str, str]) -> None:
    """What the ms debug clock cannot show: times between whole ms are rounded up, as the
    module's Span::ceil_ms (a refusal 1.5 ms after a 1 s lease waits 998.5 ms: 999)."""
    now = T0_MS * 1000 + 1
    with rl.client(protocol=2) as c:
        c.delete("s:us")

        def acquire(at: int, *args: Any) -> Any:
            return c.evalsha(shas["concurrency_acquire"], 1, "s:us", *args, "NOW", at)

        assert acquire(now, 1, "1s", "ID", "a") == [1, 1, 0, 0, 1000, b"a"]
        assert acquire(now + 1500, 1, "1s") == [0, 1, 0, 999, 999, None]
        assert acquire(now + 999_999, 1, "1s") == [0, 1, 0, 1, 1, None]
        assert acquire(now + 1_000_000, 1, "1s")[:5] == [1, 1, 0, 0, 1000]
        assert 0 < c.pttl("s:us") <= 1000
