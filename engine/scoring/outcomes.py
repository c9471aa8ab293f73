"""What a number means: which episodes every metric is over, decided here for every benchmark.

A configuration's **plan** (what its newest run planned: ``storage.StoredPlan``; for a store
written before plans were recorded, its stored episodes) is the denominator. Each planned
episode has one outcome:

* ``scored``: it finished with a result of its own (status ``ok``);
* ``error``: it failed (retries exhausted, a bug, a lost worker);
* ``budget_stopped``: ``run.budget`` stopped it, or it never started because the budget was spent;
* ``stopped_early``: an adaptive rule (``sweep=race``, ``stop=anytime_valid``: engine/scoring/racing.py)
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
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any

from engine.identity import dataset_key as dataset_key  # decided there; re-exported for readers of outcomes
from engine.protocol import MetricRow, Row

SCORED, ERROR, BUDGET_STOPPED, NOT_RUN = "scored", "error", "budget_stopped", "not_run"
STOPPED_EARLY = "stopped_early"
OUTCOMES = (SCORED, ERROR, BUDGET_STOPPED, STOPPED_EARLY, NOT_RUN)
POLICIES = ("as_wrong", "exclude")
ALL, COMMON = "all", "common"


def outcome(row: Row | None) -> str:
    """The outcome of a planned episode from its stored row (None: no row)."""
    if row is None:
        return NOT_RUN
    status = row.get("status")
    if status == "ok":
        return SCORED
    if status == "budget_exhausted":
        return BUDGET_STOPPED
    if status == "stopped_early":
        return STOPPED_EARLY
    return ERROR


@dataclass(frozen=True)
class Planned:
    episode_id: str
    task_id: str
    seed: int = 0
    # what it counts as without a scored result, when its task differs from the benchmark's
    # ``failure_values`` (``task_failure_values``: e.g. no checklist score for a task without one)
    failure: str = ""                # JSON; "" = the benchmark's failure_values

    def failure_values(self, bench: Any) -> dict[str, float]:
        return json.loads(self.failure) if self.failure else dict(getattr(bench, "failure_values", {}))


@dataclass(frozen=True)
class Counts:
    """What a configuration's numbers are over."""
    n_planned: int
    n_scored: int
    n_error: int
    n_budget_stopped: int
    n_not_run: int
    n_outside_plan: int = 0          # stored episodes the plan leaves out (in no mean)
    n_judged: int | None = None      # scored planned episodes the view's judge saw (None: no judge)
    n_stopped_early: int = 0         # never started: an adaptive rule stopped the configuration (in no mean)

    @property
    def incomplete(self) -> bool:
        return self.n_scored < self.n_planned

    @property
    def n_unseen(self) -> int:
        """Scored planned episodes the view's judge never saw."""
        return self.n_scored - self.n_judged if self.n_judged is not None else 0

    @property
    def partially_judged(self) -> bool:
        return self.n_unseen > 0

    def columns(self) -> dict[str, Any]:
        return {"n_planned": self.n_planned, "n_scored": self.n_scored, "n_error": self.n_error,
                "n_budget_stopped": self.n_budget_stopped, "n_not_run": self.n_not_run,
                "incomplete": self.incomplete, "n_outside_plan": self.n_outside_plan, "n_judged": self.n_judged,
                "n_stopped_early": self.n_stopped_early}

    def describe(self) -> str:
        """``"4 of 6 scored (1 error, 1 budget-stopped)"`` / ``"6 of 6 scored"``."""
        parts = [f"{n} {what}" for n, what in ((self.n_error, "error" if self.n_error == 1 else "errors"),
                                              (self.n_budget_stopped, "budget-stopped"),
                                              (self.n_stopped_early, "stopped early"),
                                              (self.n_not_run, "not run")) if n]
        return f"{self.n_scored} of {self.n_planned} scored" + (f" ({', '.join(parts)})" if parts else "")

    @staticmethod
    def of_row(r: Mapping[str, Any]) -> Counts:
        """From a metrics table row (rows written before these columns: n for every count)."""
        n = int(r.get("n") or 0)

        def get(k: str, d: int) -> int:
            return int(r[k]) if r.get(k) is not None else d
        judged = r.get("n_judged")
        return Counts(get("n_planned", n), get("n_scored", n), get("n_error", 0), get("n_budget_stopped", 0),
                      get("n_not_run", 0), get("n_outside_plan", 0), int(judged) if judged is not None else None,
                      get("n_stopped_early", 0))


