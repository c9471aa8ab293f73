"""`ray job submit -- dateline run cluster=existing ...` against a `ray start --head` cluster.

The job carries a runtime_env of its own (working_dir + env_vars, as `ray job submit
--runtime-env-json` or a KubeRay RayJob's runtimeEnvYAML give it); the driver's ray.init must
not repeat any of its keys (Ray raises "Failed to merge the Job's runtime env ..."). The head is
started here on free ports with its own temp dir, on loopback only, and always stopped: SIGTERM to
its `ray start --block` (which stops what it started), then SIGKILL to its process group and to any
process it spawned that is still alive. Never `ray stop`: that kills every Ray on the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def head_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    env.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled", HF_HUB_OFFLINE="1",
               # a single-node head on 127.0.0.1 (Ray otherwise binds the node's outward address)
               RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
               PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("RAY_JOB_CONFIG_JSON_ENV_VAR", None)
    return env


def stop_head(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """Stop one `ray start --head --block` and everything it started, nothing else."""
    try:
        import psutil

        spawned = psutil.Process(proc.pid).children(recursive=True)
    except Exception:  # noqa: BLE001 - already gone
        spawned = []
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)            # its handler stops the processes it started
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)         # start_new_session: the group is the head's own
    except ProcessLookupError:
        pass
    for p in spawned:                               # anything that left the group (job drivers)
        try:
            p.kill()
        except Exception:  # noqa: BLE001 - already gone
            pass
    proc.wait(10)


@pytest.fixture
def ray_head():
    temp_dir = tempfile.mkdtemp(prefix="ray-submit-", dir="/tmp")    # short: Ray's socket paths
    dash, agent, client, metrics = free_ports(4)
    log = open(Path(temp_dir) / "head.log", "wb")
    proc = subprocess.Popen(
        [str(BIN / "ray"), "start", "--head", "--block", "--port=0", "--node-ip-address=127.0.0.1",
         "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}",
         f"--dashboard-agent-listen-port={agent}", f"--ray-client-server-port={client}",
         f"--metrics-export-port={metrics}", "--num-cpus=4", f"--temp-dir={temp_dir}", "--disable-usage-stats"],
        env=head_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"http://127.0.0.1:{dash}"
    try:
        from ray.job_submission import JobSubmissionClient

        deadline = time.time() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"ray start exited {proc.returncode}: "
                                   + (Path(temp_dir) / "head.log").read_text()[-3000:])
            try:
                JobSubmissionClient(address).list_jobs()    # the job server answers
                break
            except Exception:  # noqa: BLE001 - not up yet
                if time.time() > deadline:
                    raise
                time.sleep(1)
        yield address, temp_dir
    finally:
        stop_head(proc)
        log.close()
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.mark.ray
def test_ray_job_submit_dateline_run(ray_head, tmp_path):
    from ray.job_submission import JobStatus, JobSubmissionClient

    address, _ = ray_head
    run_dir = tmp_path / "run"
    runtime_env = {
        "working_dir": str(REPO),
        "excludes": [".git", ".venv", ".cache", "runs", ".hypothesis", ".pytest_cache", ".mypy_cache", ".ruff_cache",
                     "/build"],
        # keys ensure_ray also sets: the job's must win without ray.init raising
        "env_vars": {"HF_HUB_OFFLINE": "1", "DATELINE_CACHE": str(tmp_path / "cache")},
    }
    submission_id = f"dateline-test-{os.getpid()}-{int(time.time())}"
    t0 = time.time()
    out = subprocess.run(
        [str(BIN / "ray"), "job", "submit", "--address", address, "--submission-id", submission_id,
         "--runtime-env-json", json.dumps(runtime_env), "--",
         sys.executable, "-m", "ray_jobs.cli.main", "run", "cluster=existing", "cluster.num_workers=2",
         "agent=newsagent_rule_based", "benchmark.limit=3", f"run.dir={run_dir}", "run.progress=false"],
        env=head_env(), capture_output=True, text=True, timeout=300)
    logs = out.stdout[-6000:] + out.stderr[-3000:]
    jobs = {j.submission_id for j in JobSubmissionClient(address).list_jobs()}
    assert submission_id in jobs, f"the submission never became a job (submit rc {out.returncode}):\n{logs}"
    status = JobSubmissionClient(address).get_job_status(submission_id)
    assert status == JobStatus.SUCCEEDED, f"job {status} (submit rc {out.returncode}):\n{logs}"
    assert out.returncode == 0, logs
    print(f"job submitted and finished in {time.time() - t0:.1f} s")

    from engine.benchmarks import get_benchmark
    from engine.storage import EpisodeStore

    store = EpisodeStore(run_dir, get_benchmark("newsagent").episode_fields)
    eps = store.episodes().to_pylist()
    assert len(eps) == 3 and all(e["status"] == "ok" for e in eps), eps
    metrics = store.metrics().to_pylist()
    assert any(m["metric"] == "episodes" and m["value"] == 3 for m in metrics), metrics


def test_ensure_ray_inside_a_job_keeps_the_jobs_runtime_env(monkeypatch):
    """No Ray started: ray.init is captured. Keys the job's runtime_env sets are not repeated
    (the job's values win), the rest is added, and cluster=local joins the job's cluster."""
    import ray

    from ray_jobs.cluster.session import Session
    from ray_jobs.config.compose import compose

    job_env = {"working_dir": "gcs://_ray_pkg_x.zip", "env_vars": {"HF_HUB_OFFLINE": "1", "DATELINE_CACHE": "/c"}}
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", json.dumps({"runtime_env": job_env}))
    monkeypatch.setenv("DATELINE_CACHE", "/c")               # the job's env vars are in the driver's env
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw))
    from ray.runtime_env.runtime_env import _merge_runtime_env

    seen = []
    for overrides, address in ((["cluster=existing", "+cluster.runtime_env.working_dir=/wd",
                                 "+cluster.runtime_env.env_vars={HF_HUB_OFFLINE:'0',EXTRA:x}"], "auto"),
                               ([], "auto")):
        calls.clear()
        session = Session()
        session.ensure_ray(compose(overrides), 1.0)
        session._ray_started_here = False
        (kw,) = calls
        assert kw["address"] == address and "num_cpus" not in kw
        mine = kw["runtime_env"]
        assert "working_dir" not in mine
        assert not set(mine["env_vars"]) & set(job_env["env_vars"])
        assert mine["env_vars"]["TRANSFORMERS_OFFLINE"] == "1"
        assert _merge_runtime_env(job_env, mine) is not None       # what ray.init does in a job
        seen.append(mine)
    assert seen[0]["env_vars"]["EXTRA"] == "x"                      # cluster.runtime_env's own keys stay
