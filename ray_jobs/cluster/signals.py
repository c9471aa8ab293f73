"""Stopping a run on a signal: Ctrl-C at a terminal, SIGINT to the driver or its process group,
SIGTERM (Kubernetes, ``ray job stop``, ``kill``). All of them do the same thing
(``docs/design/resume.md``, "Stopping on a signal"):

* the dispatch loop stops handing out episodes; the episodes in flight are stopped with their
  workers and are not results (no row: the next run runs them);
* the store writer writes every finished row it holds (the final flush);
* the replicas and their vLLM engines stop (``Session.close``: ``ModelPool.stop``), the index and
  service actors are killed, and the local Ray cluster the driver started is shut down;
* one line on stderr says what the run's plan holds now and that the same command resumes:
  ``stopped by SIGTERM: 30 of 44 finished, 8 failed, 6 not run; the same command resumes``;
* the exit status is 128 + the signal: 130 for SIGINT, 143 for SIGTERM.

Where the handlers live. ``ray.init`` replaces Python's SIGTERM handler with one that calls
``sys.exit``, and its core worker installs a C++ failure handler (absl's) that prints a stack dump
on SIGTERM before chaining to it: so :func:`arm` installs ours when ``dateline run`` starts
(``hydra_entry``) and :func:`install` installs them again right after ``ray.init``. Ray starts its
local processes (gcs_server, raylet, dashboard and log agents) in the driver's process group with
SIGINT blocked, and its workers in process groups of their own; the replicas' vLLM servers run in
sessions of their own (``engine/hosting/reaper.py``): a SIGINT to the group (Ctrl-C) reaches the
driver alone.

What a handler does. The first signal is recorded; inside the dispatch loop (:func:`deferring`)
it only sets the flag the loop checks between iterations, so no row is lost half-handed to the
writer; anywhere else (planning, a model starting, judging, reducing) it raises
:class:`Stopped` (a ``KeyboardInterrupt``: ``except Exception`` blocks let it through, and Ray's
``ray.get`` / ``ray.wait`` turn it into a plain ``KeyboardInterrupt``) and the ``finally`` blocks
on the way out stop what was started. Later signals never raise (the stop is under way). A
watchdog thread bounds the stop: when it is not over ``DATELINE_STOP_TIMEOUT_S`` (default 20)
seconds after the first signal, or at once on a second signal (once the final flush is written),
it prints the line, SIGKILLs every process descended from the driver (Ray's, the replicas', their
reapers and engines) and exits with the same status.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

log = logging.getLogger("dateline.stop")

SIGNALS = (signal.SIGINT, signal.SIGTERM)
FLUSH_GRACE_S = 30.0          # how much longer the watchdog waits for a final flush under way
_F = TypeVar("_F", bound=Callable[..., Any])


def stop_timeout_s() -> float:
    try:
        return float(os.environ.get("DATELINE_STOP_TIMEOUT_S", "") or 20.0)
    except ValueError:
        return 20.0


class Stopped(KeyboardInterrupt):
    """The run was stopped by signal ``signum`` (raised where the signal arrived, or by the
    dispatch loop once it stopped)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def exit_code(signum: int) -> int:
    """The exit status of a run stopped by ``signum``: 128 + the signal (130 SIGINT, 143 SIGTERM)."""
    return 128 + int(signum)


@dataclass
class Tally:
    """The planned episodes of a run (every configuration of a sweep, each once) by what the
    store holds for them: ``finished`` an ok row, ``failed`` an error row, ``budget_stopped`` a
    budget_exhausted row, ``not_run`` no row (``engine.scoring.outcomes.Counts``: scored, error,
    budget-stopped, not run). Rows of earlier runs count: the store is the source of truth."""
    planned: int = 0
    finished: int = 0
    failed: int = 0
    budget_stopped: int = 0
    not_run: int = 0

    def add(self, planned_ids: list[str], status: dict[str, str]) -> None:
        for eid in planned_ids:
            s = status.get(eid)
            self.planned += 1
            if s == "ok":
                self.finished += 1
            elif s == "error":
                self.failed += 1
            elif s == "budget_exhausted":
                self.budget_stopped += 1
            else:
                self.not_run += 1


def stop_line(signum: int, tally: Tally | None) -> str:
    """The one line a stopped run prints on stderr."""
    name = signal.Signals(signum).name
    if tally is None:
        return f"stopped by {name}; the same command resumes"
    if not tally.planned:
        return f"stopped by {name} before any episode was planned; the same command starts the run"
    parts = [f"{tally.finished} of {tally.planned} finished", f"{tally.failed} failed"]
    if tally.budget_stopped:
        parts.append(f"{tally.budget_stopped} budget-stopped")
    parts.append(f"{tally.not_run} not run")
    return f"stopped by {name}: {', '.join(parts)}; the same command resumes"


