"""The real driver (Hydra, Ray, index actor, workers, Parquet) against a scripted model server:
kill it mid-run, run the same command again, and check nothing is lost or duplicated."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from engine.benchmarks.newsagent import BENCHMARK
from engine.storage import EpisodeStore
from tests.engine.runtime.test_agent import scripted_writer
from tests.fake_openai import FakeOpenAI

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.ray            # every test drives `dateline run`
SECRET = "sk-test-never-written-anywhere"
N = 16


def driver(base_url: str, run_dir: Path, extra: list[str] = ()) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "ray_jobs.run", "model=openai_compatible", f"model.base_url={base_url}",
           "model.name=fake", f"run.dir={run_dir}", f"benchmark.limit={N}", "agent.rephrase=false",
           "run.flush_interval_s=0", "cluster.episodes_per_worker=2", "cluster.num_workers=2", "run.compact=false",
           *extra]
    env = {**os.environ, "DATELINE_API_KEY": SECRET, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, text=True)


def shards(run_dir: Path) -> int:
    return len(list((run_dir / "episodes").glob("part-*.parquet"))) if (run_dir / "episodes").exists() else 0


@pytest.mark.timeout(600)
def test_kill_and_resume(tmp_path):
    run_dir = tmp_path / "run"
    with FakeOpenAI(scripted_writer, delay_s=1.0) as srv:
        p = driver(srv.base_url, run_dir)
        deadline = time.time() + 300
        while shards(run_dir) < 1 and time.time() < deadline and p.poll() is None:
            time.sleep(0.05)
        assert p.poll() is None, "driver finished before it could be killed:\n" + p.stdout.read()
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        store = EpisodeStore(run_dir, BENCHMARK.episode_fields)
        first = store.finished_ids()
        assert 0 < len(first) < N

        p2 = driver(srv.base_url, run_dir)
        out, _ = p2.communicate(timeout=400)
        assert p2.returncode == 0, out
    runs = sorted(run_dir.glob("run-*.json"))
    info = json.loads(runs[-1].read_text())
    assert info["episodes_total"] == N and info["episodes_skipped"] == len(first)
    assert info["episodes_planned"] == N - len(first)

    raw = pq.read_table(run_dir / "episodes").to_pylist()                   # every shard, no dedup
    ids = [r["episode_id"] for r in raw]
    assert len(ids) == len(set(ids)) == N, "an episode was lost or written twice"
    steps = store.steps().to_pylist()
    per_ep: dict[str, list[int]] = {}
    for s in steps:
        per_ep.setdefault(s["episode_id"], []).append(s["step"])
    for r in store.episodes().to_pylist():
        assert sorted(per_ep[r["episode_id"]]) == list(range(r["n_steps"]))

    # a third run re-runs nothing and does not start Ray
    with FakeOpenAI(scripted_writer) as srv:
        p3 = driver(srv.base_url, run_dir)
        out, _ = p3.communicate(timeout=120)
        assert p3.returncode == 0 and srv.requests == []
    assert f"{N} episodes reused, 0 run" in out

    for f in run_dir.rglob("*"):
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f"API key written to {f}"


@pytest.mark.timeout(300)
def test_max_failures_stops_planning_new_episodes(tmp_path):
    """An endpoint that is down: each episode is an error row; the run stops after max_failures."""
    run_dir = tmp_path / "run"
    p = driver("http://127.0.0.1:9/v1", run_dir, ["run.max_failures=2", "cluster.num_workers=1",
                                                   "cluster.episodes_per_worker=1", "model.max_retries=0"])
    out, _ = p.communicate(timeout=280)
    assert p.returncode == 1, out                   # a run that stopped at max_failures is not a success
    eps = EpisodeStore(run_dir, BENCHMARK.episode_fields).episodes().to_pylist()
    assert len(eps) == 2 and all(e["status"] == "error" and "GenerationError" in e["error"] for e in eps)
    assert "stopping: 2 episodes failed" in out
    assert "[endpoint fake at http://127.0.0.1:9]" in eps[0]["error"]     # the error names where it went
