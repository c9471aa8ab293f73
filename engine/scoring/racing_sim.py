"""Synthetic sweeps for checking the decision rules of :mod:`engine.scoring.racing` (the coverage
tests and ``perf/adaptive_sim.py``): outcomes from a 2PL item-response model with tasks shared by
every configuration, and an event-driven cluster on which episodes finish out of order.

The outcome model follows ``../shared/design/adaptive-evaluation.md`` section 9: task difficulty
b ~ N(0, 1.2), discrimination exp(N(0, 0.3)), configuration ability N(0, spread), and a per-task
coupling ``rho`` between configurations (a Gaussian copula: the same task is hard for all of
them; the normal CDF is taken as the logistic 1 / (1 + exp(-1.702 z))). Everything is drawn once per sweep, so the full-run scores are exact means over N tasks.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.scoring.anytime import mean_cs
from engine.scoring.racing import Design, Race, replay


def irt_sweep(rng: np.random.Generator, k: int, n: int, rho: float = 0.3, spread: float = 0.8,
              ties: int = 0, abilities: Sequence[float] | None = None) -> np.ndarray:
    """0/1 outcomes, shape (k, n), already in a random task order. ``ties``: the best
    configuration is copied this many times (exact ties at the top, the hardest case)."""
    b = rng.normal(0.0, 1.2, n)
    a = np.exp(rng.normal(0.0, 0.3, n))
    theta = np.asarray(abilities, dtype=float) if abilities is not None else rng.normal(0.0, spread, k)
    z = math.sqrt(rho) * rng.normal(size=n)[None, :] + math.sqrt(1 - rho) * rng.normal(size=(k, n))
    p = 1.0 / (1.0 + np.exp(-a * (theta[:, None] - b[None, :])))
    u = 1.0 / (1.0 + np.exp(-1.702 * z))        # about Phi(z) (within 0.01): uniform, coupled across configurations
    x: np.ndarray = (u < p).astype(float)
    if ties:
        top = int(np.argmax(x.mean(axis=1)))
        others = [i for i in range(k) if i != top][:ties]
        x[others] = x[top]
    return x


@dataclass(frozen=True)
class SweepResult:
    wrong: bool            # a configuration that is best on the full set (eps_best: the goal) was lost
    used: float            # episodes run / episodes of the full sweep
    stopped: int


def run_sweep(design: Design, x: np.ndarray, waves: Sequence[Sequence[int]] | None = None) -> SweepResult:
    """One sweep through the real decision code (:func:`engine.scoring.racing.replay`), every
    configuration advancing in the shared order; what was lost and what was spent."""
    k, n = int(x.shape[0]), int(x.shape[1])
    names = [f"c{i}" for i in range(k)]
    race = replay(design, {names[i]: x[i] for i in range(k)}, n,
                  [[names[i] for i in w] for w in waves] if waves is not None else None)
    full = x.mean(axis=1)
    stop: dict[int, int] = {names.index(c): t for c, t in race.stopped.items()}
    used = sum(stop.get(i, n) for i in range(k)) / (k * n)
    survivors = [i for i in range(k) if i not in stop]
    wrong: bool
    if design.goal == "eps_best" and design.strategy == "race":
        wrong = not any(full[i] >= full.max() - design.epsilon - 1e-12 for i in survivors)
    elif design.goal.startswith("top:"):
        kth = np.sort(full)[::-1][design.top_k - 1]
        wrong = sum(bool(full[i] >= kth - 1e-12) for i in survivors) < design.top_k    # ties: any k of them
    else:
        wrong = any(i in stop for i in np.flatnonzero(full >= full.max() - 1e-12)) and \
            not any(full[i] >= full.max() - 1e-12 for i in survivors)
    return SweepResult(bool(wrong), used, len(stop))


@dataclass(frozen=True)
class ClusterResult:
    lo: float
    hi: float
    admitted: int          # positions behind the interval (the dispatch-order prefix)
    dispatched: int
    naive_lo: float        # the same CS over results in completion order (what must not be done)
    naive_hi: float


def out_of_order(rng: np.random.Generator, pop: np.ndarray, design: Design, inflight: int = 64,
                 slow_factor: float = 3.0, timeout_p: float = 0.02, lost_p: float = 0.01,
                 judge_delay: float = 0.5) -> ClusterResult:
    """One capped run of one configuration on a simulated cluster: ``inflight`` episodes at a
    time, dispatched in the shared order; a failure (value 0) takes ``slow_factor`` times as long
    as a success, a timeout (``timeout_p``) ten times, a lost worker (``lost_p``) reruns the
    episode after a delay, and a judged value arrives ``judge_delay`` (times an exponential) after
    the episode. The :class:`Race` decides on arrivals and stops dispatching when it decides; the
    episodes in flight finish (never cancelled). Returns the CS from the prefix, and the naive CS
    from the results in completion order at the same stop, for contrast."""
    n = pop.size
    race = Race(design, ["c"], n)
    clock, nxt = 0.0, 0
    events: list[tuple[float, int, int]] = []         # (time the value arrives, position, kind)
    arrived: list[float] = []

    # every episode's delay, drawn up front: a failure is slower, a timeout takes 10, a lost worker
    # reruns the episode after a delay, and a judged value arrives later still
    base = rng.exponential(1.0, n) * np.where(pop > 0.5, 1.0, slow_factor)
    base = np.where(rng.random(n) < timeout_p, 10.0, base) + judge_delay * rng.exponential(1.0, n)
    rerun = rng.exponential(1.0, n) * np.where(pop > 0.5, 1.0, slow_factor) + judge_delay * rng.exponential(1.0, n)
    delays = base + np.where(rng.random(n) < lost_p, 5.0 + rerun, 0.0)

    def send(pos: int, at: float) -> None:
        heapq.heappush(events, (at + float(delays[pos]), pos, 0))

    while nxt < min(inflight, n):
        race.dispatched("c", nxt)
        send(nxt, clock)
        nxt += 1
    while events:
        clock, pos, _ = heapq.heappop(events)
        race.observe("c", pos, float(pop[pos]))
        arrived.append(float(pop[pos]))
        if race.common_prefix() >= race.step + 16 or not events:    # decide as the prefix grows (a driver decides each second)
            race.decide()
        if nxt < n and race.wants("c"):
            race.dispatched("c", nxt)
            send(nxt, clock)
            nxt += 1
    lo, hi, t = race.interval("c")
    stop_at = race.stopped.get("c", n)
    naive = mean_cs(np.array(arrived[:stop_at]), n, design.alpha)
    nlo, nhi = naive.at(stop_at) if stop_at else (0.0, 1.0)
    return ClusterResult(lo, hi, t, nxt, nlo, nhi)
