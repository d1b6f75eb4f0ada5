"""A server without Lua (issue 38, 3): Valkey 9.1 moved Lua into a module (`lua`) that an
operator can unload (``MODULE UNLOAD lua``); then every ``SCRIPT LOAD`` and ``EVAL`` fails with
"ERR Could not find scripting engine 'lua'" (and ``EVALSHA`` with ``NOSCRIPT``: the scripts went
with the engine). The module runs there, the script backend cannot: the script backend asked for
(``backend="script"``, or ``"auto"`` on a server without the module) is one clear error,
:class:`ModuleRequired` (a configuration error, never failed open or closed), the same at each
call, with nothing written and nothing retried in the background; ``auto`` on a server with
the module takes it, as anywhere.

Each server is $RATELIMIT_SERVER started with ``enable-module-command local`` and its ``lua``
module unloaded; a server that cannot unload it (Redis, where Lua is built in; Valkey before 9.1)
says so, and the tests are skipped with its words.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterator

import pytest
import redis
import redis.asyncio

from conftest import PATIENT, PlainServer, Server
from ratelimit_redis_module import GCRA, AsyncGuard, AsyncRateLimiter, Decision, Guard, ModuleRequired, RateLimiter

#: What the server answers SCRIPT LOAD without Lua, as redis-py gives it ("ERR " taken off).
SERVER_SAID = "Could not find scripting engine 'lua'"
#: The one error each backend gets on a server without Lua (and, for "auto", without the module).
NO_LUA = {
    backend: (
        f"the script backend needs a Lua scripting engine, and the server has none ({asked}; the server said: "
        f"{SERVER_SAID}): load the ratelimit module on the server (backend='auto' or 'module' then uses it), "
        "or use a server with Lua (docs/managed.md, \"A server without Lua\")"
    )
    for backend, asked in (
        ("script", "backend='script'"),
        ("auto", "backend='auto', and the server has no ratelimit module"),
    )
}
#: The commands a limiter may send, counted before and after (INFO commandstats).
COUNTED = ("command|info", "script|load", "evalsha", "eval", "rl.gcra")


def without_lua(server: Server) -> Server:
    """``server`` with its ``lua`` module unloaded; skipped (the server stopped) where it cannot be."""
    with server.client() as c:
        try:
            c.execute_command("MODULE", "UNLOAD", "lua")
        except redis.ResponseError as error:
            version = c.info("server")
            server.stop()
            pytest.skip(
                f"{version.get('server_name', 'redis')} {version.get('valkey_version', version['redis_version'])} "
                f"cannot unload Lua (MODULE UNLOAD lua: {error})"
            )
        assert [m[b"name"] for m in c.module_list()] == ([b"ratelimit"] if type(server) is Server else [])
    return server


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Neither the module nor Lua."""
    s = without_lua(PlainServer(tmp_path_factory.mktemp("bare"), ["--enable-module-command", "local"]))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def module_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The module (its debug clock frozen at T0), no Lua."""
    s = without_lua(Server(tmp_path_factory.mktemp("module_only"), ["--enable-module-command", "local"]))
    s.freeze()
    yield s
    s.stop()


def counts(server: Server) -> dict[str, int]:
    return {command: server.calls(command) for command in COUNTED}


def sent_since(server: Server, before: dict[str, int]) -> dict[str, int]:
    """The commands sent since ``before``, those sent at least once."""
    now = counts(server)
    return {command: now[command] - before[command] for command in COUNTED if now[command] > before[command]}


def nothing_written(server: Server) -> None:
    with server.client() as c:
        assert c.dbsize() == 0
        assert c.info("memory")["number_of_cached_scripts"] == 0


def ours(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "ratelimit_redis_module"]


@pytest.mark.parametrize("backend", ["script", "auto"])
def test_without_module_or_lua_the_script_backend_is_one_clear_error(
    backend: str, bare: Server, caplog: pytest.LogCaptureFixture
) -> None:
    """The setup meets it first (auto: COMMAND INFO says no module, and the first SCRIPT LOAD,
    made before the scripts are taken, no Lua) and logs it once, as a warning; it is not tried
    again. Each call then gets it, as ModuleRequired, from the server's answer to the same
    commands (nothing kept: a server given the module or Lua later is used): two round trips.
    ``auto`` has taken no backend."""
    caplog.set_level(logging.INFO, logger="ratelimit_redis_module")
    before = counts(bare)
    with bare.client() as c:
        limiter = RateLimiter(c, backend=backend, setup_timeout=60)
        assert limiter.ready() is True  # the setup is over: nothing left to try again
        assert limiter.stats.setup_failures == 1
        setup = {"script|load": 1} if backend == "script" else {"command|info": 1, "script|load": 1}
        assert sent_since(bare, before) == setup
        for _ in range(2):
            with pytest.raises(ModuleRequired) as caught:
                limiter.gcra("k", 5, 10, "1m")
            assert str(caught.value) == NO_LUA[backend]
        # A local budget's refill and a guard (which fails a Redis error open): the same error.
        with pytest.raises(ModuleRequired) as caught:
            limiter.check(GCRA(10, 10, "1h", local_budget=4), "budget")
        assert str(caught.value) == NO_LUA[backend]
        guard = Guard(limiter, GCRA(5, 10, "1m"))
        with pytest.raises(ModuleRequired) as caught:
            guard.check("someone")
        assert str(caught.value) == NO_LUA[backend]
        assert limiter.backend == limiter.stats.backend == ("script" if backend == "script" else None)
        assert limiter.ready() is True and limiter.stats.setup_failures == 1
    per_call = {"evalsha": 1, "script|load": 1} if backend == "script" else {"command|info": 1, "script|load": 1}
    assert sent_since(bare, before) == {k: setup.get(k, 0) + 4 * per_call.get(k, 0) for k in setup | per_call}
    chosen = [("INFO", "ratelimit: using the script backend (backend='script')")] if backend == "script" else []
    assert ours(caplog) == [*chosen, ("WARNING", f"ratelimit: {NO_LUA[backend]}")]
    nothing_written(bare)


@pytest.mark.parametrize("backend", ["script", "auto"])
async def test_without_module_or_lua_the_async_script_backend_is_the_same_error(backend: str, bare: Server) -> None:
    client = redis.asyncio.Redis(host="127.0.0.1", port=bare.port)
    try:
        limiter = AsyncRateLimiter(client, backend=backend, setup_timeout=60)
        assert await limiter.ready() is True
        assert limiter.stats.setup_failures == 1
        with pytest.raises(ModuleRequired) as caught:
            await limiter.gcra("k", 5, 10, "1m")
        assert str(caught.value) == NO_LUA[backend]
        guard = AsyncGuard(limiter, GCRA(5, 10, "1m"), timeout=PATIENT)  # the setup: the limiter's own
        with pytest.raises(ModuleRequired) as caught:
            await guard.check("someone")
        assert str(caught.value) == NO_LUA[backend]
        assert limiter.backend == ("script" if backend == "script" else None)
        assert await limiter.ready() is True and limiter.stats.setup_failures == 1
    finally:
        await client.aclose()
    nothing_written(bare)


def test_with_the_module_and_no_lua_auto_takes_the_module_and_script_is_the_clear_error(
    module_only: Server, caplog: pytest.LogCaptureFixture
) -> None:
    """GCRA(5, 10, "1m"), the debug clock frozen: the module's exact replies."""
    caplog.set_level(logging.INFO, logger="ratelimit_redis_module")
    before = counts(module_only)
    with module_only.client() as c:
        c.delete("auto")
        limiter = RateLimiter(c, setup_timeout=60)
        assert limiter.ready() is True
        assert [limiter.gcra("auto", 5, 10, "1m") for _ in range(2)] == [
            Decision(True, 5, 4, 0, 6000), Decision(True, 5, 3, 0, 12000),
        ]
        assert limiter.backend == limiter.stats.backend == "module"
        assert limiter.stats.setup_failures == 0
        assert sent_since(module_only, before) == {"command|info": 1, "rl.gcra": 2}
        assert ours(caplog) == [("INFO", "ratelimit: using the module")]
        scripted = RateLimiter(c, backend="script", setup_timeout=60)
        with pytest.raises(ModuleRequired) as caught:
            scripted.gcra("script", 5, 10, "1m")
        assert str(caught.value) == NO_LUA["script"]
        assert c.exists("script") == 0


