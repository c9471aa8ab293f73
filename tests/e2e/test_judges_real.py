"""Two judges on real parts (issue 10): a livenews run judged by a second hosted model (its own
vLLM pool next to the model under test, in the same job), then judged again by the model under
test itself (judge=self); the metrics table and the report keep the two judges apart. Both judges
are the offline 0.5B model under two names: self-judging is decided by the weights, not the name,
so both sets are labelled self-judged. What is checked is the bookkeeping, never the verdicts."""

from __future__ import annotations

import json

import pytest

from engine.benchmarks.livenews import BENCHMARK
from engine.hosting.replica_actor import replica_log_name
from engine.storage import JUDGEMENT_SCHEMA, EpisodeStore
from tests.helpers import run_module

pytestmark = [pytest.mark.real, pytest.mark.ray, pytest.mark.timeout(1800)]
QWEN = "qwen2.5-coder-0.5b-instruct"


def test_a_run_judged_by_two_judges_reports_two_labelled_sets(tmp_path):
    """Why it takes minutes: two runs into one run dir (the two labelled sets must meet there) and three
    vLLM starts: the model under test and the second judge in the first run, the model in the second."""
    base = ["benchmark=livenews", "agent=livenews_guided", "benchmark.limit=2",
            "agent.max_searches=1", "agent.max_visits=1", "agent.max_tokens_turn=192", f"run.dir={tmp_path}",
            "run.progress=false"]
    other = ["judge=hosted_model", "judge.hosted_model.name=qwen-judge", "judge.hosted_model.served_name=qwen-judge"]
    first = run_module("ray_jobs.run", *base, *other, timeout=1700)
    assert first.returncode == 0, first.stderr[-4000:]
    # two hosted models in one job: the model under test and the judge, each its own server
    logs = tmp_path / "logs"
    assert (logs / replica_log_name(QWEN, 0)).exists() and (logs / replica_log_name("qwen-judge", 0)).exists()
    info = json.loads(sorted(tmp_path.glob("run-*.json"))[-1].read_text())
    assert info["model_starts_in_session"] == 2 and info["judge"]["judge_model"] == "qwen-judge"
    assert info["judge_replica_seconds_run"] > 0

    second = run_module("ray_jobs.run", *base, "judge=self", timeout=1700)
    assert second.returncode == 0, second.stderr[-4000:]
    assert "**SELF-JUDGED**" in second.stdout               # the run summary says so

    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    rows = store.read("judgements", JUDGEMENT_SCHEMA).to_pylist()
    assert {r["judge_model"] for r in rows} == {"qwen-judge", QWEN}
    assert {r["judge_kind"] for r in rows} == {"hosted", "self"}
    metrics = store.metrics().to_pylist()
    # "qwen-judge" serves the same weights as the model under test: self-judged, whatever its name
    assert {(m["judge_model"], m["self_judged"]) for m in metrics} == {("qwen-judge", True), (QWEN, True)}
    probes = {m["judge_model"]: m["n"] for m in metrics if m["metric"] == "judge_probe_gold_ok"}
    assert probes == {"qwen-judge": 2, QWEN: 2}              # each set rests on its own judge's verdicts

    rep = run_module("ray_jobs.cli.main", "report", str(tmp_path), "--out", str(tmp_path / "report"), "--boot", "50",
                     timeout=600)
    assert rep.returncode == 0, rep.stderr[-3000:]
    md = (tmp_path / "report" / "report.md").read_text()
    blocks = md.split("### Judge ")[1:]
    assert sorted(b.split(":", 1)[0] for b in blocks) == sorted(["qwen-judge", QWEN])
    assert all("**SELF-JUDGED" in b for b in blocks)
