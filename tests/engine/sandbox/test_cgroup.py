"""Snippet cgroups (engine/sandbox/cgroup/).

The real tests run against this machine's kernel (cgroup v1 here; v2 where that is what the
machine has): a memory limit on a whole process tree, a pids limit, and kill() of a tree that
escaped its session. They skip only when not root on Linux: as root, a cgroup that cannot be made
is a failure. The v2 code path is also exercised on a fake tree in tmp_path (the test plays the
kernel: a new directory gets the interface files, rmdir refuses a populated one).
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.sandbox import cgroup as C
from engine.sandbox.cgroup import CgroupUnavailable, SnippetCgroup, TreeUsage, fs, hierarchy

MB = 1 << 20


# --- the real kernel ---------------------------------------------------------------------------

@pytest.fixture
def real() -> str:
    """The version snippet cgroups use here. Not root (or not Linux): skipped. Root: a v1 memory
    hierarchy that is mounted writable must work (a failure otherwise); elsewhere the detected
    version is used, and only a root without any usable cgroup (v2, no delegated subtree) skips."""
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("snippet cgroups need root on Linux")
    version, why = C.cgroup_support()
    v1_writable = os.path.isdir("/sys/fs/cgroup/memory") and os.access("/sys/fs/cgroup/memory", os.W_OK)
    if v1_writable:
        assert version == "v1", f"root, /sys/fs/cgroup/memory writable, yet no snippet cgroup: {why}"
    elif version is None:
        pytest.skip(f"root, but no usable cgroup here: {why}")
    assert version is not None
    return version


def _run(cg: SnippetCgroup, code: str, **kw: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-S", "-c", code], preexec_fn=cg.attach_self, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)  # type: ignore[call-overload]


OOM = r"""
import os, time
kids = []
for i in range(3):
    pid = os.fork()
    if pid == 0:
        b = b"\x01" * (200 << 20)     # written: every page charged
        time.sleep(1.0)               # the three overlap
        os._exit(0)
    kids.append(pid)
print([os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in kids])
"""


@pytest.mark.slow
def test_memory_limit_is_on_the_whole_tree(real):
    limit = 300 * MB
    cg = SnippetCgroup.create("oom", limit, 64)
    try:
        if real == "v1":
            m = cg.dirs["memory"]
            assert int((m / "memory.limit_in_bytes").read_text()) == limit
            if (m / "memory.memsw.limit_in_bytes").exists():      # swap cannot extend the limit
                assert int((m / "memory.memsw.limit_in_bytes").read_text()) == limit
        proc = _run(cg, OOM)
        out, err = proc.communicate(timeout=30)
        u = cg.usage()
    finally:
        cg.close()
    if real == "v2" and proc.returncode == -signal.SIGKILL:   # memory.oom_group: the whole tree went
        assert u.oom_kills >= 1
    else:
        assert proc.returncode == 0, err
        codes = eval(out)                                       # e.g. [-9, 0, -9]
        assert -signal.SIGKILL in codes, codes                 # 3 x 200 MB never fit in 300 MB
    assert u.memory_limit_hit and u.oom_kills >= 1, u
    if u.peak_memory_bytes is not None:
        assert 100 * MB < u.peak_memory_bytes <= limit + MB, u
    assert cg.usage() == u                                      # close() kept it
    assert not any(d.exists() for d in cg.dirs.values())


PIDS = r"""
import os
r, w = os.pipe()
kids = []
for i in range(20):
    try:
        pid = os.fork()
    except OSError:
        continue
    if pid == 0:
        os.close(w)
        os.read(r, 1)                 # alive until the parent is done forking
        os._exit(0)
    kids.append(pid)
os.close(w)
for p in kids:
    os.waitpid(p, 0)
print(len(kids))
"""


def test_pids_limit_caps_the_tree(real):
    with SnippetCgroup.create("pids", 256 * MB, 5) as cg:
        proc = _run(cg, PIDS)
        out, err = proc.communicate(timeout=30)
        u = cg.usage()
    assert proc.returncode == 0, err
    assert 1 <= int(out) <= 4, out                              # 5 with the parent itself
    assert u.pids_limit_hit and not u.memory_limit_hit, u


TREE = r"""
import os, signal, sys, time
if os.fork() == 0:
    if os.fork() == 0:                # the grandchild: its own session, deaf to SIGTERM, orphaned
        os.setsid()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print(os.getpid(), flush=True)
        time.sleep(60)
        os._exit(0)
    os._exit(0)
