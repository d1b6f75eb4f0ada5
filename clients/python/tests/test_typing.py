"""The package's types as an application's type checker sees them: mypy --strict on code that
uses the installed package (its py.typed and annotations), as a user of ``Typing :: Typed``
would run it. Correct use passes; misspelt options, wrong option types and a client of the
wrong kind are errors, with the error the user would read."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import package_test

pytestmark = package_test

GOOD = '''
import redis
import redis.asyncio
from typing import Any
from ratelimit_redis_module import (
    AsyncRateLimiter, Decision, GCRA, Guard, RateLimiter, RateLimitMiddleware, Stats, XRateLimitReset,
)

def sync_use(client: redis.Redis) -> bool:
    limiter = RateLimiter(client, stats=Stats())
    d: Decision = limiter.gcra("user:1", 10, 5, "1s", cost=2, dryrun=True, block="10s")
    limiter.token_bucket("user:2", 10, 1, 1500, interval=True, at_most=3, shadow=True)
    return d.allowed and limiter.check(GCRA(1, 1, "1s"), "k", durable=1).allowed

async def async_use(client: redis.asyncio.Redis) -> int:
    limiter = AsyncRateLimiter(client)
    d = await limiter.sliding_window("user:1", 100, "1m", cost=1)
    return d.remaining

def epoch_reset(client: redis.Redis, app: Any) -> XRateLimitReset:
    RateLimitMiddleware(app, redis="redis://127.0.0.1:6379", limit=GCRA(1, 1, "1s"), x_ratelimit_reset="epoch")
    return Guard(client, GCRA(1, 1, "1s"), x_ratelimit_reset="delta").x_ratelimit_reset
'''

# Each line an error of its own: (code, the message's part that names it).
BAD = [
    ('RateLimiter(redis.Redis()).gcra("k", 1, 1, "1s", costs=2)', 'Unexpected keyword argument "costs"'),
    ('RateLimiter(redis.Redis()).gcra("k", 1, 1, "1s", cost="2")', 'Argument "cost" to "gcra" of "RateLimiter" has incompatible type "str"'),
    ('RateLimiter(redis.Redis()).fixed_window("k", 1, "1s", dryrun=None)', 'Argument "dryrun"'),
    ('RateLimiter(redis.asyncio.Redis())', 'Argument 1 to "RateLimiter" has incompatible type "redis.asyncio.client.Redis'),
    ('AsyncRateLimiter(redis.Redis())', 'Argument 1 to "AsyncRateLimiter" has incompatible type "redis.client.Redis'),
    ('Guard(redis.Redis(), GCRA(1, 1, "1s"), x_ratelimit_reset="utc")', 'Argument "x_ratelimit_reset" to "Guard" has incompatible type'),
]


def mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "app.py"
    path.write_text(source)
    # From tmp_path, so that the package comes from site-packages (as installed), not src/.
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "app.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )


def test_correct_use_passes_mypy_strict(tmp_path: Path) -> None:
    result = mypy(tmp_path, GOOD)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("Success: no issues found in 1 source file")


def test_wrong_options_and_clients_are_type_errors(tmp_path: Path) -> None:
    header = "import redis\nimport redis.asyncio\nfrom ratelimit_redis_module import GCRA, AsyncRateLimiter, Guard, RateLimiter\n"
    result = mypy(tmp_path, header + "".join(line + "\n" for line, _ in BAD))
    assert result.returncode == 1, result.stdout + result.stderr
    errors = [line for line in result.stdout.splitlines() if ": error: " in line]
    for number, (_, message) in enumerate(BAD, start=4):
        ours = [e for e in errors if e.startswith(f"app.py:{number}: ")]
        assert any(message in e for e in ours), (number, message, errors)
    # Nothing else is an error: the package's own annotations are clean under --strict.
    assert {int(e.split(":")[1]) for e in errors} == set(range(4, 4 + len(BAD))), errors

