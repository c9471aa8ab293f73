"""The /proc readers of this process's cgroups (engine/inputs/procfs.py): recorded mountinfo and
cgroup files under a root folder, octal-escaped mount points, and None when a file is missing."""

from __future__ import annotations

from pathlib import Path

from engine.inputs.procfs import (
    CgroupMount,
    Membership,
    cgroup_memberships,
    cgroup_mounts,
    parse_cgroup,
    parse_mountinfo,
)

MOUNTINFO = (
    "31 23 0:28 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n"
    "35 31 0:32 /batch /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:13 - cgroup cgroup rw,cpu,cpuacct\n"
    "40 31 0:40 / /mnt/my\\040cgroups rw master:1 shared:2 - cgroup2 cgroup2 rw,nsdelegate\n"
    "not a mount line\n"
)


def test_mountinfo_keeps_cgroup_mounts_unescaped_under_the_root(tmp_path: Path) -> None:
    assert parse_mountinfo(MOUNTINFO, tmp_path) == [
        CgroupMount("cgroup", "/batch", tmp_path / "sys/fs/cgroup/cpu,cpuacct", frozenset({"rw", "cpu", "cpuacct"})),
        CgroupMount("cgroup2", "/", tmp_path / "mnt/my cgroups", frozenset({"rw", "nsdelegate"})),
    ]
    assert [m.version for m in parse_mountinfo(MOUNTINFO)] == [1, 2]
    assert parse_mountinfo(MOUNTINFO)[1].point == Path("/mnt/my cgroups")


def test_cgroup_lines_per_hierarchy() -> None:
    assert parse_cgroup("12:memory:/batch/job\n4:cpu,cpuacct:/batch/job\n1:name=systemd:\n0::/user.slice\n") == [
        Membership(1, frozenset({"memory"}), "/batch/job"),
        Membership(1, frozenset({"cpu", "cpuacct"}), "/batch/job"),
        Membership(1, frozenset({"name=systemd"}), "/"),
        Membership(2, frozenset(), "/user.slice"),
    ]


def test_readers_say_none_when_the_file_cannot_be_read(tmp_path: Path) -> None:
    assert cgroup_mounts(tmp_path) is None and cgroup_memberships(tmp_path) is None
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/mountinfo").write_text(MOUNTINFO)
    (tmp_path / "proc/self/cgroup").write_text("0::/\n")
    assert len(cgroup_mounts(tmp_path) or []) == 2
    assert cgroup_memberships(tmp_path) == [Membership(2, frozenset(), "/")]
