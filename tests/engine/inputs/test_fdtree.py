"""Host operations on a folder untrusted code writes (engine/inputs/fdtree.py), each attacked while it runs.

A link is swapped in at the moment the operation opens something, timed with inotify (the
attacker here is a thread of the test, playing a snippet process that is still alive), never by
luck: the swap happens after the listing and before the next step, every time.
"""

from __future__ import annotations

import ctypes
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from engine.inputs import fdtree
from engine.storage import upload_tree

SECRET = b"HOSTSECRET-fdtree-31c"
_libc = ctypes.CDLL(None, use_errno=True)
IN_OPEN = 0x20


class OnOpen:
    """Runs ``action`` once, the first time any of ``paths`` is opened (inotify IN_OPEN)."""

    def __init__(self, paths: list[Path], action) -> None:
        self.fd = _libc.inotify_init()
        assert self.fd >= 0
        for p in paths:
            assert _libc.inotify_add_watch(self.fd, str(p).encode(), IN_OPEN) >= 0, ctypes.get_errno()
        self.action, self.fired = action, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        os.read(self.fd, 4096)
        self.action()
        self.fired.set()
        os.close(self.fd)


def _dirfd(p: Path) -> int:
    return os.open(p, os.O_RDONLY | os.O_DIRECTORY)


def test_upload_reads_what_it_listed_not_a_link_swapped_in(tmp_path, monkeypatch):
    """Every file but the first is swapped for a link to a host file when the upload has opened
    the first one: none of the links is read, the first file goes up, nothing leaks. (The swap
    runs inside that open, not on an inotify thread: on a loaded machine the thread could wake
    after all 40 files had gone up, and the test would fail with no swap at all.)"""
    host = tmp_path / "host.txt"
    host.write_bytes(SECRET)
    work = tmp_path / "work"
    (work / "figures").mkdir(parents=True)
    files = [work / "figures" / f"f{i:02d}.png" for i in range(40)]
    for f in files:
        f.write_bytes(b"PNG clean")

    def swap() -> None:
        for f in files:
            try:
                f.unlink()
                f.symlink_to(host)
            except OSError:
                pass
    real, fired = fdtree.open_file, threading.Event()

    def open_then_swap(e: fdtree.Entry) -> int | None:
        fd = real(e)
        if not fired.is_set():
            swap()
            fired.set()
        return fd

    monkeypatch.setattr(fdtree, "open_file", open_then_swap)
    dest = tmp_path / "dest"
    n = upload_tree(work, str(dest))
    assert fired.wait(5)
    up = [p for p in dest.rglob("*") if p.is_file()]
    assert 1 <= n == len(up) < 40
    assert all(p.read_bytes() == b"PNG clean" for p in up)
    assert not any(SECRET in p.read_bytes() for p in up)


def test_chown_never_goes_through_a_folder_swapped_for_a_link(tmp_path):
    """The folder being walked is swapped for a link to a host folder holding the same names
    the moment the walk opens it: no host file changes owner or loses its setuid bit."""
    hostdir = tmp_path / "host"
    hostdir.mkdir()
    for i in range(500):
        (hostdir / f"f{i:04d}").write_text("host")
    os.chmod(hostdir / "f0000", 0o4755)
    before = {p.name: (p.stat().st_uid, p.stat().st_mode) for p in hostdir.iterdir()}
    top = tmp_path / "folder"
    sub = top / "w" / "sub"
    sub.mkdir(parents=True)
    for i in range(500):
        (sub / f"f{i:04d}").write_text("mine")

    def swap() -> None:
        sub.rename(top / "w" / "old")
        sub.symlink_to(hostdir)
    watch = OnOpen([sub], swap)
    fd = _dirfd(top)
    try:
        fdtree.chown_tree(fd, 54321, 54321)
    finally:
        os.close(fd)
    assert watch.fired.wait(5)
    after = {p.name: (p.stat().st_uid, p.stat().st_mode) for p in hostdir.iterdir()}
    assert after == before
    assert after["f0000"][1] & stat.S_ISUID


@pytest.mark.slow
def test_clear_removes_any_depth_and_never_follows_a_link(tmp_path):
    hostdir = tmp_path / "host"
    hostdir.mkdir()
    (hostdir / "keep.txt").write_text("host")
    top = tmp_path / "folder"
    top.mkdir()
    fd = _dirfd(top)
    d = os.dup(fd)
    for _ in range(5000):                    # deeper than any recursion limit, more than 1024 descriptors
        os.mkdir("a", dir_fd=d)
        nd = os.open("a", os.O_RDONLY | os.O_DIRECTORY, dir_fd=d)
        os.close(d)
        d = nd
    os.symlink(str(hostdir), "up", dir_fd=d)
    os.close(d)
    (top / "b").mkdir()
    (top / "b" / "link").symlink_to(hostdir)
    try:
        u = fdtree.usage(fd)
        assert u.dirs == 5001 and u.entries == 5003 and u.bytes >= 5000 * 512
        fdtree.clear(fd)
    finally:
        os.close(fd)
    assert list(top.iterdir()) == []
    assert (hostdir / "keep.txt").read_text() == "host"


@pytest.mark.slow
def test_a_walk_tolerates_entries_that_vanish(tmp_path):
    top = tmp_path / "folder"
    (top / "churn").mkdir(parents=True)
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            for i in range(200):
                (top / "churn" / str(i)).write_text("x")
            for i in range(200):
                (top / "churn" / str(i)).unlink()
    t = threading.Thread(target=churn, daemon=True)
    t.start()
    fd = _dirfd(top)
    try:
        deadline = time.monotonic() + 2
        walks = 0
        while time.monotonic() < deadline:
            fdtree.usage(fd)
            fdtree.files(fd)
            walks += 1
    finally:
        stop.set()
        t.join()
        os.close(fd)
    assert walks > 10


def test_a_folder_moved_during_the_walk_stops_it(tmp_path):
    top = tmp_path / "folder"
    (top / "a" / "b").mkdir(parents=True)
    (top / "a" / "b" / "f").write_text("x")
    (top / "x").mkdir()
    fd = _dirfd(top)
    try:
        it = fdtree.walk(fd)
        seen = []
        with pytest.raises(fdtree.TreeChanged):
            for e in it:
                seen.append(e.rel)
                if e.rel == "a/b/f":               # inside a/b: move a/ below x/ meanwhile
                    (top / "a").rename(top / "x" / "a")
        assert "x" not in seen                     # it stopped instead of walking on from x/a
    finally:
        os.close(fd)


def test_names_are_shown_escaped_and_links_are_not_files(tmp_path):
    top = tmp_path / "folder"
    top.mkdir()
    (top / os.fsdecode(b"chart\xff.png")).write_bytes(b"x")
    (top / "link.png").symlink_to("/etc/passwd")
    (top / ".hidden").write_text("x")
    fd = _dirfd(top)
    try:
        names = fdtree.files(fd)
    finally:
        os.close(fd)
    assert [fdtree.show(n) for n in names] == ["chart\\xff.png"]
    assert fdtree.show("plain.txt") == "plain.txt"
