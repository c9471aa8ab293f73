"""Issue 10, scoring defects: Table 2 precision on empty selections, Table 3 insert/remove counts,
punctuation removal in matching, and partial search dates."""

from __future__ import annotations

import asyncio
import datetime as dt
import math

import pytest

from engine.benchmarks.newsagent import BENCHMARK
from engine.benchmarks.newsagent import environment as E
from engine.benchmarks.newsagent.data import NewsTask
from engine.benchmarks.newsagent.environment import Action, NewsEnvironment, Retrieved, normalize, parse_action
from engine.benchmarks.newsagent.metrics import episode_scores
from engine.llm.actions import ParseError
from tests.factories import episode_row
from tests.helpers import metrics_of

_ids = iter(range(10**6))


def row(retrieved, draft, reference, **kw):
    kw.setdefault("episode_id", f"e{next(_ids)}")
    return episode_row("newsagent", **{"retrieved_ids": retrieved, "draft_ids": draft, "reference_ids": reference,
                                       "tokens_in": 0, "tokens_out": 0, "n_search": 1, "n_insert": len(draft),
                                       "operations": 1 + len(draft), **kw})


ROWS = [
    row(["a", "b"], ["a"], ["a", "c"]),        # search P=1/2 R=1/2 F=1/2; edit P=1 R=1/2 F=2/3
    row(["x"], [], ["a"]),                     # kept nothing: edit precision undefined
    row([], [], ["a", "b"]),                   # retrieved nothing: both precisions undefined
    row(["a"], ["a"], []),                     # no reference evidence: no function-wise scores
    row(["a"], ["a"], ["a"], status="error"),  # not counted here (score_failures=exclude; as_wrong: tests/benchmarks/newsagent/test_metrics.py)
]


def by_name():
    return metrics_of(BENCHMARK, ROWS, policy="exclude")


# --- 5a: precision of an empty selection is undefined, not 0 --------------------------------------

def test_precision_excludes_empty_selections():
    m = by_name()
    assert (m["search_precision"].value, m["search_precision"].n) == (pytest.approx((0.5 + 0.0) / 2), 2)
    assert (m["edit_precision"].value, m["edit_precision"].n) == (1.0, 1)


def test_zero_empty_precision_is_kept_under_its_own_name():
    m = by_name()
    assert (m["search_precision_zero_empty"].value, m["search_precision_zero_empty"].n) == \
        (pytest.approx(0.5 / 3), 3)
    assert (m["edit_precision_zero_empty"].value, m["edit_precision_zero_empty"].n) == (pytest.approx(1 / 3), 3)


def test_recall_and_f1_count_empty_selections_as_zero():
    m = by_name()
    assert (m["search_recall"].value, m["search_recall"].n) == (pytest.approx(0.5 / 3), 3)
    assert (m["search_f1"].value, m["search_f1"].n) == (pytest.approx(0.5 / 3), 3)
    assert (m["edit_recall"].value, m["edit_recall"].n) == (pytest.approx(0.5 / 3), 3)
    assert (m["edit_f1"].value, m["edit_f1"].n) == (pytest.approx((2 / 3) / 3), 3)


def test_llama_like_row_reaches_high_precision_with_few_inserts():
    """The paper's Llama-4-Scout pattern: most drafts empty, the few kept objects all reference."""
    rows = [row(["r1"], ["r1"], ["r1", "r2", "r3", "r4", "r5", "r6"]) for _ in range(9)] + \
           [row(["r1"], [], ["r1", "r2", "r3", "r4", "r5", "r6"]) for _ in range(11)]
    m = {k: r.value for k, r in metrics_of(BENCHMARK, rows).items()}
    assert m["mean_n_insert"] == pytest.approx(0.45)
    assert m["edit_precision"] == 1.0 and m["edit_precision_zero_empty"] == pytest.approx(0.45)
    assert m["edit_recall"] == pytest.approx(0.45 / 6)                 # 0.075
    assert m["edit_f1"] == pytest.approx(0.45 * (2 * (1 / 6) / (1 + 1 / 6)))   # ~0.129


def test_episode_scores_marks_undefined_precision():
    s = episode_scores(retrieved=[], draft=[], reference=["a"])
    assert s["search_precision"] is None and s["edit_precision"] is None
    assert s["search_precision_zero_empty"] == 0.0 and s["edit_f1"] == 0.0 and s["search_recall"] == 0.0


def test_metrics_are_means_of_episode_values():
    values = BENCHMARK.episode_values(ROWS)
    assert values[-1] == {} and "search_precision" not in values[2] and "edit_precision" not in values[1]
    for name, r in metrics_of(BENCHMARK, ROWS, policy="exclude").items():
        if name in ("episodes", "scored_share"):
            continue
        vals = [v[name] for v in values if name in v]
        assert r.n == len(vals) and vals
        assert r.value == pytest.approx(sum(vals) / len(vals))
    assert all(not math.isnan(x) for v in values for x in v.values())


def test_episode_table_has_the_new_columns():
    names = {f.name for f in BENCHMARK.episode_fields}
    assert {"search_precision_zero_empty", "edit_precision_zero_empty"} <= names


