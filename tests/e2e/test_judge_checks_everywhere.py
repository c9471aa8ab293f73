"""Issue 46, finding 6: a judge that fails its own checks marks every number it produced, in every
output, through the real driver against scripted servers.

livenews with ``benchmark.judge_probes=true`` over the bundled sample's 12 questions: the model
answers RIGHT to every question, and the scripted judge grades an answer containing RIGHT as
CORRECT, so ``accuracy`` is 1.000. On its probes it accepts the gold answer of one question only
and rejects every decoy. By hand: ``judge_probe_gold_ok`` = 1/12 = 0.083 (below the minimum 0.9 of
conf/judge_checks.yaml), ``judge_probe_decoy_ok`` = 12/12. Before the fix every output printed
``accuracy 1.000`` with no warning; now each says JUDGE FAILED ITS CHECKS with the measured share.
With a minimum of 0.05 (``$DATELINE_JUDGE_CHECKS``) the same run dir reads unmarked: the threshold
is read when numbers are shown, and changes no judgement.
"""

from __future__ import annotations

import math

import pytest

from engine.scoring.judge_checks import FAILED
from tests.e2e.test_adaptive_run import _golds
from tests.e2e.test_what_a_number_means import FINISH, judged, live_cfg, sweep
from tests.everywhere import cell_lines, seen
from tests.fake_openai import FakeOpenAI

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]

WHY = f"{FAILED}: judge_probe_gold_ok 0.083 over 12 probes, below its minimum 0.9"


def test_a_judge_that_fails_its_probes_marks_its_numbers_everywhere(tmp_path, capsys, monkeypatch):
    golds = list(_golds().values())

    def grader(messages, req):
        answer = messages[0]["content"].split("Predicted answer: ", 1)[1].split("\n", 1)[0]
        return "A" if "RIGHT" in answer or answer.strip() == golds[0] else "B"

    with FakeOpenAI(lambda m, r: FINISH.format("RIGHT")) as srv, FakeOpenAI(grader) as j:
        [info] = sweep([live_cfg(srv.base_url, tmp_path, "benchmark.judge_probes=true", *judged(j.base_url))])
    out = capsys.readouterr().out
    h = info["config_hash"]
    assert WHY in out                                            # the run's own summary

    s = seen(tmp_path, "livenews", tmp_path / "out", show=False)
    assert all(c == 0 for c in s.codes.values()), s.codes
    api = {r["metric"]: r for r in s.api if r["config_hash"] == h and r["scope"] == "all" and r["judge"]}
    assert api["accuracy"]["value"] == 1.0 and math.isclose(api["judge_probe_gold_ok"]["value"], 1 / 12)
    assert api["judge_probe_decoy_ok"]["value"] == 1.0
    assert api["accuracy"]["judge_check"].startswith(WHY)        # every judge-based row
    assert api["tokens_in_mean"].get("judge_check") in (None, "")  # not what the judge produced
    # dateline metrics: the judge column and a line under the table
    [acc] = [ln for ln in s.metrics.splitlines() if " accuracy " in ln and "|" in ln]
    assert FAILED in acc and WHY in s.metrics
    # dateline tables and the report: the warning above the judge's tables, and the headline's marks
    assert WHY in s.tables and WHY in s.report_md
    assert any(FAILED in ln for ln in s.report_md.splitlines() if ln.startswith("**livenews"))
    assert any(WHY in ln for ln in cell_lines(s.report_html))
    # the MLflow export: the mark with the others
    [rec] = [r for r in s.mlflow if r["params"]["config_hash"] == h and r["params"]["judge"] != "none"]
    assert FAILED in rec["tags"]["dateline.marks"] and rec["tags"]["dateline.judge_check"].startswith(WHY)

    # another minimum, read when shown: nothing marked, no judgement changed
    lenient = tmp_path / "lenient.yaml"
    lenient.write_text("judge_checks:\n  livenews:\n    judge_probe_gold_ok: 0.05\n")
    monkeypatch.setenv("DATELINE_JUDGE_CHECKS", str(lenient))
    again = seen(tmp_path, "livenews", tmp_path / "out2", show=False, export=False)
    assert FAILED not in again.metrics and FAILED not in again.tables and FAILED not in again.report_md
    assert [r["value"] for r in again.api] == [r["value"] for r in s.api]
