"""Issue 31, finding 3: a configuration with nothing scored stays in every view that compares its
siblings, at its failure-policy value, marked; a comparison with no common task falls back to
each configuration's own plan and says so. Issue 46, finding 5: a configuration that finished
nothing is left out of the common-task set instead of emptying it, and own-plan values are never
exported as ``common``.

A sweep of ``agent.max_searches=1,2,3`` on 6 questions, judged by J. The model answers RIGHT on
even questions and WRONG on odd ones; every call of the 3-search point fails (500). By hand, J's
block: h1 and h2 accuracy 3/6 = 0.500 (n=6); h3 0/6 = 0.000 (n=6), INCOMPLETE, 0 of 6 scored (6
errors). h1 and h2 finished all 6 tasks: they are compared on those 6, and h3 is left out of the
common set, said in one line (before issue 46 no task was common to all three, and every
comparison fell back to each configuration's own plan). The curve has the points (1, 0.5), (2,
0.5) and (3, 0); per task h1 - h3 is [1, 0, 1, 0, 1, 0]: mean 0.5, and three differences of 1 flip
signs in 2 of 8 ways, so p = 0.25; nothing says "name a judge".
"""

from __future__ import annotations

import pytest

from tests.e2e.test_what_a_number_means import FINISH, grader, judged, live_cfg, questions, sweep, which
from tests.everywhere import cell_lines, rows_with, seen
from tests.fake_openai import FakeOpenAI

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]


def test_a_configuration_with_nothing_scored_stays_in_its_judges_tables(tmp_path):
    qs = questions(6)

    def model(messages, req):
        if "up to 3 searches" in messages[0]["content"]:
            return 500, "engine failed"
        return FINISH.format("RIGHT" if which(messages, qs) % 2 == 0 else "WRONG")

    with FakeOpenAI(model) as m, FakeOpenAI(grader) as j:
        h1, h2, h3 = (i["config_hash"] for i in sweep([live_cfg(m.base_url, tmp_path, f"agent.max_searches={b}",
                                                                "benchmark.limit=6", *judged(j.base_url))
                                                       for b in (1, 2, 3)]))
    s = seen(tmp_path, "livenews", tmp_path / "out", show=False)
    judge = next(r["judge"] for r in s.api if r["judge"])
    assert {r["judge"] for r in s.api} == {judge}                    # no block without a judge
    for h, value in ((h1, 0.5), (h2, 0.5), (h3, 0.0)):
        for scope in ("all", "common"):
            (acc,) = [r for r in s.api if r["config_hash"] == h and r["metric"] == "accuracy" and r["scope"] == scope]
            assert (acc["value"], acc["n"], acc["n_planned"]) == (value, 6, 6), (h, scope, acc)
    (h3_acc,) = [r for r in s.api if r["config_hash"] == h3 and r["metric"] == "accuracy" and r["scope"] == "all"]
    assert (h3_acc["n_scored"], h3_acc["n_error"], h3_acc["incomplete"]) == (0, 6, True)
    note = ("All 2 configurations that finished a task are compared on the same 6 task(s); none was dropped. "
            "1 of the 3 finished no task: left out of the common tasks (shown over them with nothing scored).")
    assert rows_with(s.metrics, judge, "accuracy", "0.500", "6") and rows_with(s.metrics, judge, "accuracy", "0.000", "6")
    assert note in s.tables and "| 50.0 | 50.0 | 0.0 |" in s.tables.split("table3")[1], s.tables
    assert "No task was finished by every one" not in s.tables + s.report_md
    for text in (s.metrics, s.tables, s.report_md, s.report_html):
        assert "name a judge" not in text.lower()
    md = s.report_md
    assert note in md
    assert rows_with(md, "accuracy", "0.500", "0.000") or any(
        "accuracy" in ln and "0.500" in ln and "0.000" in ln for ln in md.splitlines()), md[:5000]
    assert "0/6 INCOMPLETE" in md or "0/6" in md
    # the paired test over the 6 tasks: mean 0.5, p = 0.25
    paired = [ln for ln in md.splitlines() if "accuracy" in ln and ("0.25" in ln or "0.250" in ln)]
    assert paired and any("0.5" in ln for ln in paired), md[:6000]
    html = cell_lines(s.report_html)
    assert any(note in ln for ln in html)
    # the curve's caption names the intervals it draws: both points' are exact (issue 46: it said bootstrap)
    assert "accuracy vs max_searches (95% intervals: exact (Clopper-Pearson))" in md, md[:6000]
    accs = {r["params"]["config_hash"]: (r["metrics"]["accuracy"], r["metrics"]["common.accuracy"]) for r in s.mlflow}
    assert accs == {h1: (0.5, 0.5), h2: (0.5, 0.5), h3: (0.0, 0.0)}       # a comparison on 6 common tasks


def test_command_1_shape_the_baseline_keeps_its_numbers_when_the_model_finished_nothing(tmp_path):
    """README command 1's shape: the rule-based baseline and a model configuration in one newsagent
    sweep; the model finished nothing (here its endpoint is dead). The report's comparison shows the
    baseline over its own plan, with the value ``dateline metrics`` gives (it hid every number of the
    22 good baseline episodes: "computed on the 0 task(s) ...")."""
    import socket

    from ray_jobs.config.compose import compose

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    common = ["benchmark=newsagent", "benchmark.limit=3", f"run.dir={tmp_path}", "run.progress=false",
              "cluster.num_cpus=4", "run.fail_on_error=false"]
    sweep([compose([*common, "agent=newsagent_rule_based"]),
           compose([*common, "agent=newsagent", "model=openai_compatible", f"model.base_url={dead}", "model.name=writer",
                    "model.api_key_env=", "model.max_retries=0", "model.max_retries_per_episode=0"])])
    s = seen(tmp_path, "newsagent", tmp_path / "out", show=False)
    (f1,) = [r for r in s.api if r["metric"] == "search_f1" and r["scope"] == "all" and r["n_scored"] == 3]
    assert f1["n"] == 3 and f1["value"] > 0
    (common_f1,) = [r for r in s.api if r["metric"] == "search_f1" and r["scope"] == "common"
                    and r["config_hash"] == f1["config_hash"]]
    assert (common_f1["value"], common_f1["n"]) == (f1["value"], 3)
    assert "No task was finished by every one of the 2 compared configurations (1 finished none)" in s.report_md
    want = f"{f1['value']:.3f}"
    assert any(ln.startswith("| search_f1 |") and want in ln for ln in s.report_md.splitlines()), s.report_md[:5000]
    assert rows_with(s.metrics, "search_f1", want, "3")
    # nothing to compare on: the exports hold each configuration over its own plan, unprefixed, and
    # no "common." value (issue 46: own-plan values were exported as common.*)
    assert s.mlflow and all(not k.startswith("common.") for r in s.mlflow for k in r["metrics"]), s.mlflow
    (base,) = [r for r in s.mlflow if r["params"]["config_hash"] == f1["config_hash"]]
    assert base["metrics"]["search_f1"] == pytest.approx(f1["value"])