INCOMPLETE = "incomplete"
# what a configuration of a benchmark with judge-based metrics says when no judge ran
UNGRADED = ("ungraded: name a judge (judge=openai_compatible judge.base_url=... judge.model=..., or "
            "judge=hosted_model judge.hosted_model.path=...; judge=self lets the model under test grade itself, "
            "marked SELF-JUDGED)")


def error_kind(row: Mapping[str, Any]) -> str:
    """What kind of failure an unscored episode is, for grouping: ``budget_exhausted``, or the
    error's exception types (``GenerationError: InternalServerError``)."""
    if row.get("status") in ("budget_exhausted", "stopped_early"):
        return str(row["status"])
    first = str(row.get("error") or "").splitlines()[0] if row.get("error") else ""
    if "ReplicaUnavailable: " in first:           # the pool's cause: "ReplicaUnavailable: replica restarting: wedged"
        return "ReplicaUnavailable: " + first.split("ReplicaUnavailable: ", 1)[1].split(" | ", 1)[0][:120]
    parts = [p.strip() for p in first.split(":")[:2]]
    kinds = [p for p in parts if p and p.replace("_", "").isalnum() and p[0].isupper()]
    return ": ".join(kinds) or (first[:60] or "error")


def mark(counts: Counts) -> str:
    """The mark an incomplete configuration carries wherever it appears ("" when complete)."""
    return f"{INCOMPLETE}: {counts.describe()}" if counts.incomplete else ""


def n_cell(row: Mapping[str, Any]) -> str:
    """A table's "n" cell for a configuration (from any of its metric rows): the scored and
    planned episodes, marked when incomplete: ``"6/6"``, ``"4/6 INCOMPLETE (1 error, 1 budget-stopped)"``,
    and when its judge saw only some: ``"6/6 PARTIALLY JUDGED (4 judged)"``."""
    c = Counts.of_row(row)
    judged = f" {PARTIALLY_JUDGED} ({c.n_judged} judged)" if c.partially_judged else ""
    if c.n_stopped_early:
        return f"{c.n_scored}/{c.n_planned} {STOPPED_EARLY_MARK} (see its anytime-valid interval){judged}"
    if not c.incomplete:
        return f"{c.n_scored}/{c.n_planned}{judged}"
    why = c.describe().partition(" scored")[2].strip()
    return f"{c.n_scored}/{c.n_planned} INCOMPLETE{(' ' + why) if why else ''}{judged}"


PARTIALLY_JUDGED = "PARTIALLY JUDGED"
STOPPED_EARLY_MARK = "STOPPED EARLY"
STOPPED_EARLY_NOTE = ("an adaptive rule stopped this configuration; the means of the tasks it ran are biased after "
                      "adaptive stopping (Shin et al. 2019) and are not its score: read its anytime-valid interval of "
                      "the full-set mean (adaptive.json, the run summary, the report)")


def outside_note(n: int) -> str:
    """The sentence every output of a configuration carries when stored episodes lie outside its
    plan ("" for none): they are in no number, and a smaller re-run must not pass for the whole."""
    if not n:
        return ""
    return (f"{n} stored episode{'s are' if n != 1 else ' is'} outside this plan (an earlier run planned more; "
            "run with that benchmark.limit / task_ids / num_seeds to count them).")


def judged_note(judge: str, c: Counts, policy: str = "as_wrong") -> str:
    """The line a view whose judge never saw some scored episodes carries ("" when it saw every
    one): how much of the plan it judged, and what its judge-based means are over (the planned
    episodes less the unseen ones under as_wrong; the judged ones under exclude)."""
    if not c.partially_judged or c.n_judged is None:
        return ""
    n = (c.n_planned if policy == "as_wrong" else c.n_scored) - c.n_unseen
    return (f"{PARTIALLY_JUDGED}: judge {judge} judged {c.n_judged} of {c.n_planned} planned episodes "
            f"({c.n_unseen} scored one{'s' if c.n_unseen != 1 else ''} it never saw: run again with this judge to "
            f"judge them); its judge-based metrics leave {'them' if c.n_unseen != 1 else 'it'} out (n={n}).")


