"""The HTTP fields and bodies of a decision, framework-agnostic: ``RateLimit-Policy`` and
``RateLimit`` (draft-ietf-httpapi-ratelimit-headers-11), the legacy ``X-RateLimit-*`` and
``Retry-After``, and the ``application/problem+json`` bodies of a 429 and a 503 (docs/python.md,
"The headers"); ``X-RateLimit-Reset`` as delta or epoch seconds."""

from __future__ import annotations

import json
from typing import Literal

from .reply import Decision

__all__ = [
    "rate_limit_headers",
    "check_x_ratelimit_reset",
    "XRateLimitReset",
    "quota_exceeded_body",
    "load_shed_body",
    "check_name",
    "UNAVAILABLE_BODY",
    "PROBLEM_JSON",
]

PROBLEM_JSON = "application/problem+json"
UNAVAILABLE_BODY = (
    b'{"type":"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity",'
    b'"title":"Rate limiter unavailable","status":503}'
)


def _ceil_s(ms: int) -> int:
    return -(-ms // 1000)


#: What ``X-RateLimit-Reset`` says: ``"delta"``, the seconds until the key is fresh again
#: (ceil(reset_after_ms / 1000)); ``"epoch"``, that instant in seconds since the Unix epoch,
#: rounded up (express-rate-limit's legacy field, GitHub's).
XRateLimitReset = Literal["delta", "epoch"]


def check_x_ratelimit_reset(value: object) -> XRateLimitReset:
    """The ``x_ratelimit_reset`` option checked: ``"delta"`` or ``"epoch"``."""
    if isinstance(value, str) and value == "delta":
        return "delta"
    if isinstance(value, str) and value == "epoch":
        return "epoch"
    raise ValueError(f"invalid x_ratelimit_reset {value!r}: expected 'delta' or 'epoch'")


def check_name(name: str) -> str:
    """A limit's name must be printable ASCII, so that it is a Structured Field String."""
    if not name or any(not (0x20 <= ord(c) <= 0x7E) for c in name):
        raise ValueError(f"invalid limit name {name!r}: expected 1 or more printable ASCII characters")
    return name


def _sf_string(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def quota_exceeded_body(name: str) -> bytes:
    """The 429's ``application/problem+json`` body, naming the violated policy."""
    return (
        b'{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",'
        b'"title":"Request cannot be satisfied as assigned quota has been exceeded",'
        b'"status":429,"violated-policies":[' + json.dumps(name).encode() + b"]}"
    )


def load_shed_body(name: str) -> bytes:
    """The ``application/problem+json`` body of a 503 from an adaptive concurrency limit:
    load shedding (the draft's ``temporary-reduced-capacity``), the server being at the
    concurrency it currently sustains; not a caller's quota. Names the limit as
    ``violated-policies``."""
    return (
        b'{"type":"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity",'
        b'"title":"Request cannot be satisfied due to temporary server capacity constraints",'
        b'"status":503,"detail":"load shedding: the server is at its adaptive concurrency limit",'
        b'"violated-policies":[' + json.dumps(name).encode() + b"]}"
    )


def rate_limit_headers(
    name: str, decision: Decision, window_s: int | None, concurrent: bool = False,
    more_after_ms: int | None = None, *, reset_at_ms: int | None = None,
) -> list[tuple[str, str]]:
    """The response headers for a decision, in this order: ``RateLimit-Policy``,
    ``RateLimit`` (draft-ietf-httpapi-ratelimit-headers-11), ``X-RateLimit-Limit``,
    ``-Remaining``, ``-Reset``, and on a denial ``Retry-After`` (unless it never passes).

    Names are lower case, as ASGI wants them; HTTP compares them without case.

    Args:
        name: the limit's name (printable ASCII).
        decision: the module's reply.
        window_s: ``w`` in whole seconds (:class:`~ratelimit_redis_module.FieldShape`), or None
            to leave it out.
        concurrent: the quota is requests in flight (``qu="concurrent-requests"``).
        more_after_ms: when admitted, the ms until ``remaining`` grows (RateLimit's ``t``);
            None leaves ``t`` out. A refusal's ``t`` is its retry time.
        reset_at_ms: the instant the key is fresh again, in ms since the Unix epoch:
            ``X-RateLimit-Reset`` is then that instant in seconds, rounded up (its ``"epoch"``
            form); None (the default) gives ceil(reset_after_ms / 1000), the ``"delta"`` form.
    """
    quoted = _sf_string(name)
    policy = f"{quoted};q={decision.limit}" + ("" if window_s is None else f";w={window_s}")
    if concurrent:
        policy += ';qu="concurrent-requests"'
    if decision.allowed:
        t: int | None = None if more_after_ms is None else _ceil_s(more_after_ms)
    else:
        t = None if decision.retry_after_ms < 0 else _ceil_s(decision.retry_after_ms)
    state = f"{quoted};r={decision.remaining}" + ("" if t is None else f";t={t}")
    headers = [
        ("ratelimit-policy", policy),
        ("ratelimit", state),
        ("x-ratelimit-limit", str(decision.limit)),
        ("x-ratelimit-remaining", str(decision.remaining)),
        ("x-ratelimit-reset", str(_ceil_s(decision.reset_after_ms if reset_at_ms is None else reset_at_ms))),
    ]
    if not decision.allowed and t is not None:
        headers.append(("retry-after", str(t)))
    return headers
