"""Episode rows for tests: one factory, so a row built by hand has every column the store and the
metrics read, with defaults a test overrides only where it matters.

``episode_row(benchmark, **overrides)`` returns the columns every episode has (engine/storage/schema.py
``EPISODE_FIELDS``, but ``batch_id``, which the store sets) and the benchmark's own (its
``episode_fields``; newsagent's stored scores are computed from the row's ids): an ok episode
of task ``t0`` that finished normally, with small counters.
Overrides replace any column (or add one, e.g. ``judgements``); unknown columns are allowed,
since some tests pass rows straight to ``metrics`` / ``judge_requests`` with extra keys.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

_COMMON: dict[str, Any] = {
    "episode_id": "e0", "config_hash": "c", "task_id": "t0", "model": "m", "agent": "{}", "data": "{}", "seed": 0,
    "status": "ok", "error": "", "output": "", "n_steps": 1, "tokens_in": 1, "tokens_out": 1, "wall_time_s": 0.1,
    "started_at": NOW, "finished_at": NOW, "worker": "w", "replica": 0, "engine": "{}", "weights_id": "",
}

_BENCHMARK: dict[str, dict[str, Any]] = {
    "newsagent": {
        "finish_reason": "terminate", "title": "t0", "release_date": "2024-01-18", "final_draft": [],
        "draft_ids": [], "retrieved_ids": [], "reference_ids": [], "n_search": 0, "n_insert": 0, "n_remove": 0,
        "n_terminate": 1, "n_failed_insert": 0, "n_duplicate_insert": 0, "n_failed_remove": 0, "n_failed_parse": 0, "n_empty_search": 0,
        "operations": 0, "rephrase_attempts": 0, "trace_untraceable_share": None, "traceable": False,
    },
    "livenews": {
        "finish_reason": "finish", "agent": json.dumps({"mode": "search", "max_searches": 5, "max_visits": 5}),
        "data": json.dumps({"judge_probes": False}), "question": "question?", "gold": "gold", "cutoff": "2023-01-05",
        "source_domain": "cnn.com", "mode": "search", "max_searches": 5, "max_visits": 5, "n_searches": 0,
        "n_visits": 0, "n_refused_visits": 0, "n_turns": 1, "returned_urls": [], "visited_urls": [],
        "latest_result_date": "",
    },
    "analyst": {
        "finish_reason": "finish", "task_id": "crashes-2023",
        "data": json.dumps({"tasks_dir": "engine/benchmarks/analyst/sample_tasks"}), "mode": "vanilla",
        "setting": "", "report_tokens": 0, "chunks": 0, "map_calls": 0, "reduce_calls": 0, "steps": 0,
        "code_runs": 0, "code_failures": 0, "parse_failures": 0, "attempts": 1, "figures_written": [],
        "generation_info": "{}", "no_report_reason": "",
    },
}


def episode_row(benchmark: str = "newsagent", /, **overrides: Any) -> dict[str, Any]:
    """One episode row of ``benchmark`` (newsagent, livenews or analyst), ``overrides`` applied
    (a ``benchmark=`` override changes only the column)."""
    row = {**_COMMON, "benchmark": benchmark, **_BENCHMARK[benchmark], **overrides}
    if benchmark == "newsagent":       # the scores the agent stores, from the row's ids (unless given)
        from engine.benchmarks.newsagent.metrics import episode_scores

        row = {**episode_scores(list(row["retrieved_ids"]), list(row["draft_ids"]), list(row["reference_ids"])), **row}
    return row