async def test_with_the_module_and_no_lua_async_auto_takes_the_module(module_only: Server) -> None:
    client = redis.asyncio.Redis(host="127.0.0.1", port=module_only.port)
    try:
        await client.delete("async")
        limiter = AsyncRateLimiter(client, setup_timeout=60)
        assert await limiter.gcra("async", 5, 10, "1m") == Decision(True, 5, 4, 0, 6000)
        assert limiter.backend == "module"
        scripted = AsyncRateLimiter(client, backend="script", setup_timeout=60)
        with pytest.raises(ModuleRequired) as caught:
            await scripted.gcra("async:script", 5, 10, "1m")
        assert str(caught.value) == NO_LUA["script"]
    finally:
        await client.aclose()


def acl_user(server: Server) -> redis.Redis:
    """A user that may run everything but COMMAND (docs/managed.md's application user cannot ask
    COMMAND INFO): ``auto`` cannot ask it whether it has the module."""
    with server.client() as c:
        c.execute_command("ACL", "SETUSER", "app", "on", ">secret", "~*", "+@all", "-command")
    return server.client(username="app", password="secret")


def test_auto_that_cannot_ask_takes_the_module_where_there_is_no_lua(
    module_only: Server, bare: Server, caplog: pytest.LogCaptureFixture
) -> None:
    """NOPERM on COMMAND INFO: ``auto`` cannot tell whether the server has the module, and
    elsewhere takes the scripts; where the server has no Lua the module is all that can run, and
    it takes it, with one warning. Without the module either, the call is the clear error."""
    caplog.set_level(logging.INFO, logger="ratelimit_redis_module")
    with acl_user(module_only) as c:
        c.delete("unasked")
        limiter = RateLimiter(c, setup_timeout=60)
        assert limiter.gcra("unasked", 5, 10, "1m") == Decision(True, 5, 4, 0, 6000)
        assert limiter.backend == "module"
    assert ours(caplog) == [(
        "WARNING",
        "ratelimit: cannot ask the server whether it has the module (NOPERM on COMMAND INFO), and it has no Lua "
        "scripting engine for the script backend: using the module; set backend='module' to say so",
    )]
    with acl_user(bare) as c:
        limiter = RateLimiter(c, setup_timeout=60)
        with pytest.raises(ModuleRequired) as caught:
            limiter.gcra("unasked", 5, 10, "1m")
        assert str(caught.value) == NO_LUA["auto"]
        assert c.exists("unasked") == 0


def test_a_server_that_has_lua_is_not_taken_for_one_without(tmp_path: Path) -> None:
    """The same server before MODULE UNLOAD lua (or any server with Lua): auto takes the scripts."""
    server = PlainServer(tmp_path / "plain")
    try:
        with server.client() as c:
            limiter = RateLimiter(c, setup_timeout=60)
            assert limiter.gcra("lua", 5, 10, "1m").remaining == 4
            assert limiter.backend == "script"
    finally:
        server.stop()
