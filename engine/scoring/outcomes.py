"""What a number means: which episodes every metric is over, decided here for every benchmark.

A configuration's **plan** (what its newest run planned: ``storage.StoredPlan``; for a store
written before plans were recorded, its stored episodes) is the denominator. Each planned
episode has one outcome:

* ``scored``: it finished with a result of its own (status ``ok``);
* ``error``: it failed (retries exhausted, a bug, a lost worker);
* ``budget_stopped``: ``run.budget`` stopped it, or it never started because the budget was spent;
* ``stopped_early``: an adaptive rule (``sweep=race``, ``stop=anytime_valid``: engine/scoring/racing/)
  stopped its configuration before it started; it counts in no mean under either policy, and the
  configuration is reported by its confidence sequence (``adaptive.json``), never by a bare mean;
* ``not_run``: it has no row at all (a run cut short, stopped at ``run.max_failures``, or not
  run yet).

A benchmark supplies per-episode values (``episode_values``) for scored episodes, the value a
planned episode without a scored result counts as (``failure_values``: 0 accuracy, the
checklist's floor of 20 %, ...), and which metrics need a judge (``judge_metrics``). Then:

* **run.score_failures = as_wrong** (the default): every episode that was planned and has no
  scored result adds its benchmark's failure value to every metric that has one (accuracy-like
  means). Metrics without a failure value (usage means, precision of an empty selection, a
  hallucination rate over claims) stay means over the scored episodes that have them.
* **exclude**: failures are left out of every mean (the user chose that explicitly).
* Either way every metric row carries ``n_planned``, ``n_scored``, ``n_error``,
  ``n_budget_stopped``, ``n_not_run``, and a configuration with any planned episode unscored is
  ``incomplete``; every table says so.
* Stored episodes the plan leaves out (an earlier run planned more: a larger ``benchmark.limit``)
  count in no mean, and are counted (``n_outside_plan``) under every output: a smaller re-run
  does not silently redefine the denominator (:func:`outside_note`).
* A judge that never saw a scored episode (it has no judgement of it, and the benchmark would ask
  one: the episode was added after that judge ran) leaves it out of its judge-based means instead
  of counting it ungraded; every row says how many it judged (``n_judged``) and such a view is
  ``PARTIALLY JUDGED`` (:func:`judged_note`).
* Judge-based metrics exist only where a judge ran: with no judge they are not produced at all
  (never a 0 from "nothing graded"), and the summary says to name one.
* **Comparisons** (paper tables, curves, cross-configuration tables) are made on the tasks every
  compared configuration finished (``scope = common``): the configurations of one benchmark and
  one dataset in a run dir, seen through one judge. A task counts as finished by a configuration
  when every planned episode of it (every seed) is scored. The tasks left out are counted.

``docs/design/what-a-number-means.md`` states these rules with a worked example per benchmark.
This module counts a configuration's outcomes and computes its means; the outcomes, the plan, the
counts and their marks and wording are ``outcome_marks.py``, the comparisons on common tasks
``common_tasks.py``. ``engine.scoring.outcomes`` re-exports both: readers import every name from here.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any

from engine.identity import dataset_key as dataset_key  # decided there; re-exported for readers of outcomes
from engine.protocol import MetricRow, Row
from engine.scoring.common_tasks import (
    ALL,
    COMMON,
    OWN_PLAN,
    common_note,
    common_set,
    finished_tasks,
    metric_common,
    metric_note,
    own_plan,
    planned_tasks,
    restrict,
)
from engine.scoring.kinds import kind_of
from engine.scoring.outcome_marks import (
    BUDGET_STOPPED,
    ERROR,
    INCOMPLETE,
    NOT_RUN,
    OUTCOMES,
    PARTIALLY_JUDGED,
    SCORED,
    SCREENING_MARK,
    STOPPED_EARLY,
    STOPPED_EARLY_MARK,
    STOPPED_EARLY_NOTE,
    UNGRADED,
    Counts,
    Planned,
    count_notes,
    error_kind,
    interval_cell,
    judged_note,
    mark,
    n_cell,
    outcome,
    outside_note,
    plan_of,
    race_cell,
)

POLICIES = ("as_wrong", "exclude")


def count(rows: Sequence[Row], planned: Sequence[Planned] | None) -> Counts:
    """The outcomes of the plan; the stored episodes outside it (only when a plan was recorded);
    and, when the rows carry a judge's judgements (``row["judge"]``), the scored planned episodes
    it saw (:func:`mark_unseen`)."""
    by = {r["episode_id"]: r for r in rows}
    plan = plan_of(rows, planned)
    n: dict[str, int] = defaultdict(int)
    seen = 0
    for p in plan:
        r = by.get(p.episode_id)
        n[outcome(r)] += 1
        seen += r is not None and outcome(r) == SCORED and not r.get("unseen")
    outside = len(by.keys() - {p.episode_id for p in plan}) if planned is not None else 0
    judged = any(r.get("judge") for r in rows)
    return Counts(len(plan), n[SCORED], n[ERROR], n[BUDGET_STOPPED], n[NOT_RUN], outside, seen if judged else None,
                  n[STOPPED_EARLY])


def mark_unseen(bench: Any, rows: Sequence[Row]) -> None:
    """Set ``row["unseen"]`` on one judge's view of a configuration: a scored episode that judge
    has no judgement of, which the benchmark would ask one of (an episode added after the judge
    ran, or one a budget kept from it). Its judge-based values are then absent, not "ungraded"
    (a judge that tried and failed). Episodes that need no judgement (a livenews answer that
    failed, an empty analyst report) are not unseen."""
    for r in rows:
        r["unseen"] = bool(r.get("judge") and outcome(r) == SCORED and not r.get("judgements")
                           and bench.judge_requests(r, {}))


def task_set(planned: Iterable[Planned]) -> str:
    """A short hash of the planned (task, seed) pairs: what identifies a configuration's task set
    (``benchmark.limit`` and the task selection decide it)."""
    from engine.config import stable_hash

    return stable_hash(sorted((p.task_id, p.seed) for p in planned), n=12)


@dataclass
class EpisodeValue:
    """One planned episode's contribution to the means."""
    planned: Planned
    outcome: str
    values: dict[str, float] = field(default_factory=dict)


