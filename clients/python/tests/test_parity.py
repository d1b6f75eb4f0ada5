"""Parity that cannot drift: the module's commands, their options and the policy rule kinds,
read from a real server (COMMAND LIST and COMMAND DOCS, and RL.POLICY.SET's own list of rule
kinds), against the package's tables (COMMANDS, LEFT_OUT, RULE_KINDS); and each option of the
table sent through the package to the server, so that the table cannot claim what the package
does not do. A command, option or rule kind the module gains fails here until the package has
its counterpart (or says why not)."""

from __future__ import annotations

import inspect
import re
from typing import Any, Callable

import pytest
import redis

from conftest import Server
from ratelimit_redis_module import (
    ADMISSION_OPTIONS,
    COMMANDS,
    GCRA,
    LEFT_OUT,
    RULE_KINDS,
    AsyncRateLimiter,
    Concurrency,
    FixedWindow,
    LeakyBucket,
    Policy,
    RateLimiter,
    Rule,
    SlidingLog,
    SlidingWindow,
    TokenBucket,
    Warmup,
)


def docs(server: Server) -> dict[str, dict[str, Any]]:
    """COMMAND DOCS of each of the module's commands, by name upper case."""
    with server.client(protocol=3, decode_responses=True) as c:
        # redis-py parses COMMAND's replies as COMMAND INFO's: take them as they come.
        c.set_response_callback("COMMAND", lambda reply, **_: reply)
        names = c.execute_command("COMMAND", "LIST", "FILTERBY", "MODULE", "ratelimit")
        reply = c.execute_command("COMMAND", "DOCS", *names)
    return {name.upper(): doc for name, doc in reply.items()}


def tokens(arguments: list[dict[str, Any]]) -> set[str]:
    """Every option word of a command's arguments, in blocks and one-ofs too."""
    found: set[str] = set()
    for argument in arguments:
        if "token" in argument:
            found.add(argument["token"].upper())
        found |= tokens(argument.get("arguments", []))
    return found


def positional(arguments: list[dict[str, Any]]) -> list[str]:
    """The names of a command's positional parameters after its key."""
    return [a["name"] for a in arguments
            if a["type"] != "key" and "token" not in a and "optional" not in a.get("flags", [])]


def test_every_command_of_the_module_has_a_counterpart_or_a_reason(server: Server) -> None:
    module = set(docs(server))
    assert not set(COMMANDS) & set(LEFT_OUT)
    assert sorted(module - set(COMMANDS) - set(LEFT_OUT)) == [], (
        "commands of the module with no counterpart in the package: add each to client.COMMANDS "
        "(with its methods) or to client.LEFT_OUT (with the reason)"
    )
    assert sorted((set(COMMANDS) | set(LEFT_OUT)) - module) == [], "the package names commands the module lacks"


def test_every_option_of_a_command_has_a_counterpart(server: Server) -> None:
    for name, doc in docs(server).items():
        if name in COMMANDS:
            assert tokens(doc.get("arguments", [])) == COMMANDS[name].options, name


def test_every_rule_kind_of_the_module_is_read_and_written(server: Server) -> None:
    """The rule kinds RL.POLICY.SET names when it refuses one, each with its command's
    positional parameters, flags (INTERVAL) and options with a value (COLDFACTOR)."""
    with server.client(decode_responses=True) as c, pytest.raises(redis.ResponseError) as refused:
        c.execute_command("RL.POLICY.SET", "probe", "NO-SUCH-RULE", "1")
    listed = re.search(r"expected a rule, one of (.*) with its arguments", str(refused.value))
    assert listed, str(refused.value)
    kinds = re.split(r", | or ", listed.group(1))
    assert sorted(kinds) == sorted(RULE_KINDS), "rule kinds of the module missing from limits.RULE_KINDS"
    all_docs = docs(server)
    for kind in kinds:
        arguments = all_docs[f"RL.{kind}"]["arguments"]
        assert tuple(positional(arguments)) == RULE_KINDS[kind].params, kind
        own = {a["token"].upper(): a["type"] for a in arguments if "token" in a}
        own = {token: kind_of for token, kind_of in own.items() if token not in ADMISSION_OPTIONS}
        assert {t for t, k in own.items() if k == "pure-token"} == set(RULE_KINDS[kind].flags), kind
        assert {t for t, k in own.items() if k != "pure-token"} == set(RULE_KINDS[kind].options), kind


