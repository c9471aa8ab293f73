"""Typed configuration: the dataclasses behind every Hydra group (``schema``), configurations as
plain values, hashes and redacted records (``values``), and the checks a type cannot express
(``validate``). Import from here; modules that ``engine.benchmarks`` or ``engine.protocol`` import
take ``engine.config.schema`` and ``engine.config.values`` directly (this package imports the
validation, which loads benchmarks: ``tests/test_boundaries.py``)."""

from engine.config.schema import (
    BUDGET_SCOPES,
    HOSTED_JUDGES,
    JUDGE_KINDS,
    SCORE_FAILURES,
    BudgetConfig,
    BuildConfig,
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
from engine.config.validate import validate, validate_judge, validate_model, validate_pairwise
from engine.config.values import (
    REDACTED,
    config_labels,
    redact,
    redact_url,
    secret_values,
    stable_hash,
    to_plain,
)

__all__ = [
    "BUDGET_SCOPES", "HOSTED_JUDGES", "JUDGE_KINDS", "REDACTED", "SCORE_FAILURES", "BudgetConfig", "BuildConfig", "ClusterConfig",
    "Config", "IndexConfig", "JudgeConfig", "ModelConfig", "PairwiseConfig", "RunConfig", "StopConfig", "SweepConfig",
    "config_labels",
    "engine_batch", "index_replica_count", "judge_model_config", "redact", "redact_url", "replica_count", "service_replica_count", "secret_values", "stable_hash",
    "to_plain", "validate", "validate_judge", "validate_model", "validate_pairwise",
]
