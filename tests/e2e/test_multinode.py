"""A dateline run on a multi-node Ray cluster (``ray.cluster_utils.Cluster``: several raylets on
this machine, each a node with its own resources), pinned by custom resources (issue 11,
parts 2 and 6): the model replica on the node with ``replica``, the index on the node with
``index``, the episode workers on the node with ``worker``. The replica runs
tests/fake_vllm_server.py (``model.server_module``), scripted like tests/engine/runtime/test_agent.py.
Then a worker node is lost mid-run and a replacement joins: Ray restarts the workers there, the
driver requeues their episodes, and each planned episode is stored exactly once.

The head has no CPUs for work. The cluster is this test's own (never `ray stop`); the address
file ``cluster_utils`` writes for ``ray.init(address="auto")`` is restored at once, so no other
Ray user on the machine joins it by accident.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.helpers import ray_temp_dir

REPO = Path(__file__).resolve().parents[2]
# room for the index too (1 CPU): only index.resources keeps it off the worker node
WORKER_NODE = {"num_cpus": 2, "resources": {"worker": 2}}


@contextlib.contextmanager
def own_cluster() -> Iterator[Any]:
    """A ``cluster_utils`` cluster of this test's own, with a head that has no CPUs for work: the
    address file ``cluster_utils`` writes is restored at once; Ray and the cluster are shut down
    after. The caller adds its nodes."""
    import ray
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    addr_file = ray_temp_dir() / "ray_current_cluster"
    before = addr_file.read_text() if addr_file.exists() else None
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        if before is None:
            addr_file.unlink(missing_ok=True)
        else:
            addr_file.write_text(before)
        yield c
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()


@pytest.fixture
def cluster():
    with own_cluster() as c:
        nodes = {"replica": c.add_node(num_cpus=2, resources={"replica": 1}),
                 "index": c.add_node(num_cpus=1, resources={"index": 1}),
                 "worker": c.add_node(**WORKER_NODE)}
        c.wait_for_nodes()
        yield c, nodes


def config(address: str, tmp_path: Path, limit: int, *extra: str) -> Any:
    from ray_jobs.config.compose import compose

    (tmp_path / "model").mkdir(exist_ok=True)
    return compose(["benchmark=newsagent", "agent=newsagent", f"benchmark.limit={limit}", "judge=none",
                    "model=local_cpu", "model.name=fake", "model.served_name=fake", f"model.path={tmp_path / 'model'}",
                    "model.server_module=tests.fake_vllm_server", f"+model.env.PYTHONPATH={REPO}",
                    "+model.env.FAKE_VLLM_RESPONDER=tests.engine.runtime.test_agent:scripted_writer",
                    "model.startup_timeout_s=120", "model.placement_timeout_s=120",
                    "+model.resources={replica:1}", "+index.resources={index:1}",
                    "+cluster.worker_resources={worker:1}", f"cluster.address={address}", "cluster.num_workers=2",
                    "cluster.episodes_per_worker=2", f"run.dir={tmp_path / 'run'}", "run.progress=false", *extra])


def actors(c: Any, cls: str) -> list[dict[str, Any]]:
    """Ray's actor table (GCS; no dashboard needed): every actor of class ``cls``, dead ones too."""
    return [a for a in c.global_state.actor_table(None).values() if a["ActorClassName"] == cls]


def stored_once(run_dir: Path, n: int) -> list[dict[str, Any]]:
    from engine.benchmarks import get_benchmark
    from engine.storage import EpisodeStore

    eps = EpisodeStore(run_dir, get_benchmark("newsagent").episode_fields).episodes().to_pylist()
    assert len(eps) == n and all(e["status"] == "ok" for e in eps), [e["error"] for e in eps]
    raw = [r["episode_id"] for f in sorted((run_dir / "episodes").glob("*.parquet"))
           for r in pq.read_table(f, columns=["episode_id"]).to_pylist()]
    assert sorted(raw) == sorted(e["episode_id"] for e in eps)          # exactly once
    return eps


@pytest.mark.ray
@pytest.mark.timeout(600)
def test_replica_index_and_workers_land_on_the_nodes_with_their_resources(cluster, tmp_path):
    from ray_jobs.cluster.session import Session
    from ray_jobs.run import run

    c, nodes = cluster
    ids = {k: n.node_id for k, n in nodes.items()}
    session = Session()
    try:
        info = run(config(c.address, tmp_path, 4), session)
    finally:
        session.close()
    assert info["index"]["node_id"] == ids["index"] and info["index"]["cuda_visible_devices"] == ""
    (replica,) = actors(c, "ModelReplica")
    assert replica["Address"]["NodeID"] == ids["replica"]
    (index,) = actors(c, "IndexService")
    assert index["Address"]["NodeID"] == ids["index"]
    workers = actors(c, "EpisodeWorker")
    assert len(workers) == 2 and {w["Address"]["NodeID"] for w in workers} == {ids["worker"]}
    eps = stored_once(tmp_path / "run", 4)
    assert len({e["worker"] for e in eps}) == 2                         # spread over both workers
    assert {e["replica"] for e in eps} == {0} and all(e["tokens_out"] > 0 for e in eps)


def _wait_for_requests(log: Path, n: int, driver: threading.Thread, timeout_s: float = 300) -> bool:
    """Until the replica has answered ``n`` calls (its log has a line per request)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline and driver.is_alive():
        if log.exists() and log.read_text(errors="replace").count("POST /v1/chat/completions 200") >= n:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.ray
@pytest.mark.timeout(600)
def test_a_lost_worker_node_is_replaced_and_every_episode_is_stored_once(cluster, tmp_path):
    from engine.hosting.replica_actor import replica_log_name
    from ray_jobs.cluster.session import Session
    from ray_jobs.run import run

    c, nodes = cluster
    cfg = config(c.address, tmp_path, 6, "+model.env.FAKE_VLLM_DELAY_S=0.3")
    log = tmp_path / "run" / "logs" / replica_log_name("fake", 0)
    result: dict[str, Any] = {}
    session = Session()

    def drive() -> None:
        try:
            result["info"] = run(cfg, session)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            result["error"] = e

    # the driver runs in a thread: nodes are added from the main thread (Ray sets signal handlers)
    driver = threading.Thread(target=drive)
    driver.start()
    try:
        # 4 episodes run at once (2 workers x 2), each makes 4-5 calls: after 6 calls all are in flight
        assert _wait_for_requests(log, 6, driver), "the run ended (or never called the model) first"
        c.remove_node(nodes["worker"])                      # its processes die: workers and episodes lost
        replacement = c.add_node(**WORKER_NODE).node_id
    finally:
        driver.join()
        session.close()
    if "error" in result:
        raise result["error"]
    assert result["info"]["requeued"] >= 1
    stored_once(tmp_path / "run", 6)
    workers = actors(c, "EpisodeWorker")
    assert len(workers) == 2
    assert all(w["NumRestarts"] >= 1 and w["Address"]["NodeID"] == replacement for w in workers), workers
    (replica,) = actors(c, "ModelReplica")
    assert replica["Address"]["NodeID"] == nodes["replica"].node_id and replica["NumRestarts"] == 0
