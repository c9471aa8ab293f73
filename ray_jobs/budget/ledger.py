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

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from engine.benchmarks import get_benchmark
from engine.budget import Budget, BudgetGate, Caps, Spend
from engine.budget.cost import Prices, judge_prices, token_cost, unit_hours, uptime_cost
from engine.config import Config, ModelConfig, to_plain
from engine.errors import ConfigError
from engine.runtime.budget_actor import LIVE_PREFIX
from engine.runtime.dispatch import BUDGET_EXHAUSTED, EpisodeSpec, WorkerSetup, unstarted_row
from engine.storage import EpisodeStore
from ray_jobs.cluster.session import Session

log = logging.getLogger("dateline.budget")

UPTIME_REPORT_S = 5.0       # how often the driver tells the budget the replicas' uptime (and saves its ledger)
POINT, SWEEP = "point", "sweep"


def recorded_spend(cfg: Config, store: EpisodeStore, config_hash: str) -> Spend:
    """What this configuration already spent in the run dir, at the prices of the time:

    * every finished run (``run-*.json``): the tokens of its episodes' calls (every attempt,
      failed and stopped episodes included) and of its judge stage, and its replica uptime;
    * every run with caps that did not finish (killed): the snapshot of its ledger that the
      driver kept writing (``budget-live-<run id>.json``, at most ``UPTIME_REPORT_S`` old); of a
      sweep ledger, this configuration's part (``points``).
    Stored rows are not summed: compaction keeps one row per episode, so an episode's earlier
    attempts would be forgotten."""
    mp = Prices.of_model(to_plain(cfg.model))
    jp = judge_prices(to_plain(cfg.judge), to_plain(cfg.model))
    s, finished = Spend(), set()
    for info in store.run_infos():
        if info.get("config_hash") != config_hash:
            continue
        finished.add((info.get("budget") or {}).get("run_id"))
        model = info.get("model") or {}
        p = up = Prices.of_model(model) if model else mp          # runs before cost accounting: today's
        j, jcfg = info.get("judge") or {}, info.get("judge_config")
        q = judge_prices(jcfg, model) if jcfg else jp
        ti, to = int(info.get("tokens_in") or 0), int(info.get("tokens_out") or 0)
        ji, jo = int(j.get("tokens_in") or 0), int(j.get("tokens_out") or 0)
        s = s + Spend(ti + ji, to + jo, token_cost(ti, to, p) + token_cost(ji, jo, q.tokens))
        for sec, prices in ((info.get("replica_seconds_run"), up), (info.get("judge_replica_seconds_run"),
                                                                     q.uptime)):
            if sec:
                s = s + Spend(usd=uptime_cost(float(sec), prices), gpu_hours=unit_hours(float(sec), prices))
    for live in store.run_infos(LIVE_PREFIX):
        if not live or live.get("run_id") in finished:
            continue
        if live.get("config_hash") == config_hash:
            s = s + Spend.of(live.get("run"))
        elif config_hash in (live.get("points") or {}):          # a sweep ledger: this point's part
            s = s + Spend.of(live["points"][config_hash])
    return s


def recorded_closure(cfg: Config, store: EpisodeStore, config_hash: str) -> tuple[str, str] | None:
    """``(cap, reason)`` when an earlier run of this configuration closed its budget on a cap that
    is still set and no larger now: the budget stays closed (re-running the same command starts
    nothing, not even a call small enough to fit), until that cap is raised. Only point ledgers
    count here: a sweep ledger closed on what all its points spent, not on this one's."""
    infos = [(i.get("budget") or {}) for i in store.run_infos() if i.get("config_hash") == config_hash]
    infos += [i for i in store.run_infos(LIVE_PREFIX) if i and i.get("config_hash") == config_hash]
    return _closure(Caps.of(cfg.run.budget), [b for b in infos if (b.get("scope") or POINT) == POINT])


def _closure(caps: Caps, records: list[dict[str, Any]]) -> tuple[str, str] | None:
    for b in records:
        name, then = b.get("closed_cap") or "", (b.get("caps") or {}).get(b.get("closed_cap") or "")
        now = getattr(caps, name, None) if name else None
        if now is not None and then is not None and now <= then:
            return name, f"{b.get('exhausted') or name} (closed by an earlier run; raise run.budget.{name} to resume)"
    return None


def exhausted_before_start(cfg: Config, store: EpisodeStore, config_hash: str) -> str:
    """Why this configuration may not start another model call ("" when it may, or has no caps):
    its recorded spend already reaches a cap, so a run need not start Ray or a model at all."""
    caps = Caps.of(cfg.run.budget)
    if not caps.any:
        return ""
    return Budget(caps, Prices.of_model(to_plain(cfg.model)), recorded_spend(cfg, store, config_hash),
                  closed=recorded_closure(cfg, store, config_hash)).exhausted()


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


def _ttl(models: list[ModelConfig]) -> float:
    # a reservation nobody settles (its worker died mid-call) is charged in full after the
    # longest a call can take
    return max(m.request_timeout_s * (m.max_retries + 1) + 60.0 for m in models)


