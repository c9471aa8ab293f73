"""A point resolved once: what one configuration of a sweep *is*, decided before any run dir is
locked and carried, unchanged, by every later stage (planning, budgets, worker setup, judging).

:func:`resolve` validates the configuration, looks its benchmark up once, decides whether it uses
the model, computes its identities (``engine/identity.py``: the same functions, called once each, so
no id changes), its run dir and the keys of the model pools it needs. The stages take the
:class:`PointSpec` instead of a ``Config`` and look nothing up again: a change to how a benchmark
or a pool is resolved is made here, once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.benchmarks import get_benchmark
from engine.config import Config, ModelConfig, judge_model_config, stable_hash, to_plain, validate
from engine.config.cutoffs import knowledge_cutoff
from engine.errors import ConfigError
from engine.identity import config_hash, config_identity, engine_identity
from engine.inputs.paths import out_path
from engine.protocol import Benchmark
from engine.storage import is_uri


def pool_key(m: ModelConfig) -> str:
    """The key of the pool that hosts model ``m`` (``Session.key``): two configurations whose
    models are the same share one pool."""
    return stable_hash(to_plain(m))


def run_dir(cfg: Config) -> Path | str:
    """The run dir: a URI (``s3://``, ``gs://``) as given, else a local path (see :func:`out_path`)."""
    return cfg.run.dir if is_uri(cfg.run.dir) else out_path(cfg.run.dir)


@dataclass(frozen=True)
class PointSpec:
    """What a configuration is, resolved once (:func:`resolve`)."""
    cfg: Config
    bench: Benchmark[Any]
    uses_model: bool                 # the agent calls the model (a rule-based agent does not)
    identity: dict[str, Any]         # engine.identity.config_identity
    config_hash: str
    engine: dict[str, Any]           # engine.identity.engine_identity: weights, engine args, prompt version
    run_dir: Path | str
    model_key: str                   # the pool of the model under test (pool_key(cfg.model))
    judge_model: ModelConfig | None  # the model a hosted judge (self or hosted) runs on, else None
    judge_key: str | None            # its pool (pool_key(judge_model)), else None
    # the model's knowledge cutoff (engine/config/cutoffs.py: its own field, else the config's
    # table), None when unknown or no model is used: how dated results are split, in no id
    knowledge_cutoff: str | None = None

    @property
    def key(self) -> str:
        """config hash @ run dir: the same configuration in the same run dir runs once in a sweep."""
        return f"{self.config_hash}@{self.run_dir}"


def resolve(cfg: Config, *, check_paths: bool = False) -> PointSpec:
    """``cfg`` as a :class:`PointSpec`: validated, its benchmark looked up, (``check_paths``: on a
    cluster this process starts itself) its hosted models' folders checked, its identities computed.
    Creates nothing: a refused run leaves no trace."""
    validate(cfg)
    bench = get_benchmark(cfg.benchmark.name)
    uses_model = bench.uses_model(cfg.agent)
    if check_paths:
        _check_model_paths(cfg, uses_model)
    ident = config_identity(cfg, bench, uses_model)
    jm = judge_model_config(cfg.model, cfg.judge)
    return PointSpec(cfg=cfg, bench=bench, uses_model=uses_model, identity=ident, config_hash=config_hash(ident),
                     engine=engine_identity(cfg, bench, uses_model), run_dir=run_dir(cfg),
                     model_key=pool_key(cfg.model), judge_model=jm,
                     judge_key=pool_key(jm) if jm is not None else None,
                     knowledge_cutoff=knowledge_cutoff(cfg.model, cfg.knowledge_cutoffs, uses_model))


def _check_model_paths(cfg: Config, uses_model: bool) -> None:
    for where, m in (("model", cfg.model if uses_model else None), ("judge.hosted_model", cfg.judge.hosted_model)):
        if m is not None and m.kind == "vllm" and m.path and not Path(m.path).exists():
            raise ConfigError(f"{where}.path: {m.path} does not exist on this machine; `bash scripts/setup.sh` "
                              "prepares the default model, or point it at a local model folder (nothing is "
                              "downloaded at run time)")
