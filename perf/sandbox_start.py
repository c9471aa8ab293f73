"""What the analyst sandbox costs, side by side in one run:

* per snippet: the start cost of bubblewrap (engine/benchmarks/analyst/sandbox.py) against the
  launcher it replaced (unshare + a Python launcher that built a chroot; the sandbox module of git
  revision ``--old``, loaded from git into a temporary module), each running the same snippets
  (``pass``, then ``import pandas``) in turn, medians and their ratio;
* the limits: a regex bomb through the grep tool, and the worker's peak memory around 300 MB of
  snippet output.

    python perf/sandbox_start.py [--runs 20] [--old 870278b]
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


def old_module(rev: str):    # noqa: ANN201 - a module loaded from git
    src = subprocess.run(["git", "show", f"{rev}:engine/benchmarks/analyst/sandbox.py"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "old_sandbox.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("old_sandbox", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["old_sandbox"] = mod           # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


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
    ap.add_argument("--old", default="870278b", help="git revision of the old launcher")
    a = ap.parse_args()
    from engine.benchmarks.analyst.sandbox import Limits, Sandbox

    old = old_module(a.old)
    with tempfile.TemporaryDirectory() as d:
        new_box = Sandbox(Path(d) / "new", Limits(timeout_s=60))
        if not old.namespace_isolation_available():
            sys.exit("the old launcher's namespace isolation does not work here: nothing to compare")
        old_box = old.Sandbox(Path(d) / "old", old.Limits(timeout_s=60), isolation="namespace")
        print(f"per-snippet wall time, {a.runs} runs each, alternating (median [min, max], seconds):")
        for code in ("pass", "import pandas"):
            o, n = [], []
            for _ in range(a.runs):             # in turn, so load on the machine hits both alike
                o += timed(old_box, code, 1)
                n += timed(new_box, code, 1)
            mo, mn = statistics.median(o), statistics.median(n)
            print(f"  {code!r:16} old launcher {mo:.3f} [{min(o):.3f}, {max(o):.3f}]   bwrap {mn:.3f} "
                  f"[{min(n):.3f}, {max(n):.3f}]   bwrap/old = {mn / mo:.2f}")

        from engine.benchmarks.analyst.generation import _observation

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


if __name__ == "__main__":
    main()
