"""Setup is not paid by a request (issue 36, 4): a limiter asks its questions (the backend:
COMMAND INFO for "auto") and loads its scripts (SCRIPT LOAD) when it is created, in the
background (a thread for a sync client, a task for asyncio); a request that arrives while that
runs waits for it, the wait not counted against the request's timeout; a setup that fails (the
server down) breaks nothing: it is tried again, logged and counted, and the requests meanwhile
fail open or closed as configured.

A fresh process (fresh_app.py: each middleware, and each guard used by hand) on a fresh server
(an empty script cache; the module's, or a plain one for the scripts), with the package's
defaults but for the timeouts (a minute: conftest's PATIENT, so that a loaded machine does not
fail the request open), and its very first request, limited, field for field.

Between the process and the server sits a TCP proxy (Proxy): each command the process sends is
read there and passed on in order, and the setup's commands (COMMAND INFO, SCRIPT LOAD,
RL.POLICY.*) can be held until an event. The application marks each request's arrival in Redis
(``INCR requests``, waited for before the request goes in), so the proxy knows, in the order the
process sent them, which commands came before the request:
- a setup command sent before it (at the limiter's creation) is held until the request arrives:
  the request comes while the setup runs, and must wait for it;
- a setup command first sent after it (no setup before the request: the request's own, as before
  issue 36) is held until the response: a setup a cold or loaded server makes slow (the issue's
  19-78 ms for COMMAND INFO, NOSCRIPT, SCRIPT LOAD) stands in the request's way until its timeout,
  which it then fails open on, every time (with the fresh app's minute, the request is not
  answered within the test's own 60 s: a failure all the same).
A proxy, and not a paused server (CLIENT PAUSE, DEBUG SLEEP, SIGSTOP), because only the setup is
to be slow: a paused server holds the request's own command too, so a request that waited for
the setup would then fail by the pause as well, and the test could not tell the two apart.
"""

from __future__ import annotations

import gc
import http.client
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import redis

from conftest import PlainServer, Server
from ratelimit_redis_module import GCRA, AsyncGuard, Guard, RateLimiter, Stats, client_from_url
from ratelimit_redis_module.scripts import script_sha
from test_wsgi import fields

APP = Path(__file__).resolve().parent / "fresh_app.py"

#: The commands of a limiter's setup.
SETUP = {"COMMAND INFO", "SCRIPT LOAD", "RL.POLICY.SET", "RL.POLICY.GET"}
#: What redis-py says on each new connection before any of the limiter's commands.
HANDSHAKE = ("CLIENT", "HELLO", "AUTH", "SELECT")
#: The first request's fields: GCRA(5, 10, "1m") (fresh_app.LIMIT), its first unit taken.
FIRST = fields("default", 5, 30, 4, 6, 6)


def read_command(buf: bytes) -> tuple[list[bytes], int] | None:
    """One command off the front of ``buf`` (a RESP array of bulk strings, as redis-py writes
    every command): its words and its length, or None while it is incomplete."""
    if not buf:
        return None
    if buf[:1] != b"*":
        raise ValueError(f"not a RESP array: {buf[:20]!r}")
    end = buf.find(b"\r\n")
    if end < 0:
        return None
    words, pos = [], end + 2
    for _ in range(int(buf[1:end])):
        end = buf.find(b"\r\n", pos)
        if end < 0:
            return None
        size = int(buf[pos + 1:end])
        if len(buf) < end + 2 + size + 2:
            return None
        words.append(buf[end + 2:end + 2 + size])
        pos = end + 2 + size + 2
    return words, pos


def command_name(words: list[bytes]) -> str:
    """A command's name as the log keeps it: upper case, a container's subcommand after a space."""
    name = words[0].decode().upper()
    if name in ("COMMAND", "SCRIPT", "CLIENT", "ACL") and len(words) > 1:
        return f"{name} {words[1].decode().upper()}"
    return name


class Proxy:
    """A TCP proxy on a free loopback port in front of the server on ``port``: each connection
    made to it gets its own to the server. What the server says passes as it comes; each command
    sent to it is written down in ``log`` and passed on in order, unless ``hold(name)`` returns
    an event: then that command, and every later one of its connection, waits for it."""

    def __init__(self, port: int, hold: Callable[[str], threading.Event | None]) -> None:
        self.upstream = port
        self.hold = hold
        self.log: list[str] = []
        self.sockets: list[socket.socket] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self.listener.accept()
            except OSError:
                return  # closed
            try:
                up = socket.create_connection(("127.0.0.1", self.upstream))
            except OSError:  # the server stopped: the connection ends as it would have
                down.close()
                continue
            self.sockets += [down, up]
            threading.Thread(target=self._replies, args=(up, down), daemon=True).start()
            threading.Thread(target=self._commands, args=(down, up), daemon=True).start()

    @staticmethod
    def _replies(up: socket.socket, down: socket.socket) -> None:
        try:
            while data := up.recv(65536):
                down.sendall(data)
        except OSError:
            pass
        for s in (down, up):
            s.close()

    def _commands(self, down: socket.socket, up: socket.socket) -> None:
        buf = b""
        try:
            while data := down.recv(65536):
                buf += data
                while (command := read_command(buf)) is not None:
                    words, size = command
                    name = command_name(words)
                    self.log.append(name)
                    held = self.hold(name)
                    if held is not None:
                        held.wait()
                    up.sendall(buf[:size])
                    buf = buf[size:]
        except OSError:
            pass
        for s in (down, up):
            s.close()

    def commands(self) -> list[str]:
        """The process's commands so far, the connections' handshakes left out."""
        return [c for c in self.log if not c.startswith(HANDSHAKE)]

    def close(self) -> None:
        self.listener.close()
        for s in self.sockets:
            s.close()


