"""Fixtures: real redis-server processes with the module (debug clock on), a real 3-primary
cluster, and uvicorn serving an ASGI app on a free loopback port.

The server binary is $RATELIMIT_SERVER (default: redis-server on PATH); the module is
$RATELIMIT_MODULE (default: target/release/libratelimit.so of this repository).
"""

from __future__ import annotations

import gc
import http.client
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import redis
import uvicorn

ROOT = Path(__file__).resolve().parents[3]
T0_MS = 1_700_000_000_000

#: The timeouts, in seconds, of a guard, a middleware or a client made from a URL in a test that
#: is not about timeouts: pass ``timeout=PATIENT`` and, where the constructor takes one,
#: ``setup_timeout=PATIENT``. The package's defaults (50 ms for a check, 1 s for the setup) are for
#: a server nearby with time to spare; ``make test`` runs six suites at once on two cores, where
#: one round trip can take longer, and a check that times out fails open (or closed), so a test
#: that kept them would pass or fail by the machine's load. A minute is a hang, not a busy
#: machine. Tests of the timeout itself (Redis down or hung, failover, a setup overrunning its
#: timeout) set theirs.
PATIENT = 60.0

#: The mark of a test of the package itself rather than of a server (its types under mypy, the
#: package installed into a fresh venv, its local budgets in uvicorn's worker processes started,
#: stopped and killed, each process's commands a plain client's, which test_local_budget.py and
#: the module's own tests hold to the server): make test runs this suite on four servers and
#: sets RATELIMIT_SKIP_PACKAGE_TESTS=1 on all but the first, where such a test would repeat
#: itself.
package_test = pytest.mark.skipif(
    os.environ.get("RATELIMIT_SKIP_PACKAGE_TESTS") == "1",
    reason="a test of the package, not of the server: make test runs it with the first server",
)

# The script backend's scripts as they are in this tree (clients/lua, their one source), not
# the copy the installed package carries (made when scripts/deps.sh installed it): see
# ratelimit_redis_module.scripts. test_script_backend.py checks the installed copy itself.
os.environ.setdefault("RATELIMIT_SCRIPTS_DIR", str(ROOT / "clients" / "lua"))


def server_binary() -> str:
    return os.environ.get("RATELIMIT_SERVER") or shutil.which("redis-server") or "redis-server"


def module_path() -> str:
    return os.environ.get("RATELIMIT_MODULE") or str(ROOT / "target/release/libratelimit.so")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_cluster_port() -> int:
    """A free port for a cluster node: at most 55535, so that its cluster bus port (10000
    above) exists (Redis refuses to start a cluster node above it: "Redis port number too
    high"), with that bus port free too. About four in five ephemeral ports qualify."""
    while True:
        port = free_port()
        if port <= 55535:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port + 10000))
                except OSError:
                    continue
            return port


class Server:
    """One redis-server with the module and the debug clock, on a free loopback port,
    stopped by its PID."""

    def __init__(self, directory: Path, extra: list[str] | None = None) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.extra = extra or []
        for _ in range(5):
            self.port = free_cluster_port() if "--cluster-enabled" in self.extra else free_port()
            self._spawn()
            if self._wait_ready():
                return
        raise RuntimeError(f"redis-server did not start; log:\n{self.log()}")

    def _spawn(self) -> None:
        self.proc = subprocess.Popen(
            [
                server_binary(), "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", str(self.dir), "--logfile", "redis.log", "--save", "",
                "--appendonly", "no", "--loadmodule", module_path(), "debug-clock", "yes",
                *self.extra,
            ],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    def restart(self, ms: int = T0_MS) -> None:
        """Start it again, stopped or not, on the same port (its keys gone: nothing is
        saved), the debug clock frozen at ``ms``."""
        self.stop()
        self._spawn()
        if not self._wait_ready():
            raise RuntimeError(f"redis-server did not start again on port {self.port}; log:\n{self.log()}")
        self.freeze(ms)

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1) as c:
                    if c.info("server")["process_id"] == self.proc.pid:
                        return True
                    self.stop()
                    return False
            except redis.RedisError:
                time.sleep(0.02)
        self.stop()
        return False

    def log(self) -> str:
        path = self.dir / "redis.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def client(self, **kwargs: Any) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, **kwargs)

    def freeze(self, ms: int = T0_MS) -> None:
        with self.client() as c:
            c.execute_command("RL.DEBUG.CLOCK", "SET", ms)

    def advance(self, ms: int) -> None:
        with self.client() as c:
            c.execute_command("RL.DEBUG.CLOCK", "ADVANCE", ms)

    def calls(self, command: str) -> int:
        """How many times `command` ran (INFO commandstats)."""
        with self.client() as c:
            stats = c.info("commandstats").get(f"cmdstat_{command.lower()}")
        return int(stats["calls"]) if stats else 0

    def pause(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)


class FakeTime:
    """The fake time a test runs on: the servers' debug clocks and the package's injected clock
    (seconds, as time.monotonic gives them), always showing the same instant.

    Pass it as a guard's or middleware's ``clock``; ``advance`` moves every clock at once.
    """

    def __init__(self, *servers: Server, ms: int = T0_MS) -> None:
        self.servers = servers
        self.ms = ms
        for s in servers:
            s.freeze(ms)

    def __call__(self) -> float:
        return self.ms / 1000

    def advance(self, ms: int) -> None:
        self.ms += ms
        for s in self.servers:
            s.advance(ms)


