"""Every action and error message of the newsagent environment (paper 3.2.1-3.2.2, 4.1.3)."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from engine.benchmarks.newsagent import environment as E
from engine.benchmarks.newsagent.data import NewsTask
from engine.benchmarks.newsagent.environment import Action, NewsEnvironment, Retrieved, normalize, parse_action
from engine.llm.actions import ParseError

RELEASE = dt.date(2024, 5, 10)
TASK = NewsTask("t1", "Bridge reopens", RELEASE, ("The bridge reopened on Friday.",), ("a", "b"))
DB = [
    Retrieved("a", "The bridge closed in March, after a crack was found.", dt.date(2024, 3, 2), 0.9),
    Retrieved("b", "[Mayor Ann Lee] We will reopen by May.", dt.date(2024, 4, 1), 0.8),
    Retrieved("c", "Repairs cost $2.1 million.", dt.date(2024, 4, 20), 0.75),
]


def make_env(max_ops: int = 20, db=DB):
    calls: list[tuple[str, dt.date]] = []

    async def search(query: str, before: dt.date) -> list[Retrieved]:
        calls.append((query, before))
        if "nothing" in query:
            return []
        return [r for r in db if r.date < before]

    return NewsEnvironment(TASK, search, max_ops), calls


def run(coro):
    return asyncio.run(coro)


def test_search_success_message_and_retrieved_state():
    env, calls = make_env()
    out = run(env.step(Action("search", query="bridge")))
    assert out.ok and out.message == "Success: search returned 3 result(s) for query 'bridge' before 2024-05-10."
    assert calls == [("bridge", RELEASE)]
    assert env.retrieved_ids() == ["a", "b", "c"]
    assert env.counters.search == 1 and env.counters.operations == 1


def test_search_with_earlier_date_narrows_and_later_date_is_clamped():
    env, calls = make_env()
    run(env.step(Action("search", query="bridge", before=dt.date(2024, 4, 2))))
    run(env.step(Action("search", query="bridge", before=dt.date(2030, 1, 1))))
    assert calls == [("bridge", dt.date(2024, 4, 2)), ("bridge", RELEASE)]


def test_error_i_search_without_results():
    env, _ = make_env()
    out = run(env.step(Action("search", query="nothing here")))
    assert not out.ok
    assert out.message == ("Error: search returned no results for query 'nothing here' before 2024-05-10. "
                           "Try different keywords.")
    assert env.counters.empty_search == 1 and env.counters.operations == 1


def test_insert_matches_after_punctuation_removal_only():
    env, _ = make_env()
    run(env.step(Action("search", query="bridge")))
    out = run(env.step(Action("insert", text="The bridge closed in March after a crack was found")))
    assert out.ok and out.message == E.MSG_INSERT_OK and env.draft_ids() == ["a"]
    # different case or words is not a match: exact after punctuation removal
    out = run(env.step(Action("insert", text="the bridge closed in March after a crack was found")))
    assert not out.ok and out.message == E.MSG_INSERT_UNKNOWN
    out = run(env.step(Action("insert", text="Mayor Ann Lee We will reopen by May")))
    assert out.ok and env.draft_ids() == ["a", "b"]


def test_error_ii_insert_unretrieved_counts_as_operation():
    env, _ = make_env()
    out = run(env.step(Action("insert", text="The bridge closed in March, after a crack was found.")))
    assert not out.ok
    assert out.message == ("Error: insert failed: the object is not among the retrieved search results. "
                           "Insert only objects returned by a prior search, copied exactly.")
    assert env.counters.failed_insert == 1 and env.counters.operations == 1 and env.draft == []


def test_insert_duplicate_is_a_noop():
    env, _ = make_env()
    run(env.step(Action("search", query="bridge")))
    run(env.step(Action("insert", text=DB[2].text)))
    out = run(env.step(Action("insert", text=DB[2].text)))
    assert out.ok and out.message == E.MSG_INSERT_DUP and env.draft_ids() == ["c"]


def test_remove_and_error_iii():
    env, _ = make_env()
    run(env.step(Action("search", query="bridge")))
    run(env.step(Action("insert", text=DB[0].text)))
    out = run(env.step(Action("remove", text=DB[1].text)))
    assert not out.ok
    assert out.message == ("Error: remove failed: the object is not in the current draft. "
                           "Remove only objects that are in the draft, copied exactly.")
    out = run(env.step(Action("remove", text=DB[0].text + "!!")))
    assert out.ok and out.message == E.MSG_REMOVE_OK and env.draft == []
    # Table 3: remove counts successes only; the failed one is failed_remove (both use the budget)
    assert env.counters.remove == 1 and env.counters.failed_remove == 1 and env.counters.operations == 4


def test_error_iv_invalid_action_counts_as_operation():
    env, _ = make_env()
    out = env.invalid("no JSON object found")
    assert not out.ok
    assert out.message == ('Error: invalid action: no JSON object found. Output one JSON object with an "Action" '
                           'of search, insert, remove or terminate.')
    assert env.counters.failed_parse == 1 and env.counters.operations == 1


def test_terminate_ends_episode():
    env, _ = make_env()
    out = run(env.step(Action("terminate")))
    assert out.ok and out.message == "Terminated: the draft is final." and env.done
    with pytest.raises(RuntimeError):
        run(env.step(Action("search", query="x")))


def test_operation_cap_includes_failed_operations():
    env, _ = make_env(max_ops=3)
    run(env.step(Action("insert", text="not retrieved")))          # failed insert
    env.invalid("garbage")                                          # failed parse
    assert not env.done and env.operations_left == 1
    out = run(env.step(Action("search", query="nothing at all")))   # empty search
    assert env.done and "Operation limit reached (3 operations)" in env.last_message
    assert not out.ok


def test_index_leak_is_caught():
    leaky = [Retrieved("z", "From the future.", RELEASE, 0.9)]
    env, _ = make_env(db=leaky)

    async def bad_search(query, before):
        return leaky

    env._search = bad_search
    with pytest.raises(AssertionError):
        run(env.step(Action("search", query="x")))


@pytest.mark.parametrize("text,kind", [
    ('{"Thought": "t", "Action": "search", "query": "bridge repairs", "year": "2024", "month": "04", "day": "01"}',
     "search"),
    ('Thought: look\n```json\n{"Thought": "t", "Action": "Insert", "obj": {"text": "x y"}}\n```', "insert"),
    ('{"Action": "remove", "obj": "x y"}', "remove"),
    ('{"Thought": "ok", "Action": "terminate"}', "terminate"),
])
def test_parse_valid(text, kind):
    a = parse_action(text)
    assert a.kind == kind
    if kind == "search":
        assert a.query == "bridge repairs" and a.before == dt.date(2024, 4, 1)
    if kind in ("insert", "remove"):
        assert a.text == "x y"


@pytest.mark.parametrize("text,reason", [
    ("I will search now", "no JSON object found"),
    ('{"Thought": "t", "Action": "publish"}', "unknown action 'publish'"),
    ('{"Thought": "t"}', 'missing "Action" field'),
    ('{"Action": "search", "query": ""}', 'search needs a non-empty "query"'),
    ('{"Action": "insert"}', 'insert/remove needs "obj": {"text": "..."}'),
    ('{"Action": "search", "query": "q", "year": "2024", "month": "13", "day": "1"}', "invalid search date"),
    ('{"Action": "search", "query": "cut off', "unterminated JSON object"),
])
def test_parse_errors(text, reason):
    with pytest.raises(ParseError) as e:
        parse_action(text)
    assert reason in str(e.value)


def test_normalize():
    assert normalize("[Caption] A man, smiling.") == "Caption A man smiling"
    assert normalize("“Quoted” — text!") == "Quoted text"
