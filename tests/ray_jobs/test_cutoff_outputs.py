"""The knowledge-cutoff split in every output that shows a livenews metric (issue 45): the metrics
table and ``dateline metrics``, ``dateline tables``, the HTML/Markdown report, the leaderboard,
the exports (MLflow/W&B records, inspect's results), ``dateline show`` and the Python API.

Hand-made run dirs: five livenews questions dated 2023-11-01, 2023-12-31, 2024-01-02, 2024-02-01
and 2024-03-01 (as the plan records them), graded by a judge. ``alpha`` (knowledge cutoff
2023-12-31) answers C I C I C: 3 of 5 correct (0.6, exact [0.147, 0.947]); after its cutoff are
the last three questions (2023-12-31 is on the cutoff, not after it), 2 of 3 correct (0.667, exact
[0.094, 0.992]), and 2 questions are on or before it. ``beta`` (no cutoff anywhere) answers
C C C I I: 0.6, "cutoff unknown". ``gamma`` (cutoff 2024-01-15) answers C C C I I: 0.6 overall, and
0 of the 2 questions after its cutoff (0, exact [0, 0.842]).
"""

from __future__ import annotations

import re

import pytest

from dateline import results
from engine.benchmarks.livenews import BENCHMARK as LIVE
from engine.scoring.outcomes import Planned, task_set
from engine.storage import EpisodeStore
from ray_jobs.cli.main import main
from ray_jobs.outputs import export
from ray_jobs.outputs.inspect import plain
from ray_jobs.outputs.report import build
from tests.factories import episode_row

DATES = ["2023-11-01", "2023-12-31", "2024-01-02", "2024-02-01", "2024-03-01"]
ALPHA, BETA, GAMMA = "CICIC", "CCCII", "CCCII"


