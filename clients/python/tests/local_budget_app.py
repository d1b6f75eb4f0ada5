"""The ASGI app tests/test_local_budget_workers.py serves with
``uvicorn local_budget_app:app --workers 4``: the package's middleware with a local budget of 16
on one key shared by every worker (``rl:http:shared``), the limit chosen by $RL_BUDGET_KIND
(``gcra``, ``fixedwindow`` or ``policy``: the policy ``workers``, set by the test), on the
Redis at $RL_BUDGET_REDIS, with the hold $RL_BUDGET_HOLD if set.

Every response, the middleware's 429s included, says which worker answered (``x-worker-pid``).
``/held`` (skipped by the middleware: it costs nothing) answers the worker's counters as JSON.
The app answers the ASGI lifespan, so the middleware gives back every unit the worker holds
(``RL.REFUND``) at the lifespan's shutdown, which uvicorn runs when a worker gets SIGTERM.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ratelimit_redis_module import GCRA, FixedWindow, Policy, RateLimitMiddleware, Stats

K = 16
#: $RL_BUDGET_HOLD, when set, is the limits' hold; else each one's default (a quarter of the
#: hour for GCRA and the window, never reached in a test; 250 ms for the policy, so its units
#: also go back by the timer while the test runs).
HOLD = os.environ.get("RL_BUDGET_HOLD") or None
LIMITS = {
    "gcra": GCRA(300, 1, "1h", local_budget=K, hold=HOLD),
    "fixedwindow": FixedWindow(300, "1h", local_budget=K, hold=HOLD),
    "policy": Policy("workers", local_budget=K, hold=HOLD),
}

stats = Stats()


async def inner(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                # The middleware wraps this send: it closes its guard (every unit held goes
                # back) before the shutdown is reported complete.
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["path"] == "/held":
        body = json.dumps({
            "pid": os.getpid(), "held": stats.held, "admitted": stats.admitted,
            "local_admitted": stats.local_admitted, "refills": stats.refills, "refunded": stats.refunded,
        }).encode()
        kind = b"application/json"
    else:
        body, kind = b"ok", b"text/plain"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", kind)]})
    await send({"type": "http.response.body", "body": body})


limited = RateLimitMiddleware(
    inner, redis=os.environ["RL_BUDGET_REDIS"], limit=LIMITS[os.environ["RL_BUDGET_KIND"]],
    key=lambda scope: "shared", skip=lambda scope: scope["path"] == "/held",
    # Counted exactly: a slow answer on a loaded machine must not let a request through
    # uncounted (fail open) or refuse it as a 503 the test would have to tell apart. A minute
    # (tests/conftest.py's PATIENT) is a hang, not a busy machine; the setup's too.
    timeout=60.0, setup_timeout=60.0, fail_open=False, stats=stats,
)


async def app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        await limited(scope, receive, send)
        return
    pid = str(os.getpid()).encode()

    async def with_pid(message: Any) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), (b"x-worker-pid", pid)]}
        await send(message)

    await limited(scope, receive, with_pid)
