"""What a configuration already spent and closed, as its run dir records it: every finished run's
``run-*.json`` and every unfinished run's ledger snapshot (``budget-live-*.json``). Read by the
point and sweep ledgers when they start, and by planning to store nothing new when a budget is
closed before any call (docs/design/budget.md)."""

from __future__ import annotations

from typing import Any

from engine.budget import Budget, Caps, Spend
from engine.budget.cost import Prices, judge_prices, token_cost, unit_hours, uptime_cost
from engine.config import Config, to_plain
from engine.runtime.budget_actor import LIVE_PREFIX
from engine.storage import EpisodeStore

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
    return closure(Caps.of(cfg.run.budget), [b for b in infos if (b.get("scope") or POINT) == POINT])


def closure(caps: Caps, records: list[dict[str, Any]]) -> tuple[str, str] | None:
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
