"""Where the snippet cgroups go: the cgroup hierarchies mounted here (``mounts``, from
``/proc/self/mountinfo``), the worker's own cgroup in each (``own_paths``, from
``/proc/self/cgroup``), and the ``Plan`` that picks, per hierarchy, the bases to try (``plan``: v1,
the worker's own cgroup then the root; v2, the nearest cgroup that enables memory and pids for its
children). ``clean_stale`` removes the empty cgroups a dead worker left. ``CgroupUnavailable``
says why no cgroup can be made."""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from engine.sandbox.cgroup import fs

log = logging.getLogger(__name__)

PARENT = "dateline-sandbox"
# v1: memory and pids are required; freezer makes kill() race-free against forks where mounted
V1_REQUIRED = ("memory", "pids")
V1_OPTIONAL = ("freezer",)
STALE_AGE_S = 60.0            # a leftover cgroup younger than this may be one being set up: kept
_STALE = re.compile(rf"^{PARENT}-.*-(\d+)-\d+$")
_cleaned: set[Path] = set()
_cleaned_lock = threading.Lock()


class CgroupUnavailable(RuntimeError):
    """No cgroup could be made for a snippet; the message says why."""


@dataclass(frozen=True)
class Mount:
    fstype: str                 # "cgroup" (v1) or "cgroup2"
    root: str                   # the hierarchy's path mounted there
    point: Path
    options: frozenset[str]     # super options: v1's controllers among them


def _unescape(s: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)


def mounts() -> list[Mount]:
    out: list[Mount] = []
    try:
        text = fs.read(Path("/proc/self/mountinfo"))
    except OSError:
        return out
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        a, b = left.split(), right.split()
        if not sep or len(a) < 5 or len(b) < 3 or b[0] not in ("cgroup", "cgroup2"):
            continue
        out.append(Mount(b[0], _unescape(a[3]), Path(_unescape(a[4])), frozenset(b[2].split(","))))
    return out


def own_paths() -> dict[str, str]:
    """The worker's cgroup per v1 controller, and ``""`` for v2's (``/proc/self/cgroup``)."""
    out: dict[str, str] = {}
    try:
        text = fs.read(Path("/proc/self/cgroup"))
    except OSError:
        return out
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for c in parts[1].split(",") if parts[1] else [""]:
            out[c] = parts[2]
    return out


def _own_dir(mount: Mount, own: str | None) -> Path:
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


def controllers(path: Path) -> set[str]:
    try:
        return {w.lstrip("+") for w in fs.read(path).split()}
    except OSError:
        return set()


@dataclass(frozen=True)
class Plan:
    version: str
    # v1: (controllers sharing one hierarchy, candidate bases: own cgroup first, then the root);
    # v2: one entry, ("",), the bases that enable memory and pids, nearest first
    groups: tuple[tuple[tuple[str, ...], tuple[Path, ...]], ...]


def plan(root: Path | None, version: str | None) -> Plan:
    """Where a snippet cgroup can go: under ``root`` (a fake tree in tests: v2, the base itself;
    v1, a folder of controller folders), else on this machine's mounts, the version detected
    where ``version`` is None. Raises CgroupUnavailable saying why none can."""
    if root is not None:
        return _plan_under(root, version)
    if sys.platform != "linux":
        raise CgroupUnavailable(f"cgroups are Linux only (this is {sys.platform})")
    found = mounts()
    own = own_paths()
    v1 = {c: m for m in found if m.fstype == "cgroup" for c in (*V1_REQUIRED, *V1_OPTIONAL) if c in m.options}
    v2 = next((m for m in found if m.fstype == "cgroup2"), None)
    if version is None:
        # hybrid machines (like this one): a controller lives in one hierarchy only; where memory
        # is on v1, the v2 mount has none of it
        version = "v1" if "memory" in v1 else "v2" if v2 is not None else None
    if version == "v1":
        return _plan_v1(v1, own)
    if version == "v2":
        if v2 is None:
            raise CgroupUnavailable("no cgroup2 file system mounted (/proc/self/mountinfo)")
        return _plan_v2(v2, own)
    raise CgroupUnavailable("no cgroup hierarchy with a memory controller is mounted")


def _plan_under(root: Path, version: str | None) -> Plan:
    groups: list[tuple[tuple[str, ...], tuple[Path, ...]]] = []
    if version is None:
        version = "v2" if (root / "cgroup.controllers").exists() else "v1"
    if version == "v2":
        return Plan("v2", ((("",), (root,)),))
    for c in (*V1_REQUIRED, *V1_OPTIONAL):
        if (root / c).is_dir():
            groups.append(((c,), (root / c,)))
        elif c in V1_REQUIRED:
            raise CgroupUnavailable(f"no {c} hierarchy under {root}")
    return Plan("v1", tuple(groups))


def _plan_v1(v1: dict[str, Mount], own: dict[str, str]) -> Plan:
    """One group per hierarchy (controllers may share one), the worker's own cgroup first."""
    missing = [c for c in V1_REQUIRED if c not in v1]
    if missing:
        raise CgroupUnavailable(f"no cgroup v1 {' or '.join(missing)} hierarchy mounted (/proc/self/mountinfo)")
    groups: list[tuple[tuple[str, ...], tuple[Path, ...]]] = []
    by_mount: dict[Path, tuple[list[str], Mount]] = {}
    for c, m in v1.items():
        by_mount.setdefault(m.point, ([], m))[0].append(c)
    for ctrls, m in by_mount.values():
        mine = _own_dir(m, own.get(ctrls[0]))
        groups.append((tuple(ctrls), tuple(dict.fromkeys([mine, m.point]))))
    return Plan("v1", tuple(groups))


def _plan_v2(v2: Mount, own: dict[str, str]) -> Plan:
    """The cgroups from the worker's own up to the mount's root that enable memory and pids for
    their children, nearest first."""
    available = controllers(v2.point / "cgroup.controllers")
    if not {"memory", "pids"} <= available:
        raise CgroupUnavailable(
            f"the cgroup v2 hierarchy at {v2.point} has controllers {sorted(available) or 'none'}; "
            "memory and pids are needed (on a hybrid machine they are bound to v1)")
    start = _own_dir(v2, own.get(""))
    bases: list[Path] = []
    d = start
    while True:
        if {"memory", "pids"} <= controllers(d / "cgroup.subtree_control"):
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
    return Plan("v2", ((("",), tuple(bases)),))


def clean_stale(parent: Path) -> None:
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
            if pid == os.getpid() or fs.alive(pid) or now - e.stat(follow_symlinks=False).st_mtime < STALE_AGE_S:
                continue
            if fs.read_pids(Path(e.path) / "cgroup.procs"):
                continue
            fs.rmdir(Path(e.path))
            log.info("removed a stale snippet cgroup %s (its worker, pid %d, is gone)", e.path, pid)
        except OSError:
            pass

