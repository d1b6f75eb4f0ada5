"""The script backend where a managed service would put it (issue 28, item 3): a server with
``enable-module-command no`` (no module, and none can be loaded), and a user whose ACL allows
only the script commands, the commands the scripts call, and the limiter's keys (``~rl:*``).

A script's ``redis.call`` runs under the calling user's ACL, so such a user needs, besides
``EVALSHA`` and ``SCRIPT LOAD`` (the package's own commands: ``EVALSHA`` first, ``SCRIPT LOAD``
after ``NOSCRIPT``), every command the scripts of clients/scripts/ call: ``TIME``, ``HMGET``,
``EXISTS``, ``HSET``, ``PEXPIRE``, ``DEL`` and ``HDEL``. ``MINIMAL`` is that set, and
:func:`test_each_command_of_the_minimal_acl_is_needed` shows that each one is needed (the path
that needs it fails without it) and that ``EVAL``, which the issue names, is not: the package
never sends it.

Exact values come from the scripts' test-only clock (``NOW <µs>``, through the limiter's private
``_script_now``, as test_script_backend.py does); the values below are the module's (the same
sequences on a module server with its debug clock give the same replies).
"""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import redis
import redis.asyncio
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse

from conftest import T0_MS, Server, module_path, server_binary
from ratelimit_redis_module import (
    GCRA,
    FixedWindow,
    LeakyBucket,
    ModuleRequired,
    Policy,
    RateLimiter,
    RateLimitMiddleware,
    SlidingLog,
    SlidingWindow,
    Stats,
    TokenBucket,
    Warmup,
)

#: The package's commands, then the scripts' own: the least a script-backend user needs.
MINIMAL = ["+evalsha", "+script|load", "+time", "+hmget", "+exists", "+hset", "+pexpire", "+del", "+hdel"]
#: The user of the issue: EVALSHA, EVAL, SCRIPT LOAD, what the scripts call, and the limiter's keys.
USER_RULES = ["reset", "on", ">secret", "~rl:*", "-@all", "+eval", *MINIMAL]

# A script's redis.call refused by the ACL: Redis 7.0 says it one way, Redis 8.2 and Valkey 8.1
# another (naming the command).
IN_SCRIPT = "(The user executing the script can't run this command or subcommand|ACL failure in script: User {user} has no permissions to run the '{command}' command)"
# A key outside ~rl:* (EVALSHA's declared key, checked before the script runs): 7.0, then 8.2 and Valkey.
KEY_REFUSED = "^(this user has no permissions to access one of the keys used as arguments|No permissions to access a key)$"


class LockedServer(Server):
    """A redis-server without the module and with ``enable-module-command no``: MODULE LOAD is
    refused, as on a managed service."""

    def _spawn(self) -> None:
        self.proc = subprocess.Popen(
            [
                server_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
                "--logfile", "redis.log", "--save", "", "--appendonly", "no", "--enable-module-command", "no",
            ],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LockedServer]:
    s = LockedServer(tmp_path_factory.mktemp("locked"))
    yield s
    s.stop()


@pytest.fixture
def admin(locked: LockedServer) -> Iterator[redis.Redis]:
    """The default user, on an empty server (no keys, no scripts, no other users)."""
    with locked.client(decode_responses=True) as c:
        c.flushall()
        c.script_flush()
        for name in c.acl_users():
            if name != "default":
                c.acl_deluser(name)
        c.acl_log_reset()
        yield c


def user_client(server: Server, name: str, rules: list[str], admin: redis.Redis) -> redis.Redis:
    admin.execute_command("ACL", "SETUSER", name, *rules)
    return server.client(username=name, password="secret")


@pytest.fixture
def limited(locked: LockedServer, admin: redis.Redis) -> Iterator[redis.Redis]:
    """A connection as the issue's user."""
    c = user_client(locked, "limiter", USER_RULES, admin)
    yield c
    c.close()


def refusals(admin: redis.Redis) -> list[dict[str, Any]]:
    """ACL LOG's entries but redis-py's own CLIENT SETINFO at connect (Redis 7.2+ and Valkey
    know it; redis-py ignores its refusal; not the package's)."""
    return [e for e in admin.acl_log() if e["object"] != "client|setinfo"]


