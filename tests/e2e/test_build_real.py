"""``dateline build build=livenews`` on real parts: the offline model (the run session's shared vLLM
server, as an endpoint) drafts and verifies questions from the bundled dated articles with the real
MiniLM grouping, the stages' prompts and parsers meet a real model's replies, the release is written,
and ``dateline run`` evaluates what it kept. One model plays both roles, so the build must be allowed
to (``build.allow_same_model=true``) and says SELF-VERIFIED. The 0.5B model's verdicts are not
measurements: what is checked is that every stage ran on the real model and was counted."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from tests.helpers import run_module

pytestmark = [pytest.mark.real, pytest.mark.ray, pytest.mark.timeout(1800)]


def test_a_real_build_runs_every_stage_and_dateline_run_evaluates_its_release(tmp_path, shared_vllm):
    """Why it takes minutes: 8 articles through five model stages on CPU (relevance and drafting,
    the verifier's answer, the guideline check and the comparison), then a livenews run over what
    was kept."""
    endpoint = [f"model.base_url={shared_vllm.base_url}", f"model.name={shared_vllm.model}", "model.api_key_env="]
    build = run_module("ray_jobs.cli.main", "build", "build=livenews", "build.allow_same_model=true",
                       "model=openai_compatible", *endpoint, "judge=openai_compatible",
                       f"judge.base_url={shared_vllm.base_url}", f"judge.model={shared_vllm.model}", "judge.api_key_env=",
                       "benchmark.limit=8", "benchmark.max_article_chars=1200", "run.order=data",
                       f"run.dir={tmp_path / 'build'}", "run.progress=false", timeout=1500)
    assert build.returncode == 0, build.stderr[-4000:]
    out = tmp_path / "build" / "release"
    m = json.loads((out / "manifest.json").read_text())
    assert m["self_verified"] and m["marks"] == ["SELF-VERIFIED"] and m["items"] == 8 and m["pending"] == 0
    st = m["stages"]
    # every item is accounted for: rejected at one stage with its reason, or kept
    rejected = sum(sum(s["rejected"].values()) for name, s in st.items() if name != "intake")
    assert rejected + m["kept"] == 8, st
    assert st["relevance"]["in"] == 8 and st["intake"]["counts"]["read"] == 28
    stages = pq.read_table(out / "stages.parquet").to_pylist()
    relevance = [r for r in stages if r["stage"] == "relevance"]
    assert len(relevance) == 8 and all(r["tokens_out"] > 0 and r["model"] == shared_vllm.model for r in relevance)
    drafted = st["relevance"]["passed"]
    assert sum(r["stage"] == "draft" for r in stages) == drafted
    assert m["usage"]["generator"]["tokens_out"] > 0
    assert "Yield per stage" in (out / "report.html").read_text()

    questions = [json.loads(x) for x in (out / "questions.jsonl").read_text().splitlines() if x.strip()]
    assert len(questions) == m["sets"].get("main", 0)
    if not questions:                   # the 0.5B model kept nothing: the run says so in one line
        run = run_module("ray_jobs.cli.main", "run", "benchmark=livenews", "agent=livenews", f"benchmark.data_dir={out}",
                         "model=openai_compatible", *endpoint, f"run.dir={tmp_path / 'eval'}", timeout=600)
        assert run.returncode != 0 and "no questions" in run.stderr, run.stderr[-2000:]
        return
    run = run_module("ray_jobs.cli.main", "run", "benchmark=livenews", "agent=livenews_guided", f"benchmark.data_dir={out}",
                     "benchmark.limit=2", "agent.max_searches=1", "agent.max_visits=1", "agent.max_tokens_turn=160",
                     "model=openai_compatible", *endpoint, "judge=none", f"run.dir={tmp_path / 'eval'}",
                     "run.progress=false", timeout=1200)
    assert run.returncode == 0, run.stderr[-4000:]
    assert "SELF-VERIFIED" in run.stdout
