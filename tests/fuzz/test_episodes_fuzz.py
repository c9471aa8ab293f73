"""No exception escapes an episode (issue 12, part 3): whole episodes of the agent benchmarks,
run through their real agent code against a scripted in-process model whose every turn is
Hypothesis-generated output (valid actions, near-valid ones, garbage, raw unicode).

Each episode must end with one of its benchmark's finish reasons, record every malformed turn
as a failed parse, keep its counters within the configured caps, and leave step rows and an
episode row that the store can write (Parquet string columns need valid Unicode; the model's
own text is valid Unicode, as the client decodes UTF-8, but JSON escapes inside it may not be).

The model is a script, not a server: a few hundred episodes take seconds. The analyst agent
never gets a ``python`` tool call here (each one starts a sandboxed subprocess; see
``tests/engine/sandbox/test_sandbox.py``). Episodes per benchmark:
``DATELINE_FUZZ_EPISODES`` (default 200 in the full suite, ``DATELINE_CI=1``; 50 otherwise),
derandomized.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import random
import re
import shutil
import tempfile
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from engine.benchmarks import get_benchmark
from engine.benchmarks.analyst.config import AnalystAgentConfig, AnalystBenchmarkConfig
from engine.benchmarks.livenews.actions import parse_action_block
from engine.benchmarks.livenews.agent import FINISH_REASONS
from engine.benchmarks.livenews.config import LivenewsAgentConfig, LivenewsBenchmarkConfig, turn_cap
from engine.benchmarks.livenews.service import WebService
from engine.benchmarks.newsagent.config import NewsagentAgentConfig
from engine.benchmarks.newsagent.data import NewsTask
from engine.llm import Completion
from engine.protocol import DocHit, EpisodeContext, EpisodeOutcome
from engine.runtime.services import LocalService
from engine.storage import STEP_SCHEMA, step_rows
from tests.fuzz.garbage import RAW_TEXT, big_int, clean, deep, jstring, jvalue, noise, seeded, soup
from tests.fuzz.test_parsers_fuzz import (
    ACTION_TOKENS,
    BLOCK_TOKENS,
    block_broken,
    block_valid,
    json_broken,
    one_step_broken,
    one_step_valid,
    two_step_broken,
    two_step_valid,
)
from tests.helpers import FULL

EPISODES = int(os.environ.get("DATELINE_FUZZ_EPISODES", "200" if FULL else "50"))
EPISODE_FUZZ = settings(max_examples=EPISODES, deadline=None, derandomize=True, database=None,
                        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                               HealthCheck.data_too_large])

Output = str | Callable[[list[dict[str, str]]], str]     # a text, or one written from the conversation


def valid_unicode(text: str) -> str:
    """What a served model can return: lone surrogates become U+FFFD (escapes stay as typed)."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


class ScriptedModel:
    """``ctx.llm``: answers each call with the next output of the script, then with ``tail``."""

    def __init__(self, outputs: Sequence[Output], tail: str = "", finish_reason: str = "stop") -> None:
        self.outputs = list(outputs)
        self.tail = tail
        self.finish_reason = finish_reason
        self.calls = 0

    async def chat(self, messages: list[dict[str, str]], max_tokens: int, json_schema: Any = None,
                   seed: int | None = None, regex: str | None = None, temperature: float | None = None) -> Completion:
        out = self.outputs[self.calls] if self.calls < len(self.outputs) else self.tail
        self.calls += 1
        text = valid_unicode(out(messages) if callable(out) else out)
        return Completion(text, sum(len(m["content"]) for m in messages) // 4 + 1, len(text) // 4 + 1, 0.0,
                          self.finish_reason)


def run(bench: Any, task: Any, ctx: EpisodeContext) -> EpisodeOutcome:
    """The episode, or the test fails with the exception that escaped it."""
    try:
        return asyncio.run(bench.run_episode(task, ctx))
    except Exception as e:  # noqa: BLE001 - the property under test
        pytest.fail(f"{type(e).__name__} escaped the episode: {e}")


