"""The KubeRay manifests (docker/kuberay/): each is a RayJob whose Ray version is the one
pyproject pins, whose entrypoint is a dateline command whose overrides compose and validate, and
whose driver runs off the head; the fault-tolerant 8-GPU one keeps the GCS in Redis, retries, and
writes its run dir to S3, so a retry resumes (issue 33)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = sorted((REPO / "docker" / "kuberay").glob("*.yaml"))


def _ray_pin() -> str:
    m = re.search(r'"ray\[[^\]]*\]==([^"]+)"', (REPO / "pyproject.toml").read_text())
    assert m, "pyproject.toml pins no ray version"
    return m.group(1)


def _overrides(entrypoint: str) -> list[str]:
    words = shlex.split(entrypoint)
    assert words[:2] == ["dateline", "run"], entrypoint
    # a -m sweep's values: the first of each (every point composes the same way)
    return [w.split(",")[0] if "=" in w else w for w in words[2:] if w != "-m"]


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_is_a_rayjob_of_this_dateline(path):
    from ray_jobs.config.compose import compose

    job = yaml.safe_load(path.read_text())
    assert job["kind"] == "RayJob" and job["apiVersion"] == "ray.io/v1"
    spec = job["spec"]
    assert spec["rayClusterSpec"]["rayVersion"] == _ray_pin()
    cfg = compose(_overrides(spec["entrypoint"]))          # composes and validates, or raises naming the field
    assert cfg.cluster.address == "auto"
    assert spec["rayClusterSpec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    assert "dateline_driver" in spec["entrypointResources"]


def test_the_fault_tolerant_manifest_survives_a_head_loss_and_resumes_a_retry():
    from ray_jobs.config.compose import compose

    job = yaml.safe_load((REPO / "docker" / "kuberay" / "rayjob-8gpu-ft.yaml").read_text())
    spec = job["spec"]
    ft = spec["rayClusterSpec"]["gcsFaultToleranceOptions"]
    assert ft["redisAddress"] and ft["redisPassword"]["valueFrom"]["secretKeyRef"]["key"]
    assert spec["backoffLimit"] >= 1
    cfg = compose(_overrides(spec["entrypoint"]))
    assert cfg.run.dir.startswith("s3://") and cfg.index.replicas == "auto" and cfg.model.replicas == "auto"
    gpus = sum(int(g["replicas"]) * int(g["template"]["spec"]["containers"][0]["resources"]["limits"]
                                        .get("nvidia.com/gpu", 0))
               for g in spec["rayClusterSpec"]["workerGroupSpecs"])
    assert gpus == 8