def make_run(root, model: str, grades: str, cutoff: str | None) -> str:
    """One configuration of ``model``: five judged episodes (``grades``: C correct, I incorrect)
    and its plan with each question's date and the model's knowledge cutoff."""
    store = EpisodeStore(root, LIVE.episode_fields)
    h = f"{model}-config-hash"
    ids = [f"{model}-e{i}" for i in range(len(DATES))]
    store.write_batch([episode_row("livenews", episode_id=e, task_id=f"q{i}", config_hash=h, model=model,
                                   cutoff=DATES[i], question=f"question {i}?", gold=f"gold {i}", output=f"answer {i}")
                       for i, e in enumerate(ids)], [])
    planned = [Planned(e, f"q{i}") for i, e in enumerate(ids)]
    store.write_plan(h, [(p.episode_id, p.task_id, 0, "") for p in planned], task_set(planned), "as_wrong",
                     "{}", DATES, cutoff)
    base = {"judge": "grader:ab12cd34", "judge_model": "grader", "judge_kind": "openai_compatible",
            "judge_prompt": LIVE.judge_prompt_version, "key": "grade", "ok": True, "attempts": 1, "error": "",
            "tokens_in": 1, "tokens_out": 1, "latency_s": 0.1, "config_hash": h}
    store.write_judgements([dict(base, episode_id=e, value="CORRECT" if g == "C" else "INCORRECT",
                                 raw_output="A" if g == "C" else "B") for e, g in zip(ids, grades)])
    return h


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``one``: alpha and beta; ``known``: alpha alone; ``two``: gamma."""
    base = tmp_path_factory.mktemp("cutoff")
    make_run(base / "one", "alpha", ALPHA, "2023-12-31")
    make_run(base / "one", "beta", BETA, None)
    make_run(base / "known", "alpha", ALPHA, "2023-12-31")
    make_run(base / "two", "gamma", GAMMA, "2024-01-15")
    return base


def _row(rows, model, metric, scope="all"):
    (r,) = [r for r in rows if r["model"] == model and r["metric"] == metric and r["scope"] == scope and r["judge"]]
    return r


def test_the_metrics_table_and_the_api_hold_the_split(runs):
    """The Python API's metrics table (what ``dateline tables``, the report and the exports read):
    each mean after the cutoff with its own n and exact interval, the questions on each side, the
    cutoff on every row; none of it for a model without a cutoff, whose rows say null."""
    rows = results(str(runs / "one")).metrics().to_pylist()
    for scope in ("all", "common"):          # every configuration finished every task: the same numbers
        acc, after = _row(rows, "alpha", "accuracy", scope), _row(rows, "alpha", "accuracy.after_cutoff", scope)
        assert (acc["value"], acc["n"]) == (pytest.approx(0.6), 5)
        assert (after["value"], after["n"], after["interval"]) == (pytest.approx(2 / 3), 3, "exact")
        assert (round(after["lo"], 3), round(after["hi"], 3)) == (0.094, 0.992)
        assert (_row(rows, "alpha", "questions_after_cutoff", scope)["value"],
                _row(rows, "alpha", "questions_before_cutoff", scope)["value"]) == (3, 2)
    # a failed-share mean, split too: nothing failed after the cutoff
    assert _row(rows, "alpha", "failed.after_cutoff")["value"] == 0.0
    assert {r["knowledge_cutoff"] for r in rows if r["model"] == "alpha"} == {"2023-12-31"}
    beta = [r for r in rows if r["model"] == "beta"]
    assert _row(rows, "beta", "accuracy")["value"] == pytest.approx(0.6)
    assert not [r for r in beta if r["metric"].endswith(".after_cutoff") or "cutoff" in r["metric"]]
    assert {r["knowledge_cutoff"] for r in beta} == {None}


def test_dateline_metrics_prints_the_split_and_says_cutoff_unknown(runs, capsys):
    assert main(["metrics", str(runs / "one")]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if "accuracy.after_cutoff" in ln and "alpha" in ln)
    assert "0.667" in line and "[0.094, 0.992] exact" in line and "| 3 " in line
    assert ("alpha [alpha-co] (judge grader:" in out and "knowledge cutoff 2023-12-31: 3 question(s) after it, 2 on "
            "or before it; accuracy after it 0.667 [0.094, 0.992] exact (n=3)" in out)
    assert re.search(r"beta \[beta-con\] \(judge grader:\w+\): cutoff unknown \(set model.knowledge_cutoff", out)


def test_dateline_tables_show_accuracy_after_the_cutoff(runs, capsys):
    assert main(["tables", str(runs / "one")]) == 0
    out = capsys.readouterr().out
    table1 = out.split("## livenews table1")[1].split("## ")[0]
    alpha = next(ln for ln in table1.splitlines() if ln.startswith("| alpha |"))
    assert "| 60.0 [14.7, 94.7] |" in alpha
    assert alpha.endswith("| 66.7 [9.4, 99.2] (cutoff 2023-12-31: 3 question(s) after, 2 on or before) |")
    beta = next(ln for ln in table1.splitlines() if ln.startswith("| beta |"))
    assert beta.endswith("| cutoff unknown |")
    assert "knowledge cutoff 2023-12-31: 3 question(s) after it, 2 on or before it" in table1


@pytest.mark.slow
def test_the_report_shows_the_split_with_its_intervals(runs, tmp_path):
    build([str(runs / "one")], tmp_path / "rep", n_boot=50, episodes=0)
    md = (tmp_path / "rep" / "report.md").read_text()
    after = next(ln for ln in md.splitlines() if ln.startswith("| accuracy.after_cutoff |"))
    # one column per configuration (alpha, then beta): beta has no value after an unknown cutoff
    assert after == "| accuracy.after_cutoff | 0.667 [0.094, 0.992] (n=3, exact) |  |"
    assert next(ln for ln in md.splitlines() if ln.startswith("| questions_before_cutoff |")).startswith(
        "| questions_before_cutoff | 2 (n=2) |")
    assert "alpha: knowledge cutoff 2023-12-31: 3 question(s) after it, 2 on or before it" in md
    assert "beta: cutoff unknown" in md
    # the summary lists each model's number after its own cutoff
    assert ("accuracy over the questions after each model's knowledge cutoff: alpha 0.667 [0.094, 0.992] (n=3, "
            "exact); beta: cutoff unknown") in md
    assert "66.7 [9.4, 99.2] (cutoff 2023-12-31: 3 question(s) after, 2 on or before)" in md    # the paper table
    assert "accuracy.after_cutoff" in (tmp_path / "rep" / "report.html").read_text()


@pytest.mark.slow
def test_the_leaderboard_ranks_after_the_cutoff_only_when_every_model_has_one(runs, tmp_path):
    """alpha and gamma tie over all questions (0.6 each) but not after their cutoffs (0.667 vs 0):
    with both cutoffs known the board ranks on that and says so; with beta on it (cutoff unknown)
    it ranks over all questions and says why."""
    build([str(runs / "known"), str(runs / "two")], tmp_path / "both", n_boot=50, episodes=0)
    board = (tmp_path / "both" / "leaderboard.md").read_text().split("Leaderboard by answer_contains_gold")[0]
    lines = [ln for ln in board.splitlines() if ln.startswith("| #")]
    assert lines[0].startswith("| #1 | alpha (known) | 0.667 [0.094, 0.992] (n=3, exact) | 0.600 [0.147, 0.947]")
    assert lines[1].startswith("| #2 | gamma (two) | 0.000 [0.000, 0.842] (n=2, exact) | 0.600 [0.147, 0.947]")
    assert ("Ranked on accuracy over the questions after each model's knowledge cutoff (every model here has one: "
            "alpha (known) 2023-12-31, gamma (two) 2024-01-15)") in board
    build([str(runs / "one"), str(runs / "two")], tmp_path / "mixed", n_boot=50, episodes=0)
    board = (tmp_path / "mixed" / "leaderboard.md").read_text().split("Leaderboard by answer_contains_gold")[0]
    ranked = [ln for ln in board.splitlines() if ln.startswith("| #1=")]
    assert len(ranked) == 3 and all("| 0.600 [0.147, 0.947] (n=5, exact) |" in ln for ln in ranked)
    assert any("| beta (one) |" in ln and "| cutoff unknown |" in ln for ln in ranked)
    assert ("Ranked on accuracy over all questions, not over those after each model's knowledge cutoff: "
            "beta (one) (cutoff unknown)") in board


def test_the_exports_carry_the_split(runs):
    """MLflow and W&B get the records' metrics and tags; inspect's eval logs their results."""
    recs = {(r["row"]["model"], r["judge"]): r for r in export._records(str(runs / "one"))}
    alpha = next(r for (m, j), r in recs.items() if m == "alpha" and j)
    m = alpha["metrics"]
    assert (m["accuracy.after_cutoff"], m["accuracy.after_cutoff.n"]) == (pytest.approx(2 / 3), 3)
    assert (round(m["accuracy.after_cutoff.lo"], 3), round(m["accuracy.after_cutoff.hi"], 3)) == (0.094, 0.992)
    assert (m["questions_after_cutoff"], m["questions_before_cutoff"]) == (3, 2)
    assert alpha["tags"]["dateline.knowledge_cutoff"] == "2023-12-31"
    assert alpha["tags"]["dateline.cutoff_split"] == "knowledge cutoff 2023-12-31: 3 question(s) after it, 2 on or before it"
    beta = next(r for (m, j), r in recs.items() if m == "beta" and j)
    assert beta["tags"]["dateline.knowledge_cutoff"] == "cutoff unknown"
    assert not [k for k in beta["metrics"] if "cutoff" in k]
    (res, *_) = plain.results([alpha])          # the inspect log's results: the metrics table's values
    assert res["metrics"]["accuracy.after_cutoff"]["n"] == 3
    assert res["metrics"]["accuracy.after_cutoff"]["value"] == pytest.approx(2 / 3)


def test_dateline_show_places_each_question_and_sums_up_the_split(runs, capsys):
    root = str(runs / "one")
    assert main(["show", root]) == 0
    out = capsys.readouterr().out
    assert "livenews alpha [alpha-co] (judge grader:" in out and "accuracy after it 0.667 [0.094, 0.992] exact (n=3)" in out
    assert re.search(r"livenews beta \[beta-con\] \(judge grader:\w+\): cutoff unknown", out)
    assert main(["show", root, "alpha-e2"]) == 0
    assert "question dated 2024-01-02: after the model's knowledge cutoff 2023-12-31" in capsys.readouterr().out
    assert main(["show", root, "alpha-e1"]) == 0          # on the cutoff day: not after it
    assert "question dated 2023-12-31: on or before the model's knowledge cutoff 2023-12-31" in capsys.readouterr().out
    assert main(["show", root, "beta-e4"]) == 0
    assert "question dated 2024-03-01; cutoff unknown" in capsys.readouterr().out
