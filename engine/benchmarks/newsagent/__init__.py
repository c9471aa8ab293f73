"""newsagent (Chien et al.): write a news article from firsthand objects by time-aware search,
insert, remove and terminate, then rephrase. See ``../../../docs/design/newsagent.md``."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pyarrow as pa

from engine.benchmarks.newsagent import agent, metrics, pairwise, prompts
from engine.benchmarks.newsagent.config import NewsagentAgentConfig, NewsagentBenchmarkConfig
from engine.benchmarks.newsagent.data import NewsDataset, NewsTask, load_dataset
from engine.config import Config
from engine.errors import ConfigError
from engine.identity import prompt_version as text_version
from engine.identity import source_version
from engine.inputs import quarantine
from engine.inputs.order import task_order
from engine.inputs.paths import data_path
from engine.protocol import (
    Benchmark,
    BenchmarkBase,
    EpisodeContext,
    EpisodeOutcome,
    MetricRow,
    PairwiseSpec,
    select_tasks,
)
from indexes.corpus import Document

MODES = ("1-step", "2-step", "rule-based")


def _data_dir(cfg: Any) -> Path:
    return data_path(cfg.benchmark.data_dir)


def _load(cfg: Any, limit: int | None = None) -> NewsDataset:
    """The dataset, bad rows raising or skipped as ``benchmark.on_bad_rows`` says."""
    d = _data_dir(cfg)
    with quarantine.skipping(getattr(cfg.benchmark, "on_bad_rows", "error"), f"newsagent data {d}") as bad:
        return load_dataset(d, limit, bad)


@functools.lru_cache(maxsize=4)
def _references(data_dir: str) -> dict[str, str]:
    """The human-written article of each task of a dataset folder (the viewer's reference)."""
    if not data_dir:
        return {}
    with quarantine.skipping("skip", f"newsagent data {data_dir}") as bad:
        return {t.task_id: t.reference_article for t in load_dataset(data_path(data_dir), None, bad).tasks}


class NewsAgentBenchmark(BenchmarkBase):
    name = "newsagent"
    benchmark_schema = NewsagentBenchmarkConfig
    agent_schema = NewsagentAgentConfig
    # on_bad_rows picks which rows load (like limit); a task that loads runs the same either way,
    # so it is not part of an episode's identity
    # paths of data that may be Hugging Face hub ids (engine/inputs/hub.py)
    data_paths = ("data_dir",)
    evaluation_fields = ("on_bad_rows",)
    primary_metrics = ("search_f1", "edit_f1")
    per_task_metric = "edit_f1"
    failure_values = metrics.FAILURE_VALUES
    metric_order = metrics.METRIC_ORDER
    metric_kinds = metrics.METRIC_KINDS
    prompt_version = source_version(prompts)
    episode_fields: list[pa.Field[Any]] = [
        pa.field("title", pa.string()), pa.field("release_date", pa.string()),
        pa.field("final_draft", pa.list_(pa.string())), pa.field("draft_ids", pa.list_(pa.string())),
        pa.field("retrieved_ids", pa.list_(pa.string())), pa.field("reference_ids", pa.list_(pa.string())),
        *[pa.field(n, pa.int32()) for n in ("n_search", "n_insert", "n_remove", "n_terminate", "n_failed_insert",
                                            "n_failed_remove", "n_failed_parse", "n_empty_search", "operations",
                                            "rephrase_attempts", "n_duplicate_insert")],
        pa.field("trace_untraceable_share", pa.float64()), pa.field("traceable", pa.bool_()),
        *[pa.field(n, pa.float64()) for n in metrics.FUNCTION_METRICS],
    ]

    pairwise = PairwiseSpec(pairwise.PROTOCOLS, pairwise.DIMENSIONS, pairwise.messages, pairwise.parse,
                            pairwise.json_schema, lambda task: task.reference_article,
                            text_version(pairwise.DIMENSION_PROMPT, pairwise.SINGLE_PROMPT))

    def validate(self, cfg: Config) -> None:
        a = cfg.agent
        if a.mode not in MODES:
            raise ConfigError(f"agent.mode: must be one of {MODES}, got {a.mode!r}")
        for key in ("max_operations", "max_turns", "max_tokens_action", "rephrase_attempts",
                    "max_retrieved_in_observation"):
            if getattr(a, key) < 1:
                raise ConfigError(f"agent.{key}: must be >= 1, got {getattr(a, key)}")
        if a.prompt_variant not in prompts.PROMPT_VARIANTS:
            raise ConfigError(f"agent.prompt_variant: must be one of {prompts.PROMPT_VARIANTS}, "
                              f"got {a.prompt_variant!r}")
        if not 0.0 <= a.trace_tolerance <= 1.0:
            raise ConfigError(f"agent.trace_tolerance: must be in [0, 1], got {a.trace_tolerance}")
        d = _data_dir(cfg)
        if not (d / "tasks.jsonl").exists() or not (d / "objects.jsonl").exists():
            raise ConfigError(f"benchmark.data_dir: {d} needs tasks.jsonl and objects.jsonl")

    def load_tasks(self, cfg: Config) -> list[NewsTask]:
        b = cfg.benchmark
        return select_tasks(_load(cfg).tasks, b.task_ids, b.limit, str(_data_dir(cfg)),
                            task_order(cfg))

    def corpus(self, cfg: Config) -> list[Document]:
        return [Document(o.object_id, o.text, o.date) for o in _load(cfg).objects]

    async def run_episode(self, task: NewsTask, ctx: EpisodeContext) -> EpisodeOutcome:
        return await agent.run_episode(task, ctx)

    def uses_model(self, agent_cfg: Any) -> bool:
        return str(agent_cfg.mode) != "rule-based"

    def metrics(self, rows: list[dict[str, Any]]) -> list[MetricRow]:
        return metrics.aggregate(rows)

    def episode_values(self, rows: list[dict[str, Any]]) -> list[dict[str, float]]:
        return [metrics.episode_values(r) for r in rows]

    def episode_reference(self, row: dict[str, Any]) -> str:
        import json

        data = json.loads(row.get("data") or "{}")
        return _references(str(data.get("data_dir") or "")).get(row["task_id"], "")

    def task_failure_values(self, task: NewsTask) -> dict[str, float] | None:
        # function-wise scores exist only for articles with reference evidence
        return None if task.reference_evidence else dict(metrics.NO_REFERENCE_FAILURE_VALUES)


BENCHMARK: Benchmark[NewsTask] = NewsAgentBenchmark()
