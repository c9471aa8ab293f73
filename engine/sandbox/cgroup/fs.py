"""cgroupfs, read and written: the few file operations the snippet cgroups need.

``mkdir`` and ``rmdir`` are looked up through this module on every call, so a test can play the
kernel on a fake tree (a real cgroupfs fills a new directory with its interface files; rmdir
works while they are there). The readers return ``None``, ``{}`` or ``[]`` where a file is
missing or unreadable, as a cgroup's files may be on another kernel."""

from __future__ import annotations

import os
from pathlib import Path


def mkdir(path: Path) -> None:
    os.mkdir(path, 0o755)


def rmdir(path: Path) -> None:
    os.rmdir(path)


def write(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def read(path: Path) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def read_int(path: Path) -> int | None:
    try:
        text = read(path).strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def read_kv(path: Path) -> dict[str, int]:
    """``key value`` lines (memory.events, pids.events, memory.oom_control); {} when unreadable."""
    out: dict[str, int] = {}
    try:
        text = read(path)
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


def read_pids(path: Path) -> list[int]:
    try:
        return [int(x) for x in read(path).split()]
    except (OSError, ValueError):
        return []


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

