"""A build hook (hatchling): the script backend's scripts go into the wheel and the sdist.

Their one source is the repository's ``clients/lua/`` (its README, "One source"): no copy is
kept in this folder. Built from the repository, the hook copies ``../lua`` (the entry files
and ``lib/``) into the package as ``ratelimit_redis_module/lua/`` (in the sdist:
``src/ratelimit_redis_module/lua/``, so that a wheel built from the sdist, where
``../lua`` is not, has them as package files).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class ScriptsHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        source = Path(self.root).resolve().parent / "lua"
        packaged = Path(self.root) / "src" / "ratelimit_redis_module" / "lua"
        if not (source / "lib").is_dir():
            if not (packaged / "gcra.lua").is_file():
                raise RuntimeError(f"the script backend's scripts are in neither {source} nor {packaged}")
            return  # built from the sdist: they are package files already
        prefix = "src/ratelimit_redis_module/lua" if self.target_name == "sdist" else "ratelimit_redis_module/lua"
        for path in sorted(source.rglob("*.lua")):
            build_data["force_include"][str(path)] = f"{prefix}/{path.relative_to(source).as_posix()}"
