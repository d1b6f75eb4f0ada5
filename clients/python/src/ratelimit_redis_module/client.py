"""The function API: one method per command, on a synchronous redis-py client (standalone or
:class:`~redis.cluster.RedisCluster`); its asyncio twin, ``AsyncRateLimiter``, is in
``aio/client.py``, on what this module has for both: the arguments of each command, the choice
of backend (``_Backend``) and the tables of what the package covers.

The key is always the commands' first argument, so a cluster client routes each call to the
node that owns the key's slot. Replies are parsed alike from RESP2 (arrays) and RESP3 (maps).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from datetime import timedelta
from typing import Any, Callable, NamedTuple, TypedDict, Union, Unpack

import redis
import redis.cluster
import redis.sentinel
from redis.backoff import NoBackoff
from redis.retry import Retry

from .limit_types import (
    rule_words,
    GCRA,
    Concurrency,
    Duration,
    FixedWindow,
    LeakyBucket,
    Limit,
    Policy,
    Rule,
    SlidingLog,
    SlidingWindow,
    TokenBucket,
    Warmup,
    _arg,
    parse_rules,
)
from .budget import BudgetStats, LocalBudgets
from .reply import Count, Decision, _text, parse_count, parse_decision
from ._script_acl import PROBE, PROBE_SHA, probed, refused_in_script, script_commands
from ._setup import SETUP_TIMEOUT_S, SyncSetup
from .scripts import (
    BACKENDS, SCRIPTS, ModuleRequired, evalsha_words, lua_missing, missing_module, module_required, no_lua, rule_keys_wanted,
    script_call, script_source,
)

#: The redis-py clients :class:`RateLimiter` takes (``aio/client.py``'s ``AsyncClient``: the
#: asyncio twin's).
SyncClient = Union[redis.Redis, redis.cluster.RedisCluster]

logger = logging.getLogger("ratelimit_redis_module")

__all__ = [
    "RateLimiter",
    "CheckOptions",
    "client_from_url",
    "client_from_sentinel",
    "NotDurable",
    "ModuleRequired",
    "BACKENDS",
    "COMMANDS",
    "LEFT_OUT",
    "ADMISSION_OPTIONS",
    "Counterpart",
    "Rtt",
    "rtt_us",
]

# What client_from_url and its asyncio twin (aio/client.py) set, and why: a limiter sits on the
# request path, where a request must not wait for Redis longer than its timeout. redis-py's own
# default retries a failed command 10 times with exponential back-off (10 ms to 1 s, jittered):
# while Redis refuses connections, a check then lasts until the guard's timeout (the asyncio
# guard: every request pays its 50 ms) or for seconds (the sync guard, whose only bound is each
# attempt's socket timeout), and when Redis is back the first request still waits out a
# back-off. With no retry at all, the first request after a restart fails on its pooled
# connection, which the old server closed. One retry, at once, on a connection error only: a
# refused connection fails in well under a millisecond on the same host, a stale connection is
# replaced at once, and a timeout is not paid twice.


def client_from_url(
    url: str = "redis://127.0.0.1:6379", *, timeout: float = 0.05, cluster: bool = False, **options: Any
) -> redis.Redis | redis.cluster.RedisCluster:
    """A synchronous redis-py client set for a limiter on the request path (for
    :class:`RateLimiter` and :class:`~ratelimit_redis_module.Guard`): ``timeout`` seconds
    to connect and to answer (default 0.05), and one retry, at once, on a connection error
    only, where redis-py's default retries 10 times with back-off (see the manual's Clients
    page: a check then lasts seconds while Redis refuses connections). So a check fails fast
    while Redis is down (fail open or closed) and succeeds as soon as it is back. ``cluster``
    makes a :class:`redis.cluster.RedisCluster`; ``options`` go to redis-py as they are and
    override these settings."""
    settings: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "retry": Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)),
        **options,
    }
    if cluster:
        return redis.cluster.RedisCluster.from_url(url, **settings)
    return redis.Redis.from_url(url, **settings)


def _settings(timeout: float, retry: Any, options: dict[str, Any]) -> dict[str, Any]:
    return {"socket_timeout": timeout, "socket_connect_timeout": timeout, "retry": retry, **options}


def client_from_sentinel(
    sentinels: list[tuple[str, int]], service: str, *, timeout: float = 0.05, **options: Any
) -> redis.Redis:
    """A synchronous client of the primary that the Sentinels at ``sentinels`` name for
    ``service``, set as :func:`client_from_url` sets one: after a failover it asks them again
    and follows the new primary (a request in between fails, open or closed)."""
    settings = _settings(timeout, Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)), options)
    # redis-py leaves its Sentinel classes unannotated.
    sentinel = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call]
        sentinels, socket_timeout=timeout, socket_connect_timeout=timeout
    )
    primary: redis.Redis = sentinel.master_for(service, **settings)  # type: ignore[no-untyped-call]
    return primary


class NotDurable(redis.RedisError):
    """An admission that fewer replicas than ``durable`` acknowledged in time (``WAIT``): it
    may be lost if the primary fails now, so it is not taken as admitted; the guards fail it
    open or closed like any Redis failure."""


def _checked_durable(decision: Decision, acked: Any, durable: int, timeout_ms: int) -> Decision:
    if durable and decision.allowed and not decision.shadow_denied and int(acked) < durable:
        raise NotDurable(
            f"admitted, but acknowledged by {int(acked)} of the {durable} replicas asked for within "
            f"{timeout_ms} ms (WAIT): not taken as admitted"
        )
    return decision


class CheckOptions(TypedDict, total=False):
    """The options of a check, as :meth:`RateLimiter.check` takes them and the one-algorithm
    methods (``gcra``, ``token_bucket``... ``limit``) pass on: a type checker checks their names
    and types (``**options: Unpack[CheckOptions]``)."""

    #: Units the request takes (``COST``; 0 to 10^12).
    cost: int
    #: As many units as the key allows now, up to this (``ATMOST``; the decision's ``granted``).
    at_most: int | None
    #: Decide without counting (``DRYRUN``).
    dryrun: bool
    #: A refusal locks the key for this long (``BLOCK``).
    block: Duration | None
    #: Never refuse; a would-be refusal says so in ``shadow_denied`` (``SHADOW``).
    shadow: bool
    #: Replicas that must have the admission (``WAIT``), and how long to wait for them, in ms.
    durable: int
    durable_timeout_ms: int


class Counterpart(NamedTuple):
    """What the package has for one of the module's commands."""

    #: The package's names for it: methods (of :class:`RateLimiter` and its asyncio twin)
    #: and limit classes.
    api: str
    #: The option words (COMMAND DOCS's tokens) the package can send with it.
    options: frozenset[str]


