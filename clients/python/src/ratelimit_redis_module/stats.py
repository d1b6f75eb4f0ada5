"""The counters a guard keeps: its own (round trips, admissions, denials, failures...)
and, as a :class:`~ratelimit_redis_module.BudgetStats`, those its limiter fills."""

from __future__ import annotations

from dataclasses import dataclass

from .budget import BudgetStats

__all__ = ["Stats"]


@dataclass
class Stats(BudgetStats):
    """Counters an application can read (and export).

    Attributes:
        round_trips: checks that went to Redis and got an answer.
        admitted: requests admitted by Redis.
        denied: requests refused by Redis (429; 503 for an adaptive concurrency limit: load
            shedding).
        remembered: requests refused from the local denial memory: round trips saved.
        failures: checks that Redis did not answer in time (timeout, refused connection, error).
        timeouts: of those, checks that got no answer within the timeout (the asyncio guard's
            ``timeout``, the sync client's socket timeout): each cost the whole timeout. A
            failure that is not one ended sooner (a refused connection, with a client of
            :func:`~ratelimit_redis_module.async_client_from_url`: at once).
        fail_open: of the failures, requests let through without a limit.
        fail_closed: of the failures, requests refused with 503.
        shadow_denied: requests checked with ``shadow`` that the limit would have refused
            (let through, counted here and not in ``admitted``).
        not_durable: of the failures, admissions that fewer replicas than ``durable``
            acknowledged in time (failed open or closed like any failure).
        local_admitted, refills, refunded, refund_failures, expired, held, backend,
            setup_failures: :class:`~ratelimit_redis_module.BudgetStats`' fields, which the
            guard's limiter fills (its local budgets, its backend and its setup).
    """

    round_trips: int = 0
    admitted: int = 0
    denied: int = 0
    remembered: int = 0
    failures: int = 0
    timeouts: int = 0
    fail_open: int = 0
    fail_closed: int = 0
    shadow_denied: int = 0
    not_durable: int = 0
