"""What a CPU replica's engine settings are decided from: :class:`MachineFacts` and :func:`detect`,
which reads them. The CPU's model and flags come from /proc/cpuinfo, the memory available from
/proc/meminfo, and the CPU quota and free memory of this process's cgroups (v1 and v2, every
ancestor's limit too) from the cgroup files that ``engine/inputs/procfs.py`` finds. Every reader
takes the file text or a root folder, so tests feed recorded ``/proc`` and cgroup files.
"""

from __future__ import annotations

import math
import os
import platform
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.inputs.procfs import CgroupMount, Membership, cgroup_memberships, cgroup_mounts, read_text

GiB = 1 << 30

# The x86 flags (/proc/cpuinfo "flags") and Arm features ("Features") that decide how fast vLLM's
# CPU kernels run: bfloat16 dot products are native with AVX512_BF16 or AMX on x86, with BF16 on Arm.
X86_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile")
ARM_FEATURES = ("asimd", "bf16", "i8mm", "sve", "sve2", "svebf16")
ARM_ARCHS = ("aarch64", "arm64")

# cgroup v1 says "no limit" with LONG_MAX rounded down to the page size (9223372036854771712);
# a value this large is no limit.
UNLIMITED = 1 << 60


@dataclass(frozen=True)
class MachineFacts:
    """What :func:`resolve_cpu_engine` decides from. Sizes in bytes; ``None``: not known / no limit."""

    arch: str                                   # platform.machine(): x86_64, aarch64...
    flags: frozenset[str] = frozenset()         # those of X86_FLAGS / ARM_FEATURES the CPU has
    cpu_model: str = ""
    affinity: tuple[int, ...] = (0,)            # the cores this process may run on (sched_getaffinity)
    cpu_quota: float | None = None              # the cgroup CPU quota in CPUs (None: no quota)
    cpu_quota_source: str = ""                  # the file(s) that said so
    mem_available: int | None = None            # /proc/meminfo MemAvailable
    cgroup_mem_free: int | None = None          # cgroup memory limit minus usage (None: no limit)
    cgroup_mem_source: str = ""

    @property
    def usable_cpus(self) -> int:
        """Cores a process here can keep busy: its affinity, at most the quota (floor, at least 1)."""
        n = len(self.affinity) or 1
        if self.cpu_quota is not None:
            n = min(n, max(1, math.floor(self.cpu_quota + 1e-9)))
        return n

    @property
    def memory_available(self) -> int | None:
        """The smaller of MemAvailable and the cgroup's free memory (None when neither is known)."""
        known = [x for x in (self.mem_available, self.cgroup_mem_free) if x is not None]
        return min(known) if known else None

    def summary(self) -> dict[str, Any]:
        """JSON-able, for logs, the run's records and ``dateline doctor``."""
        mem = self.memory_available
        return {"arch": self.arch, "cpu": self.cpu_model, "flags": sorted(self.flags),
                "affinity": core_list(self.affinity), "cpu_quota": self.cpu_quota,
                "cpu_quota_source": self.cpu_quota_source, "usable_cpus": self.usable_cpus,
                "mem_available_gib": _gib(self.mem_available), "cgroup_mem_free_gib": _gib(self.cgroup_mem_free),
                "cgroup_mem_source": self.cgroup_mem_source,
                "memory_available_gib": _gib(mem)}


def _gib(n: int | None) -> float | None:
    return None if n is None else round(n / GiB, 2)


def core_list(cores: Iterable[int]) -> str:
    """Cores as vLLM's ``VLLM_CPU_OMP_THREADS_BIND`` takes them: ``0-3``, ``0,2,5``, ``0-3,8-11``."""
    out: list[str] = []
    run: list[int] = []
    for c in sorted(set(cores)):
        if run and c != run[-1] + 1:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(c)
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


# -- readers ---------------------------------------------------------------------------------

