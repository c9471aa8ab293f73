"""Issue 34, end to end through the real driver (Hydra config, Ray, episode workers, Parquet): a
``sweep=race`` over two configurations of livenews, one scripted to answer every question right
and one to answer every one wrong, raced on ``answer_contains_gold`` (a metric every episode has
when it is stored) over the bundled sample's 12 questions in the run's random order.

* the losing configuration is stopped early: its never-started episodes are stored with status
  ``stopped_early``, counted in every metric row (``n_stopped_early``) and in no mean, and the
  decision is logged in ``adaptive.json`` with its bounds and reason; the winner runs all 12;
* the summary, the HTML report and the export records carry the wording and each configuration's
  interval, and never the stopped configuration's bare mean;
* the same command again re-derives the decisions from the store (the log is unchanged, no
  episode is run or stored twice); the same run dir under another alpha is refused.
"""

from __future__ import annotations

import json
import math
import re

import pytest

from engine.benchmarks.livenews import BENCHMARK as LIVE
from engine.errors import ConfigError
from engine.storage import EpisodeStore
from ray_jobs.config.compose import compose
from tests.e2e.test_what_a_number_means import FINISH, live_cfg, sweep
from tests.fake_openai import FakeOpenAI

pytestmark = pytest.mark.ray


def _golds() -> dict[str, str]:
    tasks = LIVE.load_tasks(compose(["benchmark=livenews", "agent=livenews", "run.order=data"]))
    return {t.question.question: t.question.answer for t in tasks}