def assert_storable(bench: Any, ctx: EpisodeContext, out: EpisodeOutcome) -> None:
    """The episode's step rows and row convert to the store's Arrow tables (as ``write_batch`` does)."""
    rows = [{**r, "batch_id": "b"} for r in step_rows(ctx.episode_id, ctx.steps)]
    pa.Table.from_pylist(rows, schema=STEP_SCHEMA)
    schema = pa.schema([pa.field("output", pa.string()), pa.field("finish_reason", pa.string()),
                        *bench.episode_fields])
    pa.Table.from_pylist([{"output": out.output, "finish_reason": out.finish_reason, **out.extras}], schema=schema)


def texts(*builders: Callable[[random.Random], Any]) -> list[st.SearchStrategy[str]]:
    return [seeded(b).map(lambda case: case[0]) for b in builders]


# -- newsagent ------------------------------------------------------------------------------------

NEWS = get_benchmark("newsagent")
RELEASE = dt.date(2024, 3, 1)
NEWS_TASK = NewsTask("t1", "Council closes the Ashford pool", RELEASE,
                     ("The council closed the Ashford pool on Monday.",), ("d1", "d3"))
DOCS = [DocHit(f"d{i}", text, RELEASE - dt.timedelta(days=10 * i), 0.9 - i / 10) for i, text in enumerate((
    "The Ashford pool opened in 1974.", "Repairs to the pool roof were estimated at 2 million pounds.",
    "Council members voted 7-2 to close the pool.", "Swimmers protested outside the town hall.",
    "A new leisure centre is planned for 2026."), 1)]


class FakeIndex:
    """The shared index for one task: a fixed set of dated objects, an empty result for some
    queries (the empty-search path), and deterministic embeddings for the rephrase check."""

    async def search(self, queries: Sequence[str], before: Sequence[dt.date], k: int,
                     threshold: float | None) -> list[list[DocHit]]:
        out = []
        for q, b in zip(queries, before):
            empty = zlib.crc32(q.encode("utf-8", "surrogatepass")) % 4 == 0
            out.append([] if empty else [d for d in DOCS if d.date < b][:k])
        return out

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        vecs = np.array([np.random.default_rng(zlib.crc32(t.encode("utf-8", "surrogatepass"))).normal(size=8)
                         for t in texts]).reshape(len(texts), 8)
        return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)


def doc_action(r: random.Random) -> tuple[str, Any]:
    """Insert or remove an object the index holds (so inserts and removes can succeed)."""
    kind = r.choice(("insert", "insert", "remove"))
    return json.dumps({"Thought": clean(r), "Action": kind, "obj": {"text": r.choice(DOCS).text}}), None


def weird_search(r: random.Random) -> tuple[str, Any]:
    """A search whose fields hold JSON the parser must turn into a format error or a value."""
    fields = {"query": r.choice((jstring(r), jvalue(r), '"\\ud800 pool"', '{"text": "pool"}'))}
    x = r.randrange(3)
    if x == 1:
        fields.update(year='"2024"', month='"2"', day="1")
    elif x == 2:
        fields.update(year=r.choice(('"2024"', '"99999999999"', big_int(r), "1e400", "null", jvalue(r))),
                      month=r.choice(('"2"', '"13"', "NaN", jvalue(r))), day=r.choice(('"1"', "0", deep(r))))
    return "{" + '"Action": "search", ' + ", ".join(f'"{k}": {v}' for k, v in fields.items()) + "}", None


NEWS_TURN = st.one_of(*texts(one_step_valid, one_step_broken, doc_action, weird_search, json_broken,
                             lambda r: (soup(r, ACTION_TOKENS), None)),
                      RAW_TEXT.map(lambda case: case[0]))
# 2-step: a choice and its arguments are consecutive calls
TWO_STEP_PAIR = st.one_of(seeded(two_step_valid), seeded(two_step_broken)).map(lambda case: list(case[0]))


@pytest.mark.slow
@EPISODE_FUZZ
@given(mode=st.sampled_from(("1-step", "2-step")),
       script=st.lists(st.one_of(NEWS_TURN.map(lambda t: [t]), TWO_STEP_PAIR), max_size=30),
       tail=st.one_of(st.just(""), NEWS_TURN), max_operations=st.integers(1, 20))