#: The options every admission command takes after its parameters.
ADMISSION_OPTIONS = frozenset({"COST", "ATMOST", "DRYRUN", "BLOCK", "SHADOW"})

#: The module's commands the package covers, each with its counterpart. The parity test
#: (tests/test_parity.py) reads COMMAND DOCS from a real server with the module and fails
#: when a command or an option has no counterpart here (or here and not in the package), so
#: that the next one cannot be forgotten.
COMMANDS: dict[str, Counterpart] = {
    "RL.GCRA": Counterpart("gcra, GCRA", ADMISSION_OPTIONS),
    "RL.TOKENBUCKET": Counterpart("token_bucket, TokenBucket (interval: INTERVAL)", ADMISSION_OPTIONS | {"INTERVAL"}),
    "RL.LEAKYBUCKET": Counterpart("leaky_bucket, LeakyBucket", ADMISSION_OPTIONS),
    "RL.FIXEDWINDOW": Counterpart("fixed_window, FixedWindow", ADMISSION_OPTIONS),
    "RL.SLIDINGWINDOW": Counterpart("sliding_window, SlidingWindow", ADMISSION_OPTIONS),
    "RL.SLIDINGLOG": Counterpart("sliding_log, SlidingLog", ADMISSION_OPTIONS),
    "RL.WARMUP": Counterpart("warmup, Warmup (cold_factor: COLDFACTOR)", ADMISSION_OPTIONS | {"COLDFACTOR"}),
    "RL.LIMIT": Counterpart("limit, Policy", ADMISSION_OPTIONS),
    "RL.CONCURRENCY.ACQUIRE": Counterpart(
        "acquire (token: ID; adaptive: ADAPTIVE AIMD|VEGAS|GRADIENT2, min: MIN, max: MAX), Concurrency",
        frozenset({"ID", "DRYRUN", "SHADOW", "ADAPTIVE", "AIMD", "VEGAS", "GRADIENT2", "MIN", "MAX"}),
    ),
    "RL.CONCURRENCY.RELEASE": Counterpart("release (rtt: RTT <n>us, dropped: DROPPED)", frozenset({"RTT", "DROPPED"})),
    "RL.REFUND": Counterpart("refund", frozenset({"DRYRUN"})),
    "RL.COUNTER": Counterpart("counter (by: BY n, xx: XX), Count", frozenset({"BY", "XX"})),
    "RL.POLICY.SET": Counterpart("policy_set (a Rule's shadow: SHADOW)", frozenset({"SHADOW"})),
    "RL.POLICY.GET": Counterpart("policy_get, parse_rules", frozenset()),
    "RL.POLICY.DEL": Counterpart("policy_del", frozenset()),
    "RL.POLICY.LIST": Counterpart("policy_list", frozenset()),
}

#: The module's commands the package leaves out, each with the reason.
LEFT_OUT: dict[str, str] = {
    "CL.THROTTLE": "redis-cell's command and reply, for redis-cell's clients; RL.GCRA is the same limit",
    "RL.INSPECT": "an operator's view of a key's state (redis-cli, or the client's execute_command)",
    "RL.TOP": "an operator's view of the keys denied most (redis-cli, or the client's execute_command)",
    "RL.DEBUG.CLOCK": "for tests only, on a server started with debug-clock yes",
    "RL.DEBUG.PANIC": "for tests only, on a server started with debug-clock yes",
    "RL.DEBUG.CLUSTERMSG": "for tests only, on a server started with debug-clock yes",
    "RL.DEBUG.POLICYVERSION": "for tests only, on a server started with debug-clock yes",
    "RL.POLICY.FORCE": "an operator's repair on Redis Cluster (docs/cluster.md), not the application's",
    "RL.REPLAY": "internal: accepted only from replication or the AOF",
    "RL.LOADSTATE": "internal: accepted only from replication or the AOF",
    "RL.POLICY.SYNC": "internal: accepted only from replication or the AOF",
}


def _options(cost: int, at_most: int | None, dryrun: bool, block: Duration | None, shadow: bool) -> list[str]:
    if at_most is None:
        words = [] if cost == 1 else ["COST", str(cost)]
    elif cost != 1:
        raise ValueError("give cost or at_most, not both: COST takes exactly cost units, ATMOST as many as allowed")
    else:
        words = ["ATMOST", str(at_most)]
    if dryrun:
        words.append("DRYRUN")
    if block is not None:
        words += ["BLOCK", _arg(block)]
    if shadow:
        words.append("SHADOW")
    return words


def _check_args(
    limit: Limit, key: str | bytes, cost: int, at_most: int | None, dryrun: bool, block: Duration | None,
    shadow: bool,
) -> list[Any]:
    if isinstance(limit, Concurrency):
        if cost != 1 or at_most is not None or block is not None:
            raise ValueError("a concurrency limit takes one lease per request: no cost, no at_most, no block")
        return _acquire_args(key, limit, None, dryrun, shadow)
    return [limit.command, key, *limit.args(), *_options(cost, at_most, dryrun, block, shadow)]


