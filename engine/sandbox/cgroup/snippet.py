"""``SnippetCgroup``: one cgroup for one snippet run, the kernel's limits on its whole tree.

``create`` makes it where ``hierarchy.plan`` says (one directory per v1 hierarchy: memory, pids,
freezer if mounted; one on v2) and writes its memory limit (swap included) and process cap;
``attach_self`` moves the calling process in (a child's first step between fork and exec);
``kill`` kills every process in it (``cgroup.kill``, else freeze, SIGKILL through pidfds, thaw);
``usage`` is what the kernel counted (``TreeUsage``); ``close`` kills, keeps the usage and removes
the directories. The package's ``__init__`` says what a machine needs for one.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from engine.sandbox.cgroup import fs, hierarchy
from engine.sandbox.cgroup.hierarchy import PARENT, V1_OPTIONAL, CgroupUnavailable

log = logging.getLogger(__name__)

_counter = itertools.count(1)


@dataclass
class TreeUsage:
    """What the kernel counted for the snippet's tree. ``peak_memory_bytes``: the most it charged
    at once (None where the kernel has no peak file: v2 before 5.19); ``oom_kills``: processes the
    kernel OOM-killed in it; ``memory_limit_hit``: usage reached the limit at least once (the kernel
    reclaimed or killed); ``pids_limit_hit``: a fork failed on ``max_pids``."""

    peak_memory_bytes: int | None
    oom_kills: int
    memory_limit_hit: bool
    pids_limit_hit: bool



# --- the cgroup ------------------------------------------------------------------------------

class SnippetCgroup:
    """One cgroup (v1: one per controller: memory, pids, freezer if present; v2: one directory) for one snippet run."""

    def __init__(self, version: str, dirs: dict[str, Path], memory_bytes: int, max_pids: int) -> None:
        self.version = version
        self.dirs = dirs                              # controller -> directory (v2: "" -> the one)
        self.memory_bytes = memory_bytes
        self.max_pids = max_pids
        self._unique = list(dict.fromkeys(dirs.values()))
        # attach_self runs between fork and exec: everything it needs is computed here
        self._attach = tuple(os.fsencode(d / "cgroup.procs") for d in self._unique)
        self._final: TreeUsage | None = None
        self._closed = False

    @property
    def path(self) -> Path:
        """The memory cgroup's directory (v2: the cgroup's)."""
        return self.dirs.get("memory", self.dirs.get("", self._unique[0]))

    @property
    def name(self) -> str:
        return self.path.name

    @classmethod
    def create(cls, name: str, memory_bytes: int, max_pids: int, *, root: Path | None = None,
               version: str | None = None, oom_group: bool = True) -> SnippetCgroup:
        """A new cgroup with these limits, no process in it yet. ``root``/``version``: the tree to
        make it in (tests: a fake tree; v2: the base that enables memory and pids; v1: a folder of
        controller folders), else the machine's (version detected). Raises CgroupUnavailable with why."""
        if memory_bytes <= 0 or max_pids <= 0:
            raise ValueError(f"memory_bytes and max_pids must be positive ({memory_bytes}, {max_pids})")
        plan = hierarchy.plan(root, version)
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:64] or "snippet"
        leaf = f"{PARENT}-{safe}-{os.getpid()}-{next(_counter)}"
        made: list[Path] = []
        dirs: dict[str, Path] = {}
        try:
            for ctrls, bases in plan.groups:
                try:
                    d = _make(plan.version, bases, leaf, made)
                except CgroupUnavailable as e:
                    if plan.version == "v1" and set(ctrls) <= set(V1_OPTIONAL):
                        log.debug("no %s cgroup (kill() will not freeze first): %s", "/".join(ctrls), e)
                        continue
                    raise
                for c in ctrls:
                    dirs[c] = d
            cg = cls(plan.version, dirs, memory_bytes, max_pids)
            cg._limit(oom_group)
        except CgroupUnavailable:
            _remove(made)
            raise
        except OSError as e:
            _remove(made)
            raise CgroupUnavailable(f"setting up {leaf}: {e}") from e
        return cg

    def _limit(self, oom_group: bool) -> None:
        mem = str(self.memory_bytes)
        if self.version == "v1":
            m = self.dirs["memory"]
            fs.write(m / "memory.limit_in_bytes", mem)          # before memsw: memsw >= limit always
            if (m / "memory.memsw.limit_in_bytes").exists():
                fs.write(m / "memory.memsw.limit_in_bytes", mem)
            else:                                             # no swap accounting: keep it off swap
                try:
                    fs.write(m / "memory.swappiness", "0")
                except OSError as e:
                    log.debug("memory.swappiness=0 in %s: %s", m, e)
            fs.write(self.dirs["pids"] / "pids.max", str(self.max_pids))
            return
        d = self.dirs[""]
        missing = [f for f in ("memory.max", "pids.max", "cgroup.procs") if not (d / f).exists()]
        if missing:
            raise CgroupUnavailable(f"{d} has no {', '.join(missing)}: memory and pids are not enabled for it")
        fs.write(d / "memory.max", mem)
        if (d / "memory.swap.max").exists():
            fs.write(d / "memory.swap.max", "0")
        if oom_group and (d / "memory.oom_group").exists():
            fs.write(d / "memory.oom_group", "1")
        fs.write(d / "pids.max", str(self.max_pids))

    def attach_self(self) -> None:
        """Move the calling process into the cgroup: for a child's ``preexec_fn`` (after fork, before
        exec, before dropping root). Only open/write/close of paths computed in create(); an OSError
        fails the child's start (Popen raises SubprocessError): a snippet never runs unconfined."""
        for path in self._attach:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)

    def pids(self) -> list[int]:
        """The processes in it now (every hierarchy's; exited ones are not listed)."""
        out: set[int] = set()
        for d in self._unique:
            out.update(fs.read_pids(d / "cgroup.procs"))
        return sorted(out)

    def kill(self, timeout_s: float = 5.0) -> bool:
        """SIGKILL every process in it; True once it is empty (within ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        if self.version == "v2" and (self.dirs[""] / "cgroup.kill").exists():
            try:
                fs.write(self.dirs[""] / "cgroup.kill", "1")
                while self.pids():
                    if time.monotonic() >= deadline:
                        return False
                    time.sleep(0.005)
                return True
            except OSError as e:
                log.debug("cgroup.kill in %s: %s; killing pid by pid", self.dirs[""], e)
        while True:
            if not self.pids():
                return True
            if time.monotonic() >= deadline:
                return False
            frozen = self._freeze(True, deadline)
            try:
                self._sigkill(self.pids())
            finally:
                if frozen:
                    self._freeze(False, deadline)
            time.sleep(0.002)

    def _freeze(self, on: bool, deadline: float) -> bool:
        """Freeze (or thaw) the tree so that nothing forks while it is killed; False where there is
        no freezer. Waits briefly for v1's FREEZING to become FROZEN, then goes on regardless."""
        if self.version == "v1":
            if "freezer" not in self.dirs:
                return False
            state = self.dirs["freezer"] / "freezer.state"
            want = "FROZEN" if on else "THAWED"
        else:
            state = self.dirs[""] / "cgroup.freeze"
            want = "1" if on else "0"
            if not state.exists():
                return False
        try:
            fs.write(state, want)
        except OSError:
            return False
        if on and self.version == "v1":
            until = min(deadline, time.monotonic() + 0.2)
            while time.monotonic() < until:
                try:
                    if fs.read(state).strip() == "FROZEN":
                        break
                except OSError:
                    break
                time.sleep(0.001)
        return True

    def _sigkill(self, pids: list[int]) -> None:
        # a pidfd pins the process it was opened for: opened, then checked against the cgroup's
        # list again, it never signals a pid that was recycled in between (a dead one: a no-op)
        fds: dict[int, int] = {}
        for pid in pids:
            try:
                fds[pid] = os.pidfd_open(pid)
            except ProcessLookupError:
                continue
            except OSError:                         # no pidfds (before 5.3)
                fds[pid] = -1
        still = set(self.pids())
        for pid, fd in fds.items():
            try:
                if pid in still:
                    if fd >= 0:
                        signal.pidfd_send_signal(fd, signal.SIGKILL)
                    else:
                        os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            finally:
                if fd >= 0:
                    os.close(fd)

    def usage(self) -> TreeUsage:
        """What the kernel counted (after close(): what it had counted then)."""
        if self._final is not None:
            return self._final
        if self.version == "v1":
            m, p = self.dirs["memory"], self.dirs["pids"]
            oom = fs.read_kv(m / "memory.oom_control").get("oom_kill", 0)   # the oom_kill line: 4.13+
            failcnt = (fs.read_int(m / "memory.failcnt") or 0) + (fs.read_int(m / "memory.memsw.failcnt") or 0)
            return TreeUsage(peak_memory_bytes=fs.read_int(m / "memory.max_usage_in_bytes"), oom_kills=oom,
                             memory_limit_hit=failcnt > 0 or oom > 0,
                             pids_limit_hit=fs.read_kv(p / "pids.events").get("max", 0) > 0)
        d = self.dirs[""]
        events = fs.read_kv(d / "memory.events")
        oom = events.get("oom_kill", 0)
        peak = fs.read_int(d / "memory.peak") if (d / "memory.peak").exists() else None
        return TreeUsage(peak_memory_bytes=peak, oom_kills=oom,
                         memory_limit_hit=events.get("max", 0) > 0 or events.get("oom", 0) > 0 or oom > 0,
                         pids_limit_hit=fs.read_kv(d / "pids.events").get("max", 0) > 0)

    def close(self, timeout_s: float = 5.0) -> None:
        """kill(), keep the final usage(), remove the directories (rmdir is EBUSY until the last
        process is gone: retried until ``timeout_s``; one left is logged, and removed later by a
        worker that finds it stale)."""
        if self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + timeout_s
        emptied = self.kill(timeout_s)
        self._final = self.usage()
        left = _remove(list(self._unique), deadline)
        if left or not emptied:
            log.warning("snippet cgroup %s: %s", self.name,
                        f"could not remove {', '.join(map(str, left))}" if left else "processes outlived kill()")

    def __enter__(self) -> SnippetCgroup:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SnippetCgroup({self.version}, {', '.join(map(str, self._unique))})"