def episode_values(bench: Any, rows: Sequence[Row], planned: Sequence[Planned] | None, policy: str,
                   judged: bool) -> list[EpisodeValue]:
    """Per planned episode (in plan order), the values its means count: a scored episode's own
    (``bench.episode_values``; judge-based ones only when ``judged``), an unscored one's
    ``bench.failure_values`` under ``as_wrong`` (none under ``exclude``). Stored rows outside the
    plan are not counted, nor the judge-based values of an episode the judge never saw
    (``row["unseen"]``, :func:`mark_unseen`)."""
    if policy not in POLICIES:
        raise ValueError(f"score_failures must be one of {POLICIES}, got {policy!r}")
    by = {r["episode_id"]: r for r in rows}
    plan = plan_of(rows, planned)
    judge_only = set(getattr(bench, "judge_metrics", ()))
    scored = [by[p.episode_id] for p in plan if outcome(by.get(p.episode_id)) == SCORED]
    own = iter(bench.episode_values(scored)) if scored else iter(())
    out = []
    for p in plan:
        o = outcome(by.get(p.episode_id))
        if o == SCORED:
            seen = judged and not by[p.episode_id].get("unseen")
            vals = {k: float(v) for k, v in next(own).items() if seen or k not in judge_only}
        elif policy == "exclude" or o == STOPPED_EARLY:      # stopped by a decision, not a failure: in no mean
            vals = {}
        else:
            vals = {m: float(v) for m, v in p.failure_values(bench).items() if judged or m not in judge_only}
        out.append(EpisodeValue(p, o, vals))
    return out