def _budgeted(limit: Limit, cost: int, at_most: int | None, dryrun: bool, shadow: bool) -> bool:
    """The call is answered from the limit's local budget."""
    k = getattr(limit, "local_budget", None)
    return k is not None and at_most is None and not dryrun and not shadow and 1 <= cost <= k


def _acquire_args(key: str | bytes, limit: Concurrency, token: str | None, dryrun: bool, shadow: bool) -> list[Any]:
    words: list[Any] = ["RL.CONCURRENCY.ACQUIRE", key, *limit.args()]
    if token is not None:
        words += ["ID", token]
    if dryrun:
        words.append("DRYRUN")
    if shadow:
        words.append("SHADOW")
    return words


#: How long a request's work took, as :meth:`RateLimiter.release` takes it: seconds (a float,
#: or an int), as the difference of two ``time.monotonic()`` or ``time.perf_counter()``
#: readings gives them, or a :class:`datetime.timedelta`. Not a
#: :data:`~ratelimit_redis_module.Duration`: a bare number is seconds here, not milliseconds,
#: since it is a measurement, not a limit's parameter; and it keeps microseconds.
Rtt = Union[float, timedelta]


def rtt_us(rtt: Rtt) -> int:
    """``rtt`` in whole microseconds, as ``RTT <n>us`` sends it: rounded to the nearest, and at
    least 1 (the module takes 1 us to 10 years; a measurement of 0 is work too short to see).

    Raises:
        TypeError: not a number of seconds nor a timedelta.
        ValueError: negative, NaN or infinite.
    """
    if isinstance(rtt, timedelta):
        us = rtt // timedelta(microseconds=1)
    elif isinstance(rtt, (int, float)) and not isinstance(rtt, bool):
        if not math.isfinite(rtt):
            raise ValueError(f"invalid rtt {rtt!r}: expected a finite number of seconds")
        us = round(rtt * 1_000_000)
    else:
        raise TypeError(f"invalid rtt {rtt!r}: expected seconds (a float) or a timedelta")
    if us < 0:
        raise ValueError(f"invalid rtt {rtt!r}: expected 0 or more")
    return max(1, us)


#: The most ``RL.COUNTER`` adds or takes in one call (``BY``): the module's largest count.
MAX_BY = 10**12


def _counter_args(key: str | bytes, window: Duration, by: int, xx: bool) -> list[Any]:
    """``RL.COUNTER key window [BY n] [XX]``; ``by`` an int of at most 10^12 either way
    (ValueError otherwise: nothing is sent)."""
    if isinstance(by, bool) or not isinstance(by, int) or not -MAX_BY <= by <= MAX_BY:
        raise ValueError(f"invalid by {by!r}: expected an int from -{MAX_BY} to {MAX_BY}")
    return ["RL.COUNTER", key, _arg(window), *(["BY", str(by)] if by != 1 else []), *(["XX"] if xx else [])]


def _release_args(key: str | bytes, token: str, rtt: Rtt | None, dropped: bool) -> list[Any]:
    words: list[Any] = ["RL.CONCURRENCY.RELEASE", key, token]
    if rtt is not None:
        words += ["RTT", f"{rtt_us(rtt)}us"]
    if dropped:
        words.append("DROPPED")
    return words


def _parse_rules_reply(reply: Any) -> list[Rule] | None:
    if reply is None:
        return None
    if not isinstance(reply, (list, tuple)):
        raise ValueError(f"unexpected reply to RL.POLICY.GET: {reply!r}")
    return parse_rules([_text(w) for w in reply])


def _any_of(reply: Any) -> bool:
    # A cluster client answers a command sent to several nodes with a reply per node.
    return any(bool(r) for r in reply.values()) if isinstance(reply, dict) else bool(reply)


def _names(reply: Any) -> list[str]:
    if not isinstance(reply, (list, tuple)):
        raise ValueError(f"unexpected reply to RL.POLICY.LIST: {reply!r}")
    return [_text(name) for name in reply]


def _is_cluster(client: Any) -> bool:
    # Both cluster clients (redis.cluster and redis.asyncio.cluster) expose get_primaries.
    return hasattr(client, "get_primaries") and hasattr(client, "nodes_manager")


class _ModuleCommands:
    """Wraps a redis-py cluster client's command policy resolver (redis-py 7 and later).

    That resolver refuses a command name with two dots, such as ``RL.POLICY.SET`` or
    ``RL.CONCURRENCY.ACQUIRE`` ("Wrong command or module name"). For the module's commands
    this answers None (no policy), so the client routes them by their key, or to the nodes
    given, as it does any command it has no policy for; other commands go to the resolver.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def resolve(self, command_name: str) -> Any:
        return None if command_name.lower().startswith("rl.") else self.inner.resolve(command_name)

    def with_fallback(self, fallback: Any) -> Any:
        return type(self)(self.inner.with_fallback(fallback))


def _prepare(client: Any, commands: type[_ModuleCommands] = _ModuleCommands) -> Any:
    """Let a cluster client route the module's commands (see :class:`_ModuleCommands`;
    ``commands``: its asyncio twin for an asyncio client, ``aio/client.py``'s)."""
    inner = getattr(client, "_policy_resolver", None)
    if _is_cluster(client) and inner is not None and not isinstance(inner, _ModuleCommands):
        client._policy_resolver = commands(inner)
    return client


def _keyless(client: Any) -> dict[str, Any]:
    """Where a command without a key goes: any one node of a cluster (its default node)."""
    return {"target_nodes": client.get_default_node()} if _is_cluster(client) else {}


#: The warning ``backend="auto"`` logs when the user may not run ``COMMAND INFO``.
_UNASKED = (
    "ratelimit: cannot ask the server whether it has the module (NOPERM on COMMAND INFO): "
    "using the script backend; set backend='module' or 'script' to say which"
)
#: Its warning when the server has no Lua either: the module is all that can run there.
_UNASKED_NO_LUA = (
    "ratelimit: cannot ask the server whether it has the module (NOPERM on COMMAND INFO), and it has no Lua "
    "scripting engine for the script backend: using the module; set backend='module' to say so"
)


