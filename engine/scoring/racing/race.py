"""The decision state of an adaptive evaluation: what arrives, what is admitted, when the rule
(``rules.py``) decides, and what a reader gets.

Every configuration of a run sees the tasks in one shared, seeded random order
(``engine/inputs/order.py``); position ``i`` is the i-th task of that order. A configuration's
value at a position is the task's score in [0, 1] (its mean over seeds, a bounded score rescaled:
``anytime.rescale``), known once every seed is scored.

**Only dispatch-order prefixes are ever admitted.** Episodes finish out of order, and the slow
ones are the failure-prone ones, so the results that came back first are a biased sample (in the
design's simulation, admitting them in completion order made the interval miss in 74 % of runs).
A decision at step ``T`` reads the first ``T`` positions of each live configuration and nothing
else: ``T`` is the common prefix, the fewest positions any live configuration has all of. The
steps are taken in order, every ``check_every`` positions from ``min_tasks`` on, so the decisions
are a pure function of the stored values and the :class:`Design`: a resumed run, or
:func:`replay` over a finished run dir, derives the same stops at the same steps.

To stop sooner than the prefix allows, :meth:`Race.tentative` looks at every completed result (the
biased view) and names the configurations it would stop: the driver stops dispatching them, lets
their episodes in flight finish (never cancels them: they are paid for, and dropping them would
censor by outcome), and then the prefix confirms or refuses. A refused pause is resumed
(:meth:`Race.resumable`). This is valid because the step at which a configuration is stopped
depends only on the first positions of the order, each a uniformly random remaining task.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.scoring.anytime import mean_cs, paired_cs
from engine.scoring.racing.design import Decision, Design
from engine.scoring.racing.rules import RULES, Rule


@dataclass
class Race:
    """The decision state of one run: K configurations over ``n_tasks`` positions.

    ``observe`` records a value as it is stored (any order); ``decide`` takes every decision step
    the admitted prefixes allow and returns the new decisions. ``waves`` (incumbent) lists the
    configurations in hosting order, one list per wave; by default one wave per configuration in
    the order given."""
    design: Design
    configs: Sequence[str]
    n_tasks: int
    waves: Sequence[Sequence[str]] | None = None
    values: np.ndarray = field(init=False)
    stopped: dict[str, int] = field(init=False, default_factory=dict)      # config -> step it stopped at
    decisions: list[Decision] = field(init=False, default_factory=list)
    step: int = field(init=False, default=0)                               # the last step taken
    _prefix: np.ndarray = field(init=False)
    _dispatched: dict[str, int] = field(init=False, default_factory=dict)
    _paused: dict[str, int] = field(init=False, default_factory=dict)
    _rule: Rule = field(init=False, repr=False)                             # the strategy's (rules.RULES)

    def __post_init__(self) -> None:
        if len(set(self.configs)) != len(self.configs) or not self.configs:
            raise ValueError("a race needs distinct configurations")
        if self.n_tasks < 1:
            raise ValueError("a race needs at least one task")
        self.index = {c: i for i, c in enumerate(self.configs)}
        self.values = np.full((len(self.configs), self.n_tasks), np.nan)
        self._prefix = np.zeros(len(self.configs), dtype=np.int64)
        self._rule = RULES[self.design.strategy](self.configs, self.waves)

    # -- what arrives ---------------------------------------------------------------------------
    def observe(self, config: str, position: int, value: float) -> None:
        """A task's value (in [0, 1]) for ``config`` at ``position`` of the shared order."""
        if not 0.0 <= value <= 1.0 or math.isnan(value):
            raise ValueError(f"{config} position {position}: value {value!r} is not in [0, 1]")
        i = self.index[config]
        if not math.isnan(self.values[i, position]) and self.values[i, position] != value:
            raise ValueError(f"{config} position {position}: two values ({self.values[i, position]}, {value})")
        self.values[i, position] = value
        p = int(self._prefix[i])
        row = self.values[i]
        while p < self.n_tasks and not math.isnan(row[p]):
            p += 1
        self._prefix[i] = p

    def dispatched(self, config: str, position: int) -> None:
        """The driver sent ``config``'s episodes of ``position`` (positions go out in order)."""
        self._dispatched[config] = max(self._dispatched.get(config, 0), position + 1)

    def prefix(self, config: str) -> int:
        """Positions of ``config`` admitted: the longest run from the first with every value known."""
        return int(self._prefix[self.index[config]])

    def live(self) -> list[str]:
        return [c for c in self.configs if c not in self.stopped]

    def wants(self, config: str) -> bool:
        """Whether the driver may dispatch ``config``'s next position (not stopped, not paused)."""
        return config not in self.stopped and config not in self._paused

    # -- decisions ------------------------------------------------------------------------------
    def common_prefix(self) -> int:
        """The positions every live configuration that holds back the steps has admitted (incumbent:
        only the hosted wave's)."""
        live = [self.index[c] for c in self.live() if self._rule.holds_back(self, c)]
        return int(self._prefix[live].min()) if live else self.n_tasks

    def decide(self) -> list[Decision]:
        """Every decision step the admitted prefixes allow, in order; the new decisions."""
        new = self._rule.decide(self)
        for d in new:
            self._paused.pop(d.config, None)
        self.decisions += new
        return new

    def settle(self) -> list[Decision]:
        """:meth:`decide` until nothing changes (a stop can lift the common prefix): every
        decision the values known now allow; the new ones."""
        new: list[Decision] = []
        while True:
            before = (self.step, len(self.decisions), len(self.stopped))
            new += self.decide()
            if (self.step, len(self.decisions), len(self.stopped)) == before:
                return new

    def stop(self, t: int, config: str, reason: str, by: str = "", lo: float = float("nan"),
             hi: float = float("nan")) -> Decision:
        """The rule stops ``config`` at step ``t``: recorded here, returned for the decision log."""
        self.stopped[config] = t
        return Decision(t, config, "stopped_early", reason, by, float(lo), float(hi))

    # -- the biased view, for pausing only --------------------------------------------------------
    def tentative(self) -> list[str]:
        """Live configurations the rule would stop on the completed results (the positions every
        live configuration has, holes skipped, so biased): the driver stops dispatching them until
        the prefix confirms or refuses. One vectorized pass over the live pairs."""
        if self.design.strategy != "race":
            return []
        live = self.live()
        if len(live) <= self.design.top_k:
            return []
        idx = np.array([self.index[c] for c in live])
        x = self.values[idx]
        both = ~np.isnan(x).any(axis=0)
        if int(both.sum()) < self.design.min_tasks:
            return []
        x = x[:, both]
        iu, ju = np.triu_indices(len(live), 1)
        cs = paired_cs(x[iu], x[ju], self.n_tasks, self.design.alpha_per_comparison(len(self.configs)))
        lo = np.full((len(live), len(live)), -1.0)
        lo[iu, ju], lo[ju, iu] = cs.lo[:, -1], -cs.hi[:, -1]          # [j, k]: j minus k
        beaten = (lo > 0).sum(axis=0)
        return [c for i, c in enumerate(live) if beaten[i] >= self.design.top_k and c not in self._paused]

    def pause(self, config: str) -> None:
        """Stop dispatching ``config`` until the prefix decides (:meth:`resumable`)."""
        self._paused[config] = self._dispatched.get(config, self.prefix(config))

    def resumable(self) -> list[str]:
        """Paused configurations the prefix did not stop once it reached their last dispatched
        position: dispatching them resumes."""
        out = [c for c, d in self._paused.items() if c not in self.stopped and self.step >= d]
        for c in out:
            del self._paused[c]
        return out

    # -- what a reader gets ---------------------------------------------------------------------
    def interval(self, config: str) -> tuple[float, float, int]:
        """The CS of ``config``'s full-test-set mean over its admitted prefix (through its stop,
        overrun included: that is data too), and the positions behind it."""
        i = self.index[config]
        t = self.prefix(config)
        if t == 0:
            return 0.0, 1.0, 0
        cs = mean_cs(self.values[i, :t], self.n_tasks, self.design.alpha)
        lo, hi = cs.at(t)
        return lo, hi, t


def replay(design: Design, values: Mapping[str, Sequence[float]], n_tasks: int,
           waves: Sequence[Sequence[str]] | None = None) -> Race:
    """The decisions a run would take from these values (per configuration, in the shared order;
    NaN where unknown), taken as the prefixes allow: what a resumed run re-derives and an auditor
    checks the decision log against."""
    race = Race(design, list(values), n_tasks, waves)
    for c, vs in values.items():
        for pos, v in enumerate(vs):
            if not math.isnan(v):
                race.observe(c, pos, float(v))
    race.settle()
    return race
