"""Issue 31, findings 9 and 11: a change of plan is visible in every output.

* F9: a smaller re-run (``benchmark.limit=1`` on a run dir with 4 scored episodes) re-runs nothing
  and reports over its own plan, 1.000 (n=1), but every output says that 3 stored episodes are
  outside that plan (they were 0.500 of 4).
* F11: a judge that saw 4 of the 6 planned episodes (the plan grew after it ran) says so, and its
  judge-based means are over what it judged (3/4), not "6 of 6 scored" with 2 ungraded (3/6).

Both run the real driver (Hydra config, Ray, workers, the judge stage, Parquet) against scripted
OpenAI-compatible servers, then read every output in-process (tests/everywhere.py).
"""

from __future__ import annotations

import re

import pytest

from engine.storage import EpisodeStore
from ray_jobs.outputs.report import build
from tests.e2e.test_what_a_number_means import FINISH, grader, judged, live_cfg, metric, questions, sweep, which
from tests.everywhere import cell_lines, rows_with, seen
from tests.fake_openai import FakeOpenAI

pytestmark = pytest.mark.ray


def answers(script: dict[int, str]):
    """The scripted model: question i answers ``script[i]``."""
    qs = questions(len(script))
    return lambda messages, req: FINISH.format(script[which(messages, qs)])


def probing_grader(messages: list[dict], req: dict) -> str:
    """:func:`grader`, and the judge probes graded as they must be (the gold answer CORRECT, any
    other answer without RIGHT INCORRECT)."""
    text = messages[0]["content"]
    gold = text.rsplit("Gold target: ", 1)[1].split("\n", 1)[0]      # the last: the prompt's examples have some
    answer = text.split("Predicted answer: ", 1)[1].split("\n", 1)[0]
    return "A" if answer == gold or "RIGHT" in answer else "B"


def test_a_smaller_rerun_says_what_its_plan_leaves_out(tmp_path, capsys):
    run = tmp_path / "run"
    with FakeOpenAI(answers({0: "RIGHT", 1: "WRONG", 2: "RIGHT", 3: "WRONG"})) as m, FakeOpenAI(grader) as j:
        (first,) = sweep([live_cfg(m.base_url, run, "benchmark.limit=4", *judged(j.base_url))])
        calls = len(m.requests)
        rows = EpisodeStore(run).metrics().to_pylist()
        acc = metric(rows, "accuracy")
        assert (acc["value"], acc["n"], acc.get("n_outside_plan") or 0) == (0.5, 4, 0)       # 2 of 4
        capsys.readouterr()
        (info,) = sweep([live_cfg(m.base_url, run, "benchmark.limit=1", *judged(j.base_url))])
        printed = capsys.readouterr().out
    # nothing re-run: the one planned episode is stored, the model was not called again
    assert info["config_hash"] == first["config_hash"]
    assert (info["episodes_total"], info["episodes_skipped"], len(m.requests)) == (1, 1, calls)
    note = "3 stored episodes are outside this plan"
    # `dateline run`: 1.000 over the new plan (complete), and the 3 it leaves out
    assert "1 of 1 scored" in printed and "INCOMPLETE" not in printed and note in printed, printed

    s = seen(run, "livenews", tmp_path / "out")
    assert all(code == 0 for code in s.codes.values()), s.codes
    acc = metric(s.api, "accuracy")
    assert (acc["value"], acc["n"], acc["incomplete"], acc["n_outside_plan"]) == (1.0, 1, False, 3)
    assert all(r["n_outside_plan"] == 3 for r in s.api)
    assert rows_with(s.metrics, "accuracy", "1", "1", "1/1"), s.metrics
    assert note in s.metrics
    assert "| 1/1 |" in s.tables and note in s.tables, s.tables
    assert note in s.report_md and note in "\n".join(cell_lines(s.report_html))
    assert re.search(r"^\| accuracy \| 1 (\[[^]]*\] )?\(n=1(, exact)?\) \|$", s.report_md, re.M), s.report_md
    (exp,) = s.mlflow
    assert exp["metrics"]["accuracy"] == 1.0 and exp["metrics"]["accuracy.n"] == 1
    assert exp["metrics"]["n_outside_plan"] == 3 and exp["tags"]["dateline.n_outside_plan"] == "3"
    # the leaderboard (a report of two run dirs: here the same one twice) carries it too
    build([run, run], tmp_path / "two", n_boot=50)
    board = (tmp_path / "two" / "leaderboard.md").read_text()
    accuracy = board.split("## Leaderboard by accuracy", 1)[1].split("\n## ", 1)[0]
    assert note in board and len(rows_with(accuracy, "1/1")) == 2, board