def test_newsagent_episode_survives_garbage(mode: str, script: list[list[str]], tail: str, max_operations: int) -> None:
    outputs = [t for turn in script for t in turn]
    note(f"outputs: {outputs!r}")
    agent = NewsagentAgentConfig(mode=mode, max_operations=max_operations, max_turns=40)
    ctx = EpisodeContext(episode_id="e", seed=0, agent=agent, llm=ScriptedModel(outputs, tail), index=FakeIndex())
    out = run(NEWS, NEWS_TASK, ctx)
    assert out.finish_reason in ("terminate", "operation_cap", "max_turns")
    x = out.extras
    turns = [s for s in ctx.steps if s.turn in ("action", "choose", "arguments")]
    failed = [s for s in turns if not s.parsed_action]
    assert x["n_failed_parse"] == len(failed)
    assert all(s.result.startswith("Error: invalid action") and not s.ok for s in failed)
    for s in turns:
        if s.parsed_action:
            assert json.loads(s.parsed_action)["Action"] in ("search", "insert", "remove", "terminate")
    assert x["operations"] <= max_operations
    assert sum(s.turn in ("action", "choose") for s in turns) <= agent.max_turns
    assert (out.finish_reason == "operation_cap") == (x["operations"] == max_operations and not x["n_terminate"])
    assert set(x["draft_ids"]) <= set(x["retrieved_ids"]) <= {d.doc_id for d in DOCS}
    assert_storable(NEWS, ctx, out)


# -- livenews -------------------------------------------------------------------------------------

LIVE = get_benchmark("livenews")


class _Cfg:
    benchmark = LivenewsBenchmarkConfig()


@pytest.fixture(scope="module")
def live():
    """The first sample question and the real offline web over the bundled pages."""
    return LIVE.load_tasks(_Cfg)[0], LocalService(WebService(LivenewsBenchmarkConfig()))


def click_returned(k: int) -> Callable[[list[dict[str, str]]], str]:
    """A Click on the k-th URL earlier searches showed (a made-up one when there is none)."""
    def write(messages: list[dict[str, str]]) -> str:
        urls = re.findall(r"URL: (\S+)", "\n".join(m["content"] for m in messages if m["role"] == "user"))
        url = urls[k % len(urls)] if urls else "https://example.com/none"
        return f"Let me read it.\n```action\ntype: Click\n{url}\n```"
    return write


def search_block(r: random.Random) -> tuple[str, Any]:
    queries = [r.choice(("Damar Hamlin", "Bills cardiac arrest", "news", clean(r), noise(r) + "x"))
               for _ in range(r.randrange(1, 3))]
    return "```action\ntype: Search\n" + "\n".join(q.replace("`", "'") for q in queries) + "\n```", None


LIVE_TURN = st.one_of(*texts(block_valid, block_broken, search_block, search_block,
                             lambda r: (soup(r, BLOCK_TOKENS), None)),
                      st.integers(0, 20).map(click_returned), RAW_TEXT.map(lambda case: case[0]))


@pytest.mark.slow
@EPISODE_FUZZ
@given(script=st.lists(LIVE_TURN, max_size=12), mode=st.sampled_from(("search", "search", "no_search")),
       budgets=st.tuples(st.integers(0, 4), st.integers(0, 4)), finish_reason=st.sampled_from(("stop", "length")))
def test_livenews_episode_survives_garbage(live, script: list[Output], mode: str, budgets: tuple[int, int],
                                           finish_reason: str) -> None:
    task, web = live
    note(f"outputs: {script!r}")
    agent = LivenewsAgentConfig(mode=mode, max_searches=budgets[0], max_visits=budgets[1])
    model = ScriptedModel(script, tail=noise(random.Random(len(script))), finish_reason=finish_reason)
    ctx = EpisodeContext(episode_id="e", seed=0, agent=agent, llm=model, index=None, services={"web": web})
    out = run(LIVE, task, ctx)
    x = out.extras
    assert out.finish_reason in FINISH_REASONS and out.finish_reason != "generation_failure"
    assert x["n_searches"] <= agent.max_searches and x["n_visits"] <= agent.max_visits
    assert x["n_turns"] == len(ctx.steps) == model.calls <= turn_cap(agent)
    assert all(s.ok for s in ctx.steps[:-1])                     # every turn but the last went on
    last = ctx.steps[-1]
    if out.finish_reason == "finish":
        assert last.ok and out.output == parse_action_block(last.raw_output).items[0]
    else:
        assert out.output == "" and (not last.ok or out.finish_reason == "max_turns")
    if out.finish_reason in ("no_action_block", "malformed_action", "unknown_action") and not last.parsed_action:
        assert last.result.startswith(out.finish_reason)
    assert_storable(LIVE, ctx, out)


