"""A real run stopped by each signal, then resumed (issue 29, item 4): on the real model (vLLM on
CPU, livenews, 3 episodes; the run session's shared server, ``shared_vllm``, as the run's endpoint), one
run dir, in sequence:

1. ``dateline run`` (the CLI), SIGINT to the driver alone, once episodes are in flight;
2. ``dateline run``, SIGTERM to the driver (Kubernetes, ``ray job stop``), once a finished
   episode is stored (the final flush must keep it and the next run must skip it);
3. ``python -m ray_jobs.run``: it finishes the run (exit 0, every episode ok, each stored once).

SIGINT to the driver's process group (a terminal's Ctrl-C) is checked with a scripted server in
``tests/e2e/test_stop.py``; it was a third stop here until the real tier had to fit CI's 90 minutes
on a 2-core AVX2 machine.

Each stop: the driver exits within 30 s of the signal with 130 (SIGINT) or 143 (SIGTERM), prints
on stderr exactly one line ``stopped by SIG...: F of 3 finished, E failed, N not run; the same
command resumes`` whose counts are what the store holds for the plan, no traceback, no stack dump,
no ``Aborted``, and leaves no process behind (raylet, gcs_server, Ray workers: every process seen
under the driver while it ran is gone).

The model is an endpoint here, not hosted by each run: four vLLM starts cost CI about seven minutes on
a 2-core AVX2 machine. What a stop does to a *hosted* vLLM (its reaper takes the server, EngineCore and
workers down) is checked with a vLLM-like server in ``tests/e2e/test_stop.py`` and, for the real
engine's own processes, by ``tests/e2e/test_real_lifecycle.py`` (a SIGKILLed parent leaves no
EngineCore)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[2]
QWEN = "qwen2.5-coder-0.5b-instruct"
LINE = re.compile(r"^stopped by (SIGINT|SIGTERM): (\d+) of (\d+) finished, (\d+) failed, (?:(\d+) budget-stopped, )?"
                  r"(\d+) not run; the same command resumes$")
# what a run leaves behind when it does not stop cleanly (names, or a command line holding them)
OURS = ("vllm", "VLLM", "reaper.py", "raylet", "gcs_server", "ray::", "dashboard", "log_monitor", "runtime_env")


class Descendants:
    """Every process seen under ``pid`` while it runs (polled): what the run started, including
    what later loses its parent (a worker of a raylet that exited is re-parented to init)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.seen: dict[int, psutil.Process] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for c in psutil.Process(self.pid).children(recursive=True):
                    self.seen.setdefault(c.pid, c)
            except psutil.Error:
                pass
            time.sleep(0.2)

    def names(self) -> set[str]:
        out = set()
        for p in list(self.seen.values()):
            try:
                out.add(p.name())
            except psutil.Error:
                pass
        return out

    def left(self, wait_s: float = 2.0) -> list[str]:
        """What is still running (zombies aside) ``wait_s`` after the driver exited."""
        self._stop.set()
        self._thread.join()
        deadline = time.monotonic() + wait_s
        while True:
            alive = []
            for p in self.seen.values():
                try:
                    if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                        alive.append(f"{p.pid} {p.name()} {' '.join(p.cmdline())[:160]}")
                except psutil.Error:
                    pass
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.2)


def orphans_since(t0: float, ray_tmp: str) -> list[str]:
    """Processes of the kinds a run starts, created after ``t0``, re-parented to init (or a
    subreaper) instead of ending: vLLM and reapers (only real-model tests start them, and those
    hold the real-model lock), Ray's daemons of this test session (their command lines name its
    RAY_TMPDIR)."""
    out = []
    for p in psutil.process_iter(["pid", "ppid", "name", "cmdline", "create_time"]):
        try:
            info = p.info
            cmd = " ".join(info["cmdline"] or [])
            if info["create_time"] < t0 or info["pid"] == os.getpid() or p.status() == psutil.STATUS_ZOMBIE:
                continue
            vllm = any(k in info["name"] or k in cmd for k in ("vllm", "VLLM", "reaper.py"))
            ray = ray_tmp in cmd and any(k in info["name"] or k in cmd for k in OURS)
            if (vllm or ray) and info["ppid"] == 1:
                out.append(f"{info['pid']} {info['name']} {cmd[:160]}")
        except psutil.Error:
            continue
    return out


