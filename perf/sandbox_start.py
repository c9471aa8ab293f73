"""What the analyst sandbox costs, side by side in one run:

* per snippet: the start cost of the sandbox now (engine/sandbox/: a cgroup
  per snippet where one can be made, the folder's uid killed before and after, the quota walk
  through descriptors) against the sandbox module of git revision ``--old`` (default: before
  issue 30; loaded from git into a temporary module: it re-owned the folder by path before each
  snippet), each running the same snippets (``pass``, then ``import pandas``) in turn, in an empty
  folder and in one of 2,000 files; medians and their ratio;
* the limits: a regex bomb through the grep tool, the worker's peak memory around 300 MB of
  snippet output, and around the ``read`` tool returning 3 lines of a 64 MB file.

    python perf/sandbox_start.py [--runs 20] [--old 31ffd29]
"""

from __future__ import annotations

import argparse
import importlib.util
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def load_from_git(rev: str, path: str, name: str):    # noqa: ANN201 - a module loaded from git
    src = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout
    file = Path(tempfile.mkdtemp()) / Path(path).name
    file.write_text(src)
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod                    # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def old_module(rev: str):    # noqa: ANN201 - a module loaded from git
    # the sandbox lived in engine/benchmarks/analyst/ then, and imported its siblings from there:
    # they come from the same revision, under their old names
    for sibling in ("seccomp", "cgroup"):
        try:
            load_from_git(rev, f"engine/benchmarks/analyst/{sibling}.py", f"engine.benchmarks.analyst.{sibling}")
        except subprocess.CalledProcessError:
            pass                               # not there yet at that revision
    return load_from_git(rev, "engine/benchmarks/analyst/sandbox.py", "old_sandbox")


def timed(box, code: str, runs: int) -> list[float]:  # noqa: ANN001
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        res = box.run_python(code)
        out.append(time.perf_counter() - t0)
        assert res.ok, res.stderr[-500:]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--old", default="31ffd29", help="git revision of the sandbox to compare with")
    a = ap.parse_args()
    import os

    from engine.sandbox import Limits, Sandbox, cgroup

    old = old_module(a.old)
    with tempfile.TemporaryDirectory() as d:
        print(f"machine: {os.cpu_count()} cores; cgroup: "
              f"{cgroup.cgroup_support()}")
        for files in (0, 2000):
            new_box = Sandbox(Path(d) / f"new{files}", Limits(timeout_s=60))
            old_box = old.Sandbox(Path(d) / f"old{files}", old.Limits(timeout_s=60))
            for i in range(files):
                new_box.write_text(f"data/f{i:04d}.txt", "x")
                old_box.write_text(f"data/f{i:04d}.txt", "x")
            new_box.adopt()
            print(f"per-snippet wall time, folder of {files:,} files, {a.runs} runs each, alternating "
                  "(median [min, max], seconds):")
            for code in ("pass", "import pandas"):
                o, n = [], []
                for _ in range(a.runs):             # in turn, so load on the machine hits both alike
                    o += timed(old_box, code, 1)
                    n += timed(new_box, code, 1)
                mo, mn = statistics.median(o), statistics.median(n)
                print(f"  {code!r:16} before {mo:.3f} [{min(o):.3f}, {max(o):.3f}]   now {mn:.3f} "
                      f"[{min(n):.3f}, {max(n):.3f}]   now/before = {mn / mo:.2f}")

        from engine.benchmarks.analyst.generation import _observation

        new_box = Sandbox(Path(d) / "limits", Limits(timeout_s=60))
        new_box.write_text("sources/a.txt", ("a" * 30 + "b\n") * 50)
        for pattern in ("(a+)+$", "(a|aa)+$"):
            t0 = time.perf_counter()
            obs, _ = _observation(new_box, {"tool": "grep", "pattern": pattern, "path": "sources"}, 4000)
            print(f"grep {pattern!r}: {time.perf_counter() - t0:.3f} s ({obs[:60]!r})")
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.perf_counter()
        res = new_box.run_python("import sys\nfor i in range(100_000):\n sys.stdout.write('x' * 3000 + '\\n')")
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(f"300 MB of snippet output: {res.output_bytes['stdout']:,} bytes read in {time.perf_counter() - t0:.2f} s; "
              f"worker peak RSS {before / 1024:.0f} -> {after / 1024:.0f} MB (+{(after - before) / 1024:.1f} MB)")
        new_box.run_python("open('big.txt', 'w').write(('y' * 99 + '\\n') * 640_000)")
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.perf_counter()
        obs, _ = _observation(new_box, {"tool": "read", "path": "big.txt", "start": 5, "end": 7}, 4000)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(f"read 3 lines of a 64 MB file: {time.perf_counter() - t0:.2f} s; worker peak RSS "
              f"{before / 1024:.0f} -> {after / 1024:.0f} MB (+{(after - before) / 1024:.1f} MB) ({obs[:40]!r})")


if __name__ == "__main__":
    main()
