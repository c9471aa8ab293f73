"""Typed configuration (a package since issue 44): ``engine.config.schema`` re-exports the
dataclasses behind every Hydra group and their helpers, wherever they live in the package."""

from engine.config.schema.model import (
    BUDGET_SCOPES,
    HOSTED_JUDGES,
    JUDGE_KINDS,
    SCORE_FAILURES,
    BudgetConfig,
    ClusterConfig,
    Config,
    IndexConfig,
    JudgeConfig,
    ModelConfig,
    PairwiseConfig,
    RunConfig,
    StopConfig,
    SweepConfig,
    engine_batch,
    index_replica_count,
    judge_model_config,
    replica_count,
    service_replica_count,
)

__all__ = [
    "BUDGET_SCOPES", "HOSTED_JUDGES", "JUDGE_KINDS", "SCORE_FAILURES", "BudgetConfig", "ClusterConfig", "Config",
    "IndexConfig", "JudgeConfig", "ModelConfig", "PairwiseConfig", "RunConfig", "StopConfig", "SweepConfig",
    "engine_batch", "index_replica_count", "judge_model_config", "replica_count", "service_replica_count",
]