def test_a_race_stops_the_loser_and_a_resume_re_derives_it(tmp_path, capsys):
    golds = _golds()

    def model(messages, req):
        text = "\n".join(str(m["content"]) for m in messages)
        gold = next(a for q, a in golds.items() if q in text)
        return FINISH.format(gold if req.get("model") == "good" else "no idea")

    run = tmp_path / "run"
    race = ["sweep=race", "sweep.min_tasks=4", "sweep.metric=answer_contains_gold", "cluster.num_workers=1", "cluster.episodes_per_worker=1"]
    with FakeOpenAI(model, delay_s=0.25) as srv:
        cfgs = [live_cfg(srv.base_url, run, f"model.name={name}", *race) for name in ("good", "bad")]
        infos = sweep(cfgs)
        out = capsys.readouterr().out

        ad = json.loads((run / "adaptive.json").read_text())
        good, bad = (i["config_hash"] for i in infos)
        assert ad["design"]["strategy"] == "race" and ad["metric"] == "answer_contains_gold" and ad["n_tasks"] == 12
        assert ad["order"]["order"] == "random"
        [d] = ad["decisions"]
        assert d["config"] == bad and d["by"] == good and d["action"] == "stopped_early" and d["lo"] > 0
        assert d["reason"].startswith(f"eliminated by {good}: CS({good} - {bad}) = [") and "at t = " in d["reason"]
        assert "FAILURES" not in out                     # a decision, not a failure
        assert ad["configurations"][good]["state"] == "complete"
        assert ad["configurations"][bad]["state"] == "stopped_early"
        assert "stopped early by an anytime-valid rule" in ad["wording"]
        cost = ad["cost"]
        assert cost["episodes_full"] == 24 and cost["episodes_run"] == 24 - len(
            [e for e in EpisodeStore(run).episodes(["status"]).to_pylist() if e["status"] == "stopped_early"])
        assert cost["full_run_projected"]["tokens_out"] >= cost["tokens_out"] > 0

        eps = EpisodeStore(run).episodes(["config_hash", "status", "task_id"]).to_pylist()
        mine = [e for e in eps if e["config_hash"] == bad]
        stopped = [e for e in mine if e["status"] == "stopped_early"]
        assert stopped and len(mine) == 12 and all(e["status"] in ("ok", "stopped_early") for e in mine)
        assert sum(e["config_hash"] == good and e["status"] == "ok" for e in eps) == 12
        assert "adaptive: stopped early after" in out and "anytime-valid interval" in out
        assert re.search(r"adaptive sweep: \d+ of 24 episodes run", out)
        assert re.search(r"1 of 2 configurations were stopped early", out)

        from engine.scoring import metric_table
        rows = [r for r in metric_table.refresh(EpisodeStore(run)) if r["config_hash"] == bad
                and r["metric"] == "answer_contains_gold"]
        # no bare mean: the row carries the decision interval and the mark (engine/scoring/race_view.py)
        lo, hi = ad["configurations"][bad]["interval"]
        assert rows and rows[0]["n_stopped_early"] == len(stopped) and math.isnan(rows[0]["value"])
        assert (rows[0]["lo"], rows[0]["hi"], rows[0]["interval"], rows[0]["race"]) == (lo, hi, "anytime_valid",
                                                                                       "STOPPED EARLY")

        # the report and the export carry the wording and the intervals, never the stopped one's bare mean
        from ray_jobs.outputs.export import _records
        from ray_jobs.outputs.report import build
        build([run], tmp_path / "rep", n_boot=50)
        html = (tmp_path / "rep" / "report.html").read_text()
        assert "Adaptive evaluation (race, goal best)" in html and "1 of 2 configurations were stopped early" in html
        assert "STOPPED EARLY" in html and "anytime-valid" in html
        recs = {r["config_hash"]: r for r in _records(str(run))}
        lost = recs[bad]
        assert lost["tags"]["dateline.adaptive_state"] == "stopped_early" and "STOPPED EARLY" in lost["name"]
        assert lost["metrics"]["adaptive.answer_contains_gold.hi"] < 0.5
        assert "answer_contains_gold" not in lost["metrics"]          # no bare mean
        assert recs[good]["metrics"]["answer_contains_gold"] == 1.0
        assert "1 of 2 configurations were stopped early" in lost["tags"]["dateline.adaptive_wording"]

        # the same command: decisions re-derived from the store, nothing run or stored again
        n_rows = len(eps)
        sweep([live_cfg(srv.base_url, run, f"model.name={name}", *race) for name in ("good", "bad")])
        again = json.loads((run / "adaptive.json").read_text())
        assert [(x["t"], x["config"], x["action"]) for x in again["decisions"]] == [(d["t"], d["config"], d["action"])]
        assert len(EpisodeStore(run).episodes(["episode_id"]).to_pylist()) == n_rows

        # another design on the same run dir is refused, naming the file
        with pytest.raises(ConfigError, match="adaptive.json: this run dir's adaptive decisions were made under"):
            sweep([live_cfg(srv.base_url, run, f"model.name={name}", *race, "sweep.alpha=0.1")
                   for name in ("good", "bad")])


def test_an_adaptive_rule_refuses_the_files_order():
    from engine.config import validate

    with pytest.raises(ConfigError, match="run.order: an adaptive rule needs the random task order"):
        validate(compose(["sweep=race", "run.order=data"]))
    with pytest.raises(ConfigError, match="sweep.epsilon"):
        validate(compose(["sweep=race", "sweep.goal=eps_best"]))
    with pytest.raises(ConfigError, match="cannot be combined"):
        validate(compose(["sweep=race", "stop=anytime_valid"]))


