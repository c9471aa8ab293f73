"""A cgroup per sandbox snippet: the kernel's limits on the snippet's whole process tree.

RLIMIT_AS and RLIMIT_NPROC (``sandbox.py``) are per process (and per uid): a snippet that forks
eight children of 1 GB each gets 8 GB. A cgroup is what the kernel enforces on a *tree*:

* **memory**: one hard limit on everything the tree's processes charge (anonymous memory, page
  cache, tmpfs pages such as bwrap's private ``/tmp``, kernel memory); over it the kernel reclaims,
  then OOM-kills inside the cgroup only. Swap cannot extend it (v1 ``memory.memsw.limit_in_bytes``
  set to the same value, or ``memory.swappiness=0`` where swap accounting is off; v2
  ``memory.swap.max=0``);
* **pids**: at most ``max_pids`` processes and threads at once; one more ``fork``/``clone`` fails
  with EAGAIN;
* **kill**: every process in it, wherever it went (``setsid``, double fork, reparented to init):
  v2 writes ``cgroup.kill`` (5.14+), which the kernel applies atomically against forks; elsewhere
  the tree is frozen (v1 ``freezer.state``, v2 ``cgroup.freeze``), SIGKILLed pid by pid (through
  pidfds: a recycled pid is never signalled) and thawed, until ``cgroup.procs`` is empty.

**cgroup v1** (this development machine; one hierarchy per controller, ``/sys/fs/cgroup/<controller>``):
a ``dateline-sandbox/dateline-sandbox-<name>-<pid>-<n>`` directory in each of the memory, pids
and (if mounted) freezer hierarchies, made under the worker's *own* cgroup of that hierarchy
(``/proc/self/cgroup``), so the container's limits still cover the snippet; where that is not
writable, under the hierarchy's root. v1 allows processes at every level, so nothing else is
needed. v1 has no group OOM: the kernel kills the one process it picks (the largest: for a snippet,
the allocating Python), the rest live on until the run ends and :meth:`SnippetCgroup.close` kills
them.

**cgroup v2** (most clusters; one hierarchy, ``cgroup.controllers``): a controller works in a
cgroup only when its parent lists it in ``cgroup.subtree_control``, and a non-root cgroup that
holds processes cannot enable controllers for its children ("no internal processes"). So the
worker's own cgroup, which holds the worker, is not enough. The snippet cgroups go under
``<base>/dateline-sandbox`` (which never holds a process; this module enables ``+memory +pids`` in
it), where ``<base>`` is the nearest cgroup from the worker's own up to the mount's root whose
``cgroup.subtree_control`` already enables memory and pids. That takes one of:

* root on the host, or a privileged container: the v2 root (or a systemd slice) usually enables them;
* a **delegated subtree** (systemd ``Delegate=yes``, or ``systemd-run -p Delegate=yes``; a
  container's entrypoint doing the same), with the worker moved into a leaf: e.g. as the
  container's first step, ``mkdir /sys/fs/cgroup/init``, move every pid of
  ``/sys/fs/cgroup/cgroup.procs`` into ``init/cgroup.procs``, then
  ``echo '+memory +pids' > /sys/fs/cgroup/cgroup.subtree_control``; ``<base>`` is then the
  container's cgroup, and its limits cover the worker and the snippets together. A non-root
  worker needs the delegated directory (its ``cgroup.procs``, ``cgroup.subtree_control``) owned by
  its uid, since moving a process needs write access to the common ancestor's ``cgroup.procs``.

``memory.oom_group=1`` is set on v2 (``oom_group=False`` to leave it): an OOM kills the snippet's
whole tree at once, so it never runs on half dead (a multiprocessing pool waiting for a worker the
kernel killed, until the timeout).

**Requirements and fallback**: creating cgroups needs root (v1, or v2 without delegation) or a
delegated v2 subtree. :meth:`SnippetCgroup.create` raises :class:`CgroupUnavailable` saying why
(not root, read-only ``/sys/fs/cgroup``, no usable v2 base, a controller missing) and leaves
nothing behind; :func:`cgroup_support` says once, honestly (it creates a probe cgroup and moves a
probe process into it), whether this machine can. Without one the sandbox keeps what it has: the
per-process rlimits, RLIMIT_NPROC, and killing bwrap's process group / PID namespace.

Use: ``cg = SnippetCgroup.create(...)`` in the worker; :meth:`SnippetCgroup.attach_self` as the
*first* step of the child's ``preexec_fn`` (still root: the cgroup files are root's; after it the
child may drop to the snippet's uid, and bwrap's ``--unshare-cgroup`` roots the snippet's cgroup
namespace there; the snippet has no cgroupfs mounted and could not write it); after the run
:meth:`SnippetCgroup.usage`, then :meth:`SnippetCgroup.close` (it keeps the final usage).
A crashed worker's leftover cgroups are removed by the next worker when they are empty, their
worker's pid is gone and they are over a minute old (best effort; one that still holds processes
is left alone).
"""

