"""The vocabulary every output of a configuration shares: the outcome of a planned episode
(:func:`outcome`), the plan (:class:`Planned`, :func:`plan_of`), what a configuration's numbers are
over (:class:`Counts`), and the marks and sentences that go with them wherever it appears (the
``n`` cell, INCOMPLETE, PARTIALLY JUDGED, STOPPED EARLY, a failure's kind, the notes under a
table). ``outcomes.py`` computes the counts and means, and re-exports all of this."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.protocol import Row

SCORED, ERROR, BUDGET_STOPPED, NOT_RUN = "scored", "error", "budget_stopped", "not_run"
STOPPED_EARLY = "stopped_early"
OUTCOMES = (SCORED, ERROR, BUDGET_STOPPED, STOPPED_EARLY, NOT_RUN)


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


def plan_of(rows: Sequence[Row], planned: Sequence[Planned] | None) -> list[Planned]:
    """The plan, or (no plan recorded) the stored episodes as the plan."""
    if planned is not None:
        return list(planned)
    return [Planned(r["episode_id"], r["task_id"], int(r.get("seed") or 0)) for r in rows]


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
    if row.get("race") == SCREENING_MARK:
        return f"{c.n_scored}/{c.n_planned} {SCREENING_MARK} (dropped by successive halving){judged}"
    if c.n_stopped_early:
        return f"{c.n_scored}/{c.n_planned} {STOPPED_EARLY_MARK} (see its anytime-valid interval){judged}"
    if not c.incomplete:
        return f"{c.n_scored}/{c.n_planned}{judged}"
    why = c.describe().partition(" scored")[2].strip()
    return f"{c.n_scored}/{c.n_planned} INCOMPLETE{(' ' + why) if why else ''}{judged}"


PARTIALLY_JUDGED = "PARTIALLY JUDGED"
STOPPED_EARLY_MARK = "STOPPED EARLY"
SCREENING_MARK = "SCREENING"
# the ``interval`` of a raced configuration's row or estimate (engine/scoring/race_view.py; stats.py names the rest)
ANYTIME, SCREENED, STOPPED = "anytime_valid", "screening", "stopped_early"


def _three(x: float) -> str:
    return f"{x:.3f}"


def race_cell(value: float | None, lo: float | None, hi: float | None, method: str, n: int,
              fmt: Callable[[float], str] = _three) -> str | None:
    """The text of a raced configuration's value (None: not one; the caller prints its own)::

        STOPPED EARLY: [0.000, 0.418] anytime-valid confidence sequence for its full-set mean
        0.333 SCREENING (n=3; mean of the tasks it ran, not a full-set estimate)
        STOPPED EARLY (not raced on this metric: no mean after adaptive stopping)
    """
    if method == ANYTIME and lo is not None and hi is not None:
        return (f"{STOPPED_EARLY_MARK}: [{fmt(lo)}, {fmt(hi)}] anytime-valid confidence sequence for its "
                "full-set mean")
    if method == SCREENED and value is not None:
        return f"{fmt(value)} {SCREENING_MARK} (n={n}; mean of the tasks it ran, not a full-set estimate)"
    if method == STOPPED:
        return f"{STOPPED_EARLY_MARK} (not raced on this metric: no mean after adaptive stopping)"
    return None
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
    raced = race_cell(row.get("value"), lo, hi, how, int(row.get("n") or 0))
    if raced is not None:
        return raced
    if lo is not None and hi is not None and not (math.isnan(lo) or math.isnan(hi)):
        return f"[{lo:.3f}, {hi:.3f}] {how}".strip()
    return "too few tasks for an interval" if how == "too_few_tasks" else ""


def warnings_of(bench: Any, agent: dict[str, Any], data: dict[str, Any] | None) -> list[str]:
    """What every number of a configuration must be read with: its agent's warnings, then its
    data's (``data_warnings``, optional in a benchmark outside this repository)."""
    extra = getattr(bench, "data_warnings", None)
    return [*bench.config_warnings(agent), *(extra(data) if extra is not None and data else [])]