def test_a_capped_run_stops_dispatch_early_enough_for_its_episodes_in_flight(tmp_path):
    """``stop=anytime_valid`` under ``run.budget.max_output_tokens``: dispatch stops while what is
    left covers the episodes in flight (ray_jobs/run/adaptive.py: drain_reason), so every episode
    that started finished, the rest are stored as never started, and the interval is over an
    unbroken prefix of the shared order."""
    golds = _golds()

    def model(messages, req):
        text = "\n".join(str(m["content"]) for m in messages)
        return FINISH.format(next(a for q, a in golds.items() if q in text))

    run = tmp_path / "capped"
    with FakeOpenAI(model, delay_s=0.2) as srv:
        [info] = sweep([live_cfg(srv.base_url, run, "model.name=good", "stop=anytime_valid",
                                 "stop.metric=answer_contains_gold", "stop.min_tasks=2", "agent.max_tokens_turn=16",
                                 "run.budget.max_output_tokens=60", "cluster.num_workers=1",
                                 "cluster.episodes_per_worker=2")])
    assert "drain reserve" in info.get("drained", ""), info.get("drained")
    eps = EpisodeStore(run).episodes(["status", "error", "n_steps", "task_id"]).to_pylist()
    ok = [e for e in eps if e["status"] == "ok"]
    stopped = [e for e in eps if e["status"] == "budget_exhausted"]
    assert ok and stopped and len(ok) + len(stopped) == 12
    assert all("(never started)" in e["error"] and e["n_steps"] == 0 for e in stopped)     # none cut mid-episode
    ad = json.loads((run / "adaptive.json").read_text())
    c = ad["configurations"][info["config_hash"]]
    assert c["state"] == "running" and c["tasks_admitted"] == len(ok)                 # an unbroken prefix
    lo, hi = c["interval"]
    assert 0.0 < lo <= len(ok) / 12 + 1e-9 and hi == 1.0


def test_halving_is_screening_in_every_output(tmp_path, capsys):
    """``sweep=halving`` through the driver: at the rung (a quarter of the 12 tasks) the best third by
    mean is kept and the others are stopped, and the summary, adaptive.json and the decisions say
    SCREENING (no error guarantee)."""
    golds = _golds()

    def model(messages, req):
        text = "\n".join(str(m["content"]) for m in messages)
        return FINISH.format(next(a for q, a in golds.items() if q in text) if req.get("model") == "good" else "no idea")

    run = tmp_path / "halving"
    with FakeOpenAI(model, delay_s=0.2) as srv:
        infos = sweep([live_cfg(srv.base_url, run, f"model.name={name}", "sweep=halving", "sweep.rungs=[0.25,1.0]",
                                "sweep.metric=answer_contains_gold", "cluster.num_workers=1",
                                "cluster.episodes_per_worker=1") for name in ("good", "bad", "worse")])
    out = capsys.readouterr().out
    ad = json.loads((run / "adaptive.json").read_text())
    assert ad["screening"] is True and ad["wording"].startswith("SCREENING") and "NO error guarantee" in ad["wording"]
    states = {h: c["state"] for h, c in ad["configurations"].items()}
    assert states[infos[0]["config_hash"]] == "complete"
    assert sorted(states.values()).count("stopped_early") == 2
    assert all(d["reason"].startswith("screening:") and d["t"] == 3 for d in ad["decisions"])
    assert out.count("SCREENING") >= 3

    # issue 46, finding 3: every output says SCREENING for a dropped configuration (its mean over the
    # tasks it ran, no interval), never STOPPED EARLY or an anytime-valid interval halving does not have
    from tests.everywhere import seen

    s = seen(run, "livenews", tmp_path / "out", show=False)
    dropped = [h for h, st in states.items() if st == "stopped_early"]
    for h in dropped:
        lines = [ln for ln in s.metrics.splitlines() if h in ln]
        assert lines and all("SCREENING" in ln and "anytime-valid" not in ln and "STOPPED EARLY" not in ln
                             for ln in lines), lines
        api = [r for r in s.api if r["config_hash"] == h and r["metric"] != "scored_share"]
        assert api and all(r["race"] == "SCREENING" and r["interval"] == "screening" for r in api)
        [rec] = [r for r in s.mlflow if r["params"]["config_hash"] == h]
        assert "SCREENING" in rec["tags"]["dateline.marks"] and "STOPPED EARLY" not in rec["tags"]["dateline.marks"]
    for text in (s.tables, s.report_md):
        assert "SCREENING (n=" in text and "mean of the tasks it ran, not a full-set estimate" in text
        assert "anytime-valid interval" not in text and "STOPPED EARLY" not in text