def test_a_judge_that_saw_part_of_the_plan_says_how_much(tmp_path, capsys):
    run = tmp_path / "run"
    script = {0: "RIGHT", 1: "RIGHT", 2: "RIGHT", 3: "WRONG", 4: "RIGHT", 5: "WRONG"}
    with FakeOpenAI(answers(script)) as m, FakeOpenAI(probing_grader) as j:
        sweep([live_cfg(m.base_url, run, "benchmark.limit=4", *judged(j.base_url))])             # J1
        capsys.readouterr()
        (info,) = sweep([live_cfg(m.base_url, run, "benchmark.limit=6", "benchmark.judge_probes=true",
                                  *judged(j.base_url))])                                         # J2
        printed = capsys.readouterr().out
    judges = EpisodeStore(run).judges()
    (j1,) = [k for k, v in judges.items() if '"judge_probes": false' in v.get("evaluation", "")]
    (j2,) = [k for k in judges if k != j1]
    # J1 saw q0-q3 (3 RIGHT): 3/4 over what it judged; J2 saw all 6 (4 RIGHT): 4/6
    line = f"PARTIALLY JUDGED: judge {j1} judged 4 of 6 planned episodes (2 scored ones it never saw"
    assert line in printed and f"judge {j2} judged" not in printed, printed
    assert "6 of 6 scored" in printed

    s = seen(run, "livenews", tmp_path / "out")
    assert all(code == 0 for code in s.codes.values()), s.codes
    for rows in (s.api, EpisodeStore(run).metrics().to_pylist()):
        a1, a2 = metric(rows, "accuracy", judge=j1), metric(rows, "accuracy", judge=j2)
        assert (a1["value"], a1["n"], a1["n_judged"], a1["n_scored"]) == (0.75, 4, 4, 6)
        assert (a2["value"], a2["n"], a2["n_judged"]) == (pytest.approx(4 / 6), 6, 6)
        u1 = metric(rows, "ungraded", judge=j1)
        assert (u1["value"], u1["n"]) == (0.0, 4)                     # never seen is not ungraded
        assert metric(rows, "searches_mean", judge=j1)["n"] == 6      # what needs no judge: every episode
        assert metric(rows, "judge_probe_gold_ok", judge=j2)["value"] == 1.0
    assert rows_with(s.metrics, j1, "accuracy", "0.750", "4", "6/6 PARTIALLY JUDGED (4 judged)"), s.metrics
    assert rows_with(s.metrics, j2, "accuracy", "0.667", "6", "6/6"), s.metrics
    for name, text in (("metrics", s.metrics), ("tables", s.tables), ("report.md", s.report_md),
                       ("report.html", "\n".join(cell_lines(s.report_html)))):
        assert line in text, name
        assert f"judge {j2} judged" not in text, name
    # Table 1 (tables and report): J1's accuracy 75.0 over its 4, its n cell marked
    assert rows_with(s.tables, "75.0 [19.4, 99.4]", "6/6 PARTIALLY JUDGED (4 judged)"), s.tables
    assert rows_with(s.report_md, "75.0 [19.4, 99.4]", "6/6 PARTIALLY JUDGED (4 judged)"), s.report_md
    # the report's blocks: J1 0.750 (n=4), J2 0.667 (n=6), whatever the interval
    for value, n in (("0.750", 4), ("0.667", 6)):
        assert re.search(rf"^\| accuracy \| {value} (\[[^]]*\] )?\(n={n}(, exact)?\) \|$", s.report_md, re.M), \
            s.report_md
    exp = {r["params"]["judge"]: r for r in s.mlflow}
    assert exp[j1]["metrics"]["accuracy"] == 0.75 and exp[j1]["metrics"]["accuracy.n"] == 4
    assert exp[j1]["metrics"]["n_judged"] == 4 and exp[j1]["tags"]["dateline.partially_judged"] == "true"
    assert exp[j2]["metrics"]["accuracy"] == pytest.approx(4 / 6) and exp[j2]["metrics"]["accuracy.n"] == 6
    assert exp[j2]["tags"]["dateline.partially_judged"] == "false"