def decision(d: Any) -> tuple[Any, ...]:
    return (d.allowed, d.remaining, d.retry_after_ms, d.reset_after_ms, d.delay_ms)


# --- enable-module-command no: auto picks the scripts -----------------------------------------


def test_module_load_is_refused_and_the_server_has_no_module(admin: redis.Redis) -> None:
    assert admin.config_get("enable-module-command") == {"enable-module-command": "no"}
    with pytest.raises(redis.ResponseError, match="^MODULE command not allowed"):
        admin.execute_command("MODULE", "LOAD", module_path())
    assert Path(module_path()).is_file()  # refused by the server, not for a missing file
    assert admin.execute_command("COMMAND INFO", "RL.GCRA") == [None]  # as the package asks it
    with pytest.raises(redis.ResponseError, match="unknown command 'RL.GCRA'"):
        admin.execute_command("RL.GCRA", "rl:x", 1, 1, "1s")


# check, check, check, refund 1, check at the same instant: (allowed, remaining, retry_after_ms,
# reset_after_ms, delay_ms), the refund's units between. The module gives the same.
ADMITTED_1 = (True, 1, 0, 1000, None)
SEQUENCES = {
    "gcra": (GCRA(2, 1, "1s"), [ADMITTED_1, (True, 0, 0, 2000, None), (False, 0, 1000, 2000, None), 1, (True, 0, 0, 2000, None)]),
    "tokenbucket": (TokenBucket(2, 1, "1s"), [ADMITTED_1, (True, 0, 0, 2000, None), (False, 0, 1000, 2000, None), 1, (True, 0, 0, 2000, None)]),
    "tokenbucket-interval": (TokenBucket(2, 1, "1s", interval=True), [ADMITTED_1, (True, 0, 0, 2000, None), (False, 0, 1000, 2000, None), 1, (True, 0, 0, 2000, None)]),
    "leakybucket": (LeakyBucket(2, 1, "1s"), [(True, 1, 0, 1000, 0), (True, 0, 0, 2000, 1000), (False, 0, 1000, 2000, -1), 1, (True, 0, 0, 2000, 1000)]),
    "fixedwindow": (FixedWindow(2, "1s"), [ADMITTED_1, (True, 0, 0, 1000, None), (False, 0, 1000, 1000, None), 1, (True, 0, 0, 1000, None)]),
    "slidingwindow": (SlidingWindow(2, "1s"), [(True, 1, 0, 1001, None), (True, 0, 0, 1501, None), (False, 0, 1001, 1501, None), 1, (True, 0, 0, 1501, None)]),
    "slidinglog": (SlidingLog(2, "1s"), [ADMITTED_1, (True, 0, 0, 1000, None), (False, 0, 1000, 1000, None), 1, (True, 0, 0, 1000, None)]),
    # Cold: one permit at once, the next in 1250 ms; a refund shortens the wait to 750 ms.
    "warmup": (Warmup(2, "1s", "2s"), [(True, 0, 0, 1750, None), (False, 0, 1250, 1750, None), (False, 0, 1250, 1750, None), 1, (False, 0, 750, 1250, None)]),
}


@pytest.mark.parametrize("name", list(SEQUENCES))
def test_auto_picks_the_scripts_and_each_algorithm_answers(name: str, locked: LockedServer, admin: redis.Redis) -> None:
    limit, want = SEQUENCES[name]
    key = f"rl:{name}"
    evalsha, asked = locked.calls("evalsha"), locked.calls("command|info")
    with locked.client() as c:
        limiter = RateLimiter(c)  # backend="auto"
        assert limiter.backend is None
        limiter._script_now = lambda: T0_MS * 1000
        got: list[Any] = [decision(limiter.check(limit, key)) for _ in range(3)]
        assert limiter.backend == "script" and limiter.stats.backend == "script"
        got.append(limiter.refund(key, 1))
        got.append(decision(limiter.check(limit, key)))
    assert got == want
    assert admin.type(key) == "hash" and admin.pttl(key) > 0
    assert locked.calls("command|info") == asked + 1  # asked once
    # Five calls, and the two scripts' first calls once more after NOSCRIPT and SCRIPT LOAD.
    assert locked.calls("evalsha") == evalsha + 5 + 2


