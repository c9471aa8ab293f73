"""The judge stage over Parquet: batched requests, bounded retries on malformed output, failures
recorded (never guessed), resume without re-judging, and metrics that read the judgements."""

from __future__ import annotations

import pytest

from engine.benchmarks.livenews import BENCHMARK
from engine.storage import JUDGEMENT_SCHEMA, EpisodeStore
from ray_jobs.config.compose import compose
from ray_jobs.judging.stream import run_judge_identity
from ray_jobs.run import reduce_metrics
from tests.factories import episode_row
from tests.fake_openai import FakeOpenAI
from tests.helpers import judge_as_a_run_does


def episode(i: int, answer: str, reason: str = "finish") -> dict:
    return episode_row("livenews", episode_id=f"e{i}", task_id=f"t{i}", finish_reason=reason, output=answer,
                       question=f"question {i}?", gold=f"gold {i}", n_searches=2, n_visits=1, n_turns=3)


@pytest.mark.slow
def test_judge_stage(tmp_path):
    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    store.write_batch([episode(0, "gold 0"), episode(1, "wrong"), episode(2, "dunno"), episode(3, "x"),
                       episode(4, "", "budget_exceeded")], [])
    calls: dict[str, int] = {}

    def responder(messages, req):
        text = messages[0]["content"]
        i = int(text.split("Question: question ")[-1].split("?")[0])
        calls[f"e{i}"] = calls.get(f"e{i}", 0) + 1
        if i == 3:
            return "I am not sure what to say"            # malformed every time
        if i == 2 and calls["e2"] == 1:
            return "The grade is probably fine"           # malformed once, then good
        return {0: "A", 1: "B", 2: "C"}[i]

    with FakeOpenAI(responder, delay_s=0.2) as srv:
        cfg = compose(["benchmark=livenews", "agent=livenews", "judge=openai_compatible",
                       f"judge.base_url={srv.base_url}", "judge.model=fake-judge", "judge.api_key_env=",
                       "judge.max_attempts=3", "benchmark.judge_probes=false"])
        stats = judge_as_a_run_does(cfg, BENCHMARK, store, "c")
        assert stats["requests"] == 4 and stats["ok"] == 3 and stats["failed"] == 1
        assert srv.max_inflight >= 2                      # sent as a batch, not one by one
        assert calls == {"e0": 1, "e1": 1, "e2": 2, "e3": 3}
        # a re-run judges nothing: failures are recorded, not retried forever
        again = judge_as_a_run_does(cfg, BENCHMARK, store, "c")
        assert again["requests"] == 0 and calls["e3"] == 3

    judge_id = run_judge_identity(cfg, BENCHMARK).id
    j = store.judgements(judge_id)
    assert j == {"e0": {"grade": "CORRECT"}, "e1": {"grade": "INCORRECT"}, "e2": {"grade": "NOT ATTEMPTED"},
                 "e3": {"grade": None}}
    rows = {r["episode_id"]: r for r in store.read("judgements", JUDGEMENT_SCHEMA).to_pylist()}
    assert rows["e3"]["attempts"] == 3 and "malformed" in rows["e3"]["error"] and rows["e3"]["value"] is None

    m = {r["metric"]: r["value"] for r in reduce_metrics(store, "livenews")}
    assert m["accuracy"] == 0.2 and m["incorrect"] == 0.2 and m["not_attempted"] == 0.2
    assert m["ungraded"] == 0.2 and m["failed"] == 0.2


def test_judge_none_skips(tmp_path):
    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    store.write_batch([episode(0, "a")], [])
    rows = reduce_metrics(store, "livenews")
    m = {r["metric"]: r["value"] for r in rows}
    # no judge: no accuracy at all (never 0 from "nothing was graded"), and the rows say how to get one
    assert "accuracy" not in m and "ungraded" not in m and m["answer_contains_gold"] == 0.0
    assert all(r["note"].startswith("ungraded: name a judge") for r in rows)


@pytest.mark.slow
def test_endpoint_failures_are_asked_again_by_the_next_stage(tmp_path):
    """A timeout or server error is not a verdict: it is recorded, and the next run asks
    again (a malformed answer, in contrast, is final)."""
    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    store.write_batch([episode(0, "gold 0"), episode(1, "x")], [])
    broken = {"on": True}

    def responder(messages, req):
        text = messages[0]["content"]
        if "question 1?" in text:
            return (500, "engine died") if broken["on"] else "B"
        return "A"

    with FakeOpenAI(responder) as srv:
        cfg = compose(["benchmark=livenews", "agent=livenews", "judge=openai_compatible",
                       f"judge.base_url={srv.base_url}", "judge.model=fake-judge", "judge.api_key_env=",
                       "judge.max_attempts=2", "benchmark.judge_probes=false"])
        first = judge_as_a_run_does(cfg, BENCHMARK, store, "c")
        assert first["ok"] == 1 and first["failed"] == 1 and first["requests"] == 2   # not re-asked within the run
        judge_id = run_judge_identity(cfg, BENCHMARK).id
        assert store.judgements(judge_id)["e1"] == {"grade": None}
        broken["on"] = False
        second = judge_as_a_run_does(cfg, BENCHMARK, store, "c")
        assert second["requests"] == 1 and second["ok"] == 1
    assert store.judgements(judge_id)["e1"] == {"grade": "INCORRECT"}