@pytest.fixture(autouse=True)
def collected_first() -> None:
    """Garbage collected before each test. Some tests give Redis 50 ms an answer (the
    package's default; the others have PATIENT), and uvicorn serves in this process: a full
    collection of what earlier tests left, falling in a request, can take longer than that on a
    loaded machine (it failed the manual's app's first request, now and then, on Redis 8.2)."""
    gc.collect()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    s = Server(tmp_path / "redis")
    s.freeze()
    yield s
    s.stop()


class PlainServer(Server):
    """A redis-server without the module (no debug clock): where the packages use the scripts."""

    def _spawn(self) -> None:
        self.proc = subprocess.Popen(
            [
                server_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
                "--logfile", "redis.log", "--save", "", "--appendonly", "no", *self.extra,
            ],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )


@pytest.fixture(scope="module")
def module_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with the module, its debug clock frozen at T0 (one per test file): the module's
    side of the script backend's comparisons."""
    s = Server(tmp_path_factory.mktemp("module"))
    s.freeze(T0_MS)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlainServer]:
    """A server without the module (one per test file): where the packages use the scripts."""
    s = PlainServer(tmp_path_factory.mktemp("plain"))
    yield s
    s.stop()


@pytest.fixture(params=["module", "script"])
def backend(request: pytest.FixtureRequest, module_server: Server, plain: PlainServer) -> tuple[str, Server]:
    """A test once on each backend: ("module", the module's server) and ("script", a plain
    server). A test that parametrizes ``backend`` itself replaces it."""
    return request.param, module_server if request.param == "module" else plain


def start_cluster(base: Path, kind: type[Server]) -> list[Server]:
    """Three primaries of ``kind``, slots split in three with CLUSTER ADDSLOTSRANGE, joined by
    MEET; stopped if they do not come up."""
    nodes = [
        kind(base / f"node{i}", ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                 "--cluster-node-timeout", "5000"])
        for i in range(3)
    ]
    try:
        bounds = [(0, 5460), (5461, 10922), (10923, 16383)]
        for node, (first, last) in zip(nodes, bounds, strict=True):
            with node.client() as c:
                c.execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
        with nodes[0].client() as c:
            for node in nodes[1:]:
                c.execute_command("CLUSTER", "MEET", "127.0.0.1", node.port)
        deadline = time.monotonic() + 30
        for node in nodes:
            with node.client(decode_responses=True) as c:
                # With the module: caught up with the cluster's policies too (a node refuses
                # policy changes until it has: docs/cluster.md, Catching up).
                while (
                    "cluster_state:ok" not in c.execute_command("CLUSTER", "INFO")
                    or len(c.execute_command("CLUSTER", "NODES").splitlines()) < 3
                    or c.info("ratelimit_policies").get("ratelimit_policies_caught_up", 1) != 1
                ):
                    assert time.monotonic() < deadline, "the cluster did not come up"
                    time.sleep(0.05)
    except BaseException:
        for node in nodes:
            node.stop()
        raise
    return nodes


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Server]]:
    """Three primaries with the module, the debug clock frozen."""
    nodes = start_cluster(tmp_path_factory.mktemp("cluster"), Server)
    try:
        for node in nodes:
            node.freeze()
        yield nodes
    finally:
        for node in nodes:
            node.stop()


@pytest.fixture(scope="session")
def plain_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Server]]:
    """Three primaries without the module: the script backend's cluster."""
    nodes = start_cluster(tmp_path_factory.mktemp("plain-cluster"), PlainServer)
    try:
        yield nodes
    finally:
        for node in nodes:
            node.stop()


class Http:
    """uvicorn serving an ASGI app on a free loopback port, in a thread of this process."""

    def __init__(self, app: Any, lifespan: str = "off") -> None:
        # IPPROTO_TCP, not 0: asyncio turns Nagle off only on sockets that say TCP.
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan=lifespan)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)

    def get(self, path: str = "/", headers: dict[str, str] | None = None) -> tuple[int, list[tuple[str, str]], bytes]:
        """One GET on a new connection: the status, the headers (names lower case, in order,
        without Date and Server) and the body."""
        return self.request("GET", path, headers)

    def request(
        self, method: str, path: str = "/", headers: dict[str, str] | None = None
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """One request of any method, answered as :meth:`get` answers."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request(method, path, headers=headers or {})
            resp = conn.getresponse()
            body = resp.read()
            fields = [(k.lower(), v) for k, v in resp.getheaders() if k.lower() not in ("date", "server")]
            return resp.status, fields, body
        finally:
            conn.close()

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


@pytest.fixture
def serve() -> Iterator[Any]:
    """serve(app) starts uvicorn on the app; every server started is stopped at the end."""
    started: list[Http] = []

    def start(app: Any, lifespan: str = "off") -> Http:
        h = Http(app, lifespan)
        started.append(h)
        return h

    yield start
    for h in started:
        h.stop()