from __future__ import annotations

import errno
import functools
import itertools
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

log = logging.getLogger(__name__)

PARENT = "dateline-sandbox"
# v1: memory and pids are required; freezer makes kill() race-free against forks where mounted
V1_REQUIRED = ("memory", "pids")
V1_OPTIONAL = ("freezer",)
STALE_AGE_S = 60.0            # a leftover cgroup younger than this may be one being set up: kept
_STALE = re.compile(rf"^{PARENT}-.*-(\d+)-\d+$")
_counter = itertools.count(1)
_cleaned: set[Path] = set()
_cleaned_lock = threading.Lock()


class CgroupUnavailable(RuntimeError):
    """No cgroup could be made for a snippet; the message says why."""


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


# The two directory operations, indirect so that a test can play the kernel on a fake tree (a
# real cgroupfs fills a new directory with its interface files; rmdir works while they are there).
def _mkdir(path: Path) -> None:
    os.mkdir(path, 0o755)


def _rmdir(path: Path) -> None:
    os.rmdir(path)


def _write(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _read(path: Path) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _read_int(path: Path) -> int | None:
    try:
        text = _read(path).strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _read_kv(path: Path) -> dict[str, int]:
    """``key value`` lines (memory.events, pids.events, memory.oom_control); {} when unreadable."""
    out: dict[str, int] = {}
    try:
        text = _read(path)
    except OSError:
        return out
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                pass
    return out


def _read_pids(path: Path) -> list[int]:
    try:
        return [int(x) for x in _read(path).split()]
    except (OSError, ValueError):
        return []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# --- where the hierarchies are ---------------------------------------------------------------

@dataclass(frozen=True)
class _Mount:
    fstype: str                 # "cgroup" (v1) or "cgroup2"
    root: str                   # the hierarchy's path mounted there
    point: Path
    options: frozenset[str]     # super options: v1's controllers among them


def _unescape(s: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)


def _mounts() -> list[_Mount]:
    out: list[_Mount] = []
    try:
        text = _read(Path("/proc/self/mountinfo"))
    except OSError:
        return out
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        a, b = left.split(), right.split()
        if not sep or len(a) < 5 or len(b) < 3 or b[0] not in ("cgroup", "cgroup2"):
            continue
        out.append(_Mount(b[0], _unescape(a[3]), Path(_unescape(a[4])), frozenset(b[2].split(","))))
    return out


def _own_paths() -> dict[str, str]:
    """The worker's cgroup per v1 controller, and ``""`` for v2's (``/proc/self/cgroup``)."""
    out: dict[str, str] = {}
    try:
        text = _read(Path("/proc/self/cgroup"))
    except OSError:
        return out
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for c in parts[1].split(",") if parts[1] else [""]:
            out[c] = parts[2]
    return out


def _own_dir(mount: _Mount, own: str | None) -> Path:
    """The worker's own cgroup directory in ``mount``; the mount point when it is outside it."""
    if own is None:
        return mount.point
    root = mount.root.rstrip("/")
    if own != mount.root and not own.startswith(root + "/"):
        return mount.point
    rel = own[len(root):].strip("/")
    if ".." in rel.split("/"):
        return mount.point
    d = mount.point / rel if rel else mount.point
    return d if d.is_dir() else mount.point


def _controllers(path: Path) -> set[str]:
    try:
        return {w.lstrip("+") for w in _read(path).split()}
    except OSError:
        return set()


@dataclass(frozen=True)
class _Plan:
    version: str
    # v1: (controllers sharing one hierarchy, candidate bases: own cgroup first, then the root);
    # v2: one entry, ("",), the bases that enable memory and pids, nearest first
    groups: tuple[tuple[tuple[str, ...], tuple[Path, ...]], ...]


def _plan(root: Path | None, version: str | None) -> _Plan:
    groups: list[tuple[tuple[str, ...], tuple[Path, ...]]] = []
    if root is not None:
        if version is None:
            version = "v2" if (root / "cgroup.controllers").exists() else "v1"
        if version == "v2":
            return _Plan("v2", ((("",), (root,)),))
        for c in (*V1_REQUIRED, *V1_OPTIONAL):
            if (root / c).is_dir():
                groups.append(((c,), (root / c,)))
            elif c in V1_REQUIRED:
                raise CgroupUnavailable(f"no {c} hierarchy under {root}")
        return _Plan("v1", tuple(groups))

    if sys.platform != "linux":
        raise CgroupUnavailable(f"cgroups are Linux only (this is {sys.platform})")
    mounts = _mounts()
    own = _own_paths()
    v1 = {c: m for m in mounts if m.fstype == "cgroup" for c in (*V1_REQUIRED, *V1_OPTIONAL) if c in m.options}
    v2 = next((m for m in mounts if m.fstype == "cgroup2"), None)
    if version is None:
        # hybrid machines (like this one): a controller lives in one hierarchy only; where memory
        # is on v1, the v2 mount has none of it
        version = "v1" if "memory" in v1 else "v2" if v2 is not None else None
    if version == "v1":
        missing = [c for c in V1_REQUIRED if c not in v1]
        if missing:
            raise CgroupUnavailable(f"no cgroup v1 {' or '.join(missing)} hierarchy mounted (/proc/self/mountinfo)")
        by_mount: dict[Path, tuple[list[str], _Mount]] = {}
        for c, m in v1.items():
            by_mount.setdefault(m.point, ([], m))[0].append(c)
        for ctrls, m in by_mount.values():
            mine = _own_dir(m, own.get(ctrls[0]))
            groups.append((tuple(ctrls), tuple(dict.fromkeys([mine, m.point]))))
        return _Plan("v1", tuple(groups))
    if version == "v2":
        if v2 is None:
            raise CgroupUnavailable("no cgroup2 file system mounted (/proc/self/mountinfo)")
        available = _controllers(v2.point / "cgroup.controllers")
        if not {"memory", "pids"} <= available:
            raise CgroupUnavailable(
                f"the cgroup v2 hierarchy at {v2.point} has controllers {sorted(available) or 'none'}; "
                "memory and pids are needed (on a hybrid machine they are bound to v1)")
        start = _own_dir(v2, own.get(""))
        bases: list[Path] = []
        d = start
        while True:
            if {"memory", "pids"} <= _controllers(d / "cgroup.subtree_control"):
                bases.append(d)
            if d == v2.point or d.parent == d:
                break
            d = d.parent
        if not bases:
            raise CgroupUnavailable(
                f"no cgroup from the worker's own ({start}) up to {v2.point} enables memory and pids in "
                "cgroup.subtree_control, and the worker's own cgroup cannot (v2 forbids controllers for "
                "children of a cgroup that holds processes): run the worker in a leaf of a delegated "
                "subtree (systemd Delegate=yes, or the container's entrypoint moving its processes to "
                "<cgroup>/init and writing '+memory +pids' to <cgroup>/cgroup.subtree_control)")
        return _Plan("v2", ((("",), tuple(bases)),))
    raise CgroupUnavailable("no cgroup hierarchy with a memory controller is mounted")


def _clean_stale(parent: Path) -> None:
    """Remove the empty snippet cgroups a dead worker left in ``parent`` (best effort, once per
    parent per process)."""
    with _cleaned_lock:
        if parent in _cleaned:
            return
        _cleaned.add(parent)
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    now = time.time()
    for e in entries:
        m = _STALE.match(e.name)
        try:
            if not m or not e.is_dir(follow_symlinks=False):
                continue
            pid = int(m.group(1))
            if pid == os.getpid() or _alive(pid) or now - e.stat(follow_symlinks=False).st_mtime < STALE_AGE_S:
                continue
            if _read_pids(Path(e.path) / "cgroup.procs"):
                continue
            _rmdir(Path(e.path))
            log.info("removed a stale snippet cgroup %s (its worker, pid %d, is gone)", e.path, pid)
        except OSError:
            pass


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
        plan = _plan(root, version)
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
            _write(m / "memory.limit_in_bytes", mem)          # before memsw: memsw >= limit always
            if (m / "memory.memsw.limit_in_bytes").exists():
                _write(m / "memory.memsw.limit_in_bytes", mem)
            else:                                             # no swap accounting: keep it off swap
                try:
                    _write(m / "memory.swappiness", "0")
                except OSError as e:
                    log.debug("memory.swappiness=0 in %s: %s", m, e)
            _write(self.dirs["pids"] / "pids.max", str(self.max_pids))
            return
        d = self.dirs[""]
        missing = [f for f in ("memory.max", "pids.max", "cgroup.procs") if not (d / f).exists()]
        if missing:
            raise CgroupUnavailable(f"{d} has no {', '.join(missing)}: memory and pids are not enabled for it")
        _write(d / "memory.max", mem)
        if (d / "memory.swap.max").exists():
            _write(d / "memory.swap.max", "0")
        if oom_group and (d / "memory.oom_group").exists():
            _write(d / "memory.oom_group", "1")
        _write(d / "pids.max", str(self.max_pids))

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
            out.update(_read_pids(d / "cgroup.procs"))
        return sorted(out)

    def kill(self, timeout_s: float = 5.0) -> bool:
        """SIGKILL every process in it; True once it is empty (within ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        if self.version == "v2" and (self.dirs[""] / "cgroup.kill").exists():
            try:
                _write(self.dirs[""] / "cgroup.kill", "1")
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
            _write(state, want)
        except OSError:
            return False
        if on and self.version == "v1":
            until = min(deadline, time.monotonic() + 0.2)
            while time.monotonic() < until:
                try:
                    if _read(state).strip() == "FROZEN":
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
            oom = _read_kv(m / "memory.oom_control").get("oom_kill", 0)   # the oom_kill line: 4.13+
            failcnt = (_read_int(m / "memory.failcnt") or 0) + (_read_int(m / "memory.memsw.failcnt") or 0)
            return TreeUsage(peak_memory_bytes=_read_int(m / "memory.max_usage_in_bytes"), oom_kills=oom,
                             memory_limit_hit=failcnt > 0 or oom > 0,
                             pids_limit_hit=_read_kv(p / "pids.events").get("max", 0) > 0)
        d = self.dirs[""]
        events = _read_kv(d / "memory.events")
        oom = events.get("oom_kill", 0)
        peak = _read_int(d / "memory.peak") if (d / "memory.peak").exists() else None
        return TreeUsage(peak_memory_bytes=peak, oom_kills=oom,
                         memory_limit_hit=events.get("max", 0) > 0 or events.get("oom", 0) > 0 or oom > 0,
                         pids_limit_hit=_read_kv(d / "pids.events").get("max", 0) > 0)

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
                _mkdir(parent)
            except FileExistsError:
                pass
            if version == "v2":
                # the parent never holds a process, so it may hand memory and pids to its children
                if not {"memory", "pids"} <= _controllers(parent / "cgroup.subtree_control"):
                    _write(parent / "cgroup.subtree_control", "+memory +pids")
            _clean_stale(parent)
            d = parent / leaf
            _mkdir(d)
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
                _rmdir(d)
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


@functools.cache
def cgroup_support() -> tuple[str | None, str]:
    """("v1" | "v2", "") where snippet cgroups work here, else (None, why). Honest: it makes a probe
    cgroup, runs a process in it and removes it. Cached for the process."""
    try:
        cg = SnippetCgroup.create("probe", 64 << 20, 16)
    except CgroupUnavailable as e:
        return None, str(e)
    try:
        proc = subprocess.run([sys.executable, "-S", "-c", ""], preexec_fn=cg.attach_self, timeout=60,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if proc.returncode != 0:
            return None, f"a probe process in {cg.path} exited with {proc.returncode}"
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"a probe process could not join {cg.path}: {e}"
    finally:
        cg.close()
    return cg.version, ""
