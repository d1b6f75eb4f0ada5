"""The script backend (issue 28; docs/managed.md): the module's admission commands, ``RL.REFUND`` and the
concurrency leases (not adaptive) as server-side Lua scripts, for servers that cannot load the
module (managed Redis and Valkey).

The scripts' one source is ``clients/lua/`` of the repository (its README: the calling
convention, and "One source"). A script is assembled when it is loaded: the parts of ``lib/``
that its ``-- needs:`` line names, in that order, then the entry file. The wheel and the sdist
carry a copy made at build time (``hatch_build.py``) in this package's ``lua/`` folder; a
source tree without it reads the repository's. ``RATELIMIT_SCRIPTS_DIR`` names another folder
(the package's tests set it to the repository's, so that they run the scripts as they are now).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from pathlib import Path
from typing import Any

import redis

__all__ = ["BACKENDS", "ModuleRequired", "SCRIPTS", "script_source", "script_sha"]

#: The values of the limiters' ``backend=`` option.
BACKENDS = ("auto", "module", "script")

#: The module's commands that the script backend runs, each with its script's name.
SCRIPTS: dict[str, str] = {
    "RL.GCRA": "gcra",
    "RL.TOKENBUCKET": "tokenbucket",
    "RL.FIXEDWINDOW": "fixedwindow",
    "RL.LEAKYBUCKET": "leakybucket",
    "RL.SLIDINGWINDOW": "slidingwindow",
    "RL.SLIDINGLOG": "slidinglog",
    "RL.WARMUP": "warmup",
    "RL.REFUND": "refund",
    "RL.CONCURRENCY.ACQUIRE": "concurrency_acquire",
    "RL.CONCURRENCY.RELEASE": "concurrency_release",
    "RL.COUNTER": "counter",
}


class ModuleRequired(Exception):
    """Something that needs the ratelimit module was asked where it is not used: a policy
    (``RL.LIMIT``, ``policy_*``) or an adaptive concurrency limit on the script backend (with or
    without ``shadow``; plain concurrency leases work there); ``backend="module"`` on a server
    without the module; or the script backend on a server without Lua (:func:`no_lua`).

    Raised before anything is sent (for the script backend). Not a :class:`redis.RedisError`:
    the guards and the middleware do not fail it open or closed, it is a configuration error.
    """


def _folders() -> list[Path]:
    given = os.environ.get("RATELIMIT_SCRIPTS_DIR")
    if given:
        return [Path(given)]
    here = Path(__file__).resolve().parent
    # The copy in the wheel or sdist, then the repository's (a source tree: clients/python/src/...).
    return [here / "lua", here.parents[2] / "lua"]


@functools.cache
def _folder() -> Path:
    for folder in _folders():
        if (folder / "gcra.lua").is_file() and (folder / "lib").is_dir():
            return folder
    raise FileNotFoundError(
        "the script backend's scripts are not here: looked in "
        + ", ".join(str(f) for f in _folders())
        + " (a package built without them; set RATELIMIT_SCRIPTS_DIR to clients/lua)"
    )


@functools.cache
def script_source(name: str) -> str:
    """The script ``name`` (``gcra``, ``refund``...) as it is loaded: the ``lib/`` parts its
    ``-- needs:`` line names, in that order, then the entry file."""
    folder = _folder()
    entry = (folder / f"{name}.lua").read_text(encoding="utf-8")
    needs = re.search(r"^-- needs: (.+)$", entry, re.M)
    if needs is None:
        raise ValueError(f"{name}.lua names no parts (its '-- needs:' line)")
    return "".join((folder / "lib" / f"{n}.lua").read_text(encoding="utf-8") for n in needs.group(1).split()) + entry


@functools.cache
def script_sha(name: str) -> str:
    """The SHA-1 the server knows the script by (of :func:`script_source`'s text)."""
    return hashlib.sha1(script_source(name).encode("utf-8")).hexdigest()


def module_required(what: str) -> ModuleRequired:
    return ModuleRequired(
        f"{what} needs the ratelimit module: this limiter uses the script backend (the server has no "
        "module, or backend='script'), which runs the algorithms, COST, ATMOST, DRYRUN, BLOCK, SHADOW, "
        "RL.REFUND, concurrency leases (not adaptive) and policies given with their rules "
        "(Policy(name, rules=...)) only (see docs/managed.md)"
    )


def rule_keys(key: Any, n: int) -> list[Any]:
    """The keys of a policy's ``n`` rules on the script backend (clients/lua/README.md,
    Policies), one slot: ``key:0``, ``key:1``... when ``key`` has a hash tag of its own (a ``{``
    followed later by a ``}`` with a byte between); else ``{key}:0``, ``{key}:1``..., with ``%``
    and ``}`` in the key written ``%25`` and ``%7D`` so that the braces hold all of it (a key
    starting with ``}`` would have an empty tag, hashed whole, each rule key to its own slot)."""
    raw = key if isinstance(key, bytes) else str(key).encode()
    start = raw.find(b"{")
    if start >= 0 and raw.find(b"}", start + 1) > start + 1:
        base = raw
    else:
        base = b"{" + raw.replace(b"%", b"%25").replace(b"}", b"%7D") + b"}"
    keys = [base + b":%d" % i for i in range(n)]
    return keys if isinstance(key, bytes) else [k.decode() for k in keys]


def script_call(args: list[Any], rules: tuple[str, ...] = (), keys: int = 0) -> tuple[str, list[Any], list[Any]]:
    """The module's command words ``[command, key, *rest]`` as a script call: the script's
    name, its keys and the words after them. A command the scripts do not have is refused here,
    and so are an adaptive concurrency limit (``ADAPTIVE``, after ``limit lease``) and a policy
    without ``rules`` (the application's rules, as RL.POLICY.SET takes them: ``RL.LIMIT key
    name`` becomes the policy script over a key per rule, and ``RL.REFUND`` on such a key its
    refund); the options (SHADOW included) are the scripts' own. ``keys``: a policy's rule keys
    to name at least (an earlier, longer policy's, see :func:`rule_keys_wanted`), the number of
    rules then before the rules."""
    command, key, *rest = args
    if command == "RL.LIMIT":
        if not rules:
            raise module_required("RL.LIMIT")
        count = _rule_count(rules)
        n = max(count, keys)
        return "policy", rule_keys(key, n), [*([str(count)] if n > count else []), *rules, *rest[1:]]
    if command == "RL.REFUND" and rules:
        return "policyrefund", rule_keys(key, max(_rule_count(rules), keys)), rest
    name = SCRIPTS.get(command)
    if name is None:
        raise module_required(command)
    if name == "concurrency_acquire" and len(rest) > 2 and str(rest[2]).upper() == "ADAPTIVE":
        raise module_required("an adaptive concurrency limit (RL.CONCURRENCY.ACQUIRE ... ADAPTIVE)")
    return name, [key], rest


def rule_keys_wanted(error: Exception, named: int) -> int | None:
    """The policy scripts' ``RULEKEYS n`` (the first rule key holds a policy of ``n`` rule keys,
    more than the ``named`` keys the call named: a policy that lost rules, whose states a rule
    may still take): ``n``, to call again with; None for any other error."""
    found = re.search(r"\bRULEKEYS (\d+) ", str(error))
    return int(found.group(1)) if found and int(found.group(1)) > named else None


def _rule_count(words: tuple[str, ...]) -> int:
    """The rules in RL.POLICY.SET's words: one per algorithm name."""
    return sum(1 for w in words if w.upper().removeprefix("RL.") in RULE_NAMES)


#: The algorithms a policy's rule may name.
RULE_NAMES = frozenset({"GCRA", "TOKENBUCKET", "LEAKYBUCKET", "FIXEDWINDOW", "SLIDINGWINDOW", "SLIDINGLOG", "WARMUP"})


def evalsha_words(name: str, keys: list[Any], rest: list[Any], now_us: int | None = None) -> list[Any]:
    words = ["EVALSHA", script_sha(name), len(keys), *keys, *rest]
    if now_us is not None:  # the scripts' test-only clock: the public API never sets it
        words += ["NOW", str(now_us)]
    return words


#: What a server without a Lua scripting engine answers ``SCRIPT LOAD`` and ``EVAL`` (Valkey 9.1
#: and later, whose Lua is a module an operator can unload: "ERR Could not find scripting engine
#: 'lua'"; ``EVALSHA`` answers ``NOSCRIPT`` there, the scripts gone with the engine).
_NO_LUA = re.compile(r"could not find scripting engine", re.IGNORECASE)


def lua_missing(error: BaseException) -> bool:
    """The server's ``error`` says it has no Lua scripting engine."""
    return isinstance(error, redis.ResponseError) and _NO_LUA.search(str(error)) is not None


def no_lua(said: str, backend: str) -> ModuleRequired:
    """The one error of the script backend on a server without Lua (docs/managed.md, "A server
    without Lua"): ``said``, the server's answer; ``backend``, the option that took the scripts
    (``"script"``, or ``"auto"`` on a server without the module)."""
    asked = "backend='script'" if backend == "script" else "backend='auto', and the server has no ratelimit module"
    return ModuleRequired(
        f"the script backend needs a Lua scripting engine, and the server has none ({asked}; the server said: "
        f"{said}): load the ratelimit module on the server (backend='auto' or 'module' then uses it), or use a "
        "server with Lua (docs/managed.md, \"A server without Lua\")"
    )


def missing_module(error: Exception) -> ModuleRequired | None:
    """``backend="module"``'s error when the server does not know the command."""
    text = str(error)
    if "unknown command" in text.lower():
        return ModuleRequired(
            f"the server has no ratelimit module ({text.strip()}), and backend='module' was asked for: "
            "load the module (MODULE LOAD or --loadmodule), or use backend='auto' or 'script' (the "
            "script backend)"
        )
    return None
