"""Issue 31, finding 8: an interval says how sure a number is, so a small sample never reads as
certain. Through the real driver (Hydra config, Ray, episode workers, the judge stage, Parquet)
against scripted servers, two run dirs of livenews (its sample has 12 questions):

* 12 questions, every answer WRONG: accuracy 0 of 12, whose exact 95% interval is [0, 0.265]
  (1 - 0.025^(1/12) = 0.2646), where the task bootstrap printed [0.000, 0.000];
* 2 questions, both RIGHT: 2 of 2 is [0.158, 1] (0.025^(1/2) = 0.1581), not [1, 1];
* both dirs in one report: compared on the 2 tasks they share, 0 of 2 is [0, 0.842]
  (1 - 0.025^(1/2)), and their paired difference of 1 on 2 tasks (p = 0.5) has no interval.

Each value is asserted in every output that prints it: ``dateline metrics``, ``dateline tables``
(percent), the report (Markdown and HTML), the leaderboard, the MLflow export read back, and the
Python API's metrics table.
"""

from __future__ import annotations

import re

import pytest

from tests.e2e.test_what_a_number_means import FINISH, grader, judged, live_cfg, sweep
from tests.everywhere import cell_lines, rows_with, seen
from tests.fake_openai import FakeOpenAI

pytestmark = pytest.mark.ray

WRONG_HI = 1 - 0.025 ** (1 / 12)        # 0 of 12
RIGHT_LO = 0.025 ** (1 / 2)             # 2 of 2
WRONG2_HI = 1 - 0.025 ** (1 / 2)        # 0 of 2


def _accuracy(api_rows: list[dict], scope: str = "all") -> dict:
    (r,) = [r for r in api_rows if r["metric"] == "accuracy" and r["scope"] == scope]
    return r


def _stored_exactly(s, value: float, n: int, lo, hi) -> None:
    """The API's accuracy row and the export read back carry the value, its n and its exact
    interval (``lo`` / ``hi``: a number, or a ``pytest.approx`` for an irrational bound)."""
    acc = _accuracy(s.api)
    assert (acc["value"], acc["n"], acc["interval"]) == (value, n, "exact")
    assert acc["lo"] == lo and acc["hi"] == hi
    (run,) = s.mlflow
    m = run["metrics"]
    assert m["accuracy"] == value and m["accuracy.lo"] == lo and m["accuracy.hi"] == hi
    assert run["tags"]["accuracy.interval"] == "exact"


def test_small_samples_get_exact_intervals_everywhere(tmp_path):
    def model(messages, req):
        # the 2-question run is told "up to 3 searches" (agent.max_searches=3): it answers right
        right = "up to 3 searches" in messages[0]["content"]
        return FINISH.format("RIGHT" if right else "WRONG")

    wrong_dir, right_dir = tmp_path / "wrong12", tmp_path / "right2"
    with FakeOpenAI(model) as m, FakeOpenAI(grader) as j:
        sweep([live_cfg(m.base_url, wrong_dir, "benchmark.limit=12", *judged(j.base_url)),
               live_cfg(m.base_url, right_dir, "benchmark.limit=2", "agent.max_searches=3", *judged(j.base_url))])
    assert round(WRONG_HI, 4) == 0.2646 and round(RIGHT_LO, 4) == 0.1581

    # 0 of 12
    w = seen(wrong_dir, "livenews", tmp_path / "out-w", show=False)
    assert w.codes == {"metrics": 0, "tables": 0, "export": 0}, w.codes
    assert rows_with(w.report_md, "accuracy", "0.000 [0.000, 0.265] (n=12, exact)"), w.report_md
    assert "accuracy | 0.000 [0.000, 0.265] (n=12, exact)" in cell_lines(w.report_html)
    assert rows_with(w.metrics, "accuracy", "[0.000, 0.265] exact", "12"), w.metrics
    assert "| 0.0 [0.0, 26.5] |" in w.tables, w.tables
    _stored_exactly(w, 0.0, 12, 0.0, pytest.approx(WRONG_HI, abs=1e-9))
    # no proportion reads as certain; a count every episode had the same of (0 visits on each of
    # 12 tasks) is a count, whose task bootstrap is [0, 0] (issue 46: its kind decides, not its values)
    from engine.benchmarks import get_benchmark
    from engine.scoring.kinds import PROPORTION, kind_of

    bench = get_benchmark("livenews")
    shares = [m for m in bench.metric_order if kind_of(bench, m) == PROPORTION]
    for name, text in w.texts().items():
        for ln in text.splitlines():
            if "[0.000, 0.000]" in ln:
                assert not any(re.search(rf"(^|[|(\s]){re.escape(m)}([|)\s]|$)", ln) for m in shares), (name, ln)

    # 2 of 2, then both dirs in one report (the leaderboard compares them on their 2 shared tasks)
    r = seen([right_dir, wrong_dir], "livenews", tmp_path / "out-r", show=False)
    assert r.codes == {"metrics": 0, "tables": 0, "export": 0}, r.codes
    right_cell = "1 [0.158, 1] (n=2, exact)"
    assert rows_with(r.metrics, "accuracy", "[0.158, 1.000] exact", "2"), r.metrics
    assert "| 100.0 [15.8, 100.0] |" in r.tables, r.tables
    _stored_exactly(r, 1.0, 2, pytest.approx(RIGHT_LO, abs=1e-9), 1.0)
    # the report: each dir's own block, the cross-dir block and its leaderboard
    assert rows_with(r.report_md, "accuracy", right_cell), r.report_md
    assert rows_with(r.report_md, "accuracy", "0.000 [0.000, 0.265] (n=12, exact)")
    assert any(ln.startswith("accuracy | ") and right_cell in ln for ln in cell_lines(r.report_html))
    wrong2 = f"0.000 [0.000, {WRONG2_HI:.3f}] (n=2, exact)"
    assert wrong2 == "0.000 [0.000, 0.842] (n=2, exact)"
    for board in (r.leaderboard_md, r.report_md):
        assert rows_with(board, "#1", right_cell) and rows_with(board, "#2", wrong2), board
    assert any(right_cell in ln and "#1" in ln for ln in cell_lines(r.report_html))
    # the paired difference of 1 on 2 tasks: p = 0.5 (2 of 4 sign patterns), and no interval
    paired = [ln for ln in r.report_md.splitlines() if ln.startswith("| accuracy |") and "| 0.5 |" in ln]
    assert paired and all("(n=2; too few tasks for an interval)" in ln for ln in paired), r.report_md
    # no share or difference reads as certain; one turn in every episode is a count (its bootstrap is [1, 1])
    assert not [ln for ln in r.report_md.splitlines() if ("[1, 1]" in ln or "[-1, -1]" in ln)
                and not ln.startswith("| turns_mean |")]
    assert any("(n=2; too few tasks for an interval)" in ln and "| 0.5 |" in ln for ln in cell_lines(r.report_html))
