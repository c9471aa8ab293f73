"""Benchmarks: each folder implements the protocol in :mod:`engine.protocol` as ``BENCHMARK``.

Adding one is a folder ``engine/benchmarks/<name>/`` and a config group entry
``conf/benchmark/<name>.yaml``; nothing else in the runtime changes.
"""

from __future__ import annotations

import importlib
from typing import Any

from engine.errors import ConfigError


def get_benchmark(name: str) -> Any:
    if not name.isidentifier():
        raise ConfigError(f"benchmark.name: {name!r} is not a benchmark folder name")
    try:
        module = importlib.import_module(f"engine.benchmarks.{name}")
    except ModuleNotFoundError as e:
        if e.name == f"engine.benchmarks.{name}":
            raise ConfigError(f"benchmark.name: no benchmark folder engine/benchmarks/{name}/") from None
        raise
    if not hasattr(module, "BENCHMARK"):
        raise ConfigError(f"benchmark.name: engine/benchmarks/{name}/ defines no BENCHMARK (not runnable yet)")
    return module.BENCHMARK


def runnable_benchmarks() -> list[str]:
    """Folders that implement the protocol (a folder still being built is skipped)."""
    import pkgutil

    names = []
    for mod in pkgutil.iter_modules(__path__):
        if mod.ispkg and hasattr(importlib.import_module(f"{__name__}.{mod.name}"), "BENCHMARK"):
            names.append(mod.name)
    return names
