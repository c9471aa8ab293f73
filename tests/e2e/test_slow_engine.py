"""A slow engine is never mistaken for a dead one, and a dead one never loops (issue 29).

Whole `dateline run` drivers on a hosted model whose replica runs tests/fake_vllm_server.py:

* every engine step takes 3 x ``model.stall_timeout_s`` with the token counters standing still,
  while the canary answers, or while the server's process computes and the canary waits behind
  the step: never restarted, every episode ok;
* the engine truly hangs (no token, no canary, no CPU): restarted with a doubling window, and after
  ``model.max_stall_restarts`` the model is declared failing: its episodes are left not run, the
  run exits non-zero with the diagnosis in one line, and the events are in the run dir.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.benchmarks.livenews import BENCHMARK
from engine.hosting.events import read_events
from engine.storage import EpisodeStore

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]
STALL_S = 2.0


def run(tmp_path: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "model").mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "ray_jobs.cli.main", "run", "benchmark=livenews", "agent=livenews", "benchmark.limit=2",
           "agent.max_searches=1", "agent.max_visits=1", "judge=none", "model=local_cpu", "model.name=fake",
           "model.served_name=fake", f"model.path={tmp_path / 'model'}", "model.server_module=tests.fake_vllm_server",
           f"+model.env.PYTHONPATH={REPO}", "+model.env.FAKE_VLLM_RESPONDER=tests.helpers:livenews_script",
           *(f"+model.env.{k}={v}" for k, v in env.items()),
           "model.startup_timeout_s=120", f"model.stall_timeout_s={STALL_S:g}", "model.health_check_s=1",
           "model.unhealthy_checks=1", "cluster.num_workers=1", f"run.dir={tmp_path / 'run'}", "run.progress=false",
           *extra]
    penv = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    return subprocess.run(cmd, cwd=REPO, env=penv, capture_output=True, text=True, timeout=540)


def last_info(run_dir: Path) -> dict:
    return json.loads(sorted(run_dir.glob("run-*.json"))[-1].read_text())


@pytest.mark.parametrize("signal", ["canary", "cpu"])
def test_steps_of_three_stall_windows_are_never_restarted_while_the_engine_shows_progress(tmp_path, signal):
    env = {"FAKE_VLLM_DELAY_S": f"{3 * STALL_S:g}"}
    if signal == "cpu":            # the canary waits behind the step; the process computes
        env |= {"FAKE_VLLM_BUSY": "1", "FAKE_VLLM_CANARY": "behind"}
    p = run(tmp_path, env)
    assert p.returncode == 0, p.stderr[-4000:]
    info = last_info(tmp_path / "run")
    assert info["replica_restarts"] == 0, info
    eps = EpisodeStore(tmp_path / "run", BENCHMARK.episode_fields).episodes().to_pylist()
    assert len(eps) == 2 and all(e["status"] == "ok" for e in eps), [e["error"] for e in eps]
    events = read_events(EpisodeStore(tmp_path / "run", BENCHMARK.episode_fields))
    assert [e["event"] for e in events] == ["started"], events          # no verdict other than ok, no restart


def test_a_hung_engine_is_restarted_with_a_doubling_window_then_the_model_is_declared_failing(tmp_path):
    p = run(tmp_path, {"FAKE_VLLM_WEDGE_AFTER": "0"}, "model.max_stall_restarts=2")
    assert p.returncode == 1, p.stderr[-4000:]
    last = p.stderr.strip().splitlines()[-1]
    assert "model fake is failing" in last and "wedged after 2 restart(s) in a row" in last, last
    assert "episodes not run" in last and "Change:" in last and "model.stall_timeout_s" in last, last
    store = EpisodeStore(tmp_path / "run", BENCHMARK.episode_fields)
    assert store.episodes().num_rows == 0                   # not run: nothing stored, the same command runs them
    events = read_events(store)
    restarts = [e for e in events if e["event"] == "restart"]
    assert [e["cause"] for e in restarts] == ["wedged", "wedged"]
    assert [e["window_factor"] for e in restarts] == [2.0, 4.0]
    # each verdict carries the window it was judged by: 2 s, then 4 s, then 8 s
    wedged = [e for e in events if e["event"] == "verdict" and e["verdict"] == "wedged"]
    assert [round(e["window_s"]) for e in wedged][:3] == [2, 4, 8], wedged
    assert any(e["event"] == "model_failing" for e in events)
    info = last_info(tmp_path / "run")
    assert info["not_run"] == 2 and info["failures"]["replicas"] == {
        "fake: replica restarted: wedged": 2, "fake: replica given up": 1, "fake: model failing": 1}, info["failures"]
    assert "2 x not run: model fake is failing" in p.stdout