def _warn_unpriced(caps: Caps, models: list[ModelConfig]) -> None:
    for m in models:
        if caps.max_usd is not None and not Prices.of_model(to_plain(m)).configured:
            log.warning("run.budget.max_usd=%g but model %s has no prices (model.price_*): its calls never bind",
                        caps.max_usd, m.name)


def start_budget(cfg: Config, config_hash: str, store: EpisodeStore, session: Session, model_started: bool
                 ) -> RunBudget | None:
    """The point's budget actor (None without ``run.budget`` caps), starting from what the run dir
    already records for this configuration. Call once the model is up: a model started by this
    run counts its whole uptime (startup included), a reused one from now on."""
    caps = Caps.of(cfg.run.budget)
    if not caps.any or not get_benchmark(cfg.benchmark.name).uses_model(cfg.agent):
        return None
    from engine.runtime.budget_actor import start_budget_actor

    m = cfg.model
    prices = Prices.of_model(to_plain(m))
    _warn_unpriced(caps, [m])
    initial = recorded_spend(cfg, store, config_hash)
    run_id = uuid.uuid4().hex[:12]
    actor = start_budget_actor(caps, prices, initial, _ttl([m]), recorded_closure(cfg, store, config_hash),
                               run_id=run_id, snapshot_dirs=(store.uri,))
    uptime = None
    if m.kind == "vllm" and session.pool_of(m) is not None:
        base = 0.0 if model_started else session.replica_seconds(m)
        uptime = lambda: {"": session.replica_seconds(m) - base}  # noqa: E731
    log.info("run budget %s; already spent by this configuration: %s", caps, initial)
    return RunBudget(actor, run_id, uptime, [store], [config_hash], POINT)


# -- a sweep's ledger --------------------------------------------------------------------------
def _label(cfg: Config, others: list[Config]) -> str:
    """A point of a sweep as a person tells it apart: the settings it does not share with every
    other point (at most three), e.g. ``agent.max_searches=3``."""
    def flat(d: Any, prefix: str = "") -> dict[str, Any]:
        if isinstance(d, dict):
            out: dict[str, Any] = {}
            for k, v in d.items():
                out.update(flat(v, f"{prefix}{k}."))
            return out
        return {prefix[:-1]: d}

    mine = flat(to_plain(asdict(cfg)))
    rest = [flat(to_plain(asdict(o))) for o in others if o is not cfg]
    own = [f"{k}={json.dumps(v, default=str)}" for k, v in mine.items()
           if not k.startswith("run.budget.") and any(r.get(k) != v for r in rest)]
    return ", ".join(own[:3]) or "(same settings)"


def check_sweep_budgets(cfgs: list[Config]) -> None:
    """All points of a sweep under one ledger (``run.budget.scope=sweep``) must ask for the same
    one: the same scope and the same caps. Raises ConfigError naming the points and the fields."""
    if len(cfgs) < 2 or all(c.run.budget.scope == POINT for c in cfgs):
        return
    ref = cfgs[0]
    for c in cfgs[1:]:
        diff = [f for f in ("scope", "max_usd", "max_input_tokens", "max_output_tokens", "max_gpu_hours")
                if getattr(c.run.budget, f) != getattr(ref.run.budget, f)]
        if diff:
            fields = "; ".join(f"run.budget.{f}: {getattr(ref.run.budget, f)!r} vs {getattr(c.run.budget, f)!r}"
                               for f in diff)
            raise ConfigError(
                f"run.budget.{diff[0]}: the points of a sweep share one budget (run.budget.scope=sweep), but point "
                f"[{_label(ref, cfgs)}] and point [{_label(c, cfgs)}] differ ({fields}). Give every point the same "
                "run.budget, or run.budget.scope=point for a budget per point")


