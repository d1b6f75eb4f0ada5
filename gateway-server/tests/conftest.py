"""The gateway's harness: real redis-servers with the module (the Python package's test harness,
clients/python/tests/conftest.py, loaded from there), the gateway's binary started on free
loopback ports with its rules files in a folder of the test's own, and Envoy played by grpcio with
the messages the gRPC project generates from Envoy's own protos (xds-protos).

The gateway is $RATELIMIT_GATEWAY, a command line (make test gives make dist's binaries, the
aarch64 one behind qemu-user; default: target/release/ratelimit-gateway-server of this repository).
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import grpc
import pytest
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
from google.protobuf import wrappers_pb2

ROOT = Path(__file__).resolve().parents[2]


def package_test_module(name: str, file: str) -> Any:
    """A module of the Python package's tests (clients/python/tests/`file`), loaded as `name`."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "clients" / "python" / "tests" / file)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


harness = package_test_module("package_harness", "conftest.py")
Server = harness.Server
FakeTime = harness.FakeTime
T0_MS: int = harness.T0_MS
free_port = harness.free_port
start_cluster = harness.start_cluster
# What the package's test_failover.py takes from its conftest (test_sentinel.py loads it).
server_binary = harness.server_binary

OK = rls_pb2.RateLimitResponse.OK
OVER_LIMIT = rls_pb2.RateLimitResponse.OVER_LIMIT


def gateway_command() -> list[str]:
    return shlex.split(os.environ.get("RATELIMIT_GATEWAY") or str(ROOT / "target/release/ratelimit-gateway-server"))


def descriptor(
    *entries: tuple[str, str], limit: tuple[int, int] | None = None, hits: int | None = None
) -> ratelimit_pb2.RateLimitDescriptor:
    """A descriptor as Envoy builds it: entries, maybe its own limit (requests, unit number),
    maybe its own hits_addend (a UInt64Value: 0 is sent too)."""
    d = ratelimit_pb2.RateLimitDescriptor(
        entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key=k, value=v) for k, v in entries]
    )
    if limit is not None:
        d.limit.requests_per_unit, d.limit.unit = limit
    if hits is not None:
        d.hits_addend.CopyFrom(wrappers_pb2.UInt64Value(value=hits))
    return d


class Gateway:
    """One ratelimit-gateway process, its rules files in `dir/runtime/ratelimit/config`
    (RUNTIME_WATCH_ROOT=false), ready when its /healthcheck answers; stopped by its PID."""

    def __init__(self, directory: Path, redis_url: str, rules: dict[str, str], env: dict[str, str] | None = None, ready: bool = True) -> None:
        self.config = directory / "runtime" / "ratelimit" / "config"
        self.config.mkdir(parents=True, exist_ok=True)
        for name, text in rules.items():
            (self.config / name).write_text(text)
        self.log_path = directory / "gateway.log"
        self.redis_url, self.directory, self.extra_env = redis_url, directory, env or {}
        self.attempts = 0
        self._spawn()
        if ready:
            self.wait_ready()

    def _spawn(self) -> None:
        """The gateway on three ports free when asked (free_port is this module's global, read
        at each call, so that a test can choose them)."""
        self.attempts += 1
        self.http_port, self.grpc_port, self.debug_port = free_port(), free_port(), free_port()
        self.env = {
            "PATH": os.environ.get("PATH", ""),
            "REDIS_SOCKET_TYPE": "tcp",
            "REDIS_URL": self.redis_url,
            "RUNTIME_ROOT": str(self.directory / "runtime"),
            "RUNTIME_SUBDIRECTORY": "ratelimit",
            "RUNTIME_WATCH_ROOT": "false",
            "HOST": "127.0.0.1", "PORT": str(self.http_port),
            "GRPC_HOST": "127.0.0.1", "GRPC_PORT": str(self.grpc_port),
            "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": str(self.debug_port),
            "LOG_LEVEL": "info",
            **self.extra_env,
        }
        self.proc = subprocess.Popen(
            gateway_command(), env=self.env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=self.log_path.open("wb"),
        )
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}")
        self.stub = rls_pb2_grpc.RateLimitServiceStub(self.channel)

    def wait_ready(self) -> None:
        """Until /healthcheck answers 200 (the listeners open once Redis answered). A port
        another process took after free_port found it free (the gateway exits with "Address
        already in use") is the harness's, not the gateway's: it starts again on other ports,
        up to five times, as the package harness's Server does."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                if "Address already in use" in self.log() and self.attempts < 5:
                    self.channel.close()
                    self._spawn()
                    continue
                raise RuntimeError(f"the gateway exited ({self.proc.returncode}):\n{self.log()}")
            # A probe of a second at most: on a port another process took, a listener that is
            # not the gateway's may hold the request unanswered, or answer it in another
            # protocol, while the gateway exits.
            try:
                if self.get(self.http_port, "/healthcheck", timeout=1)[0] == 200:
                    return
            except (OSError, http.client.HTTPException):
                time.sleep(0.02)
        raise RuntimeError(f"the gateway did not answer:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def should(self, domain: str, *descriptors: ratelimit_pb2.RateLimitDescriptor, hits: int = 0) -> rls_pb2.RateLimitResponse:
        return self.stub.ShouldRateLimit(
            rls_pb2.RateLimitRequest(domain=domain, descriptors=descriptors, hits_addend=hits),
            timeout=60,
        )

    def get(self, port: int, path: str, method: str = "GET", body: bytes | None = None, headers: dict[str, str] | None = None, timeout: float = 60) -> tuple[int, bytes, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            return r.status, r.read(), r.headers
        finally:
            conn.close()

    def json(self, body: Any) -> tuple[int, Any]:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        status, data, _ = self.get(self.http_port, "/json", "POST", raw)
        try:
            return status, json.loads(data)
        except ValueError:
            return status, data

    def debug(self, path: str) -> str:
        return self.get(self.debug_port, path)[1].decode()

    def metric(self, name: str) -> float:
        """A metric's value in /metrics (`name` with its labels, as printed), 0 when absent."""
        for line in self.debug("/metrics").splitlines():
            if line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def wait_metric(self, name: str, value: float) -> None:
        """Until a metric reaches `value` (the reload loop's loads are counted there)."""
        deadline = time.monotonic() + 30
        while self.metric(name) < value:
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} stayed at {self.metric(name)}:\n{self.log()}")
            time.sleep(0.05)

    def stop(self) -> int:
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise
        return self.proc.returncode


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    s = Server(tmp_path_factory.mktemp("redis"))
    yield s
    s.stop()


@pytest.fixture
def gateways(tmp_path: Path, redis_server: Any) -> Iterator[Any]:
    """Starts gateways on the module's server (its keys flushed, its clock frozen at T0_MS);
    each stopped after the test, and the stop checked: a clean exit on SIGTERM."""
    with redis_server.client() as c:
        c.flushall()
    redis_server.freeze(T0_MS)
    started: list[Gateway] = []

    def start(rules: dict[str, str], env: dict[str, str] | None = None, **kwargs: Any) -> Gateway:
        g = Gateway(tmp_path / f"gateway{len(started)}", f"127.0.0.1:{redis_server.port}", rules, env, **kwargs)
        started.append(g)
        return g

    yield start
    for g in started:
        if g.proc.poll() is None:
            assert g.stop() == 0, g.log()
