"""The episode worker actors of one dispatch, per model group, and every Ray call made to them: the
start (each group's workers sized for its pool), an episode sent to a worker, the calls in flight
and the episodes each worker has, the workers Ray is restarting (asked whether they answer again),
endpoints pushed from the supervisor's thread, the live counts of the progress line, and the kill
at the end. It decides nothing about which episode goes next (``queues.py``) or what a result
means (``dispatch_loop.py``); a lost worker's episode is requeued or not on the count it is given."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

import ray

from engine.config import engine_batch
from engine.errors import WorkerStartError
from engine.runtime.dispatch import EpisodeSpec, WorkerSetup, start_workers
from ray_jobs.cluster.sizing import derived_workers
from ray_jobs.run.planning import Point

log = logging.getLogger("dateline.run")

LIVE_COUNTS = ("steps", "tokens_in", "tokens_out")


class WorkerSet:
    """Per model group ``g`` its workers (worker ``w`` is ``workers[g][w]``); per call in flight
    (its Ray ref) the group, worker and episode; per worker its episodes in flight."""

    def __init__(self) -> None:
        self.workers: dict[str, list[Any]] = {}
        self.busy: dict[tuple[str, int], int] = defaultdict(int)        # episodes in flight per worker
        self.pending: dict[Any, tuple[str, int, EpisodeSpec]] = {}        # a worker's call not read yet
        self.reviving: dict[Any, tuple[str, int]] = {}                    # ping of a worker Ray is restarting
        self.pushes: dict[str, list[Any]] = {}       # the last endpoint push to each group's workers
        self.live_asks: list[Any] = []               # the workers' live counts not read yet

    def start(self, g: str, pts: list[Point], pool: Any) -> None:
        """The workers of model group ``g`` (sized for its pool ``pool``; None: model-free), each
        able to run every point of ``pts``."""
        c, m = pts[0].cfg.cluster, pts[0].cfg.model
        nw, inflight = derived_workers(m, len(pool.endpoints) if pool is not None else 1, c) if g != "none" \
            else (c.num_workers, c.num_workers * c.episodes_per_worker)
        handles: dict[str, tuple[WorkerSetup, Any, dict[str, Any] | None]] = {}
        for p in pts:
            assert p.setup is not None      # set by prepare_generation
            if c.concurrency == "auto":
                # every worker may fill a replica's whole batch: the engine admits its batch and
                # queues the rest, and the episodes in flight (batch / model_time_share) bound that
                # queue. A bound split per worker (batch / workers) left slots idle whenever one
                # worker's episodes were all in tool calls while another's waited for a slot.
                p.setup = replace(p.setup, inflight_per_replica=engine_batch(m))
            p.info["concurrency"] = {"mode": c.concurrency, "workers": nw, "episodes_in_flight": inflight,
                                     "replicas": len(pool.endpoints) if pool is not None else 0}
            handles[p.key] = (p.setup, p.index, p.services)
        self.workers[g] = start_workers(None, None, nw, c.episodes_per_worker, c.worker_num_cpus,
                                        points=handles, resources=c.worker_resources or None,
                                        prefix=f"worker-{g[:6]}")

    # -- what the loop asks -------------------------------------------------------------------------
    def groups(self) -> list[str]:
        return list(self.workers)

    def count(self, g: str) -> int:
        return len(self.workers[g])

    def busy_of(self, g: str, w: int) -> int:
        """Worker ``w`` of group ``g``: its episodes in flight."""
        return self.busy[(g, w)]

    def can_take(self, g: str, w: int) -> bool:
        """Whether worker ``w`` of group ``g`` may get an episode (not being restarted by Ray)."""
        return (g, w) not in self.reviving.values()

    @property
    def in_flight(self) -> int:
        return len(self.pending)

    @property
    def restarting(self) -> bool:
        return bool(self.reviving)

    @property
    def active(self) -> bool:
        """Calls in flight, or workers to wait for."""
        return bool(self.pending or self.reviving)

    def in_flight_of(self, keys: set[str]) -> int:
        """The episodes in flight of the points ``keys``."""
        return sum(1 for _, _, spec in self.pending.values() if spec.point in keys)

    def busy_groups(self) -> set[str]:
        """The groups with an episode in flight or a worker being restarted."""
        return {gg for gg, _, _ in self.pending.values()} | {gg for gg, _ in self.reviving.values()}

    def in_flight_per_group(self) -> dict[str, int]:
        """Episodes in flight per group (read from the supervisor's thread: a snapshot)."""
        inflight: dict[str, int] = defaultdict(int)
        for gg, _, _ in list(self.pending.values()):
            inflight[gg] += 1
        return inflight

    # -- Ray calls ----------------------------------------------------------------------------------
    def submit(self, g: str, w: int, spec: EpisodeSpec) -> None:
        """Episode ``spec`` to worker ``w`` of group ``g``, not waited for."""
        self.busy[(g, w)] += 1
        self.pending[self.workers[g][w].run.remote(spec)] = (g, w, spec)

    def ready(self, timeout: float) -> list[Any]:
        """The calls in flight that finished (waiting up to ``timeout`` seconds for the first)."""
        ready, _ = ray.wait(list(self.pending), num_returns=len(self.pending), timeout=timeout)
        return ready

    def collect(self, ref: Any) -> tuple[str, int, EpisodeSpec]:
        """A finished call off the books: its group, worker and episode."""
        g, w, spec = self.pending.pop(ref)
        self.busy[(g, w)] -= 1
        return g, w, spec

    def push_endpoints(self, g: str, eps: list[Any]) -> None:
        """Hand the workers new endpoints (from the supervisor's thread) without waiting for them:
        the answers of the previous push are read (a worker that missed it, dead or restarting, is
        logged: it gets the endpoints when it answers again, :meth:`revived`)."""
        done = [r for r in self.pushes.pop(g, []) if ray.wait([r], timeout=0)[0]]
        for r in done:
            try:
                ray.get(r)
            except Exception as e:  # noqa: BLE001 - a worker that missed it re-routes on its own failures
                log.warning("pushing endpoints of %s to a worker: %s", g[:6], e)
        self.pushes[g] = [w.set_endpoints.remote(g, eps) for w in self.workers[g]]

    def worker_lost(self, g: str, w: int, attempts: int, max_attempts: int) -> bool:
        """Worker ``w`` of group ``g`` died with an episode in flight (dispatched ``attempts``
        times): Ray restarts it, and it gets no new episode until it answers again. Whether the
        episode goes back to its queue (it has attempts left)."""
        if (g, w) not in self.reviving.values():
            self.reviving[self.workers[g][w].ping.remote()] = (g, w)
        return attempts < max_attempts

    def revived(self, pools: Mapping[str, Any]) -> Iterator[tuple[str, int]]:
        """The workers Ray restarted that answer again, each given its group's endpoints (``pools``:
        model group -> pool) before it is yielded; one that does not answer yet is asked again. A
        worker whose constructor failed raises: a restart would fail the same way."""
        answered, _ = ray.wait(list(self.reviving), num_returns=len(self.reviving), timeout=0)
        for ref in answered:
            g, w = self.reviving.pop(ref)
            try:
                ray.get(ref)
            except Exception as e:  # noqa: BLE001 - still restarting: ask again
                if "error raised in its creation task" in str(e):
                    raise WorkerStartError(f"episode worker {w} cannot start (its constructor failed; "
                                           f"a restart would fail the same way): {e}") from e
                self.reviving[self.workers[g][w].ping.remote()] = (g, w)
                continue
            if (pool := pools.get(g)) is not None:          # the restarted actor's routes
                self.workers[g][w].set_endpoints.remote(g, pool.endpoints)
            yield g, w

    def poll_live(self) -> tuple[int, ...] | None:
        """The workers' live counts (steps, tokens in, tokens out) without waiting: the answers to
        the previous poll (when all came; else None), and the next poll is sent."""
        refs, self.live_asks = self.live_asks, [w.live.remote() for ws in self.workers.values() for w in ws]
        if refs and len(ray.wait(refs, num_returns=len(refs), timeout=0)[0]) == len(refs):
            try:
                lives = ray.get(refs)
            except Exception:  # noqa: BLE001 - progress is best effort (a worker may be restarting)
                return None
            return tuple(sum(x[k] for x in lives) for k in LIVE_COUNTS)
        return None

    def live_now(self) -> tuple[int, ...] | None:
        """The workers' live counts, waited for (up to 10 s; None if a worker does not answer)."""
        try:
            lives = ray.get([w.live.remote() for ws in self.workers.values() for w in ws], timeout=10)
        except Exception:  # noqa: BLE001 - progress is best effort (a worker may be restarting)
            return None
        return tuple(sum(x[k] for x in lives) for k in LIVE_COUNTS)

    def stop_group(self, g: str) -> None:
        """Group ``g``'s calls in flight forgotten (no result), its workers killed."""
        for ref in [ref for ref, (gg, _, _) in self.pending.items() if gg == g]:
            self.pending.pop(ref)
        for ref in [ref for ref, (gg, _) in self.reviving.items() if gg == g]:
            self.reviving.pop(ref)
        for w in self.workers[g]:
            ray.kill(w)

    def kill_all(self) -> None:
        """Every worker killed (per sweep: the next wave hosts other models)."""
        for ws in self.workers.values():
            for w in ws:
                ray.kill(w)
