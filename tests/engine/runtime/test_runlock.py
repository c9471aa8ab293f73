"""One writer per run dir (``engine/runtime/runlock.py``), and a full disk during a shard write.

* a second driver (another process holding the lock) gets a clear error naming host and pid,
  before anything is written; the lock is released at the end of a run;
* stale locks are taken over: a dead pid on this host, an old heartbeat from another host, a
  corrupt lock file; a live holder on another host with a fresh heartbeat is respected;
* a shard write that runs out of space (a size-limited file: ``RLIMIT_FSIZE`` in a child
  process, the kernel's EFBIG) leaves no partial shard, the store stays readable with what it
  had, and writing resumes once there is room.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from engine.runtime.runlock import LOCK_NAME, RunDirLock, RunDirLocked, stale_reason

REPO = Path(__file__).resolve().parents[3]


def _holder(tmp_path: Path) -> subprocess.Popen[str]:
    """Another driver: a process that takes the lock and waits."""
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO)!r})
        from engine.runtime.runlock import RunDirLock
        with RunDirLock({str(tmp_path)!r}, "dateline run (other)"):
            print("held", flush=True)
            time.sleep(120)
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    return p


@pytest.mark.slow
def test_second_driver_gets_a_clear_error_naming_the_holder(tmp_path):
    p = _holder(tmp_path)
    try:
        with pytest.raises(RunDirLocked) as e:
            RunDirLock(tmp_path).acquire()
        msg = str(e.value)
        assert f"pid {p.pid}" in msg and socket.gethostname() in msg and "dateline run (other)" in msg
        assert LOCK_NAME in msg and "delete the lock file" in msg
    finally:
        p.kill()
        p.wait()
    # the holder was killed (no release): its lock is stale now and is taken over
    with RunDirLock(tmp_path) as lock:
        assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
        with RunDirLock(tmp_path) as again:            # re-entrant in one process (a sweep's points)
            assert again is lock
        assert (tmp_path / LOCK_NAME).exists()
    assert not (tmp_path / LOCK_NAME).exists()


@pytest.mark.ray
def test_run_refuses_a_locked_run_dir_before_writing(tmp_path):
    from ray_jobs.config.compose import compose
    from ray_jobs.run import run

    p = _holder(tmp_path)
    try:
        cfg = compose(["benchmark=newsagent", "agent=newsagent_rule_based", "benchmark.limit=1",
                       f"run.dir={tmp_path}", "run.progress=false"])
        with pytest.raises(RunDirLocked, match=f"pid {p.pid}"):
            run(cfg)
        assert sorted(x.name for x in tmp_path.iterdir()) == [LOCK_NAME]        # nothing written
    finally:
        p.kill()
        p.wait()
    info = run(cfg)                                   # the holder is gone: its stale lock is taken over
    assert info["episodes_planned"] == 1 and not (tmp_path / LOCK_NAME).exists()      # and released


@pytest.mark.parametrize("holder,age,stale", [
    ({"host": "elsewhere", "pid": 1}, 1000, "heartbeat is"),
    ({"host": "elsewhere", "pid": 1}, 0, ""),                                    # live on another host
    ({"host": socket.gethostname(), "pid": os.getpid()}, 1000, "heartbeat is"),
    ({"host": socket.gethostname(), "pid": os.getpid()}, 0, ""),
    ({"host": socket.gethostname(), "pid": 0}, 0, "is gone"),
])
def test_stale_reasons(holder, age, stale):
    why = stale_reason(dict(holder, heartbeat=time.time() - age), stale_s=180)
    assert (stale in why) if stale else why == ""


def test_stale_and_corrupt_locks_are_taken_over_live_ones_are_not(tmp_path, caplog):
    lock = tmp_path / LOCK_NAME
    lock.write_text(json.dumps({"host": "node-7", "pid": 4242, "since": time.time() - 2000,
                                "heartbeat": time.time() - 1000, "token": "x"}))
    with RunDirLock(tmp_path):
        assert json.loads(lock.read_text())["host"] == socket.gethostname()
    assert "node-7" in caplog.text and "taking over" in caplog.text
    lock.write_text("{not json")
    with RunDirLock(tmp_path):
        pass
    lock.write_text(json.dumps({"host": "node-7", "pid": 4242, "since": time.time(), "heartbeat": time.time()}))
    with pytest.raises(RunDirLocked, match="node-7"):
        RunDirLock(tmp_path).acquire()


def test_heartbeat_keeps_the_lock_fresh(tmp_path):
    with RunDirLock(tmp_path, heartbeat_s=0.05):
        first = json.loads((tmp_path / LOCK_NAME).read_text())["heartbeat"]
        time.sleep(0.3)
        rec = json.loads((tmp_path / LOCK_NAME).read_text())
        assert rec["heartbeat"] > first and rec["since"] < rec["heartbeat"]


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE / EFBIG semantics")
def test_disk_full_during_a_shard_write_leaves_the_store_readable_and_resumable(tmp_path):
    from engine.storage import EpisodeStore
    from tests.engine.storage.test_storage import ep as episode_row

    store = EpisodeStore(tmp_path)
    store.write_batch([episode_row("e0")], [])
    # a child process whose files may not grow past 64 KiB writes a large batch: the kernel
    # refuses the write (EFBIG, as a full disk refuses with ENOSPC)
    code = textwrap.dedent(f"""
        import resource, signal, sys
        sys.path.insert(0, {str(REPO)!r})
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))
        from engine.storage import EpisodeStore
        from tests.engine.storage.test_storage import ep as episode_row
        import os
        rows = [dict(episode_row(f"big{{i}}"), output=os.urandom(4000).hex()) for i in range(200)]
        try:
            EpisodeStore({str(tmp_path)!r}).write_batch(rows, [])
        except OSError as e:
            print("OSError", e.errno)
        else:
            print("written")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.stdout.strip().startswith("OSError"), out.stdout + out.stderr
    assert not list((tmp_path / "_staging").iterdir())                 # no partial shard left
    assert [e["episode_id"] for e in EpisodeStore(tmp_path).episodes().to_pylist()] == ["e0"]
    store.write_batch([episode_row("e1")], [])                          # room again: writing resumes
    assert sorted(EpisodeStore(tmp_path).finished_ids()) == ["e0", "e1"]


