"""The knowledge-cutoff split of the metrics table (engine/scoring/cutoff.py) on hand-made stores:
what a number after the cutoff is over (the plan's dated episodes, failures by the policy), where
a date comes from, and that a changed cutoff is read at once (the cached table is not reused)."""

from __future__ import annotations

import pytest

from engine.benchmarks.livenews import BENCHMARK as LIVE
from engine.benchmarks.newsagent import BENCHMARK as NEWS
from engine.scoring import cutoff
from engine.scoring.metric_table import metric_table, refresh
from engine.scoring.views import reduce_store
from engine.storage import EpisodeStore
from tests.factories import episode_row

# q0 and q1 on or before the cutoff, q2..q4 after it
DATES = ["2023-12-01", "2024-01-01", "2024-01-02", "2024-02-01", "2024-03-01"]
CUT = "2024-01-01"
JUDGE = {"judge": "grader:1", "judge_model": "grader", "judge_kind": "openai_compatible",
         "judge_prompt": LIVE.judge_prompt_version, "key": "grade", "ok": True, "attempts": 1, "error": "",
         "tokens_in": 1, "tokens_out": 1, "latency_s": 0.1, "config_hash": "c"}


def _store(tmp_path, dates=DATES, knowledge_cutoff=CUT, judged=True):
    """q0 correct, q1 wrong, q2 an error (its row has no date), q3 never ran (no row at all), q4
    correct (graded by a judge unless ``judged`` is False); the plan records every date unless
    ``dates`` is None."""
    store = EpisodeStore(tmp_path, LIVE.episode_fields)
    store.write_batch([
        episode_row("livenews", episode_id="e0", task_id="q0", config_hash="c", cutoff=DATES[0]),
        episode_row("livenews", episode_id="e1", task_id="q1", config_hash="c", cutoff=DATES[1]),
        episode_row("livenews", episode_id="e2", task_id="q2", config_hash="c", cutoff=None, status="error",
                    finish_reason="error", error="GenerationError: boom"),
        episode_row("livenews", episode_id="e4", task_id="q4", config_hash="c", cutoff=DATES[4])], [])
    store.write_plan("c", [(f"e{i}", f"q{i}", 0, "") for i in range(5)], "ts", "as_wrong", "{}", dates,
                     knowledge_cutoff)
    if judged:
        store.write_judgements([dict(JUDGE, episode_id=e, value=v, raw_output=raw) for e, v, raw in
                                (("e0", "CORRECT", "A"), ("e1", "INCORRECT", "B"), ("e4", "CORRECT", "A"))])
    return store


def _rows(store, **kw):
    return {r["metric"]: r for r in reduce_store(store, LIVE, **kw) if r["judge"]}


@pytest.mark.slow
def test_failures_after_the_cutoff_count_by_the_policy(tmp_path):
    """After 2024-01-01: q2 (an error), q3 (never ran: its date is the plan's) and q4 (correct):
    1 of 3 under as_wrong, exact [0.008, 0.906]; 1 of 1 when failures are excluded. Two questions
    are on or before it (q1 is dated the cutoff day itself)."""
    store = _store(tmp_path)
    m = _rows(store)
    assert (m["accuracy"]["value"], m["accuracy"]["n"]) == (pytest.approx(2 / 5), 5)
    after = m["accuracy.after_cutoff"]
    assert (after["value"], after["n"], after["interval"]) == (pytest.approx(1 / 3), 3, "exact")
    assert (round(after["lo"], 3), round(after["hi"], 3)) == (0.008, 0.906)
    assert m["failed.after_cutoff"]["value"] == pytest.approx(2 / 3)
    assert (m[cutoff.AFTER]["value"], m[cutoff.AFTER]["n"], m[cutoff.BEFORE]["value"]) == (3, 3, 2)
    assert {r["knowledge_cutoff"] for r in m.values()} == {CUT}
    ex = _rows(store, score_failures="exclude")["accuracy.after_cutoff"]
    assert (ex["value"], ex["n"]) == (1.0, 1)
    # with no judge, no judge-based number after the cutoff either (never a 0 from "nothing graded")
    unjudged = {r["metric"] for r in reduce_store(_store(tmp_path / "unjudged", judged=False), LIVE)}
    assert "answer_contains_gold.after_cutoff" in unjudged and "accuracy.after_cutoff" not in unjudged


def test_without_recorded_dates_the_rows_date_the_episodes(tmp_path):
    """A plan written before dates were recorded: each episode is dated by its row's ``cutoff``; an
    episode with no dated row (q2's error, q3 never ran) is on neither side."""
    m = _rows(_store(tmp_path, dates=None))
    assert (m["accuracy.after_cutoff"]["value"], m["accuracy.after_cutoff"]["n"]) == (1.0, 1)
    assert (m[cutoff.AFTER]["value"], m[cutoff.BEFORE]["value"]) == (1, 2)


def test_no_split_without_a_cutoff_or_for_undated_questions(tmp_path):
    m = _rows(_store(tmp_path / "live", knowledge_cutoff=None))
    assert not [k for k in m if cutoff.is_split(k)] and {r["knowledge_cutoff"] for r in m.values()} == {None}
    assert cutoff.cutoff_note(list(m.values())).startswith("cutoff unknown")
    news = EpisodeStore(tmp_path / "news", NEWS.episode_fields)
    news.write_batch([episode_row("newsagent", episode_id="n0", config_hash="n")], [])
    news.write_plan("n", [("n0", "t0", 0, "")], "ts", "as_wrong", "{}", None, CUT)
    assert not [r for r in reduce_store(news, NEWS) if cutoff.is_split(r["metric"])]


@pytest.mark.slow
def test_a_changed_cutoff_is_read_at_once(tmp_path):
    """The cached metrics table (``dateline run`` writes it) is not reused once a plan with another
    cutoff is stored: every reader splits at the new one."""
    store = _store(tmp_path)
    refresh(store)
    assert {r["knowledge_cutoff"] for r in metric_table(store)} == {CUT}
    store.write_plan("c", [(f"e{i}", f"q{i}", 0, "") for i in range(5)], "ts", "as_wrong", "{}", DATES, "2024-02-15")
    rows = {r["metric"]: r for r in metric_table(store) if r["judge"] and r["scope"] == "all"}
    assert rows[cutoff.AFTER]["value"] == 1           # q4 alone now
    assert rows["accuracy.after_cutoff"]["value"] == 1.0
    assert {r["knowledge_cutoff"] for r in rows.values()} == {"2024-02-15"}
