"""Rate limiting with the ratelimit Redis module (the ``RL.*`` commands) from Python.

- :class:`RateLimiter` / :class:`AsyncRateLimiter`: one method per command, on a redis-py
  client (sync or asyncio, standalone or cluster), returning a :class:`Decision`.
- :class:`Guard` / :class:`AsyncGuard`: a limit applied to HTTP requests in any framework:
  a :class:`Verdict` with the RateLimit headers, the 429 body, the local denial memory, and
  fail open or closed; ``in_flight`` holds a concurrency lease while a request is served and
  releases it with the request's latency (adaptive limits: a refusal is a 503).
- :class:`RateLimitMiddleware`: the same as ASGI middleware for Starlette and FastAPI
  (:func:`exempt` and ``skip`` leave requests alone, :func:`limited` gives a route its own
  limit); :class:`WSGIRateLimitMiddleware` for Flask or any WSGI app, and
  :class:`DjangoRateLimitMiddleware`, with the same options and marks.
- :func:`client_from_url` / :func:`async_client_from_url`: redis-py clients set for the
  request path (they fail at once while Redis refuses connections).
- :data:`COMMANDS`, :data:`LEFT_OUT`, :data:`RULE_KINDS`: what the package covers of the
  module's commands and policy rules, and what it leaves out.
- :meth:`RateLimiter.counter`: ``RL.COUNTER``, a fixed window kept as a plain integer string (a
  :class:`Count`), what the ``limits`` storage's fixed window runs.

The asyncio twins live in :mod:`ratelimit_redis_module.aio`, beside the synchronous modules they
mirror (as the ``limits`` library keeps ``limits.aio``), and are exported here too.
"""

from .budget import BudgetStats, hold_ms
from .asgi import RateLimitMiddleware, client_ip, exempt, header, limited, user
from .wsgi import DjangoRateLimitMiddleware, WSGIRateLimitMiddleware
from .client import (
    ADMISSION_OPTIONS,
    COMMANDS,
    LEFT_OUT,
    CheckOptions,
    Counterpart,
    NotDurable,
    RateLimiter,
    Rtt,
    client_from_sentinel,
    client_from_url,
    rtt_us,
)
from .aio import AsyncGuard, AsyncRateLimiter, async_client_from_sentinel, async_client_from_url
from .denial_memory import DenialMemory
from .fields import PROBLEM_JSON, UNAVAILABLE_BODY, XRateLimitReset, load_shed_body, quota_exceeded_body, rate_limit_headers
from .guard import Guard, InFlight, Verdict
from .stats import Stats
from .limit_types import (
    ADAPTIVE_KINDS,
    GCRA,
    Concurrency,
    Duration,
    FieldShape,
    FixedWindow,
    LeakyBucket,
    Limit,
    RULE_KINDS,
    Policy,
    Rule,
    RuleKind,
    SlidingLog,
    SlidingWindow,
    TokenBucket,
    Warmup,
    duration_ms,
    field_shape,
    more_after_ms,
    parse_rules,
)
from .reply import Count, Decision, parse_count, parse_decision
from .scripts import BACKENDS, ModuleRequired
from ._script_acl import ScriptPermissionError

__version__ = "0.1.0"

__all__ = [
    "ADAPTIVE_KINDS", "ADMISSION_OPTIONS", "BACKENDS", "ModuleRequired", "ScriptPermissionError", "BudgetStats", "hold_ms", "InFlight", "Rtt", "load_shed_body", "rtt_us", "AsyncGuard", "AsyncRateLimiter", "CheckOptions", "COMMANDS", "Concurrency", "Counterpart", "Count",
    "Decision", "DenialMemory", "Duration", "FieldShape", "FixedWindow", "GCRA", "Guard", "LEFT_OUT", "LeakyBucket",
    "Limit", "NotDurable", "PROBLEM_JSON", "Policy", "RULE_KINDS", "RateLimitMiddleware", "RateLimiter", "Rule",
    "RuleKind", "SlidingLog", "SlidingWindow", "Stats", "TokenBucket", "UNAVAILABLE_BODY", "Verdict",
    "Warmup", "XRateLimitReset", "async_client_from_sentinel", "async_client_from_url", "client_from_sentinel",
    "client_from_url", "client_ip", "duration_ms", "exempt", "field_shape", "header", "limited",
    "more_after_ms", "parse_count", "parse_decision", "parse_rules", "quota_exceeded_body", "rate_limit_headers", "user",
    "DjangoRateLimitMiddleware", "WSGIRateLimitMiddleware",
]