@dataclass
class SweepLedger:
    """One ledger for the points of a sweep that use a model (``run.budget.scope=sweep``): one cap
    over all of them. ``members`` are (config, store, config hash); the ledger is started once the
    sweep's Ray is up (:meth:`start`) and stopped when its last wave is done (:meth:`stop`).

    It starts from what all its points already spent (:meth:`recorded`, each at its own prices),
    and closed when an earlier run of the same sweep (the same set of configurations) closed under
    a cap still no larger. Its snapshots go to every member's run dir, with each point's part."""
    caps: Caps
    members: list[tuple[Config, EpisodeStore, str]]
    closed: tuple[str, str] | None = None
    initial: Spend = field(default_factory=Spend)
    budget: RunBudget | None = None
    final: dict[str, Any] | None = None          # its summary once stopped

    @property
    def hashes(self) -> list[str]:
        return [h for _, _, h in self.members]

    def recorded(self) -> Spend:
        s = Spend()
        for cfg, store, h in self.members:
            s = s + recorded_spend(cfg, store, h)
        return s

    def point_prices(self) -> dict[str, Prices]:
        return {h: Prices.of_model(to_plain(cfg.model)) for cfg, _, h in self.members}

    def exhausted_before_start(self) -> str:
        return Budget(self.caps, Prices.of_model(to_plain(self.members[0][0].model)), self.initial,
                      closed=self.closed, point_prices=self.point_prices()).exhausted()

    def start(self, session: Session, already_up: set[int], generating: list[Config]) -> RunBudget:
        """The ledger's actor, charged the uptime of the models of ``generating`` (the points that
        run episodes) from now on (from their start for a pool started after ``already_up``)."""
        from engine.runtime.budget_actor import start_budget_actor

        models = [cfg.model for cfg, _, _ in self.members]
        _warn_unpriced(self.caps, list({Session.key(m): m for m in models}.values()))
        self.initial = self.recorded()
        run_id = uuid.uuid4().hex[:12]
        uptime_prices = {Session.key(m): Prices.of_model(to_plain(m)) for m in models}
        actor = start_budget_actor(self.caps, Prices.of_model(to_plain(models[0])), self.initial, _ttl(models),
                                   self.closed, point_prices=self.point_prices(), uptime_prices=uptime_prices,
                                   run_id=run_id, snapshot_dirs=tuple(dict.fromkeys(st.uri for _, st, _ in self.members)))
        log.info("run budget %s for the %d points of the sweep (run.budget.scope=sweep); already spent by them: %s",
                 self.caps, len(self.members), self.initial)
        self.budget = RunBudget(actor, run_id, PoolUptime(session, [c.model for c in generating], already_up),
                                [st for _, st, _ in self.members], self.hashes, SWEEP)
        return self.budget

    def stop(self) -> dict[str, Any] | None:
        """Stop the ledger (after the sweep's last wave); its final summary (``final``)."""
        if self.budget is not None:
            self.final = self.budget.stop()
            self.budget = None
        return self.final

    def record(self, summary: dict[str, Any], config_hash: str) -> dict[str, Any]:
        """The ``budget`` section of a member's info JSON: the ledger's summary (caps, spend and
        closure over the sweep, ``points``: every member's part) and this point's part (``point``)."""
        return {**summary, "point": (summary.get("points") or {}).get(config_hash)}


def sweep_ledger(members: list[tuple[Config, EpisodeStore, str]]) -> SweepLedger | None:
    """The sweep's one ledger when its points ask for one (``run.budget.scope=sweep``, caps set,
    two or more points that use a model); None: each point has its own (or none). Call
    :func:`check_sweep_budgets` first: the points agree on the caps."""
    members = [m for m in members if get_benchmark(m[0].benchmark.name).uses_model(m[0].agent)]
    if len(members) < 2 or members[0][0].run.budget.scope != SWEEP:
        return None
    caps = Caps.of(members[0][0].run.budget)
    if not caps.any:
        return None
    hashes = {h for _, _, h in members}
    records: list[dict[str, Any]] = []
    for st in {st.uri: st for _, st, _ in members}.values():
        records += [(i.get("budget") or {}) for i in st.run_infos() if i.get("config_hash") in hashes]
        records += [i for i in st.run_infos(LIVE_PREFIX) if i]
    # a closure of the same sweep (the same configurations): the same command starts nothing
    same = [b for b in records if b.get("scope") == SWEEP and set(b.get("points") or {}) == hashes]
    ledger = SweepLedger(caps, members, _closure(caps, same))
    ledger.initial = ledger.recorded()
    return ledger


def budget_exhausted_rows(setup: WorkerSetup, specs: list[EpisodeSpec], reason: str) -> list[dict[str, Any]]:
    """Rows of planned episodes that never started because the budget ran out: stored (nothing
    is lost silently) as ``budget_exhausted``; a re-run with a larger budget plans them again."""
    return [unstarted_row(setup, s, BUDGET_EXHAUSTED, f"BudgetExhausted: {reason} (never started)") for s in specs]


def judge_prices_match(cfg: Config) -> bool:
    """Whether the judge's calls cost what the model's do (a self-judge, a hosted judge at the same
    token prices): then they can reserve from the generation's own ledger."""
    return (judge_prices(to_plain(cfg.judge), to_plain(cfg.model)).tokens.tokens_only
            == Prices.of_model(to_plain(cfg.model)).tokens_only)


def judge_budget_gate(cfg: Config, store: EpisodeStore, config_hash: str, ledger: SweepLedger | None = None
                      ) -> BudgetGate | None:
    """A gate for the judge stage's calls (in the driver; None without caps): the same caps,
    starting from what the run dir records (this run's generation included, from its ledger
    snapshot; of all the sweep's points for a sweep ``ledger``), priced at the judge's prices.
    Replica uptime during judging is not checked as it accrues; the run's info JSON records it for
    the next run."""
    caps = Caps.of(cfg.run.budget)
    if not caps.any:
        return None
    jp = judge_prices(to_plain(cfg.judge), to_plain(cfg.model)).tokens
    if ledger is not None:
        return BudgetGate.local(Budget(caps, jp, ledger.recorded(), closed=ledger.closed))
    return BudgetGate.local(Budget(caps, jp, recorded_spend(cfg, store, config_hash),
                                   closed=recorded_closure(cfg, store, config_hash)))