# -- analyst (agentic) ----------------------------------------------------------------------------

ANALYST = get_benchmark("analyst")


class _AnalystCfg:
    benchmark = AnalystBenchmarkConfig(task_ids=["crashes-2023"])


ANALYST_TASK = ANALYST.load_tasks(_AnalystCfg)[0]


PATHS = ('"."', '"sources"', '"sources/crashes_2023.csv"', '"sources/vision_zero_update.md"', '"../../etc/passwd"',
         '"/etc/passwd"', '"\\u0000"', '"nope.txt"', '"figures"', '"report.md"', "123", "null", '["sources"]')
PATTERNS = ('"crash"', '"Northside"', '"("', '"["', '"a{4294967296}"', json.dumps("(" * 1200 + ")" * 1200),
            '"x{2,1}"', '"\\\\"', '""', '".*"', "null", "42")
LINES = ("1", "5", "-3", "0", '"2"', '"x"', "null", "1.5", "1e400", "-1e400", "NaN", "10000000000000000000000",
         "[1]", "true")


def tool_call(r: random.Random) -> tuple[str, Any]:
    """One tool call of AGENT_PROMPT (python excepted), its arguments often of the wrong type."""
    tool = r.choice(("list_files", "grep", "read", "read", "write_report", "write_report", "finish", "shell", ""))
    fields = {"tool": json.dumps(tool)}
    if tool == "grep":
        fields.update(pattern=r.choice(PATTERNS), path=r.choice(PATHS))
    elif tool == "read":
        fields.update(path=r.choice(PATHS), start=r.choice(LINES), end=r.choice(LINES))
    elif tool == "write_report":
        fields["content"] = r.choice(('"# Report\\n![Crashes](figures/a.png)\\n"', jstring(r), '"\\ud800"', '"  "',
                                      jvalue(r)))
    keys = list(fields)
    r.shuffle(keys)
    return "{" + ", ".join(f'"{k}": {fields[k]}' for k in keys) + "}", None


ANALYST_TURN = st.one_of(*texts(tool_call, tool_call, json_broken), RAW_TEXT.map(lambda case: case[0]))


@pytest.fixture(scope="module")
def analyst_workdir():
    root = Path(tempfile.mkdtemp(prefix="dateline-fuzz-"))
    yield root / "episode"
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
@EPISODE_FUZZ
@given(script=st.lists(ANALYST_TURN, max_size=12), guided=st.booleans())
def test_analyst_agentic_episode_survives_garbage(analyst_workdir, script: list[str], guided: bool) -> None:
    note(f"outputs: {script!r}")
    task = ANALYST_TASK
    agent = AnalystAgentConfig(mode="agentic", setting="T+S", max_steps=6, report_attempts=2, guided_json=guided)
    ctx = EpisodeContext(episode_id="e", seed=0, agent=agent, llm=ScriptedModel(script, tail='{"tool": "oops"}'),
                         index=None, workdir=analyst_workdir)
    out = run(ANALYST, task, ctx)
    x = out.extras
    assert out.finish_reason in ("finish", "no_report", "step_cap", "token_cap")
    actions = [s for s in ctx.steps if s.turn == "action"]
    assert x["parse_failures"] == sum(not s.parsed_action for s in actions)
    failed = [s for s in actions if not s.parsed_action]
    assert all(s.result.startswith("error: your answer must be one JSON object") for s in failed)
    assert len(actions) <= agent.max_steps * agent.report_attempts
    assert (out.output != "") == (x["no_report_reason"] == "")
    assert_storable(ANALYST, ctx, out)