# --- 5b: insert/remove count successes; the cap counts everything --------------------------------

RELEASE = dt.date(2024, 5, 10)
TASK = NewsTask("t1", "Bridge reopens", RELEASE, ("The bridge reopened on Friday.",), ("a",))
DB = [Retrieved("a", "Sue Gray's report criticized leadership at No.10.", dt.date(2024, 3, 2), 0.9),
      Retrieved("b", "Repairs cost $2.1 million.", dt.date(2024, 4, 20), 0.75)]


def make_env(max_ops=20):
    async def search(query, before):
        return [] if "nothing" in query else [r for r in DB if r.date < before]
    return NewsEnvironment(TASK, search, max_ops)


def step(env, action):
    return asyncio.run(env.step(action))


def test_failed_insert_and_remove_are_not_counted_as_inserts_or_removes():
    env = make_env()
    step(env, Action("insert", text="never retrieved"))           # failed insert
    step(env, Action("search", query="bridge"))
    step(env, Action("insert", text=DB[1].text))                   # ok
    step(env, Action("remove", text=DB[0].text))                   # failed: not in draft
    step(env, Action("remove", text=DB[1].text))                   # ok
    c = env.counters
    assert (c.insert, c.failed_insert, c.remove, c.failed_remove) == (1, 1, 1, 1)
    assert c.operations == 5 and env.operations_left == 15


def test_cap_still_counts_failed_and_unparseable_operations():
    env = make_env(max_ops=4)
    step(env, Action("insert", text="never retrieved"))
    step(env, Action("remove", text="not in draft"))
    env.invalid("garbage")
    assert not env.done and env.counters.operations == 3
    step(env, Action("search", query="nothing"))
    assert env.done and "Operation limit reached (4 operations)" in env.last_message
    assert (env.counters.insert, env.counters.remove) == (0, 0)


def test_duplicate_insert_is_not_an_insert_but_uses_the_budget():
    """Inserting an object already in the draft changes nothing: it is not one of Table 3's
    inserts (``n_insert`` counts inserts that changed the draft), nor a failed insert, but it was
    an attempted operation, so the cap counts it (``duplicate_insert``)."""
    env = make_env(max_ops=4)
    step(env, Action("search", query="bridge"))
    assert step(env, Action("insert", text=DB[1].text)).message == E.MSG_INSERT_OK
    out = step(env, Action("insert", text="Repairs cost $2.1 million"))          # the same object again
    assert out.ok and out.message == E.MSG_INSERT_DUP and env.draft_ids() == ["b"]
    c = env.counters
    assert (c.insert, c.duplicate_insert, c.failed_insert) == (1, 1, 0)
    assert c.operations == 3 and env.operations_left == 1 and not env.done
    step(env, Action("insert", text=DB[1].text))                                   # a second duplicate hits the cap
    assert env.done and "Operation limit reached (4 operations)" in env.last_message
    assert (c.insert, c.duplicate_insert) == (1, 2)


# --- 5c: punctuation is removed, not replaced by a space -----------------------------------------

def test_punctuation_removed_not_spaced():
    assert normalize("Sue Gray's report") == normalize("Sue Grays report") == "Sue Grays report"
    assert normalize("No.10") == normalize("No10")
    assert normalize("  Sue   Gray's\n report ") == "Sue Grays report"   # whitespace still folds
    assert normalize("No. 10") == "No 10" != normalize("No10")          # a real space stays a space


def test_insert_matches_across_removed_punctuation():
    env = make_env()
    step(env, Action("search", query="report"))
    out = step(env, Action("insert", text="Sue Grays report criticized leadership at No10"))
    assert out.ok and env.draft_ids() == ["a"]
    out = step(env, Action("remove", text="Sue Gray’s report criticized leadership at No.10!"))
    assert out.ok and env.draft_ids() == []


# --- 5d: a partial date is an invalid action, not 1 January ---------------------------------------

@pytest.mark.parametrize("fields", [
    '"year": "2022"',
    '"year": "2022", "month": "01"',
    '"year": "2022", "month": "", "day": ""',
    '"year": "2022", "day": "31"',
    '"month": "01", "day": "31"',
])
def test_partial_search_date_is_an_error(fields):
    with pytest.raises(ParseError, match="invalid search date"):
        parse_action('{"Action": "search", "query": "Sue Gray report", ' + fields + "}")


def test_full_or_absent_date_still_parses():
    a = parse_action('{"Action": "search", "query": "q", "year": "2022", "month": "1", "day": "31"}')
    assert a.before == dt.date(2022, 1, 31)
    a = parse_action('{"Action": "search", "query": "q", "year": "", "month": "", "day": ""}')
    assert a.before is None


def test_partial_date_reaches_the_agent_as_error_iv():
    env = make_env()
    with pytest.raises(ParseError) as e:
        parse_action('{"Action": "search", "query": "q", "year": "2022"}')
    out = env.invalid(str(e.value))
    assert not out.ok and out.message.startswith("Error: invalid action: invalid search date")
    assert env.counters.failed_parse == 1 and env.counters.operations == 1
    assert E.MSG_INVALID.split("{")[0] in out.message
