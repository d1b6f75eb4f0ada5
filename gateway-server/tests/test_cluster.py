"""The gateway on a Redis Cluster (REDIS_TYPE=cluster): each descriptor's call routed by its key's
slot, a refused request's units given back on every node, and a slot resharded while requests
for its key flow (ASK during the move, MOVED after), with every unit counted once."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import redis

from conftest import OK, OVER_LIMIT, T0_MS, Gateway, Server, descriptor, start_cluster

RULES = """
domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: tight
    rate_limit: {unit: hour, requests_per_unit: 1}
"""


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory):
    nodes = start_cluster(tmp_path_factory.mktemp("cluster"), Server)
    for n in nodes:
        n.freeze(T0_MS)
    yield nodes
    for n in nodes:
        n.stop()


def owner(nodes: list, key: str):
    """The node that holds `key`'s slot."""
    with nodes[0].client() as c:
        slot = c.execute_command("CLUSTER", "KEYSLOT", key)
    for n in nodes:
        with n.client(decode_responses=True) as c:
            myself = next(line for line in c.execute_command("CLUSTER", "NODES").splitlines() if "myself" in line)
            for part in myself.split()[8:]:
                first, _, last = part.partition("-")
                if first.isdigit() and int(first) <= slot <= int(last or first):
                    return n, slot
    raise AssertionError(f"no node has slot {slot}")


def node_id(node) -> str:
    with node.client() as c:
        return c.execute_command("CLUSTER", "MYID").decode()


@pytest.fixture
def gateway(tmp_path: Path, nodes):
    for n in nodes:
        with n.client() as c:
            c.flushall()
    urls = ",".join(f"127.0.0.1:{n.port}" for n in nodes[:2])
    g = Gateway(tmp_path, urls, {"api.yaml": RULES}, {"REDIS_TYPE": "cluster"})
    yield g
    assert g.stop() == 0, g.log()


def test_descriptors_on_several_nodes(gateway, nodes) -> None:
    users = [f"u{i}" for i in range(8)]
    r = gateway.should("api", *[descriptor(("user", u)) for u in users])
    assert r.overall_code == OK
    assert [s.limit_remaining for s in r.statuses] == [999] * 8
    holders = set()
    for u in users:
        node, _ = owner(nodes, f"api_user_{u}_hour")
        with node.client() as c:
            assert c.execute_command("RL.INSPECT", f"api_user_{u}_hour")[b"count"] == 1
        holders.add(node.port)
    assert len(holders) > 1, "the keys fell on one node: pick other names"
    # Refused by one: the others, wherever they are, get their unit back.
    gateway.should("api", descriptor(("tight", "t")))
    refused = gateway.should("api", *[descriptor(("user", u)) for u in users], descriptor(("tight", "t")))
    assert refused.overall_code == OVER_LIMIT
    assert [s.limit_remaining for s in refused.statuses[:8]] == [999] * 8
    for u in users:
        node, _ = owner(nodes, f"api_user_{u}_hour")
        with node.client() as c:
            assert c.execute_command("RL.INSPECT", f"api_user_{u}_hour")[b"count"] == 1


def test_a_slot_resharded_under_load(gateway, nodes) -> None:
    key = "api_user_moving_hour"
    source, slot = owner(nodes, key)
    target = next(n for n in nodes if n is not source)
    total = 300
    answers: list[int] = []
    started = threading.Event()
    failure: list[BaseException] = []

    def load() -> None:
        try:
            for i in range(total):
                r = gateway.should("api", descriptor(("user", "moving")))
                answers.append(r.statuses[0].limit_remaining)
                if i == 50:
                    started.set()
        except BaseException as e:  # noqa: BLE001 - handed to the test's thread
            failure.append(e)
            started.set()

    t = threading.Thread(target=load)
    t.start()
    started.wait(60)
    source_id, target_id = node_id(source), node_id(target)
    with target.client() as c:
        c.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
    with source.client() as c:
        c.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        while keys := c.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
            c.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
    for n in [target, source] + [n for n in nodes if n not in (source, target)]:
        with n.client() as c:
            c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
    t.join(120)
    assert not failure, failure
    assert answers == list(range(999, 999 - total, -1))
    with target.client() as c:
        assert c.execute_command("RL.INSPECT", key)[b"count"] == total
    with source.client() as c:
        with pytest.raises(redis.ResponseError, match=f"{slot} 127.0.0.1:{target.port}"):
            c.execute_command("RL.INSPECT", key)
