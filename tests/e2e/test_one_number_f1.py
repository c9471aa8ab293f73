"""Issue 31, findings 1 and 7: a server is what it serves, not what it is called or where it is.

Finding 1: a judge on another URL (another replica) of the server under test is the model under
test. Servers A and B both report, at ``GET /v1/models``, ``scripted`` and ``grader`` started
from ``/models/qwen`` (vLLM's ``root``): one server's two replicas. The model answers WRONG to
everything and, as the grader, grades everything correct. By hand the accuracy is 0; the judge
says 1.000 (n=2), and every output must carry the SELF-JUDGED mark next to it. A judge on server C,
which serves other weights (``/models/other``), is independent: no mark.

Finding 7: a run of 2 tasks against server A (``/w/A``, answers RIGHT), then ``benchmark.limit=4``
against server B (``/w/B``, answers WRONG) under the same ``model.name``, is refused, naming what
changed; the store keeps accuracy 1.000 (n=2). The same limit against A' (another process serving
``/w/A``) is accepted: 2 reused, 2 run, 1.000 (n=4). Before the fix both were accepted and the
configuration read 0.5 (2 right from A, 2 wrong from B).
"""

from __future__ import annotations

import pytest

from engine.errors import ConfigError
from tests.e2e.test_what_a_number_means import FINISH, grader, judged, live_cfg, sweep
from tests.everywhere import rows_with, seen
from tests.fake_openai import FakeOpenAI

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]


def serving(root: str) -> list[dict]:
    return [{"id": name, "root": root, "max_model_len": 8192} for name in ("scripted", "grader")]


def wrong_but_lenient(messages, req):
    """Answers WRONG; as the grader, calls every answer correct."""
    return "A" if "Gold target:" in messages[0]["content"] else FINISH.format("WRONG")


def test_a_judge_on_another_replica_of_the_model_under_test_is_self_judged(tmp_path):
    with FakeOpenAI(wrong_but_lenient, models=serving("/models/qwen")) as a, \
            FakeOpenAI(wrong_but_lenient, models=serving("/models/qwen")) as b, \
            FakeOpenAI(wrong_but_lenient, models=serving("/models/other")) as c:
        sweep([live_cfg(a.base_url, tmp_path / "same", "benchmark.limit=2", *judged(b.base_url))])
        sweep([live_cfg(a.base_url, tmp_path / "other", "benchmark.limit=2", *judged(c.base_url))])
        # a fleet of A and B under test, judged by B under the served name of the model
        fleet_judge = [x for x in judged(b.base_url) if not x.startswith("judge.model=")] + ["judge.model=scripted"]
        sweep([live_cfg("", tmp_path / "fleet", "benchmark.limit=2", f"model.base_urls=[{a.base_url},{b.base_url}]",
                        *fleet_judge)])

    s = seen(tmp_path / "same", "livenews", tmp_path / "out-same")
    (acc,) = [r for r in s.api if r["metric"] == "accuracy" and r["scope"] == "all"]
    assert (acc["value"], acc["n"], acc["self_judged"]) == (1.0, 2, True)       # the judge's word, marked
    (line,) = rows_with(s.metrics, "accuracy", "1.000", "2")
    assert "(self-judged)" in line and "SELF-JUDGED" in s.metrics
    assert "**SELF-JUDGED**" in s.tables
    assert "SELF-JUDGED" in s.report_md and "SELF-JUDGED" in s.report_html
    (rec,) = s.mlflow
    assert rec["tags"]["dateline.self_judged"] == "true" and rec["metrics"]["accuracy"] == 1.0
    assert "SELF-JUDGED" in rec["name"] and "SELF-JUDGED" in rec["tags"]["dateline.marks"]

    fleet = seen(tmp_path / "fleet", "livenews", tmp_path / "out-fleet", export=False, show=False)
    assert all(r["self_judged"] for r in fleet.api if r["judge"]), fleet.api

    other = seen(tmp_path / "other", "livenews", tmp_path / "out-other", export=False, show=False)
    (acc,) = [r for r in other.api if r["metric"] == "accuracy" and r["scope"] == "all"]
    assert (acc["value"], acc["n"], acc["self_judged"]) == (1.0, 2, False)
    assert "SELF-JUDGED" not in other.metrics + other.tables + other.report_md


def test_a_fleet_whose_members_serve_different_weights_is_refused(tmp_path):
    with FakeOpenAI(wrong_but_lenient, models=serving("/models/qwen")) as a, \
            FakeOpenAI(wrong_but_lenient, models=serving("/models/other")) as b:
        with pytest.raises(ConfigError, match="model.base_urls: the endpoints serve different models"):
            sweep([live_cfg("", tmp_path, "benchmark.limit=1", f"model.base_urls=[{a.base_url},{b.base_url}]")])


