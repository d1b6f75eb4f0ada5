"""The script backend where a managed service would put it (issue 28, item 3): a server with
``enable-module-command no`` (no module, and none can be loaded), and a user whose ACL allows
only the script commands, the commands the scripts call, and the limiter's keys (``~rl:*``).

A script's ``redis.call`` runs under the calling user's ACL, so such a user needs, besides
``EVALSHA`` and ``SCRIPT LOAD`` (the package's own commands: ``EVALSHA`` first, ``SCRIPT LOAD``
after ``NOSCRIPT``), every command the scripts of clients/lua/ call: ``TIME``, ``HMGET``,
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
import re
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import redis
import redis.asyncio
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse

from conftest import PATIENT, T0_MS, PlainServer, Server, module_path, server_binary
from ratelimit_redis_module import (
    GCRA,
    AsyncRateLimiter,
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
    ScriptPermissionError,
    Warmup,
)
from ratelimit_redis_module.scripts import script_sha, script_source

#: The package's commands, then the scripts' own: the least a script-backend user needs.
MINIMAL = ["+evalsha", "+script|load", "+time", "+hmget", "+exists", "+hset", "+pexpire", "+del", "+hdel"]
#: The lease scripts' commands, for a user of leases besides MINIMAL (docs/managed.md).
LEASES = ["+zmscore", "+zcount", "+zscore", "+zrangebyscore", "+zrevrangebyscore", "+zremrangebyscore", "+zadd",
          "+zrem", "+zrange", "+hget"]
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
        limiter = RateLimiter(c, setup_timeout=60)  # backend="auto"
        limiter._script_now = lambda: T0_MS * 1000
        got: list[Any] = [decision(limiter.check(limit, key)) for _ in range(3)]
        assert limiter.backend == "script" and limiter.stats.backend == "script"
        got.append(limiter.refund(key, 1))
        got.append(decision(limiter.check(limit, key)))
    assert got == want
    assert admin.type(key) == "hash" and admin.pttl(key) > 0
    assert locked.calls("command|info") == asked + 1  # asked once, by the setup
    # Five calls, each answered at once: the setup loaded the scripts (no NOSCRIPT).
    assert locked.calls("evalsha") == evalsha + 5


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
    loads, evalsha = locked.calls("script|load"), locked.calls("evalsha")
    limiter = RateLimiter(limited, backend="script", setup_timeout=60)
    for step, call in workload(limiter):
        assert call() == WORKLOAD_ANSWERS[step], step
    # Every script, loaded by this user's limiter in its setup: no call got NOSCRIPT.
    assert locked.calls("script|load") == loads + len(RateLimiter.SETUP_SCRIPTS) == loads + 13
    assert locked.calls("evalsha") == evalsha + 11  # the workload's calls
    assert admin.exists("rl:g") == 0  # the refund's DEL
    assert admin.hkeys("rl:b") == ["a", "p", "t", "f"]  # the block's `k` deleted (HDEL)
    assert refusals(admin) == []  # nothing refused


#: What the package says of a command a script runs that the ACL refuses, before the server's
#: own words (``refused``: ``HMGET``, or ``DEL and HDEL``; ``plus``: ``+hmget``).
REFUSED = (
    "the ACL of the connection's user refuses {refused}, which the script backend's {script} script runs: "
    "give the user {plus} (docs/managed.md, \"An application user's ACL\", lists every command the scripts "
    "run); the server said: "
)


def raised_at(admin: redis.Redis, script: str) -> str:
    """What the server adds to the error of a script that did not catch it: the script's SHA and
    the line (" script: <sha>, on @user_script:65."); Valkey 9.1, whose Lua engine is a module
    of its own, leaves the SHA out (" script: on @user_script:65."). Told from INFO server."""
    info = admin.info("server")
    version = tuple(int(x) for x in str(info.get("valkey_version") or info["redis_version"]).split(".")[:2])
    if info.get("server_name") == "valkey" and version >= (9, 1):
        return r" script: on @user_script:\d+\."
    return rf" script: {script_sha(script)}, on @user_script:\d+\."


def assert_names_the_command(admin: redis.Redis, refused: BaseException, user: str, command: str, script: str) -> None:
    """``refused`` is the package's ScriptPermissionError for ``command`` in ``script``: the
    command and a pointer to the docs, then the server's error as it is (Redis 7.0 does not name
    the command: the package found it, from the line the server named in the script it sent, or
    by asking the server which of the script's commands the user may not run; Redis 8.2 and
    Valkey name it), with the line it was raised on (:func:`raised_at`) unless the script caught
    it (lib/common.lua's run())."""
    assert isinstance(refused, ScriptPermissionError) and isinstance(refused, redis.exceptions.NoPermissionError)
    assert (refused.script, refused.commands) == (script, (command,))
    server = refused.server_message
    assert str(refused) == REFUSED.format(refused=command.upper(), script=script, plus="+" + command) + server
    assert re.fullmatch(
        IN_SCRIPT.format(user=user, command=command) + f"({raised_at(admin, script)})?", server,
    ), server


#: The workload's script at each step.
WORKLOAD_SCRIPTS = {
    "fresh": "gcra", "again": "gcra", "refused": "gcra", "refund_all": "refund", "block": "gcra", "after_block": "gcra",
    "log": "slidinglog", "log_expired": "slidinglog", "clock": "gcra",
}


@pytest.mark.parametrize("dropped", ["+eval", *MINIMAL])
def test_each_command_of_the_minimal_acl_is_needed(dropped: str, locked: LockedServer, admin: redis.Redis) -> None:
    """The user without one of them: the first step that needs it fails (TIME: only the step on
    the server's clock); without EVAL nothing fails. A command a script runs is named by the
    package (ScriptPermissionError, a redis-py NoPermissionError) on every server, with the
    docs' page; EVALSHA and SCRIPT LOAD (the package's own) are the server's NoPermissionError."""
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
                with pytest.raises(redis.exceptions.NoPermissionError, match=f"no permissions to run the '{command}' command") as error:
                    call()
                assert not isinstance(error.value, ScriptPermissionError)
            else:
                with pytest.raises(ScriptPermissionError) as error:
                    call()
                assert_names_the_command(admin, error.value, "partial", command, WORKLOAD_SCRIPTS[step])
            break
        else:
            assert first_failing is None


def lease_workload(limiter: RateLimiter) -> list[tuple[str, str, Callable[[], Any]]]:
    """Steps that between them take every path the lease scripts call Redis on: two leases
    taken (a fresh key, then one that holds a lease), a third refused at the limit of 2, and both
    given back (the last one deletes the key). Each with its script."""
    return [
        ("acquire", "concurrency_acquire", lambda: limiter.acquire("rl:c", 2, "1m", token="t1").allowed),
        ("again", "concurrency_acquire", lambda: limiter.acquire("rl:c", 2, "1m", token="t2").allowed),
        ("refused", "concurrency_acquire", lambda: limiter.acquire("rl:c", 2, "1m", token="t3").allowed),
        ("release", "concurrency_release", lambda: limiter.release("rl:c", "t1")),
        ("release_last", "concurrency_release", lambda: limiter.release("rl:c", "t2")),
    ]


LEASE_ANSWERS = {"acquire": True, "again": True, "refused": False, "release": True, "release_last": True}


@pytest.mark.parametrize("dropped", [r for r in LEASES if r != "+hget"] + ["+time", "+pexpire", "+del"])
def test_a_command_of_the_lease_scripts_refused_is_named(dropped: str, locked: LockedServer, admin: redis.Redis) -> None:
    """Leases for a user of MINIMAL and the lease commands but one: the first step that needs it
    fails, the command named (the lease scripts run every command inside their error handling:
    on Redis 7.0 no line says which, so the package asks the server which of the script's
    commands the user may not run)."""
    first_failing = {
        "+zmscore": "acquire", "+zcount": "again", "+zscore": "again", "+zrangebyscore": "refused",
        "+zrevrangebyscore": "again", "+zremrangebyscore": "again", "+zadd": "acquire", "+zrem": "release",
        "+zrange": "release", "+time": "acquire", "+pexpire": "acquire", "+del": "release_last",
    }[dropped]
    with user_client(locked, "lessee", [r for r in [*USER_RULES, *LEASES] if r != dropped], admin) as c:
        limiter = RateLimiter(c, backend="script")
        for step, script, call in lease_workload(limiter):
            if step != first_failing:
                assert call() == LEASE_ANSWERS[step], step
                continue
            with pytest.raises(ScriptPermissionError) as error:
                call()
            assert_names_the_command(admin, error.value, "lessee", dropped[1:], script)
            break
        else:
            raise AssertionError(f"no step failed without {dropped}")


async def test_the_asyncio_limiter_names_the_command_too(locked: LockedServer, admin: redis.Redis) -> None:
    """The same on an asyncio client: HMGET (Redis 7.0 names no line for it) and ZADD."""
    for user, dropped, script in (("nohmget", "+hmget", "gcra"), ("nozadd", "+zadd", "concurrency_acquire")):
        admin.execute_command("ACL", "SETUSER", user, *[r for r in [*USER_RULES, *LEASES] if r != dropped])
        client = redis.asyncio.Redis(host="127.0.0.1", port=locked.port, username=user, password="secret")
        try:
            limiter = AsyncRateLimiter(client, backend="script")
            with pytest.raises(ScriptPermissionError) as error:
                await (limiter.gcra("rl:a", 2, 1, "1s") if script == "gcra" else limiter.acquire("rl:b", 2, "1s"))
            assert_names_the_command(admin, error.value, user, dropped[1:], script)
        finally:
            await client.aclose()


def test_two_refused_commands_are_both_named(locked: LockedServer, admin: redis.Redis) -> None:
    """A refund back to fresh, by a user without DEL nor HDEL (the refund script runs both):
    the server names one, on 8.2 and Valkey; on 7.0 the package asks, and names both."""
    with user_client(locked, "nodel", [r for r in USER_RULES if r not in ("+del", "+hdel")], admin) as c:
        limiter = RateLimiter(c, backend="script")
        assert limiter.gcra("rl:d", 2, 1, "1h").allowed
        with pytest.raises(ScriptPermissionError) as error:
            limiter.refund("rl:d", 1)
    refused = error.value
    assert refused.script == "refund"
    if refused.commands == ("del",):  # the server named it (8.2, Valkey)
        assert "has no permissions to run the 'del' command" in refused.server_message
        assert str(refused).startswith(REFUSED.format(refused="DEL", script="refund", plus="+del"))
    else:
        assert refused.commands == ("del", "hdel")  # in the order of the script's text
        assert refused.server_message == "The user executing the script can't run this command or subcommand"
        assert str(refused) == REFUSED.format(refused="DEL and HDEL", script="refund", plus="+del +hdel") + refused.server_message


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


def test_a_sliding_log_moved_by_a_policy_change_needs_hgetall(locked: LockedServer, admin: redis.Redis) -> None:
    """A policy change that moves a sliding log's state to another rule key (its rule is no
    longer at the same place) copies the log's entries with ``HGETALL``: the user needs
    ``+hgetall`` for it (docs/managed.md), and without it the package names it."""
    before = Policy("log", rules=(FixedWindow(10, "1m"), SlidingLog(5, "1h")))
    after = Policy("log", rules=(SlidingLog(5, "1h"),))
    for extra, moved in (([], False), (["+hgetall"], True)):
        admin.delete("{rl:m}:0", "{rl:m}:1")
        with user_client(locked, "logs", [*USER_RULES, "~{rl:*", *extra], admin) as c:
            limiter = RateLimiter(c, backend="script")
            limiter._script_now = lambda: T0_MS * 1000
            assert [limiter.check(before, "rl:m").remaining for _ in range(2)] == [4, 3]
            if not moved:
                with pytest.raises(ScriptPermissionError) as error:
                    limiter.check(after, "rl:m")
                assert error.value.commands == ("hgetall",)
                assert str(error.value).startswith(
                    REFUSED.format(refused="HGETALL", script="policy", plus="+hgetall")
                ), str(error.value)
                continue
            # The log's two entries moved with it to the first key: 5 - 2 - 1 left.
            assert limiter.check(after, "rl:m").remaining == 2
        assert admin.exists("{rl:m}:1") == 0


def test_auto_for_the_acl_user_picks_the_scripts(
    locked: LockedServer, admin: redis.Redis, limited: redis.Redis, caplog: pytest.LogCaptureFixture,
) -> None:
    """backend="auto" asks COMMAND INFO RL.GCRA, which this user may not run (NOPERM): it takes
    the scripts, with one warning saying why (not the info line of a server that answered), asks
    once, and the replies are the scripts' (the module's). With +command|info too, auto asks,
    hears nil, and picks the scripts as on any server without the module."""
    caplog.set_level(logging.INFO, logger="ratelimit_redis_module")
    limiter = RateLimiter(limited, setup_timeout=60)
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

    options.setdefault("timeout", PATIENT)
    options.setdefault("setup_timeout", PATIENT)
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


# --- errors as the server gives them, once (issue 36, 5) --------------------------------------


def raw_replies(port: int, *commands: list[str]) -> list[bytes]:
    """Each command's reply line as the server writes it (its first line: an error, a status,
    an integer or a bulk's length), on one new connection: the error's code as it is on the
    wire, before any client reads it (redis-py takes a leading "ERR " off)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        reader = s.makefile("rb")
        replies = []
        for words in commands:
            s.sendall(b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w.encode()), w.encode()) for w in words))
            line = reader.readline().rstrip(b"\r\n")
            if line.startswith(b"$") and line != b"$-1":
                reader.read(int(line[1:]) + 2)
            replies.append(line)
        return replies


def test_a_command_refused_inside_a_lease_script_is_the_servers_error_with_one_code(
    locked: LockedServer, admin: redis.Redis,
) -> None:
    """A lease script's command the ACL refuses (ZADD, inside the scripts' error handling, lib/
    common.lua's run()): the server's error as the server words it, with its one code. It read
    "-ERR ERR ..." (the error raised again, the server putting a code before one that had it) and
    named run()'s line instead of the command's."""
    admin.execute_command("ACL", "SETUSER", "leases", *[r for r in [*USER_RULES, *LEASES] if r != "+zadd"])
    sha = admin.script_load(script_source("concurrency_acquire"))
    assert sha == script_sha("concurrency_acquire")
    auth, reply = raw_replies(locked.port, ["AUTH", "leases", "secret"], ["EVALSHA", sha, "1", "rl:lease", "2", "1s"])
    assert auth == b"+OK"
    assert reply in (
        b"-ERR The user executing the script can't run this command or subcommand",  # Redis 7.0
        b"-ERR ACL failure in script: User leases has no permissions to run the 'zadd' command",  # 8.2, Valkey
    )


@pytest.fixture
def replica(tmp_path: Path) -> Iterator[PlainServer]:
    """A plain server's replica (read only), its link to the primary up."""
    primary = PlainServer(tmp_path / "primary", ["--repl-diskless-sync-delay", "0"])
    follower = PlainServer(tmp_path / "replica", ["--replicaof", "127.0.0.1", str(primary.port)])
    try:
        with follower.client(decode_responses=True) as c:
            while c.info("replication")["master_link_status"] != "up":
                time.sleep(0.02)
        yield follower
    finally:
        follower.stop()
        primary.stop()


def test_a_write_on_a_replica_is_redis_pys_read_only_error_from_every_script(replica: PlainServer) -> None:
    """On a replica every script's first write fails with READONLY: redis-py's ReadOnlyError,
    on which a Sentinel client (client_from_sentinel) goes to the new primary after a failover.
    The lease scripts and the general path of the others answered "ERR READONLY ...": a plain
    ResponseError, which no client takes for a demoted primary."""
    with replica.client() as c:
        limiter = RateLimiter(c, backend="script")
        calls = {
            "acquire": lambda: limiter.acquire("rl:l", 2, "1s"),
            "gcra COST 2 (the general path)": lambda: limiter.gcra("rl:g", 5, 1, "1s", cost=2),
            "gcra (the fast path)": lambda: limiter.gcra("rl:f", 5, 1, "1s"),
        }
        for what, call in calls.items():
            with pytest.raises(redis.exceptions.ReadOnlyError) as error:
                call()
            assert str(error.value).startswith("You can't write against a read only replica."), what
