"""One presentation of a raced run (issue 46, findings 1-3), read by every output from the run dir's
``adaptive.json`` (ray_jobs/run/adaptive.py writes it):

* a configuration **stopped early** (the race decided before its last task was dispatched) has no
  mean: on the raced metric it shows its decision interval (the anytime-valid confidence sequence
  for its mean over the full task set) and ``STOPPED EARLY``; on every other metric only the mark
  (the race watched one metric; a mean of the tasks it ran is biased after adaptive stopping);
* under successive halving a dropped configuration shows its mean over the tasks it ran marked
  ``SCREENING`` (halving has no interval and no error guarantee: its mean is not a full-set estimate);
* it is left out of the common tasks the others are compared on (its tasks stop where the race
  stopped it: keeping it would cut every survivor's comparison to its prefix);
* the counts ("k of K configurations were stopped early", and those decided against after every
  task ran, whose means are exact over the full set) come from :func:`stop_counts` only.

Metric rows (``dateline metrics``, ``tables``, the Python API, the export) go through
:meth:`RaceView.row`; the report's estimates through :meth:`RaceView.estimate`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from engine.scoring import stats
from engine.scoring.outcome_marks import (
    ANYTIME,
    SCREENED,
    SCREENING_MARK,
    STOPPED,
    STOPPED_EARLY_MARK,
    n_cell,
    race_cell,
)

RACE_FILE = "adaptive.json"
RACED = frozenset({ANYTIME, SCREENED, STOPPED})
# metrics a stop leaves as they are: what share of the plan was scored is a count, not a mean of outcomes
UNTOUCHED = frozenset({"scored_share"})


@dataclass(frozen=True)
class Standing:
    """One configuration in a race: its state (complete, stopped_early, running), whether the race
    decided against it, and its decision interval in the metric's units."""
    state: str
    decided: bool
    lo: float
    hi: float
    level: float
    tasks_admitted: int
    n_tasks: int
    reason: str

    @property
    def stopped(self) -> bool:
        return self.state == "stopped_early"


def stop_counts(configurations: Mapping[str, Mapping[str, Any]]) -> tuple[int, int, int]:
    """(stopped early, decided against after every task ran, all): the one count every output says."""
    stopped = sum(c.get("state") == "stopped_early" for c in configurations.values())
    after = sum(c.get("state") == "complete" and c.get("stopped_at") is not None for c in configurations.values())
    return stopped, after, len(configurations)


@dataclass(frozen=True)
class RaceView:
    metric: str
    screening: bool
    wording: str
    standings: dict[str, Standing]

    @classmethod
    def of(cls, record: Mapping[str, Any] | None) -> RaceView | None:
        """The view of an ``adaptive.json`` record (None: not an adaptive run)."""
        if not record or not record.get("configurations"):
            return None
        n = int(record.get("n_tasks") or 0)
        out = {}
        for h, c in record["configurations"].items():
            lo, hi = (c.get("interval") or [math.nan, math.nan])[:2]
            out[h] = Standing(str(c.get("state") or ""), c.get("stopped_at") is not None, float(lo), float(hi),
                              float(c.get("interval_level") or 0.95), int(c.get("tasks_admitted") or 0), n,
                              str(c.get("reason") or ""))
        return cls(str(record.get("metric") or ""), bool(record.get("screening")), str(record.get("wording") or ""), out)

    @classmethod
    def read(cls, store: Any) -> RaceView | None:
        return cls.of(store.read_json(RACE_FILE))

    def standing(self, config_hash: str) -> Standing | None:
        return self.standings.get(config_hash.split("@", 1)[0])      # the report keys cross-run views hash@i

    def stopped(self, config_hash: str) -> bool:
        s = self.standing(config_hash)
        return s is not None and s.stopped

    @property
    def mark(self) -> str:
        return SCREENING_MARK if self.screening else STOPPED_EARLY_MARK

    def counts(self) -> tuple[int, int, int]:
        return stop_counts({h: {"state": s.state, "stopped_at": 1 if s.decided else None}
                            for h, s in self.standings.items()})

    def row(self, r: dict[str, Any]) -> dict[str, Any]:
        """A metrics row as a raced run shows it (unchanged unless its configuration stopped early)."""
        s = self.standing(str(r["config_hash"]))
        if s is None or not s.stopped:
            return r
        out = dict(r, race=self.mark)
        if r["metric"] in UNTOUCHED:        # marked (its n cell says why), its value kept
            return out
        if self.screening:                  # its mean over the tasks it ran, with no interval (there is none)
            return out | {"lo": math.nan, "hi": math.nan, "interval": SCREENED}
        if r["metric"] == self.metric:
            return out | {"value": math.nan, "lo": s.lo, "hi": s.hi, "interval": ANYTIME}
        return out | {"value": math.nan, "lo": math.nan, "hi": math.nan, "interval": STOPPED}

    def estimate(self, config_hash: str, metric: str, e: stats.Estimate) -> stats.Estimate:
        """The report's estimate of ``metric`` for a configuration, as the race presents it."""
        s = self.standing(config_hash)
        if s is None or not s.stopped or metric in UNTOUCHED:
            return e
        if self.screening:
            return replace(e, lo=math.nan, hi=math.nan, method=SCREENED)
        if metric == self.metric:
            return replace(e, value=math.nan, lo=s.lo, hi=s.hi, n_tasks=s.tasks_admitted, method=ANYTIME)
        return replace(e, value=math.nan, lo=math.nan, hi=math.nan, method=STOPPED)


def split_stopped(rows: Sequence[Mapping[str, Any]], primary: Sequence[str]
                  ) -> tuple[list[Mapping[str, Any]], dict[str, str]]:
    """A benchmark's table rows without the configurations a race stopped (a benchmark's own tables
    know nothing of races), and the one table every benchmark shows them in: per configuration its
    mark, its ``n`` cell and, per metric of ``primary`` and the raced one (the rows with a decision
    interval), its decision interval or SCREENING mean (:func:`race_cell`)."""
    metrics = [*primary, *(str(r["metric"]) for r in rows if r.get("interval") == ANYTIME)]
    hashes = {r["config_hash"] for r in rows if r.get("race")}
    kept = [r for r in rows if r["config_hash"] not in hashes]
    stopped = [r for r in rows if r["config_hash"] in hashes and r.get("race")]
    if not stopped:
        return kept, {}
    by: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = {}
    for r in stopped:
        by.setdefault((str(r["model"]), str(r["config_hash"])), {})[str(r["metric"])] = r
    cols = [m for m in dict.fromkeys(metrics) if any(m in ms for ms in by.values())]
    lines = ["| Model | Config | Stopped | n | " + " | ".join(cols) + " |", "|" + "---|" * (4 + len(cols))]
    for (model, h), ms in sorted(by.items()):
        first = next(iter(ms.values()))
        cells = [race_cell(ms[m].get("value"), ms[m].get("lo"), ms[m].get("hi"), str(ms[m].get("interval") or ""),
                           int(ms[m].get("n") or 0)) or "-" if m in ms else "-" for m in cols]
        lines.append(f"| {model} | {h[:8]} | {first['race']} | {n_cell(first)} | " + " | ".join(cells) + " |")
    return kept, {"stopped by the race": "\n".join(lines) + "\n"}


__all__ = ["ANYTIME", "RACED", "RACE_FILE", "RaceView", "SCREENED", "SCREENING_MARK", "STOPPED", "Standing", "UNTOUCHED",
           "race_cell", "split_stopped", "stop_counts"]
