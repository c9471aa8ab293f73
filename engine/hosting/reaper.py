"""Run a server so that nothing of it outlives the process that started it.

``python reaper.py --parent PID --grace S -- CMD...`` (run by path: standard library only, so it
needs nothing importable from the repo). The replica actor (:mod:`engine.hosting.replica`) starts
every vLLM server through it, in a new session. vLLM's API server spawns an EngineCore process and,
with tensor parallelism, one worker per GPU; when the actor dies without stopping its server (OOM
killer, SIGKILL, a lost raylet) those used to stay, holding the GPUs, and the restarted actor's
server failed its memory check (vLLM's orphan-process problem). The reaper:

* starts CMD as its child, in its own process group, and marks itself a *child subreaper*
  (``PR_SET_CHILD_SUBREAPER``), so descendants that lose their parent, or leave the process group
  with ``setsid``, are re-parented to it instead of to init: it can always find them;
* watches PARENT (``getppid`` every 0.2 s; ``PR_SET_PDEATHSIG`` is not used there, it fires when
  the *thread* that forked exits, not the process): when it is gone, it stops everything;
* gives CMD ``PR_SET_PDEATHSIG`` = SIGTERM (the reaper is one thread, so it fires when the reaper
  dies): a reaper SIGKILLed itself (Ray's raylet kills what a dead worker leaves) takes the server
  with it, and vLLM's SIGTERM stops its EngineCore;
* on SIGTERM/SIGINT (the actor's ``stop``), or when CMD exits by itself, it stops everything too;
* stopping: SIGTERM to every descendant, ``GRACE`` seconds for them to exit (vLLM frees its GPUs on
  SIGTERM), then SIGKILL to whatever is left, and every zombie reaped;
* exits with CMD's exit code (128 + signal when it was stopped).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
PR_SET_PDEATHSIG = 1
POLL_S = 0.2


def _set_subreaper() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):       # not Linux: the process group still covers the usual case
        return False


def _term_when_reaper_dies(reaper: int) -> None:
    """In the server's process, before exec: SIGTERM when the reaper dies. The reaper is one thread,
    so ``PR_SET_PDEATHSIG`` fires when it does. Ray's raylet SIGKILLs what its dead workers leave
    (``RAY_kill_child_processes_on_worker_exit``): the reaper, never the server in its own session,
    which then lived on re-parented to init, EngineCore and all, holding its memory or GPU."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != reaper:              # it died before the call above
        os.kill(os.getpid(), signal.SIGTERM)


def _children() -> dict[int, list[int]]:
    """Every live process's children, from ``/proc`` (pid -> child pids)."""
    out: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ")"
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) >= 2:
            out.setdefault(int(fields[1]), []).append(int(name))
    return out


def descendants(pid: int) -> list[int]:
    """Every descendant of ``pid`` (children first)."""
    tree, out, todo = _children(), [], [pid]
    while todo:
        for c in tree.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _signal_all(pids: list[int], sig: int) -> None:
    for p in pids:
        try:
            os.kill(p, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def stop_all(child: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM every descendant, wait up to ``grace_s`` for them to go, SIGKILL the rest."""
    me = os.getpid()
    _signal_all(descendants(me), signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        child.poll()
        _reap()
        if not descendants(me):
            return
        time.sleep(0.1)
    for _ in range(50):                     # a process may fork while being killed: until none is left
        left = descendants(me)
        if not left:
            return
        _signal_all(left, signal.SIGKILL)
        time.sleep(0.05)
        child.poll()
        _reap()


def set_niceness(nice: int) -> int:
    """Set this process's niceness (the server inherits it) and return the one it runs at. Ray
    starts every worker, a replica's actor included, at niceness 15 (``RAY_worker_niceness``): a
    model server computing on the CPU then got about 3% of a core beside any busy process at 0.
    Lowering it needs ``CAP_SYS_NICE`` (or ``RLIMIT_NICE``); without, it stays and says so."""
    now = os.getpriority(os.PRIO_PROCESS, 0)
    if now != nice:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, nice)
        except OSError as e:
            print(f"reaper {os.getpid()}: the server keeps niceness {now}, not {nice}: {e} "
                  f"(start Ray's nodes with RAY_worker_niceness={nice}, or grant CAP_SYS_NICE)", flush=True)
    return os.getpriority(os.PRIO_PROCESS, 0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="reaper")
    ap.add_argument("--parent", type=int, required=True, help="stop everything when this process is gone")
    ap.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")
    ap.add_argument("--nice", type=int, default=None,
                    help="run the server at this niceness (Ray starts its workers at 15)")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        ap.error("no command after --")
    _set_subreaper()
    if a.nice is not None:
        set_niceness(a.nice)
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda sig, _f: stopping.append(sig))
    signal.signal(signal.SIGINT, lambda sig, _f: stopping.append(sig))
    me = os.getpid()
    # inherits our stdout/stderr (the replica's log) and group; SIGTERM (vLLM's clean shutdown,
    # EngineCore included) if the reaper is SIGKILLed
    child = subprocess.Popen(cmd, preexec_fn=lambda: _term_when_reaper_dies(me))
    print(f"reaper {os.getpid()}: server {child.pid} (parent {a.parent})", flush=True)
    code: int | None = None
    while code is None:
        code = child.poll()
        if code is not None:
            break
        if stopping:
            code = 128 + stopping[0]
            break
        if os.getppid() != a.parent:
            print(f"reaper {os.getpid()}: parent {a.parent} is gone: stopping server {child.pid}", flush=True)
            code = 128 + signal.SIGTERM
            break
        time.sleep(POLL_S)
    stop_all(child, a.grace)
    return code if code >= 0 else 128 - code      # Popen: -N for "killed by signal N"


if __name__ == "__main__":
    sys.exit(main())