def test_auto_on_the_servers_clock(locked: LockedServer, admin: redis.Redis) -> None:
    """Without the test clock (TIME): a first admission's values do not depend on the instant,
    and a refund of all that was taken deletes the key (it is fresh again)."""
    with locked.client() as c:
        limiter = RateLimiter(c)
        assert decision(limiter.gcra("rl:clock", 2, 1, "1h")) == (True, 1, 0, 3_600_000, None)
        assert limiter.backend == "script"
        assert limiter.refund("rl:clock", 5) == 1
    assert admin.exists("rl:clock") == 0


# --- a user allowed only the scripts and the limiter's keys ------------------------------------


def workload(limiter: RateLimiter) -> list[tuple[str, Callable[[], Any]]]:
    """Steps that between them take every path a script calls Redis on: a fresh key (EXISTS),
    writes (HSET, PEXPIRE), a refund back to fresh (DEL), a BLOCK ended by an admission (HDEL
    of the block), a sliding log's expired entries (HDEL), and the server's clock (TIME) last."""
    now = [T0_MS]

    def at(call: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:
            limiter._script_now = lambda: now[0] * 1000
            try:
                return call()
            finally:
                limiter._script_now = None
        return run

    def advance(ms: int) -> None:
        now[0] += ms

    return [
        ("fresh", at(lambda: decision(limiter.gcra("rl:g", 2, 1, "1s")))),
        ("again", at(lambda: decision(limiter.gcra("rl:g", 2, 1, "1s")))),
        ("refused", at(lambda: decision(limiter.gcra("rl:g", 2, 1, "1s")))),
        ("refund_all", at(lambda: limiter.refund("rl:g", 2))),
        ("block", at(lambda: [decision(limiter.gcra("rl:b", 1, 1, "1s", block=b)) for b in (None, "5s")])),
        ("advance", lambda: advance(6_000)),
        ("after_block", at(lambda: decision(limiter.gcra("rl:b", 1, 1, "1s")))),
        ("log", at(lambda: [decision(limiter.sliding_log("rl:sl", 2, "1s")) for _ in range(2)])),
        ("advance", lambda: advance(2_000)),
        ("log_expired", at(lambda: decision(limiter.sliding_log("rl:sl", 2, "1s")))),
        ("clock", lambda: decision(limiter.gcra("rl:clock", 2, 1, "1h"))),
    ]


WORKLOAD_ANSWERS = {
    "fresh": ADMITTED_1,
    "again": (True, 0, 0, 2000, None),
    "refused": (False, 0, 1000, 2000, None),
    "refund_all": 2,
    "block": [(True, 0, 0, 1000, None), (False, 0, 5000, 5000, None)],
    "advance": None,
    "after_block": (True, 0, 0, 1000, None),
    "log": [ADMITTED_1, (True, 0, 0, 1000, None)],
    "log_expired": ADMITTED_1,
    "clock": (True, 1, 0, 3_600_000, None),
}


def test_the_script_backend_works_for_the_acl_user(locked: LockedServer, admin: redis.Redis, limited: redis.Redis) -> None:
    loads = locked.calls("script|load")
    limiter = RateLimiter(limited, backend="script")
    for step, call in workload(limiter):
        assert call() == WORKLOAD_ANSWERS[step], step
    assert locked.calls("script|load") == loads + 3  # gcra, refund, slidinglog: loaded by this user after NOSCRIPT
    assert admin.exists("rl:g") == 0  # the refund's DEL
    assert admin.hkeys("rl:b") == ["a", "p", "t", "f"]  # the block's `k` deleted (HDEL)
    assert refusals(admin) == []  # nothing refused


@pytest.mark.parametrize("dropped", ["+eval", *MINIMAL])
def test_each_command_of_the_minimal_acl_is_needed(dropped: str, locked: LockedServer, admin: redis.Redis) -> None:
    """The user without one of them: the first step that needs it fails (TIME: only the step on
    the server's clock), with the server's error as a redis.ResponseError; without EVAL nothing
    fails."""
    first_failing = {
        "+eval": None, "+evalsha": "fresh", "+script|load": "fresh", "+time": "clock", "+hmget": "fresh",
        "+exists": "fresh", "+hset": "fresh", "+pexpire": "fresh", "+del": "refund_all", "+hdel": "after_block",
    }[dropped]
    rules = [r for r in USER_RULES if r != dropped]
    with user_client(locked, "partial", rules, admin) as c:
        limiter = RateLimiter(c, backend="script")
        for step, call in workload(limiter):
            if step != first_failing:
                assert call() == WORKLOAD_ANSWERS[step], step
                continue
            command = dropped[1:]
            if dropped in ("+evalsha", "+script|load"):  # the package's own command: refused before any script runs
                with pytest.raises(redis.exceptions.NoPermissionError, match=f"no permissions to run the '{command}' command"):
                    call()
            else:
                with pytest.raises(redis.ResponseError, match=IN_SCRIPT.format(user="partial", command=command)) as error:
                    call()
                assert not isinstance(error.value, redis.exceptions.NoPermissionError)
            break
        else:
            assert first_failing is None


def test_a_key_outside_the_pattern_is_refused_with_noperm(locked: LockedServer, admin: redis.Redis, limited: redis.Redis) -> None:
    """EVALSHA's declared key outside ~rl:*: the server refuses the call (NOPERM) before the
    script runs; the package passes redis-py's NoPermissionError (a ResponseError) through as it
    is: not ModuleRequired, not wrapped."""
    limiter = RateLimiter(limited, backend="script")
    assert limiter.gcra("rl:inside", 2, 1, "1s").allowed
    evalsha = locked.calls("evalsha")
    for call in (lambda: limiter.gcra("outside", 2, 1, "1s"), lambda: limiter.refund("outside", 1)):
        with pytest.raises(redis.exceptions.NoPermissionError, match=KEY_REFUSED) as error:
            call()
        assert isinstance(error.value, redis.ResponseError) and not isinstance(error.value, ModuleRequired)
    assert admin.exists("outside") == 0
    assert locked.calls("evalsha") == evalsha  # refused before it ran: not counted as a call
    entries = refusals(admin)
    assert [(e["reason"], e["object"], e["username"]) for e in entries] == [("key", "outside", "limiter")] * len(entries)
    assert entries[0]["count"] == 2


def test_a_policy_for_the_acl_user_needs_its_rule_keys_pattern(locked: LockedServer, admin: redis.Redis) -> None:
    """A policy's rule keys are ``{rl:...}:i`` (one slot): the user's key patterns must cover
    them (``~{rl:*`` beside ``~rl:*``), and with that the minimal commands suffice; without it
    the call is refused (NOPERM) before the script runs."""
    api = Policy("api", rules=(GCRA(2, 1, "1s"), FixedWindow(3, "1h")))
    with user_client(locked, "policies", [*USER_RULES, "~{rl:*"], admin) as c:
        limiter = RateLimiter(c, backend="script")
        limiter._script_now = lambda: T0_MS * 1000
        got = [limiter.check(api, "rl:p") for _ in range(3)]
        assert [(d.allowed, d.remaining, d.rule) for d in got] == [(True, 1, 0), (True, 0, 0), (False, 0, 0)]
        assert limiter.refund("rl:p", 1, limit=api) == 1
    assert sorted(admin.keys("{rl:p}:*")) == ["{rl:p}:0", "{rl:p}:1"]
    assert refusals(admin) == []
    with user_client(locked, "narrow", USER_RULES, admin) as c:
        with pytest.raises(redis.exceptions.NoPermissionError, match=KEY_REFUSED):
            RateLimiter(c, backend="script").check(api, "rl:p")


def test_auto_for_the_acl_user_picks_the_scripts(
    locked: LockedServer, admin: redis.Redis, limited: redis.Redis, caplog: pytest.LogCaptureFixture,
) -> None:
    """backend="auto" asks COMMAND INFO RL.GCRA, which this user may not run (NOPERM): it takes
    the scripts, with one warning saying why (not the info line of a server that answered), asks
    once, and the replies are the scripts' (the module's). With +command|info too, auto asks,
    hears nil, and picks the scripts as on any server without the module."""
    caplog.set_level(logging.INFO, logger="ratelimit_redis_module")
    limiter = RateLimiter(limited)
    assert limiter.backend is None
    limiter._script_now = lambda: T0_MS * 1000
    got: list[Any] = [decision(limiter.gcra("rl:auto", 2, 1, "1s")) for _ in range(3)]
    got.append(limiter.refund("rl:auto", 1))
    got.append(decision(limiter.gcra("rl:auto", 2, 1, "1s")))
    assert got == SEQUENCES["gcra"][1]
    assert limiter.backend == "script" and limiter.stats.backend == "script"
    assert limiter.refund("rl:auto", 5) == 2 and admin.exists("rl:auto") == 0
    ours = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "ratelimit_redis_module"]
    assert ours == [(
        "WARNING",
        "ratelimit: cannot ask the server whether it has the module (NOPERM on COMMAND INFO): "
        "using the script backend; set backend='module' or 'script' to say which",
    )]
    entries = refusals(admin)  # COMMAND INFO refused once: asked once, not at every call
    assert [(e["reason"], e["object"], e["username"], e["count"]) for e in entries] == [("command", "command|info", "limiter", 1)]
    caplog.clear()
    admin.execute_command("ACL", "SETUSER", "limiter", "+command|info")
    answered = RateLimiter(limited)
    assert decision(answered.gcra("rl:auto", 2, 1, "1h")) == (True, 1, 0, 3_600_000, None)
    assert answered.backend == "script"
    assert [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "ratelimit_redis_module"] == [
        ("INFO", "ratelimit: the server has no ratelimit module; using the script backend"),
    ]


