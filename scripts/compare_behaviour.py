"""What a refactor must not change, compared between two commits: the CLI (every command's
``--help``), what the YAML under ``conf/`` says (not its comments), every table's declared
Parquet columns and types (each benchmark's episodes too), the columns of the tables a run
writes, the keys of its run-info records and the run dir's layout.

    .venv/bin/python scripts/compare_behaviour.py BASE [HEAD]     # HEAD defaults to the work tree

Each side is a ``git worktree`` (HEAD omitted: this checkout) run with this venv. The run is
model-free (newsagent's rule-based baseline on 2 tasks of the bundled sample, local Ray, no
judge), so it needs no model and takes about a minute per side. Prints what differs; exit status 1
when anything does. The ids a refactor must keep are pinned separately (tests/test_pins.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
COMMANDS = ["run", "estimate", "pairwise", "analyst-checklists", "metrics", "tables", "report", "show", "repair",
            "export", "convert-realtimeqa", "doctor"]
SCHEMAS = """
import json
import engine.storage as s
from engine.benchmarks import get_benchmark
out = {n: [f"{f.name}: {f.type}" for f in getattr(s, n)] for n in dir(s) if n.endswith("_SCHEMA")}
for b in ("newsagent", "livenews", "analyst"):
    out[f"episodes of {b}"] = [f"{f.name}: {f.type}" for f in s.episode_schema(get_benchmark(b).episode_fields)]
print(json.dumps(out))
"""
RUN = ["agent=newsagent_rule_based", "benchmark.limit=2", "judge=none", "cluster.num_workers=1"]


def sh(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    p = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    return f"[exit {p.returncode}]\n{p.stdout}"


def keys(x: Any, prefix: str = "") -> set[str]:
    """Every key path of a JSON value (list items under ``[]``)."""
    out: set[str] = set()
    if isinstance(x, dict):
        for k, v in x.items():
            out.add(prefix + k)
            out |= keys(v, f"{prefix}{k}.")
    elif isinstance(x, list):
        for v in x:
            out |= keys(v, f"{prefix}[].")
    return out


def probe(tree: Path, scratch: Path) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(tree), RAY_USAGE_STATS_ENABLED="0", HF_HUB_OFFLINE="1",
               COLUMNS="100")
    cli = {"--help": sh([PY, "-m", "ray_jobs.cli", "--help"], tree, env)}
    for c in COMMANDS:
        cli[c] = sh([PY, "-m", "ray_jobs.cli", c, "--help"], tree, env)
    import yaml

    # what the YAML says (comments, which name source files, may change)
    conf = {str(p.relative_to(tree)): yaml.safe_load(p.read_text()) for p in sorted((tree / "conf").rglob("*.yaml"))}
    # every table's declared columns and types (the run below writes only some tables)
    schemas = json.loads(sh([PY, "-c", SCHEMAS], tree, env).split("\n", 1)[1])
    run_dir = scratch / "run"
    out = sh([PY, "-m", "ray_jobs.run", *RUN, f"run.dir={run_dir}"], tree, env)
    if not out.startswith("[exit 0]"):
        raise SystemExit(f"the run at {tree} failed:\n{out[-3000:]}")
    import pyarrow.parquet as pq

    columns: dict[str, list[str]] = {}
    for f in sorted(run_dir.rglob("*.parquet")):
        table = f.relative_to(run_dir).parts[0]
        columns.setdefault(table, sorted(set(columns.get(table, [])) | set(pq.read_schema(f).names)))
    infos: dict[str, list[str]] = {}
    for f in sorted(run_dir.rglob("*.json")):
        name = "/".join(f.relative_to(run_dir).parts[:-1] + (f.name.split("-")[0],))
        infos[name] = sorted(set(infos.get(name, [])) | keys(json.loads(f.read_text())))
    # the run dir's top level, with the timestamps and ids in file names as *
    layout = sorted({re.sub(r"\d{8}-\d{6}(-[0-9a-f]+)?", "*", p.relative_to(run_dir).parts[0])
                     for p in run_dir.rglob("*")})
    return {"cli": cli, "conf": conf, "schemas": schemas, "columns": columns, "run_info": infos, "layout": layout}


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    base, head = argv[0], (argv[1] if len(argv) > 1 else None)
    with tempfile.TemporaryDirectory(prefix="dl-compare-") as tmp:
        t = Path(tmp)
        sides = {}
        for name, rev in (("base", base), ("head", head)):
            tree = REPO
            if rev is not None:
                tree = t / f"tree-{name}"
                subprocess.run(["git", "worktree", "add", "--detach", "-q", str(tree), rev], cwd=REPO, check=True)
                (tree / ".cache").symlink_to(REPO / ".cache")      # the embeddings and index setup built
            try:
                (t / name).mkdir()
                sides[name] = probe(tree, t / name)
            finally:
                if rev is not None:
                    subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=False)
    differ = 0
    for part in ("cli", "conf", "schemas", "columns", "run_info", "layout"):
        a, b = sides["base"][part], sides["head"][part]
        if a == b:
            n = len(a)
            print(f"{part}: the same ({n} {'entries' if isinstance(a, dict) else 'items'})")
            continue
        differ += 1
        print(f"{part}: DIFFERS")
        if isinstance(a, dict):
            for k in sorted(set(a) | set(b)):
                if a.get(k) != b.get(k):
                    print(f"  {k}:\n    base: {str(a.get(k))[:400]!r}\n    head: {str(b.get(k))[:400]!r}")
        else:
            print(f"  base only: {sorted(set(a) - set(b))}\n  head only: {sorted(set(b) - set(a))}")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
