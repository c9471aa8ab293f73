"""Issue 20 for analyst, through the real driver (Hydra, Ray, workers, the judge stage, Parquet)
against a scripted model and a scripted judge:

* 40 claims verified, 10 unsupported, 4 of which the judge wrote "Not supported" (unparseable):
  hallucination 25 %, never 16.7 % over the 36 it could parse; the unverified share (10 %) beside it;
* a criterion whose reasoning was cut at max_tokens has no rating: the episode's checklist score
  is missing and counted (never 100 % over the criteria that finished), and the judgement
  records the truncation;
* the judge calls ask for the paper's 65,535 tokens;
* who wrote each checklist appears in the table, flagged when it is a model under comparison.
"""

from __future__ import annotations

import json
import re

import pytest

from engine.benchmarks.analyst import BENCHMARK
from engine.benchmarks.analyst.data import load_tasks, reference_sha256
from engine.inputs.paths import data_path
from engine.storage import JUDGEMENT_SCHEMA, EpisodeStore
from ray_jobs.cluster.session import Session
from ray_jobs.config.compose import compose
from ray_jobs.run import run_sweep
from tests.fake_openai import FakeOpenAI
from tests.helpers import run_module

pytestmark = pytest.mark.ray

REPORT = ("# Unemployment and traffic brief\n\n## Summary\nIllinois had the lowest rate in 2024. The city recorded "
          "2,767 crashes in 2023.\n")
CLAIMS = {f"Claim number {i} about the data": f"quote {i}" for i in range(40)}


def verdict(i: int) -> str:
    """30 supported, 6 unsupported, 4 written as the prompt does not allow."""
    return "SUPPORTED" if i < 30 else "UNSUPPORTED" if i < 36 else "Not supported"


def test_unparsed_verdicts_and_unrated_criteria_are_counted(tmp_path):
    tasks = {t.task_id: t for t in load_tasks(data_path("engine/benchmarks/analyst/sample_tasks"))}
    first_criterion = tasks["unemployment-brief"].checklist[0]
    # crashes-2023 gets a checklist built by "scripted", the model under test itself
    store_dir = tmp_path / "checklists"
    store_dir.mkdir()
    ref = tasks["crashes-2023"].reference
    crit = [f"The response should state fact {i}.\n" + "\n".join(f"- {s}: x" for s in range(1, 6)) for i in range(3)]
    (store_dir / f"crashes-2023-{reference_sha256(ref)[:12]}.json").write_text(json.dumps(
        {"criteria": crit, "generated_by": {"judge": "scripted:1", "model": "scripted"},
         "reference_sha256": reference_sha256(ref)}))

    def model(messages, req):
        return REPORT

    def judge(messages, req):
        text = messages[0]["content"]
        if "Evaluation criteria:" in text:
            if first_criterion in text:                 # the reasoning runs out of tokens: no rating
                return {"text": "Step 1: the response mentions the rate. Step 2: however", "finish_reason": "length"}
            return "The criterion is mostly met, therefore, the rating is: 4"
        if "atomic factual claims" in text:
            return json.dumps(CLAIMS)
        m = re.search(r"Claim number (\d+) about", text)
        assert m, text[-500:]
        return verdict(int(m.group(1)))

    with FakeOpenAI(model) as srv, FakeOpenAI(judge) as j:
        cfg = compose(["benchmark=analyst", "agent=analyst", "benchmark.task_ids=[unemployment-brief,crashes-2023]",
                       f"benchmark.checklists_dir={store_dir}", "model=openai_compatible",
                       f"model.base_url={srv.base_url}", "model.name=scripted", "model.api_key_env=",
                       "judge=openai_compatible", f"judge.base_url={j.base_url}", "judge.model=grader",
                       "judge.api_key_env=", "judge.max_attempts=1", f"run.dir={tmp_path / 'run'}",
                       "run.progress=false", "cluster.num_cpus=4"])
        session = Session()
        try:
            run_sweep([cfg], session)
        finally:
            session.close()
        asked = [r["max_tokens"] for r in j.requests if "Evaluation criteria:" in r["messages"][0]["content"]]
    assert asked and set(asked) == {65535}                   # the paper's limit (table 9), configurable

    store = EpisodeStore(tmp_path / "run", BENCHMARK.episode_fields)
    assert {e["task_id"]: e["status"] for e in store.episodes().to_pylist()} == \
        {"unemployment-brief": "ok", "crashes-2023": "ok"}
    rows = [r for r in store.metrics().to_pylist() if r["scope"] == "all"]
    m = {r["metric"]: r for r in rows}
    assert m["hallucination_pct"]["value"] == pytest.approx(25.0)          # (6 + 4) / 40, both reports
    assert m["claims_unverified_pct"]["value"] == pytest.approx(10.0)
    # unemployment-brief: one criterion unrated -> no score, counted; crashes-2023: 3 x 4 / 15
    assert (m["checklist_pct"]["value"], m["checklist_pct"]["n"]) == (pytest.approx(80.0), 1)
    assert m["checklist_missing_unscored"]["value"] == 1.0 and m["criteria_unscored"]["value"] == 0.5
    judgements = store.read("judgements", JUDGEMENT_SCHEMA).to_pylist()
    cut = [r for r in judgements if r["truncated"]]
    assert len(cut) == 1 and cut[0]["key"].startswith("criterion:") and cut[0]["value"] is None
    assert json.loads(cut[0]["evaluation"])["judge_max_tokens"] == 65535

    # who wrote the checklists, in the table: the task's own (hand-written) and the model under test
    assert m["checklist_by:hand-written"]["value"] == 0.5 and m["checklist_by:scripted"]["value"] == 0.5
    assert m["checklist_self_written"]["value"] == 0.5
    out = run_module("ray_jobs.cli.main", "tables", str(tmp_path / "run"), timeout=300)
    assert out.returncode == 0, out.stderr
    assert "Checklists by" in out.stdout and "hand-written, scripted **(written by a compared model: scripted)**" \
        in out.stdout, out.stdout
    assert "25.0 (n=2) (10.0)" in out.stdout
