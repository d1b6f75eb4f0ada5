#!/usr/bin/env python3
"""The scripts held to the algorithms crate: every case of replies.json (written by
algorithms/src/vectors.rs from the crate's own decisions) and of sequences.json (written by
algorithms/src/vectors/sequences.rs: the options, RL.REFUND, policies, leases and the ranges'
edges) run through its scripts on a server without the module, call by call on one key (a
policy: one key per rule), each reply compared with the module's; and every bad call of
errors.json (written by src/commands/error_vectors.rs from the module's own parsers), each
error text compared with the module's.

No package in between: the scripts are assembled here as every loader assembles them (the
``lib/`` parts their ``-- needs:`` line names, then the file; README.md, "One source") and sent
with EVALSHA over a socket, the clock given with ``NOW``. Its keys are made persistent after
each call, in the same script (``persisting``): their TTLs run in real time, the calls' clock
does not.

    python3 clients/lua/conformance/run.py        # on redis-server from PATH
    RATELIMIT_SERVER=path/to/valkey-server python3 clients/lua/conformance/run.py

A call of replies.json with a cost of 1 is sent as a plain call (no COST), the shape a
script's fast path takes (README.md, "One source"). The calls of a case are pipelined.

Exits 1 at the first reply that differs, naming the case and the call. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE.parent
SCRIPTS_RUN = ["gcra", "tokenbucket", "leakybucket", "fixedwindow", "slidingwindow", "slidinglog", "warmup",
               "refund", "policy", "policyrefund", "concurrency_acquire", "concurrency_release", "counter"]
SCRIPT_OF = {
    "RL.GCRA": "gcra",
    "RL.TOKENBUCKET": "tokenbucket",
    "RL.LEAKYBUCKET": "leakybucket",
    "RL.FIXEDWINDOW": "fixedwindow",
    "RL.SLIDINGWINDOW": "slidingwindow",
    "RL.SLIDINGLOG": "slidinglog",
    "RL.WARMUP": "warmup",
}


def assemble(name: str) -> str:
    entry = (SCRIPTS / f"{name}.lua").read_text(encoding="utf-8")
    needs = re.search(r"^-- needs: (.+)$", entry, re.M)
    if needs is None:
        sys.exit(f"{name}.lua names no parts (its '-- needs:' line)")
    return "".join((SCRIPTS / "lib" / f"{n}.lua").read_text(encoding="utf-8") for n in needs.group(1).split()) + entry


def persisting(script: str) -> str:
    """``script`` unchanged as the body of a function, its keys made persistent after it in
    the same script, where the server's time stands still for their TTLs (on every server, Redis
    7.0's included). Made persistent by a PERSIST sent after the call, a key that the script gave a
    TTL of a millisecond could expire in between on a loaded machine (a fresh make test on
    Valkey 8.1 did so), and the next call found none."""
    return ("local reply = (function()\n" + script +
            "\nend)()\nfor _, key in ipairs(KEYS) do redis.call('PERSIST', key) end\nreturn reply\n")


class Resp:
    """A RESP2 connection: commands as arrays of bulk strings, replies parsed."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.file = self.sock.makefile("rb")

    @staticmethod
    def encode(args: tuple[object, ...] | list[object]) -> bytes:
        out = [f"*{len(args)}\r\n".encode()]
        for a in args:
            b = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        return b"".join(out)

    def call(self, *args: object) -> object:
        self.sock.sendall(self.encode(args))
        return self.read()

    def pipeline(self, commands: list[list[object]]) -> list[object]:
        """Sends every command, then reads their replies, in order."""
        self.sock.sendall(b"".join(self.encode(c) for c in commands))
        return [self.read() for _ in commands]

    def read(self) -> object:
        line = self.file.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.file.read(n + 2)[:-2]
            return data.decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError(f"unexpected reply {line!r}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(binary: str, folder: str) -> tuple[subprocess.Popen[bytes], Resp]:
    """A server on a free loopback port, ready when it answers PING (a port another process
    took is given up for another)."""
    for _ in range(20):
        port = free_port()
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", folder],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while proc.poll() is None:
            try:
                conn = Resp(port)
                # Ours, not another process that took the port first.
                if f"process_id:{proc.pid}\r" in str(conn.call("INFO", "server")):
                    return proc, conn
            except OSError:
                time.sleep(0.01)
        proc.wait()
    sys.exit(f"{binary} did not start")


def cases() -> list[dict]:
    """Every case of both files as {name, keys, calls: [[script, now_us, words, reply], ...]}."""
    out = []
    for case in json.loads((HERE / "replies.json").read_text())["cases"]:
        name = f"{case['command']} {' '.join(case['args'])}"
        calls = [[SCRIPT_OF[case["command"]], now_us,
                  case["args"] + ([] if cost == 1 else ["COST", str(cost)]), want]
                 for now_us, cost, want in case["calls"]]
        out.append({"name": f"replies.json: {name}", "keys": 1, "calls": calls})
    for case in json.loads((HERE / "sequences.json").read_text())["cases"]:
        out.append({**case, "name": f"sequences.json: {case['name']}"})
    return out


def shown(reply: object) -> object:
    """A reply as the files write it: an error as {"error": text}."""
    return {"error": str(reply)} if isinstance(reply, RuntimeError) else reply


def main() -> int:
    binary = os.environ.get("RATELIMIT_SERVER") or shutil.which("redis-server") or "redis-server"
    every = cases()
    folder = tempfile.mkdtemp(prefix="conformance-")
    proc, conn = start(binary, folder)
    try:
        shas, persisted = {}, {}
        for name in SCRIPTS_RUN:
            for into, text in ((shas, assemble(name)), (persisted, persisting(assemble(name)))):
                sha = conn.call("SCRIPT", "LOAD", text)
                if isinstance(sha, Exception):
                    sys.exit(f"{name}.lua: SCRIPT LOAD refused it: {sha}")
                assert sha == hashlib.sha1(text.encode()).hexdigest()
                into[name] = sha
        calls = 0
        for n, case in enumerate(every):
            keys = [f"{{conformance:{n}}}:{i}" for i in range(case["keys"])]
            commands: list[list[object]] = [["DEL", *keys]]
            for script, now_us, words, _ in case["calls"]:
                commands.append(["EVALSHA", persisted[script], len(keys), *keys, *words, "NOW", now_us])
            replies = conn.pipeline(commands)[1:]
            for i, ((script, now_us, words, want), got) in enumerate(zip(case["calls"], replies)):
                if shown(got) != want:
                    print(f"case {n} ({case['name']}), call {i}: {script}.lua {' '.join(map(str, words))} "
                          f"NOW {now_us}: the script replied {shown(got)!r}, the crate {want!r}",
                          file=sys.stderr)
                    return 1
                calls += 1
        # The argument errors (errors.json, written by src/commands/error_vectors.rs from the
        # module's own parsers): the same words, the same text.
        errors = json.loads((HERE / "errors.json").read_text())["errors"]
        replies = conn.pipeline([["EVALSHA", shas[script], 1, "{conformance}:error", *words]
                                 for script, words, _ in errors])
        for i, ((script, words, want), got) in enumerate(zip(errors, replies)):
            if shown(got) != {"error": want}:
                print(f"errors.json {i}: {script}.lua {words!r}: the script replied {shown(got)!r}, "
                      f"the module {want!r}", file=sys.stderr)
                return 1
        info = str(conn.call("INFO", "server"))
        found = re.search(r"valkey_version:(\S+)", info) or re.search(r"redis_version:(\S+)", info)
        server = ("Valkey " if "valkey_version" in info else "Redis ") + (found.group(1) if found else "?")
        print(f"conformance: {len(every)} cases, {calls} calls, every reply the crate's, and "
              f"{len(errors)} argument errors, every text the module's "
              f"(clients/lua/*.lua on {server})")
        return 0
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
