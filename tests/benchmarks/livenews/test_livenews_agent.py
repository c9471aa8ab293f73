"""The livenews episode loop on the real offline web (bundled sample) with a scripted model:
budgets, finish reasons, visit rules, the date window and the blocklist, grading and tables."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
from dataclasses import replace

import pytest

from engine.benchmarks import get_benchmark
from engine.benchmarks.livenews.config import LivenewsAgentConfig, LivenewsBenchmarkConfig
from engine.benchmarks.livenews.data import load
from engine.benchmarks.livenews.service import WebService
from engine.llm import Endpoint, SamplingParams
from engine.runtime.dispatch import EpisodeRunner, EpisodeSpec, WorkerSetup
from engine.runtime.services import LocalService
from indexes.web import registered_domain
from tests.factories import episode_row
from tests.fake_openai import FakeOpenAI
from tests.helpers import metrics_of

BENCH = get_benchmark("livenews")


def block(kind: str, *items: str) -> str:
    return "I will think first.\n```action\ntype: " + kind + "\n" + "\n".join(items) + "\n```"


@pytest.fixture(scope="module")
def web():
    return WebService(LivenewsBenchmarkConfig())


@pytest.fixture(scope="module")
def tasks():
    class Cfg:
        benchmark = LivenewsBenchmarkConfig()
    return BENCH.load_tasks(Cfg)


def run(tasks, web, responder, agent=None, n=1):
    agent = agent or LivenewsAgentConfig()

    async def go():
        with FakeOpenAI(responder) as srv:
            setup = WorkerSetup("livenews", "fake", agent, json.dumps({}), [Endpoint(srv.base_url, "fake")],
                                SamplingParams(max_retries=0, timeout_s=10), 8, 5, None)
            runner = EpisodeRunner(setup, None, services={"web": LocalService(web)})
            out = await asyncio.gather(*(runner.run(EpisodeSpec(f"{i:016x}", "h", t, t.task_id, 0))
                                         for i, t in enumerate(tasks[:n])))
            return out, srv.requests
    return asyncio.run(go())


def urls_in(messages):
    return re.findall(r"URL: (\S+)", "\n".join(m["content"] for m in messages if m["role"] == "user"))


def test_search_then_click_then_finish(tasks, web):
    def responder(messages, req):
        turn = sum(m["role"] == "assistant" for m in messages)
        if turn == 0:
            return block("Search", "Damar Hamlin team", "Hamlin cardiac arrest")
        if turn == 1:
            return block("Click", urls_in(messages)[0])
        return block("Finish", "Buffalo Bills")

    (res,), reqs = run(tasks, web, responder)
    ep = res["episode"]
    assert ep["status"] == "ok" and ep["finish_reason"] == "finish" and ep["output"] == "Buffalo Bills"
    assert (ep["n_searches"], ep["n_visits"], ep["n_refused_visits"], ep["n_turns"]) == (2, 1, 0, 3)
    assert "up to 5 searches and 5 clicks" in reqs[0]["messages"][0]["content"]
    assert "Damar Hamlin" in reqs[0]["messages"][1]["content"] and "2023-01-05" in reqs[0]["messages"][1]["content"]
    assert reqs[2]["messages"][-1]["content"].startswith("Title: ")
    assert [s["turn"] for s in res["steps"]] == ["action"] * 3


@pytest.mark.parametrize("first,second,reason,searches", [
    (3, 2, "finish", 5),            # exactly the budget is allowed
    (3, 3, "budget_exceeded", 3),   # a query list that crosses the budget fails the task; nothing is searched
    (6, 0, "budget_exceeded", 0),
])
def test_search_budget_is_exact(tasks, web, first, second, reason, searches):
    def responder(messages, req):
        turn = sum(m["role"] == "assistant" for m in messages)
        if turn == 0:
            return block("Search", *[f"query {i}" for i in range(first)])
        if turn == 1 and second:
            return block("Search", *[f"other {i}" for i in range(second)])
        return block("Finish", "x")

    (res,), reqs = run(tasks, web, responder)
    ep = res["episode"]
    assert ep["finish_reason"] == reason and ep["n_searches"] == searches
    if reason == "budget_exceeded":
        assert ep["output"] == "" and res["steps"][-1]["result"] == f"search budget exceeded: {searches} used + " \
            f"{second if first <= 5 else first} > 5"
        assert len(reqs) == (1 if first > 5 else 2)


def test_visit_budget_and_refused_visits_cost_budget(tasks, web):
    def responder(messages, req):
        turn = sum(m["role"] == "assistant" for m in messages)
        if turn == 0:
            return block("Search", "Buffalo Bills")
        if turn == 1:   # one returned URL, one never returned, one on the blocked source domain
            return block("Click", urls_in(messages)[0], "https://example.org/never-returned",
                         "https://www.cnn.com/2023/01/03/sport/damar-hamlin")
        return block("Click", *urls_in(messages)[1:4])

    (res,), reqs = run(tasks, web, responder)
    ep = res["episode"]
    assert ep["finish_reason"] == "budget_exceeded"            # 3 used + 3 > 5
    assert ep["n_visits"] == 3 and ep["n_refused_visits"] == 2
    assert res["steps"][-1]["result"] == "click budget exceeded: 3 used + 3 > 5"
    page_turn = reqs[2]["messages"][-1]["content"]
    assert page_turn.count("Error: cannot open") == 2 and "was not returned" in page_turn and "blocked" in page_turn


@pytest.mark.parametrize("reply,reason", [
    ("I think the answer is the Bills.", "no_action_block"),
    (block("Search", "a") + "\n" + block("Search", "b"), "malformed_action"),
    (block("Browse", "x"), "unknown_action"),
    ("```action\ntype: Search\n```", "malformed_action"),
])
def test_format_violations_fail_the_task(tasks, web, reply, reason):
    (res,), _ = run(tasks, web, lambda m, r: reply)
    ep = res["episode"]
    assert ep["status"] == "ok" and ep["finish_reason"] == reason and ep["output"] == ""


def test_max_turns_and_generation_failure(tasks, web):
    (res,), reqs = run(tasks, web, lambda m, r: block("Search", "same query"),
                       LivenewsAgentConfig(max_searches=100, max_turns=3))
    assert res["episode"]["finish_reason"] == "max_turns" and len(reqs) == 3

    (res,), _ = run(tasks, web, lambda m, r: (400, "This model's maximum context length is 8192 tokens"))
    ep = res["episode"]
    assert ep["status"] == "ok" and ep["finish_reason"] == "generation_failure"


def test_no_search_mode_has_no_tools(tasks, web):
    (res,), reqs = run(tasks, web, lambda m, r: block("Finish", "Buffalo Bills"),
                       LivenewsAgentConfig(mode="no_search", max_searches=0, max_visits=0, max_turns=1))
    assert res["episode"]["finish_reason"] == "finish"
    system = reqs[0]["messages"][0]["content"]
    assert "## Search" not in system and "## Click" not in system and "## Finish" in system
    (res,), _ = run(tasks, web, lambda m, r: block("Search", "x"),
                    LivenewsAgentConfig(mode="no_search", max_searches=0, max_visits=0, max_turns=1))
    assert res["episode"]["finish_reason"] == "unknown_action"


@pytest.mark.slow
def test_results_respect_window_and_blocklist(tasks, web):
    """Every result every episode saw is dated on or before its question's date and off its
    blocklist (the sample's pages run to weeks after most questions)."""
    questions, pages = load(LivenewsBenchmarkConfig())
    later = sum(1 for q in questions for p in pages if p.date and p.date > q.event_date)
    assert later > 100        # the window has work to do: most questions have pages from after them

    def responder(messages, req):
        if sum(m["role"] == "assistant" for m in messages) == 0:
            q = messages[1]["content"].split("\n")[1]
            return block("Search", q, "news this week", "CNN")
        return block("Finish", "x")

    out, reqs = run(tasks, web, responder, n=len(tasks))
    by_url = {p.url: p for p in pages}
    checked = 0
    for res in out:
        ep = res["episode"]
        task = next(t for t in tasks if t.task_id == ep["task_id"])
        assert ep["returned_urls"], ep["task_id"]
        for url in ep["returned_urls"]:
            page = by_url[url]
            assert page.date is not None and page.date <= task.question.event_date
            assert registered_domain(url) not in set(task.policy.blocked)
            checked += 1
        assert dt.date.fromisoformat(ep["latest_result_date"]) <= task.question.event_date
    assert checked > 50


def test_grading_requests_and_tables(tasks):
    row = episode_row("livenews", episode_id="e1", question="Q?", gold="Buffalo Bills", output="the Bills")
    (req,) = BENCH.judge_requests(row, {})
    assert "Gold target: Buffalo Bills" in req.messages[0]["content"] and "Predicted answer: the Bills" in req.messages[0]["content"]
    assert BENCH.judge_requests(row | {"finish_reason": "budget_exceeded"}, {}) == []
    assert BENCH.parse_judgement("grade", "A") == "CORRECT" and BENCH.parse_judgement("grade", "maybe") is None

    def ep(i, reason, grade, s, v):
        return episode_row("livenews", episode_id=f"e{i}", finish_reason=reason, judgements={"grade": grade} if grade else {},
                           gold="Buffalo Bills", output="the buffalo bills!" if i == 0 else "x", n_searches=s,
                           n_visits=v, n_turns=2, tokens_in=10, tokens_out=5)
    rows = [ep(0, "finish", "CORRECT", 1, 0), ep(1, "finish", "INCORRECT", 3, 2), ep(2, "budget_exceeded", None, 6, 0),
            ep(3, "finish", None, 2, 1)]
    m = {k: x.value for k, x in metrics_of(BENCH, rows).items()}
    assert m["accuracy"] == 0.25 and m["incorrect"] == 0.25 and m["failed"] == 0.25 and m["ungraded"] == 0.25
    assert m["searches_mean"] == 3.0 and m["searches_std"] == pytest.approx(1.8708, abs=1e-4)
    assert m["finish_budget_exceeded"] == 0.25 and m["answer_contains_gold"] == 0.25

    def mrows(agent, acc, chash):
        return [{"benchmark": "livenews", "model": "m", "config_hash": chash, "agent": json.dumps(agent),
                 "data": json.dumps({"source": "realtimeqa", "pages": "x/realtimeqa"}), "metric": k, "value": v, "n": 4}
                for k, v in {"accuracy": acc, "searches_mean": 1.0, "searches_std": 0.5, "visits_mean": 0.0,
                             "visits_std": 0.0, "failed": 0.0}.items()]
    base = {"mode": "search", "max_visits": 5, "max_turns": None}      # the default: derived cap
    metric_rows = (mrows(base | {"max_searches": 1}, 0.25, "a") + mrows(base | {"max_searches": 5}, 0.5, "b")
                   + mrows({"mode": "no_search", "max_searches": 0, "max_visits": 0, "max_turns": 1}, 0.0, "c"))
    t = BENCH.tables(metric_rows)
    assert "| m | realtimeqa:realtimeqa | default | 5 | 25.0 | 50.0 | +25.0 | 1: 4/4; 5: 4/4 |" in t["table3"]
    assert "| m | realtimeqa:realtimeqa | default | 5/5 | 50.0 | 0.0 | -50.0 | 4/4 vs 4/4 |" in t["table4"]
    assert "1.0 ± 0.5" in t["table1"]


@pytest.mark.slow
def test_agent_config_must_match_benchmark():
    from engine.errors import ConfigError
    from ray_jobs.config.compose import compose

    with pytest.raises(ConfigError, match="agent config of its own"):
        compose(["benchmark=livenews"])
    cfg = compose(["benchmark=livenews", "agent=livenews", "agent.max_searches=7"])
    assert cfg.agent.max_searches == 7
    with pytest.raises(ConfigError, match="agent.mode"):
        compose(["benchmark=livenews", "agent=livenews", "agent.mode=browse"])
    assert replace(cfg.agent, mode="no_search").mode == "no_search"


def test_judge_probes_check_the_judge_itself(tasks):
    from engine.config import to_plain
    from engine.protocol import dumps

    data = dumps(to_plain(LivenewsBenchmarkConfig()) | {"limit": None})
    t = tasks[0]
    row = episode_row("livenews", episode_id="e1", finish_reason="budget_exceeded", question=t.question.question,
                      gold=t.question.answer, output="", data=data, task_id=t.task_id)
    reqs = {r.key: r.messages[0]["content"] for r in BENCH.judge_requests(row, {})}
    assert set(reqs) == {"probe_gold", "probe_decoy"}           # probes even when the task failed
    assert f"Predicted answer: {t.question.answer}" in reqs["probe_gold"]
    decoy = reqs["probe_decoy"].split("Predicted answer: ")[1].split("\n")[0]
    assert decoy in t.question.choices and decoy != t.question.answer
    no_probe = dumps(to_plain(LivenewsBenchmarkConfig(judge_probes=False)) | {"limit": None})
    assert BENCH.judge_requests(row | {"data": no_probe}, {}) == []

    def ep(i, gold_probe, decoy_probe):
        return episode_row("livenews", episode_id=f"p{i}", gold="a", output="a",
                           judgements={"grade": "CORRECT", "probe_gold": gold_probe, "probe_decoy": decoy_probe})
    m = {k: x.value for k, x in metrics_of(BENCH, [ep(0, "CORRECT", "CORRECT"), ep(1, "CORRECT", "INCORRECT"),
                                                   ep(2, "INCORRECT", None)]).items()}
    assert m["judge_probe_gold_ok"] == pytest.approx(2 / 3) and m["judge_probe_decoy_ok"] == pytest.approx(1 / 3)
