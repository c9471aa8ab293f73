"""The knowledge-cutoff split: every number of a benchmark whose questions are dated, also over
the questions dated after the knowledge cutoff of the model that answered them (a question the
model could not have read about in its training data; LiveNewsBench's contamination-limited claim).

A benchmark opts in with two optional members (read with ``getattr``, like ``judge_metrics``):

* ``date_field``: the column of its episode rows that holds the question's date (livenews:
  ``cutoff``, the event date the agent's web is cut at);
* ``task_date(task)``: a task's date (YYYY-MM-DD) when it is planned. Planning records it with
  each planned episode (the plans table's ``date``), so an episode without a result of its own (an
  error, a budget stop, one never run) is still placed on its side of the cutoff.

The model's knowledge cutoff (``engine/config/cutoffs.py``) is recorded with the plan too: it is a
reading setting, in no id. A question is **after the cutoff** when its date is strictly after it.
The rules of what a number is over (``engine/scoring/outcomes.py``) hold unchanged on each side:
the same per-episode values, failures counting as the configuration's policy says, the same
interval (``stats.interval``). The metrics table gains, per configuration with a known cutoff:

* ``<metric>.after_cutoff`` for every mean: over the planned episodes of the questions after the
  cutoff, with its own n, 95% interval and method;
* ``questions_after_cutoff`` and ``questions_before_cutoff``: the questions (tasks) of the plan on
  each side (n: their planned episodes); a question of unknown date counts on neither;

and every row carries the cutoff (``knowledge_cutoff``). A configuration whose model has no known
cutoff has none of these rows, and every output says :data:`UNKNOWN` instead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from engine.protocol import MetricRow, Row
from engine.scoring import stats
from engine.scoring.kinds import kind_of
from engine.scoring.outcomes import EpisodeValue, Planned, episode_values, interval_cell, means, plan_of

SUFFIX = ".after_cutoff"
AFTER = "questions_after_cutoff"
BEFORE = "questions_before_cutoff"
UNKNOWN = "cutoff unknown"

__all__ = ["AFTER", "BEFORE", "SUFFIX", "UNKNOWN", "after_estimates", "after_values", "base_metric", "cutoff_note",
           "dates_of", "describe", "is_split", "split_lines", "split_rows", "splits", "task_date"]


def splits(bench: Any) -> bool:
    """Whether ``bench``'s questions are dated, so its results are split by the cutoff."""
    return bool(getattr(bench, "date_field", ""))


def task_date(bench: Any, task: Any) -> str | None:
    """A planned task's date (YYYY-MM-DD), None for a benchmark whose questions are undated."""
    fn = getattr(bench, "task_date", None)
    return fn(task) if splits(bench) and fn is not None else None


def is_split(metric: str) -> bool:
    """Whether a metrics-table row belongs to the split (a mean after the cutoff, or a count)."""
    return metric.endswith(SUFFIX) or metric in (AFTER, BEFORE)


def base_metric(metric: str) -> str:
    """``accuracy.after_cutoff`` -> ``accuracy``."""
    return metric[: -len(SUFFIX)] if metric.endswith(SUFFIX) else metric


def dates_of(bench: Any, rows: Sequence[Row], planned: Sequence[Planned] | None,
             recorded: Mapping[str, str]) -> dict[str, str]:
    """Each planned episode's question date: what its plan recorded, else its stored row's
    ``date_field``, else that of another stored episode of its task (plans written before dates
    were recorded). An episode found in none is left out (on neither side)."""
    field = getattr(bench, "date_field", "")
    by_task: dict[str, str] = {}
    by_episode: dict[str, str] = {}
    for r in rows:
        if d := r.get(field):
            by_episode[r["episode_id"]] = str(d)
            by_task.setdefault(r["task_id"], str(d))
    out = {}
    for p in plan_of(rows, planned):
        if d := recorded.get(p.episode_id) or by_episode.get(p.episode_id) or by_task.get(p.task_id):
            out[p.episode_id] = d
    return out


def after_values(values: Sequence[EpisodeValue], cutoff: str, dates: Mapping[str, str]) -> list[EpisodeValue]:
    """The planned episodes whose question is dated after ``cutoff``, each value renamed
    ``<metric>.after_cutoff`` (ISO dates compare as strings)."""
    return [EpisodeValue(v.planned, v.outcome, {k + SUFFIX: x for k, x in v.values.items()})
            for v in values if (d := dates.get(v.planned.episode_id)) is not None and d > cutoff]


