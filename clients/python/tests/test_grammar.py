"""The package's copy of the module's grammar held to the module: every duration of
clients/lua/conformance/grammar.json (written by src/commands/error_vectors.rs from the module's
own parser) reads here as the module reads it, and the package's bound is the module's. No
server: the package checks these before it sends anything."""

from __future__ import annotations

import json
from pathlib import Path

from ratelimit_redis_module.limit_types import MAX_DURATION_MS, duration_ms

GRAMMAR = json.loads(
    (Path(__file__).resolve().parents[3] / "clients" / "lua" / "conformance" / "grammar.json").read_text()
)


def test_the_bound_is_the_modules() -> None:
    assert MAX_DURATION_MS == GRAMMAR["max_duration_ms"]


def test_every_duration_reads_as_the_module_reads_it() -> None:
    differ = [(text, ms, duration_ms(text)) for text, ms in GRAMMAR["durations"] if duration_ms(text) != ms]
    assert differ == [], "(text, the module's ms, the package's)"
    # A number of milliseconds is a duration under the same bound.
    for text, ms in GRAMMAR["durations"]:
        if text.isdigit() and text == str(int(text)):
            assert duration_ms(int(text)) == ms, text
