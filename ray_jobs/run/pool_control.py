"""The model pools one dispatch runs on, per model group: their replica events recorded in the run
dirs, the supervisor that watches their health and pushes new endpoints, the groups stopped because
no replica serves, and the pools released mid-wave once their episodes are done (their GPUs go to
the groups with work left: ``ray_jobs/cluster/moves.py``). It is in ``run/``, not ``cluster/``,
because it reads the points (a group's model and sizing); it gets the queue and in-flight counts it
decides on from the loop, and starts no episode."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from typing import Any

from engine.budget.cost import Prices
from engine.config import to_plain
from engine.hosting.events import ReplicaEvents
from ray_jobs.cluster.moves import Candidate, grow, release
from ray_jobs.cluster.session import Session
from ray_jobs.cluster.sizing import unit
from ray_jobs.cluster.supervisor import Supervisor
from ray_jobs.run.planning import Point


def group_of(p: Point) -> str:
    """The model group whose pool, queue and workers run point ``p`` ("none": a model-free agent)."""
    return Session.key(p.cfg.model) if p.uses_model else "none"


class PoolControl:
    """Per model group its pool (``pools``; "none" has none) and its first point (``heads``: its
    model and sizing); the groups released and those failing (why); what moved (the supervisor's
    record) and the groups never released mid-wave (``keep``: later waves', judges')."""

    def __init__(self, session: Session, groups: Mapping[str, list[Point]], heads: Mapping[str, Point],
                 keep: set[str] | None = None) -> None:
        self.session = session
        self.heads = heads
        self.keep = set(keep or ())
        self.released: set[str] = set()
        self.failing: dict[str, str] = {}            # model group -> why it was stopped
        self.moves: list[dict[str, Any]] = []        # pools released mid-wave and what grew (supervisor)
        self.pools = {g: session.pool_of(heads[g].cfg.model) for g in groups if g != "none"}
        self.events = ReplicaEvents({g: [p.store for p in pts] for g, pts in groups.items()}, self.pools)
        self.events.record_all()                     # the replicas' starts

    def get(self, g: str) -> Any:
        """Group ``g``'s pool (None: not hosted, or model-free)."""
        return self.pools.get(g)

    def of_point(self, p: Point) -> Any:
        """The pool point ``p``'s episodes call (None: a model-free agent, or not hosted)."""
        return self.pools.get(Session.key(p.cfg.model)) if p.uses_model else None

    def units(self, groups: set[str]) -> float:
        """The price units (``Prices.units_per_replica``) of the replicas serving ``groups`` now."""
        return sum(len(pool.endpoints) * Prices.of_model(to_plain(pool.cfg)).units_per_replica
                   for g in groups if (pool := self.pools.get(g)) is not None)

    def note(self) -> str:
        """Why a model has no replica in rotation (the progress line's note)."""
        return "; ".join(n for pool in self.pools.values() if pool is not None and (n := pool.rotation_note()))

    def supervise(self, push: Callable[[str, list[Any]], None]) -> Supervisor:
        """The supervisor's thread, started: it checks each pool's health (every
        ``model.health_check_s``), ``push``es new endpoints and records the replica events."""
        return Supervisor(self.pools, {g: self.heads[g].cfg.model.health_check_s for g in self.pools},
                          push, self.events.record).start()

    def stop(self, g: str, why: str) -> None:
        """Group ``g`` cannot serve (every replica given up): never released, never grown."""
        self.failing[g] = why

    def release_drained(self, sup: Supervisor, busy: set[str], waiting: set[str],
                        candidates: Callable[[], dict[str, Candidate]]) -> None:
        """A model group whose episodes are all done (none ``waiting`` queued, none ``busy`` in
        flight or restarting), while others still have some queued, gives its pool's GPUs to them
        (on the supervisor's thread, to the ``candidates`` it reads then)."""
        for g, pool in self.pools.items():
            if (pool is None or g in self.released or g in self.keep or g in self.failing or g in waiting
                    or g in busy or not waiting - {g}):
                continue
            self.released.add(g)
            eff = self.heads[g].cfg.cluster.sizing_efficiency
            res = unit(pool.cfg)[0]
            sup.move(g, functools.partial(release, self.session, g),
                     functools.partial(grow, candidates, eff, res, since=time.monotonic()))

    def candidates(self, left: Callable[[str], int], done: Mapping[str, int]) -> dict[str, Candidate]:
        """The model groups with a pool and episodes ``left`` (queued or in flight), not released
        and not failing, with their episodes ``done``: those a released pool's GPUs may grow."""
        return {h: Candidate(self.heads[h].cfg.model, pool, left(h), done[h])
                for h, pool in list(self.pools.items())
                if pool is not None and h not in self.released and h not in self.failing and left(h) > 0}

    def record(self, pool: Any) -> dict[str, Any]:
        """The pool's new replica events stored; why its replicas restarted, by cause."""
        self.events.record(pool)
        return dict(pool.restart_causes)

    def end(self, sup: Supervisor) -> None:
        """What the supervisor moved, kept for the run info once it has stopped."""
        self.moves = list(sup.moves)