@dataclass
class _State:
    armed: bool = False
    signum: int = 0                 # the first signal (0: none)
    at: float = 0.0                 # when it came (monotonic)
    signals: int = 0                # how many came
    deferred: int = 0               # > 0 inside the dispatch loop: a signal sets the flag only
    reporting: bool = False         # report() started (the main thread's or the watchdog's)
    printed: threading.Event = field(default_factory=threading.Event)      # the line is out
    tally: Callable[[], Tally] | None = None    # what the run planned, by what its stores hold (track())
    seen: dict[int, Any] = field(default_factory=dict)     # descendants met since the signal (psutil)
    wake: threading.Event = field(default_factory=threading.Event)     # the first signal, or disarm()
    cancelled: bool = False         # disarmed: the watchdog does nothing
    previous: dict[int, Any] = field(default_factory=dict)     # the handlers before arm()
    lock: threading.Lock = field(default_factory=threading.Lock)


_state = _State()


def arm() -> None:
    """Stop the run cleanly on SIGINT and SIGTERM, until :func:`disarm`. Main thread only
    (elsewhere the process's handlers stay as they are). The line a stop prints counts the planned
    episodes once the job has said what it planned (:func:`track`)."""
    global _state
    disarm()
    st = _State(armed=True)
    if threading.current_thread() is threading.main_thread():
        st.previous = {s: signal.getsignal(s) for s in SIGNALS}
        # started now, not by the handler: a handler that started a thread could deadlock on
        # threading's own lock if the signal came while the main thread held it
        threading.Thread(target=_watch, args=(st,), name="dateline-stop", daemon=True).start()
    _state = st
    install()


def track(tally: Callable[[], Tally]) -> None:
    """What a stop's line counts: ``tally()`` is called when the stop is reported and says what the
    job's stores hold for the episodes it planned. The job registers it once its points are planned
    (before that, the line says that no episode was planned). This package knows no job:
    the job hands it the count."""
    _state.tally = tally


def install() -> None:
    """(Re)install the handlers when armed: after ``ray.init``, whose SIGTERM handlers (Python's
    ``sys.exit`` and the core worker's stack dump) replace ours. A no-op for in-process callers of
    ``run()`` / ``run_sweep()`` that did not arm (tests, notebooks: their own signals stay theirs)."""
    if not _state.armed or threading.current_thread() is not threading.main_thread():
        return
    for s in SIGNALS:
        signal.signal(s, _handler)


def disarm() -> None:
    """The handlers that were there before :func:`arm` again, and a watchdog under way called off
    (a run that finished: ``main()`` also runs in process, under pytest or a notebook)."""
    global _state
    st = _state
    st.cancelled = True
    if st.armed and st.previous and threading.current_thread() is threading.main_thread():
        for s, h in st.previous.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)
    _state = _State()               # before waking the watchdog: a late signal meets the new state
    st.wake.set()


def over() -> None:
    """The run is over (its results are printed): a signal from now on is only recorded."""
    with _state.lock:
        _state.deferred += 1


def requested() -> int:
    """The signal that stops the run (0: none)."""
    return _state.signum


def check() -> None:
    """Raise :class:`Stopped` when a signal asked the run to stop."""
    if _state.signum:
        raise Stopped(_state.signum)


def deferring(fn: _F) -> _F:
    """A signal inside ``fn`` (the dispatch loop) only sets the flag: ``fn`` checks
    :func:`requested`, stops, writes what finished, and :class:`Stopped` is raised when it
    returns."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _state.lock:
            _state.deferred += 1
        try:
            out = fn(*args, **kwargs)
        finally:
            with _state.lock:
                _state.deferred -= 1
        check()
        return out
    return wrapper  # type: ignore[return-value]


def _handler(signum: int, frame: Any) -> None:
    """Record the signal; the first one raises :class:`Stopped` unless the dispatch loop defers
    it. Nothing here writes to stderr (a write interrupted by the signal would be re-entered)."""
    st = _state
    st.signals += 1
    if not st.signum:
        st.signum, st.at = signum, time.monotonic()
        st.wake.set()               # the watchdog (only it ever waits on this event)
        if not st.deferred:
            raise Stopped(signum)


def _descendants() -> list[Any]:
    import psutil  # type: ignore[import-untyped]

    try:
        return list(psutil.Process().children(recursive=True))
    except psutil.Error:
        return []


def _remember(st: _State) -> None:
    """Keep every descendant met since the signal: one whose parent dies on the way (a worker of
    a raylet that exited) is no longer found under the driver, but is still the run's."""
    for p in _descendants():
        st.seen.setdefault(p.pid, p)


