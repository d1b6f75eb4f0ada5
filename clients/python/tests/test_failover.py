"""A failover through the package, as an application meets it (docs/cluster.md, Failover): a
primary with the module, its replica and three real Sentinels (the server binary in sentinel
mode, as Debian's redis-sentinel package links it); a Guard on
:func:`client_from_sentinel` spends the quota of 20 ``FixedWindow(100, "1h")`` keys, fail
closed; the primary is killed (SIGKILL) halfway, Sentinel promotes the replica, and a new
server is made its replica as an operator would.

The guard follows the new primary by itself: requests fail (503, counted) only while no node
is primary, and every key's quota is then spent to the end on the promoted replica. With
``durable=1`` no key is admitted past its limit across the failover."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest
import redis

from conftest import T0_MS, Server, free_port, server_binary
from ratelimit_redis_module import FixedWindow, Guard, Stats, client_from_sentinel, client_from_url

KEYS = 20
LIMIT = 100


class Sentinel:
    """A Sentinel process watching ``main``, stopped by its PID."""

    def __init__(self, directory: Path, primary: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        conf = directory / "sentinel.conf"
        conf.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {directory}\nlogfile sentinel.log\n"
            f"sentinel monitor main 127.0.0.1 {primary} 2\n"
            "sentinel down-after-milliseconds main 1000\n"
            "sentinel failover-timeout main 10000\n"
        )
        self.proc = subprocess.Popen(
            [server_binary(), str(conf), "--sentinel"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                with redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1) as c:
                    c.ping()
                    return
            except redis.RedisError:
                assert time.monotonic() < deadline, "sentinel did not start"
                time.sleep(0.02)

    def master(self) -> dict:
        with redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1, decode_responses=True) as c:
            return c.sentinel_master("main")

    def primary_port(self) -> int | None:
        try:
            with redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1, decode_responses=True) as c:
                addr = c.sentinel_get_master_addr_by_name("main")
        except redis.RedisError:
            return None
        return int(addr[1]) if addr else None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[tuple[Server, Server, list[Sentinel], Path]]:
    primary = Server(tmp_path / "primary", ["--repl-diskless-sync-delay", "0"])
    replica = Server(tmp_path / "replica")
    for s in (primary, replica):
        s.freeze()
    with replica.client() as c:
        c.execute_command("REPLICAOF", "127.0.0.1", primary.port)
        deadline = time.monotonic() + 20
        while c.info("replication")["master_link_status"] != "up":
            assert time.monotonic() < deadline, "the replica did not sync"
            time.sleep(0.02)
    # Online as the primary sees it: after a diskless sync it streams nothing to the replica
    # until the replica's first REPLCONF ACK (docs/cluster.md, Failover).
    with primary.client(decode_responses=True) as c:
        while c.info("replication").get("slave0", {}).get("state") != "online":
            assert time.monotonic() < deadline, "the replica is not online"
            time.sleep(0.02)
    sentinels = [Sentinel(tmp_path / f"sentinel{i}", primary.port) for i in range(3)]
    deadline = time.monotonic() + 20
    while not all(
        s.master().get("num-slaves") == 1 and s.master().get("num-other-sentinels") == 2 for s in sentinels
    ):
        assert time.monotonic() < deadline, "the sentinels did not meet"
        time.sleep(0.05)
    yield primary, replica, sentinels, tmp_path
    for s in sentinels:
        s.stop()
    primary.stop()
    replica.stop()


def spend_every_key(guard: Guard, kill: Callable[[], None]) -> list[int]:
    """Every key's quota spent through ``guard`` (each key until it is refused), ``kill`` run
    once half the quota is spent: what each key admitted."""
    admitted = [0] * KEYS
    full = [False] * KEYS
    killed = False
    deadline = time.monotonic() + 90
    while not all(full):
        assert time.monotonic() < deadline, f"not done: {admitted} {guard.stats}"
        for k in range(KEYS):
            if full[k]:
                continue
            verdict = guard.check(f"k{k}")
            if verdict.allowed:
                admitted[k] += 1
            elif verdict.status == 429:
                full[k] = True
            if not killed and sum(admitted) >= KEYS * LIMIT // 2:
                kill()
                killed = True
    assert killed
    return admitted


def spend_across_a_failover(
    watched: tuple[Server, Server, list[Sentinel], Path], durable: int
) -> tuple[list[int], Stats]:
    """Every key's quota spent through the guard, the primary killed halfway: each key's
    admissions over its limit, and the guard's counters."""
    primary, replica, sentinels, tmp = watched
    stats = Stats()
    client = client_from_sentinel([("127.0.0.1", s.port) for s in sentinels], "main", timeout=0.5)
    guard = Guard(client, FixedWindow(LIMIT, "1h"), fail_open=False, stats=stats, durable=durable,
                  max_remembered=0)
    spares: list[Server] = []

    def attach_spare() -> None:
        # Once Sentinel names the replica primary, the operator gives it a replica of its own
        # (watched apart from the requests, which take up to the timeout each while none answers).
        deadline = time.monotonic() + 30
        while sentinels[0].primary_port() != replica.port and time.monotonic() < deadline:
            time.sleep(0.025)
        spare = Server(tmp / "spare")
        spares.append(spare)
        spare.freeze(T0_MS)
        with spare.client() as c:
            c.execute_command("REPLICAOF", "127.0.0.1", replica.port)

    watcher = threading.Thread(target=attach_spare)

    def kill() -> None:
        os.kill(primary.proc.pid, signal.SIGKILL)
        primary.proc.wait(10)
        watcher.start()

    try:
        admitted = spend_every_key(guard, kill)
        watcher.join(60)
    finally:
        for spare in spares:
            spare.stop()
    assert sentinels[0].primary_port() == replica.port
    return [a - LIMIT for a in admitted], stats


