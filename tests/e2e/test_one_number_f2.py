"""Issue 31, finding 2: reading never writes. ``dateline metrics`` with flags prints its own view
and changes nothing another command reads; a run dir holding two benchmarks keeps both.

One run dir, written by the real driver against scripted servers: livenews, 6 questions, judged by
J1 (q0, q1 RIGHT; q2, q3 WRONG; q4, q5 fail: the model server answers 500 and retries run out);
the same configuration judged again by J2 (``benchmark.judge_probes=true`` is an evaluation
setting: another judge id, no new episodes); then the rule-based newsagent baseline on 2 tasks
into the same run dir. By hand, under the default policy (failures count as wrong): accuracy
2/6 = 0.333 (n=6) for each judge; with ``--score-failures exclude`` 2/4 = 0.500 (n=4).
Before the fix, ``dateline metrics --score-failures exclude`` rewrote the stored table that
``dateline tables`` and the API read (0.5, n=4 there too), ``--judge J1`` dropped J2 from them, and
the newsagent run replaced the livenews rows.
"""

from __future__ import annotations

import pytest

from engine.storage import EpisodeStore
from tests.e2e.test_what_a_number_means import FINISH, grader, judged, live_cfg, questions, sweep, which
from tests.everywhere import cli, listing, rows_with, seen
from tests.fake_openai import FakeOpenAI

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]

SCRIPT = {0: "RIGHT one", 1: "RIGHT two", 2: "WRONG", 3: "WRONG", 4: None, 5: None}


def test_reading_never_writes_and_flags_change_only_their_command(tmp_path):
    run = tmp_path / "run"
    qs = questions(6)

    def model(messages, req):
        answer = SCRIPT[which(messages, qs)]
        return (500, "engine failed") if answer is None else FINISH.format(answer)

    with FakeOpenAI(model) as m, FakeOpenAI(grader) as j:
        (first,) = sweep([live_cfg(m.base_url, run, "benchmark.limit=6", *judged(j.base_url))])
        (second,) = sweep([live_cfg(m.base_url, run, "benchmark.limit=6", "benchmark.judge_probes=true",
                                    *judged(j.base_url))])
    assert first["config_hash"] == second["config_hash"]
    import ray

    assert not ray.is_initialized()          # the judge-only run started Ray through its session, which stopped it
    from ray_jobs.config.compose import compose
    from ray_jobs.run import run_sweep

    run_sweep([compose(["agent=newsagent_rule_based", "benchmark.limit=2", f"run.dir={run}", "run.progress=false",
                        "cluster.num_cpus=4"])])
    api_rows = seen(run, "livenews", tmp_path / "before", export=False, show=False).api
    judges = sorted({r["judge"] for r in api_rows if r["benchmark"] == "livenews"})
    assert len(judges) == 2 and all(judges), judges          # J1 and J2, each its own set of rows

    # flags change the flagged command's output only
    before = listing(run)
    code, text, _ = cli("metrics", str(run), "livenews", "--score-failures", "exclude")
    assert code == 0
    assert all(rows_with(text, j, "accuracy", "0.500", "4") for j in judges), text
    code, text, _ = cli("metrics", str(run), "livenews", "--judge", judges[0])
    assert code == 0 and rows_with(text, judges[0], "accuracy") and not rows_with(text, judges[1], "accuracy"), text
    # a judge that matches nothing is an error naming the judges there are (issue 46), not an empty table
    code, text, err = cli("metrics", str(run), "livenews", "--judge", "nosuchjudge")
    assert code != 0 and "'nosuchjudge'" in err and all(j in err for j in judges), (code, text, err)

    s = seen(run, "livenews", tmp_path / "after")
    assert listing(run) == before                      # nothing any reader did touched the run dir
    for j in judges:                                   # the default view everywhere: 2/6
        assert rows_with(s.metrics, j, "accuracy", "0.333", "6"), s.metrics
        (acc,) = [r for r in s.api if r["judge"] == j and r["metric"] == "accuracy" and r["scope"] == "all"]
        assert (round(acc["value"], 3), acc["n"], acc["score_failures"]) == (0.333, 6, "as_wrong")
        assert f"(judge {j})" in s.tables
    # accuracy 2/6 with its exact interval, contains gold, failed; never the exclude view's 2/4
    assert s.tables.count("| 33.3 [4.3, 77.7] | 0.0 | 33.3 |") == 2 and "| 50.0" not in s.tables
    assert {r["benchmark"] for r in s.api} == {"livenews", "newsagent"}        # both benchmarks of the run dir
    for md in (s.report_md,):
        assert rows_with(md, "accuracy", "0.333") or "accuracy | 0.333" in md, md[:4000]
    accs = [r["metrics"]["accuracy"] for r in s.mlflow if r["params"].get("benchmark") == "livenews"]
    assert sorted(round(a, 3) for a in accs) == [0.333, 0.333], s.mlflow

    # the cache `dateline run` wrote is what readers use while it is current, and it says so
    store = EpisodeStore(run)
    from engine.scoring.metric_table import metric_key, store_benchmarks

    assert store.cached_metrics(metric_key(store, store_benchmarks(store))) is not None