def kill_leftovers(st: _State | None = None, grace_s: float = 3.0) -> int:
    """SIGTERM every process the driver started that still runs (its descendants, and those met
    under it since the signal), SIGKILL what is left after ``grace_s``; the number found."""
    import psutil

    st = st or _state
    _remember(st)
    procs = [p for p in st.seen.values() if p.is_running()]
    if not procs:
        return 0
    for p in procs:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for _ in range(20):             # a process may fork while it is killed: until none is left
        _remember(st)
        alive = [p for p in [*alive, *st.seen.values()] if p.is_running()]
        if not alive:
            break
        for p in alive:
            try:
                p.kill()
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(alive, timeout=1.0)
    return len(procs)


def report(signum: int) -> int:
    """After the run stopped: kill what it left running, print the line (once), and return the
    exit status."""
    st = _state
    if _claim(st):
        import gc

        gc.collect()                # the stopped run's objects (frames of the way out) go now, not at exit
        left = kill_leftovers(st)
        if left:
            log.info("%d process(es) of the run were still running after the stop: stopped", left)
        _print_line(st, signum)
    else:                           # the watchdog's line (it then exits)
        st.printed.wait(15.0)
    return exit_code(signum)


def _claim(st: _State) -> bool:
    """Whether this thread prints the line (the first to ask does)."""
    with st.lock:
        if st.reporting:
            return False
        st.reporting = True
        return True


def _print_line(st: _State, signum: int) -> None:
    try:
        try:
            counts: Tally | None = st.tally() if st.tally is not None else Tally()     # nothing planned yet
        except Exception as e:  # noqa: BLE001 - the line is printed whatever the store says
            log.warning("counting the stopped run's episodes: %s: %s", type(e).__name__, e)
            counts = None
        sys.stderr.write(stop_line(signum, counts) + "\n")
        sys.stderr.flush()
    finally:
        st.printed.set()


def stopped_by(e: BaseException) -> int:
    """The signal behind exception ``e`` when it is how a signal stopped the run (0: not one):
    anything raised after a signal (the stop tore down what ``e`` came from), a
    ``KeyboardInterrupt`` (Ctrl-C before the handlers were armed: SIGINT), or Ray's own SIGTERM
    handler's ``SystemExit(15)`` (a signal during ``ray.init``, before :func:`install`)."""
    if _state.signum:
        return _state.signum
    if isinstance(e, KeyboardInterrupt):
        return int(signal.SIGINT)
    if isinstance(e, SystemExit) and e.code == signal.SIGTERM and _state.armed:
        return int(signal.SIGTERM)
    return 0


def _watch(st: _State) -> None:
    """The stop's bound: on a second signal, or ``stop_timeout_s`` after the first, once the
    final flush is written (or ``FLUSH_GRACE_S`` later), print the line, kill what the run
    started and exit."""
    st.wake.wait()
    if st.cancelled:
        return
    log.warning("%s: stopping (no new episodes; the ones in flight are dropped and run again by the same "
                "command)", signal.Signals(st.signum).name)
    timeout = stop_timeout_s()
    while True:
        if st.cancelled:
            return
        _remember(st)
        now = time.monotonic()
        due = st.signals > 1 or now - st.at >= timeout
        if due and (not st.deferred or now - st.at >= timeout + FLUSH_GRACE_S):
            break
        time.sleep(0.2)
    if _claim(st):
        why = "a second signal" if st.signals > 1 else f"not stopped after {timeout:g} s (DATELINE_STOP_TIMEOUT_S)"
        log.warning("%s: killing what the run started", why)
        # the line first: once Ray's daemons are killed, the driver's core worker may end the process
        _remember(st)
        _print_line(st, st.signum)
    else:                           # the main thread prints it (or has, and is held on its way out)
        st.printed.wait(15.0)
    logging.disable(logging.CRITICAL)       # what the kill makes other threads say is not news
    _kill_now(st)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - exiting
            pass
    os._exit(exit_code(st.signum))


def _kill_now(st: _State) -> None:
    """SIGKILL every process the run started, at once (no grace: the stop is out of time)."""
    import psutil

    for _ in range(3):          # what a dying parent forked meanwhile
        _remember(st)
        alive = [p for p in st.seen.values() if p.is_running()]
        if not alive:
            return
        for p in alive:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(alive, timeout=0.5)
