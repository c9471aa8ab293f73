"""Where this process's cgroups are, from ``/proc``: the cgroup file systems mounted (v1 and v2,
``/proc/self/mountinfo``) and the cgroup this process is in per hierarchy (``/proc/self/cgroup``).
Every reader takes a ``root`` folder that holds ``proc/`` (``/`` on a live machine, a recorded tree
in tests) and returns None when the file cannot be read, so each caller picks its own fallback.
Mount fields are unescaped as the kernel escapes them (``\\040`` is a space). Plain Python.
``engine/hosting/machine/facts.py`` reads cgroup limits through it; the sandbox's cgroup module
still has its own parser of the same files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

MOUNTINFO = "proc/self/mountinfo"
CGROUP = "proc/self/cgroup"
CGROUP_FSTYPES = ("cgroup", "cgroup2")


@dataclass(frozen=True)
class CgroupMount:
    """One cgroup file system of ``/proc/self/mountinfo``."""

    fstype: str                 # "cgroup" (v1) or "cgroup2"
    root: str                   # the hierarchy's path mounted there
    point: Path                 # where it is mounted, under the reader's root
    options: frozenset[str]     # super options: a v1 hierarchy's controllers are among them

    @property
    def version(self) -> int:
        return 2 if self.fstype == "cgroup2" else 1


@dataclass(frozen=True)
class Membership:
    """One line of ``/proc/self/cgroup``: this process's cgroup in one hierarchy."""

    version: int                # 2: the unified hierarchy ("0::path"); 1: a v1 hierarchy
    controllers: frozenset[str]  # v1: its controllers (or "name=..."); v2: none
    path: str                   # relative to the hierarchy's root; "/" when the line has none


def read_text(path: Path) -> str | None:
    """A file's text; None when it cannot be read (absent, no permission, not a file)."""
    try:
        return path.read_text()
    except OSError:
        return None


def unescape(field: str) -> str:
    """A mountinfo field as it is: the kernel writes space, tab, newline and backslash as octal."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str, root: Path = Path("/")) -> list[CgroupMount]:
    """The cgroup and cgroup2 mounts of ``text`` (``/proc/self/mountinfo``'s). A line is ``id
    parent major:minor root point options [optional fields] - fstype source super-options``;
    mount points are placed under ``root``."""
    out: list[CgroupMount] = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        a, b = left.split(), right.split()
        if not sep or len(a) < 5 or not b or b[0] not in CGROUP_FSTYPES:
            continue
        options = frozenset(b[2].split(",")) if len(b) > 2 else frozenset()
        out.append(CgroupMount(b[0], unescape(a[3]), root / unescape(a[4]).lstrip("/"), options))
    return out


def parse_cgroup(text: str) -> list[Membership]:
    """The hierarchies of ``text`` (``/proc/self/cgroup``'s): ``0::path`` is v2's;
    ``id:controllers:path`` a v1 hierarchy's. Other lines are skipped."""
    out: list[Membership] = []
    for line in text.splitlines():
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hid == "0" and not controllers:
            out.append(Membership(2, frozenset(), path or "/"))
        elif controllers:
            out.append(Membership(1, frozenset(controllers.split(",")), path or "/"))
    return out


def cgroup_mounts(root: Path = Path("/")) -> list[CgroupMount] | None:
    """The cgroup mounts of ``root``'s ``proc/self/mountinfo``; None when it cannot be read."""
    text = read_text(root / MOUNTINFO)
    return None if text is None else parse_mountinfo(text, root)


def cgroup_memberships(root: Path = Path("/")) -> list[Membership] | None:
    """This process's cgroups from ``root``'s ``proc/self/cgroup``; None when it cannot be read."""
    text = read_text(root / CGROUP)
    return None if text is None else parse_cgroup(text)
