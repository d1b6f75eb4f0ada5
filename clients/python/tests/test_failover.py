"""A failover through the package, as an application meets it (docs/cluster.md, Failover): a
primary with the module, its replica and three real Sentinels (the server binary in sentinel
mode, as Debian's redis-sentinel package links it); a Guard on
:func:`client_from_sentinel` spends the quota of 20 ``FixedWindow(20, "1h")`` keys, fail
closed. Halfway, once the replica has acknowledged everything the primary has, the replica is
cut off and five keys get one request each that only the primary sees; then the primary is
killed (SIGKILL), Sentinel promotes the replica, and a new server is made its replica as an
operator would.

The guard follows the new primary by itself: requests fail (503, counted) only while no node
is primary, and every key's quota is then spent to the end on the promoted replica. What the
primary admitted in the cut is lost with it: without ``durable`` a key is over its limit by at
most its admission in the cut; with ``durable=1`` the cut admits nothing (no replica
acknowledges) and no key is over its limit. The same on Redis Cluster, through the package's
cluster client.

Every step waits for an event (a port answering, the replica's acknowledgement, the promotion
seen by Sentinel or the cluster, the spare online, a decision from the new primary), never for
a chosen time."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import redis

from conftest import T0_MS, Server, free_port, server_binary
from ratelimit_redis_module import FixedWindow, Guard, Stats, client_from_sentinel, client_from_url

KEYS = 20
LIMIT = 20
# Keys given one request each while the replica is cut off.
CUT = 5
# A hang guard, not a measure: each event below comes within seconds even on a loaded 2-core
# machine (the failover: Sentinel's 5 s down-after period, or the cluster's 5 s node timeout,
# and a few seconds more); this only turns one that never comes into a failure that says which.
HANG_S = 300


def until(what: str, condition: Callable[[], bool], ended: threading.Event | None = None) -> None:
    """Returns once ``condition()`` holds, polling it; a condition that raises a Redis or
    connection error has not held yet (a server not answering yet)."""
    since = time.monotonic()
    while True:
        assert ended is None or not ended.is_set(), f"ended while waiting for {what}"
        try:
            if condition():
                return
        except (redis.RedisError, OSError):
            pass
        assert time.monotonic() - since < HANG_S, f"hung: no {what} in {HANG_S} s"
        time.sleep(0.02)


def replication(port: int) -> dict[str, Any]:
    """INFO replication of the node at ``port``."""
    with redis.Redis(host="127.0.0.1", port=port, decode_responses=True) as c:
        return c.info("replication")


def online(port: int, replica_port: int) -> bool:
    """Whether the node at ``port`` lists a replica at ``replica_port`` online (its own view)."""
    return any(
        re.fullmatch(r"slave\d+", field) and value.get("port") == replica_port and value.get("state") == "online"
        for field, value in replication(port).items()
    )


class Sentinel:
    """A Sentinel process watching ``main``, stopped by its PID."""

    def __init__(self, directory: Path, primary: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        conf = directory / "sentinel.conf"
        # down-after-milliseconds: how long a primary does not answer before Sentinel takes it
        # for down. Long enough that a live primary on a loaded machine is never taken for down
        # (the scenario kills it at a chosen point); the test waits for the failover, whatever
        # it takes.
        conf.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {directory}\nlogfile sentinel.log\n"
            f"sentinel monitor main 127.0.0.1 {primary} 2\n"
            "sentinel down-after-milliseconds main 5000\n"
            "sentinel failover-timeout main 10000\n"
        )
        self.proc = subprocess.Popen(
            [server_binary(), str(conf), "--sentinel"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

        def answering() -> bool:
            assert self.proc.poll() is None, f"Sentinel exited ({self.proc.returncode})"
            with self.client() as c:
                return bool(c.ping())

        try:
            until(f"Sentinel answering on port {self.port}", answering)
        except BaseException:
            self.stop()
            raise

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5, decode_responses=True)

    def master(self) -> dict:
        with self.client() as c:
            return c.sentinel_master("main")

    def replicas(self) -> list[dict]:
        with self.client() as c:
            return c.sentinel_slaves("main")

    def primary_port(self) -> int:
        """The port of the primary this Sentinel names (what a client asks it)."""
        with self.client() as c:
            return int(c.sentinel_get_master_addr_by_name("main")[1])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[tuple[Server, Server, list[Sentinel], Path]]:
    """A primary and its replica, online, watched by three Sentinels that know both and each
    other."""
    primary = Server(tmp_path / "primary", ["--repl-diskless-sync-delay", "0"])
    replica = Server(tmp_path / "replica")
    sentinels: list[Sentinel] = []
    try:
        for s in (primary, replica):
            s.freeze()
        with replica.client() as c:
            c.execute_command("REPLICAOF", "127.0.0.1", primary.port)
        # Online as the primary sees it: after a diskless sync it streams nothing to the replica
        # until the replica's first REPLCONF ACK (docs/cluster.md, Failover).
        until("replica online", lambda: online(primary.port, replica.port))
        for i in range(3):
            sentinels.append(Sentinel(tmp_path / f"sentinel{i}", primary.port))
        # Each Sentinel knows the two others (a quorum elects a leader) and has read the
        # replica's INFO with its link up (a replica whose INFO it has not read, Sentinel does
        # not promote).
        until(
            "Sentinels that know each other and the replica",
            lambda: all(
                s.master()["num-other-sentinels"] == 2
                and [r["master-link-status"] for r in s.replicas()] == ["ok"]
                for s in sentinels
            ),
        )
        yield primary, replica, sentinels, tmp_path
    finally:
        for s in sentinels:
            s.stop()
        primary.stop()
        replica.stop()


class Background:
    """``fn()`` run in a thread; ``error`` is what it raised, if anything."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(fn,))
        self.thread.start()

    def _run(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - raised again in the test's thread
            self.error = e

    def raise_error(self) -> None:
        if self.error is not None:
            raise self.error

    def join(self) -> None:
        self.thread.join()
        self.raise_error()


class Spending:
    """Every key's quota spent through ``guard``, a request for each key not yet refused in
    turn: what each key admitted, and what it admitted while the replica was cut off."""

    def __init__(self, guard: Guard) -> None:
        self.guard = guard
        self.admitted = [0] * KEYS
        self.full = [False] * KEYS
        self.cut = [0] * KEYS
        self.next = 0
        self.failed = False
        self.last_decision = time.monotonic()

    def ask(self) -> tuple[int, int]:
        """One request for the next key not yet refused: the key, and 1 if admitted, else 0."""
        while self.full[self.next]:
            self.next = (self.next + 1) % KEYS
        k = self.next
        self.next = (self.next + 1) % KEYS
        verdict = self.guard.check(f"k{k}")
        self.failed = verdict.source == "failure"
        if self.failed:
            return k, 0
        self.last_decision = time.monotonic()
        if verdict.allowed:
            self.admitted[k] += 1
            return k, 1
        self.full[k] = True
        return k, 0

    def until(self, done: Callable[[], bool]) -> None:
        """Requests until ``done()``. A request fails (closed) while no node is primary; the
        hang guard wants a decision now and then."""
        while not done():
            self.ask()
            if self.failed:
                # Paced as a client retrying would be: a failed request takes about a ms (no
                # primary to connect to), and unpaced the ~6 s of a failover were 5,000 of them,
                # most of this file's CPU. Nothing waits on the pause; the loop goes on either way.
                time.sleep(0.01)
            assert time.monotonic() - self.last_decision < HANG_S, (
                f"hung: no decision in {HANG_S} s: {self.admitted} {self.guard.stats}"
            )

    def spent_after(self, failover: Background) -> None:
        """Requests until every key is refused, ``failover`` running meanwhile (its error
        raised as soon as it fails); then ``failover`` finished."""

        def done() -> bool:
            failover.raise_error()
            return all(self.full)

        self.until(done)
        failover.join()

    def half(self) -> bool:
        return sum(self.admitted) >= KEYS * LIMIT // 2

    def in_the_cut(self) -> None:
        """One request for each of ``CUT`` keys, counted in ``cut``."""
        for _ in range(CUT):
            k, admitted = self.ask()
            self.cut[k] = admitted

    def over(self) -> list[int]:
        return [a - LIMIT for a in self.admitted]


def cut_off(primary: Server, replica: Server) -> None:
    """The replica, once it has acknowledged everything ``primary`` has, cut off from it: its
    link closed, and it can no longer authenticate to the primary (a password the primary does
    not have), so what the primary admits from now on only the primary has, as a lagging replica
    would not have it."""
    with primary.client() as c:
        # A write made on the primary after all of the guard's, acknowledged (WAIT, no timeout
        # but the hang guard's). Its key is in the slot of the keys ({f}) on a cluster.
        c.set("{f}fence", 1)
        assert c.execute_command("WAIT", 1, HANG_S * 1000) == 1, "the replica did not acknowledge"
        with replica.client() as r:
            r.config_set("masterauth", "not-the-primary-s")
        c.execute_command("CLIENT", "KILL", "TYPE", "replica")
    until(
        "the replica cut off",
        lambda: replication(replica.port)["master_link_status"] == "down"
        and replication(primary.port)["connected_slaves"] == 0,
    )


def spend_across_a_failover(
    watched: tuple[Server, Server, list[Sentinel], Path], durable: int
) -> tuple[Spending, Stats]:
    """Every key's quota spent through the guard, the primary cut off from its replica and
    killed halfway: what each key admitted, and the guard's counters."""
    primary, replica, sentinels, tmp = watched
    stats = Stats()
    client = client_from_sentinel([("127.0.0.1", s.port) for s in sentinels], "main", timeout=0.5)
    guard = Guard(client, FixedWindow(LIMIT, "1h"), fail_open=False, stats=stats, durable=durable,
                  max_remembered=0)
    spending = Spending(guard)
    spares: list[Server] = []
    ended = threading.Event()

    def failover() -> None:
        # The promotion as Sentinel sees it (the client's, in the requests: decisions again, the
        # old primary being dead); then the operator gives the new primary a replica of its own.
        until("Sentinel naming the replica primary", lambda: sentinels[0].primary_port() == replica.port, ended)
        # The spare never becomes primary (replica-priority 0): Sentinel would take it, still
        # empty, for as good a candidate as any (a replica that never synced reports
        # master_link_down_since_seconds:-1, which passes Sentinel's check of how long a link
        # has been down), so a second failover, should Sentinel take the new primary for down
        # while the spare loads, would go to a node without the keys: every key's quota again.
        spare = Server(tmp / "spare", ["--replica-priority", "0"])
        spares.append(spare)
        spare.freeze(T0_MS)
        with spare.client() as c:
            c.execute_command("REPLICAOF", "127.0.0.1", replica.port)
        # With durable, admissions wait for it: none is acknowledged until it is online.
        until("the spare online", lambda: online(replica.port, spare.port), ended)

    watcher: Background | None = None
    try:
        spending.until(spending.half)
        cut_off(primary, replica)
        # Sentinel promotes a replica whose link has been down for no more than ten down-after
        # periods (50 s) before it took the primary for down: here the CUT requests (each at
        # most the guard's timeout) and one down-after period.
        spending.in_the_cut()
        primary.stop()
        watcher = Background(failover)
        spending.spent_after(watcher)
        # Every Sentinel names the replica: no second failover.
        assert [s.primary_port() for s in sentinels] == [replica.port] * len(sentinels)
    finally:
        ended.set()
        if watcher is not None:
            watcher.thread.join()
        for spare in spares:
            spare.stop()
    return spending, stats


def test_the_guard_follows_the_promoted_replica(watched: tuple[Server, Server, list[Sentinel], Path]) -> None:
    spending, stats = spend_across_a_failover(watched, durable=0)
    over, cut = spending.over(), spending.cut
    # Every key's quota was spent to the end (the loop ends only then) on the new primary, which
    # has every admission but those of the cut: a key admits those again, and no more. The
    # requests that failed are those sent while no node was primary, refused with 503.
    assert all(o <= c for o, c in zip(over, cut)), (over, cut)
    assert stats.failures == stats.fail_closed
    assert stats.admitted == sum(spending.admitted)
    print(f"without durable: {sum(cut)} admitted in the cut; {sum(o > 0 for o in over)} of {KEYS} keys over, "
          f"by {sum(o for o in over if o > 0)}; {stats.failures} requests failed closed during the failover")


def test_durable_admits_no_key_past_its_limit_across_a_failover(
    watched: tuple[Server, Server, list[Sentinel], Path]
) -> None:
    spending, stats = spend_across_a_failover(watched, durable=1)
    over = spending.over()
    # No replica acknowledged the cut's admissions: none was taken as admitted (each failed closed).
    assert spending.cut == [0] * KEYS
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
    # cluster-node-timeout: how long a node does not answer before the others take it for
    # failing. Long enough that a live primary on a loaded machine is never taken for failing
    # (the scenario kills it at a chosen point); the test waits for the failover, whatever it
    # takes.
    "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000",
    # A replica may be promoted however long it was cut off (the default refuses one whose link
    # has been down for longer than ten node timeouts).
    "--cluster-replica-validity-factor", "0", "--repl-diskless-sync-delay", "0",
]