def _count(run_dir: Path, sub: str, what: str) -> int:
    """How often ``what`` is in the replica's log (``sub="logs"``: every start of it is appended
    there), or how many shards ``sub`` holds (``what=""``)."""
    from engine.hosting.replica_actor import replica_log_name

    if sub == "logs":
        log = run_dir / "logs" / replica_log_name(QWEN, 0)
        return log.read_text(errors="replace").count(what) if log.exists() else 0
    return len(list((run_dir / sub).glob("part-*.parquet"))) if (run_dir / sub).exists() else 0


def serving(base_url: str) -> Any:
    """A readiness for ``stop_run``: once the shared server has a request running or waiting, i.e.
    this run's episodes are calling the model (nothing else uses the server meanwhile)."""
    import httpx

    from engine.hosting.liveness import RUNNING, WAITING

    def ready(_run_dir: Path) -> bool:
        try:
            text = httpx.get(base_url.removesuffix("/v1") + "/metrics", timeout=5).text
        except httpx.HTTPError:
            return False
        return any(line.startswith((RUNNING, WAITING)) and float(line.rsplit(" ", 1)[1]) > 0
                   for line in text.splitlines())

    return lambda _run_dir: ready


def stored(run_dir: Path) -> Any:
    """Ready once this run stored a finished episode (one more episodes shard than now)."""
    before = _count(run_dir, "episodes", "")
    return lambda d: _count(d, "episodes", "") > before


LIMIT = 3      # episodes: two stops find some in flight, the third run finishes them (was 4: CI's time)


def store_counts(overrides: list[str]) -> tuple[int, int, int, int]:
    """(planned, ok, error, no row) of the run's plan, from its store."""
    from dateline import compose
    from engine.benchmarks import get_benchmark
    from engine.storage import EpisodeStore
    from ray_jobs.run import plan, resolve, run_dir

    cfg = compose(overrides)
    p = plan(resolve(cfg))
    rows = EpisodeStore(run_dir(cfg), get_benchmark(cfg.benchmark.name).episode_fields).episodes(
        ["episode_id", "status"], config_hash=p.config_hash).to_pylist()
    status = {r["episode_id"]: r["status"] for r in rows}
    ids = [s.episode_id for s in p.specs]
    return (len(ids), sum(status.get(i) == "ok" for i in ids), sum(status.get(i) == "error" for i in ids),
            sum(i not in status for i in ids))


def stop_run(argv: list[str], run_dir: Path, sig: int, group: bool, ready: Any, extra_s: float,
             env: dict[str, str], ready_timeout_s: float = 900) -> dict[str, Any]:
    """Start the driver (its own session), wait for ``ready(run_dir)`` and ``extra_s`` more, send
    ``sig`` (to its process group when ``group``), and report how it ended."""
    t_start = time.time()
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    tree = Descendants(proc.pid)
    out_err: dict[str, str] = {}

    def drain() -> None:        # pipes read while it runs: a full pipe would block the driver
        out_err["out"], out_err["err"] = proc.communicate()
    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    deadline = time.monotonic() + ready_timeout_s
    while proc.poll() is None and not ready(run_dir) and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(extra_s)
    assert proc.poll() is None, f"the run ended before the signal: {proc.returncode}"
    names = tree.names()
    t0 = time.monotonic()
    if group:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    took = time.monotonic() - t0
    reader.join(timeout=30)
    return {"rc": proc.returncode, "took": took, "err": out_err.get("err", ""), "out": out_err.get("out", ""),
            "names": names, "left": tree.left(), "orphans": orphans_since(t_start, os.environ["RAY_TMPDIR"])}


