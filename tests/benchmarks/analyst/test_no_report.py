"""An episode without a report is attempted again (a fresh run with its own seed), and one that
never writes a report is scored 0, with its reason, instead of leaving the averages."""

from __future__ import annotations

import json

import pytest

from engine.benchmarks import get_benchmark
from engine.benchmarks.analyst.config import AnalystAgentConfig
from tests.benchmarks.analyst.test_analyst_episode import REPORT, TASKS, run
from tests.helpers import metrics_of

BENCH = get_benchmark("analyst")


def test_agent_without_report_gets_a_fresh_attempt(tmp_path):
    from engine.benchmarks.analyst import attempt_seed

    seeds = []

    def responder(messages, req):
        seeds.append(req["seed"])
        if req["seed"] == 0:                     # attempt 1 explores until the step cap
            return '{"tool": "list_files"}'
        turn = sum(m["role"] == "assistant" for m in messages)
        assert turn < 2, "attempt 2 starts from a fresh conversation"
        return json.dumps([{"tool": "write_report", "content": REPORT}, {"tool": "finish"}][turn])

    agent = AnalystAgentConfig(mode="agentic", max_steps=2, report_attempts=3)
    (res,), reqs = run(["crashes-2023"], agent, responder, tmp_path)
    ep = res["episode"]
    assert ep["status"] == "ok", ep["error"]
    assert ep["output"] == REPORT and ep["finish_reason"] == "finish" and ep["no_report_reason"] == ""
    assert ep["attempts"] == 2 and ep["steps"] == 4 and len(reqs) == 4
    assert seeds == [0, 0, attempt_seed(0, 2), attempt_seed(0, 2)] and attempt_seed(0, 2) != 0
    turns = [s["turn"] for s in res["steps"]]
    assert turns == ["action", "action", "attempt", "action", "action"]
    marker = res["steps"][2]
    assert json.loads(marker["parsed_action"]) == {"attempt": 2, "previous": "step_cap"}
    assert "no report after attempt 1 (step_cap)" in marker["result"]
    assert json.loads(ep["generation_info"])["attempt_ends"] == ["step_cap", "finish"]


def test_vanilla_empty_report_is_attempted_again(tmp_path):
    from engine.benchmarks.analyst import attempt_seed

    answers = iter(["", REPORT])
    agent = AnalystAgentConfig(context_tokens=32000)
    (res,), reqs = run(["crashes-2023"], agent, lambda m, r: next(answers), tmp_path)
    ep = res["episode"]
    assert ep["output"] == REPORT and ep["attempts"] == 2 and ep["finish_reason"] == "finish"
    assert [r["seed"] for r in reqs] == [0, attempt_seed(0, 2)]


def test_no_report_after_all_attempts_scores_the_floor(tmp_path, embedder):
    agent = AnalystAgentConfig(mode="agentic", max_steps=2, report_attempts=2)
    (res,), reqs = run(["unemployment-brief"], agent, lambda m, r: '{"tool": "list_files"}', tmp_path)
    failed = res["episode"]
    assert failed["status"] == "ok" and failed["output"] == "" and len(reqs) == 4
    assert failed["attempts"] == 2 and failed["no_report_reason"] == "no report after 2 attempt(s): step_cap, step_cap"
    assert BENCH.judge_requests(failed, {}) == []            # nothing to judge, but it is not dropped

    # a second episode of the same task wrote a perfect report
    task = TASKS["unemployment-brief"]
    good_report = task.reference
    good = dict(failed, episode_id="good", output=good_report, report_tokens=100, attempts=1, no_report_reason="",
                finish_reason="finish")
    j = {f"criterion:{task.checklist_id}:{i:02d}": "5" for i in range(len(task.checklist))}
    j |= {"claims:0": json.dumps({"Illinois had the lowest rate in 2024": "Illinois (3.2%)"}), "claim:0:00": "SUPPORTED"}
    good["judgements"] = j
    failed["judgements"] = {}
    m = metrics_of(BENCH, [failed, good])
    # no report scores the floor of the checklist scale, 20 % (the worst written report scores no
    # lower), not 0 %: (20 + 100) / 2
    assert (m["checklist_pct"].value, m["checklist_pct"].n) == (60.0, 2)
    assert (m["visual_coverage_pct"].value, m["visual_coverage_pct"].n) == (50.0, 2)  # 0 and 100
    # hallucination is a rate over claims that exist: the missing report is counted beside it
    assert (m["hallucination_pct"].value, m["hallucination_pct"].n) == (0.0, 1)
    assert m["no_report"].value == 1.0 and m["report_written"].value == 0.5
    assert m["report_attempts"].value == pytest.approx(1.5)
    (vals_failed, vals_good) = BENCH.episode_values([failed, good])
    assert vals_failed["checklist_pct"] == 20.0 and vals_failed["visual_coverage_pct"] == 0.0
    assert "hallucination_pct" not in vals_failed