def cpu_flags(cpuinfo: str, arch: str) -> frozenset[str]:
    """The flags of :data:`X86_FLAGS` (x86: the first ``flags`` line) or :data:`ARM_FEATURES`
    (aarch64: the first ``Features`` line) that ``cpuinfo`` (/proc/cpuinfo's text) lists."""
    arm = arch.lower() in ARM_ARCHS
    key, wanted = ("features", ARM_FEATURES) if arm else ("flags", X86_FLAGS)
    for line in cpuinfo.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip().lower() == key:
            return frozenset(value.split()) & frozenset(wanted)
    return frozenset()


def cpu_model_name(cpuinfo: str) -> str:
    """x86 ``model name``; on Arm, which has none, ``CPU implementer``/``CPU part`` (e.g. 0x41/0xd40
    is a Neoverse V1)."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        name, sep, value = line.partition(":")
        if sep:
            fields.setdefault(name.strip().lower(), value.strip())
    if fields.get("model name"):
        return fields["model name"]
    if "cpu part" in fields:
        return f"implementer {fields.get('cpu implementer', '?')} part {fields['cpu part']}"
    return ""


def meminfo_available(meminfo: str) -> int | None:
    """``MemAvailable`` of /proc/meminfo in bytes (``MemFree`` on kernels without it)."""
    values: dict[str, int] = {}
    for line in meminfo.splitlines():
        name, sep, value = line.partition(":")
        parts = value.split()
        if sep and parts and parts[0].isdigit():
            values[name.strip()] = int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    return values.get("MemAvailable", values.get("MemFree"))


def parse_cpu_max(text: str) -> float | None:
    """cgroup v2 ``cpu.max`` (``"max 100000"``: no quota; ``"200000 100000"``: 2 CPUs)."""
    parts = text.split()
    if not parts or parts[0] == "max":
        return None
    period = float(parts[1]) if len(parts) > 1 else 100000.0
    return float(parts[0]) / period if period > 0 else None


def _int(text: str | None) -> int | None:
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


# Where cgroups are usually mounted: tried when /proc/self/mountinfo cannot be read.
def _mounts(root: Path) -> list[CgroupMount]:
    """cgroup mounts from /proc/self/mountinfo; the usual places when it cannot be read."""
    found = cgroup_mounts(root)
    if found is not None:
        return found
    fs = root / "sys/fs/cgroup"
    guesses = [CgroupMount("cgroup", "/", fs / "cpu,cpuacct", frozenset({"cpu", "cpuacct"})),
               CgroupMount("cgroup", "/", fs / "cpu", frozenset({"cpu"})),
               CgroupMount("cgroup", "/", fs / "memory", frozenset({"memory"})),
               CgroupMount("cgroup2", "/", fs / "unified", frozenset()),
               CgroupMount("cgroup2", "/", fs, frozenset())]
    return [m for m in guesses if m.point.is_dir() and (m.version == 1 or (m.point / "cgroup.controllers").exists())]


def _memberships(root: Path) -> list[Membership]:
    """/proc/self/cgroup's hierarchies; ``/`` in each when it cannot be read."""
    found = cgroup_memberships(root)
    if found is not None:
        return found
    return [Membership(1, frozenset({"cpu", "cpuacct", "memory"}), "/"), Membership(2, frozenset(), "/")]


def cgroup_dirs(root: Path, controller: str) -> list[tuple[int, list[Path]]]:
    """The folders of this process's cgroups that hold ``controller``'s files: per hierarchy (v1
    with that controller, and v2), ``(version, [its own cgroup, then each ancestor up to the
    mount])``; a parent's limit applies to its children too."""
    out: list[tuple[int, list[Path]]] = []
    members = _memberships(root)
    for mount in _mounts(root):
        if mount.version == 1 and controller not in mount.options:
            continue
        paths = [m.path for m in members
                 if m.version == mount.version and (m.version == 2 or controller in m.controllers)]
        path = paths[0] if paths else "/"
        # cgroup paths are relative to the hierarchy's root; the mount may show a sub-tree of it
        rel = path[len(mount.root):] if mount.root != "/" and path.startswith(mount.root) else path
        here = mount.point / rel.lstrip("/")
        if not here.is_dir():
            here = mount.point
        chain = [here]
        while chain[-1] != mount.point and mount.point in chain[-1].parents:
            chain.append(chain[-1].parent)
        out.append((mount.version, chain))
    return out


