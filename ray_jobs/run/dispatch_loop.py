"""The dispatch stage of ``dateline run``: one queue of episodes per model feeding one set of
worker actors, rows handed to the background writer as they finish and to the judges once stored,
budgets, failure caps, lost workers and replica health handled between iterations.

:class:`DispatchLoop` is the loop and what each event means; it delegates to one unit per concern:
``queues.py`` (which episode goes next), ``workers.py`` (the worker actors and every call to them),
``sink.py`` (rows to the writer and the judges), ``budget_watch.py`` (the budgets' decisions),
``adaptive_gate.py`` (the adaptive rule's) and ``pool_control.py`` (the model pools)."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from typing import Any

import ray

from engine.runtime.dispatch import STOPPED_EARLY, WORKER_LOST, EpisodeSpec, unstarted_row
from engine.runtime.progress import Progress
from engine.runtime.replicas import gather_stats
from ray_jobs.budget.gates import budget_exhausted_rows
from ray_jobs.cluster import signals as stopping
from ray_jobs.cluster.moves import Candidate
from ray_jobs.cluster.session import Session
from ray_jobs.cluster.supervisor import Supervisor
from ray_jobs.judging.fleet import JudgeFleet
from ray_jobs.judging.stream import JudgeStream
from ray_jobs.run.adaptive_gate import AdaptiveGate
from ray_jobs.run.budget_watch import BudgetWatch
from ray_jobs.run.planning import Point
from ray_jobs.run.pool_control import PoolControl, group_of
from ray_jobs.run.queues import EpisodeQueues, interleave
from ray_jobs.run.sink import RowSink
from ray_jobs.run.workers import WorkerSet

__all__ = ["DispatchLoop", "dispatch", "interleave"]     # interleave: its old import path (now queues.py's)

log = logging.getLogger("dateline.run")


@stopping.deferring        # a signal stops the loop between iterations (ray_jobs/cluster/signals.py)
def dispatch(groups: dict[str, list[Point]], session: Session, stream: JudgeStream | JudgeFleet,
             keep: set[str] | None = None) -> None:
    """One queue per model, feeding one set of worker actors that run every point of that model:
    points overlap (the next point's episodes fill the slots of the last one's tail). Rows go to
    the store writer as they finish, and to the judges once they are stored."""
    if groups:
        DispatchLoop(groups, session, stream, keep).run()


class DispatchLoop:
    """The state one dispatch shares across its iterations: per model group its points; per point
    its counts; the episodes finished per group, the progress line, the longest stall; and its six
    units (the queues, the workers, the row sink, the budget watch, the adaptive gate, the pools).
    :meth:`run` is the loop; each other method is one thing that can happen in it."""

    def __init__(self, groups: dict[str, list[Point]], session: Session, stream: JudgeStream | JudgeFleet,
                 keep: set[str] | None = None) -> None:
        self.groups, self.session = groups, session
        self.done: dict[str, int] = defaultdict(int)     # episodes finished per model group
        self.by_key: dict[str, Point] = {}
        self.queues = EpisodeQueues()
        self.workers = WorkerSet()
        for g, pts in groups.items():
            self._start_group(g, pts)
        by_key = self.by_key
        self.stats = {k: {"failures": 0, "requeued": 0, "steps": 0, "tokens_in": 0, "tokens_out": 0} for k in by_key}
        self.progress = Progress(self.queues.total(), all(p.cfg.run.progress for p in by_key.values()))
        # keep: pools never released mid-wave (later waves', judges')
        self.pools = PoolControl(session, groups, {g: by_key[pts[0].key] for g, pts in groups.items()}, keep)
        self.progress.model_total = self.queues.total(but="none")
        self.max_stall_s = 0.0                       # the longest loop iteration, its wait left out
        self.sink = RowSink.of_points(list(by_key.values()), stream)
        self.gate = AdaptiveGate.of(by_key.values())     # an adaptive rule (ray_jobs/run/adaptive.py)
        self.budget = BudgetWatch(self.pools.units)
        for key, why in self.gate.stopped_before(by_key):     # stopped before (a resumed run)
            self._stopped(key, why)

    def _start_group(self, g: str, pts: list[Point]) -> None:
        """The workers of model group ``g`` (sized for its pool) and its queue of episodes."""
        self.workers.start(g, pts, self.session.pool_of(pts[0].cfg.model) if g != "none" else None)
        self.queues.add(g, [(p.key, p.plan.todo) for p in pts])
        self.by_key.update({p.key: p for p in pts})

    def _per_worker(self, g: str) -> int:
        return self.groups[g][0].cfg.cluster.episodes_per_worker

    def submit(self, g: str, w: int) -> None:
        """Worker ``w`` of group ``g`` takes the group's next episode, if it may and one may go."""
        if self.queues.queued(g) and self.workers.can_take(g, w) and not stopping.requested():
            spec = self.queues.next(g, self.gate.wants)
            if spec is None:
                return
            self.queues.dispatched(spec)
            self.gate.dispatched(spec)
            self.workers.submit(g, w, spec)

    def stop_model(self, g: str, why: str) -> None:
        """The model of group ``g`` cannot serve (every replica given up): its queued and in-flight
        episodes are left not run (no row: the same command runs them once it serves), its
        workers stop, and the run will exit non-zero with ``why``."""
        self.pools.stop(g, why)
        log.error("%s; its remaining episodes are left not run", why)
        for p in self.groups[g]:
            self.drop(g, p.key, "", None)
            p.info["model_failing"] = why
        self.workers.stop_group(g)

    def _adapt(self, force: bool = False) -> None:
        """The adaptive rule's decisions on what is stored so far (at most once a second): stopped
        points' queued episodes are stored as ``stopped_early``; paused points' episodes wait
        aside; resumed ones go back to the front of their queue, and idle workers take them."""
        step = self.gate.step(force)
        if step is None:
            return
        stopped, resumed = step
        for key, why in stopped:
            if key in self.by_key:
                self._stopped(key, why)
        for key in resumed:
            self._resume(key)
        if not self.workers.in_flight and self.queues.held_points():   # nothing in flight can settle a pause
            for key in self.queues.held_points():                       # never strand episodes
                log.warning("adaptive: %s resumed (nothing in flight to decide its pause)", key[:8])
                self._resume(key)

    def _resume(self, key: str) -> None:
        if not self.queues.holds(key):
            return
        p = self.by_key[key]
        g = group_of(p)
        self.queues.resume(g, key)
        for w in range(self.workers.count(g)):
            while self.workers.busy_of(g, w) < p.cfg.cluster.episodes_per_worker and self.queues.queued(g) \
                    and self.workers.can_take(g, w):
                before = self.workers.in_flight
                self.submit(g, w)
                if self.workers.in_flight == before:
                    break

    def _unstarted(self, g: str, key: str, rows: list[dict[str, Any]]) -> None:
        """Rows of point ``key``'s episodes that never start, to the sink and the progress line."""
        for row in self.sink.add_unstarted(key, rows):
            self.progress.update(row, model=g != "none")

    def _stopped(self, key: str, why: str) -> None:
        """Point ``key`` was stopped by the adaptive rule: its queued and held episodes are stored
        as ``stopped_early`` (once: a resumed run finds them stored), none is dispatched again."""
        p = self.by_key[key]
        g = group_of(p)
        gone = self.queues.take_point(g, key, held_first=True)
        stored = p.store.finished_ids(config_hash=p.plan.config_hash, statuses=(STOPPED_EARLY,))
        fresh = [s for s in gone if s.episode_id not in stored]
        assert p.setup is not None
        self._unstarted(g, key, [unstarted_row(p.setup, s, STOPPED_EARLY, f"StoppedEarly: {why}") for s in fresh])
        self.progress.total -= len(gone) - len(fresh)     # stored as stopped before: not this run's
        if g != "none":
            self.progress.model_total -= len(gone) - len(fresh)

    def drop(self, g: str, point: str, why: str, status: str | None) -> None:
        """Take a point's episodes off its queue (budget or failure cap): stored as never started
        (no row when ``status`` is None: the same command runs them)."""
        gone = self.queues.take_point(g, point)
        if gone and status is not None:
            p = self.by_key[point]
            assert p.setup is not None
            self._unstarted(g, point, budget_exhausted_rows(p.setup, gone, why))

    def ledger_lost(self, g: str, w: int, p: Point, spec: EpisodeSpec, res: dict[str, Any]) -> None:
        """An episode whose call could not ask the budget ledger (engine.budget.LedgerLost): not a
        result, so never stored as one. While the ledger answers again (Ray restarted it), the
        episode goes back to the front of its queue (up to cluster.max_episode_attempts); once the
        ledger is gone for good, it and every queued episode of the points that share the ledger
        are left unstarted (no row: the same command runs them)."""
        st = self.stats[p.key]
        st["tokens_in"] += res.get("tokens_in", 0)        # what its attempt spent still counts
        st["tokens_out"] += res.get("tokens_out", 0)
        decision = self.budget.ledger_lost(p, spec, self.queues.attempts_of(spec.episode_id), res["ledger_lost"])
        if decision == "requeue":
            self.queues.requeue_front(g, spec)
            st["requeued"] += 1
        elif decision == "give_up":
            p.info["budget_lost"] = res["ledger_lost"]
        else:
            for q in self.by_key.values():
                if q.budget is p.budget:
                    q.info["budget_lost"] = res["ledger_lost"]
                    gq = group_of(q)
                    if gq in self.queues:
                        self.drop(gq, q.key, "", None)
        self.submit(g, w)

    def run(self) -> None:
        for g in self.workers.groups():
            for _ in range(self._per_worker(g)):
                for w in range(self.workers.count(g)):
                    self.submit(g, w)
        last_poll = time.monotonic()
        sup = self.pools.supervise(self.workers.push_endpoints)
        try:
            # on a signal: no new episode; those in flight stop with their workers below and are no
            # result (no row: the same command runs them); the rows that finished are flushed
            while self.workers.active and not stopping.requested():
                t_iter = time.monotonic()
                if self.workers.restarting:
                    self._revive()
                if not self.workers.in_flight:
                    time.sleep(0.2)
                    continue
                self._stop_spent_budgets()
                self._drain()
                t_wait = time.monotonic()
                ready = self.workers.ready(timeout=0.5)
                t_work = time.monotonic()
                for ref in ready:
                    self._collect(ref)
                self._adapt(force=not self.workers.in_flight)
                self.sink.flush()         # a hand-off: the writer flushes by size or run.flush_interval_s
                if time.monotonic() - last_poll >= 5.0:
                    self._poll_live()
                    last_poll = time.monotonic()
                self._between(sup)
                # what the iteration did besides waiting for results: the time no episode was dispatched
                self.max_stall_s = max(self.max_stall_s, time.monotonic() - t_iter - (t_work - t_wait))
            if not stopping.requested() and (live := self.workers.live_now()) is not None:
                self.progress.set_live(*live)
        finally:
            sup.stop()
            self.pools.end(sup)
            try:
                self.sink.flush(final=True)   # everything written, in order, before reduce / judge read the store
            finally:
                self.workers.kill_all()       # per sweep: the next wave hosts other models
        stopping.check()
        self._record()

    def _between(self, sup: Supervisor) -> None:
        """The end of an iteration: models the supervisor found failing stopped, drained pools
        released, the progress line drawn."""
        for g, why in list(sup.failing.items()):
            if g not in self.pools.failing:
                self.stop_model(g, why)
        self.pools.release_drained(sup, self.workers.busy_groups(), self.queues.waiting(), self._candidates)
        self.progress.note = self.pools.note()
        self.progress.render()

    def _revive(self) -> None:
        """Workers Ray restarted that answer again get their routes and their share of episodes."""
        for g, w in self.workers.revived(self.pools.pools):
            for _ in range(self._per_worker(g) - self.workers.busy_of(g, w)):
                self.submit(g, w)

    def _stop_spent_budgets(self) -> None:
        """Points whose budget closed stop dispatching (the ledger is asked without waiting)."""
        for p, why in self.budget.spent(self.by_key.values(), lambda p: self.queues.has(group_of(p), p.key)):
            log.warning("stopping %s: %s; in-flight episodes finish, the rest never start", p.key[:6], why)
            self.drop(group_of(p), p.key, why, "budget")

    def _drain(self) -> None:
        """Adaptive points under a budget stop dispatching once what is left of it would not cover
        their episodes in flight (``BudgetWatch.drain``)."""
        if not self.gate.on:
            return
        raced = [p for p in self.by_key.values() if p.budget is not None and self.gate.races(p.key)]
        for p, why in self.budget.drain(raced, self.queues.waiting_for, self.workers.in_flight_of):
            log.warning("stopping %s: %s", p.key[:6], why)
            p.info["drained"] = why
            self.drop(group_of(p), p.key, why, "budget")

    def _poll_live(self) -> None:
        """The workers' live counts for the progress line, without waiting."""
        if (live := self.workers.poll_live()) is not None:
            self.progress.set_live(*live)

    def _collect(self, ref: Any) -> None:
        """One finished call of a worker: its result, a lost worker, or a lost ledger."""
        g, w, spec = self.workers.collect(ref)
        p = self.by_key[spec.point]
        assert p.setup is not None
        try:
            res = ray.get(ref)
        except WORKER_LOST as e:
            lost = self._worker_lost(g, w, p, spec, e)
            if lost is None:
                return
            res = lost
        if "ledger_lost" in res:
            self.ledger_lost(g, w, p, spec, res)
            return
        self._take(g, p, res)
        self._drain()                 # before the freed slot takes a new episode
        self.submit(g, w)

    def _worker_lost(self, g: str, w: int, p: Point, spec: EpisodeSpec, e: BaseException) -> dict[str, Any] | None:
        """The worker died with the episode in flight (process or node lost): Ray restarts the
        actor; the episode goes back to the front of its queue (None), and only a result ever
        reaches the store, so it is stored exactly once; after its last attempt, an error row."""
        c = p.cfg.cluster
        assert p.setup is not None
        n = self.queues.attempts_of(spec.episode_id)
        if self.workers.worker_lost(g, w, n, c.max_episode_attempts):
            log.warning("worker %d lost episode %s (%s): requeued (attempt %d of %d)", w,
                        spec.episode_id, type(e).__name__, n + 1, c.max_episode_attempts)
            self.queues.requeue_front(g, spec)
            self.stats[p.key]["requeued"] += 1
            for other in range(self.workers.count(g)):     # a live worker with room takes it now
                if self.workers.busy_of(g, other) < c.episodes_per_worker:
                    self.submit(g, other)
            return None
        return {"episode": unstarted_row(p.setup, spec, "error", f"{type(e).__name__}: worker lost "
                                         f"{n} times: {e}"), "steps": []}

    def _take(self, g: str, p: Point, res: dict[str, Any]) -> None:
        """A result: its rows buffered for the writer, its counts, and the failure cap."""
        row = self.sink.add_result(p.key, res)
        self.progress.update(row, model=g != "none")
        self.done[g] += 1
        st = self.stats[p.key]
        st["steps"] += row["n_steps"]
        st["tokens_in"] += row["tokens_in"]
        st["tokens_out"] += row["tokens_out"]
        st["failures"] += row["status"] == "error"          # a budget stop is not a failure
        if self.gate.take(p.key, row):
            self.budget.count(p, row)
        mf = p.cfg.run.max_failures
        if mf and st["failures"] >= mf and self.queues.has(g, p.key):
            log.error("stopping: %d episodes failed (run.max_failures) in %s; in-flight ones finish",
                      st["failures"], p.key[:6])
            p.info["stopped_at_max_failures"] = mf
            self.drop(g, p.key, "", None)

    def _candidates(self) -> dict[str, Candidate]:
        """The model groups with episodes left and a pool (read from the supervisor's thread: a
        snapshot of counts that may be a loop iteration old)."""
        inflight = self.workers.in_flight_per_group()
        return self.pools.candidates(lambda h: self.queues.queued(h) + inflight[h], self.done)

    def _record(self) -> None:
        """What each point's run info says about this dispatch (``dispatch_max_stall_s``: the
        longest loop iteration, its wait for results left out)."""
        for k, st in self.stats.items():
            p = self.by_key[k]
            pool = self.pools.of_point(p)
            if p.info.get("budget_lost"):       # planned, but neither run nor stored: the same command runs them
                p.info["unstarted"] = self.sink.unstored(p.plan.todo)
            if p.info.get("model_failing"):     # left not run: the same command runs them
                p.info["not_run"] = self.sink.unstored(p.plan.todo)
            if pool is not None:
                p.info["replica_restart_causes"] = self.pools.record(pool)
            p.info["requeued"], p.info["replica_restarts"] = st["requeued"], pool.restarts if pool is not None else 0
            p.info["failures"], p.info["steps"] = st["failures"], st["steps"]
            p.info["tokens_in"], p.info["tokens_out"] = st["tokens_in"], st["tokens_out"]
            p.info["index_stats"] = gather_stats(p.index) if p.index is not None else None
            p.info["service_stats"] = {k: gather_stats(h) for k, h in p.services.items()}
            p.info["dispatch_max_stall_s"] = round(self.max_stall_s, 3)
            p.info["pool_moves"] = self.pools.moves
