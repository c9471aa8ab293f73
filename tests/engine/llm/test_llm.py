"""Replica routing (sticky per episode), the in-flight bound per replica, token accounting."""

from __future__ import annotations

import asyncio

import pytest

from engine.benchmarks.newsagent.config import NewsagentAgentConfig
from engine.llm import ChatClient, Endpoint, Router, SamplingParams
from engine.runtime.dispatch import EpisodeRunner, EpisodeSpec, WorkerSetup
from indexes.service import AsyncLocalIndex
from tests.engine.runtime.test_agent import scripted_writer
from tests.fake_openai import FakeOpenAI


def test_router_is_sticky_and_spreads():
    r = Router([Endpoint("http://a/v1", "m", replica=0), Endpoint("http://b/v1", "m", replica=1)], SamplingParams())
    ids = [f"{i:04x}" + "0" * 12 for i in range(64)]
    picks = [r.client_for(i).endpoint.replica for i in ids]
    assert picks == [r.client_for(i).endpoint.replica for i in ids]     # same episode, same replica
    assert 20 < sum(picks) < 44                                         # both replicas used


@pytest.mark.slow
def test_episodes_stay_on_one_replica_and_inflight_is_bounded(sample_index, sample_dataset):
    async def go(a, b):
        eps = [Endpoint(a.base_url, "m", replica=0), Endpoint(b.base_url, "m", replica=1)]
        setup = WorkerSetup("newsagent", "m", NewsagentAgentConfig(rephrase=False), "{}", eps, SamplingParams(),
                            2, 5, 0.7)
        # re-pinning off: what is tested is that an episode stays (tests/hosting/test_lifecycle.py re-pins)
        runner = EpisodeRunner(setup, AsyncLocalIndex(sample_index),
                               router=Router(eps, SamplingParams(), 2, repin_min_gap=10**9))
        specs = [EpisodeSpec(f"{i:02x}{'ab' * 7}", "h", t, t.task_id, 0) for i, t in enumerate(sample_dataset.tasks[:10])]
        return await asyncio.gather(*[runner.run(s) for s in specs])

    with FakeOpenAI(scripted_writer, delay_s=0.1) as a, FakeOpenAI(scripted_writer, delay_s=0.1) as b:
        results = asyncio.run(go(a, b))
        assert a.max_inflight <= 2 and b.max_inflight <= 2          # inflight_per_replica=2
        assert a.requests and b.requests
        for res in results:
            ep = res["episode"]
            n_calls = ep["n_steps"]
            server = a if ep["replica"] == 0 else b
            title = ep["title"]
            mine = [r for r in server.requests if f"Title: {title}\n" in r["messages"][1]["content"]]
            assert len(mine) == n_calls                                  # every turn on its replica


def test_token_accounting_sums_server_usage():
    async def go(url):
        c = ChatClient(Endpoint(url, "m"), SamplingParams(seed=3))
        first = await c.chat([{"role": "user", "content": "one two three"}], 10)
        second = await c.chat([{"role": "user", "content": "four five"}], 10)
        await c.close()
        return c.usage, first, second

    with FakeOpenAI(lambda m, r: "alpha beta") as srv:
        usage, first, second = asyncio.run(go(srv.base_url))
        assert (first.prompt_tokens, first.completion_tokens, second.prompt_tokens) == (3, 2, 2)
        assert (usage.calls, usage.prompt_tokens, usage.completion_tokens) == (2, 5, 4)
        assert srv.requests[0]["seed"] == 3 and srv.requests[0]["max_tokens"] == 10


def test_the_body_goes_out_as_built_over_the_aiohttp_transport():
    """ChatClient posts its body as built (no SDK rewrite: vLLM's ``structured_outputs`` is a
    top-level key, a JSON schema a ``response_format``), over the SDK's aiohttp transport. The
    transport is what this stack has (openai + aiohttp from the lock): without it every call
    costs about twice the CPU (perf/client_overhead.py), so its absence fails here."""
    from openai._vendor.httpx_aiohttp.transport import AiohttpTransport

    schema = {"type": "object", "properties": {"a": {"type": "string"}}}

    async def go(url):
        c = ChatClient(Endpoint(url, "m"), SamplingParams(temperature=0.3))
        assert isinstance(c._client._client._transport, AiohttpTransport)
        await c.chat([{"role": "user", "content": "x"}], 5, regex="[ab]+")
        await c.chat([{"role": "user", "content": "y"}], 6, json_schema=schema, temperature=0.0)
        await c.close()

    with FakeOpenAI(lambda m, r: "ab") as srv:
        asyncio.run(go(srv.base_url))
        first, second = srv.requests
        assert first == {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 5,
                         "temperature": 0.3, "top_p": 1.0, "structured_outputs": {"regex": "[ab]+"}}
        assert second["response_format"] == {"type": "json_schema",
                                             "json_schema": {"name": "action", "schema": schema}}
        assert second["temperature"] == 0.0 and "structured_outputs" not in second


def test_the_transport_takes_proxies_from_the_environment(monkeypatch):
    """As the SDK's httpx transport does: HTTPS_PROXY routes https endpoints through the proxy
    (a lab's external judge API behind its egress proxy), NO_PROXY exempts hosts."""
    from openai._vendor.httpx_aiohttp.transport import AiohttpTransport

    from engine.llm.transport import http_client

    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("NO_PROXY", "vllm.internal")
    client = http_client(SamplingParams())
    routes = {str(p.pattern): t for p, t in client._mounts.items()}
    assert isinstance(routes["https://"], AiohttpTransport) and str(routes["https://"].proxy.url) == \
        "http://proxy.internal:3128"
    assert routes["all://*vllm.internal"] is None                      # no proxy for it
