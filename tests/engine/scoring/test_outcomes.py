"""engine/scoring/outcomes.py on hand-built rows: what a change of plan leaves visible (issue 31, F9 and
F11). The driver-level tests are in tests/e2e/test_one_number_f9.py."""

from __future__ import annotations

import pytest

from engine.benchmarks.livenews import BENCHMARK as LIVE
from engine.scoring import outcomes
from engine.scoring.outcomes import Counts, Planned
from tests.factories import episode_row


def live(i: int, grade: str | None, judge: str = "J", **kw):
    """Episode q<i> seen through ``judge``: graded ``grade`` (None: that judge never saw it)."""
    return episode_row("livenews", episode_id=f"e{i}", task_id=f"q{i}", output="answer", judge=judge,
                       judgements={} if grade is None else {"grade": grade}, evaluation={"judge_probes": False}, **kw)


def plan(n: int) -> list[Planned]:
    return [Planned(f"e{i}", f"q{i}") for i in range(n)]


def test_stored_episodes_outside_the_plan_are_counted_not_scored():
    rows = [live(i, "CORRECT" if i % 2 == 0 else "INCORRECT", judge="") for i in range(4)]
    c = outcomes.count(rows, plan(1))
    assert (c.n_planned, c.n_scored, c.incomplete, c.n_outside_plan, c.n_judged) == (1, 1, False, 3, None)
    assert outcomes.count(rows, None).n_outside_plan == 0        # no plan recorded: the stored rows are the plan
    assert outcomes.outside_note(3).startswith("3 stored episodes are outside this plan")
    assert outcomes.outside_note(1).startswith("1 stored episode is outside this plan")
    assert outcomes.outside_note(0) == ""
    # the column survives a metrics row; old rows (no column) have none
    assert Counts.of_row(c.columns()).n_outside_plan == 3 and Counts.of_row({"n": 4}).n_outside_plan == 0


def test_an_unseen_episode_is_not_ungraded():
    rows = [live(0, "CORRECT"), live(1, "CORRECT"), live(2, "INCORRECT"), live(3, None), live(4, None),
            live(5, None, finish_reason="budget_exceeded")]       # a failed answer needs no judgement
    outcomes.mark_unseen(LIVE, rows)
    assert [r["unseen"] for r in rows] == [False, False, False, True, True, False]
    mrows, c = outcomes.metric_rows(LIVE, rows, plan(6), "as_wrong", judged=True)
    got = {m.metric: (m.value, m.n) for m in mrows}
    assert got["accuracy"] == (pytest.approx(2 / 4), 4) and got["ungraded"] == (0.0, 4)
    assert got["failed"] == (pytest.approx(1 / 6), 6)               # needs no judge: every episode
    assert (c.n_judged, c.n_unseen, c.partially_judged) == (4, 2, True)
    assert outcomes.n_cell(c.columns()) == "6/6 PARTIALLY JUDGED (4 judged)"
    note = outcomes.judged_note("J", c)
    assert note.startswith("PARTIALLY JUDGED: judge J judged 4 of 6 planned episodes (2 scored ones it never saw")
    assert note.endswith("(n=4).")
    # an error in the plan: as_wrong counts it (n = planned - unseen), exclude does not (n = judged)
    err = [*rows[:5], episode_row("livenews", episode_id="e5", task_id="q5", status="error", judge="J",
                                  judgements={}, evaluation={})]
    outcomes.mark_unseen(LIVE, err)
    c = outcomes.count(err, plan(6))
    assert (c.n_scored, c.n_judged) == (5, 3)
    assert outcomes.judged_note("J", c, "as_wrong").endswith("(n=4).")
    assert outcomes.judged_note("J", c, "exclude").endswith("(n=3).")


def test_a_judge_that_saw_everything_and_no_judge_say_nothing():
    rows = [live(i, "CORRECT") for i in range(3)]
    outcomes.mark_unseen(LIVE, rows)
    c = outcomes.count(rows, plan(3))
    assert (c.n_judged, c.partially_judged, outcomes.judged_note("J", c)) == (3, False, "")
    assert outcomes.count_notes({**c.columns(), "judge": "J"}) == []
    bare = [live(i, None, judge="") for i in range(3)]      # an unjudged view: nothing is "unseen"
    outcomes.mark_unseen(LIVE, bare)
    assert not any(r["unseen"] for r in bare) and outcomes.count(bare, plan(3)).n_judged is None