def _make(version: str, bases: tuple[Path, ...], leaf: str, made: list[Path]) -> Path:
    """``<base>/dateline-sandbox/<leaf>`` under the first base where that can be made."""
    why: list[str] = []
    for base in bases:
        parent = base / PARENT
        try:
            try:
                fs.mkdir(parent)
            except FileExistsError:
                pass
            if version == "v2":
                # the parent never holds a process, so it may hand memory and pids to its children
                if not {"memory", "pids"} <= hierarchy.controllers(parent / "cgroup.subtree_control"):
                    fs.write(parent / "cgroup.subtree_control", "+memory +pids")
            hierarchy.clean_stale(parent)
            d = parent / leaf
            fs.mkdir(d)
        except OSError as e:
            why.append(f"{parent}: {e.strerror or e}")
            continue
        made.append(d)
        return d
    hint = "" if os.geteuid() == 0 else " (not root: cgroups need root, or a delegated cgroup v2 subtree)"
    raise CgroupUnavailable(f"cannot make a cgroup: {'; '.join(why)}{hint}")


def _remove(dirs: list[Path], deadline: float | None = None) -> list[Path]:
    """rmdir each (retrying EBUSY until ``deadline``); the ones left."""
    if deadline is None:
        deadline = time.monotonic() + 1.0
    left = []
    for d in reversed(dirs):
        while True:
            try:
                fs.rmdir(d)
                break
            except FileNotFoundError:
                break
            except OSError as e:
                if e.errno == errno.EBUSY and time.monotonic() < deadline:
                    time.sleep(0.005)
                    continue
                left.append(d)
                break
    return left