# --- the same user through the ASGI middleware -------------------------------------------------


def app_for(client: redis.asyncio.Redis, **options: Any) -> FastAPI:
    app = FastAPI()

    @app.get("/")
    async def root(request: Request) -> PlainTextResponse:
        return PlainTextResponse("hello")

    app.add_middleware(RateLimitMiddleware, redis=client, limit=GCRA(2, 1, "1h"), **options)
    return app


def test_middleware_for_the_acl_user_as_on_the_module(locked: LockedServer, admin: redis.Redis, serve: Any, tmp_path: Path) -> None:
    """backend="script" as the ACL user (key rl:http:127.0.0.1): 200, 200, 429 with the same
    statuses, headers and bodies as the module gives (test_script_backend.py's comparison).
    With backend="auto" the same user's COMMAND INFO is refused (NOPERM): auto takes the
    scripts, and the first answer is the same as the module's."""
    admin.execute_command("ACL", "SETUSER", "limiter", *USER_RULES)
    module_server = Server(tmp_path / "module")
    try:
        module_server.freeze(T0_MS)
        user = redis.asyncio.Redis(host="127.0.0.1", port=locked.port, username="limiter", password="secret")
        stats = Stats()
        on_scripts = serve(app_for(user, backend="script", stats=stats))
        on_module = serve(app_for(redis.asyncio.Redis(host="127.0.0.1", port=module_server.port), backend="module"))
        got = [on_scripts.get() for _ in range(3)]
        want = [on_module.get() for _ in range(3)]
    finally:
        module_server.stop()
    assert [g[0] for g in got] == [200, 200, 429]
    assert got == want
    assert ("retry-after", "3600") in got[2][1]
    assert any(name.startswith("ratelimit") for name, _ in got[0][1])
    assert (stats.backend, stats.admitted, stats.denied, stats.failures) == ("script", 2, 1, 0)
    assert admin.type("rl:http:127.0.0.1") == "hash"

    auto_user = redis.asyncio.Redis(host="127.0.0.1", port=locked.port, username="limiter", password="secret")
    auto_stats = Stats()
    on_auto = serve(app_for(auto_user, stats=auto_stats, prefix="rl:auto:"))
    assert on_auto.get() == want[0]
    assert (auto_stats.backend, auto_stats.failures, auto_stats.fail_open, auto_stats.admitted) == ("script", 0, 0, 1)
    assert admin.type("rl:auto:127.0.0.1") == "hash"
