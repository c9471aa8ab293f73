"""One place per default: a config group file in ``conf/`` sets only what differs from its
schema's dataclass default (the dataclass is where a default lives and is documented)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.benchmarks import builder_refs, get_benchmark, runnable_benchmarks
from engine.config import ClusterConfig, IndexConfig, JudgeConfig, ModelConfig, RunConfig, StopConfig, SweepConfig
from ray_jobs.config.compose import compose
from tests.conftest import REPO

GROUPS: dict[str, type] = {"model": ModelConfig, "index": IndexConfig, "cluster": ClusterConfig, "run": RunConfig,
                           "judge": JudgeConfig, "sweep": SweepConfig, "stop": StopConfig}
FILES = sorted((REPO / "conf").glob("*/*.yaml"))


def schema_of(path: Path, data: dict[str, Any]) -> type | None:
    group = path.parent.name
    if group in GROUPS:
        return GROUPS[group]
    for entry in data.get("defaults", []):
        if isinstance(entry, str) and entry.endswith("_schema"):
            name = entry.removesuffix("_schema")
            # a builder's groups (dateline build): <benchmark>_<builder>_schema for the ref <benchmark>:<builder>
            refs = {r.replace(":", "_"): r for b in runnable_benchmarks() for r in builder_refs(b)}
            bench = get_benchmark(refs.get(name, name))
            return bench.benchmark_schema if group == "benchmark" else bench.agent_schema
    return None        # a variant of another file of its group (defaults: [newsagent]): overrides only


def default(cls: type, name: str) -> Any:
    f = {f.name: f for f in dataclasses.fields(cls)}[name]
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_group_file_repeats_a_dataclass_default(path):
    data = yaml.safe_load(path.read_text()) or {}
    cls = schema_of(path, data)
    if cls is None:
        # an experiment or one of its points (conf/experiment, conf/ablation): overrides of the root config
        assert data.get("defaults") or path.read_text().startswith("# @package _global_"), \
            f"{path}: neither a schema nor a parent file in its defaults list"
        return
    repeated = {k: v for k, v in data.items() if k != "defaults" and k in {f.name for f in dataclasses.fields(cls)}
                and default(cls, k) == v}
    assert not repeated, f"{path} repeats {cls.__name__} defaults {repeated}: drop them (the dataclass holds them)"


def test_the_default_run_composes_from_the_dataclasses():
    """The files now set less; what the default run composes is still the dataclass defaults
    plus the files' own values."""
    cfg = compose([])
    assert cfg.index == IndexConfig() and cfg.cluster == ClusterConfig()
    assert cfg.run == RunConfig(dir="runs/newsagent-sample")
    assert cfg.agent == get_benchmark("newsagent").agent_schema()
    m = cfg.model
    assert (m.kind, m.replicas, m.num_gpus, m.temperature) == ("vllm", 1, 0.0, 0.0)
    assert m.engine_args["enforce_eager"] is True and m.env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"


def test_sampling_defaults_are_the_model_configs():
    from engine.llm import SamplingParams

    assert SamplingParams() == SamplingParams.for_model(ModelConfig())
    m = ModelConfig(temperature=0.3, top_p=0.9, request_timeout_s=5.0, max_retries=7, retry_backoff_s=0.1,
                    retry_backoff_max_s=0.2)
    assert SamplingParams.for_model(m) == SamplingParams(0.3, 0.9, None, 5.0, 7, 0.1, 0.2)
    j = JudgeConfig(temperature=0.2, request_timeout_s=9.0)
    assert SamplingParams.for_judge(j) == SamplingParams(0.2, 1.0, None, 9.0, 1)
