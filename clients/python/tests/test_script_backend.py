"""The package on the script backend (issue 28; docs/managed.md): ``backend="auto" | "module" |
"script"``, the scripts called by their SHA (loaded again after NOSCRIPT), the module's features
refused with ModuleRequired before anything is sent, the middleware, a cluster, and an installed
package that carries the scripts.

A plain redis-server (no module) is the script backend's server. The exact values come from the
module: the same sequence runs on a server with the module and its debug clock frozen, and on
the plain server through the scripts' test-only clock (``NOW <µs>``, set through the limiter's
private ``_script_now``, which the public API never sends), at the same instant; a few are also
written out by hand (GCRA, docs/algorithms.md).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse

from conftest import PATIENT, ROOT, T0_MS, PlainServer, Server, package_test
from ratelimit_redis_module import (
    GCRA,
    AsyncRateLimiter,
    Concurrency,
    FixedWindow,
    Guard,
    LeakyBucket,
    ModuleRequired,
    Policy,
    RateLimiter,
    RateLimitMiddleware,
    SlidingLog,
    SlidingWindow,
    TokenBucket,
    Warmup,
)
from ratelimit_redis_module.scripts import SCRIPTS, script_sha, script_source


# --- every algorithm through the function API, as on the module ------------------------------

LIMITS = [
    GCRA(4, 2, "1m"),
    TokenBucket(4, 2, "1m"),
    TokenBucket(4, 2, "1m", interval=True),
    LeakyBucket(4, 2, "1m"),
    FixedWindow(4, "1m"),
    SlidingWindow(4, "1m"),
    SlidingLog(4, "1m"),
    Warmup(4, "1m", "2m"),
    Warmup(4, "1m", "2m", cold_factor=5),
]

# (what, argument): a check's options, a refund (DRYRUN or not), or ms for both clocks to move.
STEPS: list[tuple[str, Any]] = [
    ("check", {}),
    ("check", {"cost": 2}),
    ("check", {"dryrun": True}),
    ("check", {"at_most": 5}),
    ("check", {}),
    ("refund", (1, True)),
    ("refund", (1, False)),
    ("check", {"cost": 0}),
    ("advance", 20_000),
    ("check", {"at_most": 3}),
    ("check", {"cost": 9}),
    ("check", {"cost": 9, "block": "30s"}),
    ("check", {"dryrun": True}),
    ("advance", 10_000),
    ("check", {}),
    ("advance", 25_000),
    ("check", {"cost": 3}),
    ("refund", (5, False)),
    ("advance", 121_000),
    ("check", {"at_most": 9}),
]


def run(limiter: RateLimiter, limit: Any, key: str, step: tuple[str, Any]) -> Any:
    what, arg = step
    try:
        if what == "check":
            return limiter.check(limit, key, **arg)
        units, dryrun = arg
        return limiter.refund(key, units, dryrun=dryrun, limit=limit)
    except redis.ResponseError as error:
        return f"error: {error}"


def replay_on_both(
    limit: Any, key: str, steps: list[tuple[str, Any]], plain: PlainServer, module_server: Server
) -> tuple[list[Any], bytes]:
    """``steps`` on the script backend (a plain server, the scripts' test clock) and on the
    module (its debug clock) at the same instants, each pair of answers asserted equal field by
    field; returns the answers and the type of the scripts' key after."""
    now_ms = T0_MS
    module_server.freeze(now_ms)
    with plain.client() as p, module_server.client() as m:
        p.delete(key)
        m.delete(key)
        scripts = RateLimiter(p, backend="script")
        scripts._script_now = lambda: now_ms * 1000
        module = RateLimiter(m, backend="module")
        answers = []
        for step in steps:
            if step[0] == "advance":
                now_ms += step[1]
                module_server.advance(step[1])
                continue
            got, want = run(scripts, limit, key, step), run(module, limit, key, step)
            assert got == want, (step, got, want)
            answers.append(got)
        return answers, p.type(key)


@pytest.mark.parametrize("limit", LIMITS, ids=lambda limit: repr(limit)[:40])
def test_each_algorithm_answers_as_the_module(limit: Any, plain: PlainServer, module_server: Server) -> None:
    """Admitted, refused, ATMOST (granted), DRYRUN, COST (0 and above the limit), BLOCK,
    refunds (DRYRUN or not) and idle time: the script backend's decisions equal the module's
    field by field, at the same instants."""
    key = f"seq:{limit!r}"
    answers, key_type = replay_on_both(limit, key, STEPS, plain, module_server)
    assert key_type == b"hash"  # the script's state, in plain Redis types
    assert any(getattr(a, "allowed", None) is False for a in answers)
    assert any(getattr(a, "allowed", None) is True for a in answers)
    assert any(isinstance(a, int) and a > 0 for a in answers)  # a refund gave units back


# SHADOW: would-be denials answered as allowed (shadow_denied), writing nothing and starting no
# BLOCK, with ATMOST, DRYRUN, BLOCK and a BLOCK in force.
SHADOW_STEPS: list[tuple[str, Any]] = [
    ("check", {"shadow": True}),
    ("check", {"cost": 4, "shadow": True}),
    ("check", {"cost": 3}),
    ("check", {"shadow": True}),
    ("check", {"at_most": 5, "shadow": True}),
    ("check", {"dryrun": True, "shadow": True}),
    ("check", {"cost": 9, "block": "30s", "shadow": True}),
    ("check", {"cost": 2, "block": "30s", "shadow": True}),
    ("check", {}),
    ("advance", 20_000),
    ("check", {"cost": 2, "block": "30s"}),
    ("check", {"shadow": True}),
    ("refund", (1, False)),
    ("advance", 31_000),
    ("check", {"cost": 2, "shadow": True}),
    ("check", {"at_most": 9, "shadow": True}),
    ("check", {}),
]


@pytest.mark.parametrize("limit", LIMITS, ids=lambda limit: repr(limit)[:40])
def test_shadow_answers_as_the_module(limit: Any, plain: PlainServer, module_server: Server) -> None:
    """``shadow=True`` on the script backend: the same decisions as the module's, field by field
    (``shadow_denied`` included), and the same state after (the plain checks that follow)."""
    answers, _ = replay_on_both(limit, f"shadow:{limit!r}", SHADOW_STEPS, plain, module_server)
    shadowed = [a for a, s in zip(answers, [s for s in SHADOW_STEPS if s[0] != "advance"])
                if s[0] == "check" and s[1].get("shadow")]
    assert all(a.allowed for a in shadowed)
    assert any(a.shadow_denied for a in shadowed) and any(not a.shadow_denied for a in shadowed)


def test_gcra_exact_values_on_the_scripts(plain: PlainServer) -> None:
    """GCRA burst 4, 2 per minute (30 s apart), written out: the scripts' answers as the module
    documents them (docs/algorithms.md)."""
    with plain.client(protocol=3, decode_responses=True) as c:
        c.delete("gcra:exact")
        limiter = RateLimiter(c, backend="script")
        t = T0_MS
        limiter._script_now = lambda: t * 1000
        d = limiter.gcra("gcra:exact", 4, 2, "1m")
        assert (d.allowed, d.limit, d.remaining, d.retry_after_ms, d.reset_after_ms) == (True, 4, 3, 0, 30_000)
        d = limiter.gcra("gcra:exact", 4, 2, "1m", cost=3)
        assert (d.allowed, d.remaining, d.retry_after_ms, d.reset_after_ms) == (True, 0, 0, 120_000)
        d = limiter.gcra("gcra:exact", 4, 2, "1m")
        assert (d.allowed, d.remaining, d.retry_after_ms, d.reset_after_ms) == (False, 0, 30_000, 120_000)
        d = limiter.gcra("gcra:exact", 4, 2, "1m", at_most=2, dryrun=True)
        assert (d.allowed, d.granted) == (False, 0)
        assert limiter.refund("gcra:exact", 2, dryrun=True) == 2
        assert limiter.refund("gcra:exact", 2) == 2
        d = limiter.gcra("gcra:exact", 4, 2, "1m", at_most=5)
        assert (d.allowed, d.granted, d.remaining, d.reset_after_ms) == (True, 2, 0, 120_000)
        t += 45_000  # 1.5 intervals: one unit back, the next in 15 s
        d = limiter.gcra("gcra:exact", 4, 2, "1m", cost=2)
        assert (d.allowed, d.remaining, d.retry_after_ms, d.reset_after_ms) == (False, 1, 15_000, 75_000)
        d = limiter.gcra("gcra:exact", 4, 2, "1m", cost=9, block="10s")
        assert (d.allowed, d.retry_after_ms) == (False, -1)  # more than the burst: never


def test_leaky_bucket_delay_on_the_scripts(plain: PlainServer) -> None:
    """RL.LEAKYBUCKET's sixth field, delay_ms, through the script: a queue of 3 draining 2 a
    minute (clients/lua/README.md's example)."""
    with plain.client() as c:
        c.delete("jobs")
        limiter = RateLimiter(c, backend="script")
        limiter._script_now = lambda: T0_MS * 1000
        delays = [limiter.leaky_bucket("jobs", 3, 2, "1m").delay_ms for _ in range(4)]
        assert delays == [0, 30_000, 60_000, -1]


# --- auto, module, script -------------------------------------------------------------------


def test_auto_picks_the_module_where_it_is_loaded_and_the_scripts_where_not(
    plain: PlainServer, module_server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    """Asked once per limiter (COMMAND INFO RL.GCRA, by its setup from its creation: the first
    call waits for it rather than asking beside it), logged once, shown in stats.backend."""
    caplog.set_level(logging.INFO, logger="ratelimit_redis_module")
    for server, chosen, command in ((plain, "script", "evalsha"), (module_server, "module", "rl.gcra")):
        asked, sent = server.calls("command|info"), server.calls(command)
        with server.client() as c:
            limiter = RateLimiter(c, setup_timeout=60)
            for _ in range(3):
                assert limiter.gcra(f"auto:{chosen}", 10, 10, "1h").allowed
            assert limiter.backend == chosen and limiter.stats.backend == chosen
        assert server.calls("command|info") == asked + 1
        assert server.calls(command) == sent + 3
    messages = [r.getMessage() for r in caplog.records if r.name == "ratelimit_redis_module"]
    assert messages == [
        "ratelimit: the server has no ratelimit module; using the script backend",
        "ratelimit: using the module",
    ]


def test_module_forced_on_a_server_without_it_is_a_clear_error(plain: PlainServer) -> None:
    with plain.client() as c:
        limiter = RateLimiter(c, backend="module")
        assert limiter.stats.backend == "module"
        with pytest.raises(ModuleRequired, match="the server has no ratelimit module.*backend='module'"):
            limiter.gcra("forced:module", 1, 1, "1s")
    with pytest.raises(ValueError, match="invalid backend 'lua'"):
        RateLimiter(redis.Redis(), backend="lua")


def test_script_forced_on_a_module_server_works(module_server: Server) -> None:
    before, direct = module_server.calls("evalsha"), module_server.calls("rl.fixedwindow")
    with module_server.client() as c:
        c.delete("forced:script")
        c.script_flush()
        limiter = RateLimiter(c, backend="script", setup_timeout=60)
        assert limiter.stats.backend == "script"
        assert [limiter.fixed_window("forced:script", 2, "1h").allowed for _ in range(3)] == [True, True, False]
        assert limiter.refund("forced:script", 1) == 1
        assert c.type("forced:script") == b"hash"
    # Four calls, each answered at once: the setup loaded the scripts (no NOSCRIPT).
    assert module_server.calls("evalsha") == before + 4
    assert module_server.calls("rl.fixedwindow") == direct


def test_noscript_loads_again_and_answers(plain: PlainServer) -> None:
    """After SCRIPT FLUSH, the next call gets NOSCRIPT, loads the script (SCRIPT LOAD, the SHA
    computed locally) and is answered; durable's pipeline too."""
    with plain.client() as c:
        c.delete("noscript")
        limiter = RateLimiter(c)
        assert limiter.sliding_window("noscript", 5, "1h").remaining == 4
        c.script_flush()
        loads = plain.calls("script|load")
        assert limiter.sliding_window("noscript", 5, "1h").remaining == 3
        assert plain.calls("script|load") == loads + 1
        assert c.script_exists(script_sha("slidingwindow")) == [True]
        c.script_flush()
        with pytest.raises(Exception, match="acknowledged by 0 of the 1 replicas"):  # NotDurable, not NOSCRIPT
            limiter.sliding_window("noscript", 5, "1h", durable=1, durable_timeout_ms=1)
        # The admission was made (and not counted as admitted: NotDurable), after its reload.
        assert limiter.sliding_window("noscript", 5, "1h", dryrun=True).remaining == 1


async def test_async_limiter_on_the_scripts(plain: PlainServer) -> None:
    client = redis.asyncio.Redis(host="127.0.0.1", port=plain.port, protocol=3)
    try:
        await client.delete("async:scripts")
        limiter = AsyncRateLimiter(client)
        assert limiter.stats.backend is None
        d = await limiter.token_bucket("async:scripts", 3, 1, "1h", at_most=5)
        assert (d.allowed, d.granted, d.remaining) == (True, 3, 0)
        assert limiter.stats.backend == "script"
        await client.script_flush()
        assert (await limiter.token_bucket("async:scripts", 3, 1, "1h")).allowed is False
        assert await limiter.refund("async:scripts", 2) == 2
        with pytest.raises(ModuleRequired, match="RL.LIMIT needs the ratelimit module"):
            await limiter.limit("async:scripts", "api")
        with pytest.raises(ModuleRequired, match="adaptive concurrency limit"):
            await limiter.acquire("async:lease", 3, "10s", adaptive="aimd")
    finally:
        await client.aclose()


# --- what needs the module -------------------------------------------------------------------


def test_what_needs_the_module_is_refused_before_anything_is_sent(plain: PlainServer) -> None:
    with plain.client() as c:
        limiter = RateLimiter(c, backend="script", setup_timeout=60)
        assert limiter.ready()  # its scripts loaded: counted before
        total = sum(int(v["calls"]) for v in c.info("commandstats").values())
        refused = [
            lambda: limiter.limit("k", "api"),
            lambda: limiter.check(Policy("api"), "k"),
            lambda: limiter.policy_set("api", GCRA(1, 1, "1s")),
            lambda: limiter.policy_get("api"),
            lambda: limiter.policy_del("api"),
            lambda: limiter.policy_list(),
            lambda: limiter.acquire("k", 3, "10s", adaptive="aimd", min=1, max=10),
            lambda: limiter.check(Concurrency(3, "10s", adaptive="vegas"), "k"),
            lambda: limiter.acquire("k", 3, "10s", adaptive="gradient2", shadow=True),
            lambda: limiter.limit("k", "api", shadow=True),
        ]
        for call in refused:
            with pytest.raises(ModuleRequired, match="needs the ratelimit module"):
                call()
        # Only the INFO that counted: nothing was sent for the refused calls.
        assert sum(int(v["calls"]) for v in c.info("commandstats").values()) == total + 1
        guard = Guard(c, Policy("api"), backend="script")
        with pytest.raises(ModuleRequired):  # not failed open: a configuration error
            guard.check("someone")
        # Local budgets work on the scripts (ATMOST and RL.REFUND).
        c.delete("budget")
        budgeted = RateLimiter(c, backend="script")
        limit = GCRA(10, 10, "1h", local_budget=4)
        assert all(budgeted.check(limit, "budget").allowed for _ in range(6))
        assert budgeted.stats.local_admitted == 4 and budgeted.stats.refills == 2
        assert budgeted.close() == 2
        # 7 units counted (two refills, 2 held given back): the module says the same.
        assert budgeted.gcra("budget", 10, 10, "1h", dryrun=True).remaining == 3


def test_a_key_of_the_other_backend_is_refused_with_a_clear_error(module_server: Server) -> None:
    with module_server.client() as c:
        c.delete("other:m", "other:s")
        module, scripts = RateLimiter(c, backend="module"), RateLimiter(c, backend="script")
        module.gcra("other:m", 5, 1, "1s")
        scripts.gcra("other:s", 5, 1, "1s")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE the key holds a value of another type .a ratelimit module key"):
            scripts.gcra("other:m", 5, 1, "1s")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            module.gcra("other:s", 5, 1, "1s")
        with pytest.raises(redis.ResponseError, match="holds RL.GCRA state, not RL.TOKENBUCKET"):
            scripts.token_bucket("other:s", 5, 1, "1s")


# --- the middleware --------------------------------------------------------------------------


def app_for(server: Server, **options: Any) -> FastAPI:
    app = FastAPI()

    @app.get("/")
    async def root(request: Request) -> PlainTextResponse:
        return PlainTextResponse("hello")

    client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
    options.setdefault("timeout", PATIENT)
    options.setdefault("setup_timeout", PATIENT)
    app.add_middleware(RateLimitMiddleware, redis=client, limit=GCRA(2, 1, "1h"), **options)
    return app


def test_middleware_headers_and_429_as_on_the_module(plain: PlainServer, module_server: Server, serve: Any) -> None:
    """The same requests through the ASGI middleware on the scripts (auto, no module) and on the
    module: the same statuses, headers and bodies."""
    module_server.freeze(T0_MS)
    with plain.client() as c, module_server.client() as m:
        c.delete("rl:http:127.0.0.1")
        m.delete("rl:http:127.0.0.1")
    on_scripts = serve(app_for(plain))
    on_module = serve(app_for(module_server, backend="module"))
    got = [on_scripts.get() for _ in range(3)]
    want = [on_module.get() for _ in range(3)]
    assert [g[0] for g in got] == [200, 200, 429]
    assert got == want
    assert ("retry-after", "3600") in got[2][1]


# --- a cluster -------------------------------------------------------------------------------


def test_scripts_on_a_cluster(plain_cluster: list[Server]) -> None:
    """A cluster without the module: auto picks the scripts; one key, declared: each call goes
    to its key's node; NOSCRIPT there loads it there."""
    cluster = plain_cluster
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster[0].port)
    try:
        limiter = RateLimiter(client)
        keys = [f"cluster:script:{i}" for i in range(12)]
        nodes = {client.get_node_from_key(k).port for k in keys}
        assert len(nodes) == 3
        for k in keys:
            client.delete(k)
            assert limiter.gcra(k, 1, 1, "1h").allowed
        for node in cluster:
            with node.client() as c:
                c.script_flush()
        assert not any(limiter.gcra(k, 1, 1, "1h").allowed for k in keys)
        assert all(limiter.refund(k, 1) == 1 for k in keys)
        assert limiter.backend == "script"
    finally:
        client.close()


# --- shipping: an installed package carries the scripts --------------------------------------

INSTALLED_CHECK = """
import sys
import redis
import ratelimit_redis_module as rl
from ratelimit_redis_module import scripts

folder = scripts._folder()
assert "site-packages" in str(folder), folder
c = redis.Redis(port=int(sys.argv[1]))
c.flushall()
c.script_flush()
limiter = rl.RateLimiter(c)
assert limiter.gcra("g", 2, 1, "1h").remaining == 1
assert limiter.token_bucket("t", 2, 1, "1h", interval=True).remaining == 1
assert limiter.leaky_bucket("l", 2, 1, "1h").delay_ms == 0
assert limiter.fixed_window("f", 2, "1h").remaining == 1
assert limiter.sliding_window("s", 2, "1h").remaining == 1
assert limiter.sliding_log("sl", 2, "1h").remaining == 1
assert limiter.warmup("w", 2, "1h", "1h").allowed
assert limiter.refund("g", 1) == 1
assert limiter.counter("n", "1h", 2) == rl.Count(2, 3_600_000)
assert limiter.stats.backend == "script"
print(sorted(p.name for p in folder.rglob("*.lua")))
"""


@package_test
def test_an_installed_package_carries_the_scripts(plain: PlainServer, tmp_path: Path) -> None:
    """pip install of clients/python into a fresh venv (the build hook puts clients/lua in
    the wheel): every script loads from the installed package and answers a plain server."""
    venv = tmp_path / "venv"
    # Without a pip of its own (ensurepip took 6.7 of this test's 13 s of CPU): this venv's pip
    # installs into it (`pip --python`, pip 22.3 and later).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--disable-pip-version-check",
         str(ROOT / "clients" / "python")],
        check=True, cwd=tmp_path,
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RATELIMIT_SCRIPTS_DIR", "PYTHONPATH")}
    out = subprocess.run(
        [str(python), "-c", textwrap.dedent(INSTALLED_CHECK), str(plain.port)],
        check=True, cwd=tmp_path, env=env, capture_output=True, text=True,
    ).stdout
    entries = {p.name for p in (ROOT / "clients" / "lua").glob("*.lua")}
    parts = {p.name for p in (ROOT / "clients" / "lua" / "lib").glob("*.lua")}
    assert {f"{name}.lua" for name in SCRIPTS.values()} <= entries
    assert set(eval(out)) == entries | parts  # noqa: S307 - our own subprocess's list
    # The same text as the one source (no second copy to drift).
    installed = next((venv / "lib").glob("python3*/site-packages/ratelimit_redis_module/lua"))
    for name in SCRIPTS.values():
        assert (installed / f"{name}.lua").read_text() == (ROOT / "clients" / "lua" / f"{name}.lua").read_text()
    assert script_source("gcra").endswith((ROOT / "clients" / "lua" / "gcra.lua").read_text())
