"""Issue 31, finding 13: the report leads with a summary and its provenance.

README command 1's shape through ``dateline run -m``: the rule-based newsagent baseline and a model
configuration (its endpoint dead: it finishes nothing) in one sweep. The report's Markdown starts
with ``## Summary`` before any run dir section: it names both configurations, the better one on
``search_f1`` (the only one with a value), and what failed with its kind. Then ``## Provenance``:
the dateline version, the commit of this checkout, Python, Ray's version, the command line, the
CPU cores, start, end and wall time; the run dir's ``provenance-*.json`` holds the same, and no
secret (a ``model.env`` value given on the command line never appears).

Issue 46 (findings 7 and 9): a second command then re-runs the baseline alone at ``benchmark.limit=1``
with ``run.order_seed=3``. The provenance names both commands, each behind the one configuration
whose newest numbers it made, and which tasks each took; the MLflow export's tags say the same,
and no param claims ``benchmark.limit: null``.
"""

from __future__ import annotations

import json
import platform
import socket
import subprocess
from importlib.metadata import version

import pytest

from tests.helpers import REPO, run_module

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]

SECRET = "hunter2-not-for-files"


def test_the_report_starts_with_a_summary_and_says_where_its_numbers_come_from(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    run = tmp_path / "run"
    out = run_module("ray_jobs.run", "-m", "agent=newsagent_rule_based,newsagent", "benchmark.limit=2",
                     "model=openai_compatible", f"model.base_url={dead}", "model.name=writer", "model.api_key_env=",
                     "model.max_retries=0", "model.max_retries_per_episode=0", f"+model.env.DATELINE_TOKEN={SECRET}",
                     f"run.dir={run}", "run.progress=false", "run.fail_on_error=false", "cluster.num_cpus=4",
                     f"hydra.sweep.dir={tmp_path / 'multirun'}", timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    (prov_file,) = sorted(run.glob("provenance-*.json"))
    text = prov_file.read_text()
    assert SECRET not in text and all(SECRET not in p.read_text() for p in run.glob("*.json"))
    prov = json.loads(text)
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert prov["commit"] == sha and prov["dateline"] == version("dateline")
    assert prov["python"] == platform.python_version() and prov["packages"]["ray"] == version("ray")
    assert prov["command"][:3] == ["dateline", "run", "-m"] and f"run.dir={run}" in prov["command"]
    assert prov["hardware"]["cores"] >= 1 and prov["started"] <= prov["ended"] and prov["wall_s"] > 0
    assert len(prov["configs"]) == 2

    rep = run_module("ray_jobs.cli.main", "report", str(run), "--out", str(tmp_path / "report"), "--boot", "50",
                     timeout=300)
    assert rep.returncode == 0, rep.stderr[-3000:]
    md = (tmp_path / "report" / "report.md").read_text()
    headings = [ln for ln in md.splitlines() if ln.startswith("## ")]
    assert headings[:3] == ["## Summary", "## Provenance", f"## newsagent: {run}"], headings
    summary = md.split("## Summary", 1)[1].split("## Provenance", 1)[0]
    assert "mode=rule-based" in summary and "writer" in summary and "each over its own plan" in summary, summary
    (f1,) = [ln for ln in summary.splitlines() if ln.startswith("search_f1:")]
    assert f1.startswith("search_f1: highest none (mode=rule-based"), f1
    assert "Failed:" in summary and "APIConnectionError" in summary and "0 of 2 scored (2 errors)" in summary
    provenance = md.split("## Provenance", 1)[1].split("\n## ", 1)[0]
    for want in (f"dateline {version('dateline')}", sha[:12], f"Python {platform.python_version()}",
                 f"ray {version('ray')}", f"run.dir={run}", "cores", prov["started"], prov["ended"]):
        assert want in provenance, (want, provenance)
    assert SECRET not in md

    # a second command, behind the baseline's newest numbers only (issue 46)
    again = run_module("ray_jobs.run", "agent=newsagent_rule_based", "benchmark.limit=1", "run.order_seed=3",
                       f"run.dir={run}", "run.progress=false", "cluster.num_cpus=2", timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    rep = run_module("ray_jobs.cli.main", "report", str(run), "--out", str(tmp_path / "report2"), "--boot", "50",
                     timeout=300)
    assert rep.returncode == 0, rep.stderr[-3000:]
    md = (tmp_path / "report2" / "report.md").read_text()
    provenance = md.split("## Provenance", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in provenance.splitlines() if ln.startswith(f"| {run} |")]
    assert len(rows) == 2, provenance
    sweep_row = next(r for r in rows if " -m " in r)
    again_row = next(r for r in rows if " -m " not in r)
    assert "| 1 of 2 |" in sweep_row and "limit 2, random order (seed 0)" in sweep_row, sweep_row
    assert "| 1 of 2 |" in again_row and "limit 1, random order (seed 3)" in again_row, again_row
    from ray_jobs.outputs.export import _records

    recs = {json.loads(r["row"]["agent"] or "{}").get("mode", "model"): r for r in _records(str(run))}
    assert recs["rule-based"]["tags"]["dateline.tasks"] == "limit 1, random order (seed 3)"
    assert (recs["rule-based"]["tags"]["dateline.limit"], recs["rule-based"]["tags"]["dateline.order_seed"]) == ("1", "3")
    assert all("benchmark.limit" not in r["params"] for r in recs.values())
