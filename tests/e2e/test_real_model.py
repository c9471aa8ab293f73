"""Real parts end to end: vLLM on CPU serving the offline Qwen2.5-Coder-0.5B-Instruct, the real
MiniLM/FAISS index, Ray actors and the Parquet store. Needs ``scripts/setup.sh`` to have
prepared the model (the test command does); slow (~5 min on 2 cores)."""

from __future__ import annotations

import asyncio
import json

import pytest

from engine.benchmarks.newsagent import BENCHMARK
from engine.benchmarks.newsagent.config import NewsagentAgentConfig
from engine.dispatch import EpisodeRunner, EpisodeSpec, WorkerSetup
from engine.hosting.vllm_server import VLLMServer
from engine.llm import Endpoint, SamplingParams
from engine.hosting.replica import replica_log_name
from engine.storage import EpisodeStore
from indexes.service import AsyncLocalIndex
from ray_jobs.configs import compose
from tests.helpers import run_module

pytestmark = [pytest.mark.real, pytest.mark.timeout(1800)]


@pytest.mark.ray
def test_hosted_vllm_runs_four_episodes_concurrently(tmp_path):
    out = run_module("ray_jobs.run", f"run.dir={tmp_path}", "benchmark.limit=4", "agent.max_operations=4",
                     "agent.rephrase_attempts=1", "cluster.episodes_per_worker=4", "run.progress=false", timeout=1700)
    assert out.returncode == 0, out.stderr[-4000:]
    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    eps = store.episodes().to_pylist()
    assert len(eps) == 4 and all(e["status"] == "ok" for e in eps), [e["error"] for e in eps]
    # concurrency: every episode started before the first one finished
    assert max(e["started_at"] for e in eps) < min(e["finished_at"] for e in eps)
    steps = store.steps().to_pylist()
    assert all(s["raw_output"] and s["tokens_in"] > 0 and s["tokens_out"] > 0 for s in steps)
    assert any(s["parsed_action"] for s in steps), "the real model never produced a parseable action"
    for e in eps:
        assert e["operations"] <= 4 and e["output"].strip() and e["model"] == "qwen2.5-coder-0.5b-instruct"
        assert e["tokens_in"] == sum(s["tokens_in"] for s in steps if s["episode_id"] == e["episode_id"])
    metrics = {m["metric"]: m for m in store.metrics().to_pylist()}
    assert metrics["episodes"]["value"] == 4 and metrics["search_f1"]["n"] == 4
    assert (tmp_path / "logs" / replica_log_name("qwen2.5-coder-0.5b-instruct", 0)).exists()


@pytest.fixture(scope="module")
def vllm_server(model_dir):
    cfg = compose().model
    server = VLLMServer(str(model_dir), cfg.served_name, engine_args=cfg.engine_args, env=cfg.env,
                        host="127.0.0.1")
    server.start()
    try:
        server.wait_healthy(900)
        yield Endpoint(server.local_url() + "/v1", cfg.served_name)
    finally:
        server.stop()


def test_guided_json_actions_with_real_model(vllm_server, sample_index, sample_dataset):
    """vLLM structured outputs: every action turn, 1-step and 2-step, is schema-valid JSON."""
    async def go(agent):
        setup = WorkerSetup("newsagent", "qwen", agent, "{}", [vllm_server], SamplingParams(), 8, 5, 0.7)
        runner = EpisodeRunner(setup, AsyncLocalIndex(sample_index))
        tasks = sample_dataset.tasks[4:6]
        return await asyncio.gather(*[runner.run(EpisodeSpec(f"{i:016x}", "h", t, t.task_id, 0))
                                      for i, t in enumerate(tasks)])

    for mode in ("1-step", "2-step"):
        agent = NewsagentAgentConfig(mode=mode, guided_json=True, max_operations=3, rephrase=False,
                                     max_tokens_action=400)
        results = asyncio.run(go(agent))
        for r in results:
            assert r["episode"]["status"] == "ok", r["episode"]["error"]
            turns = [s for s in r["steps"] if s["turn"] in ("action", "choose")]
            assert turns
            for s in turns:
                obj = json.loads(s["raw_output"])
                assert obj["Action"] in ("search", "insert", "remove", "terminate")
