"""Pairwise judging on real parts: a newsagent run (the model-free rule-based agent, so only the
judge needs the model), then `dateline pairwise` with the offline model in vLLM as the judge (the
run session's shared server, ``shared_vllm``, as its endpoint) and constrained JSON, both candidate
orders, Parquet out, and the HTML report from it. Hosting the judge as a pool (``judge=hosted``) is
checked with a vLLM-like server (tests/engine/scoring/test_pairwise.py): a vLLM start of its own
cost CI's real tier about 100 s on a 2-core AVX2 machine."""

from __future__ import annotations

import json

import pytest

from engine.storage import PairwiseStore
from ray_jobs.outputs.report import build
from tests.helpers import run_module

pytestmark = [pytest.mark.real, pytest.mark.ray, pytest.mark.timeout(1800)]


def test_pairwise_judge_on_the_offline_model(tmp_path, shared_vllm):
    """Why it takes minutes: a run to judge (Ray, no model), then `dateline pairwise` on the shared
    server for 4 verdicts of up to 640 tokens on CPU."""
    run_dir, out = tmp_path / "run", tmp_path / "pw"
    gen = run_module("ray_jobs.run", "benchmark=newsagent", "agent=newsagent_rule_based", "benchmark.limit=2", "run.order=data",
                     f"run.dir={run_dir}", "run.progress=false", timeout=900)
    assert gen.returncode == 0, gen.stderr[-4000:]
    judge = run_module("ray_jobs.judging.pairwise", f"runs=[{run_dir}]", f"out={out}", "both_orders=true", "seed=11",
                       "max_tokens=640", "judge=openai_compatible", f"judge.base_url={shared_vllm.base_url}",
                       f"judge.model={shared_vllm.model}", "judge.api_key_env=", timeout=1700)
    assert judge.returncode == 0, judge.stderr[-4000:]

    store = PairwiseStore(out)
    comps = store.comparisons()
    # rule-based vs the human reference on 2 tasks, in both orders
    assert len(comps) == 4 and {c["order"] for c in comps} == {"random", "swapped"}
    assert {c["system_b"] for c in comps} == {"reference"} and {c["seed"] for c in comps} == {11}
    rows = store.judgement_rows()
    assert len(rows) == 4 and all(r["tokens_in"] > 0 for r in rows)
    ok = [r for r in rows if r["ok"]]
    # constrained decoding: every verdict parses (a failure would be recorded, never guessed)
    assert len(ok) == 4, [r["error"] for r in rows if not r["ok"]]
    for r in ok:
        v = json.loads(r["value"])
        assert v["overall"] in ("first", "second") and len(v["dimensions"]) == 6
    info = json.loads(next(out.glob("pairwise-*.json")).read_text())
    assert info["judge_model"] == shared_vllm.model and info["judge_stats"]["ok"] == 4

    page = build([str(out), str(run_dir)], tmp_path / "report", n_boot=200)
    html = page.read_text()
    assert "Bradley-Terry" in html and html.count("data:image/png;base64,") >= 3
    assert (tmp_path / "report" / "report.md").read_text().count("| reference (human) |") >= 2
