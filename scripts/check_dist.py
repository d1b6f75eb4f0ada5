#!/usr/bin/env python3
"""Checks a release folder as scripts/dist.sh writes it: python3 scripts/check_dist.py DIR VERSION.

- exactly the release's files, each named for VERSION, and SHA256SUMS right for each of them;
- each module an ELF shared object for its machine (x86_64, aarch64) whose highest glibc symbol
  version is 2.17 or older (read from its .gnu.version_r section, the versions the dynamic
  linker checks when the server loads it), and exporting RedisModule_OnLoad;
- each module unwinding with the system's unwinder: libgcc_s.so.1 among its DT_NEEDED, every
  _Unwind_* function it calls imported (none defined inside: no unwinder of its own, such as
  the LLVM libunwind that once crashed Redis 8.2 on a caught panic, see scripts/dist.sh), and
  no GCC_ symbol version newer than 4.2.0;
- each gateway (the rate limit service's binary) an ELF executable for its machine whose highest
  glibc symbol version is 2.17 or older;
- the wheel, the sdist and the npm tarball: VERSION in their metadata, and the script backend's
  Lua scripts inside.

Prints a line a file (name, size, and for a module its machine and highest glibc version);
exits non-zero with every problem found. The standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
import tarfile
import zipfile

GLIBC_MAX = (2, 17)
# ELF e_machine values.
MACHINES = {"x86_64": 62, "aarch64": 183}
GCC_MAX = (4, 2, 0)
SHT_DYNAMIC = 6
SHT_DYNSYM = 11
SHT_GNU_VERNEED = 0x6FFFFFFE
DT_NEEDED = 1
# The unwinder's entry points a Rust panic goes through (Rust's `unwind` crate).
UNWINDER = ("_Unwind_RaiseException", "_Unwind_Resume", "_Unwind_GetLanguageSpecificData")


class Elf:
    """The little of a 64-bit little-endian ELF file this needs: sections, strings, symbols."""

    def __init__(self, data: bytes) -> None:
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            raise ValueError("not a 64-bit little-endian ELF file")
        self.data = data
        (self.type, self.machine) = struct.unpack_from("<HH", data, 16)
        shoff = struct.unpack_from("<Q", data, 40)[0]
        shentsize, shnum = struct.unpack_from("<HH", data, 58)
        self.sections = []
        for i in range(shnum):
            name, kind, _flags, _addr, offset, size, link, info, _align, entsize = struct.unpack_from(
                "<IIQQQQIIQQ", data, shoff + i * shentsize
            )
            self.sections.append((kind, offset, size, link, info, entsize))

    def string(self, section: int, at: int) -> str:
        start = self.sections[section][1] + at
        return self.data[start : self.data.index(b"\0", start)].decode()

    def needed_versions(self) -> set[str]:
        """The symbol versions the file needs from its libraries (Vernaux names)."""
        names = set()
        for kind, offset, _size, link, count, _entsize in self.sections:
            if kind != SHT_GNU_VERNEED:
                continue
            at = offset
            for _ in range(count):
                _version, aux_count, _file, aux, following = struct.unpack_from("<HHIII", self.data, at)
                aux_at = at + aux
                for _ in range(aux_count):
                    _hash, _flags, _other, name, aux_next = struct.unpack_from("<IHHII", self.data, aux_at)
                    names.add(self.string(link, name))
                    aux_at += aux_next
                at += following
        return names

    def symbols(self, defined: bool) -> set[str]:
        """The dynamic symbols the file defines (`defined`), or those it imports."""
        names = set()
        for kind, offset, size, link, _info, entsize in self.sections:
            if kind != SHT_DYNSYM:
                continue
            for at in range(offset, offset + size, entsize):
                name, _info, _other, shndx = struct.unpack_from("<IBBH", self.data, at)
                if name and (shndx != 0) == defined:
                    names.add(self.string(link, name))
        return names

    def needed(self) -> list[str]:
        """The libraries the file names in DT_NEEDED, in order."""
        names = []
        for kind, offset, size, link, _info, _entsize in self.sections:
            if kind != SHT_DYNAMIC:
                continue
            for at in range(offset, offset + size, 16):
                tag, value = struct.unpack_from("<qQ", self.data, at)
                if tag == DT_NEEDED:
                    names.append(self.string(link, value))
        return names


def glibc(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.removeprefix("GLIBC_").split("."))


def highest_glibc(elf: Elf, path: str, problems: list[str]) -> tuple[int, ...]:
    """The newest glibc symbol version the file needs; a problem if none, or newer than 2.17."""
    versions = sorted((glibc(v) for v in elf.needed_versions() if v.startswith("GLIBC_") and v[6:7].isdigit()))
    highest = versions[-1] if versions else ()
    if not highest:
        problems.append(f"{path}: needs no glibc symbol version at all")
    elif highest > GLIBC_MAX:
        problems.append(f"{path}: needs GLIBC_{'.'.join(map(str, highest))}, newer than 2.17")
    return highest


def check_module(path: str, machine: str, problems: list[str]) -> str:
    with open(path, "rb") as f:
        elf = Elf(f.read())
    if elf.type != 3:  # ET_DYN
        problems.append(f"{path}: not a shared object (e_type {elf.type})")
    if elf.machine != MACHINES[machine]:
        problems.append(f"{path}: e_machine {elf.machine}, not {machine}'s {MACHINES[machine]}")
    highest = highest_glibc(elf, path, problems)
    if "RedisModule_OnLoad" not in elf.symbols(defined=True):
        problems.append(f"{path}: does not export RedisModule_OnLoad")
    if "libgcc_s.so.1" not in elf.needed():
        problems.append(f"{path}: does not link libgcc_s.so.1, the system's unwinder (needs {elf.needed()})")
    imported = elf.symbols(defined=False)
    missing = [name for name in UNWINDER if name not in imported]
    if missing:
        problems.append(f"{path}: does not import {', '.join(missing)}: an unwinder of its own is inside")
    gcc = sorted(
        tuple(int(part) for part in v.removeprefix("GCC_").split("."))
        for v in elf.needed_versions()
        if v.startswith("GCC_") and v[4:5].isdigit()
    )
    if gcc and gcc[-1] > GCC_MAX:
        problems.append(f"{path}: needs GCC_{'.'.join(map(str, gcc[-1]))}, newer than 4.2.0")
    named = {number: name for name, number in MACHINES.items()}.get(elf.machine, f"e_machine {elf.machine}")
    unwinder = f", unwinder libgcc_s.so.1 (GCC_{'.'.join(map(str, gcc[-1]))})" if gcc else ""
    return f"{named}, highest glibc symbol version GLIBC_{'.'.join(map(str, highest))}{unwinder}"


def check_gateway(path: str, machine: str, problems: list[str]) -> str:
    with open(path, "rb") as f:
        elf = Elf(f.read())
    if elf.type not in (2, 3):  # ET_EXEC, or ET_DYN for a position-independent executable
        problems.append(f"{path}: not an executable (e_type {elf.type})")
    if elf.machine != MACHINES[machine]:
        problems.append(f"{path}: e_machine {elf.machine}, not {machine}'s {MACHINES[machine]}")
    if not os.access(path, os.X_OK):
        problems.append(f"{path}: not executable")
    highest = highest_glibc(elf, path, problems)
    return f"{machine} executable, highest glibc symbol version GLIBC_{'.'.join(map(str, highest))}"


def main() -> int:
    folder, version = sys.argv[1], sys.argv[2]
    modules = {f"ratelimit-{version}-linux-{machine}.so": machine for machine in MACHINES}
    wheel = f"ratelimit_redis_module-{version}-py3-none-any.whl"
    sdist = f"ratelimit_redis_module-{version}.tar.gz"
    npm = f"ratelimit-redis-module-{version}.tgz"
    gateways = {f"ratelimit-gateway-{version}-linux-{machine}": machine for machine in MACHINES}
    expected = sorted([*modules, *gateways, wheel, sdist, npm, "SHA256SUMS"])
    problems: list[str] = []
    present = sorted(os.listdir(folder))
    if present != expected:
        problems.append(f"{folder} holds {present}, not {expected}")

    sums = {}
    with open(os.path.join(folder, "SHA256SUMS")) as f:
        for line in f:
            digest, name = line.rstrip("\n").split(maxsplit=1)
            sums[name.lstrip("*")] = digest
    if sorted(sums) != [name for name in expected if name != "SHA256SUMS"]:
        problems.append(f"SHA256SUMS lists {sorted(sums)}")

    for name in expected:
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            continue
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        if name != "SHA256SUMS" and sums.get(name) != digest:
            problems.append(f"{name}: sha256 {digest}, SHA256SUMS says {sums.get(name)}")
        detail = ""
        if name in modules:
            detail = check_module(path, modules[name], problems)
        elif name in gateways:
            detail = check_gateway(path, gateways[name], problems)
        elif name == wheel:
            with zipfile.ZipFile(path) as z:
                files = z.namelist()
                metadata = z.read(f"ratelimit_redis_module-{version}.dist-info/METADATA").decode()
            if f"\nVersion: {version}\n" not in metadata:
                problems.append(f"{name}: METADATA does not say Version: {version}")
            if "ratelimit_redis_module/lua/gcra.lua" not in files or "ratelimit_redis_module/py.typed" not in files:
                problems.append(f"{name}: the Lua scripts or py.typed are missing")
        elif name == sdist:
            with tarfile.open(path) as t:
                files = t.getnames()
            root = f"ratelimit_redis_module-{version}"
            if f"{root}/PKG-INFO" not in files or f"{root}/src/ratelimit_redis_module/lua/gcra.lua" not in files:
                problems.append(f"{name}: PKG-INFO or the Lua scripts are missing")
        elif name == npm:
            with tarfile.open(path) as t:
                files = t.getnames()
                package = json.load(t.extractfile("package/package.json"))  # type: ignore[arg-type]
            if package.get("version") != version:
                problems.append(f"{name}: package.json says {package.get('version')}")
            if "package/lua/gcra.lua" not in files:
                problems.append(f"{name}: the Lua scripts are missing")
        print(f"{name:48} {os.path.getsize(path):>10,} bytes  {detail}")

    for problem in problems:
        print(f"check_dist: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
