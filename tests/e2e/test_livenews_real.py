"""livenews on real parts: a two-point budget sweep (`-m agent.max_searches=1,3`) as one job with
one vLLM start, the offline web as a Ray actor, the grader stage on the hosted model, Parquet,
and the Table 3 report from it."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from engine.benchmarks.livenews import BENCHMARK
from engine.hosting.replica_actor import replica_log_name
from engine.storage import EpisodeStore
from tests.helpers import run_module

pytestmark = [pytest.mark.real, pytest.mark.ray, pytest.mark.timeout(1800)]


def test_budget_sweep_is_one_job_with_one_model_start(tmp_path):
    """Why it takes minutes: one vLLM start, then 6 episodes of up to 5 turns and their grading on CPU;
    two sweep points are the fewest that show one model start serving a whole sweep."""
    out = run_module("ray_jobs.run", "-m", "benchmark=livenews", "agent=livenews_guided",
           "agent.max_searches=1,3", "benchmark.limit=3", "judge=self", "agent.max_visits=1", "agent.max_turns=5", "agent.max_tokens_turn=256",
           f"run.dir={tmp_path}", "run.progress=false", "cluster.episodes_per_worker=6", timeout=1700)
    assert out.returncode == 0, out.stderr[-4000:]

    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    eps = store.episodes().to_pylist()
    assert len(eps) == 6 and all(e["status"] == "ok" for e in eps), [e["error"] for e in eps]
    assert sorted(e["max_searches"] for e in eps) == [1, 1, 1, 3, 3, 3]
    for e in eps:
        assert e["n_searches"] <= e["max_searches"] and e["n_visits"] <= e["max_visits"]
        if e["latest_result_date"]:
            assert dt.date.fromisoformat(e["latest_result_date"]) <= dt.date.fromisoformat(e["cutoff"])
        assert e["tokens_in"] > 0
    # guided decoding: every turn the model completed carries exactly one parseable action block
    # (a turn cut at max_tokens_turn, e.g. by a reasoning line that loops, can end before it)
    steps = store.steps().to_pylist()
    assert any(s["parsed_action"] for s in steps)
    assert all(s["parsed_action"] or "output cut at max_tokens_turn" in s["result"] for s in steps), \
        [s["result"] for s in steps if not s["parsed_action"]]

    # one job, one model start: the second point reused the first point's replica
    runs = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("run-*.json"))]
    assert [r.get("model_started") for r in runs].count(True) == 1, runs
    assert all(r["model_starts_in_session"] == 1 for r in runs)
    log = (tmp_path / "logs" / replica_log_name("qwen2.5-coder-0.5b-instruct", 0)).read_text()
    assert log.count("Starting vLLM server on") == 1 and log.count("Application startup complete") == 1

    # the grader stage ran on the hosted model: every finished answer is graded, and the judge
    # probes (gold answer, wrong choice) were judged for every question
    judged = store.judgements()
    finished = [e for e in eps if e["finish_reason"] == "finish"]
    assert all("grade" in judged.get(e["episode_id"], {}) for e in finished)
    assert all({"probe_gold", "probe_decoy"} <= set(judged.get(e["episode_id"], {})) for e in eps)
    metrics = store.metrics().to_pylist()
    assert {m["config_hash"] for m in metrics} and len({m["config_hash"] for m in metrics}) == 2
    names = {m["metric"] for m in metrics}
    assert {"accuracy", "searches_mean", "searches_std", "visits_mean", "visits_std", "judge_probe_gold_ok"} <= names

    tables = run_module("ray_jobs.cli.main", "tables", str(tmp_path), timeout=120)
    assert tables.returncode == 0, tables.stderr
    assert "Search Budget = 1" in tables.stdout and "Search Budget = 3" in tables.stdout
    assert (tmp_path / "metrics" / "tables.md").exists()
