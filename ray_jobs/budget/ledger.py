"""The driver's side of a run budget (``run.budget.*``, docs/design/budget.md): what a
configuration (or the points of a sweep) already spent in its run dir, the budget actor every
worker's calls reserve from, the rows of episodes the budget stopped, and the judge stage's gate.
The ledger itself is plain Python (``engine/budget/ledger.py``).

A ledger has a scope (``run.budget.scope``): ``point``, one per configuration; ``sweep`` (the
default), one for all points of a sweep that use a model (:class:`SweepLedger`), so one cap holds
for the sweep. A sweep of one point is a point ledger. Either way each configuration's run dir
records what that configuration spent, so a later run of one point, or of the same sweep, counts it.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from engine.budget import Caps
from engine.budget.cost import Prices
from engine.config import ModelConfig, to_plain
from engine.runtime.budget_actor import LIVE_PREFIX
from engine.storage import EpisodeStore
from ray_jobs.budget.records import POINT, SWEEP, recorded_closure, recorded_spend
from ray_jobs.cluster.session import Session
from ray_jobs.config.point import PointSpec

log = logging.getLogger("dateline.budget")

UPTIME_REPORT_S = 5.0       # how often the driver tells the budget the replicas' uptime (and saves its ledger)


class RunBudget:
    """The driver's side of a ledger: the actor every worker's calls reserve from, and a thread
    that every ``UPTIME_REPORT_S`` reports the models' replica uptime to it and saves its summary
    and state to ``budget-live-<run id>.json`` in the run dir of each of its points (what a later
    run counts should this one be killed, once it finishes its ``run-*.json`` counts instead; and
    what the actor restores itself from should it die). The first snapshot is saved at once.

    ``scope`` is ``point`` (``config_hashes`` is its one configuration: the snapshot has
    ``config_hash`` and ``run``) or ``sweep`` (the snapshot has ``points``: each configuration's
    part of ``run``, which is what :func:`recorded_spend` counts for it)."""

    def __init__(self, actor: Any, run_id: str, uptime: Callable[[], dict[str, float]] | None,
                 stores: list[EpisodeStore], config_hashes: list[str], scope: str = POINT) -> None:
        self.actor = actor
        self.run_id = run_id
        self.scope = scope
        self.config_hashes = list(config_hashes)
        self._uptime = uptime
        self._stores = list({st.uri: st for st in stores}.values())       # each run dir once
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._push()
        self._thread = threading.Thread(target=self._report, name="budget-report", daemon=True)
        self._thread.start()

    def _push(self) -> dict[str, Any] | None:
        """Report uptime, save the ledger's snapshot; returns the ledger's summary."""
        import ray

        with self._lock:
            try:
                if self._uptime is not None:
                    ray.get([self.actor.set_uptime.remote(sec, key) for key, sec in self._uptime().items()],
                            timeout=30)
                snap: dict[str, Any] = ray.get(self.actor.snapshot.remote(), timeout=30)
            except Exception as e:  # noqa: BLE001 - a replica or the ledger restarting; the next report catches up
                log.debug("budget: no report: %s", e)
                return None
            summary: dict[str, Any] = {**snap["summary"], "run_id": self.run_id, "scope": self.scope}
            live = {"scope": self.scope, "run_id": self.run_id, "run": summary["run"], "caps": summary["caps"],
                    "exhausted": summary["exhausted"], "closed_cap": summary["closed_cap"], "at": time.time(),
                    "state": snap["state"]}
            if self.scope == SWEEP:
                live["points"] = summary.get("points") or {}
            else:
                live["config_hash"] = self.config_hashes[0]
            for st in self._stores:
                try:
                    st.write_json(f"{LIVE_PREFIX}{self.run_id}.json", live)
                except OSError as e:    # a full disk: the next report tries again
                    log.warning("budget: could not save the ledger's snapshot in %s: %s", st.uri, e)
            return summary

    def _report(self) -> None:
        while not self._stop.wait(UPTIME_REPORT_S):
            self._push()

    def exhausted(self) -> str:
        """Why no new call may start ("" while the budget is open)."""
        import ray

        try:
            why: str = ray.get(self.actor.exhausted.remote(), timeout=30)
            return why
        except Exception as e:  # noqa: BLE001 - the ledger is gone: the workers' calls fail on their own
            log.warning("budget actor unreachable: %s", e)
            return ""

    def alive(self, timeout_s: float = 120.0) -> bool:
        """Whether the ledger answers (waiting while Ray restarts it): False once it is gone for good."""
        import ray

        try:
            ray.get(self.actor.exhausted.remote(), timeout=timeout_s)
            return True
        except Exception as e:  # noqa: BLE001 - dead, or not back within timeout_s
            log.error("budget ledger %s is lost: %s", self.run_id, e)
            return False

    def stop(self) -> dict[str, Any]:
        """Stop reporting, save the final snapshot, kill the actor (for good); returns the ledger's
        summary (with ``run_id`` and ``scope``: the run's info JSON records it, which supersedes the
        snapshot)."""
        import ray

        self._stop.set()
        self._thread.join(timeout=60)
        summary = self._push() or {"run_id": self.run_id, "scope": self.scope, "error": "budget actor unreachable"}
        ray.kill(self.actor)            # no_restart: this ledger is done
        return summary


class PoolUptime:
    """Replica uptime of the hosted models ``models`` (seconds per model key, summed over the pools
    that hosted it while the ledger ran): a pool started after ``since`` (the pools that were up
    when the ledger started) counts from its start, one already up from when it is first seen; a
    pool that stops (a wave ends) keeps what it counted."""

    def __init__(self, session: Session, models: list[ModelConfig], already_up: set[int]) -> None:
        self._session = session
        self._models = [m for m in {Session.key(m): m for m in models}.values() if m.kind == "vllm"]
        self._already_up = set(already_up)
        self._seen: dict[int, list[Any]] = {}     # id(pool) -> [model key, pool, base, counted]

    def __call__(self) -> dict[str, float]:
        for m in self._models:
            pool = self._session.pool_of(m)
            if pool is None:
                continue
            try:
                sec = pool.replica_seconds()
            except Exception as err:  # noqa: BLE001 - a pool stopping or a replica restarting: it counted what it had
                log.debug("budget: no uptime of %s: %s", m.name, err)
                continue
            e = self._seen.get(id(pool))
            if e is None:
                e = self._seen[id(pool)] = [Session.key(m), pool, sec if id(pool) in self._already_up else 0.0, 0.0]
            e[3] = max(e[3], sec - e[2])
        out: dict[str, float] = {}
        for key, _, _, sec in self._seen.values():
            out[key] = out.get(key, 0.0) + sec
        return out


def ttl(models: list[ModelConfig]) -> float:
    # a reservation nobody settles (its worker died mid-call) is charged in full after the
    # longest a call can take
    return max(m.request_timeout_s * (m.max_retries + 1) + 60.0 for m in models)


def warn_unpriced(caps: Caps, models: list[ModelConfig]) -> None:
    for m in models:
        if caps.max_usd is not None and not Prices.of_model(to_plain(m)).configured:
            log.warning("run.budget.max_usd=%g but model %s has no prices (model.price_*): its calls never bind",
                        caps.max_usd, m.name)


def start_budget(spec: PointSpec, store: EpisodeStore, session: Session, model_started: bool) -> RunBudget | None:
    """The point's budget actor (None without ``run.budget`` caps, or when its agent calls no
    model), starting from what the run dir already records for this configuration. Call once the
    model is up: a model started by this run counts its whole uptime (startup included), a reused
    one from now on."""
    cfg, config_hash = spec.cfg, spec.config_hash
    caps = Caps.of(cfg.run.budget)
    if not caps.any or not spec.uses_model:
        return None
    from engine.runtime.budget_actor import start_budget_actor

    m = cfg.model
    prices = Prices.of_model(to_plain(m))
    warn_unpriced(caps, [m])
    initial = recorded_spend(cfg, store, config_hash)
    run_id = uuid.uuid4().hex[:12]
    actor = start_budget_actor(caps, prices, initial, ttl([m]), recorded_closure(cfg, store, config_hash),
                               run_id=run_id, snapshot_dirs=(store.uri,))
    uptime = None
    if m.kind == "vllm" and session.pool_of(m) is not None:
        base = 0.0 if model_started else session.replica_seconds(m)
        uptime = lambda: {"": session.replica_seconds(m) - base}  # noqa: E731
    log.info("run budget %s; already spent by this configuration: %s", caps, initial)
    return RunBudget(actor, run_id, uptime, [store], [config_hash], POINT)
