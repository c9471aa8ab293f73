"""Judge actors (ray_jobs.judging.fleet.JudgeFleet) on a local Ray: a configuration's rows are spread
over the actors by task, every episode is judged once, the actors write the judgements, and a
budget gate held in the driver's memory keeps its configuration on one actor."""

from __future__ import annotations

import pytest

from engine.benchmarks.livenews import BENCHMARK as LIVE
from engine.budget import Budget, BudgetGate, Caps
from engine.budget.cost import Prices
from engine.llm import Endpoint
from engine.storage import JUDGEMENT_SCHEMA, EpisodeStore
from ray_jobs.judging.fleet import JudgeFleet
from tests.fake_openai import FakeOpenAI
from tests.ray_jobs.test_judging_off_the_driver import _judge_cfg, _row

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def ray_local():
    """This module's own local Ray, or the one an earlier test of this process left running (the
    judge actors ask for no CPUs, so they are placed on a busy cluster too)."""
    import ray

    if ray.is_initialized():
        yield
        return
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_two_judge_actors_judge_every_episode_once(ray_local, tmp_path):
    store = EpisodeStore(tmp_path, LIVE.episode_fields)
    rows = [_row(i, "ca") for i in range(12)] + [dict(_row(i, "ca"), episode_id=f"ca-seed1-e{i}") for i in range(12)]
    store.write_batch([dict(r) for r in rows], [])
    with FakeOpenAI(lambda m, r: "A") as srv:
        cfg = _judge_cfg(srv.base_url, "judge.actors=2")
        fleet = JudgeFleet(cfg.judge.actors, flush_s=0.5, num_cpus=cfg.judge.actor_cpus)
        try:
            fleet.add("k", cfg, LIVE, store, [Endpoint(srv.base_url, "grader", "")], None, None, "ca")
            assert fleet.of["k"] == [0, 1]
            for i in range(0, len(rows), 5):
                fleet.submit("k", rows[i:i + 5])
            sent = {i: fleet.sent[("k", i)] for i in (0, 1)}
            stats = fleet.finish("k")
        finally:
            fleet.close()
        asked = len(srv.requests)
    assert sent[0] > 0 and sent[1] > 0 and sum(sent.values()) == len(rows)     # both actors had work
    judged = next(iter(store.judgements_by_judge(config_hash="ca").values()))
    assert set(judged) == {r["episode_id"] for r in rows} and stats["episodes"] == len(rows)
    assert stats["actors"] == 2 and stats["failed"] == 0
    assert stats["ok"] == asked == sum(len(v) for v in judged.values())        # each judgement asked once
    jt = store.read("judgements", JUDGEMENT_SCHEMA)
    assert set(jt["config_hash"].to_pylist()) == {"ca"}


def test_a_gate_in_the_drivers_memory_keeps_its_configuration_on_one_actor(ray_local, tmp_path):
    store = EpisodeStore(tmp_path, LIVE.episode_fields)
    rows = [_row(i, "cb") for i in range(4)]
    store.write_batch([dict(r) for r in rows], [])
    gate = BudgetGate.local(Budget(Caps(max_input_tokens=10 ** 9), Prices()))
    assert not gate.shared
    with FakeOpenAI(lambda m, r: "A") as srv:
        cfg = _judge_cfg(srv.base_url, "judge.actors=2")
        fleet = JudgeFleet(2, flush_s=0.5)
        try:
            fleet.add("k", cfg, LIVE, store, [Endpoint(srv.base_url, "grader", "")], gate, None, "cb")
            assert len(fleet.of["k"]) == 1
            fleet.submit("k", rows)
            stats = fleet.finish("k")
        finally:
            fleet.close()
    assert stats["actors"] == 1 and stats["episodes"] == 4 and stats["failed"] == 0


def test_judge_actors_that_cannot_be_placed_are_an_error_naming_the_settings(ray_local, tmp_path):
    store = EpisodeStore(tmp_path, LIVE.episode_fields)
    cfg = _judge_cfg("http://127.0.0.1:9/v1")
    fleet = JudgeFleet(1, flush_s=0.5, resources={"judge_node": 1.0}, start_timeout_s=3)
    with pytest.raises(RuntimeError, match=r"could not be placed in 3 s .*judge_node.*judge.actors=0"):
        fleet.add("k", cfg, LIVE, store, [], None, None, "c")
    assert fleet.actors == []