def means(bench: Any, values: Sequence[EpisodeValue]) -> list[MetricRow]:
    """The mean of each metric over the episodes that have it (NaN values are absent values), with
    its interval (``stats.interval`` by the metric's declared kind, ``bench.metric_kinds``: the one
    the report, leaderboard and export print)."""
    from engine.scoring import stats

    acc: dict[str, list[float]] = {}
    tasks: dict[str, list[str]] = {}
    for ev in values:
        for k, v in ev.values.items():
            if not math.isnan(v):
                acc.setdefault(k, []).append(v)
                tasks.setdefault(k, []).append(ev.planned.task_id)
    out = []
    for k, xs in acc.items():
        e = stats.interval(xs, tasks[k], kind_of(bench, k), seed=0, what=f"{bench.name} {k}")
        known = not math.isnan(e.lo)
        out.append(MetricRow(k, fmean(xs), len(xs), e.lo if known else None, e.hi if known else None, e.method))
    return out


def metric_rows(bench: Any, rows: Sequence[Row], planned: Sequence[Planned] | None, policy: str,
                judged: bool) -> tuple[list[MetricRow], Counts]:
    """A configuration's metrics seen through one judge (or none: ``judged`` False): the means of
    :func:`episode_values` under ``policy``, in the benchmark's order, then the benchmark's own
    other metrics (``bench.metrics`` over the scored rows: spreads, counts) that are not means;
    and the counts every row carries."""
    vals = episode_values(bench, rows, planned, policy, judged)
    by = {r["episode_id"]: r for r in rows}
    scored = [by[v.planned.episode_id] for v in vals if v.outcome == SCORED]
    mean_rows = {m.metric: m for m in means(bench, vals)}
    judge_only = set(getattr(bench, "judge_metrics", ()))
    extras = [m for m in (bench.metrics(scored) if scored else [])
              if m.metric not in mean_rows and (judged or m.metric not in judge_only)]
    seen = [r for r in scored if not r.get("unseen")]
    if judged and len(seen) < len(scored):      # judge-based extras over what the judge saw only
        again = {m.metric: m for m in (bench.metrics(seen) if seen else [])}
        extras = [x for m in extras if (x := again.get(m.metric) if m.metric in judge_only else m) is not None]
    order = list(getattr(bench, "metric_order", ()))
    ordered = [mean_rows.pop(k) for k in order if k in mean_rows] + sorted(mean_rows.values(), key=lambda m: m.metric)
    return ordered + extras, count(rows, planned)



def lacking(bench: Any, rows: Sequence[Row], planned: Sequence[Planned] | None, policy: str,
            judged: bool) -> dict[str, set[str]]:
    """Per metric a scored episode of this configuration has, the tasks where some scored episode
    has no value of it (an analyst report with an unrated criterion has no checklist score): a
    task is finished *for a metric* only when it is finished and none of its episodes lacks it."""
    vals = [e for e in episode_values(bench, rows, planned, policy, judged) if e.outcome == SCORED]
    keys = {k for e in vals for k in e.values}
    out: dict[str, set[str]] = {k: set() for k in keys}
    for e in vals:
        for k in keys:
            x = e.values.get(k)
            if x is None or math.isnan(x):
                out[k].add(e.planned.task_id)
    return out



# what other modules import from here: the names defined above, and those of outcome_marks and
# common_tasks (moved there; engine.scoring.outcomes keeps every name it had)
__all__ = [
    "ALL", "BUDGET_STOPPED", "COMMON", "Counts", "ERROR", "EpisodeValue", "INCOMPLETE", "NOT_RUN", "OUTCOMES",
    "OWN_PLAN", "PARTIALLY_JUDGED", "POLICIES", "Planned", "SCORED", "SCREENING_MARK", "STOPPED_EARLY", "STOPPED_EARLY_MARK",
    "STOPPED_EARLY_NOTE", "UNGRADED", "common_note", "common_set", "count", "count_notes", "dataset_key",
    "episode_values", "error_kind", "finished_tasks", "interval_cell", "judged_note", "lacking", "mark", "mark_unseen",
    "means", "metric_common", "metric_note", "metric_rows", "n_cell", "outcome", "outside_note", "own_plan", "plan_of",
    "planned_tasks", "race_cell", "restrict", "task_set",
]
