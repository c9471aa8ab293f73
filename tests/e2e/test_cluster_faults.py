"""The control plane at cluster scale (issue 33), on ``cluster_utils`` clusters of this test's own:

* a replica black-holed mid-run (it accepts connections and never answers, ``/health`` neither:
  a node lost silently): its pool's health checks, on the supervisor's thread, take it out of
  rotation; the workers cancel the calls in flight there and re-route them at once (no 600 s
  request timeout); dispatch never stands still for more than half a second; every episode is
  stored once, ok. (Its pool never restarts it here: only the re-routing frees those calls.)

Replicas run tests/fake_vllm_server.py (``FAKE_VLLM_BLACKHOLE_AFTER`` with ``FAKE_VLLM_BLACKHOLE_ONE``:
one replica of the pool turns into a black hole; its restart serves)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.e2e.test_multinode import own_cluster

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]


def test_a_black_holed_replica_is_routed_around_without_stalling_dispatch(tmp_path):
    import pyarrow.dataset as ds

    from engine.benchmarks import get_benchmark
    from engine.storage import EpisodeStore
    from ray_jobs.config.compose import compose
    from ray_jobs.run import run_sweep

    claim = tmp_path / "black-hole"
    (tmp_path / "model").mkdir()
    with own_cluster() as c:
        for _ in range(2):
            c.add_node(num_cpus=3)
        c.wait_for_nodes()
        cfg = compose([
            "benchmark=livenews", "agent=livenews", "benchmark.limit=null", "judge=none", "model=local_cpu",
            "model.name=fake", "model.served_name=fake", f"model.path={tmp_path / 'model'}",
            "model.server_module=tests.fake_vllm_server", f"+model.env.PYTHONPATH={REPO}",
            "+model.env.FAKE_VLLM_RESPONDER=tests.helpers:livenews_script", "+model.env.FAKE_VLLM_DELAY_S=0.2",
            "+model.env.FAKE_VLLM_BLACKHOLE_AFTER=4", f"+model.env.FAKE_VLLM_BLACKHOLE_ONE={claim}",
            "model.replicas=2", "model.num_cpus=0.5", "model.max_inflight_per_replica=4",
            "model.health_check_s=1", "model.unhealthy_checks=100000", "model.startup_timeout_s=120",
            "model.placement_timeout_s=60", f"cluster.address={c.address}", "cluster.num_workers=2",
            "cluster.episodes_per_worker=4", "cluster.worker_num_cpus=0.1", "index.num_cpus=0.5",
            f"run.dir={tmp_path / 'run'}", "run.progress=false"])
        assert cfg.model.request_timeout_s >= 600          # re-routing, not a timeout, frees the calls
        t0 = time.monotonic()
        (info,) = run_sweep([cfg])
        took = time.monotonic() - t0
    assert claim.exists(), "no replica turned into a black hole"
    held = claim.read_text().count("held ")     # episode calls the black hole accepted and never answered
    eps = EpisodeStore(tmp_path / "run", get_benchmark("livenews").episode_fields).episodes().to_pylist()
    assert len(eps) == info["episodes_planned"] > 0 and all(e["status"] == "ok" for e in eps), \
        [(e["episode_id"], e["error"]) for e in eps if e["status"] != "ok"]
    # Each held call was moved: its episode finished ok (above), well inside the 600 s request
    # timeout (below). Which episodes had answered calls on the black hole before it formed is the
    # router's timing, so the calls table only shows the move when one had (a flaky count in CI).
    assert held >= 1, "the black hole never held an episode call: nothing had to move"
    calls = ds.dataset(tmp_path / "run" / "calls", format="parquet").to_table(columns=["episode_id", "replica"])
    assert {r["replica"] for r in calls.to_pylist()} == {0, 1}, "both replicas answered episode calls"
    print("longest dispatch stall", info["dispatch_max_stall_s"], "s; run", round(took, 1), "s")
    assert info["dispatch_max_stall_s"] <= 0.5, info["dispatch_max_stall_s"]
    assert took < 300, took                                 # nothing waited out a request timeout


def _sized_cfg(c, tmp_path: Path, name: str, limit: str, delay: float):
    from ray_jobs.config.compose import compose

    return compose([
        "benchmark=livenews", "agent=livenews", f"benchmark.limit={limit}", "judge=none", "model=local_cpu",
        f"model.name={name}", f"model.served_name={name}", f"model.path={tmp_path / 'model'}",
        "model.server_module=tests.fake_vllm_server", f"+model.env.PYTHONPATH={REPO}",
        "+model.env.FAKE_VLLM_RESPONDER=tests.helpers:livenews_script", f"+model.env.FAKE_VLLM_DELAY_S={delay}",
        "model.replicas=auto", "model.num_cpus=0.25", "model.num_gpus=1", "model.max_inflight_per_replica=1",
        "model.health_check_s=1", "model.startup_timeout_s=120", "model.placement_timeout_s=60",
        f"cluster.address={c.address}", "cluster.num_workers=2", "cluster.episodes_per_worker=1",
        "cluster.worker_num_cpus=0.1", "index.num_cpus=0.25", "cluster.sizing_efficiency=0.5",
        f"run.dir={tmp_path / 'run'}", "run.progress=false"])


def test_a_drained_pool_gives_its_gpus_to_the_model_with_work_left(tmp_path):
    """Two auto-sized models in one wave on 2 nodes x 2 fake GPUs: the small run (one task)
    drains first; its pool is released mid-wave and the other model, with most of its episodes
    left, grows onto the freed GPU (a replica that did not exist at the start serves episodes).
    ``cluster.sizing_efficiency=0.5``: the fake server loads in seconds and episodes take about
    a second, so the default rule would not pay for a new replica on so little work."""
    import pyarrow.dataset as ds

    from engine.benchmarks import get_benchmark
    from engine.storage import EpisodeStore
    from ray_jobs.cluster.session import Session
    from ray_jobs.run import run_sweep

    (tmp_path / "model").mkdir()
    with own_cluster() as c:
        for _ in range(2):
            c.add_node(num_cpus=4, num_gpus=2)
        c.wait_for_nodes()
        small = _sized_cfg(c, tmp_path, "small", "1", 0.0)
        # 2 episodes at a time, ~8 s each: ~50 s. The added replica joins once its server is up (seconds
        # on a busy machine) and, with 2 calls in flight over 4 replicas, gets each call with even odds
        # among the idle ones: at 1 s a call it joined too late to serve one in a clean-clone run
        big = _sized_cfg(c, tmp_path, "big", "null", 2.0)
        infos = run_sweep([small, big])
    by = {i["replicas_auto"] and next(iter(i["replicas_auto"])): i for i in infos}
    assert by["small"]["replicas_auto"]["small"]["replicas"] == 1, by["small"]["replicas_auto"]
    start = by["big"]["replicas_auto"]["big"]["replicas"]
    assert start == 3, by["big"]["replicas_auto"]
    moves = by["big"]["pool_moves"]
    assert [m["released"] for m in moves] == [Session.key(small.model)], moves
    assert moves[0]["grown"] == {Session.key(big.model): 1}, moves
    eps = EpisodeStore(tmp_path / "run", get_benchmark("livenews").episode_fields).episodes().to_pylist()
    assert len(eps) == by["small"]["episodes_planned"] + by["big"]["episodes_planned"]
    assert all(e["status"] == "ok" for e in eps), [(e["model"], e["error"]) for e in eps if e["status"] != "ok"]
    calls = ds.dataset(tmp_path / "run" / "calls", format="parquet").to_table(columns=["model", "replica"]).to_pylist()
    assert any(r["model"] == "big" and r["replica"] == start for r in calls), "the added replica served nothing"
