"""A replica killed mid-run on real parts (issue 11, part 3; issue 29): the vLLM server of the
only replica is SIGKILLed while episodes are in flight; the driver's health check restarts it, the
episodes' calls wait for it (spending none of their retries) and go on, and the run completes with 0
failed episodes, each stored once. (A restarted replica is watched as the first one was: a hosted
vLLM-like engine restarted again and again in ``tests/e2e/test_slow_engine.py``, a replica restarted
twice while a call waits in ``tests/hosting/test_fault_tolerance.py``. One kill here since issue 45:
each vLLM start costs CI about 100 s.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from engine.benchmarks.livenews import BENCHMARK
from engine.hosting.replica_actor import replica_log_name
from engine.storage import EpisodeStore

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.real, pytest.mark.ray, pytest.mark.timeout(1800)]
QWEN = "qwen2.5-coder-0.5b-instruct"


def _kill_server_after(parent: int, log: Path, seconds: float, killed: list[int], times: int = 2) -> None:
    """SIGKILL the vLLM server ``seconds`` after it came up (episodes are in flight by then: the
    server logs no requests, so time is the trigger), ``times`` times: each restart is killed
    again once it serves."""
    for n in range(times):
        deadline = time.time() + 900
        while time.time() < deadline:
            if log.exists() and log.read_text(errors="replace").count("Application startup complete") > n:
                break
            time.sleep(1)
        time.sleep(seconds)
        if not _kill_server(parent, killed):
            return


def _kill_server(parent: int, killed: list[int]) -> bool:
    try:
        procs = psutil.Process(parent).children(recursive=True)
    except psutil.Error:
        return False
    for p in procs:
        try:
            if any("vllm.entrypoints.openai.api_server" in part for part in p.cmdline()):
                os.killpg(p.pid, signal.SIGKILL)        # the server and its engine core
                killed.append(p.pid)
                return True
        except psutil.Error:
            continue
    return False


def test_a_killed_replica_is_restarted_and_the_run_completes(tmp_path):
    """Why it takes minutes: two vLLM starts (the first, and the restart after the SIGKILL) while 4
    episodes wait and go on."""
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    cmd = [sys.executable, "-m", "ray_jobs.run", "benchmark=livenews", "agent=livenews_guided", "benchmark.limit=4",
           "agent.max_searches=2", "agent.max_visits=1", "agent.max_tokens_turn=160", "judge=none",
           "model.health_check_s=3", "model.unhealthy_checks=1",
           # a restart spends none of an episode's retries: none are allowed here
           "model.max_retries_per_episode=0", f"run.dir={tmp_path}", "run.progress=false"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed: list[int] = []
    killer = threading.Thread(target=_kill_server_after,
                              args=(proc.pid, tmp_path / "logs" / replica_log_name(QWEN, 0), 12.0, killed, 1))
    killer.start()
    out, err = proc.communicate(timeout=1700)
    killer.join()
    assert proc.returncode == 0, err[-4000:]
    assert len(killed) == 1, f"the vLLM server was killed {len(killed)} times, not once"

    info = json.loads(sorted(tmp_path.glob("run-*.json"))[-1].read_text())
    assert info["replica_restarts"] >= 1, info
    assert info["failures"]["replicas"].get(f"{QWEN}: replica restarted: dead", 0) >= 1, info["failures"]
    log = (tmp_path / "logs" / replica_log_name(QWEN, 0)).read_text(errors="replace")
    assert log.count("Application startup complete") >= 2           # started, killed, started
    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    eps = store.episodes().to_pylist()
    assert len(eps) == 4 and all(e["status"] == "ok" for e in eps), [e["error"][:300] for e in eps]
    raw = [r["episode_id"] for f in sorted((tmp_path / "episodes").glob("part-*.parquet"))
           for r in pq.read_table(f, columns=["episode_id"]).to_pylist()]
    assert sorted(raw) == sorted(e["episode_id"] for e in eps)
