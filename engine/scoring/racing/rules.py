"""The decision rule of each strategy (``sweep`` in the config), one class each, chosen by name
through :data:`RULES`. A rule reads a race's admitted values (:class:`State`) and stops
configurations through it; the race owns what arrives and the decision log.

* ``race`` (:class:`Elimination`): every configuration advances together. Goals: ``best`` (stop a
  configuration once another is confidently better: the paired CS of their difference is above
  0), ``top:k`` (once k others are), ``eps_best`` (also stop every other once one configuration is
  confidently within ``epsilon`` of every live one: it is returned, and it runs to the end).
  alpha is split by Bonferroni over the K(K-1)/2 pairs, each a two-sided CS.
* ``incumbent`` (:class:`Incumbent`): configurations hosted in waves (one at a time, or as many
  as fit); every configuration of the first wave runs in full, and each later one is compared
  with the best configuration run in full before its wave (the incumbent) and stopped once it is
  confidently worse. One comparison per challenger: alpha / (K - 1) each. No model is hosted twice.
* ``halving`` (:class:`Halving`): successive halving at fixed fractions of the tasks (``rungs``),
  keeping the best 1/eta by prefix mean. A fixed budget and **no guarantee**: labelled screening
  wherever it appears.
* ``anytime_valid`` (:class:`Precision`): no comparison; each configuration's CS of its own
  full-test-set mean, and, with ``half_width`` set, a configuration stops once its CS is that narrow.

The guarantee (``race``, ``incumbent``): with probability at least 1 - alpha, no configuration
that is best on the full test set (for ``top:k``: in its top k; for ``eps_best``: the returned
one is within epsilon of it) is stopped, whenever the run stops. Stopped configurations are
reported as their CS, never as a bare mean: after adaptive stopping a sample mean is biased
(Shin, Ramdas & Rinaldo 2019).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from engine.scoring.anytime import RunningCS, paired_cs
from engine.scoring.racing.design import SCREENING, Decision, Design


class State(Protocol):
    """What a rule reads of a race (``race.Race``), and what it changes: the step reached, and a
    stop (:meth:`stop` records it)."""
    step: int

    @property
    def design(self) -> Design: ...
    @property
    def configs(self) -> Sequence[str]: ...
    @property
    def n_tasks(self) -> int: ...
    @property
    def values(self) -> np.ndarray: ...
    @property
    def index(self) -> dict[str, int]: ...
    @property
    def stopped(self) -> dict[str, int]: ...

    def live(self) -> list[str]: ...
    def prefix(self, config: str) -> int: ...
    def common_prefix(self) -> int: ...
    def stop(self, t: int, config: str, reason: str, by: str = "", lo: float = float("nan"),
             hi: float = float("nan")) -> Decision: ...


class Rule(Protocol):
    def decide(self, race: State) -> list[Decision]:
        """Every decision step the admitted prefixes allow, in order; the new decisions."""
        ...

    def holds_back(self, race: State, config: str) -> bool:
        """Whether live ``config`` holds back the race's common prefix."""
        ...


def is_step(design: Design, n_tasks: int, t: int) -> bool:
    """Whether ``t`` positions admitted is a decision step: every ``check_every`` from ``min_tasks``
    on, and the last position."""
    return t >= design.min_tasks and (t % design.check_every == 0 or t == n_tasks)


class StepRule:
    """A rule that decides at the steps of the common prefix, in order (every strategy but
    ``incumbent``). A subclass brings its caches up to the prefix (:meth:`extend`) and decides at
    one step (:meth:`at`)."""

    def decide(self, race: State) -> list[Decision]:
        new: list[Decision] = []
        target = race.common_prefix()
        if target > race.step:
            self.extend(race, target)
            for t in range(race.step + 1, target + 1):
                if self.is_step(race, t):
                    new += self.at(race, t)
                race.step = t
                if not race.live():
                    break
        return new

    def holds_back(self, race: State, config: str) -> bool:
        return True

    def is_step(self, race: State, t: int) -> bool:
        return is_step(race.design, race.n_tasks, t)

    def extend(self, race: State, upto: int) -> None:
        """Bring what the rule computes incrementally to step ``upto`` (nothing by default)."""

    def at(self, race: State, t: int) -> list[Decision]:
        raise NotImplementedError


