"""The import paths plugins and readers use keep every public name they had, whatever moves
behind them (issue 32: modules become packages and split by job; their old paths re-export).

``PUBLIC`` is each module's top-level public names (functions, classes, constants) as they were at
fb2ef9e, before the refactor began, read from its source with ``ast``. A name may be added to a
module; one is removed from this list only on purpose, said in the commit and the release notes.
"""

from __future__ import annotations

import importlib
import importlib.util

import pytest

PUBLIC: dict[str, tuple[str, ...]] = {
    "engine.config": (
        "BUDGET_SCOPES", "BudgetConfig", "ClusterConfig", "Config", "HOSTED_JUDGES", "IndexConfig",
        "JUDGE_KINDS", "JudgeConfig", "ModelConfig", "PairwiseConfig", "REDACTED", "RunConfig",
        "SCORE_FAILURES", "config_labels", "engine_batch", "judge_model_config", "redact", "redact_url",
        "replica_count", "secret_values", "stable_hash", "to_plain", "validate", "validate_judge",
        "validate_model", "validate_pairwise",
    ),
    "engine.protocol": (
        "Benchmark", "BenchmarkBase", "ChatModel", "DocHit", "EpisodeContext", "EpisodeOutcome",
        "IndexClient", "JudgeRequest", "Judged", "MetricRow", "PairwiseSpec", "Row", "ServiceSpec",
        "StepRecord", "Task", "TaskT", "dumps", "select_tasks",
    ),
    "engine.errors": (
        "BadDataError", "ConfigError", "CorruptShard", "DataError", "PlacementError", "StoreWriteError",
        "WorkerStartError",
    ),
    "engine.benchmarks": (
        "ENV", "extra_conf_dirs", "extra_roots", "get_benchmark", "runnable_benchmarks",
    ),
    "engine.storage": (
        "CALL_SCHEMA", "COMPARISON_SCHEMA", "EPISODE_FIELDS", "EPISODE_ROW_GROUP", "EpisodeStore", "Flush",
        "JUDGEMENT_ROW_GROUP", "JUDGEMENT_SCHEMA", "MESSAGE_SCHEMA", "METRIC_KEY", "METRIC_SCHEMA",
        "PLAN_SCHEMA", "PairwiseStore", "STEP_SCHEMA", "StoredPlan", "episode_schema", "is_run_dir", "is_uri",
        "local_root", "metric_rows", "open_root", "step_rows", "sub_uri", "upload_tree",
    ),
    "engine.llm": (
        "ChatClient", "Completion", "Endpoint", "EpisodeClient", "GenerationError", "MalformedResponse",
        "RETRY_STATUS", "ReplicaUnavailable", "RequestRejected", "RetryBudget", "Router", "SamplingParams",
        "Usage", "endpoint_down", "retry_after", "retryable", "unreachable",
    ),
    "engine.budget": (
        "Budget", "BudgetExhausted", "BudgetGate", "CHARS_PER_TOKEN", "Caps", "LedgerLost", "Reservation",
        "Spend", "TOKENS_PER_MESSAGE", "current_gate", "estimate_prompt_tokens",
    ),
    # names other modules import from these (not all of their public names): moved ones re-exported
    "engine.scoring.judges": ("evaluation_settings", "prompt_version", "source_version", "judge_identity", "same_model"),
    "engine.scoring.outcomes": ("dataset_key",),
    "ray_jobs.run": (
        "Plan", "Point", "data_identity", "engine_identity", "exit_code", "failure_summary",
        "failures", "hydra_entry", "interleave", "make_point", "needed_cpus", "plan", "plan_waves", "reduce_metrics",
        "run", "run_dir", "run_sweep", "summary",
    ),
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_old_import_paths_keep_their_public_names(module: str) -> None:
    mod = importlib.import_module(module)
    missing = [n for n in PUBLIC[module] if not hasattr(mod, n)]
    assert not missing, f"{module} no longer has {missing}: re-export them from where they moved"


def test_python_dash_m_ray_jobs_run_still_names_the_driver() -> None:
    """``python -m ray_jobs.run`` is how jobs are submitted (README, docker/, ``ray job submit``)."""
    spec = importlib.util.find_spec("ray_jobs.run")
    assert spec is not None
    if spec.submodule_search_locations is not None:        # a package: it needs a __main__
        assert importlib.util.find_spec("ray_jobs.run.__main__") is not None
