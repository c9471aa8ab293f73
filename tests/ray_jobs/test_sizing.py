"""Sizing the cluster for the user (issue 23, part 2): ``model.replicas: auto`` and
``cluster.concurrency: auto`` (ray_jobs/cluster/sizing.py), as pure functions; the run on a
``cluster_utils`` cluster with fake GPUs is tests/e2e/test_cluster_sizing.py."""

from __future__ import annotations

import pytest

from engine.config import ClusterConfig, ModelConfig
from engine.errors import ConfigError
from ray_jobs.cluster.sizing import derived_workers, size_replicas
from ray_jobs.config.compose import compose


def gpu_model(name: str, gpus: int, replicas: object = "auto", **kw: object) -> ModelConfig:
    return ModelConfig(name=name, path="/m", num_gpus=gpus, tensor_parallel_size=gpus, num_cpus=1,
                       replicas=replicas, **kw)


def nodes(n: int, gpus: int, cpus: int = 16) -> list[dict[str, float]]:
    return [{"CPU": float(cpus), "GPU": float(gpus)} for _ in range(n)]


def test_auto_fills_every_gpu_in_proportion_to_the_work():
    models = {"7b": gpu_model("7b", 1), "32b": gpu_model("32b", 2), "70b": gpu_model("70b", 4)}
    # the same tokens for each: GPU time per token grows with the replica's GPUs
    out = size_replicas(models, {"7b": 1e6, "32b": 1e6, "70b": 1e6}, nodes(8, 8))
    used = out["7b"] * 1 + out["32b"] * 2 + out["70b"] * 4
    assert used == 64, out
    shares = {k: out[k] * g / 64 for k, g in (("7b", 1), ("32b", 2), ("70b", 4))}
    assert shares["70b"] > shares["32b"] > shares["7b"], shares          # 4 : 2 : 1 of the work
    assert abs(shares["70b"] - 4 / 7) < 0.1 and abs(shares["7b"] - 1 / 7) < 0.1, shares
    # more work for the small model: more of the GPUs go to it
    more = size_replicas(models, {"7b": 8e6, "32b": 1e6, "70b": 1e6}, nodes(8, 8))
    assert more["7b"] > out["7b"] and more["70b"] < out["70b"] and \
        more["7b"] + 2 * more["32b"] + 4 * more["70b"] == 64, more


def test_a_replica_goes_only_where_it_fits_on_one_node():
    # 4 nodes of 2 GPUs: a 4-GPU replica fits nowhere; the others fill all 8 GPUs
    models = {"big": gpu_model("big", 4), "one": gpu_model("one", 1), "two": gpu_model("two", 2)}
    out = size_replicas(models, {"big": 1.0, "one": 1.0, "two": 1.0}, nodes(4, 2))
    assert out["big"] == 1                       # asked for anyway (it waits, or fails placement, naming why)
    assert out["one"] * 1 + out["two"] * 2 == 8 and out["one"] >= 1 and out["two"] >= 1, out


def test_fixed_counts_are_kept_and_what_is_taken_is_not_free():
    models = {"fixed": gpu_model("fixed", 2, replicas=2), "auto": gpu_model("auto", 1)}
    out = size_replicas(models, {"fixed": 1.0, "auto": 1.0}, nodes(2, 4))
    assert out == {"fixed": 2, "auto": 4}
    # another job holds 3 GPUs of one node (what ray.available_resources shows): planned around
    busy = [{"CPU": 16.0, "GPU": 1.0}, {"CPU": 16.0, "GPU": 4.0}]
    assert size_replicas({"auto": gpu_model("auto", 1)}, {"auto": 1.0}, busy) == {"auto": 5}
    # CPUs kept for the workers and the index bound CPU models
    cpu = {"cpu": ModelConfig(name="cpu", path="/m", num_cpus=4, replicas="auto")}
    assert size_replicas(cpu, {"cpu": 1.0}, [{"CPU": 16.0}], reserve_cpus=4.0) == {"cpu": 3}


def test_concurrency_is_derived_per_model():
    fixed = ClusterConfig(num_workers=2, episodes_per_worker=8)
    auto = ClusterConfig(num_workers=2, episodes_per_worker=8, concurrency="auto", model_time_share=0.5)
    small = ModelConfig(name="s", path="/m", max_inflight_per_replica=32)
    big = ModelConfig(name="b", path="/m", max_inflight_per_replica=16)
    assert derived_workers(small, 5, fixed) == derived_workers(big, 1, fixed) == (2, 16)
    assert derived_workers(small, 5, auto) == (40, 320)          # 5 x 32 / 0.5
    assert derived_workers(big, 1, auto) == (4, 32)              # 1 x 16 / 0.5
    repro = ModelConfig(name="r", path="/m", reproducible=True)  # one sequence at a time on CPU
    assert derived_workers(repro, 2, auto) == (1, 8)


@pytest.mark.parametrize("override,field", [("model.replicas=many", "model.replicas"),
                                            ("model.replicas=0", "model.replicas"),
                                            ("cluster.concurrency=max", "cluster.concurrency"),
                                            ("cluster.model_time_share=0", "cluster.model_time_share")])
def test_bad_sizing_settings_name_the_field(override, field):
    with pytest.raises(ConfigError, match=field):
        compose([override])


def test_auto_composes():
    cfg = compose(["model.replicas=auto", "model.min_replicas=2", "cluster.concurrency=auto"])
    assert cfg.model.replicas == "auto" and cfg.cluster.concurrency == "auto"
