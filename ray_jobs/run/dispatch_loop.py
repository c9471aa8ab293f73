"""The dispatch stage of ``dateline run``: one queue of episodes per model feeding one set of
worker actors, rows handed to the background writer as they finish and to the judges once stored,
budgets, failure caps, lost workers and replica health handled between iterations."""

from __future__ import annotations

import functools
import logging
import time
from collections import defaultdict, deque
from dataclasses import replace
from typing import Any

import ray

from engine.budget.cost import Prices, token_cost
from engine.config import engine_batch, to_plain
from engine.errors import WorkerStartError
from engine.hosting.events import ReplicaEvents
from engine.runtime.dispatch import STOPPED_EARLY, WORKER_LOST, EpisodeSpec, WorkerSetup, start_workers, unstarted_row
from engine.runtime.progress import Progress
from engine.runtime.replicas import gather_stats
from engine.runtime.writer import StoreWriter
from engine.storage import EpisodeStore
from ray_jobs.budget.gates import budget_exhausted_rows
from ray_jobs.cluster import signals as stopping
from ray_jobs.cluster.moves import Candidate, grow, release
from ray_jobs.cluster.session import Session
from ray_jobs.cluster.sizing import derived_workers, unit
from ray_jobs.cluster.supervisor import Supervisor
from ray_jobs.judging.fleet import JudgeFleet
from ray_jobs.judging.stream import JudgeStream
from ray_jobs.run.adaptive import drain_reason
from ray_jobs.run.planning import Point

log = logging.getLogger("dateline.run")


def interleave(lists: list[list[EpisodeSpec]]) -> list[EpisodeSpec]:
    """One queue from the points' episodes, taken in turn (a1 b1 c1 a2 b2 ...): every point moves
    at the same pace, so no point's episodes all wait at the end of the queue. Point after point,
    the last point (in a budget sweep the costliest: Hydra lists 1,3,5,7) would start only when the
    others were done and run its whole length as the sweep's tail; and under a GPU-hour or dollar
    cap, whose ledger is charged the pool's uptime while its point runs (docs/design/budget.md),
    it would pay for its wait at the end of the queue before its first episode started."""
    out: list[EpisodeSpec] = []
    for i in range(max((len(x) for x in lists), default=0)):
        out += [x[i] for x in lists if i < len(x)]
    return out


# per point: finished episodes, their steps, their model calls and the messages those refer to
Buf = tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], dict[str, dict[str, Any]]]


@stopping.deferring        # a signal stops the loop between iterations (ray_jobs/cluster/signals.py)
def dispatch(groups: dict[str, list[Point]], session: Session, stream: JudgeStream | JudgeFleet,
             keep: set[str] | None = None) -> None:
    """One queue per model, feeding one set of worker actors that run every point of that model:
    points overlap (the next point's episodes fill the slots of the last one's tail). Rows go to
    the store writer as they finish, and to the judges once they are stored."""
    if groups:
        DispatchLoop(groups, session, stream, keep).run()


