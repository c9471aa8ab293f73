"""Sizing the cluster for the user, on a ``cluster_utils`` cluster of 4 nodes with 2 fake GPUs each
(issue 23, part 2): three models of different sizes with ``model.replicas=auto`` and
``cluster.concurrency=auto`` in one sweep use every GPU, each model's episodes in flight follow
from its replicas and engine batch, a replica that fails to start does not stop the run, and a
second job on the same cluster (another job's placement group holding GPUs) is planned around.
A third sweep re-runs the first run dir with more tasks: its records measured each pool's work and
load, so replicas are sized by work (issue 33). Replicas run tests/fake_vllm_server.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_multinode import own_cluster

REPO = Path(__file__).resolve().parents[2]
GPUS_PER_NODE = 2

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]

OTHER_JOB = """
import sys, time, ray
from ray.util.placement_group import placement_group
ray.init(address=sys.argv[1])
pg = placement_group([{"GPU": float(sys.argv[2])}], strategy="STRICT_PACK")
ray.get(pg.ready(), timeout=60)
print("holding", flush=True)
sys.stdin.read()
"""

# name, GPUs per replica (tensor parallel), engine batch
MODELS = [("small", 1, 8), ("mid", 1, 4), ("large", 2, 16)]


@pytest.fixture
def gpu_cluster():
    with own_cluster() as c:
        for _ in range(4):
            c.add_node(num_cpus=4, num_gpus=GPUS_PER_NODE)
        c.wait_for_nodes()
        yield c


def configs(address: str, run_dir: Path, fail_once: Path | None, limit: int = 3) -> list[Any]:
    from ray_jobs.config.compose import compose

    (run_dir.parent / "model").mkdir(exist_ok=True)
    out = []
    for name, gpus, batch in MODELS:
        env = [f"+model.env.PYTHONPATH={REPO}", "+model.env.FAKE_VLLM_RESPONDER=tests.helpers:livenews_script"]
        if name == "mid" and fail_once:     # the first of its replicas to start exits; its restart serves
            env.append(f"+model.env.FAKE_VLLM_FAIL_ONCE={fail_once}")
        out.append(compose([
            "benchmark=livenews", "agent=livenews", f"benchmark.limit={limit}", "judge=none", "model=local_cpu",
            f"model.name={name}", f"model.served_name={name}", f"model.path={run_dir.parent / 'model'}",
            "model.server_module=tests.fake_vllm_server", *env, "model.replicas=auto", "model.num_cpus=0.5",
            f"model.num_gpus={gpus}", f"model.tensor_parallel_size={gpus}", f"model.max_inflight_per_replica={batch}",
            "model.startup_timeout_s=120", "model.placement_timeout_s=60", "model.health_check_s=1",
            f"cluster.address={address}", "cluster.concurrency=auto", "cluster.episodes_per_worker=8",
            "cluster.worker_num_cpus=0.1", "index.num_cpus=0.5", f"run.dir={run_dir}", "run.progress=false"]))
    return out


def gpus_used(infos: list[dict[str, Any]]) -> dict[str, int]:
    sizes = {name: gpus for name, gpus, _ in MODELS}
    out: dict[str, int] = {}
    for info in infos:
        for name, auto in (info.get("replicas_auto") or {}).items():
            out[name] = auto["replicas"] * sizes[name]
    return out


def check_run(run_dir: Path, infos: list[dict[str, Any]]) -> None:
    from engine.benchmarks import get_benchmark
    from engine.storage import EpisodeStore

    eps = EpisodeStore(run_dir, get_benchmark("livenews").episode_fields).episodes().to_pylist()
    assert len(eps) == 9 and all(e["status"] == "ok" for e in eps), [(e["model"], e["error"]) for e in eps]
    assert all(i["failures"]["kinds"] == {} or not i["failures"]["kinds"] for i in infos)


def test_auto_replicas_fill_the_cluster_and_a_second_job_plans_around_the_first(gpu_cluster, tmp_path):
    from ray_jobs.run import run_sweep

    address = gpu_cluster.address
    infos = run_sweep(configs(address, tmp_path / "run1", tmp_path / "failed-once-1"))
    used = gpus_used(infos)
    assert sum(used.values()) == 4 * GPUS_PER_NODE, used              # every fake GPU
    assert (tmp_path / "failed-once-1").exists()                      # a replica of mid failed to start ...
    check_run(tmp_path / "run1", infos)                               # ... and the run went on
    conc = {next(iter(i["replicas_auto"])): i["concurrency"] for i in infos}
    for name, gpus, batch in MODELS:
        c = conc[name]
        assert c["mode"] == "auto" and c["replicas"] * gpus == used[name]
        assert c["episodes_in_flight"] == max(8, -(-c["replicas"] * batch * 10 // 7)), c      # replicas x batch / 0.7
    assert len({c["episodes_in_flight"] for c in conc.values()}) > 1, conc   # not one figure for every model

    # another job (its own driver process) holds one node's GPUs: the next sweep sizes to the 6
    # that are left, and runs
    other = subprocess.Popen([sys.executable, "-c", OTHER_JOB, address, str(GPUS_PER_NODE)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "holding"
        infos = run_sweep(configs(address, tmp_path / "run2", None))
    finally:
        other.kill()
        other.wait()
    used = gpus_used(infos)
    assert sum(used.values()) == 3 * GPUS_PER_NODE, used
    check_run(tmp_path / "run2", infos)

    # run1 again with 3 more tasks per model (issue 33): its run records measured every pool's
    # replica-seconds per episode and load time, so replicas are sized by work; 3 episodes are
    # worth far less than a replica's load, so each model gets one replica, not the whole cluster
    infos = run_sweep(configs(address, tmp_path / "run1", None, limit=6))
    autos = [a for i in infos for a in (i.get("replicas_auto") or {}).values()]
    assert len(autos) == 3 and all(a["by"] == "work" and a["work_replica_s"] > 0 and a["load_s"] > 0
                                   for a in autos), autos
    assert gpus_used(infos) == {name: gpus for name, gpus, _ in MODELS}, autos
