"""Benchmarks: each folder implements the protocol in :mod:`engine.protocol` as ``BENCHMARK``.

Adding one is a folder ``engine/benchmarks/<name>/`` and its config group entries
``conf/benchmark/<name>.yaml`` and ``conf/agent/<name>.yaml``; nothing else in the runtime changes.

A benchmark can also live outside this repository: ``DATELINE_BENCHMARKS`` lists folders
(``os.pathsep``-separated) whose sub-folders are benchmark packages, imported as
``engine.benchmarks.<name>``; a ``conf/`` folder next to them holds their config group files and
joins Hydra's search path. The variable reaches Ray workers with the run.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from pathlib import Path
from typing import Any

from engine.build.adapter import BuildBenchmark
from engine.build.protocol import Builder
from engine.errors import ConfigError
from engine.protocol import Benchmark

ENV = "DATELINE_BENCHMARKS"


def extra_roots() -> list[Path]:
    """The folders ``DATELINE_BENCHMARKS`` names (each must exist)."""
    roots = []
    for part in os.environ.get(ENV, "").split(os.pathsep):
        if not part.strip():
            continue
        root = Path(part).expanduser().resolve()
        if not root.is_dir():
            raise ConfigError(f"{ENV}: {root} is not a folder")
        roots.append(root)
    return roots


_BUILTIN = list(__path__)


def _extend_path() -> None:
    """This package's path: its own folder, then the ``DATELINE_BENCHMARKS`` folders as set now."""
    __path__[:] = [*_BUILTIN, *(str(r) for r in extra_roots() if str(r) not in _BUILTIN)]


# At import, so that objects of an external benchmark (tasks sent to a Ray worker) unpickle
# before anything asks for the benchmark by name.
_extend_path()


def extra_conf_dirs() -> list[Path]:
    """``conf/`` folders of the external benchmark roots, for Hydra's search path."""
    return [r / "conf" for r in extra_roots() if (r / "conf").is_dir()]


def get_benchmark(name: str) -> Benchmark[Any]:
    """The ``BENCHMARK`` of folder ``name``, checked against :class:`engine.protocol.Benchmark`
    (the task type is the benchmark's own, so ``Any`` here). ``<name>:<builder>`` is that
    benchmark's builder as a benchmark (``engine.build.adapter.BuildBenchmark``: ``dateline build``)."""
    if ":" in name:
        return _builder(name)
    if not name.isidentifier():
        raise ConfigError(f"benchmark.name: {name!r} is not a benchmark folder name")
    _extend_path()
    try:
        module = importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as e:
        if e.name == f"{__name__}.{name}":
            where = ", ".join(["engine/benchmarks", *map(str, extra_roots())])
            raise ConfigError(f"benchmark.name: no benchmark folder {name}/ in {where}") from None
        raise
    bench = getattr(module, "BENCHMARK", None)
    if bench is None:
        raise ConfigError(f"benchmark.name: {module.__file__} defines no BENCHMARK (not runnable yet)")
    if not isinstance(bench, Benchmark):
        missing = [m for m in _members() if not hasattr(bench, m)]
        raise ConfigError(f"benchmark.name: {name}'s BENCHMARK ({type(bench).__name__}) does not implement "
                          f"engine.protocol.Benchmark: missing {', '.join(missing)} "
                          "(subclass engine.protocol.BenchmarkBase for the optional parts)")
    return bench


def _members() -> list[str]:
    return sorted(k for k, v in vars(Benchmark).items()
                  if (callable(v) or isinstance(v, property)) and not k.startswith("_"))


def runnable_benchmarks() -> list[str]:
    """Folders whose ``BENCHMARK`` implements the protocol (a folder still being built, or one
    that breaks the protocol, is skipped here; asking for it by name says what is wrong)."""
    _extend_path()
    names = []
    for mod in pkgutil.iter_modules(__path__):
        if not mod.ispkg:
            continue
        try:
            get_benchmark(mod.name)
        except ConfigError:
            continue
        names.append(mod.name)
    return names


_BUILDS: dict[str, Benchmark[Any]] = {}


def _builder(ref: str) -> Benchmark[Any]:
    """``<benchmark>:<builder>``: the builder named in the benchmark's ``builders``, as a
    benchmark (one object per ref and process)."""
    if ref in _BUILDS:
        return _BUILDS[ref]
    name, _, builder = ref.partition(":")
    bench = get_benchmark(name)
    builders = getattr(bench, "builders", {}) or {}
    if builder not in builders:
        raise ConfigError(f"benchmark.name: {name} has no builder {builder!r}"
                          + (f" (it has: {', '.join(sorted(builders))})" if builders else " (it offers none)"))
    b = builders[builder]
    if not isinstance(b, Builder):
        raise ConfigError(f"benchmark.name: {ref}'s builder ({type(b).__name__}) does not implement "
                          "engine.build.protocol.Builder")
    _BUILDS[ref] = out = BuildBenchmark(bench, b)
    return out


def builder_refs(name: str) -> list[str]:
    """``<name>:<builder>`` of benchmark ``name``'s builders."""
    return [f"{name}:{b}" for b in sorted(getattr(get_benchmark(name), "builders", {}) or {})]