def test_a_swapped_endpoint_under_the_same_name_is_refused(tmp_path):
    def answers(text):
        return lambda messages, req: FINISH.format(text)

    models_a = [{"id": "scripted", "root": "/w/A", "max_model_len": 4096}]
    with FakeOpenAI(answers("RIGHT"), models=models_a) as a, \
            FakeOpenAI(answers("WRONG"), models=[{"id": "scripted", "root": "/w/B", "max_model_len": 4096}]) as b, \
            FakeOpenAI(answers("RIGHT"), models=models_a) as a2, FakeOpenAI(grader) as j:
        sweep([live_cfg(a.base_url, tmp_path, "benchmark.limit=2", *judged(j.base_url))])
        with pytest.raises(ConfigError, match=r"model\.base_url \(what the endpoint serves\).*/w/A.*/w/B"):
            sweep([live_cfg(b.base_url, tmp_path, "benchmark.limit=4", *judged(j.base_url))])
        s = seen(tmp_path, "livenews", tmp_path / "out-refused", export=False, show=False)
        (acc,) = [r for r in s.api if r["metric"] == "accuracy" and r["scope"] == "all" and r["judge"]]
        assert (acc["value"], acc["n"]) == (1.0, 2)
        (info,) = sweep([live_cfg(a2.base_url, tmp_path, "benchmark.limit=4", *judged(j.base_url))])
    assert len(a2.requests) == 2                        # the 2 stored episodes reused, 2 run on A'
    s = seen(tmp_path, "livenews", tmp_path / "out-accepted", export=False, show=False)
    (acc,) = [r for r in s.api if r["metric"] == "accuracy" and r["scope"] == "all" and r["judge"]]
    assert (acc["value"], acc["n"]) == (1.0, 4)
    assert rows_with(s.metrics, "accuracy", "1.000", "4")


def test_a_judge_that_is_one_of_the_compared_models_marks_the_whole_comparison(tmp_path):
    """Two models compared on one dataset, judged by a replica of one of them: the judge grades its
    rival too, so both configurations' judge-based numbers are marked, in the API and the report."""
    with FakeOpenAI(wrong_but_lenient, models=serving("/models/qwen")) as a, \
            FakeOpenAI(wrong_but_lenient, models=serving("/models/qwen")) as b, \
            FakeOpenAI(wrong_but_lenient, models=[{"id": "rival", "root": "/models/rival"}]) as c:
        sweep([live_cfg(a.base_url, tmp_path, "benchmark.limit=2", *judged(b.base_url)),
               live_cfg(c.base_url, tmp_path, "benchmark.limit=2", "model.name=rival", *judged(b.base_url))])
    s = seen(tmp_path, "livenews", tmp_path / "out", export=False, show=False)
    accs = [r for r in s.api if r["metric"] == "accuracy"]
    assert {r["model"] for r in accs} == {"scripted", "rival"} and all(r["self_judged"] for r in accs), accs
    assert rows_with(s.metrics, "rival") and all("(self-judged)" in ln for ln in rows_with(s.metrics, "accuracy"))
    assert "rival [self-judged]" in s.report_md or "rival" in s.report_md.split("SELF-JUDGED", 1)[1]


def test_a_judge_behind_a_proxy_that_lists_no_weights_is_the_model_under_test(tmp_path):
    """Issue 46, finding 8: a proxy in front of server A lists ``scripted`` with no weights (no
    ``root``). The judge there, under the served name of the model under test, cannot be told from
    it: same name and no way to tell is the same model, marked SELF-JUDGED with the reason, never an
    independent judge (before the fix: accuracy 1.000 unmarked, where the hand value is 0)."""
    proxy = [{"id": "scripted", "max_model_len": 8192}]
    with FakeOpenAI(wrong_but_lenient, models=serving("/models/qwen")) as a, \
            FakeOpenAI(wrong_but_lenient, models=proxy) as p:
        judge = [x for x in judged(p.base_url) if not x.startswith("judge.model=")] + ["judge.model=scripted"]
        sweep([live_cfg(a.base_url, tmp_path, "benchmark.limit=2", *judge)])
    s = seen(tmp_path, "livenews", tmp_path / "out", export=False, show=False)
    (acc,) = [r for r in s.api if r["metric"] == "accuracy" and r["scope"] == "all"]
    assert (acc["value"], acc["n"], acc["self_judged"]) == (1.0, 2, True)
    (line,) = rows_with(s.metrics, "accuracy", "1.000", "2")
    assert "(self-judged)" in line and "**SELF-JUDGED**" in s.tables
    assert "share a served name and an endpoint does not report its weights" in s.report_md


def test_an_endpoint_swapped_for_another_with_no_model_list_is_refused(tmp_path):
    """Issue 46, finding 8: servers A (answers RIGHT) and B (answers WRONG) list no models. A run of
    2 tasks against A, then ``benchmark.limit=4`` against B under the same ``model.name``: dateline
    cannot tell B from A, so it refuses rather than mix them (before the fix: accepted, the
    configuration read 0.500 over 4 where each alone is 1.0 and 0.0). The same limit against A again
    (the same URL) is accepted: 2 reused, 2 run, 1.000 (n=4)."""
    def answers(text):
        return lambda messages, req: FINISH.format(text)

    with FakeOpenAI(answers("RIGHT")) as a, FakeOpenAI(answers("WRONG")) as b, FakeOpenAI(grader) as j:
        sweep([live_cfg(a.base_url, tmp_path, "benchmark.limit=2", *judged(j.base_url))])
        with pytest.raises(ConfigError, match=r"model\.base_url: .*neither endpoint reports what it serves"):
            sweep([live_cfg(b.base_url, tmp_path, "benchmark.limit=4", *judged(j.base_url))])
        assert not b.requests
        before = len(a.requests)
        sweep([live_cfg(a.base_url, tmp_path, "benchmark.limit=4", *judged(j.base_url))])
        assert len(a.requests) - before == 2
    s = seen(tmp_path, "livenews", tmp_path / "out", export=False, show=False)
    (acc,) = [r for r in s.api if r["metric"] == "accuracy" and r["scope"] == "all" and r["judge"]]
    assert (acc["value"], acc["n"]) == (1.0, 4)