def _shown(path: Path, root: Path) -> str:
    return "/" + str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def cgroup_cpu_quota(root: Path = Path("/")) -> tuple[float | None, str]:
    """The tightest CPU quota of this process's cgroups, in CPUs (v1 ``cpu.cfs_quota_us`` /
    ``cpu.cfs_period_us``, -1: none; v2 ``cpu.max``), and which file said so; ``(None, "")``
    when there is none."""
    best: tuple[float | None, str] = (None, "")
    for version, chain in cgroup_dirs(root, "cpu"):
        for d in chain:
            quota: float | None = None
            where = ""
            if version == 1:
                q, p = _int(read_text(d / "cpu.cfs_quota_us")), _int(read_text(d / "cpu.cfs_period_us"))
                if q is not None and p is not None and q > 0 and p > 0:
                    quota = q / p
                    where = f"cgroup v1 {_shown(d, root)}: cpu.cfs_quota_us {q} / cpu.cfs_period_us {p}"
            else:
                text = read_text(d / "cpu.max")
                if text is not None:
                    quota = parse_cpu_max(text)
                    where = f"cgroup v2 {_shown(d, root)}: cpu.max {text.strip()!r}"
            if quota is not None and (best[0] is None or quota < best[0]):
                best = (quota, where)
    return best


def cgroup_memory_free(root: Path = Path("/")) -> tuple[int | None, str]:
    """The least memory left under this process's cgroup limits (limit minus usage: v1
    ``memory.limit_in_bytes`` / ``memory.usage_in_bytes``, v2 ``memory.max`` / ``memory.current``),
    and which files said so; ``(None, "")`` when no cgroup limits memory."""
    best: tuple[int | None, str] = (None, "")
    names = {1: ("memory.limit_in_bytes", "memory.usage_in_bytes"), 2: ("memory.max", "memory.current")}
    for version, chain in cgroup_dirs(root, "memory"):
        limit_name, usage_name = names[version]
        for d in chain:
            limit, used = _int(read_text(d / limit_name)), _int(read_text(d / usage_name)) or 0
            if limit is None or limit >= UNLIMITED:       # "max" (v2) or LONG_MAX (v1): no limit
                continue
            free = max(0, limit - used)
            if best[0] is None or free < best[0]:
                best = (free, f"cgroup v{version} {_shown(d, root)}: {limit_name} {limit} - {usage_name} {used}")
    return best


def detect(root: str | Path = "/", *, arch: str | None = None, affinity: Iterable[int] | None = None) -> MachineFacts:
    """The facts of this machine (``root``: another folder holding ``proc/`` and ``sys/fs/cgroup``,
    for tests; ``affinity`` then defaults to all of its cpuinfo's processors)."""
    root = Path(root)
    arch = arch or platform.machine()
    cpuinfo = read_text(root / "proc/cpuinfo") or ""
    if affinity is None:
        if root == Path("/") and hasattr(os, "sched_getaffinity"):
            affinity = os.sched_getaffinity(0)
        else:
            n = sum(1 for line in cpuinfo.splitlines() if line.split(":")[0].strip() == "processor")
            affinity = range(n or os.cpu_count() or 1)
    quota, quota_source = cgroup_cpu_quota(root)
    mem_free, mem_source = cgroup_memory_free(root)
    return MachineFacts(arch=arch, flags=cpu_flags(cpuinfo, arch), cpu_model=cpu_model_name(cpuinfo),
                        affinity=tuple(sorted(affinity)) or (0,), cpu_quota=quota, cpu_quota_source=quota_source,
                        mem_available=meminfo_available(read_text(root / "proc/meminfo") or ""),
                        cgroup_mem_free=mem_free, cgroup_mem_source=mem_source)