@pytest.mark.ray
def test_driver_keeps_rows_it_could_not_write_and_stops_clearly_if_it_never_can(tmp_path, monkeypatch):
    """The driver's flush meets a full disk: the rows stay in memory and the next flush writes
    them (nothing lost); when the last flush still fails the run stops with StoreWriteError
    naming the run dir, and the same command afterwards runs the unwritten episodes."""
    import errno

    from engine.errors import StoreWriteError
    from engine.storage import EpisodeStore
    from ray_jobs.config.compose import compose
    from ray_jobs.run import run

    real = EpisodeStore.write_batch
    failures = {"left": 1}

    def flaky(self, episodes, steps, *transcripts):
        if failures["left"] and episodes:
            failures["left"] -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, episodes, steps, *transcripts)

    monkeypatch.setattr(EpisodeStore, "write_batch", flaky)
    cfg = compose(["benchmark=newsagent", "agent=newsagent_rule_based", "benchmark.limit=3", f"run.dir={tmp_path}",
                   "run.progress=false", "run.flush_interval_s=0.5"])
    run(cfg)
    assert len(EpisodeStore(tmp_path).finished_ids()) == 3          # the failed flush was retried

    failures["left"] = 10**6                                          # the disk stays full
    cfg2 = compose(["benchmark=newsagent", "agent=newsagent_rule_based", "benchmark.limit=5", f"run.dir={tmp_path}",
                    "run.progress=false", "run.flush_interval_s=0.5"])
    with pytest.raises(StoreWriteError, match=f"could not write 2 finished episodes to run dir {tmp_path}"):
        run(cfg2)
    assert len(EpisodeStore(tmp_path).finished_ids()) == 3          # readable, as it was
    failures["left"] = 0
    info = run(cfg2)                                                  # room again: the 2 run again
    assert info["episodes_planned"] == 2 and len(EpisodeStore(tmp_path).finished_ids()) == 5
