"""What one dispatch watches of its points' budgets (``run.budget``; the ledgers are
``ray_jobs/budget/``): a ledger that says its budget is spent, the drain reserve of adaptive points
(``adaptive.drain_reason``), and a ledger lost for good. Each check returns a decision (the points to
stop and why, whether an episode is requeued); the loop acts on it. The ledgers are asked without
waiting (their answers are read at a later iteration), through ``ready`` and ``get``: Ray's by
default, a fake's in a test, so the decisions can be tested without Ray
(``tests/ray_jobs/test_budget_watch.py``)."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any, Literal

import ray

from engine.budget.cost import Prices, token_cost
from engine.config import to_plain
from engine.runtime.dispatch import EpisodeSpec
from ray_jobs.run.adaptive import drain_reason
from ray_jobs.run.planning import Point
from ray_jobs.run.pool_control import group_of

log = logging.getLogger("dateline.run")

# what becomes of an episode whose call could not reach its ledger (BudgetWatch.ledger_lost)
LedgerDecision = Literal["requeue", "give_up", "ledger_gone"]


def _ready(ref: Any) -> bool:
    return bool(ray.wait([ref], timeout=0)[0])


def _get(ref: Any) -> Any:
    return ray.get(ref)


def _now() -> float:
    return time.monotonic()


class BudgetWatch:
    """The ledgers' answers not read yet (``budget_asks``: per point, or ``drain:<budget>``), the
    ledgers lost, each point's prices, and for the drain reserve: what this run's finished raced
    episodes spent per point (``drain_stats``: n, tokens in, tokens out, usd, wall seconds), each
    ledger's caps, spend before this run and largest ask (``drain_base``), and when it was asked."""

    def __init__(self, units: Callable[[set[str]], float], ready: Callable[[Any], bool] = _ready,
                 get: Callable[[Any], Any] = _get, clock: Callable[[], float] = _now) -> None:
        self.units, self.ready, self.get, self.clock = units, ready, get, clock
        self.budget_asks: dict[str, Any] = {}        # a ledger's answer not read yet, per point
        self.lost_ledgers: set[str] = set()
        self.prices: dict[str, Prices] = {}
        self.drain_stats: dict[str, list[float]] = defaultdict(lambda: [0.0] * 5)   # n, tokens in/out, usd, wall
        self.drain_base: dict[int, tuple[dict[str, Any], dict[str, float], dict[str, Any]]] = {}  # caps, before, max ask
        self.drain_asked: dict[int, float] = {}

    def price(self, p: Point) -> Prices:
        """A point's model prices, read from its config once per dispatch (not per result)."""
        if p.key not in self.prices:
            self.prices[p.key] = Prices.of_model(to_plain(p.cfg.model))
        return self.prices[p.key]

    def count(self, p: Point, row: dict[str, Any]) -> None:
        """A finished episode of raced point ``p``: what it spent, for the drain reserve."""
        d = self.drain_stats[p.key]
        d[0] += 1
        d[1] += row["tokens_in"]
        d[2] += row["tokens_out"]
        d[3] += token_cost(row["tokens_in"], row["tokens_out"], self.price(p))
        d[4] += float(row.get("wall_time_s") or 0.0)

    def spent(self, points: Iterable[Point], queued: Callable[[Point], bool]) -> list[tuple[Point, str]]:
        """The points (with episodes ``queued``) whose budget closed, and why: they stop
        dispatching. Each ledger is asked without waiting: its answer is read at a later call (a
        ledger call per iteration stood dispatch still)."""
        out = []
        for p in points:
            if p.budget is None or not queued(p):
                continue
            ref = self.budget_asks.get(p.key)
            if ref is None:
                self.budget_asks[p.key] = p.budget.actor.exhausted.remote()
                continue
            if not self.ready(ref):
                continue
            del self.budget_asks[p.key]
            try:
                why = self.get(ref)
            except Exception as e:  # noqa: BLE001 - the ledger is gone: the workers' calls fail on their own
                log.warning("budget actor unreachable: %s", e)
                continue
            if why:
                out.append((p, why))
        return out

    def drain(self, raced: Iterable[Point], waiting: Callable[[set[str], set[str]], bool],
              in_flight: Callable[[set[str]], int]) -> list[tuple[Point, str]]:
        """Adaptive points (``raced``, each with a budget) that stop dispatching, and why: what is
        left of their budget would not cover their episodes in flight (``adaptive.drain_reason``),
        so those finish and the admitted prefix is not cut by the budget. What is spent is the
        ledger's record before this run (asked once, then every few seconds, without waiting) plus
        this run's finished episodes (:meth:`count`): a check every iteration that never waits on
        the ledger. Only the points with episodes queued or held (``waiting(keys, groups)``) are
        checked; ``in_flight(keys)`` counts their episodes running."""
        shared: dict[int, list[Point]] = defaultdict(list)
        for p in raced:
            shared[id(p.budget)].append(p)
        out: list[tuple[Point, str]] = []
        for bid, pts in shared.items():
            keys = {p.key for p in pts}
            groups = {group_of(p) for p in pts}
            if not waiting(keys, groups) or not self._read_summary(bid, pts):
                continue
            why = self._reason(bid, keys, groups, in_flight)
            if why:
                out += [(p, why) for p in pts]
        return out

    def _read_summary(self, bid: int, pts: list[Point]) -> bool:
        """Ask the ledger of budget ``bid`` for its summary (first at once, then every 2 s once it
        knows a largest ask), or read the answer that came; False when the ledger is unreachable."""
        ask = f"drain:{bid}"                  # the ledger's summary, asked again every few seconds
        ref = self.budget_asks.get(ask)
        known = bid in self.drain_base and any(float(v or 0) for v in self.drain_base[bid][2].values())
        if ref is None and self.clock() - self.drain_asked.get(bid, 0.0) > (2.0 if known else 0.0):
            budget = pts[0].budget
            assert budget is not None
            self.budget_asks[ask] = budget.actor.summary.remote()
            self.drain_asked[bid] = self.clock()
        elif ref is not None and self.ready(ref):
            del self.budget_asks[ask]
            try:
                summ = self.get(ref)
            except Exception as e:  # noqa: BLE001 - the ledger is gone: the workers' calls fail on their own
                log.warning("budget actor unreachable: %s", e)
                return False
            before = {k: float(v) - float((summ.get("run") or {}).get(k) or 0.0)
                      for k, v in (summ.get("spent") or {}).items()}
            self.drain_base[bid] = (summ.get("caps") or {}, before, summ.get("max_ask") or {})
        return True

    def _reason(self, bid: int, keys: set[str], groups: set[str], in_flight: Callable[[set[str]], int]) -> str:
        """Why the points ``keys`` of budget ``bid`` stop now ("" they go on, or nothing is known yet)."""
        base = self.drain_base.get(bid)
        tot = [sum(self.drain_stats[k][i] for k in keys) for i in range(5)]
        if base is None or not tot[0]:
            return ""
        caps, before, max_ask = base
        if not any(float(v or 0) for v in max_ask.values()):     # no call asked yet: twice the mean episode
            max_ask = {"tokens_in": 2 * tot[1] / tot[0], "tokens_out": 2 * tot[2] / tot[0], "usd": 2 * tot[3] / tot[0]}
        spent = {"tokens_in": before.get("tokens_in", 0.0) + tot[1], "tokens_out": before.get("tokens_out", 0.0) + tot[2],
                 "usd": before.get("usd", 0.0) + tot[3], "gpu_hours": before.get("gpu_hours", 0.0)}
        mean = {"tokens_in": tot[1] / tot[0], "tokens_out": tot[2] / tot[0], "usd": tot[3] / tot[0],
                "wall_s": tot[4] / tot[0]}
        return drain_reason(caps, spent, in_flight(keys), mean, self.units(groups), max_ask)

    def ledger_lost(self, p: Point, spec: EpisodeSpec, attempts: int, why: str) -> LedgerDecision:
        """An episode of ``p`` whose call could not ask the budget ledger (``why``), dispatched
        ``attempts`` times: while the ledger answers again (Ray restarted it), "requeue" it (up to
        ``cluster.max_episode_attempts``), then "give_up" (left unstarted); once the ledger is
        gone for good, "ledger_gone": it and every queued episode of the points that share the
        ledger are left unstarted."""
        budget = p.budget
        gone = budget is not None and (budget.run_id in self.lost_ledgers or not budget.alive())
        most = p.cfg.cluster.max_episode_attempts
        if not gone and attempts < most:
            log.warning("episode %s: %s; requeued (attempt %d of %d)", spec.episode_id, why, attempts + 1, most)
            return "requeue"
        if not gone:
            log.error("episode %s left unstarted: %s on each of its %d attempts", spec.episode_id, why, attempts)
            return "give_up"
        assert budget is not None
        if budget.run_id not in self.lost_ledgers:
            self.lost_ledgers.add(budget.run_id)
            log.error("the budget ledger is lost (%s): the queued episodes of its points are left unstarted; "
                      "the same command runs them", why)
        return "ledger_gone"
