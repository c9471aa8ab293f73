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
* watches PARENT (``getppid`` every 0.2 s; ``PR_SET_PDEATHSIG`` is not used, it fires when the
  *thread* that forked exits, not the process): when it is gone, it stops everything;
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
POLL_S = 0.2


def _set_subreaper() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):       # not Linux: the process group still covers the usual case
        return False


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="reaper")
    ap.add_argument("--parent", type=int, required=True, help="stop everything when this process is gone")
    ap.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        ap.error("no command after --")
    _set_subreaper()
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda sig, _f: stopping.append(sig))
    signal.signal(signal.SIGINT, lambda sig, _f: stopping.append(sig))
    child = subprocess.Popen(cmd)           # inherits our stdout/stderr (the replica's log) and group
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
