"""The newsagent episode loop through the real client path (HTTP, openai client, token
accounting) against a scripted model server, and the real MiniLM index over the sample data."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from engine.benchmarks.newsagent import prompts
from engine.benchmarks.newsagent.config import NewsagentAgentConfig
from engine.llm import Endpoint, SamplingParams
from engine.runtime.dispatch import EpisodeRunner, EpisodeSpec, WorkerSetup
from indexes.service import AsyncLocalIndex
from tests.fake_openai import FakeOpenAI


def retrieved_texts(user: str) -> list[str]:
    return re.findall(r'\{"text": "(.*?)"\} \(dated', user)


def scripted_writer(messages, req):
    """Searches the title, inserts the first result, terminates; writes an article of firsthand facts."""
    user = messages[-1]["content"]
    if "Write the article" in user:
        first = user.split("Firsthand information:\n- ")[1].split("\n")[0]
        return first
    if "Operations used: 0 " in user:
        title = user.split("Title: ")[1].split("\n")[0]
        return json.dumps({"Thought": "background", "Action": "search", "query": title,
                           "year": "2030", "month": "01", "day": "01"})
    texts = retrieved_texts(user)
    draft = user.split("## Draft state\n")[1].split("\n\n")[0]
    if texts and draft == "(none)":
        return json.dumps({"Thought": "use it", "Action": "insert", "obj": {"text": texts[0]}})
    return json.dumps({"Thought": "done", "Action": "terminate"})


def run_episodes(sample_index, tasks, responder, agent: NewsagentAgentConfig, **server_kw):
    async def go():
        with FakeOpenAI(responder, **server_kw) as srv:
            setup = WorkerSetup("newsagent", "fake", agent, "{}", [Endpoint(srv.base_url, "fake")],
                                SamplingParams(), 8, 5, 0.7)
            runner = EpisodeRunner(setup, AsyncLocalIndex(sample_index))
            specs = [EpisodeSpec(f"{i:016x}", "h", t, t.task_id, 0) for i, t in enumerate(tasks)]
            out = await asyncio.gather(*[runner.run(s) for s in specs])
            run_episodes.max_inflight = srv.max_inflight
            return out, srv.requests
    return asyncio.run(go())


def test_one_step_episode_end_to_end(sample_index, sample_dataset):
    task = sample_dataset.tasks[0]
    (res,), requests = run_episodes(sample_index, [task], scripted_writer, NewsagentAgentConfig(trace_threshold=0.5))
    ep, steps = res["episode"], res["steps"]
    assert ep["status"] == "ok", ep["error"]
    assert ep["finish_reason"] == "terminate"
    assert [s["turn"] for s in steps][:3] == ["action", "action", "action"]
    assert ep["n_search"] == 1 and ep["n_insert"] == 1 and ep["n_terminate"] == 1
    assert len(ep["draft_ids"]) == 1 and ep["draft_ids"][0] == ep["retrieved_ids"][0]
    assert ep["output"] == task.firsthand[0]                  # the rephrased article
    assert ep["traceable"] is True and ep["rephrase_attempts"] == 1
    # token accounting: the episode totals are the sums the server reported per call
    assert ep["tokens_in"] == sum(s["tokens_in"] for s in steps) > 0
    assert ep["tokens_out"] == sum(s["tokens_out"] for s in steps) > 0
    assert len(requests) == len(steps)
    # the system prompt is the paper's, the first observation carries the task inputs
    assert requests[0]["messages"][0]["content"] == prompts.system_prompt(two_step=False)
    assert f"Release date: {task.release_date}" in requests[0]["messages"][1]["content"]
    assert requests[0]["temperature"] == 0.0 and "response_format" not in requests[0]


def test_two_step_episode(sample_index, sample_dataset):
    def two_step(messages, req):
        last = messages[-1]["content"]
        if "Write the article" in last:
            return "An article."
        if last.startswith("Give the search"):
            return '{"query": "council pool closure", "year": "2024", "month": "01", "day": "10"}'
        if "Operations used: 0 " in last:
            return '{"Thought": "look", "Action": "search"}'
        return '{"Thought": "stop", "Action": "terminate"}'

    (res,), requests = run_episodes(sample_index, sample_dataset.tasks[:1], two_step,
                                    NewsagentAgentConfig(mode="2-step", rephrase_attempts=1))
    ep, steps = res["episode"], res["steps"]
    assert ep["status"] == "ok", ep["error"]
    assert [s["turn"] for s in steps] == ["choose", "arguments", "choose", "rephrase"]
    assert ep["n_search"] == 1 and ep["operations"] == 1 and ep["finish_reason"] == "terminate"
    # the system prompt is the paper's (shared by both settings); the choose turn's user message
    # says to output only the operation, the arguments turn asks for its content
    assert requests[0]["messages"][0]["content"] == prompts.SYSTEM_PROMPT
    assert requests[0]["messages"][1]["content"].endswith(prompts.TWO_STEP_CHOOSE)
    assert requests[1]["messages"][3] == {"role": "user", "content": prompts.TWO_STEP_ARGS["search"]}
    # the arguments turn continues the same conversation
    assert requests[1]["messages"][2] == {"role": "assistant", "content": '{"Thought": "look", "Action": "search"}'}
    assert json.loads(steps[1]["parsed_action"])["before"] == "2024-01-10"


def test_extended_prompt_variant_in_two_step(sample_index, sample_dataset):
    (res,), requests = run_episodes(sample_index, sample_dataset.tasks[:1], lambda m, r: '{"Action": "terminate"}',
                                    NewsagentAgentConfig(mode="2-step", prompt_variant="extended", rephrase=False))
    assert res["episode"]["status"] == "ok"
    system = requests[0]["messages"][0]["content"]
    assert system == prompts.SYSTEM_PROMPT_EXTENDED + prompts.TWO_STEP_NOTE and "2-step setting" in system


def test_guided_json_sends_schemas(sample_index, sample_dataset):
    (res,), requests = run_episodes(sample_index, sample_dataset.tasks[:1], scripted_writer,
                                    NewsagentAgentConfig(guided_json=True, rephrase=False))
    assert res["episode"]["status"] == "ok"
    rf = requests[0]["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["schema"] == prompts.ONE_STEP_SCHEMA


def test_garbage_output_hits_operation_cap(sample_index, sample_dataset):
    (res,), _ = run_episodes(sample_index, sample_dataset.tasks[:1], lambda m, r: "I am not JSON",
                             NewsagentAgentConfig(max_operations=4, rephrase=False))
    ep = res["episode"]
    assert ep["finish_reason"] == "operation_cap" and ep["n_failed_parse"] == 4 and ep["n_steps"] == 4
    assert all(s["result"].startswith("Error: invalid action: no JSON object found") for s in res["steps"])


@pytest.mark.parametrize("mode", ["1-step", "2-step"])
def test_max_turns_stops_a_model_that_never_operates(sample_index, sample_dataset, mode):
    """max_turns caps model turns (a 2-step turn is a choose call and an arguments call). A model
    that never produces a valid operation (garbage in 1-step; in 2-step it picks insert, then
    names an object it never retrieved) is stopped after exactly max_turns turns, with the
    operation cap far away: finish_reason says max_turns, not operation_cap."""
    def never_operates(messages, req):
        if mode == "1-step":
            return "I am not JSON"
        if messages[-1]["content"] == prompts.TWO_STEP_ARGS["insert"]:
            return '{"obj": {"text": "not retrieved"}}'
        return '{"Thought": "x", "Action": "insert"}'

    (res,), requests = run_episodes(sample_index, sample_dataset.tasks[:1], never_operates,
                                    NewsagentAgentConfig(mode=mode, max_turns=3, max_operations=50, rephrase=False))
    ep, steps = res["episode"], res["steps"]
    assert ep["status"] == "ok" and ep["finish_reason"] == "max_turns"
    assert ep["operations"] == 3 < 50                                  # every turn failed, none stopped the loop
    if mode == "1-step":
        assert ep["n_failed_parse"] == 3 and [s["turn"] for s in steps] == ["action"] * 3
    else:
        assert ep["n_failed_insert"] == 3 and [s["turn"] for s in steps] == ["choose", "arguments"] * 3
    assert len(requests) == len(steps)                                 # no turn after the third


def test_rephrase_reexecutes_with_feedback_then_keeps_best(sample_index, sample_dataset):
    task = sample_dataset.tasks[1]
    calls = {"n": 0}

    def writer(messages, req):
        user = messages[-1]["content"]
        if "Write the article" in user:
            calls["n"] += 1
            if calls["n"] == 1:
                return "Aliens landed on the stadium roof and sang opera for three hours on Monday."
            assert "not supported by this material" in user and "Aliens landed" in user
            return task.firsthand[0] + " " + task.firsthand[1]
        return '{"Thought": "t", "Action": "terminate"}'

    (res,), _ = run_episodes(sample_index, [task], writer, NewsagentAgentConfig(rephrase_attempts=3))
    ep = res["episode"]
    assert ep["rephrase_attempts"] == 2 and ep["traceable"] is True
    assert ep["output"].startswith(task.firsthand[0])
    assert [s["ok"] for s in res["steps"] if s["turn"] == "rephrase"] == [False, True]


def test_rephrase_attempts_are_bounded(sample_index, sample_dataset):
    def writer(messages, req):
        if "Write the article" in messages[-1]["content"]:
            return "Completely unrelated text about pastry recipes and baking bread at home today."
        return '{"Thought": "t", "Action": "terminate"}'

    (res,), _ = run_episodes(sample_index, sample_dataset.tasks[:1], writer, NewsagentAgentConfig(rephrase_attempts=2))
    ep = res["episode"]
    assert ep["rephrase_attempts"] == 2 and ep["traceable"] is False and ep["trace_untraceable_share"] == 1.0


def test_rule_based_baseline_uses_no_model(sample_index, sample_dataset):
    task = sample_dataset.tasks[0]
    (res,), requests = run_episodes(sample_index, [task], scripted_writer,
                                    NewsagentAgentConfig(mode="rule-based", rephrase=False))
    ep = res["episode"]
    assert requests == [] and ep["status"] == "ok" and ep["n_search"] == 1
    assert ep["draft_ids"] == ep["retrieved_ids"][:5]
    assert ep["search_precision"] == ep["edit_precision"] and ep["search_recall"] == ep["edit_recall"]
    assert ep["output"].startswith(task.firsthand[0])


def test_endpoint_failure_is_an_error_row_not_a_crash(sample_dataset, sample_index):
    async def go():
        setup = WorkerSetup("newsagent", "fake", NewsagentAgentConfig(), "{}",
                            [Endpoint("http://127.0.0.1:9/v1", "fake")], SamplingParams(max_retries=0, timeout_s=2),
                            8, 5, 0.7)
        return await EpisodeRunner(setup, AsyncLocalIndex(sample_index)).run(
            EpisodeSpec("00" * 8, "h", sample_dataset.tasks[0], sample_dataset.tasks[0].task_id, 0))
    res = asyncio.run(go())
    assert res["episode"]["status"] == "error" and "GenerationError" in res["episode"]["error"]


@pytest.mark.slow
def test_episodes_run_concurrently(sample_index, sample_dataset):
    """Episodes of one worker overlap: the server sees several requests in flight at once."""
    out, _ = run_episodes(sample_index, sample_dataset.tasks[:4], scripted_writer,
                          NewsagentAgentConfig(rephrase=False), delay_s=0.2)
    assert all(o["episode"]["status"] == "ok" for o in out)
    assert run_episodes.max_inflight == 4