class Recording:
    """A redis-py client that keeps the words of every command sent through it."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.sent: list[list[str]] = []

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.sent.append([a.decode() if isinstance(a, bytes) else str(a) for a in args])
        return self.client.execute_command(*args, **options)


# For each command of COMMANDS, calls through the package that send every option the table
# lists for it (in order: the policy is set before RL.LIMIT uses it, the lease taken before it
# is released).
CALLS: dict[str, Callable[[RateLimiter], Any]] = {
    "RL.GCRA": lambda rl: [rl.gcra("g", 5, 1, "1s", cost=2, dryrun=True, block="1s", shadow=True),
                           rl.gcra("g", 5, 1, "1s", at_most=2)],
    "RL.TOKENBUCKET": lambda rl: [rl.token_bucket("t", 5, 1, "1s", interval=True, cost=2, dryrun=True, block="1s",
                                                  shadow=True), rl.check(TokenBucket(5, 1, "1s"), "t2", at_most=2)],
    "RL.LEAKYBUCKET": lambda rl: [rl.leaky_bucket("l", 5, 1, "1s", cost=2, dryrun=True, block="1s", shadow=True),
                                  rl.check(LeakyBucket(5, 1, "1s"), "l", at_most=2)],
    "RL.FIXEDWINDOW": lambda rl: [rl.fixed_window("f", 5, "1s", cost=2, dryrun=True, block="1s", shadow=True),
                                  rl.check(FixedWindow(5, "1s"), "f", at_most=2)],
    "RL.SLIDINGWINDOW": lambda rl: [rl.sliding_window("s", 5, "1s", cost=2, dryrun=True, block="1s", shadow=True),
                                    rl.check(SlidingWindow(5, "1s"), "s", at_most=2)],
    "RL.SLIDINGLOG": lambda rl: [rl.sliding_log("o", 5, "1s", cost=2, dryrun=True, block="1s", shadow=True),
                                 rl.check(SlidingLog(5, "1s"), "o", at_most=2)],
    "RL.WARMUP": lambda rl: [rl.warmup("w", 10, "1s", "10s", cold_factor=4, cost=2, dryrun=True, block="1s",
                                       shadow=True), rl.check(Warmup(10, "1s", "10s"), "w", at_most=2)],
    "RL.POLICY.SET": lambda rl: rl.policy_set("p", GCRA(5, 1, "1s"), Rule("FIXEDWINDOW", ("9", "1m"), shadow=True)),
    "RL.POLICY.GET": lambda rl: rl.policy_get("p"),
    "RL.LIMIT": lambda rl: [rl.limit("k", "p", cost=2, dryrun=True, block="1s", shadow=True),
                            rl.check(Policy("p"), "k", at_most=2)],
    "RL.POLICY.LIST": lambda rl: rl.policy_list(),
    "RL.CONCURRENCY.ACQUIRE": lambda rl: [rl.acquire("c", 2, "1s", token="t1", dryrun=True, shadow=True),
                                          rl.acquire("c", 2, "1s", token="t1"),
                                          rl.check(Concurrency(2, "1s"), "c", shadow=True),
                                          rl.acquire("ca", 4, "1s", token="t2", adaptive="aimd", min=1, max=10),
                                          rl.check(Concurrency(4, "1s", adaptive="vegas", max=8), "cv"),
                                          rl.check(Concurrency(4, "1s", adaptive="gradient2", min=2), "cg")],
    "RL.CONCURRENCY.RELEASE": lambda rl: rl.release("c", "t1") and rl.release("ca", "t2", rtt=0.0025, dropped=True),
    "RL.REFUND": lambda rl: rl.refund("g", 1, dryrun=True),
    "RL.COUNTER": lambda rl: [rl.counter("n", "1s", 2, xx=True), rl.counter("n", "1s")],
    "RL.POLICY.DEL": lambda rl: rl.policy_del("p"),
}


def test_the_package_sends_every_option_of_its_table(server: Server) -> None:
    assert sorted(CALLS) == sorted(COMMANDS)
    recording = Recording(server.client())
    rl = RateLimiter(recording)
    answers = {name: call(rl) for name, call in CALLS.items()}
    assert answers["RL.POLICY.GET"] == [Rule("GCRA", ("5", "1", "1s")), Rule("FIXEDWINDOW", ("9", "1m"), shadow=True)]
    assert answers["RL.POLICY.LIST"] == ["p"]
    assert (answers["RL.CONCURRENCY.RELEASE"], answers["RL.POLICY.DEL"]) == (True, True)
    sent: dict[str, set[str]] = {}
    for words in recording.sent:
        sent.setdefault(words[0].upper(), set()).update(w.upper() for w in words[2:])
    for name, counterpart in COMMANDS.items():
        assert counterpart.options <= sent[name], (name, counterpart.options - sent[name])


def test_the_asyncio_twin_has_every_method() -> None:
    def methods(cls: type) -> dict[str, list[str]]:
        return {
            name: list(inspect.signature(member).parameters)
            for name, member in vars(cls).items() if callable(member) and not name.startswith("_")
        }

    assert methods(AsyncRateLimiter) == methods(RateLimiter)
    assert all(inspect.iscoroutinefunction(m) for n, m in vars(AsyncRateLimiter).items()
               if callable(m) and not n.startswith("_"))