def split_rows(bench: Any, rows: Sequence[Row], planned: Sequence[Planned] | None, policy: str, judged: bool,
               cutoff: str, recorded: Mapping[str, str]) -> list[MetricRow]:
    """The split's metric rows of a configuration seen through one judge (none: ``judged``
    False) over ``planned``: each mean after the cutoff, then the questions on each side. None
    for an undated benchmark or an unknown cutoff."""
    if not (splits(bench) and cutoff):
        return []
    dates = dates_of(bench, rows, planned, recorded)
    values = episode_values(bench, rows, planned, policy, judged)
    order = {k + SUFFIX: i for i, k in enumerate(getattr(bench, "metric_order", ()))}
    post = sorted(means(bench, after_values(values, cutoff, dates)), key=lambda m: (order.get(m.metric, len(order)), m.metric))
    tasks: dict[bool, set[str]] = {True: set(), False: set()}
    episodes = {True: 0, False: 0}
    for p in plan_of(rows, planned):
        if (d := dates.get(p.episode_id)) is not None:
            tasks[d > cutoff].add(p.task_id)
            episodes[d > cutoff] += 1
    return [*post, MetricRow(AFTER, float(len(tasks[True])), episodes[True]),
            MetricRow(BEFORE, float(len(tasks[False])), episodes[False])]


def describe(cutoff: str | None, after: int | None, before: int | None) -> str:
    """The split in words: ``knowledge cutoff 2023-12-31: 3 question(s) after it, 2 on or before
    it``, or :data:`UNKNOWN` (with how to set one)."""
    if not cutoff:
        return f"{UNKNOWN} (set model.knowledge_cutoff or add the model to conf/knowledge_cutoffs.yaml)"
    if after is None or before is None:
        return f"knowledge cutoff {cutoff}"
    return f"knowledge cutoff {cutoff}: {after} question(s) after it, {before} on or before it"


def cutoff_note(rows: Sequence[Mapping[str, Any]]) -> str:
    """What one configuration's metrics rows (one judge, one scope) say of its split, in words."""
    counts = {r["metric"]: int(r["value"]) for r in rows if r["metric"] in (AFTER, BEFORE)}
    cutoff = next((str(r["knowledge_cutoff"]) for r in rows if r.get("knowledge_cutoff")), None)
    return describe(cutoff, counts.get(AFTER), counts.get(BEFORE))


def after_estimates(bench: Any, rows: Sequence[Row], planned: Sequence[Planned] | None,
                    values: Sequence[EpisodeValue], cutoff: str, recorded: Mapping[str, str],
                    n_boot: int = stats.DEFAULT_BOOT) -> dict[str, stats.Estimate]:
    """``<metric>.after_cutoff`` -> its mean and interval (``stats.interval``) over the episodes
    of ``values`` (a configuration's :func:`~engine.scoring.outcomes.episode_values` over
    ``planned``) whose question is after the cutoff: the numbers of :func:`split_rows`, for an
    output that draws its own intervals (the report's, at its number of resamples)."""
    if not (splits(bench) and cutoff):
        return {}
    post = after_values(values, cutoff, dates_of(bench, rows, planned, recorded))
    out = {}
    for m in sorted({k for e in post for k in e.values}):
        out[m] = stats.interval([e.values.get(m, math.nan) for e in post], [e.planned.task_id for e in post],
                                kind_of(bench, m), n_boot, seed=0, what=f"{bench.name} {m}")
    return out


def split_lines(rows: Sequence[Mapping[str, Any]], metrics: Sequence[str]) -> list[str]:
    """One line per configuration and judge of ``rows`` (metrics-table rows of one scope): its
    split in words, then each of ``metrics`` after the cutoff with its interval and n, e.g.
    ``m [c1ab34cd]: knowledge cutoff 2023-12-31: 3 question(s) after it, 2 on or before it;
    accuracy after it 0.667 [0.094, 0.992] exact (n=3)``."""
    by: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in rows:
        by.setdefault((str(r["config_hash"]), str(r.get("judge") or "")), []).append(r)
    out = []
    for (h, judge), rs in by.items():
        have = {str(r["metric"]): r for r in rs}
        parts = [f"{m} after it {_value(have[m + SUFFIX])}" for m in metrics if m + SUFFIX in have]
        who = f"{rs[0]['model']} [{h[:8]}]" + (f" (judge {judge})" if judge else "")
        out.append(f"{who}: {cutoff_note(rs)}" + "".join(f"; {p}" for p in parts))
    return out


def _value(r: Mapping[str, Any]) -> str:
    cell = interval_cell(r)
    return f"{float(r['value']):.3f}" + (f" {cell}" if cell else "") + f" (n={r['n']})"