@pytest.mark.real
@pytest.mark.ray
@pytest.mark.timeout(2400)
def test_sigint_and_sigterm_stop_a_real_run_and_the_same_command_finishes_it(tmp_path, shared_vllm):
    """Why it takes minutes: three real runs in a row, each starting Ray (two stopped once episodes
    are in flight, and the one that finishes the run), with real decoding on CPU."""
    overrides = ["benchmark=livenews", "agent=livenews_guided", f"benchmark.limit={LIMIT}", "agent.max_searches=2",
                 "agent.max_visits=1", "agent.max_tokens_turn=160", "judge=none", f"run.dir={tmp_path}",
                 "model=openai_compatible", f"model.base_url={shared_vllm.base_url}", f"model.name={shared_vllm.model}",
                 "model.api_key_env=", "run.progress=false", "run.flush_interval_s=0"]  # a finished episode is stored at once
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    cli = [sys.executable, "-m", "ray_jobs.cli.main", "run", *overrides]          # what the `dateline` script runs
    module = [sys.executable, "-m", "ray_jobs.run", *overrides]
    stops = [(cli, signal.SIGINT, False, serving(shared_vllm.base_url), 3.0),
             (cli, signal.SIGTERM, False, stored, 0.0)]
    timings = []
    for argv, sig, group, ready, extra in stops:
        r = stop_run(argv, tmp_path, sig, group, ready(tmp_path), extra, env)
        what = f"{signal.Signals(sig).name}{' to the group' if group else ''} ({argv[2]}): "
        err = r["err"]
        assert r["rc"] == 128 + sig, what + err[-4000:]
        assert r["took"] < 30, what + f"{r['took']:.1f} s\n" + err[-4000:]
        assert {"raylet", "gcs_server"} <= r["names"], what + f"the signal came before Ray ran: {sorted(r['names'])}"
        lines = [x for x in err.splitlines() if x.startswith("stopped by ")]
        assert len(lines) == 1, what + err[-4000:]
        m = LINE.match(lines[0])
        assert m and m.group(1) == signal.Signals(sig).name, lines[0]
        finished, planned, failed, budget, not_run = (int(m.group(i) or 0) for i in (2, 3, 4, 5, 6))
        assert (planned, finished, failed, not_run) == store_counts(overrides) and not budget, lines[0]
        for bad in ("Traceback", "Aborted", "SIGTERM received", "Fatal Python error", "core dumped"):
            assert bad not in err, what + f"{bad!r} on stderr:\n" + err[-6000:]
        assert not r["left"], what + "left behind:\n" + "\n".join(r["left"])
        assert not r["orphans"], what + "left behind:\n" + "\n".join(r["orphans"])
        timings.append((what, round(r["took"], 1), lines[0]))
        if sig == signal.SIGTERM:
            assert finished >= 1, "a finished episode was stored before the signal, and the stop keeps it"
    print("\n".join(f"{w}{t} s: {line}" for w, t, line in timings))

    kept = store_counts(overrides)[1]
    p = subprocess.run(module, cwd=REPO, env=env, capture_output=True, text=True, timeout=1500)
    assert p.returncode == 0, p.stderr[-4000:]
    info = json.loads(sorted(tmp_path.glob("run-*.json"))[-1].read_text())
    assert info["episodes_skipped"] == kept and info["episodes_planned"] == LIMIT - kept, info
    from engine.benchmarks.livenews import BENCHMARK
    from engine.storage import EpisodeStore

    eps = EpisodeStore(tmp_path, BENCHMARK.episode_fields).episodes().to_pylist()
    assert len(eps) == LIMIT and all(e["status"] == "ok" for e in eps), [e["error"][:300] for e in eps]
    raw = [r["episode_id"] for f in sorted((tmp_path / "episodes").glob("part-*.parquet"))
           for r in pq.read_table(f, columns=["episode_id"]).to_pylist()]
    assert sorted(raw) == sorted(e["episode_id"] for e in eps), "an episode was stored twice"
