"""The dispatch's budget decisions without Ray (ray_jobs/run/budget_watch.py): a ledger is asked
without waiting and its answer read at a later call; the drain reserve stops every point of a
shared budget once this run's finished episodes leave too little for those in flight; a lost
ledger requeues an episode while it may answer again and gives up on the points that share it once
it is gone. The loop that acts on them is tests/e2e/test_adaptive_run.py and the budget tests."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from engine.config import ModelConfig
from engine.runtime.dispatch import EpisodeSpec
from ray_jobs.run.budget_watch import BudgetWatch


class Ledger:
    """A budget ledger actor's handle, as the driver calls it (``actor.x.remote()``): each call
    returns a ref, here the answer itself, counted."""

    def __init__(self, exhausted: str = "", summary: dict[str, Any] | None = None, alive: bool = True) -> None:
        self.asked: list[str] = []
        self.answers = {"exhausted": exhausted, "summary": summary or {}}
        self.actor = SimpleNamespace(exhausted=SimpleNamespace(remote=lambda: self.ask("exhausted")),
                                     summary=SimpleNamespace(remote=lambda: self.ask("summary")))
        self.run_id = "ledger-1"
        self.is_alive = alive

    def ask(self, what: str) -> Any:
        self.asked.append(what)
        return self.answers[what]

    def alive(self) -> bool:
        return self.is_alive


def point(key: str, budget: Ledger | None, attempts: int = 3) -> Any:
    cfg = SimpleNamespace(model=ModelConfig(name="m", path="/m"),
                          cluster=SimpleNamespace(max_episode_attempts=attempts))
    return SimpleNamespace(key=key, budget=budget, cfg=cfg, uses_model=False)


def watch() -> BudgetWatch:
    return BudgetWatch(units=lambda groups: 1.0, ready=lambda ref: True, get=lambda ref: ref, clock=lambda: 100.0)


def test_a_spent_budget_is_asked_without_waiting_and_stops_its_point_at_the_next_call():
    spent, fine = Ledger(exhausted="max_usd reached"), Ledger()
    pts = [point("a", spent), point("b", fine), point("c", None), point("d", Ledger("max_usd reached"))]
    w = watch()
    queued = lambda p: p.key != "d"              # noqa: E731 - d has nothing left to stop
    assert w.spent(pts, queued) == []            # asked, not waited for
    assert spent.asked == ["exhausted"] and fine.asked == ["exhausted"] and pts[3].budget.asked == []
    assert w.spent(pts, queued) == [(pts[0], "max_usd reached")]
    assert w.spent(pts, queued) == [] and spent.asked == ["exhausted", "exhausted"]     # asked again


def test_an_unreachable_ledger_stops_nothing():
    def get(ref: Any) -> Any:
        raise RuntimeError("actor died")

    w = BudgetWatch(units=lambda groups: 1.0, ready=lambda ref: True, get=get)
    p = point("a", Ledger(exhausted="max_usd reached"))
    assert w.spent([p], lambda p: True) == [] and w.spent([p], lambda p: True) == []
    assert w.budget_asks == {}


def row(tokens_out: int) -> dict[str, Any]:
    return {"tokens_in": 0, "tokens_out": tokens_out, "wall_time_s": 1.0}


def test_the_drain_reserve_stops_every_point_of_the_budget_once_too_little_is_left():
    # 100 output tokens; 40 spent before this run; the largest call asked for 16. Two in flight and
    # one more at the mean (8 tokens) x 1.25 plus 16: 46 must be left.
    ledger = Ledger(summary={"caps": {"max_output_tokens": 100}, "spent": {"tokens_out": 40.0},
                             "run": {"tokens_out": 0.0}, "max_ask": {"tokens_out": 16}})
    a, b = point("a", ledger), point("b", ledger)
    w = watch()
    waiting = lambda keys, groups: True          # noqa: E731
    in_flight = lambda keys: 2                   # noqa: E731
    assert w.drain([a, b], waiting, in_flight) == [] and ledger.asked == ["summary"]    # asked
    assert w.drain([a, b], waiting, in_flight) == []                                    # read: nothing finished yet
    w.count(a, row(8))                                                                  # 52 left
    assert w.drain([a, b], waiting, in_flight) == [] and ledger.asked == ["summary"]    # not asked again within 2 s
    w.count(b, row(8))                                                                  # 44 left: both stop
    stopped = w.drain([a, b], waiting, in_flight)
    assert [p.key for p, _ in stopped] == ["a", "b"] and stopped[0][1] == stopped[1][1]
    assert "run.budget.max_output_tokens" in stopped[0][1] and "2 episodes in flight" in stopped[0][1]
    assert w.drain([a, b], lambda keys, groups: False, in_flight) == []                 # nothing left to stop


def test_a_lost_ledger_requeues_while_it_may_answer_then_gives_up_on_every_point_that_shares_it():
    ledger = Ledger()
    p = point("a", ledger, attempts=2)
    spec = EpisodeSpec("e1", "hash", None, "t1", 0, point="a")
    w = watch()
    assert w.ledger_lost(p, spec, 1, "LedgerLost") == "requeue"
    assert w.ledger_lost(p, spec, 2, "LedgerLost") == "give_up"          # its attempts are spent
    ledger.is_alive = False
    assert w.ledger_lost(p, spec, 1, "LedgerLost") == "ledger_gone"
    assert w.lost_ledgers == {"ledger-1"}
    ledger.is_alive = True                                               # gone stays gone
    assert w.ledger_lost(point("b", ledger), spec, 1, "LedgerLost") == "ledger_gone"
