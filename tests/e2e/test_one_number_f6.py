"""Issue 31, finding 6: a leaderboard per judge and metric, with ties, marks and every configuration.

Two run dirs, each a sweep of ``agent.max_searches=1,3,5`` on 3 questions; every configuration
answers RIGHT on q0 only, so each is at 1/3 = 0.333 (n=3). Dir ``a`` is judged by J and has a
fourth configuration whose endpoint is dead (0/3 under as_wrong, INCOMPLETE); dir ``b`` is judged
by the model under test (``judge=self``). By hand: J's board ranks the three equal configurations
``#1=`` and the dead one ``#4`` with its mark; the self-judged board is its own table, headed
SELF-JUDGED, its three entries ``#1=`` with the mark on each row. Before the fix one board ran
``#1`` to ``#6`` across both judges, without marks, and the dead configuration was absent.
"""

from __future__ import annotations

import socket

import pytest

from tests.e2e.test_what_a_number_means import FINISH, grader, judged, live_cfg, questions, sweep, which
from tests.everywhere import seen
from tests.fake_openai import FakeOpenAI

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]


def test_leaderboards_are_per_judge_with_ties_marks_and_every_configuration(tmp_path):
    qs = questions(3)

    def model(messages, req):
        if "Gold target:" in messages[0]["content"]:          # judge=self: the model grades
            return grader(messages, req)
        return FINISH.format("RIGHT" if which(messages, qs) == 0 else "WRONG")

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    a, b = tmp_path / "a", tmp_path / "b"
    with FakeOpenAI(model) as m, FakeOpenAI(grader) as j:
        sweep([live_cfg(m.base_url, a, f"agent.max_searches={n}", "benchmark.limit=3", *judged(j.base_url))
               for n in (1, 3, 5)]
              + [live_cfg(dead, a, "agent.max_searches=7", "benchmark.limit=3", "model.max_retries=0",
                          "model.max_retries_per_episode=0", "run.fail_on_error=false", *judged(j.base_url))])
        sweep([live_cfg(m.base_url, b, f"agent.max_searches={n}", "benchmark.limit=3", "judge=self")
               for n in (1, 3, 5)])
    s = seen([a, b], "livenews", tmp_path / "out", export=False, show=False)
    board = s.leaderboard_md
    sections = board.split("## Leaderboard by ")[1:]
    acc = [x for x in sections if x.startswith("accuracy")]
    assert len(acc) == 2, board                                      # one per judge, never across judges
    (judged_board,) = [x for x in acc if "SELF-JUDGED" not in x.splitlines()[0]]
    (self_board,) = [x for x in acc if "SELF-JUDGED" in x.splitlines()[0]]
    ranks = [ln.split("|")[1].strip() for ln in judged_board.splitlines() if ln.startswith("| #")]
    assert ranks == ["#1=", "#1=", "#1=", "#4"], judged_board
    (last,) = [ln for ln in judged_board.splitlines() if ln.startswith("| #4")]
    assert "0.000" in last and "INCOMPLETE" in last and "0/3" in last
    assert all("0.333" in ln for ln in judged_board.splitlines() if ln.startswith("| #1="))
    rows = [ln for ln in self_board.splitlines() if ln.startswith("| #")]
    assert len(rows) == 3 and all(ln.startswith("| #1=") and "SELF-JUDGED" in ln for ln in rows), self_board
    assert "leader" in judged_board and "share a rank" in judged_board
    # the report's own section carries the same boards
    assert s.report_md.count("Leaderboard by accuracy") == 2