def _no_permission(error: BaseException) -> bool:
    """A "no permission" error: the user's ACL refuses the command (``NOPERM``)."""
    if isinstance(error, redis.exceptions.NoPermissionError):
        return True
    message = str(error)
    return message.startswith("NOPERM") or "no permission" in message.lower()


def _has_module(reply: Any) -> bool:
    """``COMMAND INFO RL.GCRA``'s reply: a nil entry when the server has no module."""
    if isinstance(reply, dict):  # a cluster client's reply per node
        reply = next(iter(reply.values()), None)
    return isinstance(reply, (list, tuple)) and len(reply) > 0 and reply[0] is not None


class _Backend:
    """The choice of backend, shared by :class:`RateLimiter` and its asyncio twin
    (``AsyncRateLimiter``, in ``aio/client.py``): ``"module"`` (the ``RL.*`` commands) or
    ``"script"`` (the same limits as server-side Lua scripts, where the module cannot be
    loaded). ``"auto"`` asks the server once (``COMMAND INFO RL.GCRA``: nothing means no
    module), in the limiter's setup (:mod:`._setup`), or else before the first command; it takes
    the scripts only once the server has loaded the first (the setup's first ``SCRIPT LOAD``,
    made before choosing): a server without Lua (Valkey 9.1 with its ``lua`` module unloaded)
    refuses it, and then ``"auto"`` takes no backend and each call is
    :func:`~.scripts.no_lua`'s error, asked again (a server given the module or Lua later is
    used)."""

    client: Any
    stats: Any
    #: The setup has failed since it last succeeded (a warning for the first failure only).
    _setup_failing: bool = False
    #: The scripts a setup loads on the script backend: all of them (a limiter may use any; a
    #: script the server has already is not compiled again).
    SETUP_SCRIPTS = tuple(dict.fromkeys([*SCRIPTS.values(), "policy", "policyrefund"]))

    def _set_backend(self, backend: str) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"invalid backend {backend!r}: expected 'auto', 'module' or 'script'")
        #: The ``backend=`` given: ``"auto"``, ``"module"`` or ``"script"``.
        self.backend_option = backend
        self._chosen: str | None = None
        self._choosing = threading.Lock()
        # Tests only: the scripts' test clock (``NOW <µs>``), which the public API never sends.
        self._script_now: Callable[[], int] | None = None
        # The policies (name -> rules) this limiter has set on the module (see _policy_set).
        self._policies_set: dict[Any, tuple[str, ...]] = {}
        # On the scripts, per policy's rules: the most rule keys a key was found to hold (an
        # earlier, longer policy's: RULEKEYS), named by every later call of those rules.
        self._rule_keys: dict[tuple[str, ...], int] = {}
        # "auto"'s first SCRIPT LOAD, made before it takes the scripts (_chose_scripts): True when
        # it loaded, or the server's refusal (not sent again by the setup); None once the setup
        # has read it, or when none was made.
        self._first_load: bool | BaseException | None = None
        # What a server without Lua answered that first SCRIPT LOAD, when "auto" took the module
        # for want of Lua without asking it (NOPERM on COMMAND INFO): a call that then finds no
        # module is the script backend's error.
        self._no_lua_said: str | None = None
        # The setup has logged the error of a server where no backend can run (once).
        self._said_no_backend = False
        if backend != "auto":
            self._chose(backend)

    @property
    def backend(self) -> str | None:
        """``"module"`` or ``"script"``; None while ``"auto"`` has not asked the server yet (its
        setup, in the background from the limiter's creation, or else the first command).
        ``stats.backend`` says the same."""
        return self._chosen

    def _setup_failed(self, error: BaseException, retried: bool) -> None:
        """A step of the setup failed (see :mod:`._setup`): counted, and logged (a warning for
        the first failure of a run of them, at debug level after)."""
        self.stats.setup_failures += 1
        if isinstance(error, ModuleRequired):
            # The server cannot run the limits (no Lua, no module): the application's to fix,
            # and each call raises it; said once, as a warning, in its own words.
            if not self._said_no_backend:
                self._said_no_backend = True
                logger.warning("ratelimit: %s", error)
            return
        what = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        if not retried:
            # The requests do the step themselves, and report its failure as any other: once here.
            logger.info(
                "ratelimit: the setup (the backend, the scripts) left a step to the requests (%s)", what,
            )
            return
        level = logging.DEBUG if self._setup_failing else logging.WARNING
        self._setup_failing = True
        logger.log(
            level, "ratelimit: the setup (the backend, the scripts) failed (%s); it is tried again in the "
            "background, and until it succeeds each request asks what it needs itself, within its timeout", what,
        )

    def _setup_succeeded(self) -> None:
        if self._setup_failing:
            self._setup_failing = False
            logger.info("ratelimit: the setup (the backend, the scripts) succeeded")

    def _everywhere(self) -> dict[str, Any]:
        """Where a script is loaded by the setup: every primary of a cluster (a script is per node)."""
        return {"target_nodes": self.client.get_primaries()} if _is_cluster(self.client) else {}

    def _chose(self, backend: str, unasked: bool = False) -> str:
        """``unasked``: ``"auto"`` could not ask the server (NOPERM on ``COMMAND INFO``)."""
        with self._choosing:  # threads that asked together: one decision, logged once
            if self._chosen is not None:
                return self._chosen
            self._chosen = backend
            self.stats.backend = backend
            if unasked:
                logger.warning(_UNASKED if backend == "script" else _UNASKED_NO_LUA)
            elif backend == "script":
                logger.info(
                    "ratelimit: the server has no ratelimit module; using the script backend"
                    if self.backend_option == "auto" else "ratelimit: using the script backend (backend='script')"
                )
            else:
                logger.info("ratelimit: using the module")
        return self._chosen

    def _chose_scripts(self, refused: BaseException | None, unasked: bool) -> None:
        """``"auto"`` on a server without the module (or that it could not ask, ``unasked``),
        after its first ``SCRIPT LOAD`` (``refused``: the server's error to it, or None): the
        scripts, unless the server has no Lua to run them; then, ``unasked``, the module, which
        is all that can run there, else :func:`~.scripts.no_lua`'s error, and no backend taken.
        Any other refusal (NOPERM on ``SCRIPT LOAD``: scripts an administrator loaded may still
        run) takes the scripts, as before: the calls report what fails."""
        if refused is None or not lua_missing(refused):
            self._first_load = True if refused is None else refused
            self._chose("script", unasked=unasked)
        elif unasked:
            self._no_lua_said = str(refused)
            self._chose("module", unasked=True)
        else:
            raise no_lua(str(refused), self.backend_option) from refused

    def _setup_scripts(self) -> tuple[str, ...]:
        """The scripts the setup loads: all of them, but the first when ``"auto"`` has just
        loaded it to choose (:meth:`_chose_scripts`); the server's refusal of that load raised
        again rather than sent twice."""
        first, self._first_load = self._first_load, None
        if isinstance(first, BaseException):
            raise first
        return self.SETUP_SCRIPTS[1:] if first else self.SETUP_SCRIPTS

    def _scripting(self, error: redis.ResponseError) -> BaseException:
        """The error to raise for the server's ``error`` to a ``SCRIPT LOAD``: the script
        backend's on a server without Lua, else ``error``."""
        return no_lua(str(error), self.backend_option) if lua_missing(error) else error

    def _wire(self, args: list[Any], rules: tuple[str, ...] = ()) -> tuple[list[Any], str | None]:
        """The words to send for the module's command ``args`` on the chosen backend, and the
        script's name (None: the module's command as it is). ``rules``: a policy's rules in the
        application's configuration (RL.LIMIT and RL.REFUND on its key)."""
        if self._chosen == "module":
            return args, None
        name, keys, rest = script_call(args, rules, self._rule_keys.get(rules, 0))
        return evalsha_words(name, keys, rest, self._script_now() if self._script_now else None), name

    def _rewire(self, error: redis.ResponseError, words: list[Any], args: list[Any], rules: tuple[str, ...],
                name: str | None) -> list[Any]:
        """After an error of ``words``: the words to send again when it is the policy scripts'
        ``RULEKEYS n`` (a key of an earlier, longer policy: every one of its rule keys named, and
        remembered for these rules), else the error raised."""
        wanted = rule_keys_wanted(error, int(words[2])) if rules and name is not None else None
        if wanted is None:
            raise _module_error(error, name, self._no_lua_said) from error
        with self._choosing:
            self._rule_keys[rules] = max(wanted, self._rule_keys.get(rules, 0))
        return self._wire(args, rules)[0]

    def _policy_set(self, args: list[Any], rules: tuple[str, ...]) -> list[Any] | None:
        """On the module, a policy whose rules the application gives is set on the server
        (``RL.POLICY.SET``) before this limiter's first check of it: the words to send first
        (then :meth:`_policy_was_set`), or None. Until one succeeds, each check sends it."""
        if self._chosen != "module" or not rules or args[0] != "RL.LIMIT":
            return None
        if self._policies_set.get(args[2]) == rules:
            return None
        return ["RL.POLICY.SET", args[2], *rules]

    def _policy_was_set(self, words: list[Any]) -> None:
        with self._choosing:
            self._policies_set[words[1]] = tuple(words[2:])

    def _load_target(self, key: Any) -> dict[str, Any]:
        return {"target_nodes": self.client.get_node_from_key(key)} if _is_cluster(self.client) else {}

    def _refused(self, what: str) -> None:
        if self._chosen == "script":
            raise module_required(what)


