"""What a metric is, declared by its benchmark (``metric_kinds``), and what follows from it: the
interval's method, the range, the unit and the rounding shown. Never from the values: a count whose
values happen to be all 0 or 1 is still a count (issue 46: ``searches_mean 1.000 [0.735, 1.000]
exact`` read as a proportion of independent trials; ``hallucination_pct 0.000 [0.000, 0.975]`` read
as "under 1 %" when the bound is 97.5 %).

The kinds (docs/design/what-a-number-means.md, "Metric kinds"):

* ``proportion``: one 0/1 value per episode (correct or not, terminated or not). With one episode
  per task the share of independent trials: the exact Clopper-Pearson interval. Several episodes of a
  task are correlated: the task bootstrap. A value other than 0 or 1 is an error in the benchmark.
* ``score``: a bounded value per episode (an F1 in [0, 1], a percentage in [0, 100], a 1-5 rating):
  the task bootstrap, never a binomial interval (an F1 of 0 or 1 on each task is not a coin).
* ``count``: a count per episode (searches, turns, steps); ``tokens``: tokens per episode;
  ``seconds``, ``cost``: both unbounded above: the task bootstrap.

Below ``stats.MIN_BOOT_TASKS`` tasks a bootstrap says nothing: no interval ("too few tasks").
Derived rows keep their metric's kind: ``<metric>.after_cutoff`` (engine/scoring/cutoff.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

KINDS = ("proportion", "score", "count", "tokens", "seconds", "cost")


@dataclass(frozen=True)
class MetricKind:
    kind: str
    lo: float = 0.0                 # the range a per-episode value lies in (hi: inf = unbounded)
    hi: float = math.inf
    unit: str = ""                  # shown after the value: "%", "tokens", "s", "USD"
    decimals: int = 3

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"metric kind {self.kind!r}: one of {', '.join(KINDS)}")
        if not self.lo < self.hi:
            raise ValueError(f"metric kind {self.kind}: empty range [{self.lo}, {self.hi}]")
        if self.kind == "proportion" and (self.lo, self.hi) != (0.0, 1.0):
            raise ValueError("a proportion lies in [0, 1]")

    @property
    def bounded(self) -> bool:
        return math.isfinite(self.hi)

    def check(self, value: float, where: str) -> None:
        """A per-episode value outside what the kind allows is the benchmark's error, said where."""
        if math.isnan(value):
            return
        if self.kind == "proportion" and value not in (0.0, 1.0):
            raise ValueError(f"{where}: {value!r} is not 0 or 1, but the metric is declared a proportion")
        if not self.lo <= value <= self.hi:
            raise ValueError(f"{where}: {value!r} lies outside the declared range [{self.lo:g}, {self.hi:g}]")

    def shown(self, value: float) -> str:
        """The value rounded as the kind says, with its unit."""
        if value is None or math.isnan(value):
            return "-"
        text = f"{value:.{self.decimals}f}"
        return f"{text} %" if self.unit == "%" else (f"{text} {self.unit}" if self.unit else text)


PROPORTION = MetricKind("proportion", 0.0, 1.0)
SCORE01 = MetricKind("score", 0.0, 1.0)
PERCENT = MetricKind("score", 0.0, 100.0, "%", 1)
COUNT = MetricKind("count", 0.0, math.inf, "", 2)
TOKENS = MetricKind("tokens", 0.0, math.inf, "tokens", 0)
SECONDS = MetricKind("seconds", 0.0, math.inf, "s", 1)
COST = MetricKind("cost", 0.0, math.inf, "USD", 4)


def score(lo: float, hi: float, unit: str = "", decimals: int = 2) -> MetricKind:
    return MetricKind("score", lo, hi, unit, decimals)


# derived rows that keep their metric's kind
SUFFIXES = (".after_cutoff",)


def kind_of(bench: object, metric: str) -> MetricKind:
    """The declared kind of ``metric`` (a derived row's: its metric's). Undeclared: an error naming
    the benchmark and the metric, so a new metric is never given an interval by its values."""
    kinds: dict[str, MetricKind] = getattr(bench, "metric_kinds", {}) or {}
    base = metric
    for s in SUFFIXES:
        base = base.removesuffix(s)
    if base in kinds:
        return kinds[base]
    # a family of metrics named by a pattern ending in "*" ("finish_*": one per finish reason)
    for pattern, kind in kinds.items():
        if pattern.endswith("*") and base.startswith(pattern[:-1]):
            return kind
    raise KeyError(f"benchmark {getattr(bench, 'name', bench)!r}: metric {metric!r} declares no kind "
                   "(metric_kinds: engine/scoring/kinds.py)")
