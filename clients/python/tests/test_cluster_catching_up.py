"""A cluster node that has not caught up with the cluster's policies (docs/cluster.md; issue
37): ``RL.LIMIT`` of a policy it has not learned yet answers ``TRYAGAIN``, not "no policy
named". redis-py's cluster clients retry ``TRYAGAIN`` by themselves (16 tries, the last 8 of
them 50 ms apart), and the package takes no error of a try as final: a guard on
:func:`client_from_url` / :func:`async_client_from_url` with ``cluster=True`` gets a decision
from the node once it has the policy, within those retries, and neither fails open nor closed.

The node is held behind for as long as the test wants: started alone, it holds a policy of
its own and takes at most one (``ratelimit.max-policies 1``), owns a slot taken from the
cluster, then meets the cluster and refuses its ``api``. The test lets it have ``api`` at the
moment the guard's call is seen retrying (the node's ``errorstat_TRYAGAIN``): the bound
raised, and ``api`` sent to it as the cluster holds it (``RL.DEBUG.CLUSTERMSG`` from the node
that made it, with its version), as an exchange would bring it, without waiting for one.
Every step waits for an event, never for a chosen time."""

from __future__ import annotations

import asyncio
import struct
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import redis

from conftest import PATIENT, Server, start_cluster
from ratelimit_redis_module import (
    AsyncGuard,
    Guard,
    Policy,
    Verdict,
    async_client_from_url,
    client_from_url,
)

# A hang guard, not a measure: each event below comes within a few seconds.
HANG_S = 60

NOT_YET = (
    "no policy named 'api' on this node yet: it has not caught up with the cluster's policies since it started"
)


def until(what: str, condition: Callable[[], bool]) -> None:
    """Returns once ``condition()`` holds, polling it every few ms."""
    since = time.monotonic()
    while not condition():
        assert time.monotonic() - since < HANG_S, f"hung: no {what} in {HANG_S} s"
        time.sleep(0.002)


def policies_info(node: Server, field: str) -> str:
    with node.client(decode_responses=True) as c:
        return str(c.info("ratelimit_policies")[f"ratelimit_{field}"])


def tryagains(node: Server) -> int:
    """How many TRYAGAIN errors the node has answered (INFO errorstats)."""
    with node.client() as c:
        stats = c.info("errorstats").get("errorstat_TRYAGAIN")
    return int(stats["count"]) if stats else 0


def others_known(node: Server) -> int:
    """The other nodes ``node`` knows, none in handshake."""
    with node.client(decode_responses=True) as c:
        lines = c.execute_command("CLUSTER", "NODES").splitlines()
    return sum(
        1 for line in lines if not any(f in line.split(" ")[2] for f in ("myself", "handshake", "noaddr"))
    )


def policy(node: Server, name: str) -> Any:
    with node.client() as c:
        return c.execute_command("RL.POLICY.GET", name)


def fnv(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def changes_message(name: str, clock: int, node: str, words: list[bytes]) -> bytes:
    """A CHANGES message of one policy with its version, as the module writes it
    (src/cluster/wire.rs)."""
    out = b"RLP\x01\x03" + struct.pack("<I", 1)
    out += struct.pack("<H", len(name)) + name.encode() + struct.pack("<Q", clock) + node.encode()
    out += b"\x00" + bytes([len(words)])
    for w in words:
        out += struct.pack("<H", len(w)) + w
    return out + struct.pack("<Q", fnv(out))


class Held:
    """Three primaries holding ``api``, and a fourth node held behind, owning the slot of
    ``tag``'s keys."""

    new: Server

    def __init__(self, base: Path, tag: str) -> None:
        self.nodes = start_cluster(base / "cluster", Server)
        try:
            self._start(base, tag)
        except BaseException:
            self.stop()
            raise

    def _start(self, base: Path, tag: str) -> None:
        first = self.nodes[0]
        for node in self.nodes:
            until("a node caught up", lambda node=node: policies_info(node, "policies_caught_up") == "1")
        with first.client() as c:
            assert c.execute_command("RL.POLICY.SET", "api", "GCRA", "5", "5", "1s") in (b"OK", "OK")
            # api is the only change the cluster has seen: its version is the table's clock, and
            # its origin this node.
            self.api_clock = int(policies_info(first, "policy_clock"))
            self.api_words = c.execute_command("RL.POLICY.GET", "api")
            self.origin = c.execute_command("CLUSTER", "MYID").decode()
            slot = c.execute_command("CLUSTER", "KEYSLOT", tag)
        for node in self.nodes:
            until("api on every node", lambda node=node: policy(node, "api") is not None)
            with node.client() as c:
                c.execute_command("CLUSTER", "DELSLOTS", slot)
        self.new = new = Server(
            base / "new",
            ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000",
             "--cluster-require-full-coverage", "no"],
        )
        with new.client() as c:
            c.execute_command("CLUSTER", "ADDSLOTS", slot)
            # Alone, with its slot: the cluster it is the whole of is up, and it has caught up.
            until("cluster_state:ok alone", lambda: b"cluster_state:ok" in c.execute_command("CLUSTER", "INFO"))
            assert policies_info(new, "policies_caught_up") == "1"
            c.execute_command("RL.POLICY.SET", "own", "FIXEDWINDOW", "10", "1m")
            c.execute_command("CONFIG", "SET", "ratelimit.max-policies", "1")
            self.new_id = c.execute_command("CLUSTER", "MYID").decode()
            c.execute_command("CLUSTER", "MEET", "127.0.0.1", first.port)
        until("the new node knows the others", lambda: others_known(new) == 3)
        # It has exchanged (it refused the cluster's api: its table is full) and has not
        # caught up.
        until("api refused", lambda: int(policies_info(new, "cluster_changes_refused")) >= 1)
        until("caught_up:0", lambda: policies_info(new, "policies_caught_up") == "0")
        # The cluster routes the slot to it.
        for node in self.nodes:
            with node.client() as c:
                until("the slot on the new node", lambda c=c: any(
                    r[0] <= slot <= r[1] and r[2][1] == new.port for r in c.execute_command("CLUSTER", "SLOTS")
                ))
                until("cluster_state:ok", lambda c=c: b"cluster_state:ok" in c.execute_command("CLUSTER", "INFO"))

    def catch_up(self) -> None:
        """Room for api on the new node, and api sent to it as the cluster holds it."""
        with self.new.client() as c:
            c.execute_command("CONFIG", "SET", "ratelimit.max-policies", "10000")
        message = changes_message("api", self.api_clock, self.origin, list(self.api_words))
        with self.nodes[0].client() as c:
            assert c.execute_command("RL.DEBUG.CLUSTERMSG", self.new_id, message) == 1

    def stop(self) -> None:
        for node in [*self.nodes, *([self.new] if hasattr(self, "new") else [])]:
            node.stop()


