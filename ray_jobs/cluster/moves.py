"""A drained pool's GPUs to the models with the most work left, mid-wave (issue 33).

The dispatch loop notices a model group whose episodes are all done (nothing queued, nothing in
flight, no worker restarting) while others still have episodes queued, and whose pool nothing
else needs (a later wave, a judge). :func:`release_and_grow` then runs on the supervisor's thread
(``ray_jobs/cluster/supervisor.py``): the pool is stopped (its uptime kept for the wave's accounting),
and :class:`ray_jobs.cluster.allocation.Reallocator` decides which of the other auto-sized pools get
replicas on what came free, from their work left: episodes queued and in flight times their
replica-seconds per episode measured in this dispatch so far. ``ModelPool.grow`` places and starts
them; they join rotation at a later health check, and the workers' routers send new episodes
to them (least loaded first)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from engine.config import ModelConfig
from ray_jobs.cluster.allocation import PoolWork, Reallocator
from ray_jobs.cluster.sizing import unit

log = logging.getLogger(__name__)


@dataclass
class Candidate:
    """A pool that may grow: its model, its pool, its episodes left and done in this dispatch."""
    model: ModelConfig
    pool: Any
    left: int
    done: int


def measured_work(c: Candidate) -> PoolWork | None:
    """The candidate's work left in replica-seconds, from what its pool did so far (None until it
    finished an episode)."""
    if c.done <= 0 or c.left <= 0:
        return None
    load = max([float(s.get("healthy_after_s", 0.0)) for s in c.pool.startup if s] or [0.0])
    replicas = len(c.pool.replicas)
    spent = max(0.0, c.pool.replica_seconds() - load * replicas)
    per = spent / c.done
    if per <= 0:
        return None
    return PoolWork("", unit(c.model)[1], load, c.left * per, replicas=replicas, busy=replicas,
                    queued_s=c.left * per)


def free_per_node(resource: str) -> list[float]:
    import ray._private.state as ray_state

    return [float(res.get(resource, 0.0)) for res in ray_state.available_resources_per_node().values()]


def release(session: Any, g: str, settle_s: float = 10.0) -> dict[str, Any]:
    """Stop pool ``g`` (its uptime kept), and wait (up to ``settle_s``) until Ray shows its
    resources free (it frees placement groups asynchronously)."""
    pool = session.pools.get(g, (None,))[0]
    res = unit(pool.cfg)[0] if pool is not None else "GPU"
    before = sum(free_per_node(res))
    freed = len(pool.replicas) * unit(pool.cfg)[1] if pool is not None else 0.0
    uptime = session.release(g)
    deadline = time.monotonic() + settle_s
    while sum(free_per_node(res)) < before + freed - 1e-6 and time.monotonic() < deadline:
        time.sleep(0.2)
    log.info("pool %s released mid-wave (%.0f replica-seconds; %g %s back)", g[:6], uptime, freed, res)
    return {"uptime_s": round(uptime, 1), "freed": freed, "resource": res}


def grow(candidates: Any, efficiency: float, resource: str = "GPU", wait_s: float = 120.0,
         since: float | None = None) -> dict[str, Any] | None:
    """Replicas on the free ``resource`` for the auto-sized pools with work left
    (``candidates()``: live :class:`Candidate` per group), as the reallocator decides; None while
    none of them has finished an episode yet (no pace to plan by), for up to ``wait_s``."""
    cands: dict[str, Candidate] = candidates()
    works = {}
    for k, c in cands.items():
        if c.model.replicas == "auto" and unit(c.model)[0] == resource and (w := measured_work(c)) is not None:
            w.key = k
            works[k] = w
    waiting = [k for k, c in cands.items() if c.model.replicas == "auto" and c.left > 0]
    if not works:
        if waiting and (since is None or time.monotonic() - since < wait_s):
            return None
        return {"grown": {}}
    decision = Reallocator(efficiency).step(list(works.values()), free_per_node(resource))
    grown = {k: cands[k].pool.grow(n) for k, n in decision.changes.items() if n > 0}
    log.info("replicas added on what came free: %s (work left, replica-seconds: %s)",
             {k[:6]: n for k, n in grown.items()} or "none",
             {k[:6]: round(w.work_s, 1) for k, w in works.items()})
    return {"grown": grown}