def count_notes(row: Mapping[str, Any]) -> list[str]:
    """What a configuration's counts add under any output, from one of its metric rows: its
    judge's coverage (:func:`judged_note`) and the stored episodes outside its plan (:func:`outside_note`)."""
    c = Counts.of_row(row)
    notes = [judged_note(str(row.get("judge") or ""), c, str(row.get("score_failures") or "as_wrong")),
             outside_note(c.n_outside_plan)]
    return [n for n in notes if n]


def interval_cell(row: Mapping[str, Any]) -> str:
    """A metrics row's interval as printed beside its value: ``"[0.000, 0.265] exact"``,
    ``"too few tasks for an interval"``, or "" for a value that is not a mean (and older tables)."""
    lo, hi, how = row.get("lo"), row.get("hi"), row.get("interval") or ""
    if lo is not None and hi is not None and not (math.isnan(lo) or math.isnan(hi)):
        return f"[{lo:.3f}, {hi:.3f}] {how}".strip()
    return "too few tasks for an interval" if how == "too_few_tasks" else ""


def plan_of(rows: Sequence[Row], planned: Sequence[Planned] | None) -> list[Planned]:
    """The plan, or (no plan recorded) the stored episodes as the plan."""
    if planned is not None:
        return list(planned)
    return [Planned(r["episode_id"], r["task_id"], int(r.get("seed") or 0)) for r in rows]


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


def means(values: Sequence[EpisodeValue]) -> list[MetricRow]:
    """The mean of each metric over the episodes that have it (NaN values are absent values), with
    its interval (``stats.interval``: the one the report, leaderboard and export print)."""
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
        e = stats.interval(xs, tasks[k], seed=0)
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
    mean_rows = {m.metric: m for m in means(vals)}
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


# -- comparisons on common tasks -----------------------------------------------------------------
def finished_tasks(rows: Sequence[Row], planned: Sequence[Planned] | None) -> set[str]:
    """Tasks every planned episode of which (every seed) is scored."""
    by = {r["episode_id"]: r for r in rows}
    ok: dict[str, bool] = {}
    for p in plan_of(rows, planned):
        ok[p.task_id] = ok.get(p.task_id, True) and outcome(by.get(p.episode_id)) == SCORED
    return {t for t, v in ok.items() if v}


def restrict(rows: Sequence[Row], planned: Sequence[Planned] | None, tasks: set[str]) -> list[Planned]:
    """The plan cut to ``tasks``."""
    return [p for p in plan_of(rows, planned) if p.task_id in tasks]


def planned_tasks(rows: Sequence[Row], planned: Sequence[Planned] | None) -> set[str]:
    return {p.task_id for p in plan_of(rows, planned)}


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


def metric_common(members: Sequence[Mapping[str, set[str]]], common: set[str]) -> dict[str, set[str]]:
    """The metrics whose comparable tasks are fewer than ``common`` (the tasks every member
    finished): per such metric, the tasks of ``common`` every member has a value of it for
    (``members``: :func:`lacking` of each). A member with no value of a metric at all leaves it
    none."""
    out: dict[str, set[str]] = {}
    for k in set().union(*members) if members else set():
        s = set(common)
        for lk in members:
            s = s - lk[k] if k in lk else set()
        if s != common:
            out[k] = s
    return out


def metric_note(metric: str, tasks: set[str], common: set[str]) -> str:
    """The sentence under a metric compared on fewer tasks than the rest (:func:`metric_common`)."""
    if not tasks:
        return (f"{metric}: no task has a value of it from every compared configuration: each configuration's "
                f"{metric} is over its own plan.")
    return (f"{metric}: on the {len(tasks)} task(s) every compared configuration has a value for "
            f"({len(common - tasks)} more dropped).")


def common_note(n_common: int, dropped: int, n_configs: int, n_none: int = 0) -> str:
    """The sentence under a table computed on common tasks (``n_common`` 0: under a comparison
    that falls back to each configuration's own plan; ``n_none`` of them finished no task)."""
    if n_common == 0:
        return (f"No task was finished by every one of the {n_configs} compared configurations ({n_none} finished "
                "none): each configuration is shown over its own plan.")
    if dropped == 0:
        return (f"All {n_configs} configurations are compared on the same {n_common} task(s); none was "
                "dropped.")
    return (f"Computed on the {n_common} task(s) every one of the {n_configs} compared configurations finished; "
            f"{dropped} task(s) dropped (not finished by every configuration). Show each configuration over "
            "its own plan with --all-tasks.")
