"""The analyst sandbox: bubblewrap is the default and must work on these machines (this test
fails, never skips, where it does not), writes stay in the episode folder, no network, runaway
code is stopped, the host's file tools never follow links, and where no OS isolation can start
an agentic run refuses to start. The hostile cases are the red-team suite in tests/security/."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from engine.sandbox import Limits, PathRefused, Sandbox, SandboxUnavailable
from engine.sandbox import isolation as S
from tests.conftest import REPO
from tests.engine.sandbox.test_sandbox_reads import ISOLATIONS


@pytest.fixture
def box(tmp_path):
    return Sandbox(tmp_path / "episode", Limits(timeout_s=5, memory_mb=512))


def test_bubblewrap_is_the_default_and_works_here():
    """On these machines (and in CI) snippets run under bwrap; if it cannot start, this fails."""
    ok, why = S.bwrap_status()
    assert ok, f"bubblewrap cannot start here: {why}"
    assert Sandbox.__init__.__defaults__ is not None and "bwrap" in Sandbox.__init__.__defaults__
    from engine.benchmarks.analyst.config import AnalystAgentConfig

    assert AnalystAgentConfig().sandbox == "bwrap"


def test_runs_code_in_the_episode_folder(box):
    res = box.run_python("import os\nprint(os.getcwd())\nopen('out.csv', 'w').write('a,b\\n1,2\\n')\n"
                         "import os; os.makedirs('figs', exist_ok=True); open('figs/x.txt','w').write('x')")
    assert res.ok, res.stderr
    assert res.stdout.strip() == str(box.root)
    assert res.new_files == ["figs/x.txt", "out.csv"]
    assert box.read_text("out.csv") == "a,b\n1,2\n"


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("code", [
    "open('{outside}/x.txt', 'w').write('no')",
    "open('../escape.txt', 'a').write('no')",
    "import os; os.open('{outside}/y.txt', os.O_CREAT | os.O_WRONLY)",
    "import os; os.remove('{outside}/keep.txt')",
    "import os; os.rename('{outside}/keep.txt', 'stolen.txt')",
    "import shutil; shutil.rmtree('{outside}')",
    "import os; os.symlink('/etc/passwd', '{outside}/link')",
    "import pathlib; pathlib.Path('{outside}/z.txt').write_text('no')",
])
def test_writes_outside_the_folder_are_refused(tmp_path, code, isolation):
    box = Sandbox(tmp_path / "episode", Limits(timeout_s=5, memory_mb=512), isolation=isolation)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    res = box.run_python(code.format(outside=outside))
    # under bwrap, '..' of a folder under /tmp is the snippet's own private /tmp: a write there
    # succeeds and vanishes with the sandbox; nothing reaches the host
    if not (isolation == "bwrap" and "../" in code):
        assert not res.ok and "Error" in res.stderr
    assert sorted(p.name for p in outside.iterdir()) == ["keep.txt"]
    assert (outside / "keep.txt").read_text() == "keep"
    assert not (tmp_path / "escape.txt").exists()


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_no_network(tmp_path, isolation):
    box = Sandbox(tmp_path / "episode", Limits(timeout_s=5, memory_mb=512), isolation=isolation)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    accepted = []
    t = threading.Thread(target=lambda: accepted.append(srv.accept()), daemon=True)
    t.start()
    res = box.run_python(f"import socket\ns = socket.socket()\ns.settimeout(2)\ns.connect(('127.0.0.1', {port}))\n"
                         "print('connected')")
    assert not res.ok and "connected" not in res.stdout
    t.join(timeout=0.5)
    assert not accepted
    srv.close()
    res = box.run_python("import urllib.request\nurllib.request.urlopen('http://example.com', timeout=2)")
    assert not res.ok


def test_without_os_isolation_nothing_runs_unless_asked(tmp_path, monkeypatch):
    """Fail closed: no bwrap (or no user namespaces) means no sandbox and no agentic run; the
    message says why and how to fix it. audit_unsafe stays possible, by explicit choice."""
    monkeypatch.setenv("DATELINE_BWRAP", str(tmp_path / "no-such-bwrap"))
    S._probe.cache_clear()
    try:
        with pytest.raises(SandboxUnavailable, match="cannot start here.*To fix: install bubblewrap"):
            Sandbox(tmp_path / "episode")
        assert Sandbox(tmp_path / "unsafe", isolation="audit_unsafe").isolation == "audit_unsafe"
    finally:
        S._probe.cache_clear()


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_runaway_time_and_processes_are_stopped(tmp_path, isolation):
    quick = Sandbox(tmp_path / "quick", Limits(timeout_s=1, memory_mb=512), isolation=isolation)
    res = quick.run_python("while True:\n    pass")
    assert res.timed_out and not res.ok and 1 <= res.seconds < 10
    res = quick.run_python("import time\ntime.sleep(60)")
    assert res.timed_out and 1 <= res.seconds < 10


def test_memory_limit(box):
    res = box.run_python("x = bytearray(2 * 1024 ** 3)\nprint('allocated')")
    assert not res.ok and "allocated" not in res.stdout and "MemoryError" in res.stderr


def test_file_tools_refuse_paths_outside_and_never_follow_links(box):
    (box.root / "data").mkdir()
    (box.root / "data" / "a.csv").write_text("x\n")
    assert box.read_text("data/a.csv") == "x\n"
    for bad in ("../x", "/etc/passwd", "data/../../x"):
        with pytest.raises(PathRefused):
            box.read_text(bad)
    os.symlink("/etc/hostname", box.root / "data" / "link.txt")
    os.symlink("/etc", box.root / "etc")
    os.mkfifo(box.root / "data" / "pipe")
    for bad in ("data/link.txt", "etc/hostname", "data/pipe"):
        with pytest.raises(PathRefused):
            box.read_text(bad)
    with pytest.raises(PathRefused):
        box.write_text("data/link.txt", "x")
    assert Path("/etc/hostname").read_text() != "x"
    assert box.files() == ["data/a.csv"]


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_pandas_and_matplotlib_work_inside(tmp_path, isolation):
    """An Excel source, under both isolations (openpyxl reads the system MIME table at import)."""
    import shutil

    box = Sandbox(tmp_path / "episode", Limits(timeout_s=90, memory_mb=2048), isolation=isolation)
    src = Path(__file__).resolve().parents[3] / "engine/benchmarks/analyst/sample_tasks/unemployment-brief/sources"
    shutil.copy(src / "unemployment_rates.xlsx", box.root)
    res = box.run_python(
        "import pandas as pd, matplotlib.pyplot as plt, os\n"
        "df = pd.read_excel('unemployment_rates.xlsx')\n"
        "print(round(df[df.year == 2020].unemployment_rate.mean(), 2))\n"
        "os.makedirs('figures', exist_ok=True)\n"
        "df.pivot(index='year', columns='state', values='unemployment_rate').plot()\n"
        "plt.savefig('figures/rates.png')\n")
    assert res.ok, res.stderr[-2000:]
    assert res.new_files == ["figures/rates.png"]
    assert box.read_bytes("figures/rates.png")[:4] == b"\x89PNG"


@pytest.mark.slow
def test_bwrap_from_a_venv_reached_through_a_symlink(tmp_path):
    """The sandbox binds real paths: an interpreter run by a symlinked path (``.venv ->
    /elsewhere``) must still find its packages inside."""
    link = tmp_path / "venv-link"
    link.symlink_to(Path(sys.prefix).resolve(), target_is_directory=True)
    python = link / Path(sys.executable).relative_to(sys.prefix)
    code = ("import sys\nfrom engine.sandbox import Limits, Sandbox\n"
            f"assert sys.prefix.startswith({str(link)!r}), sys.prefix\n"
            f"box = Sandbox({str(tmp_path / 'episode')!r}, Limits(timeout_s=60))\n"
            "res = box.run_python('import pandas, os; print(os.getpid())')\n"
            "print(res.ok, res.stdout.strip(), res.stderr[-500:])\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([str(python), "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[0] == "True" and int(out.stdout.split()[1]) <= 2, out.stdout


# -- supervision (issue 30) ----------------------------------------------------------------------
def _alive(uid: int) -> list[int]:
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if os.stat(f"/proc/{p}").st_uid == uid and \
                        open(f"/proc/{p}/stat", "rb").read().rpartition(b")")[2].split()[0] not in (b"Z", b"X"):
                    out.append(int(p))
            except (OSError, IndexError):
                pass
    return out


@pytest.mark.slow
def test_an_exception_inside_supervision_still_kills_the_whole_tree(box, monkeypatch):
    """The quota check raises on its third call (a walk that fails, descriptors run out ...):
    the snippet is stopped, its setsid'd grandchild dies with it, and the run says why."""
    calls = {"n": 0}
    real = Sandbox.usage

    def failing(self, pids=()):
        calls["n"] += 1
        if calls["n"] >= 3:
            raise OSError(24, "Too many open files")
        return real(self, pids)
    monkeypatch.setattr(Sandbox, "usage", failing)
    res = box.run_python("import os, time\nif os.fork() == 0:\n os.setsid()\n if os.fork() == 0:\n"
                         "  while True:\n   open('beat', 'w').write(str(time.time())); time.sleep(0.05)\n"
                         " os._exit(0)\ntime.sleep(30)")
    assert not res.ok and res.supervision_error.startswith("OSError") and "stopped" in res.summary(4000)
    assert res.seconds < 5
    uid = box.owner if box.owner is not None else None
    if uid is not None:
        assert _alive(uid) == []
    monkeypatch.setattr(Sandbox, "usage", real)
    assert not box.exists("beat")                 # what the stopped run added was removed
    import time

    time.sleep(0.3)
    assert not box.exists("beat")                 # and nothing writes it any more