class DispatchLoop:
    """The state one dispatch shares across its iterations: per model group its queue of episodes
    and its workers; per point its buffered rows and counts; the episodes in flight, those stored,
    the workers Ray is restarting, the ledgers lost; the writer, the progress line and the pools'
    replica events. :meth:`run` is the loop; each other method is one thing that can happen in it."""

    def __init__(self, groups: dict[str, list[Point]], session: Session, stream: JudgeStream | JudgeFleet,
                 keep: set[str] | None = None) -> None:
        self.groups, self.session, self.stream = groups, session, stream
        self.keep = set(keep or ())         # pools never released mid-wave (later waves', judges')
        self.released: set[str] = set()
        self.done: dict[str, int] = defaultdict(int)     # episodes finished per model group
        self.queues: dict[str, deque[EpisodeSpec]] = {}
        self.workers: dict[str, list[Any]] = {}
        self.by_key: dict[str, Point] = {}
        for g, pts in groups.items():
            self._start_group(g, pts)
        by_key = self.by_key
        self.pending: dict[Any, tuple[str, int, EpisodeSpec]] = {}
        self.attempts: dict[str, int] = defaultdict(int)
        self.bufs: dict[str, Buf] = defaultdict(lambda: ([], [], [], {}))
        self.stores = {p.key: p.store for p in by_key.values()}
        self.stats = {k: {"failures": 0, "requeued": 0, "steps": 0, "tokens_in": 0, "tokens_out": 0} for k in by_key}
        self.progress = Progress(sum(len(q) for q in self.queues.values()),
                                 all(p.cfg.run.progress for p in by_key.values()))
        self.pools = {g: session.pool_of(by_key[pts[0].key].cfg.model) for g, pts in groups.items() if g != "none"}
        self.progress.model_total = sum(len(q) for g, q in self.queues.items() if g != "none")
        self.events = ReplicaEvents({g: [p.store for p in pts] for g, pts in groups.items()}, self.pools)
        self.events.record_all()                     # the replicas' starts
        self.failing: dict[str, str] = {}            # model group -> why it was stopped
        self.pushes: dict[str, list[Any]] = {}       # the last endpoint push to each group's workers
        self.max_stall_s = 0.0                       # the longest loop iteration, its wait left out
        self.moves: list[dict[str, Any]] = []        # pools released mid-wave and what grew (supervisor)
        self.budget_asks: dict[str, Any] = {}        # a ledger's answer not read yet, per point
        self.live_asks: list[Any] = []               # the workers' live counts not read yet
        self.stored: set[str] = set()                                     # episodes with a row from this run
        self.busy: dict[tuple[str, int], int] = defaultdict(int)        # episodes in flight per worker
        self.reviving: dict[Any, tuple[str, int]] = {}                    # ping of a worker Ray is restarting
        self.lost_ledgers: set[str] = set()
        # the rows go to a background writer (engine/runtime/writer.py): one shard per table per run dir per
        # flush, across points; handing them over never waits on storage, its errors come back here
        self.judged = {(p.store.uri, p.plan.config_hash): p.key for p in by_key.values() if p.judge}
        self.writer = StoreWriter(min(p.cfg.run.flush_interval_s for p in by_key.values()),
                                  flush_bytes=min(p.cfg.run.flush_bytes for p in by_key.values()),
                                  on_written=self.written if self.judged else None)
        # an adaptive rule (ray_jobs/run/adaptive.py): paused points' episodes wait here, off the queue
        self.racer = next((p.racer for p in by_key.values() if p.racer is not None), None)
        self.held: dict[str, list[EpisodeSpec]] = defaultdict(list)
        self.drain_stats: dict[str, list[float]] = defaultdict(lambda: [0.0] * 5)   # n, tokens in/out, usd, wall
        self.drain_base: dict[int, tuple[dict[str, Any], dict[str, float], dict[str, Any]]] = {}  # caps, before, max ask
        self.drain_asked: dict[int, float] = {}
        self.prices: dict[str, Prices] = {}
        self.last_adapt = 0.0
        if self.racer is not None:
            for key in [k for k in self.racer.race.stopped if k in by_key]:     # stopped before (a resumed run)
                self._stopped(key, next(d.reason for d in self.racer.race.decisions if d.config == key))

    def _start_group(self, g: str, pts: list[Point]) -> None:
        """The workers of model group ``g`` (sized for its pool) and its queue of episodes."""
        c, m = pts[0].cfg.cluster, pts[0].cfg.model
        pool = self.session.pool_of(m) if g != "none" else None
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
        self.queues[g] = deque(interleave([[replace(s, point=p.key) for s in p.plan.todo] for p in pts]))
        self.by_key.update({p.key: p for p in pts})

    def push_endpoints(self, g: str, eps: list[Any]) -> None:
        """Hand the workers new endpoints (from the supervisor's thread) without waiting for them:
        the answers of the previous push are read (a worker that missed it, dead or restarting, is
        logged: it gets the endpoints when it answers again, ``_revive``)."""
        done = [r for r in self.pushes.pop(g, []) if ray.wait([r], timeout=0)[0]]
        for r in done:
            try:
                ray.get(r)
            except Exception as e:  # noqa: BLE001 - a worker that missed it re-routes on its own failures
                log.warning("pushing endpoints of %s to a worker: %s", g[:6], e)
        self.pushes[g] = [w.set_endpoints.remote(g, eps) for w in self.workers[g]]

    def stop_model(self, g: str, why: str) -> None:
        """The model of group ``g`` cannot serve (every replica given up): its queued and in-flight
        episodes are left not run (no row: the same command runs them once it serves), its
        workers stop, and the run will exit non-zero with ``why``."""
        self.failing[g] = why
        log.error("%s; its remaining episodes are left not run", why)
        for p in self.groups[g]:
            self.drop(g, p.key, "", None)
            p.info["model_failing"] = why
        for ref in [ref for ref, (gg, _, _) in self.pending.items() if gg == g]:
            self.pending.pop(ref)
        for ref in [ref for ref, (gg, _) in self.reviving.items() if gg == g]:
            self.reviving.pop(ref)
        for w in self.workers[g]:
            ray.kill(w)

    def submit(self, g: str, w: int) -> None:
        if self.queues[g] and (g, w) not in self.reviving.values() and not stopping.requested():
            spec = self._next(g)
            if spec is None:
                return
            self.attempts[spec.episode_id] += 1
            if self.racer is not None:
                self.racer.dispatched(spec.point, spec.task_id)
            self.busy[(g, w)] += 1
            self.pending[self.workers[g][w].run.remote(spec)] = (g, w, spec)

    def _next(self, g: str) -> EpisodeSpec | None:
        """The next episode of group ``g`` to dispatch: a paused point's are held aside."""
        q = self.queues[g]
        while q:
            spec = q.popleft()
            if self.racer is None or self.racer.race.wants(spec.point) or spec.point not in self.racer.points:
                return spec
            self.held[spec.point].append(spec)
        return None

    def _adapt(self, force: bool = False) -> None:
        """The adaptive rule's decisions on what is stored so far (at most once a second): stopped
        points' queued episodes are stored as ``stopped_early``; paused points' episodes wait
        aside; resumed ones go back to the front of their queue, and idle workers take them."""
        if self.racer is None or (not force and time.monotonic() - self.last_adapt < 1.0):
            return
        self.last_adapt = time.monotonic()
        new, _paused, resumed = self.racer.step()
        for d in new:
            if d.config in self.by_key:
                self._stopped(d.config, d.reason)
        for key in resumed:
            self._resume(key)
        if not self.pending and self.held:        # nothing in flight can settle a pause: never strand episodes
            for key in list(self.held):
                log.warning("adaptive: %s resumed (nothing in flight to decide its pause)", key[:8])
                self._resume(key)

    def _resume(self, key: str) -> None:
        specs = self.held.pop(key, [])
        if not specs:
            return
        p = self.by_key[key]
        g = _group(p)
        self.queues[g].extendleft(reversed(specs))
        for w in range(len(self.workers[g])):
            while self.busy[(g, w)] < p.cfg.cluster.episodes_per_worker and self.queues[g] \
                    and (g, w) not in self.reviving.values():
                before = len(self.pending)
                self.submit(g, w)
                if len(self.pending) == before:
                    break

    def _stopped(self, key: str, why: str) -> None:
        """Point ``key`` was stopped by the adaptive rule: its queued and held episodes are stored
        as ``stopped_early`` (once: a resumed run finds them stored), none is dispatched again."""
        p = self.by_key[key]
        g = _group(p)
        self.queues[g].extendleft(reversed(self.held.pop(key, [])))
        stored = p.store.finished_ids(config_hash=p.plan.config_hash, statuses=(STOPPED_EARLY,))
        q = self.queues[g]
        gone = [s for s in q if s.point == key]
        self.queues[g] = deque(s for s in q if s.point != key)
        fresh = [s for s in gone if s.episode_id not in stored]
        assert p.setup is not None
        for row in [unstarted_row(p.setup, s, STOPPED_EARLY, f"StoppedEarly: {why}") for s in fresh]:
            self.bufs[key][0].append(row)
            self.stored.add(row["episode_id"])
            self.progress.update(row, model=g != "none")
        self.progress.total -= len(gone) - len(fresh)     # stored as stopped before: not this run's
        if g != "none":
            self.progress.model_total -= len(gone) - len(fresh)

    def drop(self, g: str, point: str, why: str, status: str | None) -> None:
        """Take a point's episodes off its queue (budget or failure cap): stored as never started."""
        self.queues[g].extend(self.held.pop(point, []))
        q = self.queues[g]
        gone = [s for s in q if s.point == point]
        self.queues[g] = deque(s for s in q if s.point != point)
        if gone and status is not None:
            p = self.by_key[point]
            assert p.setup is not None
            for row in budget_exhausted_rows(p.setup, gone, why):
                self.bufs[point][0].append(row)
                self.stored.add(row["episode_id"])
                self.progress.update(row, model=g != "none")

    def ledger_lost(self, g: str, w: int, p: Point, spec: EpisodeSpec, res: dict[str, Any]) -> None:
        """An episode whose call could not ask the budget ledger (engine.budget.LedgerLost): not a
        result, so never stored as one. While the ledger answers again (Ray restarted it), the
        episode goes back to the front of its queue (up to cluster.max_episode_attempts); once the
        ledger is gone for good, it and every queued episode of the points that share the ledger
        are left unstarted (no row: the same command runs them)."""
        st = self.stats[p.key]
        st["tokens_in"] += res.get("tokens_in", 0)        # what its attempt spent still counts
        st["tokens_out"] += res.get("tokens_out", 0)
        budget = p.budget
        gone = budget is not None and (budget.run_id in self.lost_ledgers or not budget.alive())
        if not gone and self.attempts[spec.episode_id] < p.cfg.cluster.max_episode_attempts:
            log.warning("episode %s: %s; requeued (attempt %d of %d)", spec.episode_id, res["ledger_lost"],
                        self.attempts[spec.episode_id] + 1, p.cfg.cluster.max_episode_attempts)
            self.queues[g].appendleft(spec)
            st["requeued"] += 1
        elif not gone:
            log.error("episode %s left unstarted: %s on each of its %d attempts", spec.episode_id,
                      res["ledger_lost"], self.attempts[spec.episode_id])
            p.info["budget_lost"] = res["ledger_lost"]
        else:
            assert budget is not None
            if budget.run_id not in self.lost_ledgers:
                self.lost_ledgers.add(budget.run_id)
                log.error("the budget ledger is lost (%s): the queued episodes of its points are left unstarted; "
                          "the same command runs them", res["ledger_lost"])
            for q in self.by_key.values():
                if q.budget is budget:
                    q.info["budget_lost"] = res["ledger_lost"]
                    gq = _group(q)
                    if gq in self.queues:
                        self.drop(gq, q.key, "", None)
        self.submit(g, w)

    def written(self, store: EpisodeStore, rows: list[dict[str, Any]]) -> None:
        """Stored rows go to their point's judges (on the writer's thread; a hand-off)."""
        if stopping.requested():        # a signal: judging them waits for the next run (it judges what is missing)
            return
        per: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in rows:
            if row["status"] == "ok" and (k := self.judged.get((store.uri, row["config_hash"]))) is not None:
                per[k].append(row)
        for k, rs in per.items():
            self.stream.submit(k, rs)

    def flush(self, final: bool = False) -> None:
        try:
            self.writer.check()
            for k, (eps, steps, calls, messages) in list(self.bufs.items()):
                if eps:
                    self.writer.put(self.stores[k], eps, steps, calls, messages)
                    self.bufs[k] = ([], [], [], {})
        finally:
            if final:                # everything written, in order, before reduce / judge read the store
                self.writer.close()

    def run(self) -> None:
        for g, ws in self.workers.items():
            for _ in range(self.groups[g][0].cfg.cluster.episodes_per_worker):
                for w in range(len(ws)):
                    self.submit(g, w)
        last_poll = time.monotonic()
        sup = Supervisor(self.pools, {g: self.by_key[self.groups[g][0].key].cfg.model.health_check_s
                                      for g in self.pools}, self.push_endpoints, self.events.record).start()
        try:
            # on a signal: no new episode; those in flight stop with their workers below and are no
            # result (no row: the same command runs them); the rows that finished are flushed
            while (self.pending or self.reviving) and not stopping.requested():
                t_iter = time.monotonic()
                if self.reviving:
                    self._revive()
                if not self.pending:
                    time.sleep(0.2)
                    continue
                self._stop_spent_budgets()
                self._drain()
                t_wait = time.monotonic()
                ready, _ = ray.wait(list(self.pending), num_returns=len(self.pending), timeout=0.5)
                t_work = time.monotonic()
                for ref in ready:
                    self._collect(ref)
                self._adapt(force=not self.pending)
                self.flush()              # a hand-off: the writer flushes by size or run.flush_interval_s
                if time.monotonic() - last_poll >= 5.0:
                    self._poll_live()
                    last_poll = time.monotonic()
                for g, why in list(sup.failing.items()):
                    if g not in self.failing:
                        self.stop_model(g, why)
                self._release_drained(sup)
                self.progress.note = "; ".join(n for pool in self.pools.values()
                                               if pool is not None and (n := pool.rotation_note()))
                self.progress.render()
                # what the iteration did besides waiting for results: the time no episode was dispatched
                self.max_stall_s = max(self.max_stall_s, time.monotonic() - t_iter - (t_work - t_wait))
            if not stopping.requested():
                _poll_live(self.workers, self.progress)
        finally:
            sup.stop()
            self.moves = list(sup.moves)
            try:
                self.flush(final=True)
            finally:
                for ws in self.workers.values():        # per sweep: the next wave hosts other models
                    for w in ws:
                        ray.kill(w)
        stopping.check()
        self._record()

    def _revive(self) -> None:
        """Workers Ray restarted that answer again get their routes and their share of episodes."""
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
            if (pool := self.pools.get(g)) is not None:          # the restarted actor's routes
                self.workers[g][w].set_endpoints.remote(g, pool.endpoints)
            for _ in range(self.groups[g][0].cfg.cluster.episodes_per_worker - self.busy[(g, w)]):
                self.submit(g, w)

    def _stop_spent_budgets(self) -> None:
        """Points whose budget closed stop dispatching. The ledger is asked without waiting: its
        answer is read at a later iteration (a ledger call per iteration stood dispatch still)."""
        for p in self.by_key.values():
            g = _group(p)
            if p.budget is None or not any(s.point == p.key for s in self.queues[g]):
                continue
            ref = self.budget_asks.get(p.key)
            if ref is None:
                self.budget_asks[p.key] = p.budget.actor.exhausted.remote()
                continue
            if not ray.wait([ref], timeout=0)[0]:
                continue
            del self.budget_asks[p.key]
            try:
                why = ray.get(ref)
            except Exception as e:  # noqa: BLE001 - the ledger is gone: the workers' calls fail on their own
                log.warning("budget actor unreachable: %s", e)
                continue
            if why:
                log.warning("stopping %s: %s; in-flight episodes finish, the rest never start", p.key[:6], why)
                self.drop(g, p.key, why, "budget")

    def _prices(self, p: Point) -> Prices:
        """A point's model prices, read from its config once per dispatch (not per result)."""
        if p.key not in self.prices:
            self.prices[p.key] = Prices.of_model(to_plain(p.cfg.model))
        return self.prices[p.key]

    def _drain(self) -> None:
        """Adaptive points under a budget stop dispatching once what is left of it would not cover
        their episodes in flight (``adaptive.drain_reason``), so those finish and the admitted
        prefix is not cut by the budget. What is spent is the ledger's record before this run (asked
        once, without waiting) plus this run's finished episodes, counted here as they arrive: a
        check every iteration that never waits on the ledger."""
        if self.racer is None:
            return
        shared: dict[int, list[Point]] = defaultdict(list)
        for p in self.by_key.values():
            if p.budget is not None and p.key in self.racer.points:
                shared[id(p.budget)].append(p)
        for bid, pts in shared.items():
            keys = {p.key for p in pts}
            groups = {_group(p) for p in pts}
            if not any(s.point in keys for g in groups for s in self.queues[g]) and not keys & set(self.held):
                continue
            ask = f"drain:{bid}"                  # the ledger's summary, asked again every few seconds
            ref = self.budget_asks.get(ask)
            known = bid in self.drain_base and any(float(v or 0) for v in self.drain_base[bid][2].values())
            if ref is None and time.monotonic() - self.drain_asked.get(bid, 0.0) > (2.0 if known else 0.0):
                budget = pts[0].budget
                assert budget is not None
                self.budget_asks[ask] = budget.actor.summary.remote()
                self.drain_asked[bid] = time.monotonic()
            elif ref is not None and ray.wait([ref], timeout=0)[0]:
                del self.budget_asks[ask]
                try:
                    summ = ray.get(ref)
                except Exception as e:  # noqa: BLE001 - the ledger is gone: the workers' calls fail on their own
                    log.warning("budget actor unreachable: %s", e)
                    continue
                before = {k: float(v) - float((summ.get("run") or {}).get(k) or 0.0)
                          for k, v in (summ.get("spent") or {}).items()}
                self.drain_base[bid] = (summ.get("caps") or {}, before, summ.get("max_ask") or {})
            base = self.drain_base.get(bid)
            tot = [sum(self.drain_stats[k][i] for k in keys) for i in range(5)]
            if base is None or not tot[0]:
                continue
            caps, before, max_ask = base
            if not any(float(v or 0) for v in max_ask.values()):     # no call asked yet: twice the mean episode
                max_ask = {"tokens_in": 2 * tot[1] / tot[0], "tokens_out": 2 * tot[2] / tot[0], "usd": 2 * tot[3] / tot[0]}
            spent = {"tokens_in": before.get("tokens_in", 0.0) + tot[1], "tokens_out": before.get("tokens_out", 0.0) + tot[2],
                     "usd": before.get("usd", 0.0) + tot[3], "gpu_hours": before.get("gpu_hours", 0.0)}
            mean = {"tokens_in": tot[1] / tot[0], "tokens_out": tot[2] / tot[0], "usd": tot[3] / tot[0],
                    "wall_s": tot[4] / tot[0]}
            in_flight = sum(1 for _, _, spec in self.pending.values() if spec.point in keys)
            units = sum(len(pool.endpoints) * Prices.of_model(to_plain(pool.cfg)).units_per_replica
                        for g in groups if (pool := self.pools.get(g)) is not None)
            why = drain_reason(caps, spent, in_flight, mean, units, max_ask)
            if why:
                for p in pts:
                    log.warning("stopping %s: %s", p.key[:6], why)
                    p.info["drained"] = why
                    self.drop(_group(p), p.key, why, "budget")

    def _poll_live(self) -> None:
        """The workers' live counts for the progress line, without waiting: the answers to the
        previous poll are read (when all came), and the next poll is sent."""
        refs, self.live_asks = self.live_asks, [w.live.remote() for ws in self.workers.values() for w in ws]
        if refs and len(ray.wait(refs, num_returns=len(refs), timeout=0)[0]) == len(refs):
            try:
                lives = ray.get(refs)
            except Exception:  # noqa: BLE001 - progress is best effort (a worker may be restarting)
                return
            self.progress.set_live(*(sum(x[k] for x in lives) for k in ("steps", "tokens_in", "tokens_out")))

    def _collect(self, ref: Any) -> None:
        """One finished call of a worker: its result, a lost worker, or a lost ledger."""
        g, w, spec = self.pending.pop(ref)
        self.busy[(g, w)] -= 1
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
        if (g, w) not in self.reviving.values():  # no new episode for it until it answers again
            self.reviving[self.workers[g][w].ping.remote()] = (g, w)
        if self.attempts[spec.episode_id] < c.max_episode_attempts:
            log.warning("worker %d lost episode %s (%s): requeued (attempt %d of %d)", w,
                        spec.episode_id, type(e).__name__, self.attempts[spec.episode_id] + 1,
                        c.max_episode_attempts)
            self.queues[g].appendleft(spec)
            self.stats[p.key]["requeued"] += 1
            for other in range(len(self.workers[g])):     # a live worker with room takes it now
                if self.busy[(g, other)] < c.episodes_per_worker:
                    self.submit(g, other)
            return None
        return {"episode": unstarted_row(p.setup, spec, "error", f"{type(e).__name__}: worker lost "
                                         f"{self.attempts[spec.episode_id]} times: {e}"), "steps": []}

    def _take(self, g: str, p: Point, res: dict[str, Any]) -> None:
        """A result: its rows buffered for the writer, its counts, and the failure cap."""
        row = res["episode"]
        self.stored.add(row["episode_id"])
        buf = self.bufs[p.key]
        buf[0].append(row)
        buf[1].extend(res["steps"])
        buf[2].extend(res.get("calls", ()))
        buf[3].update(res.get("messages", {}))
        self.progress.update(row, model=g != "none")
        self.done[g] += 1
        st = self.stats[p.key]
        st["steps"] += row["n_steps"]
        st["tokens_in"] += row["tokens_in"]
        st["tokens_out"] += row["tokens_out"]
        st["failures"] += row["status"] == "error"          # a budget stop is not a failure
        if self.racer is not None and p.key in self.racer.points:
            self.racer.take(p.key, row)
            d = self.drain_stats[p.key]
            d[0] += 1
            d[1] += row["tokens_in"]
            d[2] += row["tokens_out"]
            d[3] += token_cost(row["tokens_in"], row["tokens_out"], self._prices(p))
            d[4] += float(row.get("wall_time_s") or 0.0)
        mf = p.cfg.run.max_failures
        if mf and st["failures"] >= mf and any(s.point == p.key for s in self.queues[g]):
            log.error("stopping: %d episodes failed (run.max_failures) in %s; in-flight ones finish",
                      st["failures"], p.key[:6])
            p.info["stopped_at_max_failures"] = mf
            self.drop(g, p.key, "", None)

    def _release_drained(self, sup: Supervisor) -> None:
        """A model group whose episodes are all done, while others still have some queued, gives
        its pool's GPUs to them (on the supervisor's thread: ``ray_jobs/cluster/moves.py``)."""
        busy = {gg for gg, _, _ in self.pending.values()} | {gg for gg, _ in self.reviving.values()}
        waiting = {h for h, q in self.queues.items() if q}
        for g, pool in self.pools.items():
            if (pool is None or g in self.released or g in self.keep or g in self.failing or self.queues[g]
                    or g in busy or not waiting - {g}):
                continue
            self.released.add(g)
            eff = self.by_key[self.groups[g][0].key].cfg.cluster.sizing_efficiency
            res = unit(pool.cfg)[0]
            sup.move(g, functools.partial(release, self.session, g),
                     functools.partial(grow, self._candidates, eff, res, since=time.monotonic()))

    def _candidates(self) -> dict[str, Candidate]:
        """The model groups with episodes left and a pool (read from the supervisor's thread: a
        snapshot of counts that may be a loop iteration old)."""
        inflight: dict[str, int] = defaultdict(int)
        for gg, _, _ in list(self.pending.values()):
            inflight[gg] += 1
        return {h: Candidate(self.by_key[self.groups[h][0].key].cfg.model, pool, len(self.queues[h]) + inflight[h],
                             self.done[h])
                for h, pool in list(self.pools.items())
                if pool is not None and h not in self.released and h not in self.failing
                and len(self.queues[h]) + inflight[h] > 0}

    def _record(self) -> None:
        """What each point's run info says about this dispatch (``dispatch_max_stall_s``: the
        longest loop iteration, its wait for results left out)."""
        for k, st in self.stats.items():
            p = self.by_key[k]
            pool = self.pools.get(Session.key(p.cfg.model)) if p.uses_model else None
            if p.info.get("budget_lost"):       # planned, but neither run nor stored: the same command runs them
                p.info["unstarted"] = sum(1 for s in p.plan.todo if s.episode_id not in self.stored)
            if p.info.get("model_failing"):     # left not run: the same command runs them
                p.info["not_run"] = sum(1 for s in p.plan.todo if s.episode_id not in self.stored)
            if pool is not None:
                self.events.record(pool)
                p.info["replica_restart_causes"] = dict(pool.restart_causes)
            p.info["requeued"], p.info["replica_restarts"] = st["requeued"], pool.restarts if pool is not None else 0
            p.info["failures"], p.info["steps"] = st["failures"], st["steps"]
            p.info["tokens_in"], p.info["tokens_out"] = st["tokens_in"], st["tokens_out"]
            p.info["index_stats"] = gather_stats(p.index) if p.index is not None else None
            p.info["service_stats"] = {k: gather_stats(h) for k, h in p.services.items()}
            p.info["dispatch_max_stall_s"] = round(self.max_stall_s, 3)
            p.info["pool_moves"] = self.moves


def _group(p: Point) -> str:
    """The model group whose queue and workers run point ``p`` ("none": a model-free agent)."""
    return Session.key(p.cfg.model) if p.uses_model else "none"


def _poll_live(workers: dict[str, list[Any]], progress: Progress) -> None:
    try:
        lives = ray.get([w.live.remote() for ws in workers.values() for w in ws], timeout=10)
    except Exception:  # progress is best effort (a worker may be restarting)
        return
    progress.set_live(*(sum(x[k] for x in lives) for k in ("steps", "tokens_in", "tokens_out")))
