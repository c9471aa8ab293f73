"""Replica placement groups, custom resources and the index actor's GPU visibility (issue 11,
parts 2 and 6), on local Ray clusters: one without GPUs, one with two fake GPUs (Ray schedules
``num_gpus`` on a CPU machine when told it has them, and sets CUDA_VISIBLE_DEVICES to their
ids). Replicas run tests/fake_vllm_server.py instead of vLLM (``model.server_module``)."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from engine.config import ModelConfig
from engine.errors import ConfigError, PlacementError
from engine.hosting.replica import ModelPool
from engine.hosting.replica_actor import replica_bundles
from engine.hosting.vllm_server import VLLMServer, server_command
from ray_jobs.config.compose import compose

REPO = Path(__file__).resolve().parents[2]


def fake_model(tmp_path: Path, **kw: Any) -> ModelConfig:
    (tmp_path / "model").mkdir(exist_ok=True)
    base: dict[str, Any] = dict(name="fake", path=str(tmp_path / "model"), server_module="tests.fake_vllm_server",
                                env={"PYTHONPATH": str(REPO), "FAKE_VLLM_REPLY": "scripted answer"},
                                engine_args={"enforce_eager": True, "max_model_len": 512}, num_cpus=1,
                                startup_timeout_s=60, placement_timeout_s=30)
    return ModelConfig(**(base | kw))


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def chat(base_url: str, model: str, key: str) -> Any:
    req = urllib.request.Request(base_url + "/chat/completions", method="POST",
                                 data=json.dumps({"model": model, "messages": [{"role": "user", "content": "a b c"}]}
                                                 ).encode(), headers={"Content-Type": "application/json",
                                                                      "Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def group_state(pg: Any) -> dict[str, Any]:
    import ray

    return ray.util.placement_group_table(pg)


@pytest.fixture
def local_ray():
    """A fresh local Ray (never one found on the machine); ``local_ray(num_gpus=...)`` starts it."""
    import ray

    def start(**kw: Any) -> Any:
        if ray.is_initialized():
            ray.shutdown()
        ray.init(address="local", include_dashboard=False, **kw)
        return ray

    yield start
    if ray.is_initialized():
        ray.shutdown()


# -- configuration --------------------------------------------------------------------------

def test_bundles_per_replica():
    assert replica_bundles(ModelConfig(num_cpus=2)) == [{"CPU": 2.0}]
    assert replica_bundles(ModelConfig(num_cpus=4, num_gpus=1, resources={"replica": 1})) == [
        {"CPU": 4.0, "GPU": 1.0, "replica": 1.0}]
    # tensor parallel on GPUs: one bundle per GPU, CPUs and custom resources on the first
    assert replica_bundles(ModelConfig(num_cpus=8, num_gpus=2, tensor_parallel_size=2, resources={"a100": 1})) == [
        {"CPU": 8.0, "GPU": 1.0, "a100": 1.0}, {"GPU": 1.0}]


@pytest.mark.parametrize("override,where", [
    ("+model.resources={replica:-1}", "model.resources.replica"),
    ("+index.resources={index:-0.5}", "index.resources.index"),
    ("+cluster.worker_resources={worker:-2}", "cluster.worker_resources.worker"),
    ("+model.resources={GPU:1}", "model.resources.GPU"),
    ("model.placement_timeout_s=0", "model.placement_timeout_s"),
])
def test_bad_resources_fail_validation_naming_the_field(override, where):
    with pytest.raises(ConfigError, match=where.replace(".", r"\.")):
        compose([override])


def test_resources_compose():
    cfg = compose(["+model.resources={replica:1}", "+index.resources={index:1}", "+cluster.worker_resources={worker:0.5}"])
    assert (cfg.model.resources, cfg.index.resources, cfg.cluster.worker_resources) == (
        {"replica": 1.0}, {"index": 1.0}, {"worker": 0.5})
    # the rest of the model config is untouched: the schema's defaults
    assert (cfg.model.server_module, cfg.model.placement_timeout_s) == (ModelConfig.server_module,
                                                                       ModelConfig.placement_timeout_s)


def test_server_module_replaces_vllm_in_the_command_only(tmp_path):
    args = (str(tmp_path), "m", 8123, "0.0.0.0", 2, {"max_model_len": 8})
    fake = server_command(*args, module="tests.fake_vllm_server")
    assert fake[1:3] == ["-m", "tests.fake_vllm_server"] and fake[3:] == server_command(*args)[3:]
    assert VLLMServer(str(tmp_path), "m", module="x.y").cmd[1:3] == ["-m", "x.y"]
    assert VLLMServer(str(tmp_path), "m").cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]


# -- placement on a cluster without what the model asks for ---------------------------------

@pytest.mark.ray
@pytest.mark.timeout(180)
def test_a_model_that_cannot_be_placed_fails_fast_naming_what_is_missing(local_ray, tmp_path):
    ray = local_ray(num_cpus=2, num_gpus=0)
    pool = ModelPool(fake_model(tmp_path, name="needs-a-gpu", num_gpus=1, placement_timeout_s=3), tmp_path / "logs")
    t0 = time.time()
    with pytest.raises(PlacementError) as e:
        pool.start()
    assert time.time() - t0 < 30
    msg = str(e.value)
    assert "needs-a-gpu" in msg and "GPU: 1" in msg and "GPU: 0" in msg and "short: GPU" in msg, msg
    assert "CPU: 2" in msg and "placement_timeout_s" in msg, msg
    assert pool.replicas == [] and pool.placement_groups == []
    assert all(pg["state"] == "REMOVED" for pg in ray.util.placement_group_table().values())
    # a custom resource no node has: named too; two replicas
    pool = ModelPool(fake_model(tmp_path, name="pinned", replicas=2, resources={"replica": 1}, placement_timeout_s=2),
                     tmp_path / "logs")
    with pytest.raises(PlacementError, match=r"pinned: 2 of 2 replica\(s\).*short: replica") as e:
        pool.start()
    assert all(pg["state"] == "REMOVED" for pg in ray.util.placement_group_table().values())
    # nothing is left reserved: a model that fits starts on the same cluster
    pool = ModelPool(fake_model(tmp_path, num_cpus=2), tmp_path / "logs")
    try:
        (ep,) = pool.start()
        assert chat(ep.base_url, "fake", ep.api_key)["choices"][0]["message"]["content"] == "scripted answer"
        # a one-node cluster: the replica listens on loopback only, and asks for the pool's key
        assert ep.base_url.startswith("http://127.0.0.1:") and len(ep.api_key) >= 32
        assert ep.api_key not in repr(ep) and ep.api_key not in " ".join(get_json(ep.base_url[:-3] + "/info")["argv"])
        for wrong in ("", "not-the-key"):
            with pytest.raises(urllib.error.HTTPError) as e:
                chat(ep.base_url, "fake", wrong)
            assert e.value.code == 401
    finally:
        pool.stop()


# -- a cluster with two (fake) GPUs ---------------------------------------------------------

@pytest.mark.ray
@pytest.mark.timeout(300)
def test_tensor_parallel_replica_gets_one_bundle_per_gpu_on_one_node_and_restarts_in_it(local_ray, tmp_path):
    ray = local_ray(num_cpus=3, num_gpus=2)
    cfg = fake_model(tmp_path, name="tp2", served_name="tp2-served", num_gpus=2, tensor_parallel_size=2,
                     resources={})
    pool = ModelPool(cfg, tmp_path / "logs")
    killed: list[int] = []
    try:
        (ep,) = pool.start()
        (pg,) = pool.placement_groups
        table = group_state(pg)
        assert table["strategy"] == "STRICT_PACK" and table["state"] == "CREATED"
        assert list(table["bundles"].values()) == [{"CPU": 1.0, "GPU": 1.0}, {"GPU": 1.0}]
        assert len(set(table["bundles_to_node_id"].values())) == 1
        assert pool.startup[0]["node_id"] == ray.get_runtime_context().get_node_id()
        root = ep.base_url[: -len("/v1")]
        info = get_json(root + "/info")
        # the server sees both GPUs of its group, and got vLLM's command line
        assert sorted(info["cuda_visible_devices"].split(",")) == ["0", "1"]
        assert info["tensor_parallel_size"] == 2 and info["served"] == ["tp2-served"]
        assert "--enforce-eager" in info["argv"] and "--max-model-len" in info["argv"]
        reply = chat(ep.base_url, "tp2-served", ep.api_key)
        assert reply["choices"][0]["message"]["content"] == "scripted answer"
        assert reply["usage"]["prompt_tokens"] == 3 and reply["usage"]["completion_tokens"] == 2
        # both GPUs are taken: a second model asking for one cannot be placed, and says so
        with pytest.raises(PlacementError, match="GPU"):
            ModelPool(fake_model(tmp_path, name="one-more", num_gpus=1, placement_timeout_s=2),
                      tmp_path / "logs").start()

        # the replica's process dies (as with a lost node, its server goes too): Ray re-creates the
        # actor in its group and the driver's health check starts its server again
        killed.append(info["pid"])
        ray.kill(pool.replicas[0], no_restart=False)
        os.kill(info["pid"], signal.SIGKILL)
        old = ep.base_url
        deadline = time.time() + 120
        changed = []                # out of rotation at the first check, back in with a new address
        while time.time() < deadline and not (pool.restarts == 1 and pool.endpoints[0].in_rotation):
            changed.append(pool.check(timeout_s=5))
            time.sleep(0.5)
        assert any(changed) and pool.restarts == 1 and pool.endpoints[0].base_url != old
        info2 = get_json(pool.endpoints[0].base_url[: -len("/v1")] + "/info")
        killed.append(info2["pid"])
        assert info2["pid"] != info["pid"] and sorted(info2["cuda_visible_devices"].split(",")) == ["0", "1"]
        assert pool.endpoints[0].api_key == ep.api_key           # the restarted server asks for the same key
        assert chat(pool.endpoints[0].base_url, "tp2-served", ep.api_key)["choices"][0]["message"]["content"] == "scripted answer"
        assert group_state(pg)["state"] == "CREATED"
    finally:
        pool.stop()
        for pid in killed:          # stop() stops the live server; never leave one behind
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert pool.placement_groups == [] and group_state(pg)["state"] == "REMOVED"


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_index_actor_sees_a_gpu_only_when_it_asked_for_one(local_ray):
    from indexes.corpus import Document
    from indexes.service import start_index_service

    ray = local_ray(num_cpus=3, num_gpus=1, runtime_env={"env_vars": {"DATELINE_TEST_JOB_VAR": "kept"}})
    docs = [Document(f"d{i}", f"document number {i} about the council", dt.date(2024, 1, 1 + i)) for i in range(3)]
    cpu_only = start_index_service(docs, "all-MiniLM-L6-v2", "cpu", 8, None, 1.0, 0.0, {})
    info = ray.get(cpu_only.ready.remote(), timeout=240)
    assert info["cuda_visible_devices"] == "" and info["documents"] == 3 and info["gpu"] is False
    assert info["node_id"] == ray.get_runtime_context().get_node_id()
    ray.kill(cpu_only)

    # the actor-level env var is merged into the job's runtime_env, which it keeps
    @ray.remote(num_cpus=0, runtime_env={"env_vars": {"CUDA_VISIBLE_DEVICES": ""}})
    def env() -> dict[str, str | None]:
        return {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "DATELINE_TEST_JOB_VAR")}
    assert ray.get(env.remote()) == {"CUDA_VISIBLE_DEVICES": "", "DATELINE_TEST_JOB_VAR": "kept"}

    with_gpu = start_index_service(docs, "all-MiniLM-L6-v2", "cpu", 8, None, 1.0, 1.0)
    info = ray.get(with_gpu.ready.remote(), timeout=240)
    assert info["cuda_visible_devices"] == "0"          # Ray's assignment
    ray.kill(with_gpu)