class PairCS:
    """Every pair's CS of its difference (first minus second of ``np.triu_indices``), extended as
    the prefix grows (only the new steps are computed: ``anytime.RunningCS``), every step kept."""

    def __init__(self, k: int, n_tasks: int, alpha: float) -> None:
        self.k = k
        self.iu, self.ju = np.triu_indices(k, 1)
        self.running = RunningCS((len(self.iu),), n_tasks, alpha)
        self.lo = np.full((len(self.iu), n_tasks), -1.0)
        self.hi = np.full((len(self.iu), n_tasks), 1.0)

    def extend(self, values: np.ndarray, upto: int) -> None:
        t0 = self.running.t
        if upto > t0:
            x = np.nan_to_num(values[:, t0:upto], nan=0.0)
            cs = self.running.extend((x[self.iu] - x[self.ju] + 1.0) / 2.0)
            self.lo[:, t0:upto], self.hi[:, t0:upto] = 2.0 * cs.lo - 1.0, 2.0 * cs.hi - 1.0

    def at(self, t: int, stops: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """Bounds of every ordered pair's difference [j, k] (j minus k) at step min(t, stop_j,
        stop_k) (``stops``: each configuration's stop, or ``t``): a pair with a stopped member is
        frozen at the stop. A stopped configuration's later, overrun values are stored, not admitted."""
        stop = np.array(stops)
        tt = np.maximum(np.minimum(np.minimum(stop[self.iu], stop[self.ju]), t), 1) - 1
        rows = np.arange(len(self.iu))
        lo_p, hi_p = self.lo[rows, tt], self.hi[rows, tt]
        lo, hi = np.full((self.k, self.k), -1.0), np.full((self.k, self.k), 1.0)
        lo[self.iu, self.ju], hi[self.iu, self.ju] = lo_p, hi_p
        lo[self.ju, self.iu], hi[self.ju, self.iu] = -hi_p, -lo_p
        return lo, hi


class Elimination(StepRule):
    """``race``: a configuration confidently worse than ``top_k`` others is stopped; with
    ``eps_best``, once one is confidently within epsilon of every live one, the others are."""

    def __init__(self) -> None:
        self.pairs: PairCS | None = None

    def extend(self, race: State, upto: int) -> None:
        if self.pairs is None:
            k = len(race.configs)
            self.pairs = PairCS(k, race.n_tasks, race.design.alpha_per_comparison(k))
        self.pairs.extend(race.values, upto)

    def at(self, race: State, t: int) -> list[Decision]:
        assert self.pairs is not None
        lo_t, hi_t = self.pairs.at(t, [race.stopped.get(c, t) for c in race.configs])
        if len(race.live()) <= race.design.top_k:
            return []
        out = self._eliminate(race, t, lo_t, hi_t)
        if race.design.goal == "eps_best" and len(race.live()) > 1:
            out += self._settle(race, t, lo_t, hi_t)
        return out

    @staticmethod
    def _eliminate(race: State, t: int, lo_t: np.ndarray, hi_t: np.ndarray) -> list[Decision]:
        out: list[Decision] = []
        need = race.design.top_k
        alpha = race.design.alpha_per_comparison(len(race.configs))
        beaten = lo_t > 0                           # [j, k]: j is confidently better than k
        np.fill_diagonal(beaten, False)
        counts = beaten.sum(axis=0)
        # the most beaten first, so that with top:k (or a miss) no more than K - k are stopped
        for c in sorted((c for c in race.live() if counts[race.index[c]] >= need),
                        key=lambda c: (-counts[race.index[c]], race.index[c])):
            if len(race.live()) <= need:
                break
            k = race.index[c]
            j = int(np.argmax(np.where(beaten[:, k], lo_t[:, k], -np.inf)))
            b = race.configs[j]
            out.append(race.stop(t, c, f"eliminated by {b}: CS({b} - {c}) = [{lo_t[j, k]:+.3f}, "
                                       f"{hi_t[j, k]:+.3f}] at t = {t}, alpha_pair = {alpha:.3g}",
                                 b, lo_t[j, k], hi_t[j, k]))
        return out

    @staticmethod
    def _settle(race: State, t: int, lo_t: np.ndarray, hi_t: np.ndarray) -> list[Decision]:
        """eps_best: the first configuration (in configuration order) confidently within epsilon of
        every live one stops every other."""
        out: list[Decision] = []
        idx = np.array([race.index[c] for c in race.live()])
        sub = hi_t[np.ix_(idx, idx)].copy()     # [j, k]: upper bound of j minus k
        np.fill_diagonal(sub, -np.inf)
        ok = np.flatnonzero((sub < race.design.epsilon).all(axis=0))
        if ok.size:
            k = int(idx[ok[0]])
            c = race.configs[k]
            for o in race.live():
                if o != c:
                    out.append(race.stop(t, o, f"settled: {c} is within epsilon = {race.design.epsilon:g} "
                                               f"of every live configuration at t = {t}", c,
                                         lo_t[race.index[o], k], hi_t[race.index[o], k]))
        return out


class Halving(StepRule):
    """``halving``: at each rung but the last, keep the best 1/eta of the live by prefix mean."""

    def is_step(self, race: State, t: int) -> bool:
        return t in [max(1, math.ceil(f * race.n_tasks)) for f in race.design.rungs[:-1]]

    def at(self, race: State, t: int) -> list[Decision]:
        live = race.live()
        keep = max(1, math.ceil(len(live) / race.design.eta))
        means = {c: float(race.values[race.index[c], :t].mean()) for c in live}
        ranked = sorted(live, key=lambda c: (-means[c], race.index[c]))
        return [race.stop(t, c, f"{SCREENING}: mean {means[c]:.3f} over the first {t} tasks, "
                                f"not in the best {keep} of {len(live)}", "", means[c], means[c])
                for c in ranked[keep:]]


class Precision(StepRule):
    """``anytime_valid``: each configuration's own CS; with ``half_width``, a configuration stops
    once its CS is that narrow (never at the last position: it is exact there)."""

    def __init__(self) -> None:
        self.own: RunningCS | None = None
        self.lo = self.hi = np.zeros((0, 0))           # each configuration's bounds at every step so far

    def extend(self, race: State, upto: int) -> None:
        if self.own is None:
            self.own = RunningCS((len(race.configs),), race.n_tasks, race.design.alpha)
            self.lo = np.zeros((len(race.configs), race.n_tasks))
            self.hi = np.ones((len(race.configs), race.n_tasks))
        t0 = self.own.t
        if upto > t0:
            cs = self.own.extend(np.nan_to_num(race.values[:, t0:upto], nan=0.0))
            self.lo[:, t0:upto], self.hi[:, t0:upto] = cs.lo, cs.hi

    def at(self, race: State, t: int) -> list[Decision]:
        hw = race.design.half_width
        if hw is None or t >= race.n_tasks:
            return []
        out = []
        for c in race.live():
            i = race.index[c]
            a, b = float(self.lo[i, t - 1]), float(self.hi[i, t - 1])
            if (b - a) / 2 <= hw:
                out.append(race.stop(t, c, f"precise enough: CS half-width {(b - a) / 2:.3f} <= {hw:g} "
                                           f"at t = {t}", "", a, b))
        return out


class Incumbent:
    """``incumbent``: each wave after the first against the incumbent, the best configuration run
    in full in an earlier wave (its full mean is exact). Only the hosted wave holds back the common
    prefix; each challenger is checked over its own admitted prefix."""

    def __init__(self, configs: Sequence[str], waves: Sequence[Sequence[str]] | None) -> None:
        self.waves = [list(w) for w in waves] if waves is not None else [[c] for c in configs]
        if sorted(c for w in self.waves for c in w) != sorted(configs):
            raise ValueError("incumbent: the waves must list every configuration once")
        self.wave_of = {c: i for i, w in enumerate(self.waves) for c in w}
        self.checked: dict[str, int] = {}                 # positions of each challenger looked at

    def holds_back(self, race: State, config: str) -> bool:
        return self.wave_of[config] == self.current_wave(race)

    def current_wave(self, race: State) -> int:
        for w, cs in enumerate(self.waves):
            if any(c not in race.stopped and race.prefix(c) < race.n_tasks for c in cs):
                return w
        return len(self.waves)

    def decide(self, race: State) -> list[Decision]:
        new: list[Decision] = []
        for w, wave in enumerate(self.waves):
            if w == 0:
                continue
            earlier = [c for ws in self.waves[:w] for c in ws]
            if any(c not in race.stopped and race.prefix(c) < race.n_tasks for c in earlier):
                break         # an earlier wave is not done: its incumbent is not known yet
            before = [c for c in earlier if c not in race.stopped]
            inc = max(before, key=lambda c: (float(race.values[race.index[c]].mean()), -race.index[c]))
            for c in wave:
                if c not in race.stopped:
                    new += self._challenge(race, inc, c)
        return new

    def _challenge(self, race: State, inc: str, c: str) -> list[Decision]:
        """``c`` against the incumbent over the positions of its prefix not looked at yet: stopped at
        the first step where the incumbent is confidently better."""
        p = race.prefix(c)
        done = self.checked.get(c, 0)
        if p <= done:
            return []
        alpha = race.design.alpha_per_comparison(len(race.configs))
        xi = race.values[race.index[inc]]
        cs = paired_cs(xi[:p], race.values[race.index[c], :p], race.n_tasks, alpha)
        self.checked[c] = p
        for t in range(done + 1, p + 1):
            if is_step(race.design, race.n_tasks, t) and cs.lo[t - 1] > 0:
                return [race.stop(t, c, f"eliminated by incumbent {inc}: CS({inc} - {c}) = "
                                        f"[{cs.lo[t - 1]:+.3f}, {cs.hi[t - 1]:+.3f}] at t = {t}, "
                                        f"alpha_pair = {alpha:.3g}", inc, cs.lo[t - 1], cs.hi[t - 1])]
        return []


RuleFactory = Callable[[Sequence[str], Sequence[Sequence[str]] | None], Rule]

RULES: dict[str, RuleFactory] = {
    "race": lambda configs, waves: Elimination(),
    "halving": lambda configs, waves: Halving(),
    "anytime_valid": lambda configs, waves: Precision(),
    "incumbent": Incumbent,
}