@pytest.mark.slow
def test_the_tree_shares_one_memory_limit(tmp_path):
    """Three children of 300 MB each under a 512 MB limit: the kernel kills in the tree."""
    from engine.sandbox import cgroup

    assert cgroup.cgroup_support()[0] is not None or os.geteuid() != 0, cgroup.cgroup_support()
    box = Sandbox(tmp_path / "episode", Limits(timeout_s=20, memory_mb=512))
    res = box.run_python("import os, time\nkids = []\nfor i in range(3):\n pid = os.fork()\n if pid == 0:\n"
                         "  x = b'x' * (300 << 20); time.sleep(2); os._exit(0)\n kids.append(pid)\n"
                         "print(sum(os.waitpid(p, 0)[1] == 0 for p in kids), 'of 3 held')")
    if os.geteuid() == 0:
        assert "3 of 3 held" not in res.stdout and res.memory_exceeded, res.summary(2000)
        assert res.peak_memory_mb is not None and res.peak_memory_mb <= 512 + 1


def test_read_lines_streams_a_page(box):
    box.write_text("t.txt", "".join(f"line {i}\n" for i in range(1, 1001)) + "last, no newline")
    lines, total = box.read_lines("t.txt", 999, 1005)
    assert total == 1001 and lines == ["line 999", "line 1000", "last, no newline"]
    text = "".join(f"{i}:" + "z" * (i % 97) + "\n" for i in range(200_000))     # lines across 64 KB chunks
    box.write_text("many.txt", text)
    want = text.splitlines()
    for a, b in ((1, 3), (7_000, 7_010), (199_998, 200_005)):
        lines, total = box.read_lines("many.txt", a, b)
        assert total == 200_000 and lines == want[a - 1:b], (a, b)
    box.write_text("long.txt", "x" * 100_000 + "\nshort\n")
    lines, total = box.read_lines("long.txt", 1, 2, max_line=50)
    assert total == 2 and lines == ["x" * 50, "short"]


def test_the_probe_names_what_is_not_isolated():
    ns = {n: i for i, n in enumerate(S.NAMESPACES)}
    good = {"ns": {n: i + 100 for n, i in ns.items()}, "Seccomp": "2", "NoNewPrivs": "1", "CapEff": "0" * 16,
            "CapPrm": "0" * 16, "uid_map": ["1000", "0", "1"], "uid": 1000, "marker": False, "pid1": "bwrap",
            "ifaces": ["lo"]}
    kw = dict(host_ns=ns, uid=1000, file_uid=1000, marker="/m", worker_cmdline="python -m ray", seccomp_expected=True)
    assert S.isolation_problems(good, **kw) == []
    bad = {**good, "ns": dict(ns), "Seccomp": "0", "uid": 0, "uid_map": ["0", "0", "4294967295"], "marker": True,
           "pid1": "python -m ray", "ifaces": ["lo", "eth0"], "CapEff": "000001ffffffffff"}
    problems = "; ".join(S.isolation_problems(bad, **{**kw, "file_uid": 0}))
    for words in ("pid namespace is the worker's", "no seccomp", "capabilities", "uid map", "belongs to uid 0",
                  "host path", "PID 1 is the worker", "eth0"):
        assert words in problems, (words, problems)
