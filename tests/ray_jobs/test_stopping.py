"""Stopping a run on a signal (issue 29, item 4), without Ray: the line and the exit statuses, the
counts over a run's plan from what its store holds, and the handlers (deferred inside the dispatch
loop, raising elsewhere, bounded by the watchdog) in a child process of their own. The real runs
stopped by each signal: tests/e2e/test_stop_real.py (and test_stop.py against a scripted model)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

from ray_jobs.cluster.signals import Tally, exit_code, stop_line
from tests.factories import episode_row
from tests.helpers import REPO


def test_the_line_and_the_exit_statuses():
    t = Tally(planned=44, finished=30, failed=8, not_run=6)
    assert stop_line(signal.SIGTERM, t) == "stopped by SIGTERM: 30 of 44 finished, 8 failed, 6 not run; the same command resumes"
    t = Tally(planned=10, finished=5, failed=0, budget_stopped=2, not_run=3)
    assert stop_line(signal.SIGINT, t) == ("stopped by SIGINT: 5 of 10 finished, 0 failed, 2 budget-stopped, 3 not run; "
                                           "the same command resumes")
    assert stop_line(signal.SIGINT, Tally()) == ("stopped by SIGINT before any episode was planned; the same command "
                                                 "starts the run")
    assert stop_line(signal.SIGTERM, None) == "stopped by SIGTERM; the same command resumes"
    assert (exit_code(signal.SIGINT), exit_code(signal.SIGTERM)) == (130, 143)


def test_tally_adds_up_to_the_plan():
    t = Tally()
    t.add(["a", "b", "c", "d", "e"], {"a": "ok", "b": "error", "c": "budget_exhausted", "x": "ok"})
    assert (t.planned, t.finished, t.failed, t.budget_stopped, t.not_run) == (5, 1, 1, 1, 2)
    assert t.finished + t.failed + t.budget_stopped + t.not_run == t.planned


@pytest.mark.slow
def test_tally_counts_each_configuration_of_the_run_once_from_its_store(tmp_path):
    """Rows of earlier runs count (the store is the source of truth); an ok row over an error row
    of the same episode; rows of other configurations and episodes outside the plan do not."""
    from dateline import compose
    from engine.benchmarks import get_benchmark
    from engine.protocol import dumps
    from engine.storage import EpisodeStore
    from ray_jobs.run import plan_point, resolve
    from ray_jobs.run.results import tally

    base = ["agent=newsagent_rule_based", f"run.dir={tmp_path}", "benchmark.limit=5"]
    a, b = compose(base), compose([*base, "agent.max_operations=3"])
    pta, ptb = plan_point(resolve(a)), plan_point(resolve(b))
    pa, pb = pta.plan, ptb.plan
    assert pa.config_hash != pb.config_hash and len(pa.specs) == len(pb.specs) == 5
    store = EpisodeStore(tmp_path, get_benchmark("newsagent").episode_fields)

    def row(spec, h, status):
        return episode_row("newsagent", episode_id=spec.episode_id, config_hash=h, task_id=spec.task_id, status=status,
                           error="" if status == "ok" else "GenerationError: boom", engine=dumps(pa.engine))

    sa, sb = pa.specs, pb.specs
    store.write_batch([row(sa[0], pa.config_hash, "ok"), row(sa[1], pa.config_hash, "error"),
                       row(sa[2], pa.config_hash, "error"), row(sb[0], pb.config_hash, "budget_exhausted")], [])
    store.write_batch([row(sa[2], pa.config_hash, "ok"),                       # a later run finished it
                       episode_row("newsagent", episode_id="not-planned", config_hash=pa.config_hash,
                                   engine=dumps(pa.engine))], [])
    t = tally([pta, ptb, plan_point(resolve(a))])          # the same configuration twice in a sweep counts once
    assert (t.planned, t.finished, t.failed, t.budget_stopped, t.not_run) == (10, 2, 1, 1, 6)
    assert stop_line(signal.SIGINT, t) == ("stopped by SIGINT: 2 of 10 finished, 1 failed, 1 budget-stopped, 6 not run; "
                                           "the same command resumes")


def _child(body: str, timeout: float = 60, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run ``body`` (after ``from ray_jobs import stopping``, ``os``, ``signal``, ``time`` imports) in
    a fresh interpreter; its result and how long it took."""
    import os

    code = "import os, signal, subprocess, sys, time\nfrom ray_jobs.cluster import signals as stopping\n" + textwrap.dedent(body)
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, **(env or {})})
    return p, time.monotonic() - t0


