"""Issue 35: dateline is a package, not a checkout. The wheel built from this tree, installed into a
fresh venv (the locked dependencies, from uv's cache: offline), runs ``dateline run`` on the bundled
sample from an empty folder outside the repository; the run dir, and nothing else, appears there.

The fresh venv takes its dependencies from the same lock as ``scripts/setup.sh`` (``uv pip sync
--offline``: hard links from the cache setup filled, about 4 s) and dateline itself from the wheel
alone (``--no-deps``): no path of the checkout is on its ``sys.path``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import REPO

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def uv() -> str:
    """The pinned uv, where scripts/setup.sh finds it (PATH, else the cache's tools folder)."""
    want = re.search(r"^uv==(\S+)", (REPO / "requirements/uv.txt").read_text(), re.M)
    assert want, "requirements/uv.txt pins no uv"
    on_path = shutil.which("uv")
    if on_path and subprocess.run([on_path, "--version"], capture_output=True, text=True).stdout.split()[1:2] == [want[1]]:
        return on_path
    cache = Path(os.environ.get("DATELINE_CACHE") or REPO / ".cache")
    exe = cache / "tools" / f"uv-{want[1]}" / "bin" / "uv"
    assert exe.is_file(), f"no uv {want[1]} on PATH or at {exe}: run `bash scripts/setup.sh`"
    return str(exe)


def test_the_wheel_runs_dateline_from_an_empty_folder(tmp_path):
    u = uv()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "DATELINE_WORKDIR")}
    # where the converted model and the embeddings cache live: a configured path, not the checkout
    env |= {"DATELINE_CACHE": str(Path(os.environ.get("DATELINE_CACHE") or REPO / ".cache").resolve()),
            "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1"}

    def sh(cmd: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        assert out.returncode == 0, (cmd, out.stdout[-2000:], out.stderr[-3000:])
        return out

    dist = tmp_path / "dist"
    sh([u, "build", "--wheel", "--offline", "--build-constraint", str(REPO / "requirements/build.txt"),
        "-o", str(dist), str(REPO)], cwd=tmp_path)
    (wheel,) = dist.glob("dateline-*.whl")
    venv = tmp_path / "venv"
    py = str(venv / "bin" / "python")
    base = os.path.realpath(REPO / ".venv" / "bin" / "python")
    sh([u, "venv", "-q", "--python", base, str(venv)], cwd=tmp_path)
    find = ["--find-links", "/opt/wheels"] if Path("/opt/wheels").is_dir() else []
    sh([u, "pip", "sync", "-q", "--offline", "--python", py, *find, str(REPO / "requirements/cpu.txt")], cwd=tmp_path)
    sh([u, "pip", "install", "-q", "--offline", "--no-deps", "--python", py, str(wheel)], cwd=tmp_path)

    empty = tmp_path / "elsewhere"
    empty.mkdir()
    where = sh([py, "-c", "import engine, ray_jobs.config.compose as c; print(engine.__file__); print(c.CONF_DIR)"], cwd=empty)
    engine_file, conf = where.stdout.split()
    assert engine_file.startswith(str(venv)) and conf.startswith(str(venv)), where.stdout   # the wheel's, not REPO's
    dateline = str(venv / "bin" / "dateline")
    assert "Config groups" in sh([dateline, "run", "--help"], cwd=empty).stdout

    run = sh([dateline, "run", "agent=newsagent_rule_based", "benchmark.limit=2", "run.progress=false",
              "cluster.num_cpus=2"], cwd=empty)
    assert "2 of 2 scored" in run.stdout, run.stdout[-2000:]
    assert sorted(os.listdir(empty)) == ["runs"] and os.listdir(empty / "runs") == ["newsagent-sample"]
    # the run dir knows its benchmark: no second argument
    metrics = sh([dateline, "metrics", "runs/newsagent-sample"], cwd=empty)
    assert "search_f1" in metrics.stdout
