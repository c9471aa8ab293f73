"""A run stopped by a signal against a scripted model server (issue 29, item 4; the real model:
test_stop_real.py): Ctrl-C (SIGINT to the driver's process group) once finished episodes are
stored ends ``dateline run`` with status 130, one line on stderr with the counts the store holds,
nothing left running; the same command then finishes the run, each episode stored once."""

from __future__ import annotations

import json
import os
import signal
import sys

import pyarrow.parquet as pq
import pytest

from engine.benchmarks.newsagent import BENCHMARK
from engine.storage import EpisodeStore
from tests.e2e.test_stop_real import LINE, REPO, stop_run, stored
from tests.engine.runtime.test_agent import scripted_writer
from tests.fake_openai import FakeOpenAI

pytestmark = pytest.mark.ray
N = 12


@pytest.mark.timeout(600)
def test_ctrl_c_stops_dateline_run_and_the_same_command_finishes_it(tmp_path):
    import subprocess

    env = {**os.environ, "DATELINE_API_KEY": "sk-test", "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    with FakeOpenAI(scripted_writer, delay_s=1.0) as srv:
        argv = [sys.executable, "-m", "ray_jobs.cli.main", "run", "model=openai_compatible", f"model.base_url={srv.base_url}",
                "model.name=fake", f"run.dir={tmp_path}", f"benchmark.limit={N}", "agent.rephrase=false",
                "run.flush_interval_s=0", "cluster.episodes_per_worker=2", "cluster.num_workers=2", "run.compact=false",
                "run.progress=false"]
        r = stop_run(argv, tmp_path, signal.SIGINT, True, stored(tmp_path), 0.0, env, ready_timeout_s=300)
        err = r["err"]
        assert r["rc"] == 130 and r["took"] < 30, (r["rc"], r["took"], err[-4000:])
        lines = [x for x in err.splitlines() if x.startswith("stopped by ")]
        assert len(lines) == 1 and (m := LINE.match(lines[0])), err[-4000:]
        finished, planned, failed, not_run = (int(m.group(i)) for i in (2, 3, 4, 6))
        store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
        ok = store.finished_ids()
        assert (planned, finished, failed, not_run) == (N, len(ok), 0, N - len(ok)) and 0 < len(ok) < N, lines[0]
        assert "Traceback" not in err and "SIGTERM received" not in err, err[-4000:]
        assert not r["left"], "\n".join(r["left"])

        p = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
        assert p.returncode == 0, p.stderr[-4000:]
    info = json.loads(sorted(tmp_path.glob("run-*.json"))[-1].read_text())
    assert info["episodes_skipped"] == len(ok) and info["episodes_planned"] == N - len(ok)
    raw = [r["episode_id"] for r in pq.read_table(tmp_path / "episodes").to_pylist()]       # every shard, no dedup
    assert len(raw) == len(set(raw)) == N, "an episode was lost or stored twice"
