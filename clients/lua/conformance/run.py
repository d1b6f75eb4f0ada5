#!/usr/bin/env python3
"""The scripts held to the algorithms crate: every case of replies.json (written by
algorithms/src/vectors.rs from the crate's own decisions) run through its script on a server
without the module, call by call on one key, each reply compared with the module's.

No package in between: the scripts are assembled here as every loader assembles them (the
``lib/`` parts their ``-- needs:`` line names, then the file; README.md, "One source") and sent
with EVALSHA over a socket, the clock given with ``NOW``. Between calls the key is made
persistent: its TTL runs in real time, the calls' clock does not.

    python3 clients/lua/conformance/run.py        # on redis-server from PATH
    RATELIMIT_SERVER=path/to/valkey-server python3 clients/lua/conformance/run.py

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


class Resp:
    """A RESP2 connection: commands as arrays of bulk strings, replies parsed."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.file = self.sock.makefile("rb")

    def call(self, *args: object) -> object:
        out = [f"*{len(args)}\r\n".encode()]
        for a in args:
            b = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        self.sock.sendall(b"".join(out))
        return self.read()

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


def main() -> int:
    binary = os.environ.get("RATELIMIT_SERVER") or shutil.which("redis-server") or "redis-server"
    vectors = json.loads((HERE / "replies.json").read_text())
    folder = tempfile.mkdtemp(prefix="conformance-")
    proc, conn = start(binary, folder)
    try:
        shas = {}
        for command, name in SCRIPT_OF.items():
            sha = conn.call("SCRIPT", "LOAD", assemble(name))
            if isinstance(sha, Exception):
                sys.exit(f"{name}.lua: SCRIPT LOAD refused it: {sha}")
            assert sha == hashlib.sha1(assemble(name).encode()).hexdigest()
            shas[command] = sha
        calls = 0
        for n, case in enumerate(vectors["cases"]):
            key = f"conformance:{n}"
            conn.call("DEL", key)
            for i, (now_us, cost, want) in enumerate(case["calls"]):
                got = conn.call("EVALSHA", shas[case["command"]], 1, key, *case["args"], "COST", cost,
                                "NOW", now_us)
                if got != want:
                    print(f"case {n} ({case['command']} {' '.join(case['args'])}), call {i} "
                          f"(NOW {now_us}, COST {cost}): the script replied {got!r}, the crate {want!r}",
                          file=sys.stderr)
                    return 1
                conn.call("PERSIST", key)
                calls += 1
        info = str(conn.call("INFO", "server"))
        found = re.search(r"valkey_version:(\S+)", info) or re.search(r"redis_version:(\S+)", info)
        server = ("Valkey " if "valkey_version" in info else "Redis ") + (found.group(1) if found else "?")
        print(f"conformance: {len(vectors['cases'])} cases, {calls} calls, every reply the crate's "
              f"(clients/lua/*.lua on {server})")
        return 0
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
