"""Issue 31, finding 10: the MLflow export carries the value, scope, n and marks every other output
shows, and exporting again updates the same runs.

A sweep of three configurations on livenews, judged: ``max_searches=1`` (6 questions: 3 of 6
right), ``max_searches=3`` (6 questions, the call for q2 fails: 2 of 6, INCOMPLETE) and
``max_searches=5`` (4 questions: 2 of 4). The tasks all three finished are q0, q1 and q3 (0 right,
1 and 3 wrong). Read back from MLflow: h1 ``accuracy`` 0.5 with ``accuracy.n`` 6 (its plan) and
``common.accuracy`` 1/3 with ``common.accuracy.n`` 3; h3's ``scored_share`` 5/6 over its whole plan,
the tag ``dateline.incomplete`` "true" and INCOMPLETE in its name. A second export leaves 3 runs.
Before the fix ``accuracy`` was the common-scope 0.333, ``scored_share`` 1.0 for the INCOMPLETE
configuration, the marks were parameters only, and a second export made 6 runs.
"""

from __future__ import annotations

import pytest

from tests.e2e.test_what_a_number_means import grader, judged, live_cfg, q2_fails_at_3_searches, questions, sweep
from tests.everywhere import cli, mlflow_runs, seen
from tests.fake_openai import FakeOpenAI

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]


def test_export_logs_the_plans_value_under_plain_names_and_updates_on_reexport(tmp_path):
    with FakeOpenAI(q2_fails_at_3_searches(questions(6))) as m, FakeOpenAI(grader) as j:
        cfgs = [live_cfg(m.base_url, tmp_path, f"agent.max_searches={b}", f"benchmark.limit={n}", *judged(j.base_url))
                for b, n in ((1, 6), (3, 6), (5, 4))]
        h1, h3, h5 = (i["config_hash"] for i in sweep(cfgs))
    s = seen(tmp_path, "livenews", tmp_path / "out", show=False)
    assert len(s.mlflow) == 3
    runs = {r["params"]["config_hash"]: r for r in s.mlflow}
    api = {(r["config_hash"], r["metric"], r["scope"]): r for r in s.api}
    one = runs[h1]["metrics"]
    assert (one["accuracy"], one["accuracy.n"]) == (0.5, 6)
    assert (round(one["common.accuracy"], 3), one["common.accuracy.n"]) == (0.333, 3)
    three = runs[h3]
    assert round(three["metrics"]["scored_share"], 3) == 0.833 and three["metrics"]["n_scored"] == 5
    assert three["tags"]["dateline.incomplete"] == "true" and "INCOMPLETE" in three["name"]
    assert "INCOMPLETE" in three["tags"]["dateline.marks"] and runs[h1]["tags"]["dateline.incomplete"] == "false"
    for h, r in runs.items():           # the same value and n as the API, in both scopes
        for key, value in r["metrics"].items():
            metric, scope = (key[7:], "common") if key.startswith("common.") else (key, "all")
            if (h, metric, scope) in api:
                assert value == pytest.approx(api[(h, metric, scope)]["value"]), (h, key)
    code, _, _ = cli("export", str(tmp_path), "--to", "mlflow", "--tracking-uri", (tmp_path / "out" / "mlruns").as_uri())
    assert code == 0
    again = mlflow_runs((tmp_path / "out" / "mlruns").as_uri())
    assert len(again) == 3 and {r["params"]["config_hash"] for r in again} == {h1, h3, h5}
