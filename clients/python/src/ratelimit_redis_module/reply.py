"""The replies of the module's admission commands (:class:`Decision`) and of ``RL.COUNTER``
(:class:`Count`), parsed from RESP2 or RESP3."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Count", "Decision", "parse_count", "parse_decision"]

_FIELDS = ("allowed", "limit", "remaining", "retry_after_ms", "reset_after_ms")
_EXTRAS = ("delay_ms", "rule", "token")


@dataclass(frozen=True, slots=True)
class Decision:
    """One admission command's answer.

    Attributes:
        allowed: the request was admitted (and counted, unless DRYRUN).
        limit: the most units a fresh key admits at once (burst, capacity, window limit).
        remaining: units that could still be admitted right now, after this call.
        retry_after_ms: 0 when admitted; when denied, the least number of ms after which the
            same request would be admitted; -1 when it never can be (a cost above the limit).
        reset_after_ms: ms until the key is fresh again (``remaining == limit``).
        delay_ms: RL.LEAKYBUCKET only: the wait before acting (-1 when denied).
        rule: RL.LIMIT only: the index of the binding rule of the policy.
        token: RL.CONCURRENCY.ACQUIRE only: the lease's token (None when denied, and when a
            would-be denial is answered allowed under SHADOW: no lease was taken).
        granted: with ATMOST only: the units granted (0 when denied).
        shadow_denied: with SHADOW only: the limit would have denied the request, which is
            answered allowed (the other fields are the denial's).
        local: answered from the limit's local budget (``local_budget=``) without a round
            trip of its own: units already held in-process, a refill another request made, or
            a refused refill remembered until its retry time. ``remaining`` is then the units
            held plus the server's ``remaining`` at the last refill, ``reset_after_ms`` that
            refill's counted down: approximate.
    """

    allowed: bool
    limit: int
    remaining: int
    retry_after_ms: int
    reset_after_ms: int
    delay_ms: int | None = None
    rule: int | None = None
    token: str | None = None
    granted: int | None = None
    shadow_denied: bool | None = None
    local: bool = False


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return str(value)


def _int(value: Any, field: str) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, (bytes, str)):
        try:
            return int(value)
        except ValueError:
            pass
    raise ValueError(f"unexpected reply: {field} is {value!r}, not an integer")


def _flag(value: Any, field: str) -> bool:
    # 0 or 1 (a boolean in RESP3). Anything else is not the module's reply.
    if isinstance(value, bool):
        return value
    flag = _int(value, field)
    if flag not in (0, 1):
        raise ValueError(f"unexpected reply: {field} is {value!r}, not 0 or 1")
    return flag == 1


def parse_decision(reply: Any, extra: str | None = None, *, granted: bool = False, shadow: bool = False) -> Decision:
    """Turn a RESP2 array or a RESP3 map into a :class:`Decision`.

    Args:
        reply: what redis-py returned for the command (a list, or a dict whose keys are
            ``bytes`` or ``str`` depending on ``decode_responses``).
        extra: the name of the command's sixth field, if it has one: ``"delay_ms"``
            (RL.LEAKYBUCKET), ``"rule"`` (RL.LIMIT) or ``"token"``
            (RL.CONCURRENCY.ACQUIRE).
        granted: the call had ``ATMOST``: the reply has ``granted`` after the command's fields.
        shadow: the call had ``SHADOW``: the reply ends with ``shadow_denied``.

    Raises:
        ValueError: the reply is not the one the call gives (another shape, more or fewer
            fields, a field that is not an integer, ``allowed`` neither 0 nor 1): the module
            said something the package cannot read.
    """
    if extra is not None and extra not in _EXTRAS:
        raise ValueError(f"unknown extra field {extra!r}; expected one of {_EXTRAS}")
    names = _FIELDS + ((extra,) if extra else ()) + (("granted",) if granted else ()) + (
        ("shadow_denied",) if shadow else ()
    )
    if isinstance(reply, dict):
        fields = {_text(k): v for k, v in reply.items()}
        missing = [n for n in names if n not in fields]
        if missing:
            raise ValueError(f"unexpected reply: no {', '.join(missing)} in {reply!r}")
        unknown = [n for n in fields if n not in names]
        if unknown:
            raise ValueError(f"unexpected reply: the fields {', '.join(unknown)} too in {reply!r}")
        values = dict(fields)
    elif isinstance(reply, (list, tuple)):
        if len(reply) != len(names):
            raise ValueError(f"unexpected reply: {len(reply)} fields, expected {len(names)}: {reply!r}")
        values = dict(zip(names, reply))
    else:
        raise ValueError(f"unexpected reply: {reply!r}")
    kwargs: dict[str, Any] = {}
    if extra == "token":
        kwargs["token"] = None if values["token"] is None else _text(values["token"])
    elif extra is not None:
        kwargs[extra] = _int(values[extra], extra)
    if granted:
        kwargs["granted"] = _int(values["granted"], "granted")
    if shadow:
        kwargs["shadow_denied"] = _flag(values["shadow_denied"], "shadow_denied")
    return Decision(
        allowed=_flag(values["allowed"], "allowed"),
        limit=_int(values["limit"], "limit"),
        remaining=_int(values["remaining"], "remaining"),
        retry_after_ms=_int(values["retry_after_ms"], "retry_after_ms"),
        reset_after_ms=_int(values["reset_after_ms"], "reset_after_ms"),
        **kwargs,
    )


@dataclass(frozen=True, slots=True)
class Count:
    """``RL.COUNTER``'s answer: a fixed window kept as a plain integer string (``GET`` reads it),
    its TTL set at the first hit on the server's clock.

    Attributes:
        count: the key's value after the call (0 when there is no key).
        ttl_ms: the key's PTTL after the call: ms until the window ends; -1 when the key has
            no TTL (only a read, ``by=0``, sees one: a write gives it the window), -2 when
            there is no key (a read of none, or ``xx`` on none).
    """

    count: int
    ttl_ms: int


def parse_count(reply: Any) -> Count:
    """``RL.COUNTER``'s reply, ``[count, pttl]`` in RESP2 and RESP3, as a :class:`Count`.

    Raises:
        ValueError: anything else (another shape, a field that is not an integer, a PTTL below
            -2): the server said something the package cannot read.
    """
    if not isinstance(reply, (list, tuple)) or len(reply) != 2:
        raise ValueError(f"unexpected RL.COUNTER reply: {reply!r}, expected [count, pttl]")
    count, ttl_ms = _int(reply[0], "count"), _int(reply[1], "pttl")
    if ttl_ms < -2:
        raise ValueError(f"unexpected RL.COUNTER reply: {reply!r}, a PTTL below -2")
    return Count(count, ttl_ms)