os.wait()
time.sleep(60)
"""


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


def test_kill_reaches_an_escaped_grandchild_and_close_removes_it(real):
    cg = SnippetCgroup.create("tree", 256 * MB, 16)
    proc = _run(cg, TREE)
    try:
        assert proc.stdout is not None
        grandchild = int(proc.stdout.readline())
        assert os.getsid(grandchild) != os.getsid(proc.pid)
        deadline = time.monotonic() + 5
        while not {proc.pid, grandchild} <= set(cg.pids()) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert {proc.pid, grandchild} <= set(cg.pids()), cg.pids()
        os.kill(grandchild, signal.SIGTERM)                     # ignored
        t0 = time.monotonic()
        assert cg.kill(timeout_s=5)
        assert time.monotonic() - t0 < 2
        assert cg.pids() == []
        assert proc.wait(timeout=5) == -signal.SIGKILL
        assert _gone(grandchild)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        cg.close()
    assert not any(d.exists() for d in cg.dirs.values())
    with pytest.raises(subprocess.SubprocessError):             # no cgroup: the child never starts
        subprocess.run([sys.executable, "-S", "-c", ""], preexec_fn=cg.attach_self)


def test_support_probe(real):
    assert C.cgroup_support() == (real, "")


# --- v2 on a fake tree ---------------------------------------------------------------------------

FILES = {"cgroup.procs": "", "cgroup.controllers": "memory pids", "cgroup.subtree_control": "",
         "memory.max": "max", "memory.swap.max": "max", "memory.oom_group": "0", "memory.peak": "0",
         "memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
         "pids.max": "max", "pids.events": "max 0\n", "cgroup.kill": "", "cgroup.freeze": "0"}


@pytest.fixture
def omit() -> set[str]:
    """Interface files the fake kernel leaves out of new directories."""
    return set()


@pytest.fixture
def fake(tmp_path, monkeypatch, omit) -> Path:
    """A v2 base enabling memory and pids; mkdir/rmdir act like cgroupfs."""

    def mkdir(path: Path) -> None:
        os.mkdir(path)
        for name, text in FILES.items():
            if name not in omit:
                (path / name).write_text(text)

    def rmdir(path: Path) -> None:
        if (path / "cgroup.procs").exists() and (path / "cgroup.procs").read_text().split():
            raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(path))
        if any(p.is_dir() for p in path.iterdir()):
            raise OSError(errno.ENOTEMPTY, os.strerror(errno.ENOTEMPTY), str(path))
        for p in path.iterdir():
            p.unlink()
        os.rmdir(path)

    monkeypatch.setattr(fs, "mkdir", mkdir)
    monkeypatch.setattr(fs, "rmdir", rmdir)
    monkeypatch.setattr(hierarchy, "_cleaned", set())
    base = tmp_path / "base"
    base.mkdir()
    (base / "cgroup.controllers").write_text("cpu memory pids")
    (base / "cgroup.subtree_control").write_text("memory pids")
    return base


def test_v2_writes_the_limits(fake):
    cg = SnippetCgroup.create("a/b c", 300 * MB, 5, root=fake, version="v2")
    d = cg.dirs[""]
    assert cg.version == "v2" and d.parent == fake / "dateline-sandbox"
    assert d.name.startswith(f"dateline-sandbox-a_b_c-{os.getpid()}-")
    assert (fake / "dateline-sandbox" / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert (d / "memory.max").read_text() == str(300 * MB)
    assert (d / "memory.swap.max").read_text() == "0"
    assert (d / "memory.oom_group").read_text() == "1"
    assert (d / "pids.max").read_text() == "5"
    cg.attach_self()
    assert (d / "cgroup.procs").read_text() == "0"              # "0": the writing process
    (d / "cgroup.procs").write_text("")
    assert cg.pids() == []
    assert cg.kill()
    assert (d / "cgroup.kill").read_text() == "1"
    cg.close()
    assert not d.exists() and (fake / "dateline-sandbox").exists()


def test_v2_usage_parses_events(fake):
    cg = SnippetCgroup.create("u", 300 * MB, 5, root=fake, version="v2", oom_group=False)
    d = cg.dirs[""]
    assert (d / "memory.oom_group").read_text() == "0"
    assert cg.usage() == TreeUsage(0, 0, False, False)
    (d / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 1\noom_kill 2\noom_group_kill 0\n")
    (d / "memory.peak").write_text(f"{300 * MB}\n")
    (d / "pids.events").write_text("max 4\n")
    assert cg.usage() == TreeUsage(300 * MB, 2, True, True)
    (d / "memory.peak").unlink()                                # before 5.19: no peak
    assert cg.usage().peak_memory_bytes is None
    cg.close()
    assert cg.usage() == TreeUsage(None, 2, True, True)         # kept from before the rmdir


def test_v2_kill_without_cgroup_kill_freezes_and_sigkills(fake, omit):
    omit.add("cgroup.kill")                                # before 5.14
    cg = SnippetCgroup.create("k", 300 * MB, 5, root=fake, version="v2")
    d = cg.dirs[""]
    sleeper = subprocess.Popen([sys.executable, "-S", "-c", "import time; time.sleep(60)"])
    try:
        (d / "cgroup.procs").write_text(f"{sleeper.pid}\n")
        assert not cg.kill(timeout_s=0.3)                       # the fake list never empties...
        assert sleeper.wait(timeout=5) == -signal.SIGKILL       # ...but the process got SIGKILL
        assert (d / "cgroup.freeze").read_text() == "0"         # and the tree was thawed again
        (d / "cgroup.procs").write_text("")
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()
    cg.close()
    assert not d.exists()


def test_v2_without_controllers_leaves_nothing(fake, omit):
    omit.update({"memory.max", "pids.max"})
    with pytest.raises(CgroupUnavailable, match="not enabled"):
        SnippetCgroup.create("n", 300 * MB, 5, root=fake, version="v2")
    assert not any(p.is_dir() for p in (fake / "dateline-sandbox").iterdir())


def test_v2_base_is_the_nearest_cgroup_enabling_memory_and_pids(fake, monkeypatch):
    """The worker in <container>/init (the delegation recipe): the snippets go under <container>."""
    monkeypatch.setattr(hierarchy.sys, "platform", "linux")
    monkeypatch.setattr(hierarchy, "mounts", lambda: [hierarchy.Mount("cgroup2", "/", fake, frozenset({"rw"}))])
    monkeypatch.setattr(hierarchy, "own_paths", lambda: {"": "/init"})
    (fake / "init").mkdir()
    (fake / "init" / "cgroup.subtree_control").write_text("")
    with SnippetCgroup.create("w", 300 * MB, 5) as cg:
        assert cg.version == "v2" and cg.dirs[""].parent == fake / "dateline-sandbox"
    (fake / "cgroup.subtree_control").write_text("")           # nothing delegated: a clear refusal
    with pytest.raises(CgroupUnavailable, match="delegated"):
        SnippetCgroup.create("w", 300 * MB, 5)


def test_stale_cgroups_of_dead_workers_are_removed(fake):
    parent = fake / "dateline-sandbox"
    fs.mkdir(parent)
    dead = subprocess.Popen([sys.executable, "-S", "-c", ""])
    dead.wait()
    old = time.time() - 3600
    names = {"stale": f"dateline-sandbox-x-{dead.pid}-1", "busy": f"dateline-sandbox-x-{dead.pid}-2",
             "young": f"dateline-sandbox-x-{dead.pid}-3", "mine": f"dateline-sandbox-x-{os.getpid()}-99"}
    for key, name in names.items():
        fs.mkdir(parent / name)
        if key != "young":
            os.utime(parent / name, (old, old))
    (parent / names["busy"] / "cgroup.procs").write_text("12345\n")
    with SnippetCgroup.create("new", 300 * MB, 5, root=fake, version="v2"):
        pass
    assert not (parent / names["stale"]).exists()
    assert all((parent / names[k]).exists() for k in ("busy", "young", "mine"))
