"""GPUs to where the work is: how many replicas each pool gets, from its work in replica-seconds,
and how they move when a pool's queue drains (issue 33). Pure: no Ray, no clock of its own, so
the driver and ``perf/sizing_sim.py`` (a simulated clock) run the same decisions.

**Work.** A pool's work is replica-seconds: the episodes (or, for a hosted judge, the judgements)
still to do times what one takes on one replica (:func:`replica_seconds_per_item`, measured from
stored runs or the pilot). GPU-seconds are that times the GPUs one replica takes.

**Plan** (:func:`plan`): every pool with work gets one replica (largest first, as they are placed);
then replicas are added one at a time to the pool that would finish last (its load time plus its
work over its replicas), where one fits on a node, while:

* the pool's load time stays small next to its work: ``replicas x load_s <= work_s x (1/eff - 1)``
  (``eff``: ``cluster.sizing_efficiency``, 0.92: at most 8 % of what a pool holds is loading, which
  leaves room for the drain at the end within the 10 % the issue allows), so
  a 10-point ablation worth 1.3 GPU-hours gets the few replicas its work pays for, not 64;
* the GPU-hours the plan would hold (work plus every replica's load) fit the budget's headroom.

A hosted judge is a pool like the others, sized by its own work, not by one token per episode.

**Reallocation** (:class:`Reallocator`): a pool whose queue has drained (nothing left to send, and
for a judge nothing left upstream either) gives back its idle replicas at once, mid-wave; free
GPUs go, by the same rule as the plan, to the pools that would finish last. A replica with calls
in flight is never taken (its calls finish first).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

EFFICIENCY = 0.92
"""Default share of held GPU time a pool's work must fill (loading the rest): 0.9 left the analyst
with a hosted judge at 0.905 in ``perf/sizing_sim.py`` (the judge's drain took the margin); 0.92
gives 0.93-0.955 there, at up to twice the wall time of 0.9 for the smallest runs."""


@dataclass
class PoolWork:
    """One pool as the planner sees it."""
    key: str
    gpus: float                   # what one replica takes (GPUs; CPUs for a CPU-only model)
    load_s: float                 # seconds from placement to serving (weights, engine start)
    work_s: float                 # replica-seconds of work left (queued and still to come)
    upstream: tuple[str, ...] = ()    # pools whose output it consumes (a hosted judge: the models it judges)
    replicas: int = 0             # replicas it holds now
    busy: int = 0                 # of those, replicas with calls in flight
    queued_s: float = 0.0         # replica-seconds ready to send now (<= work_s; a judge's grows)
    max_replicas: int | None = None   # a fixed model.replicas (not auto)


@dataclass
class Decision:
    """Replicas to start (+) or release (-) per pool, and why."""
    changes: dict[str, int] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)

    def add(self, key: str, n: int, why: str) -> None:
        self.changes[key] = self.changes.get(key, 0) + n
        self.reasons[key] = why


def cap_by_load(p: PoolWork, efficiency: float) -> int:
    """Most replicas whose loading stays within ``1 - efficiency`` of what the pool holds."""
    if p.max_replicas is not None:
        return p.max_replicas
    if p.load_s <= 0:
        return 1 << 30
    return max(1, math.floor(p.work_s * (1.0 / efficiency - 1.0) / p.load_s + 1e-9))


def finish_s(p: PoolWork, replicas: int) -> float:
    return p.load_s + p.work_s / max(replicas, 1)


def held_gpu_s(pools: Sequence[PoolWork], replicas: dict[str, int]) -> float:
    """GPU-seconds a plan holds if every replica works until its pool's work is done: the work,
    plus each replica's load time."""
    return sum(p.gpus * (p.work_s + replicas.get(p.key, 0) * p.load_s) for p in pools)


def _fits(free: list[float], gpus: float) -> int | None:
    """The fullest node one replica fits on (best fit keeps whole nodes for the big replicas)."""
    ok = [i for i, f in enumerate(free) if f + 1e-9 >= gpus]
    return min(ok, key=lambda i: free[i] - gpus) if ok else None


def plan(pools: Sequence[PoolWork], free_per_node: Sequence[float], efficiency: float = EFFICIENCY,
         budget_gpu_s: float | None = None, held_now: dict[str, int] | None = None) -> dict[str, int]:
    """Replicas per pool. ``free_per_node``: GPUs free on each node, beyond what ``held_now`` (the
    replicas pools already hold, counted in the result) occupies; ``budget_gpu_s``: the headroom."""
    free = list(free_per_node)
    out = {p.key: (held_now or {}).get(p.key, 0) for p in pools}
    live = [p for p in pools if p.work_s > 0]
    for p in sorted(live, key=lambda p: p.gpus, reverse=True):      # at least one each, largest first
        if out[p.key] == 0:
            node = _fits(free, p.gpus)
            if node is not None:
                free[node] -= p.gpus
                out[p.key] = 1
    while True:
        best: PoolWork | None = None
        for p in live:
            if out[p.key] == 0 or out[p.key] >= cap_by_load(p, efficiency) or _fits(free, p.gpus) is None:
                continue
            if budget_gpu_s is not None and held_gpu_s(pools, out) + p.gpus * p.load_s > budget_gpu_s:
                continue
            if finish_s(p, out[p.key] + 1) >= finish_s(p, out[p.key]) - 1e-9:
                continue
            if best is None or finish_s(p, out[p.key]) > finish_s(best, out[best.key]):
                best = p
        if best is None:
            return out
        node = _fits(free, best.gpus)
        assert node is not None
        free[node] -= best.gpus
        out[best.key] += 1


class Reallocator:
    """Mid-wave moves: a drained pool gives back its idle replicas; free GPUs go to the pools
    that would finish last (:func:`plan` over what is left)."""

    def __init__(self, efficiency: float = EFFICIENCY, budget_gpu_s: float | None = None) -> None:
        self.efficiency = efficiency
        self.budget_gpu_s = budget_gpu_s

    @staticmethod
    def drained(p: PoolWork, pools: dict[str, PoolWork]) -> bool:
        """Nothing left to send and nothing coming: its upstream pools have no work left either."""
        return p.queued_s <= 0 and p.work_s <= 0 and all(pools[u].work_s <= 0 for u in p.upstream if u in pools)

    def step(self, pools: Sequence[PoolWork], free_per_node: Sequence[float],
             spent_gpu_s: float = 0.0) -> Decision:
        by_key = {p.key: p for p in pools}
        d = Decision()
        free = list(free_per_node)
        for p in pools:
            if p.replicas and self.drained(p, by_key):
                idle = p.replicas - p.busy
                if idle > 0:
                    d.add(p.key, -idle, "queue drained")
                    # the GPUs come back on whichever node; counted on the emptiest (a best guess
                    # for the plan below; the driver re-reads the nodes before it places)
                    for _ in range(idle):
                        i = max(range(len(free)), key=lambda i: free[i]) if free else None
                        if i is not None:
                            free[i] += p.gpus
        held = {p.key: p.replicas + d.changes.get(p.key, 0) for p in pools}
        # what each pool can still use: its work left; a judge's includes what its upstream will send
        budget = None if self.budget_gpu_s is None else max(0.0, self.budget_gpu_s - spent_gpu_s)
        want = plan([p for p in pools if not self.drained(p, by_key)], free, self.efficiency, budget, held)
        for p in pools:
            more = want.get(p.key, held[p.key]) - held[p.key]
            if more > 0:
                d.add(p.key, more, "most work left")
        return d


def replica_seconds_per_item(tokens_per_item: float, tokens_per_replica_s: float) -> float:
    """Replica-seconds one episode (or judgement) takes: its tokens over what one replica
    serves per second at its batch."""
    return tokens_per_item / max(tokens_per_replica_s, 1e-9)
