"""A command a script runs that the ACL refuses, named.

A script's commands run with the caller's permissions (docs/managed.md, "An application user's
ACL"), and the server's error does not always say which one it refused: Redis 8.2 and Valkey
8.1 name it ("ACL failure in script: User u has no permissions to run the 'hmget' command");
Redis 7.0 says only "The user executing the script can't run this command or subcommand",
followed by the script's line when the command ran outside the scripts' error handling
(" script: <sha>, on @user_script:65."). The package knows the text of the script it sent: a
line names the command on it. Without one (the command ran inside the scripts' error handling,
lib/common.lua's run(), which every lease script and every general path does), the package asks
the server which of the script's commands the caller may not run, with ``redis.acl_check_cmd``
(Redis 7.0 and later, Valkey) in a script of its own (:data:`PROBE`), on the same key.
"""

from __future__ import annotations

import functools
import hashlib
import re
from typing import Any, Sequence

import redis

from .scripts import script_source

__all__ = ["ScriptPermissionError", "PROBE", "PROBE_SHA", "probed", "refused_in_script", "script_commands"]

#: Redis 8.2's and Valkey 8.1's words for a command a script ran that the ACL refused.
_NAMED = re.compile(r"ACL failure in script: User .* has no permissions to run the '([^']+)' command")
#: Redis 7.0's, which name no command.
_UNNAMED = "The user executing the script can't run this command or subcommand"
#: The script's line, which the server adds to an error raised where the command ran.
_LINE = re.compile(r" script: [0-9a-f]{40}, on @user_script:(\d+)\.$")
#: A command the scripts run: always by its name written out (clients/lua/README.md).
_CALL = re.compile(r"redis\.p?call\('([A-Z]+)'")
#: The commands that can fail a script: those it runs with redis.call, and of those it runs
#: with redis.pcall (whose errors it handles), the reads whose error it passes on (lib/
#: common.lua's fetched(): HMGET, ZMSCORE). The others' refusal is not an error of the script
#: (ZSCORE and HGET, which tell another algorithm's key from a stranger's: without them the
#: script answers WRONGTYPE), and they are not named.
_FAILING = re.compile(r"redis\.call\('([A-Z]+)'|fetched\(redis\.pcall\('([A-Z]+)'")

#: Which of ARGV (commands) the caller's ACL refuses on KEYS[1], in their order (an empty array:
#: none). ``redis.acl_check_cmd`` checks the command and its key as the ACL would when the
#: command runs, without running it.
PROBE = """-- ratelimit-redis-module: the commands of ARGV the caller may not run on KEYS[1]
local refused = {}
for _, name in ipairs(ARGV) do
  if not redis.acl_check_cmd(name, KEYS[1]) then
    refused[#refused + 1] = name
  end
end
return refused
"""
PROBE_SHA = hashlib.sha1(PROBE.encode()).hexdigest()


class ScriptPermissionError(redis.exceptions.NoPermissionError):
    """A command that a script of the script backend runs, refused by the ACL of the
    connection's user: which one, and where the docs list them all (a redis-py
    :class:`~redis.exceptions.NoPermissionError`, as the server's own refusal of ``EVALSHA``
    or of a key is; the guards and the middleware fail it open or closed as any Redis error).

    Attributes:
        script: the script's name (``gcra``, ``concurrency_acquire``...).
        commands: the commands refused, lower case as ``ACL SETUSER`` takes them (``("hmget",)``),
            in the order of the script's text; empty when they could not be told.
        server_message: the server's error, as redis-py gave it.
    """

    def __init__(self, script: str, server_message: str, commands: Sequence[str] = ()) -> None:
        self.script = script
        self.server_message = server_message
        self.commands: tuple[str, ...] = ()
        super().__init__(server_message)
        self.name(commands)

    def name(self, commands: Sequence[str]) -> None:
        """Say which commands were refused (lower case)."""
        self.commands = tuple(c.lower() for c in commands)
        if self.commands:
            said = _listed([c.upper() for c in self.commands])
            what = f"refuses {said}, which the script backend's {self.script} script runs: give the user " + " ".join(
                "+" + c for c in self.commands
            )
        else:
            said = _listed(list(script_commands(self.script)), "or")
            what = (
                f"refuses a command the script backend's {self.script} script runs ({said}; the server does not "
                "say which): give the user the script backend's commands"
            )
        self.args = (
            f"the ACL of the connection's user {what} (docs/managed.md, \"An application user's ACL\", lists every "
            f"command the scripts run); the server said: {self.server_message}",
        )


def _listed(words: list[str], last: str = "and") -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + f" {last} " + words[-1]


@functools.cache
def script_commands(name: str) -> tuple[str, ...]:
    """The commands that can fail the script ``name`` when the ACL refuses them (upper case),
    in the order of its text (see :data:`_FAILING`)."""
    return tuple(dict.fromkeys(m.group(1) or m.group(2) for m in _FAILING.finditer(script_source(name))))


def _command_on_line(name: str, line: int) -> str | None:
    lines = script_source(name).splitlines()
    found = _CALL.search(lines[line - 1]) if 1 <= line <= len(lines) else None
    return found.group(1) if found else None


def refused_in_script(error: BaseException, name: str) -> ScriptPermissionError | None:
    """The package's error for the server's ``error`` to a call of the script ``name`` when it
    is a command the script runs that the ACL refused (its command named when the server names
    it or the line it names is one of the script's commands; else to be found with
    :data:`PROBE`), or None for any other error."""
    text = str(error)
    named = _NAMED.search(text)
    if named:
        return ScriptPermissionError(name, text, [named.group(1)])
    if not text.startswith(_UNNAMED):
        return None
    at = _LINE.search(text)
    command = _command_on_line(name, int(at.group(1))) if at else None
    return ScriptPermissionError(name, text, [command] if command else [])


def probed(refused: ScriptPermissionError, reply: Any) -> None:
    """Name in ``refused`` the commands :data:`PROBE`'s ``reply`` gives."""
    if isinstance(reply, (list, tuple)):
        refused.name([w.decode() if isinstance(w, bytes) else str(w) for w in reply])
