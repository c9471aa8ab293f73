"""Typed configuration. Every Hydra group in ``conf/`` is backed by one of these dataclasses,
so an unknown key or a value of the wrong type fails at composition time, before Ray starts.
``engine/config/validate.py`` adds the checks a type cannot express (ranges, enums, cross-field
rules); ``engine.config`` re-exports both.

The package holds one module per group: ``model`` (:class:`ModelConfig`), ``cluster``
(:class:`IndexConfig`, :class:`ClusterConfig`), ``run`` (:class:`RunConfig`, :class:`BudgetConfig`)
``judge`` (:class:`JudgeConfig`, :class:`SweepConfig`, :class:`StopConfig`) and ``build``
(:class:`BuildConfig`). Here are the
configs they compose into (:class:`Config` for runs, :class:`PairwiseConfig` for ``dateline
pairwise``), the allowed values of the enum-like fields and the helpers that read a config; every
name is importable from ``engine.config.schema``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.config.schema.build import BuildConfig
from engine.config.schema.cluster import ClusterConfig, IndexConfig
from engine.config.schema.judge import JudgeConfig, StopConfig, SweepConfig
from engine.config.schema.model import ModelConfig
from engine.config.schema.run import BUDGET_SCOPES, BudgetConfig, RunConfig


@dataclass
class Config:
    benchmark: Any = None          # the benchmark group's schema (from its folder)
    agent: Any = None              # the agent group's schema
    model: ModelConfig = field(default_factory=ModelConfig)
    index: IndexConfig = field(default_factory=IndexConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    run: RunConfig = field(default_factory=RunConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    stop: StopConfig = field(default_factory=StopConfig)
    build: BuildConfig | None = None   # ``dateline build`` only (conf/build/)
    # Known knowledge cutoffs by model name (served name or name -> YYYY-MM-DD), for models whose
    # config sets no model.knowledge_cutoff: conf/knowledge_cutoffs.yaml, which users extend.
    knowledge_cutoffs: dict[str, str] = field(default_factory=dict)


@dataclass
class PairwiseConfig:
    """``dateline pairwise``: judge the outputs of finished runs two at a time (its own stage,
    after generation). The judge is configured as for runs: ``judge=hosted`` hosts ``model``."""
    # Benchmark whose outputs are compared (it defines the prompts and the reference text).
    benchmark: str = "newsagent"
    # Run directories; every configuration of the benchmark found in them is a candidate system.
    runs: list[str] = field(default_factory=list)
    # Keep only systems whose config hash starts with one of these (empty: all of them).
    systems: list[str] = field(default_factory=list)
    # Add each task's reference (human-written) text as a candidate when the task has one.
    include_reference: bool = True
    # dimension (the paper's six dimensions, then overall), single (the one-question baseline) or both.
    protocol: str = "dimension"
    # Also judge every pair with the order swapped (measures position bias; doubles the calls).
    both_orders: bool = False
    # Seed of the candidate order; recorded with every comparison.
    seed: int = 0
    # Only the first N tasks by id (null: all).
    limit: int | None = None
    # Output folder: comparisons and judgements as Parquet, systems.json, a summary.
    out: str = "runs/pairwise"
    # Generation budget of one verdict.
    max_tokens: int = 768
    # Constrain the verdict to the prompt's JSON schema (vLLM structured outputs). Part of the
    # judge's identity: constrained and free verdicts are stored apart.
    guided_json: bool = True
    model: ModelConfig = field(default_factory=ModelConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)


SCORE_FAILURES = ("as_wrong", "exclude")
JUDGE_KINDS = ("none", "self", "hosted", "openai_compatible")
HOSTED_JUDGES = ("self", "hosted")      # kinds whose judge runs on replicas dateline hosts (or the model's endpoint)


def judge_model_config(model: ModelConfig, j: JudgeConfig) -> ModelConfig | None:
    """The model config a hosted judge runs on: ``judge.hosted_model``, or for ``self`` (and a
    pairwise ``hosted`` judge) the run's ``model``; None for an external or no judge."""
    if j.kind not in HOSTED_JUDGES:
        return None
    return j.hosted_model or model


def replica_count(m: ModelConfig, resolved: int | None = None) -> int:
    """Replicas of ``m``: its count, or for ``replicas: auto`` the resolved one (``resolved``), else
    1, the least it runs with (what plans and local clusters count before sizing)."""
    if m.replicas == "auto":
        return resolved if resolved is not None else 1
    return int(m.replicas)


def index_replica_count(i: IndexConfig, nodes: int | None = None) -> int:
    """Index replicas: the count, or for ``replicas: auto`` one per alive node (``nodes``; 1 before
    Ray is up, what a local cluster is sized with)."""
    return _per_node(i.replicas, nodes)


def service_replica_count(c: ClusterConfig, nodes: int | None = None) -> int:
    """Replicas of each benchmark service (``cluster.service_replicas``), as for the index."""
    return _per_node(c.service_replicas, nodes)


def _per_node(value: Any, nodes: int | None) -> int:
    return max(1, nodes or 1) if value == "auto" else int(value)


def engine_batch(m: ModelConfig) -> int:
    """Requests a replica computes at once, so what its clients keep in flight: one in
    reproducible mode on CPU (``max_num_seqs: 1``; more would only wait in the server's queue,
    their timeouts running), else ``model.max_inflight_per_replica``."""
    return 1 if m.reproducible and m.kind == "vllm" and m.num_gpus == 0 else m.max_inflight_per_replica


__all__ = [
    "BUDGET_SCOPES", "HOSTED_JUDGES", "JUDGE_KINDS", "SCORE_FAILURES", "BudgetConfig", "BuildConfig", "ClusterConfig", "Config",
    "IndexConfig", "JudgeConfig", "ModelConfig", "PairwiseConfig", "RunConfig", "StopConfig", "SweepConfig",
    "engine_batch", "index_replica_count", "judge_model_config", "replica_count", "service_replica_count",
]
