"""The livenews turn cap never binds before the budgets: by default it is derived from them
(max_searches + max_visits + 1 + PARSE_FAILURE_SLACK), and an explicit cap below
max_searches + max_visits + 1 is a configuration error."""

from __future__ import annotations

import pytest

from engine.benchmarks.livenews.config import LivenewsAgentConfig
from engine.errors import ConfigError
from tests.benchmarks.livenews.test_livenews_agent import block, run, tasks, urls_in, web  # noqa: F401  (fixtures)


def spend_every_unit(searches: int, visits: int):
    """A model that searches ``searches`` times, clicks ``visits`` times (one item per turn), then finishes."""
    def responder(messages, req):
        turn = sum(m["role"] == "assistant" for m in messages)
        if turn < searches:
            return block("Search", f"Damar Hamlin news {turn}")
        if turn < searches + visits:
            returned = urls_in(messages)
            k = turn - searches
            return block("Click", returned[k] if k < len(returned) else f"https://example.org/{k}")
        return block("Finish", "Buffalo Bills")
    return responder


def test_full_budgets_of_table_3_finish(tasks, web):  # noqa: F811
    """Table 3's largest point: 7 searches and 5 visits one per turn, then Finish on turn 13."""
    (res,), reqs = run(tasks, web, spend_every_unit(7, 5), LivenewsAgentConfig(max_searches=7, max_visits=5))
    ep = res["episode"]
    assert ep["status"] == "ok" and ep["finish_reason"] == "finish", ep["finish_reason"]
    assert (ep["n_searches"], ep["n_visits"], ep["n_turns"]) == (7, 5, 13) and len(reqs) == 13
    assert ep["output"] == "Buffalo Bills"


def test_default_budgets_finish(tasks, web):  # noqa: F811
    (res,), _ = run(tasks, web, spend_every_unit(5, 5))
    assert res["episode"]["finish_reason"] == "finish" and res["episode"]["n_turns"] == 11


def test_a_looping_model_meets_the_budget_not_the_cap(tasks, web):  # noqa: F811
    """Every turn that does not finish spends budget, so with the derived cap (or any cap validate
    accepts) the budget ends a model that never finishes."""
    (res,), reqs = run(tasks, web, lambda m, r: block("Search", "same query"), LivenewsAgentConfig(max_searches=7))
    assert res["episode"]["finish_reason"] == "budget_exceeded" and len(reqs) == 8


def test_turn_cap_is_derived():
    from engine.benchmarks.livenews.config import PARSE_FAILURE_SLACK, turn_cap

    assert LivenewsAgentConfig().max_turns is None
    assert turn_cap(LivenewsAgentConfig()) == 11 + PARSE_FAILURE_SLACK
    assert turn_cap(LivenewsAgentConfig(max_searches=7, max_visits=5)) == 13 + PARSE_FAILURE_SLACK
    assert turn_cap(LivenewsAgentConfig(max_turns=20)) == 20
    assert turn_cap(LivenewsAgentConfig(mode="no_search", max_searches=0, max_visits=0)) == 1
    assert PARSE_FAILURE_SLACK >= 0


def test_config_rejects_a_cap_below_the_budgets():
    from engine.benchmarks.livenews.config import PARSE_FAILURE_SLACK, turn_cap
    from ray_jobs.config.compose import compose

    cfg = compose(["benchmark=livenews", "agent=livenews", "agent.max_searches=7"])
    assert cfg.agent.max_turns is None and turn_cap(cfg.agent) == 13 + PARSE_FAILURE_SLACK
    assert compose(["benchmark=livenews", "agent=livenews", "agent.max_searches=7", "agent.max_turns=13"])
    with pytest.raises(ConfigError, match=r"agent\.max_turns"):
        compose(["benchmark=livenews", "agent=livenews", "agent.max_searches=7", "agent.max_turns=12"])
    with pytest.raises(ConfigError, match=r"agent\.max_turns"):
        compose(["benchmark=livenews", "agent=livenews", "agent.max_searches=1", "agent.max_turns=4"])
    with pytest.raises(ConfigError, match=r"agent\.max_turns"):
        compose(["benchmark=livenews", "agent=livenews", "agent.max_turns=0"])
    ns = compose(["benchmark=livenews", "agent=livenews_no_search"])
    assert turn_cap(ns.agent) == 1


def test_no_search_setting_ignores_max_turns():
    """Table 3/4's setting column: max_turns means nothing in no_search mode (one turn)."""
    from engine.benchmarks.livenews.metrics import _setting

    assert _setting({"mode": "no_search", "max_searches": 0, "max_visits": 0, "max_turns": 1}) == "default"
    assert _setting({"mode": "no_search", "max_searches": 0, "max_visits": 0, "max_turns": None}) == "default"
    assert _setting({"mode": "search", "max_searches": 7, "max_visits": 5, "max_turns": None}) == "default"
    assert _setting({"mode": "search", "max_searches": 7, "max_visits": 5, "max_turns": 20}) == "max_turns=20"
