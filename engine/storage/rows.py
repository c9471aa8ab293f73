"""Rows as the stores take them: an episode's steps, a configuration's metric rows."""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any

from engine.protocol import MetricRow, StepRecord

log = logging.getLogger("dateline.storage")


def step_rows(episode_id: str, steps: list[StepRecord]) -> list[dict[str, Any]]:
    return [{"episode_id": episode_id, **asdict(s)} for s in steps]

def metric_rows(benchmark: str, model: str, config_hash: str, agent: str, data: str,
                rows: list[MetricRow], judge: str = "", judge_model: str = "",
                self_judged: bool = False, **counts: Any) -> list[dict[str, Any]]:
    """Metrics table rows; ``counts``: the columns saying what they are over (``n_planned``...,
    ``scope``, ``task_set``; engine/scoring/outcomes.py), the same for every row given."""
    return [{"benchmark": benchmark, "model": model, "config_hash": config_hash, "agent": agent, "data": data,
             "judge": judge, "judge_model": judge_model, "self_judged": self_judged,
             "metric": m.metric, "value": m.value, "n": m.n, "lo": m.lo, "hi": m.hi, "interval": m.interval,
             **counts} for m in rows]
