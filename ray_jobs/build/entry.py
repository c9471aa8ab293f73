"""``dateline build``: a run whose episodes make data (``../shared/design/house-and-build.md`` §5).

``dateline build build=livenews`` composes the run config with the build's group (its benchmark is
the builder's ref, ``livenews:qa``; its judge is the verifier), checks that the points are builds
and that generator and verifier are different models (by what each serves, never by name, unless
``build.allow_same_model=true``), runs them with ``dateline run``'s job (hosting, workers, budgets,
progress line, run-dir lock, resume by content keys, quarantine, provenance), then publishes each
point's release (:mod:`ray_jobs.build.publish`)."""

from __future__ import annotations

import logging
import sys

from engine.benchmarks import get_benchmark
from engine.build.adapter import BuildBenchmark
from engine.config import Config, ModelConfig, judge_model_config
from engine.errors import ConfigError
from engine.hosting.weights import weights_id
from engine.scoring.judges import same_model
from ray_jobs.build.publish import publish_point
from ray_jobs.run.entry import hydra_entry
from ray_jobs.run.info import RunInfo

log = logging.getLogger("dateline.build")


def check_builds(cfgs: list[Config]) -> None:
    """Every point is a build whose verifier is another model (or the build allows the same)."""
    for cfg in cfgs:
        if cfg.build is None:
            raise ConfigError("build: dateline build needs a build, e.g. build=livenews (conf/build/)")
        bench = get_benchmark(cfg.benchmark.name)
        if not isinstance(bench, BuildBenchmark):
            raise ConfigError(f"benchmark.name: {cfg.benchmark.name} is a benchmark, not a builder; "
                              f"dateline build runs <benchmark>:<builder> refs (build={cfg.build.name or '...'} sets one)")
        if cfg.judge.kind == "none":
            raise ConfigError("judge: a build needs a verifier: judge=hosted_model (judge.hosted_model=...) "
                              "or judge=openai_compatible")
        jm = verifier_model(cfg)
        if same_model(weights_id(jm), [jm.name, jm.served_name], [weights_id(cfg.model)],
                                         [cfg.model.name, cfg.model.served_name]):
            if not cfg.build.allow_same_model:
                raise ConfigError(
                    f"judge: the verifier ({jm.name}) serves the same model as the generator ({cfg.model.name}); "
                    "LiveNewsBench verifies with a different model to avoid self-evaluation bias: name another "
                    "(judge.hosted_model.path=...), or pass build.allow_same_model=true to mark the release SELF-VERIFIED")
            log.warning("build: the verifier is the generator's model: the release is marked SELF-VERIFIED")


def verifier_model(cfg: Config) -> ModelConfig:
    """The verifier as a model config: the hosted judge's, or the judge endpoint's."""
    jm = judge_model_config(cfg.model, cfg.judge)
    if jm is not None:
        return jm
    j = cfg.judge
    return ModelConfig(name=j.model, kind="openai_compatible", served_name=j.model, base_url=j.base_url,
                       api_key_env=j.api_key_env)


def publish_all(cfgs: list[Config], infos: list[RunInfo]) -> None:
    for cfg, info in zip(cfgs, infos, strict=True):
        out = publish_point(cfg, info)
        sys.stderr.write(f"dateline build: release {out}\n")


def hydra_build() -> None:
    hydra_entry("build", check_builds, publish_all)
