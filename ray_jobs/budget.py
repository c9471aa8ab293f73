"""The driver's side of a run budget (``run.budget.*``, docs/design/budget.md): what a
configuration already spent in its run dir, the budget actor every worker's calls reserve from,
the rows of episodes the budget stopped, and the judge stage's gate. The ledger itself is plain
Python (``engine/budget.py``)."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any, Callable

from engine.benchmarks import get_benchmark
from engine.budget import Budget, BudgetGate, Caps, Spend
from engine.config import Config, to_plain
from engine.cost import Prices, judge_prices, token_cost, unit_hours, uptime_cost
from engine.dispatch import BUDGET_EXHAUSTED, EpisodeSpec, WorkerSetup, unstarted_row
from engine.storage import EpisodeStore
from ray_jobs.session import Session

log = logging.getLogger("dateline.budget")

UPTIME_REPORT_S = 5.0       # how often the driver tells the budget the replicas' uptime (and saves its ledger)
LIVE_PREFIX = "budget-live-"


def recorded_spend(cfg: Config, store: EpisodeStore, config_hash: str) -> Spend:
    """What this configuration already spent in the run dir, at the prices of the time:

    * every finished run (``run-*.json``): the tokens of its episodes' calls (every attempt,
      failed and stopped episodes included) and of its judge stage, and its replica uptime;
    * every run with caps that did not finish (killed): the snapshot of its ledger that the
      driver kept writing (``budget-live-<run id>.json``, at most ``UPTIME_REPORT_S`` old).
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
        if live and live.get("config_hash") == config_hash and live.get("run_id") not in finished:
            s = s + Spend.of(live.get("run"))
    return s


def recorded_closure(cfg: Config, store: EpisodeStore, config_hash: str) -> tuple[str, str] | None:
    """``(cap, reason)`` when an earlier run of this configuration closed its budget on a cap that
    is still set and no larger now: the budget stays closed (re-running the same command starts
    nothing, not even a call small enough to fit), until that cap is raised."""
    caps = Caps.of(cfg.run.budget)
    infos = [(i.get("budget") or {}) for i in store.run_infos() if i.get("config_hash") == config_hash]
    infos += [i for i in store.run_infos(LIVE_PREFIX) if i and i.get("config_hash") == config_hash]
    for b in infos:
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
    """The driver's side of a run budget: the actor every worker's calls reserve from, and a
    thread that every ``UPTIME_REPORT_S`` reports the model's replica uptime to it and saves this
    run's spend so far to ``budget-live-<run id>.json`` (what a later run counts should this one
    be killed; once it finishes, its ``run-*.json`` counts instead)."""

    def __init__(self, actor: Any, uptime: Callable[[], float] | None, store: EpisodeStore, config_hash: str
                 ) -> None:
        self.actor = actor
        self.run_id = uuid.uuid4().hex[:12]
        self._uptime = uptime
        self._store = store
        self._config_hash = config_hash
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._report, name="budget-report", daemon=True)
        self._thread.start()

    def _push(self) -> dict[str, Any] | None:
        """Report uptime, save the ledger's snapshot; returns the ledger's summary."""
        import ray

        try:
            if self._uptime is not None:
                ray.get(self.actor.set_uptime.remote(self._uptime()), timeout=30)
            summary: dict[str, Any] = ray.get(self.actor.summary.remote(), timeout=30)
        except Exception as e:  # noqa: BLE001 - a replica restarting; the next report catches up
            log.debug("budget: no report: %s", e)
            return None
        summary["run_id"] = self.run_id
        self._store.write_json(f"{LIVE_PREFIX}{self.run_id}.json",
                               {"config_hash": self._config_hash, "run_id": self.run_id, "run": summary["run"],
                                "caps": summary["caps"], "exhausted": summary["exhausted"],
                                "closed_cap": summary["closed_cap"], "at": time.time()})
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

    def stop(self) -> dict[str, Any]:
        """Stop reporting, save the final snapshot, kill the actor; returns the ledger's summary
        (with ``run_id``: the run's info JSON records it, which supersedes the snapshot)."""
        import ray

        self._stop.set()
        self._thread.join(timeout=60)
        summary = self._push() or {"run_id": self.run_id, "error": "budget actor unreachable"}
        ray.kill(self.actor)
        return summary


def start_budget(cfg: Config, config_hash: str, store: EpisodeStore, session: Session, model_started: bool
                 ) -> RunBudget | None:
    """The run's budget actor (None without ``run.budget`` caps), starting from what the run dir
    already records for this configuration. Call once the model is up: a model started by this
    run counts its whole uptime (startup included), a reused one from now on."""
    caps = Caps.of(cfg.run.budget)
    if not caps.any or not get_benchmark(cfg.benchmark.name).uses_model(cfg.agent):
        return None
    from engine.dispatch import start_budget_actor

    m = cfg.model
    prices = Prices.of_model(to_plain(m))
    if caps.max_usd is not None and not prices.configured:
        log.warning("run.budget.max_usd=%g but model %s has no prices (model.price_*): it never binds",
                    caps.max_usd, m.name)
    initial = recorded_spend(cfg, store, config_hash)
    # a reservation nobody settles (its worker died mid-call) is charged in full after the
    # longest a call can take
    ttl = m.request_timeout_s * (m.max_retries + 1) + 60.0
    actor = start_budget_actor(caps, prices, initial, ttl, recorded_closure(cfg, store, config_hash))
    uptime = None
    if m.kind == "vllm" and session.pool_of(m) is not None:
        base = 0.0 if model_started else session.replica_seconds(m)
        uptime = lambda: session.replica_seconds(m) - base  # noqa: E731
    log.info("run budget %s; already spent by this configuration: %s", caps, initial)
    return RunBudget(actor, uptime, store, config_hash)


def budget_exhausted_rows(setup: WorkerSetup, specs: list[EpisodeSpec], reason: str) -> list[dict[str, Any]]:
    """Rows of planned episodes that never started because the budget ran out: stored (nothing
    is lost silently) as ``budget_exhausted``; a re-run with a larger budget plans them again."""
    return [unstarted_row(setup, s, BUDGET_EXHAUSTED, f"BudgetExhausted: {reason} (never started)") for s in specs]


def judge_prices_match(cfg: Config) -> bool:
    """Whether the judge's calls cost what the model's do (a self-judge, a hosted judge at the same
    token prices): then they can reserve from the generation's own ledger."""
    return (judge_prices(to_plain(cfg.judge), to_plain(cfg.model)).tokens.tokens_only
            == Prices.of_model(to_plain(cfg.model)).tokens_only)


def judge_budget_gate(cfg: Config, store: EpisodeStore, config_hash: str) -> BudgetGate | None:
    """A gate for the judge stage's calls (in the driver; None without caps): the same caps,
    starting from what the run dir records (this run's generation included, from its ledger
    snapshot), priced at the judge's prices. Replica uptime during judging is not checked as it
    accrues; the run's info JSON records it for the next run."""
    caps = Caps.of(cfg.run.budget)
    if not caps.any:
        return None
    jp = judge_prices(to_plain(cfg.judge), to_plain(cfg.model)).tokens
    return BudgetGate.local(Budget(caps, jp, recorded_spend(cfg, store, config_hash),
                                   closed=recorded_closure(cfg, store, config_hash)))


