"""Hydra wiring: register the dataclass schemas and compose configs as the CLI does (also for tests
and the Python API)."""

from __future__ import annotations

import copy
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from engine.benchmarks import builder_refs, extra_conf_dirs, get_benchmark, runnable_benchmarks
from engine.config import (
    ClusterConfig,
    Config,
    IndexConfig,
    JudgeConfig,
    ModelConfig,
    PairwiseConfig,
    RunConfig,
    StopConfig,
    SweepConfig,
)
from engine.inputs.paths import conf_dir

CONF_DIR = str(conf_dir())
_registered = False
_benchmarks: set[str] = set()


def register() -> None:
    """Schemas for every group; each benchmark folder contributes ``<name>_schema`` entries
    (benchmarks that appear later, through ``DATELINE_BENCHMARKS``, on the next call)."""
    global _registered
    cs = ConfigStore.instance()
    for name in sorted(set(runnable_benchmarks()) - _benchmarks):
        b = get_benchmark(name)
        cs.store(group="benchmark", name=f"{b.name}_schema", node=b.benchmark_schema)
        cs.store(group="agent", name=f"{b.name}_schema", node=b.agent_schema)
        for ref in builder_refs(name):       # dateline build: <benchmark>_<builder>_schema
            built = get_benchmark(ref)
            cs.store(group="benchmark", name=f"{ref.replace(':', '_')}_schema", node=built.benchmark_schema)
            cs.store(group="agent", name=f"{ref.replace(':', '_')}_schema", node=built.agent_schema)
        _benchmarks.add(name)
    if _registered:
        return
    cs.store(name="config_schema", node=Config)
    cs.store(name="pairwise_schema", node=PairwiseConfig)
    for group, node in (("model", ModelConfig), ("index", IndexConfig), ("cluster", ClusterConfig),
                        ("run", RunConfig), ("judge", JudgeConfig), ("sweep", SweepConfig), ("stop", StopConfig)):
        cs.store(group=group, name=f"{group}_schema", node=node)
    if not OmegaConf.has_resolver("dateline_cache"):
        from engine.hosting.prepare_model import cache_dir

        OmegaConf.register_new_resolver("dateline_cache", lambda sub="": str(cache_dir() / sub))
    _registered = True


def searchpath_overrides() -> list[str]:
    """``hydra.searchpath`` for the config group files of benchmarks outside the repository
    (``DATELINE_BENCHMARKS``); none when there are none."""
    dirs = extra_conf_dirs()
    return [f"hydra.searchpath=[{','.join(d.as_uri() for d in dirs)}]"] if dirs else []


def _conf_fingerprint(dirs: Sequence[str]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((str(f), f.stat().st_mtime_ns) for d in dirs for f in Path(d).rglob("*.yaml")))


@functools.lru_cache(maxsize=32)
def _compose_groups(config_name: str, overrides: tuple[str, ...], _key: object) -> Any:
    """Hydra's compose of the config group choices (and any override that is not a plain value);
    ``_key`` (the YAML files' mtimes, the registered benchmarks) only invalidates the cache."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return hydra_compose(config_name=config_name, overrides=list(overrides))


def compose_node(config_name: str, overrides: Sequence[str]) -> Any:
    """Compose ``conf/<config_name>.yaml`` like the CLI does: dataclass instances all the way down.

    Hydra composes in two steps: the defaults list (group choices such as ``model=...``), merged
    into one config, then the value overrides (``model.name=x``) applied to it in order. The first
    step is most of the cost (0.16 s a compose: YAML, structured-config copies), and callers such as
    the tests compose the same group choices with other values again and again, so it is cached;
    the second is Hydra's own ``_apply_overrides_to_config`` on a copy, as Hydra runs it.
    ``tests/engine/config/test_config.py`` checks the result equals a plain Hydra compose."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.override_parser.types import OverrideType

    register()
    everything = [*searchpath_overrides(), *overrides]
    groups: list[str] = []
    values = []
    parsed = OverridesParser.create().parse_overrides(everything)
    for line, o in zip(everything, parsed, strict=True):
        k = o.key_or_group
        plain = (o.type == OverrideType.CHANGE and o.package is None and "." in k and "/" not in k
                 and not k.startswith("hydra.") and not o.is_sweep_override())
        if plain:
            values.append(o)
        else:
            groups.append(line)
    key = (_conf_fingerprint([CONF_DIR, *map(str, extra_conf_dirs())]), frozenset(_benchmarks))
    cfg = copy.deepcopy(_compose_groups(config_name, tuple(groups), key))
    ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
    return OmegaConf.to_object(cfg)


def _compose_uncached(config_name: str, overrides: Sequence[str]) -> Any:
    """One plain Hydra compose (what :func:`compose_node` must equal)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    register()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return OmegaConf.to_object(hydra_compose(config_name=config_name,
                                                 overrides=[*searchpath_overrides(), *overrides]))


def compose(overrides: Sequence[str] = ()) -> Config:
    """The run config, as ``dateline run`` composes it (validated)."""
    from engine.config import validate
    from engine.inputs.hub import resolve_config

    cfg = compose_node("config", overrides)
    assert isinstance(cfg, Config)
    resolve_config(cfg)
    validate(cfg)
    return cfg


def compose_pairwise(overrides: Sequence[str] = ()) -> PairwiseConfig:
    """The pairwise config, as ``dateline pairwise`` composes it (validated)."""
    from engine.config import validate_pairwise

    cfg = compose_node("pairwise", overrides)
    assert isinstance(cfg, PairwiseConfig)
    validate_pairwise(cfg)
    return cfg