def test_the_guard_follows_the_promoted_replica(watched: tuple[Server, Server, list[Sentinel], Path]) -> None:
    over, stats = spend_across_a_failover(watched, durable=0)
    # Every key's quota was spent to the end (the loop ends only then), through the new primary;
    # the requests that failed are those sent while no node was primary, refused with 503.
    assert stats.failures == stats.fail_closed
    assert stats.admitted == sum(o + LIMIT for o in over)
    print(f"without durable: {sum(o > 0 for o in over)} of {KEYS} keys over, by {sum(o for o in over if o > 0)}; "
          f"{stats.failures} requests failed closed during the failover")


def test_durable_admits_no_key_past_its_limit_across_a_failover(
    watched: tuple[Server, Server, list[Sentinel], Path]
) -> None:
    over, stats = spend_across_a_failover(watched, durable=1)
    assert all(o <= 0 for o in over), over
    print(f"durable: at most {max(over)} over; {stats.not_durable} admissions not acknowledged, "
          f"{stats.failures} failures in all")


def test_durable_without_a_replica_in_time_fails_as_configured(server: Server) -> None:
    """No replica acknowledges: the admission is not taken (503 failing closed, let through
    failing open), counted in stats.not_durable; a refusal needs no replica and stands."""
    for fail_open, status in ((False, 503), (True, 200)):
        stats = Stats()
        guard = Guard(server.client(), FixedWindow(1, "1h"), fail_open=fail_open, stats=stats,
                      durable=1, durable_timeout_ms=10, prefix=f"durable:{fail_open}:")
        v = guard.check("k")
        assert (v.status, v.source, stats.not_durable, stats.failures) == (status, "failure", 1, 1)
        # The write happened on the primary (only its replica is missing): the next is refused.
        v = guard.check("k")
        assert (v.status, v.source, stats.not_durable) == (429, "redis", 1)


CLUSTER_NODE = [
    "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000",
    # A replica may be promoted however long it was cut off (the default refuses one that was
    # away for longer than ten node timeouts, which a short timeout reaches at once).
    "--cluster-replica-validity-factor", "0", "--repl-diskless-sync-delay", "0",
]


def test_the_cluster_client_follows_a_cluster_failover_and_durable_keeps_every_count(tmp_path: Path) -> None:
    """Three primaries, a replica each (``redis-cli --cluster create``); the keys share a slot,
    whose primary is killed; the cluster promotes its replica. The guard, on the package's
    cluster client with ``durable=1``, follows it (fails closed only meanwhile) and no key is
    admitted past its limit."""
    nodes = [Server(tmp_path / f"node{i}", CLUSTER_NODE) for i in range(6)]
    spares: list[Server] = []
    try:
        out = subprocess.run(
            ["redis-cli", "--cluster", "create", *[f"127.0.0.1:{n.port}" for n in nodes],
             "--cluster-replicas", "1", "--cluster-yes"],
            capture_output=True, text=True,
        )
        assert out.returncode == 0, out.stdout
        deadline = time.monotonic() + 30
        for n in nodes:
            n.freeze()
            with n.client(decode_responses=True) as c:
                while "cluster_state:ok" not in c.execute_command("CLUSTER", "INFO") or (
                    c.info("replication")["role"] == "slave"
                    and c.info("replication")["master_link_status"] != "up"
                ):
                    assert time.monotonic() < deadline, "the cluster did not come up in sync"
                    time.sleep(0.05)
        with nodes[0].client() as c:
            slot = c.execute_command("CLUSTER", "KEYSLOT", "{f}")
            owner = next(
                r for r in c.execute_command("CLUSTER", "SLOTS") if r[0] <= slot <= r[1]
            )
        primary = next(n for n in nodes if n.port == owner[2][1])

        def replica_of(node: Server) -> bool:
            with node.client() as c:
                role = c.execute_command("ROLE")
            return role[0] in (b"slave", "slave") and int(role[2]) == primary.port

        replica = next(n for n in nodes if replica_of(n))
        stats = Stats()
        client = client_from_url(f"redis://127.0.0.1:{nodes[0].port}", cluster=True, timeout=0.5)
        guard = Guard(client, FixedWindow(LIMIT, "1h"), fail_open=False, stats=stats, durable=1,
                      max_remembered=0, prefix="{f}")

        def attach_spare() -> None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                with replica.client(decode_responses=True) as c:
                    if c.info("replication")["role"] == "master":
                        break
                time.sleep(0.025)
            spare = Server(tmp_path / "spare", CLUSTER_NODE)
            spares.append(spare)
            spare.freeze()
            with spare.client() as c:
                c.execute_command("CLUSTER", "MEET", "127.0.0.1", replica.port)
                with replica.client(decode_responses=True) as r:
                    replica_id = r.execute_command("CLUSTER", "MYID")
                while True:
                    try:
                        c.execute_command("CLUSTER", "REPLICATE", replica_id)
                        return
                    except redis.ResponseError:
                        assert time.monotonic() < deadline + 30, "the spare did not become a replica"
                        time.sleep(0.05)

        watcher = threading.Thread(target=attach_spare)

        def kill() -> None:
            primary.stop()
            watcher.start()

        admitted = spend_every_key(guard, kill)
        watcher.join(60)
        assert all(a <= LIMIT for a in admitted), admitted
        assert stats.failures == stats.fail_closed
        print(f"cluster, durable: at most {max(admitted) - LIMIT} over; {stats.failures} failed closed")
    finally:
        for n in nodes + spares:
            n.stop()
