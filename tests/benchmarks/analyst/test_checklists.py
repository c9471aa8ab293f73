"""One checklist per task: drafted (figure 15), checked against the reference report (figure
16), refined where the reference fails, stored with the task with who built it, never rebuilt,
and the only rubric any judge scores against."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from pathlib import Path

import pytest

from engine.benchmarks import get_benchmark
from engine.benchmarks.analyst import tasks_by_id
from engine.benchmarks.analyst.config import AnalystBenchmarkConfig
from engine.benchmarks.analyst.data import load_tasks
from engine.errors import DataError
from engine.llm import Endpoint
from tests.factories import episode_row
from tests.fake_openai import FakeOpenAI
from tests.helpers import metrics_of

BENCH = get_benchmark("analyst")
SAMPLE = Path(__file__).resolve().parents[3] / "engine" / "benchmarks" / "analyst" / "sample_tasks"
WHO = {"judge": "big-judge:1234abcd", "model": "big-judge", "kind": "openai_compatible", "temperature": 0.0}


def crit(name: str) -> str:
    return f"- The response should state {name}.\n" + "\n".join(f" - {s}: level {s}" for s in range(1, 6))


def judge(messages, req):
    """Drafts facts A, B, C; the reference earns 5 on A, on B only once refined, never on C
    (whose refinement is malformed)."""
    p = messages[-1]["content"]
    if p.startswith("Your task is to create a detailed and comprehensive evaluation checklist"):
        return "Here it is:\n" + "\n".join(crit(x) for x in ("fact A", "fact B", "fact C"))
    if p.startswith("You are refining one criterion"):
        return crit("fact B, as the reference states it") if "state fact B." in p else "I cannot do that."
    if p.startswith("You are given a professional instruction"):
        c = p.split("Evaluation criteria:")[1]
        rating = 5 if ("fact A" in c or "as the reference states it" in c) else 2 if "fact B" in c else 1
        return f"Looks fine. therefore, the rating is: {rating}"
    raise AssertionError(p[:200])


@pytest.fixture
def tasks_dir(tmp_path):
    dst = tmp_path / "tasks"
    shutil.copytree(SAMPLE, dst)
    return dst


def build(tasks, b, responder, checklists_dir=None, max_attempts=2):
    from engine.benchmarks.analyst import checklists

    async def go():
        with FakeOpenAI(responder) as srv:
            from engine.llm import Router, SamplingParams

            router = Router([Endpoint(srv.base_url, "fake")], SamplingParams(max_retries=0, timeout_s=20), 8)
            try:
                res = await checklists.build_missing(tasks, b, router.client_for, WHO, max_attempts, checklists_dir)
            finally:
                await router.close()
            return res, srv.requests
    return asyncio.run(go())


def test_build_refines_against_the_reference_and_records_who(tasks_dir):
    from engine.benchmarks.analyst import checklists
    from engine.benchmarks.analyst.data import reference_sha256

    b = AnalystBenchmarkConfig(tasks_dir=str(tasks_dir))
    task = next(t for t in load_tasks(tasks_dir) if t.task_id == "crashes-2023")
    assert not task.checklist
    (res,), reqs = build([task], b, judge)
    assert res.status == "built", res
    path = tasks_dir / "crashes-2023" / "checklist.json"
    assert res.path == str(path)
    saved = json.loads(path.read_text())
    # A kept, B kept in its refined form (the reference now earns 5), C dropped with its rating
    assert [c.splitlines()[0] for c in saved["criteria"]] == ["The response should state fact A.",
                                                              "The response should state fact B, as the reference states it."]
    assert saved["dropped"] == [{"criterion": crit("fact C")[2:].replace("\n ", "\n"), "reference_rating": 1,
                                 "reason": "the reference report fails it"}]
    assert saved["generated_by"] == WHO and saved["prompt_version"] == checklists.PROMPT_VERSION
    assert re.match(r"\d{4}-\d\d-\d\dT", saved["created_at"])
    assert saved["reference_sha256"] == reference_sha256(task.reference)
    assert saved["history"][1][0]["draft"].startswith("The response should state fact B.")
    assert [h.get("reference_rating") for h in saved["history"][1] if "reference_rating" in h] == [2, 5]
    # the reference report is what the criteria were checked and refined against
    checks = [r for r in reqs if r["messages"][-1]["content"].startswith("You are given a professional")]
    assert checks and all(task.reference in r["messages"][-1]["content"] for r in checks)
    refine = [r["messages"][-1]["content"] for r in reqs if r["messages"][-1]["content"].startswith("You are refining")]
    assert len(refine) == 3 and all(      # B once; C twice (malformed, retried)
        task.reference in p and "dateline's" in p for p in refine)
    assert "Excluded content" in refine[0]            # crashes-2023 has excluded.md

    # the task now carries it, says who built it, and is never rebuilt
    again = next(t for t in load_tasks(tasks_dir) if t.task_id == "crashes-2023")
    assert again.checklist == tuple(saved["criteria"]) and "built by big-judge:1234abcd" in again.checklist_origin
    (res2,), reqs2 = build([again], b, judge)
    assert res2.status == "exists" and reqs2 == []
    assert json.loads(path.read_text()) == saved


def test_every_judge_scores_against_the_stored_checklist(tasks_dir):
    from engine.benchmarks.analyst.data import reference_sha256

    store = tasks_dir.parent / "store"
    b = AnalystBenchmarkConfig(tasks_dir=str(tasks_dir), checklists_dir=str(store))
    task = next(t for t in load_tasks(tasks_dir, checklists_dir=store) if t.task_id == "crashes-2023")
    (res,), _ = build([task], b, judge, checklists_dir=store)
    # a store keyed by task id and reference hash; the read-only task folder stays untouched
    assert Path(res.path).name == f"crashes-2023-{reference_sha256(task.reference)[:12]}.json"
    assert not (tasks_dir / "crashes-2023" / "checklist.json").exists()
    tasks_by_id.cache_clear()
    row = episode_row("analyst", episode_id="e1", output="# Report\n\nThe city had 2,767 crashes.\n",
                      data=json.dumps({"tasks_dir": str(tasks_dir), "checklists_dir": str(store)}))
    stored = json.loads(Path(res.path).read_text())["criteria"]
    for judged in ({}, {"e1": {"claims:0": None}}):        # two judges, two histories: one rubric
        reqs = BENCH.judge_requests(row, judged)
        assert not [r for r in reqs if r.episode_id != "e1" or r.key == "checklist"]      # no judge-made rubric
        crits = [r for r in reqs if r.key.startswith("criterion:")]
        assert [r.messages[0]["content"].split("Evaluation criteria:\n")[1].split("\n\nCarefully")[0]
                for r in crits] == stored
        cid = {t.task_id: t for t in load_tasks(tasks_dir, checklists_dir=store)}["crashes-2023"].checklist_id
        assert [r.key for r in crits] == [f"criterion:{cid}:{i:02d}" for i in range(len(stored))]


def test_failed_build_leaves_the_score_missing_with_a_reason(tasks_dir):
    b = AnalystBenchmarkConfig(tasks_dir=str(tasks_dir))
    task = next(t for t in load_tasks(tasks_dir) if t.task_id == "crashes-2023")
    # what the 0.5B model does: numbered prose that copies the template's placeholders
    (res,), reqs = build([task], b, lambda m, r: "1. The response should... (criteria description here)")
    assert res.status == "failed" and "malformed checklist draft" in res.detail and len(reqs) == 2  # retried once
    assert not (tasks_dir / "crashes-2023" / "checklist.json").exists()
    failed = json.loads((tasks_dir / "crashes-2023" / "checklist.failed.json").read_text())
    assert failed["generated_by"] == WHO and "criteria description here" in failed["raw_output_head"]
    tasks_by_id.cache_clear()
    row = episode_row("analyst", episode_id="e1", output="# Report\n\nText.\n", report_tokens=5,
                      data=json.dumps({"tasks_dir": str(tasks_dir)}), judgements={"claims:0": None})
    assert not [r for r in BENCH.judge_requests(row, {}) if r.key.startswith("criterion:")]
    m = metrics_of(BENCH, [row])
    assert "checklist_pct" not in m                                   # missing, never guessed
    assert m["checklist_missing_checklist_build_failed"].value == 1.0
    # a later build with a capable judge replaces the failure
    (res,), _ = build([task], b, judge)
    assert res.status == "built" and not (tasks_dir / "crashes-2023" / "checklist.failed.json").exists()


def test_task_without_checklist_file_is_counted_not_dropped(tasks_dir):
    tasks_by_id.cache_clear()
    row = episode_row("analyst", episode_id="e1", task_id="crashes-2022", output="# Report\n", report_tokens=5,
                      data=json.dumps({"tasks_dir": str(tasks_dir)}), judgements={})
    m = metrics_of(BENCH, [row])
    assert "checklist_pct" not in m and m["checklist_missing_no_checklist"].value == 1.0


def test_stale_built_checklist_is_an_error(tasks_dir):
    b = AnalystBenchmarkConfig(tasks_dir=str(tasks_dir))
    task = next(t for t in load_tasks(tasks_dir) if t.task_id == "crashes-2023")
    build([task], b, judge)
    (tasks_dir / "crashes-2023" / "reference.md").write_text(task.reference + "\nA new paragraph.\n")
    with pytest.raises(DataError, match=r"crashes-2023/checklist.json, field 'reference_sha256': built for another"):
        load_tasks(tasks_dir)


@pytest.mark.slow
def test_cli_builds_missing_checklists_with_the_configured_judge(tasks_dir, tmp_path, monkeypatch):
    from ray_jobs.cli.main import main

    with FakeOpenAI(judge) as srv:
        rc = main(["analyst-checklists", f"benchmark.tasks_dir={tasks_dir}", "judge=openai_compatible",
                   f"judge.base_url={srv.base_url}", "judge.model=gpt-judge", "judge.api_key_env=",
                   f"run.dir={tmp_path / 'run'}", "run.progress=false"])
    assert rc == 0
    for tid in ("crashes-2022", "crashes-2023"):
        saved = json.loads((tasks_dir / tid / "checklist.json").read_text())
        assert saved["generated_by"]["model"] == "gpt-judge" and saved["generated_by"]["kind"] == "openai_compatible"
        assert len(saved["criteria"]) == 2
    # the hand-written checklist is left as it is
    assert (tasks_dir / "unemployment-brief" / "checklist.json").read_text() == \
        (SAMPLE / "unemployment-brief" / "checklist.json").read_text()
