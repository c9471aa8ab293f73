"""The one presentation of a raced run (engine/scoring/race_view.py) and a judge's checks
(engine/scoring/judge_checks.py), on hand-made records; the driver tests are
tests/e2e/test_raced_run_everywhere.py and tests/e2e/test_judge_checks_everywhere.py."""

from __future__ import annotations

import math

import pytest

from engine.benchmarks.livenews import BENCHMARK as LIVE
from engine.scoring import judge_checks
from engine.scoring.race_view import RaceView, split_stopped, stop_counts
from ray_jobs.config.compose import compose
from ray_jobs.run.adaptive import design_of, wording

RECORD = {"metric": "answer_contains_gold", "screening": False, "n_tasks": 12, "wording": "w",
          "configurations": {
              "a": {"state": "complete", "stopped_at": None, "interval": [0.8, 1.0], "tasks_admitted": 12},
              "b": {"state": "stopped_early", "stopped_at": 6, "interval": [0.0, 0.25], "tasks_admitted": 6},
              "c": {"state": "complete", "stopped_at": 12, "interval": [0.1, 0.6], "tasks_admitted": 12}}}


def _row(h: str, metric: str, value: float) -> dict:
    return {"config_hash": h, "model": h, "metric": metric, "value": value, "n": 6, "lo": 0.1, "hi": 0.2,
            "interval": "exact", "n_planned": 12, "n_scored": 6, "n_stopped_early": 6}


def test_one_count_of_stops_and_the_wording_says_it():
    assert stop_counts(RECORD["configurations"]) == (1, 1, 3)
    assert RaceView.of(RECORD).counts() == (1, 1, 3)
    design = design_of(compose(["benchmark=livenews", "agent=livenews", "sweep=race"]))
    text = wording(design, 1, 3, 3, 12, 1)
    assert text.startswith("1 of 3 configurations were stopped early")
    assert text.endswith("1 more was decided against after every task ran (its mean is over the full set).")


def test_a_stopped_configuration_has_no_mean_and_its_decision_interval_on_the_raced_metric():
    race = RaceView.of(RECORD)
    raced = race.row(_row("b", "answer_contains_gold", 0.0))
    assert math.isnan(raced["value"]) and (raced["lo"], raced["hi"], raced["interval"]) == (0.0, 0.25, "anytime_valid")
    other = race.row(_row("b", "turns_mean", 1.0))
    assert math.isnan(other["value"]) and other["interval"] == "stopped_early" and other["race"] == "STOPPED EARLY"
    assert race.row(_row("b", "scored_share", 0.5))["value"] == 0.5              # a count of what ran
    assert race.row(_row("c", "answer_contains_gold", 0.3))["value"] == 0.3      # complete: its exact mean
    kept, extra = split_stopped([_row("a", "answer_contains_gold", 1.0), race.row(_row("b", "answer_contains_gold", 0.0)),
                                 race.row(_row("b", "scored_share", 0.5))], ["answer_contains_gold"])
    assert [r["config_hash"] for r in kept] == ["a"]
    assert "STOPPED EARLY: [0.000, 0.250] anytime-valid confidence sequence" in extra["stopped by the race"]


def test_halving_shows_its_mean_marked_screening_with_no_interval():
    race = RaceView.of(RECORD | {"screening": True})
    r = race.row(_row("b", "answer_contains_gold", 0.333))
    assert r["value"] == 0.333 and math.isnan(r["lo"]) and r["interval"] == "screening" and r["race"] == "SCREENING"


def test_judge_check_minimums_come_from_the_file_and_a_bad_entry_names_it(tmp_path, monkeypatch):
    assert judge_checks.minimums(LIVE) == {"judge_probe_gold_ok": 0.9, "judge_probe_decoy_ok": 0.9}
    f = tmp_path / "checks.yaml"
    monkeypatch.setenv("DATELINE_JUDGE_CHECKS", str(f))
    f.write_text("judge_checks:\n  livenews:\n    judge_probe_gold_ok: 0.5\n")
    assert judge_checks.minimums(LIVE)["judge_probe_gold_ok"] == 0.5
    f.write_text("judge_checks:\n  livenews:\n    judge_probe_gold_ok: 1.5\n")
    with pytest.raises(ValueError, match=r"checks.yaml: judge_checks.livenews.judge_probe_gold_ok: 1.5 is not a share"):
        judge_checks.minimums(LIVE)
    f.write_text("judge_checks:\n  livenews:\n    accuracy: 0.5\n")
    with pytest.raises(ValueError, match="accuracy: not a check metric of livenews"):
        judge_checks.minimums(LIVE)


def test_a_judge_fails_on_its_pooled_probes_and_marks_only_its_judge_based_rows():
    rows = [{"judge": "j", "config_hash": h, "metric": "judge_probe_gold_ok", "value": v, "n": n, "scope": "all"}
            for h, v, n in (("x", 1.0, 10), ("y", 0.0, 2))]              # pooled 10/12 = 0.833 < 0.9
    rows += [{"judge": "j", "config_hash": "x", "metric": "accuracy", "value": 1.0, "n": 10, "scope": "all"},
             {"judge": "j", "config_hash": "x", "metric": "tokens_in_mean", "value": 5.0, "n": 10, "scope": "all"}]
    why = judge_checks.failures(LIVE, rows)["j"]
    assert why.startswith("JUDGE FAILED ITS CHECKS: judge_probe_gold_ok 0.833 over 12 probes, below its minimum 0.9")
    marked = judge_checks.mark_rows(LIVE, rows)
    assert [bool(r.get("judge_check")) for r in marked] == [True, True, True, False]


def test_a_metric_compared_on_no_common_task_is_its_own_plan_not_common():
    """Issue 46, finding 5: a row of scope common whose metric no task has a value of from every
    configuration is over its own plan (metric_note), so exports never label it ``common.*``."""
    from engine.scoring.outcomes import COMMON, common_note, metric_note, own_plan

    note = " ".join([common_note(4, 0, 2), metric_note("visits_mean", set(), {"t1"})])
    assert own_plan({"scope": COMMON, "metric": "visits_mean", "note": note})
    assert not own_plan({"scope": COMMON, "metric": "mean", "note": note})       # not another metric's note
    assert not own_plan({"scope": COMMON, "metric": "accuracy", "note": note})
    assert own_plan({"scope": COMMON, "metric": "accuracy", "note": common_note(0, 3, 2, 1)})
