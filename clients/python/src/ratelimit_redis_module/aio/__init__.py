"""The package's asyncio twins, laid out as the ``limits`` library lays out its own (``limits.aio``):
each module here is the twin of the synchronous module of the same name one level up, on what
that module has for both.

- ``client.py``: :class:`AsyncRateLimiter` (``client.py``'s ``RateLimiter``), and
  :func:`async_client_from_url` / :func:`async_client_from_sentinel`, clients set for the
  request path.
- ``guard.py``: :class:`AsyncGuard` (``Guard``), what the ASGI middleware uses.
- ``budget.py``: the local budgets of an :class:`AsyncRateLimiter` (``LocalBudgets``).
- ``_setup.py``: the setup of an :class:`AsyncRateLimiter`, in a task (``SyncSetup``).

The package itself exports the same names (``from ratelimit_redis_module import AsyncGuard``);
the ASGI middleware (``asgi.py``) stays beside the WSGI one, both framework adapters.
"""

from .client import AsyncRateLimiter, async_client_from_sentinel, async_client_from_url
from .guard import AsyncGuard

__all__ = ["AsyncGuard", "AsyncRateLimiter", "async_client_from_sentinel", "async_client_from_url"]
