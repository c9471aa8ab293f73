"""Decisions of an adaptive evaluation: which configurations to stop, from what, and why.

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

Strategies (``sweep`` in the config):

* ``race``: every configuration advances together. Goals: ``best`` (stop a configuration once
  another is confidently better: the paired CS of their difference is above 0), ``top:k`` (once
  k others are), ``eps_best`` (also stop every other once one configuration is confidently within
  ``epsilon`` of every live one: it is returned, and it runs to the end). alpha is split by
  Bonferroni over the K(K-1)/2 pairs, each a two-sided CS.
* ``incumbent``: configurations hosted in waves (one at a time, or as many as fit); every
  configuration of the first wave runs in full, and each later one is compared with the best
  configuration run in full before its wave (the incumbent) and stopped once it is confidently
  worse. One comparison per challenger: alpha / (K - 1) each. No model is hosted twice.
* ``halving``: successive halving at fixed fractions of the tasks (``rungs``), keeping the best
  1/eta by prefix mean. A fixed budget and **no guarantee**: labelled screening wherever it
  appears.
* ``anytime_valid``: no comparison; each configuration's CS of its own full-test-set mean, and,
  with ``half_width`` set, a configuration stops once its CS is that narrow.

The guarantee (``race``, ``incumbent``): with probability at least 1 - alpha, no configuration
that is best on the full test set (for ``top:k``: in its top k; for ``eps_best``: the returned
one is within epsilon of it) is stopped, whenever the run stops. Stopped configurations are
reported as their CS, never as a bare mean: after adaptive stopping a sample mean is biased
(Shin, Ramdas & Rinaldo 2019).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from engine.scoring.anytime import FAMILY, TRUNCATION, RunningCS, mean_cs, paired_cs

STRATEGIES = ("race", "incumbent", "halving", "anytime_valid")
SCREENING = "screening: successive halving at a fixed budget, with no error guarantee"


@dataclass(frozen=True)
class Design:
    """What decides: stored in the run dir (``adaptive.json``) and part of the run's identity."""
    strategy: str = "race"
    goal: str = "best"                    # race: best | top:<k> | eps_best
    epsilon: float = 0.0                  # eps_best: within this of the best (score units, [0, 1])
    alpha: float = 0.05
    split: str = "bonferroni"             # how alpha is split over the comparisons
    min_tasks: int = 10                   # no decision before this many positions
    check_every: int = 1                  # a decision step every this many positions
    rungs: tuple[float, ...] = (0.1, 0.3, 1.0)   # halving: fractions of the tasks
    eta: float = 3.0                      # halving: keep the best 1/eta at each rung
    half_width: float | None = None       # anytime_valid: stop once the CS is this narrow
    family: str = FAMILY
    truncation: float = TRUNCATION

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"sweep strategy {self.strategy!r}: one of {', '.join(STRATEGIES)}")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if self.goal not in ("best", "eps_best") and not (self.goal.startswith("top:") and self.top_k >= 1):
            raise ValueError(f"sweep goal {self.goal!r}: best, eps_best or top:<k> (k >= 1)")
        if self.goal == "eps_best" and self.epsilon <= 0:
            raise ValueError("sweep goal eps_best needs sweep.epsilon > 0")
        if self.split != "bonferroni":
            raise ValueError(f"alpha split {self.split!r}: only bonferroni")
        if self.min_tasks < 1 or self.check_every < 1:
            raise ValueError("min_tasks and check_every must be at least 1")
        if self.strategy == "halving" and (not self.rungs or sorted(self.rungs) != list(self.rungs)
                                           or self.rungs[-1] != 1.0 or self.rungs[0] <= 0 or self.eta <= 1):
            raise ValueError("halving: rungs increasing in (0, 1], the last 1.0, and eta > 1")
        if self.half_width is not None and self.half_width <= 0:
            raise ValueError("half_width must be positive")

    @property
    def top_k(self) -> int:
        if not self.goal.startswith("top:"):
            return 1
        try:
            return int(self.goal.split(":", 1)[1])
        except ValueError:
            return 0

    @property
    def screening(self) -> bool:
        return self.strategy == "halving"

    def alpha_per_comparison(self, k: int) -> float:
        """alpha for one comparison (one pair's CS) among ``k`` configurations."""
        if self.strategy == "race":
            return self.alpha / max(k * (k - 1) // 2, 1)
        if self.strategy == "incumbent":
            return self.alpha / max(k - 1, 1)
        return self.alpha

    def record(self) -> dict[str, Any]:
        return asdict(self) | {"rungs": list(self.rungs)}


@dataclass(frozen=True)
class Decision:
    """One action of the decision log: at step ``t`` (positions admitted), ``config`` is
    ``action`` (stopped_early, or kept: screening's survivors), by the comparison with ``by`` (or
    its own CS), whose bounds were ``[lo, hi]``."""
    t: int
    config: str
    action: str
    reason: str
    by: str = ""
    lo: float = float("nan")
    hi: float = float("nan")

    def record(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(self).items()}


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
    _checked: dict[str, int] = field(init=False, default_factory=dict)    # incumbent: positions looked at
    _pairs: RunningCS | None = field(init=False, default=None)             # race: every pair's CS so far
    _own: RunningCS | None = field(init=False, default=None)               # anytime_valid: each one's own

    def __post_init__(self) -> None:
        if len(set(self.configs)) != len(self.configs) or not self.configs:
            raise ValueError("a race needs distinct configurations")
        if self.n_tasks < 1:
            raise ValueError("a race needs at least one task")
        self.index = {c: i for i, c in enumerate(self.configs)}
        self.values = np.full((len(self.configs), self.n_tasks), np.nan)
        self._prefix = np.zeros(len(self.configs), dtype=np.int64)
        if self.design.strategy == "incumbent":
            waves = [list(w) for w in self.waves] if self.waves is not None else [[c] for c in self.configs]
            if sorted(c for w in waves for c in w) != sorted(self.configs):
                raise ValueError("incumbent: the waves must list every configuration once")
            self.wave_of = {c: i for i, w in enumerate(waves) for c in w}
            self._waves = waves

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
        live = [self.index[c] for c in self.live() if self._active(c)]
        return int(self._prefix[live].min()) if live else self.n_tasks

    def _active(self, config: str) -> bool:
        """Whether ``config`` holds back the common prefix (incumbent: only its hosted wave does)."""
        if self.design.strategy != "incumbent":
            return True
        return self.wave_of[config] == self._current_wave()

    def _current_wave(self) -> int:
        for w, cs in enumerate(self._waves):
            if any(c not in self.stopped and self.prefix(c) < self.n_tasks for c in cs):
                return w
        return len(self._waves)

    def decide(self) -> list[Decision]:
        """Every decision step the admitted prefixes allow, in order; the new decisions."""
        new: list[Decision] = []
        if self.design.strategy == "incumbent":
            new = self._decide_incumbent()
        else:
            target = self.common_prefix()
            if target > self.step:
                lo = hi = None
                if self.design.strategy == "race":
                    self._extend_pairs(target)
                elif self.design.strategy == "anytime_valid":
                    lo, hi = self._extend_own(target)
                for t in range(self.step + 1, target + 1):
                    if self._is_step(t):
                        new += self._decide_at(t, lo, hi)
                    self.step = t
                    if not self.live():
                        break
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

    def _is_step(self, t: int) -> bool:
        if self.design.strategy == "halving":
            return t in self._rung_steps()
        return t >= self.design.min_tasks and (t % self.design.check_every == 0 or t == self.n_tasks)

    def _rung_steps(self) -> list[int]:
        return [max(1, math.ceil(f * self.n_tasks)) for f in self.design.rungs[:-1]]

    def _extend_pairs(self, upto: int) -> None:
        """Every pair's CS of its difference (first minus second of ``np.triu_indices``), extended
        to step ``upto`` (only the new steps are computed: ``anytime.RunningCS``). A stopped
        configuration's pairs are read only up to its stop (its later, overrun values are stored,
        not admitted)."""
        k = len(self.configs)
        if self._pairs is None:
            self._iu, self._ju = np.triu_indices(k, 1)
            self._pairs = RunningCS((len(self._iu),), self.n_tasks, self.design.alpha_per_comparison(k))
            self._plo = np.full((len(self._iu), self.n_tasks), -1.0)
            self._phi = np.full((len(self._iu), self.n_tasks), 1.0)
        t0 = self._pairs.t
        if upto > t0:
            x = np.nan_to_num(self.values[:, t0:upto], nan=0.0)
            cs = self._pairs.extend((x[self._iu] - x[self._ju] + 1.0) / 2.0)
            self._plo[:, t0:upto], self._phi[:, t0:upto] = 2.0 * cs.lo - 1.0, 2.0 * cs.hi - 1.0

    def _extend_own(self, upto: int) -> tuple[np.ndarray, np.ndarray]:
        """Each configuration's own CS, extended to step ``upto``; all steps so far (K, upto)."""
        if self._own is None:
            self._own = RunningCS((len(self.configs),), self.n_tasks, self.design.alpha)
            self._olo = np.zeros((len(self.configs), self.n_tasks))
            self._ohi = np.ones((len(self.configs), self.n_tasks))
        t0 = self._own.t
        if upto > t0:
            cs = self._own.extend(np.nan_to_num(self.values[:, t0:upto], nan=0.0))
            self._olo[:, t0:upto], self._ohi[:, t0:upto] = cs.lo, cs.hi
        return self._olo[:, :upto], self._ohi[:, :upto]

    def _pairs_at(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """Bounds of every ordered pair's difference [j, k] (j minus k) at step min(t, stop_j,
        stop_k): a pair with a stopped member is frozen at the stop."""
        k = len(self.configs)
        stop = np.array([self.stopped.get(c, t) for c in self.configs])
        tt = np.maximum(np.minimum(np.minimum(stop[self._iu], stop[self._ju]), t), 1) - 1
        rows = np.arange(len(self._iu))
        lo_p, hi_p = self._plo[rows, tt], self._phi[rows, tt]
        lo, hi = np.full((k, k), -1.0), np.full((k, k), 1.0)
        lo[self._iu, self._ju], hi[self._iu, self._ju] = lo_p, hi_p
        lo[self._ju, self._iu], hi[self._ju, self._iu] = -hi_p, -lo_p
        return lo, hi

    def _stop(self, t: int, config: str, reason: str, by: str = "", lo: float = float("nan"),
              hi: float = float("nan")) -> Decision:
        self.stopped[config] = t
        return Decision(t, config, "stopped_early", reason, by, float(lo), float(hi))

    def _decide_at(self, t: int, lo: np.ndarray | None, hi: np.ndarray | None) -> list[Decision]:
        s = self.design.strategy
        if s == "halving":
            return self._halve(t)
        if s == "anytime_valid":
            assert lo is not None and hi is not None
            return self._precise(t, lo, hi)
        lo_t, hi_t = self._pairs_at(t)
        out: list[Decision] = []
        need = self.design.top_k
        if len(self.live()) <= need:
            return out
        alpha = self.design.alpha_per_comparison(len(self.configs))
        beaten = lo_t > 0                           # [j, k]: j is confidently better than k
        np.fill_diagonal(beaten, False)
        counts = beaten.sum(axis=0)
        # the most beaten first, so that with top:k (or a miss) no more than K - k are stopped
        for c in sorted((c for c in self.live() if counts[self.index[c]] >= need),
                        key=lambda c: (-counts[self.index[c]], self.index[c])):
            if len(self.live()) <= need:
                return out
            k = self.index[c]
            j = int(np.argmax(np.where(beaten[:, k], lo_t[:, k], -np.inf)))
            b = self.configs[j]
            out.append(self._stop(t, c, f"eliminated by {b}: CS({b} - {c}) = [{lo_t[j, k]:+.3f}, "
                                        f"{hi_t[j, k]:+.3f}] at t = {t}, alpha_pair = {alpha:.3g}",
                                  b, lo_t[j, k], hi_t[j, k]))
        if self.design.goal == "eps_best" and len(self.live()) > 1:
            idx = np.array([self.index[c] for c in self.live()])
            sub = hi_t[np.ix_(idx, idx)].copy()     # [j, k]: upper bound of j minus k
            np.fill_diagonal(sub, -np.inf)
            ok = np.flatnonzero((sub < self.design.epsilon).all(axis=0))
            if ok.size:                                 # the first certified, in configuration order
                k = int(idx[ok[0]])
                c = self.configs[k]
                for o in self.live():
                    if o != c:
                        out.append(self._stop(t, o, f"settled: {c} is within epsilon = {self.design.epsilon:g} "
                                                    f"of every live configuration at t = {t}", c,
                                              lo_t[self.index[o], k], hi_t[self.index[o], k]))
        return out

    def _halve(self, t: int) -> list[Decision]:
        live = self.live()
        keep = max(1, math.ceil(len(live) / self.design.eta))
        means = {c: float(self.values[self.index[c], :t].mean()) for c in live}
        ranked = sorted(live, key=lambda c: (-means[c], self.index[c]))
        return [self._stop(t, c, f"{SCREENING}: mean {means[c]:.3f} over the first {t} tasks, "
                                 f"not in the best {keep} of {len(live)}", "", means[c], means[c])
                for c in ranked[keep:]]

    def _precise(self, t: int, lo: np.ndarray, hi: np.ndarray) -> list[Decision]:
        """``lo``, ``hi``: each configuration's own CS at every step (shape (K, steps))."""
        hw = self.design.half_width
        if hw is None or t >= self.n_tasks:
            return []
        out = []
        for c in self.live():
            i = self.index[c]
            a, b = float(lo[i, t - 1]), float(hi[i, t - 1])
            if (b - a) / 2 <= hw:
                out.append(self._stop(t, c, f"precise enough: CS half-width {(b - a) / 2:.3f} <= {hw:g} "
                                            f"at t = {t}", "", a, b))
        return out

    def _decide_incumbent(self) -> list[Decision]:
        """Each wave after the first against the incumbent: the best configuration run in full in
        an earlier wave (its full mean is exact)."""
        new: list[Decision] = []
        alpha = self.design.alpha_per_comparison(len(self.configs))
        for w, wave in enumerate(self._waves):
            if w == 0:
                continue
            earlier = [c for ws in self._waves[:w] for c in ws]
            if any(c not in self.stopped and self.prefix(c) < self.n_tasks for c in earlier):
                break         # an earlier wave is not done: its incumbent is not known yet
            before = [c for c in earlier if c not in self.stopped]
            inc = max(before, key=lambda c: (float(self.values[self.index[c]].mean()), -self.index[c]))
            xi = self.values[self.index[inc]]
            for c in wave:
                if c in self.stopped:
                    continue
                p = self.prefix(c)
                done = self._checked.get(c, 0)
                if p <= done:
                    continue
                cs = paired_cs(xi[:p], self.values[self.index[c], :p], self.n_tasks, alpha)
                for t in range(done + 1, p + 1):
                    if self._is_step(t) and cs.lo[t - 1] > 0:
                        new.append(self._stop(t, c, f"eliminated by incumbent {inc}: CS({inc} - {c}) = "
                                                    f"[{cs.lo[t - 1]:+.3f}, {cs.hi[t - 1]:+.3f}] at t = {t}, "
                                                    f"alpha_pair = {alpha:.3g}", inc, cs.lo[t - 1], cs.hi[t - 1]))
                        break
                self._checked[c] = p
        return new

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