@pytest.fixture
def held(tmp_path: Path) -> Iterator[Held]:
    h = Held(tmp_path, "{catchup}")
    yield h
    h.stop()


def decided_while_retrying(held: Held, check: Callable[[], Verdict]) -> Verdict:
    """Runs ``check`` in a thread; once the new node has answered it TRYAGAIN, lets the node
    catch up; the check's verdict."""
    # What the node answers now, to a plain client: TRYAGAIN, the spec's words.
    with held.new.client() as c:
        with pytest.raises(redis.exceptions.TryAgainError) as raised:
            c.execute_command("RL.LIMIT", "{catchup}:direct", "api")
    assert str(raised.value) == NOT_YET
    before = tryagains(held.new)
    result: list[Any] = []

    def run() -> None:
        try:
            result.append(check())
        except BaseException as error:  # raised below, in the test's thread
            result.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    until("the guard's call answered TRYAGAIN", lambda: tryagains(held.new) > before)
    held.catch_up()
    thread.join(HANG_S)
    assert result, "the check did not return"
    if isinstance(result[0], BaseException):
        raise result[0]
    verdict: Verdict = result[0]
    return verdict


def test_a_sync_guard_gets_a_decision_from_a_node_that_catches_up_while_redis_py_retries(held: Held) -> None:
    client: Any = client_from_url(f"redis://127.0.0.1:{held.nodes[0].port}", cluster=True, timeout=PATIENT)
    try:
        guard = Guard(client, Policy("api"), prefix="{catchup}:", fail_open=True, setup_timeout=PATIENT)
        assert guard.limiter.ready()
        verdict = decided_while_retrying(held, lambda: guard.check("someone"))
        assert (verdict.allowed, verdict.status, verdict.source) == (True, 200, "redis")
        assert verdict.decision is not None and verdict.decision.remaining == 4
        assert (guard.stats.failures, guard.stats.fail_open) == (0, 0)
    finally:
        client.close()
    # And the node, its table the cluster's now, catches up.
    until("caught_up:1", lambda: policies_info(held.new, "policies_caught_up") == "1")


def test_an_asyncio_guard_gets_a_decision_from_a_node_that_catches_up_within_its_timeout(held: Held) -> None:
    # The guard's timeout bounds the whole call, retries included: one that leaves room for
    # redis-py's retries (the default, 50 ms, fails a call that waits for a node to catch up,
    # as a timeout). Kept at 1 s, the test's subject; the client's socket timeout and the setup's
    # are conftest's PATIENT (a read slower than 50 ms on a loaded machine is not a failure here).
    async def check() -> Verdict:
        client: Any = async_client_from_url(f"redis://127.0.0.1:{held.nodes[0].port}", cluster=True,
                                            timeout=PATIENT)
        try:
            guard = AsyncGuard(client, Policy("api"), prefix="{catchup}:", fail_open=False, timeout=1.0,
                               setup_timeout=PATIENT)
            assert await guard.limiter.ready()
            verdict = await guard.check("someone")
            assert (guard.stats.failures, guard.stats.fail_closed) == (0, 0)
            return verdict
        finally:
            await client.aclose()

    verdict = decided_while_retrying(held, lambda: asyncio.run(check()))
    assert (verdict.allowed, verdict.status, verdict.source) == (True, 200, "redis")
    assert verdict.decision is not None and verdict.decision.remaining == 4
