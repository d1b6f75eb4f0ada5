"""RedisCluster (sync and asyncio) against a real cluster of three primaries: the key is the
commands' first argument, so each call goes to the node that owns the key's slot."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio.cluster
import redis.cluster

from conftest import PATIENT, Server
from ratelimit_redis_module import (
    GCRA,
    AsyncGuard,
    AsyncRateLimiter,
    Decision,
    FixedWindow,
    RateLimiter,
    Rule,
    async_client_from_url,
    client_from_url,
)


def owner(nodes: list[Server], slot: int) -> Server:
    """The node that owns `slot` (slots were given out in three ranges, in order)."""
    return nodes[0 if slot <= 5460 else 1 if slot <= 10922 else 2]


def keys_on_every_node(nodes: list[Server], prefix: str) -> list[str]:
    """One key per node, found by its slot."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < 3:
        key = f"{prefix}{i}"
        slot = redis.cluster.key_slot(key.encode())
        found.setdefault(nodes.index(owner(nodes, slot)), key)
        i += 1
    return [found[n] for n in range(3)]


def stored_on_owner(nodes: list[Server], key: str) -> bool:
    slot = redis.cluster.key_slot(key.encode())
    with owner(nodes, slot).client() as c:
        return c.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) >= 1 and c.exists(key) == 1


@pytest.mark.parametrize("protocol", [2, 3])
def test_sync_cluster_client_routes_by_key(cluster: list[Server], protocol: int) -> None:
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster[0].port, protocol=protocol)
    try:
        rl = RateLimiter(client)
        for key in keys_on_every_node(cluster, f"sync{protocol}:"):
            assert rl.gcra(key, 3, 1, "1s", cost=3) == Decision(True, 3, 0, 0, 3000)
            assert rl.gcra(key, 3, 1, "1s") == Decision(False, 3, 0, 1000, 3000)
            assert stored_on_owner(cluster, key)
        # Policies belong to each server: policy_set puts it on every primary.
        rl.policy_set(f"p{protocol}", GCRA(2, 2, "1s"), FixedWindow(100, "1h"))
        for node in cluster:
            assert RateLimiter(node.client()).policy_get(f"p{protocol}") == [
                Rule("GCRA", ("2", "2", "1s")), Rule("FIXEDWINDOW", ("100", "1h")),
            ]
        for key in keys_on_every_node(cluster, f"limit{protocol}:"):
            assert rl.limit(key, f"p{protocol}", cost=2) == Decision(True, 2, 0, 0, 1000, rule=0)
            assert stored_on_owner(cluster, key)
        lease = rl.acquire(f"jobs{protocol}", 1, "10s")
        assert lease.allowed and lease.token is not None
        assert rl.release(f"jobs{protocol}", lease.token) is True
    finally:
        client.close()


@pytest.mark.parametrize("protocol", [2, 3])
async def test_asyncio_cluster_client_routes_by_key(cluster: list[Server], protocol: int) -> None:
    client = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=cluster[1].port, protocol=protocol)
    try:
        rl = AsyncRateLimiter(client)
        for key in keys_on_every_node(cluster, f"async{protocol}:"):
            assert await rl.sliding_log(key, 2, "1m", cost=2) == Decision(True, 2, 0, 0, 60000)
            assert await rl.sliding_log(key, 2, "1m") == Decision(False, 2, 0, 60000, 60000)
            assert stored_on_owner(cluster, key)
        await rl.policy_set(f"ap{protocol}", FixedWindow(5, "1m"))
        # The guard on a cluster client: a denial on each node's key, then remembered.
        guard = AsyncGuard(client, GCRA(1, 1, "1m"), prefix=f"g{protocol}:", timeout=PATIENT, setup_timeout=PATIENT)
        for key in keys_on_every_node(cluster, f"g{protocol}:"):
            identity = key.removeprefix(f"g{protocol}:")
            assert (await guard.check(identity)).status == 200
            second = await guard.check(identity)
            assert (second.status, second.source) == (429, "redis")
            assert (await guard.check(identity)).source == "memory"
        assert (guard.stats.round_trips, guard.stats.remembered) == (6, 3)
    finally:
        await client.aclose()


def test_guard_names_policy_rules_on_cluster(cluster: list[Server]) -> None:
    client: Any = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster[2].port)
    try:
        rl = RateLimiter(client)
        rl.policy_set("two", GCRA(10, 10, "1s"), FixedWindow(3, "1m"))
        from ratelimit_redis_module import Guard, Policy

        guard = Guard(client, Policy("two"))
        verdict = guard.check("someone")
        # T0 is 20 s into its minute: the minute rule binds (fewer left), 40 s to its reset.
        assert verdict.headers[:2] == [("ratelimit-policy", '"two/1";q=3;w=60'), ("ratelimit", '"two/1";r=2;t=40')]
    finally:
        client.close()


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "asyncio"])
async def test_a_fresh_client_sets_and_deletes_a_policy_on_every_primary_and_lists_one_nodes(
    cluster: list[Server], asynchronous: bool
) -> None:
    name = f"gone-{asynchronous}"
    if asynchronous:
        client: Any = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=cluster[0].port)
        rl: Any = AsyncRateLimiter(client)
    else:
        client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster[0].port)
        rl = RateLimiter(client)

    async def run(result: Any) -> Any:
        return await result if asynchronous else result

    try:
        # The client's first command: an asyncio cluster client knows its nodes only after one.
        await run(rl.policy_set(name, GCRA(2, 2, "1s")))
        for node in cluster:
            assert RateLimiter(node.client()).policy_get(name) == [Rule("GCRA", ("2", "2", "1s"))]
        assert name in await run(rl.policy_list())
        assert await run(rl.policy_del(name)) is True
        for node in cluster:
            assert RateLimiter(node.client()).policy_get(name) is None
        assert await run(rl.policy_del(name)) is False
        assert name not in await run(rl.policy_list())
    finally:
        await run(client.aclose() if asynchronous else client.close())


async def test_the_packages_cluster_clients_route_by_key(cluster: list[Server]) -> None:
    """client_from_url and async_client_from_url with cluster=True: RedisCluster clients with
    the limiter's settings (timeouts, one retry at once), routing by key as any other."""
    sync_client: Any = client_from_url(f"redis://127.0.0.1:{cluster[1].port}", cluster=True, timeout=PATIENT)
    async_client: Any = async_client_from_url(f"redis://127.0.0.1:{cluster[2].port}", cluster=True,
                                               timeout=PATIENT)
    try:
        assert isinstance(sync_client, redis.cluster.RedisCluster)
        assert isinstance(async_client, redis.asyncio.cluster.RedisCluster)
        rl, arl = RateLimiter(sync_client), AsyncRateLimiter(async_client)
        for key in keys_on_every_node(cluster, "factory:"):
            assert rl.gcra(key, 2, 1, "1s", cost=2) == Decision(True, 2, 0, 0, 2000)
            assert await arl.gcra(key, 2, 1, "1s") == Decision(False, 2, 0, 1000, 2000)
            assert stored_on_owner(cluster, key)
    finally:
        sync_client.close()
        await async_client.aclose()