def first_request(kind: str, server: Server) -> tuple[tuple[int, list[tuple[str, str]], bytes], bool, list[str], str]:
    """A fresh process (fresh_app.py's application ``kind``) on ``server`` through the proxy, and
    its first request: (status, the limiter's fields, body), whether a setup command was sent
    before the request, the commands, and the process's stderr."""
    arrived, answered, setting_up = threading.Event(), threading.Event(), threading.Event()
    before = False

    def hold(name: str) -> threading.Event | None:
        nonlocal before
        if name in ("INCR", "INCRBY"):  # redis-py's incr
            arrived.set()
            return None
        if name not in SETUP:
            return None
        if not arrived.is_set():
            before = True
            setting_up.set()
            return arrived  # the request comes while the setup runs
        return None if before else answered  # no setup before: the request's own, slow

    proxy = Proxy(server.port, hold)
    child = subprocess.Popen(
        [sys.executable, str(APP)], env={**os.environ, "RL_FRESH_APP": kind, "RL_FRESH_REDIS": proxy.url},
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    errors: list[str] = []
    threading.Thread(target=lambda: errors.extend(child.stderr or []), daemon=True).start()
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # until the application listens, or ends
        assert line.startswith("{"), f"the application ended: {''.join(errors)}"
        # The request goes once the process's setup has begun (its first command at the proxy;
        # under uvicorn, at the lifespan's startup, after the port is printed). A process that
        # sets nothing up before its first request gets it after this deadline all the same.
        setting_up.wait(10)
        conn = http.client.HTTPConnection("127.0.0.1", json.loads(line)["port"], timeout=60)
        try:
            conn.request("GET", "/")
            response = conn.getresponse()
            body = response.read()
        finally:
            conn.close()
        answered.set()
        got = [(k.lower(), v) for k, v in response.getheaders() if k.lower().startswith(("ratelimit", "x-ratelimit", "retry"))]
        return (response.status, got, body), before, proxy.commands(), "".join(errors)
    finally:
        arrived.set()
        answered.set()
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        proxy.close()


KINDS = ["asgi", "flask", "django", "guard", "asyncguard"]


@pytest.mark.parametrize("backend", ["module", "script"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_fresh_process_first_request_is_limited_its_setup_done_before(kind: str, backend: str, tmp_path: Path) -> None:
    """The first request of a fresh process (its timeouts a minute), on an empty
    script cache: limited (the fields of GCRA(5, 10, "1m")'s first unit), the setup sent before
    it (at the limiter's creation), and the request's only command its own: RL.GCRA, or one
    EVALSHA answered at once (its script loaded by the setup: no NOSCRIPT, no SCRIPT LOAD after
    it). Before issue 36 the request asked COMMAND INFO and loaded its script itself, which the
    proxy held as a slow server would: with the default 50 ms it failed open, 200 without
    fields; with the minute, no answer within the test's 60 s."""
    server = Server(tmp_path / "redis") if backend == "module" else PlainServer(tmp_path / "redis")
    try:
        with server.client() as c:
            assert c.script_exists(script_sha("gcra")) == [False]  # a fresh server: an empty script cache
        (status, got, body), before, commands, stderr = first_request(kind, server)
    finally:
        server.stop()
    assert (status, got, body) == (200, FIRST, b"hello"), (stderr, commands)
    assert before, "the setup began when the limiter was created, before the first request"
    own = "RL.GCRA" if backend == "module" else "EVALSHA"
    request = commands[commands.index("INCRBY") + 1:]
    assert [c for c in request if c not in SETUP] == [own], commands  # once: no NOSCRIPT
    if backend == "script":
        assert "SCRIPT LOAD" not in request[request.index(own):], commands


def start_again(server: PlainServer) -> None:
    """The stopped ``server`` started again on its port, until it answers (an empty script cache)."""
    server._spawn()
    assert server._wait_ready(), server.log()


# --- a setup that fails: the server down when the limiter is made ------------------------------


def test_a_guard_made_while_redis_is_down_fails_open_then_limits_once_it_is_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """Redis down when the guard is made: nothing raised; its setup fails (logged once as a
    warning, counted), the first request fails open as configured (logged, counted as any
    failure); Redis back (the port answers): the next request runs the setup at once (not waiting
    for its next attempt) and is limited, field for field, on the script backend's fresh cache."""
    caplog.set_level(logging.INFO, logger="ratelimit_redis_module")
    server = PlainServer(tmp_path / "redis")
    port = server.port
    server.stop()
    stats = Stats()
    guard = Guard(f"redis://127.0.0.1:{port}", GCRA(5, 10, "1m"), stats=stats)
    try:
        down = guard.check("ann")
        assert (down.allowed, down.status, down.headers, down.source) == (True, 200, [], "failure")
        assert (stats.failures, stats.fail_open, stats.admitted) == (1, 1, 0)
        assert stats.setup_failures >= 1 and guard.limiter.backend is None
        start_again(server)
        up = guard.check("ann")
        assert (up.allowed, up.status, up.headers, up.source) == (True, 200, FIRST, "redis")
        assert (stats.failures, stats.admitted, stats.backend) == (1, 1, "script")
        with server.client() as c:
            assert c.script_exists(*map(script_sha, ("gcra", "refund", "concurrency_acquire"))) == [True] * 3
    finally:
        guard.close()
        server.stop()
    ours = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "ratelimit_redis_module"]
    setup = [m for m in ours if "the setup" in m[1]]
    assert setup[0][0] == "WARNING" and setup[0][1].startswith(
        "ratelimit: the setup (the backend, the scripts) failed (ConnectionError: "
    ), ours
    assert setup[0][1].endswith(
        "it is tried again in the background, and until it succeeds each request asks what it needs itself, "
        "within its timeout"
    )
    assert [level for level, _ in setup[1:]] == ["INFO"]  # later failures at debug level; then it succeeded
    assert setup[-1][1] == "ratelimit: the setup (the backend, the scripts) succeeded"
    assert ("WARNING", "rate limiter unavailable") in [(lvl, m.split(" (")[0]) for lvl, m in ours]


async def test_an_async_guard_made_while_redis_is_down_fails_closed_then_limits(tmp_path: Path) -> None:
    """The same for an AsyncGuard made in the event loop (its setup a task), failing closed."""
    server = PlainServer(tmp_path / "redis")
    port = server.port
    server.stop()
    stats = Stats()
    guard = AsyncGuard(f"redis://127.0.0.1:{port}", GCRA(5, 10, "1m"), stats=stats, fail_open=False)
    try:
        down = await guard.check("ann")
        assert (down.allowed, down.status, down.source) == (False, 503, "failure")
        assert (stats.failures, stats.fail_closed) == (1, 1) and stats.setup_failures >= 1
        start_again(server)
        up = await guard.check("ann")
        assert (up.allowed, up.status, up.headers, up.source) == (True, 200, FIRST, "redis")
        assert (stats.failures, stats.admitted, stats.backend) == (1, 1, "script")
    finally:
        await guard.aclose()
        server.stop()


def test_a_limiter_let_go_ends_its_retries(tmp_path: Path) -> None:
    """Its setup failing (Redis down), the limiter's thread tries again and again; once the
    application lets the limiter go, the thread ends at its next attempt instead of keeping the
    limiter alive and knocking at the port for ever."""
    server = PlainServer(tmp_path / "redis")
    port = server.port
    server.stop()
    limiter = RateLimiter(client_from_url(f"redis://127.0.0.1:{port}"))
    thread = limiter._setup._thread
    assert thread is not None and not limiter.ready() and limiter.stats.setup_failures >= 1
    del limiter
    gc.collect()
    thread.join(30)  # its pause (at most 5 s), then it finds the limiter gone
    assert not thread.is_alive()


def test_a_child_made_by_fork_sets_up_in_a_thread_of_its_own(tmp_path: Path) -> None:
    """A pre-forking server (gunicorn --preload) makes the limiter in the parent, whose setup may
    be under way when it forks: the child has none of the parent's threads, and must neither wait
    for the parent's attempt nor deadlock on its locks. The parent's COMMAND INFO is held (by the
    proxy) over the fork; the child's own goes through, and its setup is done."""
    server = PlainServer(tmp_path / "redis")
    held, first = threading.Event(), threading.Event()

    def hold(name: str) -> threading.Event | None:
        if name == "COMMAND INFO" and not first.is_set():
            first.set()
            return held
        return None

    proxy = Proxy(server.port, hold)
    try:
        limiter = RateLimiter(redis.Redis.from_url(proxy.url), setup_timeout=60)
        assert first.wait(30)  # the parent's attempt is under way, its lock free again
        pid = os.fork()
        if pid == 0:  # the child: no pytest from here, only its exit status
            ok = limiter.ready() and limiter.backend == "script" and limiter.gcra("rl:fork", 2, 1, "1h").remaining == 1
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert proxy.commands().count("COMMAND INFO") == 2  # the parent's, held, and the child's own
    finally:
        held.set()
        limiter.close()
        proxy.close()
        server.stop()