LINE = "stopped by {} before any episode was planned; the same command starts the run"


@pytest.mark.slow
def test_inside_the_dispatch_loop_a_signal_only_sets_the_flag_and_the_loop_raises_once_it_returns():
    p, _ = _child("""
        stopping.arm()
        @stopping.deferring
        def loop():
            os.kill(os.getpid(), signal.SIGTERM)
            n = 0
            while not stopping.requested():          # the handler raised nothing inside
                n += 1
                time.sleep(0.01)
            print("loop saw", stopping.requested(), flush=True)
            return n
        try:
            loop()
            print("not raised")
        except stopping.Stopped as e:
            print("raised", e.signum, isinstance(e, KeyboardInterrupt), flush=True)
        raise SystemExit(stopping.report(stopping.requested()))
    """)
    assert p.returncode == 143, p.stderr
    assert p.stdout.splitlines() == [f"loop saw {int(signal.SIGTERM)}", f"raised {int(signal.SIGTERM)} True"]
    lines = p.stderr.splitlines()
    assert lines[-1] == LINE.format("SIGTERM") and sum(LINE.format("SIGTERM") == x for x in lines) == 1
    assert "Traceback" not in p.stderr


@pytest.mark.slow
def test_elsewhere_the_first_signal_raises_and_later_ones_do_not():
    p, _ = _child("""
        stopping.arm()
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
            print("not raised")
        except KeyboardInterrupt as e:
            print("raised", type(e).__name__, flush=True)
        os.kill(os.getpid(), signal.SIGTERM)     # the stop is under way: recorded (and it hurries), never raised
        print("requested", stopping.requested(), flush=True)
        raise SystemExit(stopping.report(stopping.requested()))
    """)
    assert p.returncode == 130, p.stderr
    assert p.stdout.splitlines()[:2] == ["raised Stopped", f"requested {int(signal.SIGINT)}"]
    assert sum(x == LINE.format("SIGINT") for x in p.stderr.splitlines()) == 1, p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.slow
@pytest.mark.parametrize("how", ["second signal", "timeout"])
def test_a_stop_that_hangs_is_cut_short_and_leaves_no_process(how, tmp_path):
    """The main thread hangs after the first signal (a teardown that never returns): a second
    signal, or DATELINE_STOP_TIMEOUT_S, kills every process the run started (here a child and
    its own child, in a session of its own like a vLLM server), prints the line once and exits
    with the first signal's status."""
    pids = tmp_path / "pids"
    p, took = _child(f"""
        stopping.arm()
        child = subprocess.Popen(["bash", "-c", "sleep 300 & echo $! > {pids}; wait"], start_new_session=True)
        while not os.path.exists("{pids}") or not open("{pids}").read().strip():
            time.sleep(0.05)
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:
            pass
        if {how == "second signal"!r}:
            os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(60)                           # hung
        print("not cut short")
    """, env={"DATELINE_STOP_TIMEOUT_S": "1" if how == "timeout" else "30"})
    assert p.returncode == 130, p.stderr
    assert took < 20, took
    assert "not cut short" not in p.stdout
    assert sum(x == LINE.format("SIGINT") for x in p.stderr.splitlines()) == 1, p.stderr
    assert ("a second signal" if how == "second signal" else "not stopped after 1 s") in p.stderr
    grandchild = int(pids.read_text())
    deadline = time.monotonic() + 5
    import psutil

    while time.monotonic() < deadline and psutil.pid_exists(grandchild) \
            and psutil.Process(grandchild).status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.1)
    assert not psutil.pid_exists(grandchild) or psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE


def test_not_armed_the_handlers_are_left_alone_and_disarm_gives_them_back():
    """``run()`` / ``run_sweep()`` called in process (tests, notebooks) never take the process's
    signals: only ``dateline run`` arms, and a run that ends gives the caller's handlers back."""
    from ray_jobs.cluster import signals as stopping

    def handlers():
        return signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)

    before = handlers()
    stopping.install()
    assert handlers() == before
    assert stopping.requested() == 0
    stopping.check()                              # nothing asked: no raise
    try:
        stopping.arm()
        assert handlers() == (stopping._handler, stopping._handler)
        stopping.install()                        # after ray.init: the same handlers again
        assert handlers() == (stopping._handler, stopping._handler)
    finally:
        stopping.disarm()
    assert handlers() == before
    stopping.install()                            # disarmed: a no-op again
    assert handlers() == before
