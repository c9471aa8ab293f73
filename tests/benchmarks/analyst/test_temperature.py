"""analyst episodes sample at the paper's generation temperature (0.6), whatever the model's
default, through a per-call temperature of the chat client."""

from __future__ import annotations

import asyncio
import json

import pytest

from engine.benchmarks.analyst.config import AnalystAgentConfig
from engine.llm import ChatClient, Endpoint, SamplingParams
from tests.benchmarks.analyst.test_analyst_episode import REPORT, run
from tests.fake_openai import FakeOpenAI


def test_chat_client_per_call_temperature():
    async def go():
        with FakeOpenAI(lambda m, r: "ok") as srv:
            client = ChatClient(Endpoint(srv.base_url, "fake"), SamplingParams(temperature=0.0, max_retries=0))
            await client.chat([{"role": "user", "content": "hi"}], 5, temperature=0.6)
            await client.chat([{"role": "user", "content": "hi"}], 5)
            await client.close()
            return [r["temperature"] for r in srv.requests]
    assert asyncio.run(go()) == [0.6, 0.0]


def test_analyst_episodes_sample_at_0_6(tmp_path):
    assert AnalystAgentConfig().temperature == 0.6
    script = [{"tool": "write_report", "content": REPORT}, {"tool": "finish"}]
    agentic = lambda m, r: json.dumps(script[sum(x["role"] == "assistant" for x in m)])  # noqa: E731
    for agent, responder in ((AnalystAgentConfig(context_tokens=2600, map_max_tokens=200, report_max_tokens=600),
                              lambda m, r: REPORT),
                             (AnalystAgentConfig(mode="agentic"), agentic)):
        (res,), reqs = run(["crashes-2023"], agent, responder, tmp_path)   # the model's own temperature is 0
        assert res["episode"]["status"] == "ok", res["episode"]["error"]
        assert len(reqs) >= 2 and {r["temperature"] for r in reqs} == {0.6}
    (res,), reqs = run(["crashes-2023"], AnalystAgentConfig(temperature=None), lambda m, r: REPORT, tmp_path)
    assert {r["temperature"] for r in reqs} == {0.0}                         # null: the model's


@pytest.mark.slow
def test_agent_configs_set_it():
    from ray_jobs.config.compose import compose

    for agent in ("analyst", "analyst_agentic"):
        a = compose(["benchmark=analyst", f"agent={agent}"]).agent
        assert a.temperature == 0.6 and a.report_attempts == 2
