"""Judge actors at cluster scale (issue 33): a judge actor killed mid-run loses no judgement and
stores none twice (``ray_jobs.judging.fleet.JudgeFleet`` restarts it and hands it its episodes again)."""

from __future__ import annotations

import pytest

from engine.benchmarks.livenews import BENCHMARK as LIVE
from engine.llm import Endpoint
from engine.storage import JUDGEMENT_SCHEMA, EpisodeStore
from ray_jobs.judging.fleet import JudgeFleet
from tests.fake_openai import FakeOpenAI
from tests.ray_jobs.test_judging_off_the_driver import _judge_cfg, _row

pytestmark = pytest.mark.ray


@pytest.mark.timeout(300)
def test_a_killed_judge_actor_is_restarted_and_no_judgement_is_lost_or_stored_twice(tmp_path):
    """Issue 33, on a ``cluster_utils`` cluster of two nodes: one of two judge actors is killed
    while its judge calls are in flight (flushed judgements in the store, others in its memory).
    Ray restarts it; the fleet gives it its configuration and episodes again; the store ends with
    exactly one judgement per episode and key."""
    import time

    import ray

    from tests.e2e.test_multinode import own_cluster

    store = EpisodeStore(tmp_path, LIVE.episode_fields)
    rows = [_row(i, "ck") for i in range(160)]     # 2 judgements each; an actor hands them on 64 at a time
    store.write_batch([dict(r) for r in rows], [])
    with own_cluster() as c, FakeOpenAI(lambda m, r: "A", delay_s=0.05) as srv:
        for _ in range(2):
            c.add_node(num_cpus=2)
        c.wait_for_nodes()
        ray.init(address=c.address)
        cfg = _judge_cfg(srv.base_url, "judge.actors=2", "judge.max_inflight=2")
        fleet = JudgeFleet(2, flush_s=0.2, start_timeout_s=120)
        try:
            fleet.add("k", cfg, LIVE, store, [Endpoint(srv.base_url, "grader", "")], None, 2, "ck")
            fleet.submit("k", rows)
            # kill an actor once some judgements are stored and most are not
            t0 = time.monotonic()
            while store.read("judgements", JUDGEMENT_SCHEMA).num_rows < 64:
                assert time.monotonic() - t0 < 60, "no judgement was stored"
                time.sleep(0.05)
            stored_before = store.read("judgements", JUDGEMENT_SCHEMA).num_rows
            ray.kill(fleet.actors[1], no_restart=False)
            stats = fleet.finish("k")
        finally:
            fleet.close()
    jt = store.read("judgements", JUDGEMENT_SCHEMA).to_pylist()
    keys = [(j["episode_id"], j["key"]) for j in jt]
    assert len(keys) == len(set(keys)), "a judgement was stored twice"
    assert {e for e, _ in keys} == {r["episode_id"] for r in rows}, "a judgement was lost"
    assert stats["restarts"] >= 1 and 64 <= stored_before < 2 * len(rows)
    assert len(keys) == 2 * len(rows)
