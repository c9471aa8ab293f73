"""Issue 31, finding 5: analyst configurations compared "on the same tasks" are compared on the
tasks where each metric has a value.

Two configurations (models ``a`` and ``b`` on two scripted servers), the two sample tasks that
ship without a checklist, each given one by the test: t1 with 3 criteria, t2 with 2. The judge
rates t2 [2, 3] for both models (50 %); b's t1 [3, 4, 3] (66.7 %); a's t1 has its first criterion
cut at max_tokens (no rating: a's t1 has no checklist score, though the episode is scored). By
hand: over each plan a is 50.0 (n=1) and b (66.7 + 50) / 2 = 58.3 (n=2); compared, checklist_pct
is over the 1 task both have a value for: 50.0 against 50.0, a tie, 1 task dropped. Before the fix
the page said "compared on the same 2 tasks" with 50 (n=1) against 58.3 (n=2) and b led.
"""

from __future__ import annotations

import json
import re

import pytest

from engine.benchmarks.analyst.data import load_tasks, reference_sha256
from engine.inputs.paths import data_path
from ray_jobs.config.compose import compose
from tests.e2e.test_what_a_number_means import sweep
from tests.everywhere import rows_with, seen
from tests.fake_openai import FakeOpenAI

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]

CRITERIA = {0: 3, 1: 2}         # task index -> number of criteria


def test_checklist_comparison_is_on_the_tasks_both_have_a_score_for(tmp_path):
    tasks = sorted((t for t in load_tasks(data_path("engine/benchmarks/analyst/sample_tasks")) if not t.checklist),
                   key=lambda t: t.task_id)
    assert len(tasks) == 2
    checklists = tmp_path / "checklists"
    checklists.mkdir()
    for i, t in enumerate(tasks):
        crit = [f"The response should state fact T{i}C{c}.\n" + "\n".join(f"- {s}: x" for s in range(1, 6))
                for c in range(CRITERIA[i])]
        (checklists / f"{t.task_id}-{reference_sha256(t.reference)[:12]}.json").write_text(json.dumps(
            {"criteria": crit, "generated_by": {"judge": "hand:1", "model": "hand"},
             "reference_sha256": reference_sha256(t.reference)}))

    def writer(who):
        return lambda messages, req: f"# Brief by {who}\n\nThe rate fell in 2024.\n"

    def judge(messages, req):
        text = messages[0]["content"]
        if "Evaluation criteria:" in text:
            i, c = map(int, re.search(r"fact T(\d)C(\d)", text).groups())
            by_a = "Brief by A" in text
            if by_a and i == 0 and c == 0:
                return {"text": "Step 1: the response mentions it. Step 2: however", "finish_reason": "length"}
            rating = [3, 4, 3][c] if i == 0 else [2, 3][c]
            return f"The criterion is partly met, therefore, the rating is: {rating}"
        if "atomic factual claims" in text:
            return json.dumps({"The rate fell in 2024": "The rate fell"})
        return "SUPPORTED"

    run = tmp_path / "run"
    with FakeOpenAI(writer("A")) as a, FakeOpenAI(writer("B")) as b, FakeOpenAI(judge) as j:
        base = ["benchmark=analyst", "agent=analyst", f"benchmark.checklists_dir={checklists}",
                f"benchmark.task_ids=[{','.join(t.task_id for t in tasks)}]",
                "model=openai_compatible", "model.api_key_env=", "judge=openai_compatible",
                f"judge.base_url={j.base_url}", "judge.model=grader", "judge.api_key_env=", "judge.max_attempts=1",
                f"run.dir={run}", "run.progress=false", "cluster.num_cpus=4"]
        ha, hb = (i["config_hash"] for i in sweep([
            compose([*base, f"model.base_url={a.base_url}", "model.name=a"]),
            compose([*base, f"model.base_url={b.base_url}", "model.name=b"])]))
    s = seen(run, "analyst", tmp_path / "out", show=False)

    def row(h, scope):
        (r,) = [r for r in s.api if r["config_hash"] == h and r["metric"] == "checklist_pct" and r["scope"] == scope]
        return round(r["value"], 1), r["n"]

    assert (row(ha, "all"), row(hb, "all")) == ((50.0, 1), (58.3, 2))
    assert (row(ha, "common"), row(hb, "common")) == ((50.0, 1), (50.0, 1))
    note = "checklist_pct: on the 1 task(s) every compared configuration has a value for (1 more dropped)"
    assert note in s.tables and note in s.report_md
    assert "checklist_pct: tie at 50" in s.report_md           # the summary: no winner on the shared tasks
    (line,) = [ln for ln in s.report_md.splitlines() if ln.startswith("| checklist_pct |") and "(n=1" in ln
               and "| a |" not in ln]
    assert line == ("| checklist_pct | 50 (n=1; too few tasks for an interval) | 50 (n=1; too few tasks for an "
                    "interval) |"), line
    for r in s.mlflow:
        assert round(r["metrics"]["common.checklist_pct"], 1) == 50.0
    assert rows_with(s.metrics, "checklist_pct", "58.333", "2"), s.metrics
