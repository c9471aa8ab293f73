"""Running one snippet in an episode folder, and everything it started dying with it.

``run_python`` is one run: the command (``bwrap.bwrap_command``, or the audit hook alone) with the
seccomp program on a pipe, a cgroup for the tree where one can be made, the child's set-up between
fork and exec (cgroup first, rlimits, a root worker's views and its drop to the snippet's uid), the
supervision loop (the timeout, and the folder's disk quota checked every 20-500 ms), the teardown
in a ``finally`` that kills the whole tree (cgroup, process group, uid), and the ``RunResult`` with
the sandbox's notes. stdout and stderr are read as they stream, with a byte cap (``_Capped``).
"""

from __future__ import annotations

import collections
import logging
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from engine.sandbox import cgroup, seccomp
from engine.sandbox.bwrap import bwrap_command
from engine.sandbox.folder import EpisodeFolder
from engine.sandbox.guard import GUARD
from engine.sandbox.limits import Limits, RunResult
from engine.sandbox.uids import VIEWS, kill_uid, procs_of, views_preexec

log = logging.getLogger(__name__)


class _Capped:
    """Reads a stream to its end in a thread, holding at most ``cap`` bytes: the first half, and
    the last half as it streams; everything is counted."""

    def __init__(self, stream: IO[bytes], cap: int) -> None:
        self.stream, self.half = stream, max(1, cap // 2)
        self.head = bytearray()
        self.tail: collections.deque[bytes] = collections.deque()
        self.tail_bytes = 0
        self.total = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        read = getattr(self.stream, "read1", self.stream.read)
        while chunk := read(65536):
            self.total += len(chunk)
            room = self.half - len(self.head)
            if room > 0:
                self.head += chunk[:room]
                chunk = chunk[room:]
            if chunk:
                self.tail.append(chunk)
                self.tail_bytes += len(chunk)
                while self.tail_bytes - len(self.tail[0]) >= self.half:
                    self.tail_bytes -= len(self.tail.popleft())

    def text(self) -> str:
        tail = b"".join(self.tail)[-self.half:]
        kept = len(self.head) + len(tail)
        cut = f"\n[... {self.total - kept:,} bytes not kept ...]\n".encode() if self.total > kept else b""
        return (bytes(self.head) + cut + tail).decode("utf-8", "replace")



@dataclass
class _Stops:
    """Why the sandbox stopped a run (each one makes it not ok)."""

    timed_out: bool = False
    disk_exceeded: bool = False
    supervision_error: str = ""      # the supervisor failed (the tree was killed all the same)


def run_python(folder: EpisodeFolder, code: str, isolation: str) -> tuple[RunResult, str | None]:
    """Run one snippet in ``folder`` (blocking: call it from a thread in async code); returns its
    result and the cgroup version its tree ran in ("v1", "v2", or None: no cgroup). Whatever
    happens while it runs, the whole tree is dead and reaped when this returns or raises: the tree
    is killed in a ``finally`` through its cgroup (where one can be made: the kernel also holds its
    memory and process count), its process group, and (a root worker) its uid."""
    lim = folder.limits
    before = folder.entries()
    uid = folder.owner if folder.owner is not None else os.getuid()
    if folder.owner is not None:
        kill_uid(folder.owner)               # nothing of an earlier snippet may see this one start
    cmd, env, fds, views = _command(folder, isolation)
    nproc = lim.max_procs if folder.owner is not None else procs_of(uid) + lim.max_procs
    cg = _cgroup(uid, lim)
    preexec = _preexec(lim, cg, views, uid if folder.owner is not None else None, nproc)
    t0 = time.monotonic()
    proc: subprocess.Popen[bytes] | None = None
    out = err = None
    stops = _Stops()
    usage = None
    try:
        proc = _launch(cmd, env, fds, preexec, "/" if isolation == "bwrap" else folder.root)
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        out, err = _Capped(proc.stdout, lim.output_bytes), _Capped(proc.stderr, lim.output_bytes)
        try:
            proc.stdin.write(code.encode("utf-8", "surrogateescape"))
            proc.stdin.close()
        except BrokenPipeError:
            pass
        _supervise(folder, proc, cg, t0, stops)
    finally:
        _kill_tree(folder, proc, cg)
        if cg is not None:
            try:
                usage = cg.usage()
            finally:
                cg.close()
    assert proc is not None and out is not None and err is not None
    return _result(folder, proc, out, err, before, t0, stops, usage), cg.version if cg is not None else None


def _command(folder: EpisodeFolder, isolation: str) -> tuple[list[str], dict[str, str], list[int], list[str] | None]:
    """The launcher's command line and environment, the descriptors it inherits (the seccomp
    program's pipe), and, for a root worker under bwrap, the list of bind sources its child binds
    at ``VIEWS/<i>`` (None otherwise)."""
    if isolation != "bwrap":
        folder.mkdir(".tmp")
        scratch = folder.root / ".tmp"
        env = {"PATH": "/usr/bin:/bin", "HOME": str(folder.root), "MPLBACKEND": "Agg", "LANG": "C.UTF-8",
               "TMPDIR": str(scratch), "MPLCONFIGDIR": str(scratch), "PYTHONDONTWRITEBYTECODE": "1",
               "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
        return [sys.executable, "-I", "-B", "-c", GUARD, "audit_unsafe", str(folder.root)], env, [], None
    views: list[str] | None = None
    if os.geteuid() == 0:
        views = []
        os.makedirs(VIEWS, mode=0o755, exist_ok=True)
    read_fd = None
    fds: list[int] = []
    program = seccomp.program()
    if program is not None:
        read_fd, write_fd = os.pipe()
        os.write(write_fd, program)
        os.close(write_fd)
        fds.append(read_fd)
    cmd = bwrap_command(folder.root, folder.limits, read_fd, views)
    return cmd, {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, fds, views


def _cgroup(uid: int, lim: Limits) -> cgroup.SnippetCgroup | None:
    """A cgroup for the snippet's tree, where this machine can make one."""
    if cgroup.cgroup_support()[0] is None:
        return None
    try:
        return cgroup.SnippetCgroup.create(f"{uid}", lim.memory_mb * 1024 * 1024, lim.max_procs)
    except cgroup.CgroupUnavailable as e:
        log.warning("sandbox: no cgroup for this snippet (%s): memory and processes are limited per "
                    "process only", e)
        return None


def _preexec(lim: Limits, cg: cgroup.SnippetCgroup | None, views: list[str] | None, drop_to: int | None,
             nproc: int) -> Callable[[], None]:
    """What the child does between fork and exec, still as the worker: join the cgroup (first:
    everything it starts is in it), set its rlimits, (a root worker) bind its views and drop to
    the snippet's uid ``drop_to``, then cap the processes of that uid."""
    def preexec() -> None:
        if cg is not None:
            cg.attach_self()                 # first, as root: everything it starts is in it
        mem = lim.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        cpu = int(lim.timeout_s) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        size = lim.max_file_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if views is not None:
            views_preexec(views)
        if drop_to is not None:             # an unprivileged uid of its own, then bwrap maps it
            os.setgroups([])
            os.setgid(drop_to)
            os.setuid(drop_to)
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    return preexec


def _launch(cmd: list[str], env: dict[str, str], fds: list[int], preexec: Callable[[], None],
            cwd: str | Path) -> subprocess.Popen[bytes]:
    """Start the launcher in a session of its own; the inherited descriptors are closed here
    whether it starts or not."""
    try:
        return subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, preexec_fn=preexec, start_new_session=True,
                                pass_fds=tuple(fds))
    finally:
        for fd in fds:
            os.close(fd)


def _supervise(folder: EpisodeFolder, proc: subprocess.Popen[bytes], cg: cgroup.SnippetCgroup | None,
               t0: float, stops: _Stops) -> None:
    """Wait for the snippet; stop waiting at its timeout, when the folder goes over its quota, or
    when a check fails (``stops`` says which). The quota check walks the folder: on a big folder
    it runs less often (at most ~20% of a core), never less than twice a second."""
    lim = folder.limits
    quota = lim.disk_mb * 1024 * 1024
    interval = next_check = 0.0
    while proc.poll() is None:
        now = time.monotonic()
        if now - t0 > lim.timeout_s:
            stops.timed_out = True
            return
        if now >= next_check:
            try:
                c0 = time.monotonic()
                u = folder.usage(_tree_pids(proc, cg))
                interval = min(0.5, max(0.02, 4 * (time.monotonic() - c0)))
            except Exception as e:  # noqa: BLE001 - a failed check stops the snippet, never the supervision
                stops.supervision_error = f"{type(e).__name__}: {e}"
                return
            next_check = now + interval
            if u.bytes > quota or u.truncated:
                stops.disk_exceeded = True
                return
        time.sleep(0.005)


def _result(folder: EpisodeFolder, proc: subprocess.Popen[bytes], out: _Capped, err: _Capped, before: set[str],
            t0: float, stops: _Stops, usage: cgroup.TreeUsage | None) -> RunResult:
    """The run's result once its tree is dead: the readers finish, the folder is checked against
    its quota once more, what a stopped run added is removed, and stderr gets the sandbox's notes."""
    for r in (out, err):
        r.thread.join(timeout=5)
        if r.thread.is_alive():            # a process outside the tree holds the pipe: stop reading
            r.stream.close()
    seconds = time.monotonic() - t0
    lim = folder.limits
    try:
        after = folder.usage()
        if after.bytes > lim.disk_mb * 1024 * 1024 or after.truncated:
            stops.disk_exceeded = True
    except Exception as e:  # noqa: BLE001
        stops.supervision_error = stops.supervision_error or f"{type(e).__name__}: {e}"
    stderr = err.text()
    if stops.disk_exceeded or stops.supervision_error:   # what this run added goes
        folder.remove_added(before)
    new = sorted(set(folder.files()) - before) if not stops.supervision_error else []
    memory_exceeded = bool(usage and (usage.oom_kills or usage.memory_limit_hit))
    stderr += _notes(lim, stops, memory_exceeded, usage)
    return RunResult(ok=proc.returncode == 0 and not (stops.timed_out or stops.disk_exceeded or memory_exceeded
                                                      or stops.supervision_error),
                     returncode=proc.returncode, stdout=out.text(), stderr=stderr, timed_out=stops.timed_out,
                     seconds=seconds, new_files=new, disk_exceeded=stops.disk_exceeded,
                     output_bytes={"stdout": out.total, "stderr": err.total}, memory_exceeded=memory_exceeded,
                     peak_memory_mb=(usage.peak_memory_bytes / 2**20 if usage and usage.peak_memory_bytes
                                     else None),
                     supervision_error=stops.supervision_error)


def _notes(lim: Limits, stops: _Stops, memory_exceeded: bool, usage: cgroup.TreeUsage | None) -> str:
    """What the sandbox adds to the snippet's stderr about why it stopped it."""
    notes = ""
    if stops.disk_exceeded:
        notes += (f"\nsandbox: the episode folder went over its disk quota of {lim.disk_mb} MB or "
                  f"{lim.max_entries:,} entries: the run was stopped and what it added was removed")
    elif memory_exceeded:
        notes += (f"\nsandbox: the snippet's processes together reached the memory limit of "
                  f"{lim.memory_mb} MB: the kernel killed {'them' if usage and usage.oom_kills != 1 else 'one'}")
    if stops.supervision_error:
        notes += (f"\nsandbox: the supervisor could not check the folder ({stops.supervision_error}): the run was "
                  "stopped and what it added was removed")
    return notes


def _tree_pids(proc: subprocess.Popen[bytes], cg: cgroup.SnippetCgroup | None) -> list[int]:
    """The snippet's processes: its cgroup's, else the launcher's descendants."""
    if cg is not None:
        return list(cg.pids())
    import psutil  # type: ignore[import-untyped]

    try:
        return [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    except psutil.Error:
        return []


def _kill_tree(folder: EpisodeFolder, proc: subprocess.Popen[bytes] | None, cg: cgroup.SnippetCgroup | None) -> None:
    """Kill and reap everything the snippet started: its cgroup (the kernel's list: nothing
    escapes it by ``setsid`` or a double fork), the launcher's process group (bwrap's PID
    namespace dies with its init, ``--die-with-parent``), and every process of its uid."""
    if cg is not None:
        cg.kill()
    if proc is not None and proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if folder.owner is not None:
        kill_uid(folder.owner)
    if proc is not None:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