def test_the_cluster_client_follows_a_cluster_failover_and_durable_keeps_every_count(tmp_path: Path) -> None:
    """Three primaries, a replica each (``redis-cli --cluster create``); the keys share a slot,
    whose primary is cut off from its replica (as above) and killed; the cluster promotes the
    replica. The guard, on the package's cluster client with ``durable=1``, follows it (fails
    closed only meanwhile): the cut admits nothing and no key is admitted past its limit."""
    nodes = [Server(tmp_path / f"node{i}", CLUSTER_NODE) for i in range(6)]
    spares: list[Server] = []
    ended = threading.Event()
    watcher: Background | None = None
    try:
        out = subprocess.run(
            ["redis-cli", "--cluster", "create", *[f"127.0.0.1:{n.port}" for n in nodes],
             "--cluster-replicas", "1", "--cluster-yes"],
            capture_output=True, text=True,
        )
        assert out.returncode == 0, out.stdout
        for n in nodes:
            n.freeze()

        def in_sync(n: Server) -> bool:
            with n.client(decode_responses=True) as c:
                if "cluster_state:ok" not in c.execute_command("CLUSTER", "INFO"):
                    return False
            info = replication(n.port)
            if info["role"] == "slave":
                return online(info["master_port"], n.port)
            return True

        until("the cluster up, every replica online", lambda: all(in_sync(n) for n in nodes))
        with nodes[0].client() as c:
            slot = c.execute_command("CLUSTER", "KEYSLOT", "{f}")
            owner = next(
                r for r in c.execute_command("CLUSTER", "SLOTS") if r[0] <= slot <= r[1]
            )
        primary = next(n for n in nodes if n.port == owner[2][1])
        replica = next(
            n for n in nodes
            if replication(n.port)["role"] == "slave" and replication(n.port)["master_port"] == primary.port
        )
        stats = Stats()
        client = client_from_url(f"redis://127.0.0.1:{nodes[0].port}", cluster=True, timeout=0.5)
        guard = Guard(client, FixedWindow(LIMIT, "1h"), fail_open=False, stats=stats, durable=1,
                      max_remembered=0, prefix="{f}")
        spending = Spending(guard)

        def failover() -> None:
            # The promotion as the cluster sees it (the client's, in the requests); then the
            # operator gives the new primary a replica of its own.
            until("the replica promoted", lambda: replication(replica.port)["role"] == "master", ended)
            # The spare never fails over (cluster-replica-no-failover): it would take over the
            # slot, still empty, should the new primary be taken for failing while it loads.
            spare = Server(tmp_path / "spare", [*CLUSTER_NODE, "--cluster-replica-no-failover", "yes"])
            spares.append(spare)
            spare.freeze()
            with replica.client(decode_responses=True) as r:
                replica_id = r.execute_command("CLUSTER", "MYID")
            with spare.client() as c:
                c.execute_command("CLUSTER", "MEET", "127.0.0.1", replica.port)

                def replicating() -> bool:
                    # Refused until the spare has heard of the replica (gossip after MEET).
                    c.execute_command("CLUSTER", "REPLICATE", replica_id)
                    return True

                until("the spare made a replica of the new primary", replicating, ended)
            until("the spare online", lambda: online(replica.port, spare.port), ended)

        spending.until(spending.half)
        cut_off(primary, replica)
        spending.in_the_cut()
        primary.stop()
        watcher = Background(failover)
        spending.spent_after(watcher)
        over = spending.over()
        assert replication(replica.port)["role"] == "master"
        # No replica acknowledged the cut's admissions: none was taken as admitted.
        assert spending.cut == [0] * KEYS
        assert all(o <= 0 for o in over), over
        assert stats.failures == stats.fail_closed
        print(f"cluster, durable: at most {max(over)} over; {stats.failures} failed closed")
    finally:
        ended.set()
        if watcher is not None:
            watcher.thread.join()
        for n in nodes + spares:
            n.stop()