def _module_error(error: redis.ResponseError, name: str | None, no_lua_said: str | None) -> BaseException:
    """The error to raise for the server's ``error`` to the module's command (``name`` None):
    a server without the module says so (:func:`~.scripts.missing_module`), or, where ``"auto"``
    took the module for want of Lua without asking (``no_lua_said``: what the server answered
    its ``SCRIPT LOAD``), the script backend's error (no backend can run there)."""
    missing = missing_module(error) if name is None else None
    if missing is not None and no_lua_said is not None:
        return no_lua(no_lua_said, "auto")
    return missing if missing is not None else error


class RateLimiter(_Backend):
    """The module's commands on a synchronous redis-py client.

    Args:
        client: a :class:`redis.Redis` or :class:`redis.cluster.RedisCluster` (any protocol,
            with or without ``decode_responses``). Its ``socket_timeout`` bounds each call.
            A cluster client's command policy resolver is wrapped so that it routes the
            module's commands by their key (redis-py 8's refuses names with two dots).

    Example::

        limiter = RateLimiter(redis.Redis())
        d = limiter.gcra("rl:user:42", burst=5, rate=10, period="1m")
        if not d.allowed:
            ...  # refuse; retry after d.retry_after_ms

    ``backend``: ``"auto"`` (the default: the module where the server has it, else the script
    backend, decided once and logged), ``"module"`` or ``"script"`` (the same limits as
    server-side Lua scripts, ``EVALSHA``; the server's ``TIME``; one key per call, so
    cluster-safe). On the script backend, policies and adaptive concurrency limits raise
    :class:`ModuleRequired` before anything is sent (``shadow`` and concurrency leases work there
    as on the module); ``backend="module"`` on a server without the module raises it at the first
    command; and so does every call of the script backend on a server without Lua (Valkey 9.1 with
    its ``lua`` module unloaded), where ``"auto"`` takes the module if it is loaded, no backend if
    not (docs/managed.md, "A server without Lua").

    The limiter's setup starts when it is created, in a thread: ``"auto"`` asks the server
    which backend to use, and on the script backend every script is loaded (``SCRIPT LOAD``;
    on a cluster, on each primary), so that no call pays for them. A call made while the setup
    runs waits for it; a setup that fails (the server down) is tried again in the background
    (logged, counted in ``stats.setup_failures``), and calls meanwhile ask what they need
    themselves, as they would without it. ``setup_timeout`` (seconds, default 1): how long
    :meth:`ready` (the guards, before each check's own timeout) waits for an attempt.
    """

    def __init__(
        self, client: SyncClient, *, clock: Callable[[], float] = time.monotonic,
        stats: BudgetStats | None = None, backend: str = "auto", setup_timeout: float = SETUP_TIMEOUT_S,
    ) -> None:
        self.client = _prepare(client)
        #: What the local budgets did (:class:`~ratelimit_redis_module.BudgetStats`, or the
        #: guard's :class:`~ratelimit_redis_module.Stats`), ``backend`` and ``setup_failures``.
        self.stats = stats if stats is not None else BudgetStats()
        self._set_backend(backend)
        #: The local budgets of the limits that have one (``local_budget=``); ``clock``
        #: (seconds, monotonic) times their ``hold``.
        self.budgets = LocalBudgets(lambda key, units, limit: self.refund(key, units, limit=limit), clock, self.stats)
        self._setup_failing = False
        self._setup = SyncSetup(setup_timeout, self._setup_failed, self._setup_succeeded)
        self._setup.add(self._set_up)

    def ready(self) -> bool:
        """Wait for the limiter's setup: the attempt in progress, or one made at once if the last
        one failed, for at most ``setup_timeout`` after it began; True when the setup is done.
        The guards call it before each check (outside its timeout) until it is; an application
        may call it at its start, to serve only once it is."""
        return self._setup.wait()

    def _set_up(self) -> None:
        """The setup's own step: the backend, and on the scripts every script loaded."""
        if self._ask_backend() == "script":
            for name in self._setup_scripts():
                try:
                    self.client.execute_command("SCRIPT LOAD", script_source(name), **self._everywhere())
                except redis.ResponseError as error:
                    raise self._scripting(error) from error

    def check(
        self, limit: Limit, key: str | bytes, *, cost: int = 1, at_most: int | None = None, dryrun: bool = False,
        block: Duration | None = None, shadow: bool = False, durable: int = 0, durable_timeout_ms: int = 100,
    ) -> Decision:
        """Run ``limit``'s command on ``key`` with its options (see :meth:`_ask`); a limit with
        a ``local_budget`` is answered from its key's budget when it holds ``cost`` units (no
        round trip; the decision's ``local``), else after one refill (``ATMOST``) that the
        requests of this limiter waiting for the same key share. ``at_most``, ``dryrun``,
        ``shadow`` and a cost above the budget (or 0) go to the server as they are;
        ``block`` and ``durable`` go with the refill."""
        if _budgeted(limit, cost, at_most, dryrun, shadow):
            return self.budgets.check(
                limit, key, cost,
                lambda units: self._ask(
                    limit, key, at_most=units, block=block, durable=durable, durable_timeout_ms=durable_timeout_ms
                ),
            )
        return self._ask(
            limit, key, cost=cost, at_most=at_most, dryrun=dryrun, block=block, shadow=shadow, durable=durable,
            durable_timeout_ms=durable_timeout_ms,
        )

    def sweep(self) -> int:
        """Give back now the local budgets' units held past ``hold / 2`` (a background
        thread does it by itself); returns the units the module gave back."""
        return self.budgets.sweep()

    def flush(self) -> int:
        """Give back every unit the local budgets hold (``RL.REFUND``, one per key); returns
        the units the module gave back."""
        return self.budgets.flush()

    def close(self) -> int:
        """At shutdown: :meth:`flush`, and stop the local budgets' sweeper thread and the setup's
        attempts. The redis-py client stays open (it is the application's)."""
        self._setup.close()
        return self.budgets.close()

    def _ask(
        self, limit: Limit, key: str | bytes, *, cost: int = 1, at_most: int | None = None, dryrun: bool = False,
        block: Duration | None = None, shadow: bool = False, durable: int = 0, durable_timeout_ms: int = 100,
    ) -> Decision:
        """Run ``limit``'s command on ``key`` with its options: ``COST cost`` (units the
        request takes), or ``ATMOST at_most`` (as many as the key allows now, up to
        ``at_most``: the decision's ``granted``), ``DRYRUN``, ``BLOCK block`` and ``SHADOW``
        (a would-be denial answered allowed, the decision's ``shadow_denied`` saying so).

        ``durable``: also wait for that many replicas to have the write (``WAIT durable
        durable_timeout_ms``, pipelined after the command in the same round trip; on a
        cluster, sent to the key's node after it), so that a failover cannot lose it; an
        admission that fewer acknowledged in time raises :class:`NotDurable` (docs/cluster.md,
        Failover)."""
        args = _check_args(limit, key, cost, at_most, dryrun, block, shadow)
        rules = getattr(limit, "rule_words", ())
        if not durable or dryrun:
            reply = self._send(args, rules)
            return parse_decision(reply, limit.extra, granted=at_most is not None, shadow=shadow)
        if _is_cluster(self.client):
            reply = self._send(args, rules)
            decision = parse_decision(reply, limit.extra, granted=at_most is not None, shadow=shadow)
            if not decision.allowed:
                return decision
            node = self.client.get_node_from_key(key)
            acked = self.client.execute_command("WAIT", durable, durable_timeout_ms, target_nodes=node)
        else:
            words, name = self._words(args, rules)
            loaded = False
            while True:
                pipe = self.client.pipeline(transaction=False)
                pipe.execute_command(*words)
                pipe.execute_command("WAIT", durable, durable_timeout_ms)
                try:
                    reply, acked = pipe.execute(raise_on_error=True)
                    break
                except redis.ResponseError as error:
                    words, loaded = self._again(error, words, args, rules, name, loaded)
            decision = parse_decision(reply, limit.extra, granted=at_most is not None, shadow=shadow)
        return _checked_durable(decision, acked, durable, durable_timeout_ms)

    def _decide(self) -> str:
        """The backend, once the setup's attempt in progress (if any) has ended."""
        self._setup.wait(trigger=False)
        return self._ask_backend()

    def _ask_backend(self) -> str:
        if self._chosen is None:
            unasked = False
            try:
                reply = self.client.execute_command("COMMAND INFO", "RL.GCRA", **_keyless(self.client))
            except redis.ResponseError as error:
                if not _no_permission(error):
                    raise
                unasked = True
            else:
                if _has_module(reply):
                    self._chose("module")
            if self._chosen is None:
                self._chose_scripts(self._load_first(), unasked)
        assert self._chosen is not None
        return self._chosen

    def _load_first(self) -> redis.ResponseError | None:
        """The setup's first script loaded (where it loads them), before ``"auto"`` takes the
        scripts: the server's refusal, or None."""
        try:
            self.client.execute_command("SCRIPT LOAD", script_source(self.SETUP_SCRIPTS[0]), **self._everywhere())
        except redis.ResponseError as error:
            return error
        return None

    def _load(self, name: str, key: Any) -> None:
        try:
            self.client.execute_command("SCRIPT LOAD", script_source(name), **self._load_target(key))
        except redis.ResponseError as error:
            raise self._scripting(error) from error

    def _refusal(self, error: redis.ResponseError, name: str | None, words: list[Any]) -> None:
        """Raise the server's ``error`` to the script ``name`` (sent as ``words``) as a
        :class:`ScriptPermissionError` when it is a command of the script that the ACL refused:
        named, if the server did not, by asking it (:data:`~ratelimit_redis_module._script_acl.PROBE`
        on the call's first key). Any other error: nothing."""
        refused = refused_in_script(error, name) if name is not None else None
        if refused is None:
            return
        if not refused.commands:
            probe = ["EVALSHA", PROBE_SHA, 1, words[3], *script_commands(refused.script)]
            try:
                try:
                    probed(refused, self.client.execute_command(*probe))
                except redis.exceptions.NoScriptError:
                    self.client.execute_command("SCRIPT LOAD", PROBE, **self._load_target(words[3]))
                    probed(refused, self.client.execute_command(*probe))
            except redis.RedisError:
                pass  # not told: the error lists the script's commands
        raise refused from error

    def _send(self, args: list[Any], rules: tuple[str, ...] = ()) -> Any:
        """The module's command ``args`` on the chosen backend (a script: by its SHA, loaded
        again and retried once after ``NOSCRIPT``); ``rules``: see :meth:`_wire`."""
        words, name = self._words(args, rules)
        loaded = False
        while True:
            try:
                return self.client.execute_command(*words)
            except redis.ResponseError as error:
                words, loaded = self._again(error, words, args, rules, name, loaded)

    def _words(self, args: list[Any], rules: tuple[str, ...]) -> tuple[list[Any], str | None]:
        """:meth:`_wire` of ``args``, the backend known first (the setup's attempt in progress
        waited for) and, on the module, a policy's rules set before its first check."""
        self._decide()
        first = self._policy_set(args, rules)
        if first:
            self.client.execute_command(*first, **_keyless(self.client))
            self._policy_was_set(first)
        return self._wire(args, rules)

    def _again(self, error: redis.ResponseError, words: list[Any], args: list[Any], rules: tuple[str, ...],
               name: str | None, loaded: bool) -> tuple[list[Any], bool]:
        """After ``error`` of ``words`` (``args`` on the script ``name``; None: the module's
        command): what to send again and whether the script is loaded now. After a first
        ``NOSCRIPT``, the same words, the script loaded; after the policy scripts' ``RULEKEYS``,
        every rule key named (:meth:`_rewire`); else the error raised, a command of the script
        that the ACL refused named (:meth:`_refusal`)."""
        if isinstance(error, redis.exceptions.NoScriptError):
            if loaded or name is None:
                raise error
            self._load(name, words[3])
            return words, True
        self._refusal(error, name, words)
        return self._rewire(error, words, args, rules, name), loaded

    def _require_module(self, what: str) -> None:
        self._decide()
        self._refused(what)

    def gcra(self, key: str | bytes, burst: int, rate: int, period: Duration, **options: Unpack[CheckOptions]) -> Decision:
        """``RL.GCRA``: ``burst`` at once, then ``rate`` per ``period``."""
        return self.check(GCRA(burst, rate, period), key, **options)

    def token_bucket(
        self, key: str | bytes, capacity: int, refill_amount: int, refill_period: Duration,
        interval: bool = False, **options: Unpack[CheckOptions],
    ) -> Decision:
        """``RL.TOKENBUCKET``, refilled continuously or (``interval``) in whole batches."""
        return self.check(TokenBucket(capacity, refill_amount, refill_period, interval), key, **options)

    def leaky_bucket(
        self, key: str | bytes, capacity: int, leak_amount: int, leak_period: Duration, **options: Unpack[CheckOptions]
    ) -> Decision:
        """``RL.LEAKYBUCKET``; the decision's ``delay_ms`` is the wait before acting."""
        return self.check(LeakyBucket(capacity, leak_amount, leak_period), key, **options)

    def fixed_window(self, key: str | bytes, limit: int, window: Duration, **options: Unpack[CheckOptions]) -> Decision:
        """``RL.FIXEDWINDOW``."""
        return self.check(FixedWindow(limit, window), key, **options)

    def sliding_window(self, key: str | bytes, limit: int, window: Duration, **options: Unpack[CheckOptions]) -> Decision:
        """``RL.SLIDINGWINDOW``."""
        return self.check(SlidingWindow(limit, window), key, **options)

    def sliding_log(self, key: str | bytes, limit: int, window: Duration, **options: Unpack[CheckOptions]) -> Decision:
        """``RL.SLIDINGLOG``."""
        return self.check(SlidingLog(limit, window), key, **options)

    def warmup(
        self, key: str | bytes, rate: int, period: Duration, warmup: Duration, cold_factor: int | None = None,
        **options: Unpack[CheckOptions],
    ) -> Decision:
        """``RL.WARMUP``: ``rate`` per ``period`` once warm, slower after idle (``COLDFACTOR``
        times the spacing, falling back over ``warmup``)."""
        return self.check(Warmup(rate, period, warmup, cold_factor), key, **options)

    def limit(self, key: str | bytes, policy: str, **options: Unpack[CheckOptions]) -> Decision:
        """``RL.LIMIT``: every rule of ``policy``; the decision's ``rule`` is the binding one."""
        return self.check(Policy(policy), key, **options)

    def acquire(
        self, key: str | bytes, limit: int, lease: Duration, *, token: str | None = None, dryrun: bool = False,
        shadow: bool = False, adaptive: str | None = None, min: int | None = None, max: int | None = None,
    ) -> Decision:
        """``RL.CONCURRENCY.ACQUIRE``: one of ``limit`` leases; the decision's ``token`` names it
        (``ID token``: a lease of that name, which the same token renews). With ``shadow``, a
        would-be denial takes no lease and is answered allowed, with no token.

        ``adaptive`` (``"aimd"``, ``"vegas"``, ``"gradient2"``), ``min``, ``max``: an adaptive
        limit (``ADAPTIVE kind MIN n MAX n``), ``limit`` being where a new key starts and the
        decision's ``limit`` the current one (see
        :class:`~ratelimit_redis_module.Concurrency`, which checks them: ValueError)."""
        words = _acquire_args(key, Concurrency(limit, lease, adaptive, min, max), token, dryrun, shadow)
        return parse_decision(self._send(words), "token", shadow=shadow)

    def release(self, key: str | bytes, token: str, *, rtt: Rtt | None = None, dropped: bool = False) -> bool:
        """``RL.CONCURRENCY.RELEASE``: True when the lease was held and is now released.

        Args:
            rtt: how long the work took (``RTT <n>us``): seconds, as a float (the difference of
                two ``time.perf_counter()`` readings), or a :class:`datetime.timedelta`; sent
                in whole microseconds, at least 1 (:func:`rtt_us`). None: the module takes
                the time since the lease was taken.
            dropped: the work failed from overload (a 5xx, a timeout, a cancellation):
                ``DROPPED``, an adaptive limit backs off.

        Both move an adaptive limit; a key that is not adaptive ignores them (the script
        backend's keys are not: it checks and ignores them)."""
        return bool(self._send(_release_args(key, token, rtt, dropped)))

    def refund(self, key: str | bytes, units: int, *, dryrun: bool = False, limit: Limit | None = None) -> int:
        """``RL.REFUND``: give back up to ``units`` the key has taken; returns the units given
        back (with ``dryrun``, those it would give back, giving nothing). ``limit``: the key's
        limit, needed on the script backend for a :class:`Policy` with ``rules`` (its keys are
        the rules')."""
        return int(self._send(["RL.REFUND", key, str(units), *(["DRYRUN"] if dryrun else [])],
                              getattr(limit, "rule_words", ())))

    def counter(self, key: str | bytes, window: Duration, by: int = 1, *, xx: bool = False) -> Count:
        """``RL.COUNTER``: a fixed window kept as a plain integer string, as ``INCRBY`` and
        ``PEXPIRE`` keep it (``GET`` reads it): adds ``by`` (negative: gives back; 0: reads,
        writing nothing) and answers the count and the key's PTTL. A key created here expires
        ``window`` later (on the server's clock: the module's debug clock does not move it);
        a key without a TTL gets ``window``. ``xx``: write only if the key exists (no key:
        ``Count(0, -2)``). On the script backend, ``counter.lua``."""
        return parse_count(self._send(_counter_args(key, window, by, xx)))

    def policy_get(self, name: str) -> list[Rule] | None:
        """``RL.POLICY.GET``: the policy's rules, or None when there is no such policy (on a
        cluster, as the client's default node has it).

        Raises:
            ValueError: the reply holds a rule the package cannot read (see
                :func:`~ratelimit_redis_module.parse_rules`).
        """
        self._require_module("a policy (RL.POLICY.GET)")
        reply = self.client.execute_command("RL.POLICY.GET", name, **_keyless(self.client))
        return _parse_rules_reply(reply)

    def policy_set(self, name: str, *rules: Limit | Rule) -> None:
        """``RL.POLICY.SET`` with rules given as limits (``GCRA(10, 10, "1s")``...).

        Policies belong to each server, so on a cluster client this sets it on every primary.
        """
        words = ["RL.POLICY.SET", name, *rule_words(rules)]
        self._require_module("a policy (RL.POLICY.SET)")
        if _is_cluster(self.client):
            self.client.execute_command(*words, target_nodes=self.client.get_primaries())
        else:
            self.client.execute_command(*words)

    def policy_del(self, name: str) -> bool:
        """``RL.POLICY.DEL``: True when there was such a policy (on a cluster client, on every
        primary: True when any had it)."""
        self._require_module("a policy (RL.POLICY.DEL)")
        if _is_cluster(self.client):
            return _any_of(self.client.execute_command("RL.POLICY.DEL", name, target_nodes=self.client.get_primaries()))
        return bool(self.client.execute_command("RL.POLICY.DEL", name))

    def policy_list(self) -> list[str]:
        """``RL.POLICY.LIST``: the names of the policies (on a cluster, the default node's)."""
        self._require_module("a policy (RL.POLICY.LIST)")
        return _names(self.client.execute_command("RL.POLICY.LIST", **_keyless(self.client)))
