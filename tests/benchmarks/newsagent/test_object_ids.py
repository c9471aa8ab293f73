"""Issue 31, finding 12: NewsAgent tells objects apart by id, not by normalized text.

Two objects whose texts differ only in punctuation (or not at all: the RealTimeQA converter keeps
the same sentence on two dates as two objects) are two objects in retrieval, insertion, removal
and scoring. Before the fix the environment keyed what searches returned by ``normalize(text)``,
so the second of two such objects vanished from ``retrieved_ids`` and an insert of its exact text
put the first one in the draft.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from engine.benchmarks.newsagent import BENCHMARK
from engine.benchmarks.newsagent import environment as E
from engine.benchmarks.newsagent.config import NewsagentAgentConfig
from engine.benchmarks.newsagent.data import NewsTask
from engine.benchmarks.newsagent.environment import Action, NewsEnvironment, Retrieved, normalize, parse_action
from engine.benchmarks.newsagent.metrics import episode_scores
from engine.llm import Endpoint, SamplingParams
from engine.protocol import DocHit
from engine.runtime.dispatch import EpisodeRunner, EpisodeSpec, WorkerSetup
from engine.storage import EpisodeStore
from tests.fake_openai import FakeOpenAI
from tests.helpers import metrics_of

RELEASE = dt.date(2024, 6, 1)
REFERENCE = ("r1", "r2", "r3", "r4")
# n1 and r3 differ only in punctuation (comma / semicolon), on different dates, with different ids;
# n1 comes first in the search results. r4 is reference evidence no search finds.
N1 = Retrieved("n1", "The council voted to close the pool, officials said.", dt.date(2024, 1, 5), 0.95)
R3 = Retrieved("r3", "The council voted to close the pool; officials said.", dt.date(2024, 3, 9), 0.94)
HITS = [
    Retrieved("r1", "The pool opened in 1968 as part of the new civic centre.", dt.date(2023, 11, 2), 0.99),
    Retrieved("r2", "Repairs to the roof were estimated at 2.1 million pounds.", dt.date(2023, 12, 14), 0.97),
    N1,
    R3,
    Retrieved("n2", "A petition to save the pool gathered 4,000 signatures.", dt.date(2024, 2, 1), 0.9),
    Retrieved("n3", "Swimming clubs were offered slots at a neighbouring town.", dt.date(2024, 2, 20), 0.88),
    Retrieved("n4", "The leisure centre's gym will stay open.", dt.date(2024, 4, 30), 0.85),
]
TASK = NewsTask("pool", "Council closes the town pool", RELEASE, ("The pool closed on Friday.",), REFERENCE)


def make_env(hits: Sequence[Retrieved] = HITS, task: NewsTask = TASK) -> NewsEnvironment:
    async def search(query: str, before: dt.date) -> list[Retrieved]:
        return [h for h in hits if h.date < before]
    return NewsEnvironment(task, search, 20)


def step(env: NewsEnvironment, action: Action) -> E.StepOutcome:
    return asyncio.run(env.step(action))


def test_punctuation_only_pair_is_two_objects_in_search_scores() -> None:
    """Hand computation. The search returns 7 distinct objects, r1 r2 n1 r3 n2 n3 n4; the
    reference is r1 r2 r3 r4. Search precision = |{r1, r2, r3}| / 7 = 3/7 = 0.429, recall = 3/4
    = 0.750, F1 = 2 (3/7)(3/4) / (3/7 + 3/4) = 6/11 = 0.545.

    Keyed by normalized text (the old code) r3 collapsed into n1, retrieved before it with the
    same key "The council voted to close the pool officials said": 6 objects, 2 of them reference:
    precision 2/6 = 0.333, recall 2/4 = 0.500 (the values of the issue)."""
    assert normalize(N1.text) == normalize(R3.text) and N1.text != R3.text      # the pair, as constructed
    env = make_env()
    out = step(env, Action("search", query="pool"))
    assert out.ok and len(out.hits) == 7
    assert env.retrieved_ids() == ["r1", "r2", "n1", "r3", "n2", "n3", "n4"]
    s = episode_scores(env.retrieved_ids(), env.draft_ids(), list(REFERENCE))
    sp = s["search_precision"]
    assert sp is not None and round(sp, 3) == 0.429 and sp == pytest.approx(3 / 7)
    assert s["search_recall"] == 0.75
    assert s["search_f1"] == pytest.approx(6 / 11)
    # both objects are in the observation's retrieved content, each with its date
    assert [r.object_id for r in env.retrieved.values()] == env.retrieved_ids()


def test_insert_and_remove_name_the_object_whose_text_was_copied() -> None:
    """Copying r3's text exactly inserts r3 (the old code inserted n1, the first object of that
    normalized text); copying n1's then inserts n1, a second object, not a duplicate; removing by
    n1's text removes n1 and leaves r3. Edit scores: draft {r3}, P = 1/1, R = 1/4."""
    env = make_env()
    step(env, Action("search", query="pool"))
    assert step(env, Action("insert", text=R3.text)).message == E.MSG_INSERT_OK
    assert env.draft_ids() == ["r3"]
    assert step(env, Action("insert", text=R3.text)).message == E.MSG_INSERT_DUP     # the same object again
    assert step(env, Action("insert", text=N1.text)).message == E.MSG_INSERT_OK
    assert env.draft_ids() == ["r3", "n1"]
    assert step(env, Action("remove", text=N1.text)).message == E.MSG_REMOVE_OK
    assert env.draft_ids() == ["r3"]
    c = env.counters
    assert (c.insert, c.duplicate_insert, c.remove, c.failed_insert, c.failed_remove) == (2, 1, 1, 0, 0)
    s = episode_scores(env.retrieved_ids(), env.draft_ids(), list(REFERENCE))
    assert (s["edit_precision"], s["edit_recall"]) == (1.0, 0.25)


def test_text_matching_neither_exactly_still_finds_by_normalized_text() -> None:
    """A copy with punctuation of its own (neither object's exact text) still matches (paper
    4.1.3); it names both, and inserts take them in retrieval order."""
    env = make_env()
    step(env, Action("search", query="pool"))
    loose = "The council voted to close the pool officials said"
    step(env, Action("insert", text=loose))
    step(env, Action("insert", text=loose))
    assert env.draft_ids() == ["n1", "r3"]
    assert step(env, Action("insert", text=loose)).message == E.MSG_INSERT_DUP


SAME = "Officials confirmed the pool would close in May."
TWINS = [Retrieved("d1", SAME, dt.date(2024, 1, 5), 0.9), Retrieved("d2", SAME, dt.date(2024, 3, 9), 0.9)]


def test_same_sentence_on_two_dates_is_two_objects() -> None:
    """The converter's case: one sentence, two dates, two ids. Both are retrieved; the same text
    inserted twice inserts both (each insert takes one not yet in the draft), a third is a no-op."""
    env = make_env(TWINS, NewsTask("twins", "Pool", RELEASE, ("x y z.",), ("d2",)))
    step(env, Action("search", query="pool"))
    assert env.retrieved_ids() == ["d1", "d2"]
    step(env, Action("insert", text=SAME))
    step(env, Action("insert", text=SAME))
    assert env.draft_ids() == ["d1", "d2"]
    assert step(env, Action("insert", text=SAME)).message == E.MSG_INSERT_DUP


def test_date_or_id_in_obj_picks_one_of_identical_texts() -> None:
    a = parse_action(json.dumps({"Action": "insert", "obj": {"text": SAME, "date": "2024-03-09"}}))
    assert (a.text, a.date, a.object_id) == (SAME, dt.date(2024, 3, 9), "")
    env = make_env(TWINS)
    step(env, Action("search", query="pool"))
    step(env, a)
    assert env.draft_ids() == ["d2"]
    b = parse_action(json.dumps({"Action": "remove", "obj": {"text": "anything", "id": "d2"}}))
    assert b.object_id == "d2" and step(env, b).message == E.MSG_REMOVE_OK and env.draft_ids() == []
    # an id alone is enough; an id never retrieved is a failed insert, whatever the text
    assert parse_action('{"Action": "insert", "obj": {"id": "d1"}}').object_id == "d1"
    out = step(env, Action("insert", text=SAME, object_id="zz"))
    assert not out.ok and env.counters.failed_insert == 1
    # an unparseable date is ignored (the prompt never asks for one)
    assert parse_action(json.dumps({"Action": "insert", "obj": {"text": SAME, "date": "May"}})).date is None
    assert Action("insert", text=SAME, object_id="d1").as_dict()["obj"] == {"text": SAME, "id": "d1"}


# --- through the episode runner: a scripted model, the stored row, the metrics read back -------------

class FakeIndex:
    """An IndexClient over fixed hits (no embedding model): every search returns ``hits`` dated
    before the cutoff, best first."""

    def __init__(self, hits: Sequence[Retrieved]) -> None:
        self.hits = hits

    async def search(self, queries: Sequence[str], before: Sequence[dt.date], k: int,
                     threshold: float | None) -> list[list[DocHit]]:
        return [[DocHit(h.object_id, h.text, h.date, h.score) for h in self.hits if h.date < b][:k] for b in before]

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.ones((len(texts), 4), dtype=np.float32) / 2.0


def scripted(messages: list[dict[str, Any]], req: dict[str, Any]) -> str:
    """Search, insert r3 copied exactly from the retrieved content, terminate."""
    user = messages[-1]["content"]
    if "Operations used: 0 " in user:
        return json.dumps({"Thought": "background", "Action": "search", "query": "pool closure"})
    if "Operations used: 1 " in user:
        return json.dumps({"Thought": "the vote", "Action": "insert", "obj": {"text": R3.text}})
    return json.dumps({"Thought": "done", "Action": "terminate"})


def run_stored(tmp_path: Any, agent: NewsagentAgentConfig) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One episode of TASK through EpisodeRunner against the scripted server, written to an
    EpisodeStore and read back; and the requests the server saw."""
    async def go() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        with FakeOpenAI(scripted) as srv:
            setup = WorkerSetup("newsagent", "fake", agent, "{}", [Endpoint(srv.base_url, "fake")],
                                SamplingParams(), 4, 10, None, uses_model=agent.mode != "rule-based")
            res = await EpisodeRunner(setup, FakeIndex(HITS)).run(EpisodeSpec("0" * 16, "h", TASK, TASK.task_id, 0))
            return res, srv.requests
    res, requests = asyncio.run(go())
    assert res["episode"]["status"] == "ok", res["episode"]["error"]
    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    store.write_batch([res["episode"]], res["steps"])
    return store.episodes().to_pylist(), requests


def test_episode_runner_stores_id_based_scores(tmp_path: Any) -> None:
    """The hand-computed values of the first test, stored by a real episode: search P 3/7 = 0.429,
    R 3/4 = 0.750; the model inserted r3's exact text, so the draft is r3 (edit P 1, R 1/4; the
    old code stored draft n1, edit P 0, and search P 0.333, R 0.500)."""
    (ep,), requests = run_stored(tmp_path, NewsagentAgentConfig(rephrase=False))
    assert ep["finish_reason"] == "terminate"
    # the model saw both objects of the pair in its retrieved content, each with its date
    seen = requests[1]["messages"][1]["content"]
    assert all(f'{{"text": "{o.text}"}} (dated {o.date.isoformat()})' in seen for o in (N1, R3))
    assert ep["retrieved_ids"] == ["r1", "r2", "n1", "r3", "n2", "n3", "n4"]
    assert ep["draft_ids"] == ["r3"] and ep["final_draft"] == [R3.text]
    assert ep["search_precision"] == pytest.approx(3 / 7) and ep["search_recall"] == 0.75
    assert (ep["edit_precision"], ep["edit_recall"]) == (1.0, 0.25)
    m = metrics_of(BENCHMARK, [ep], policy="exclude")
    assert (round(m["search_precision"].value, 3), m["search_precision"].n) == (0.429, 1)
    assert (round(m["search_recall"].value, 3), m["search_recall"].n) == (0.75, 1)
    assert m["edit_precision"].value == 1.0 and m["edit_recall"].value == 0.25


def test_rule_based_keeps_both_objects_of_a_pair(tmp_path: Any) -> None:
    """The baseline inserts its top five hits by id: r1 r2 n1 r3 n2, five objects (the old code
    took r3 for a duplicate of n1 and kept four). Its search and edit scores over those five:
    edit P 3/5, R 3/4; search P 3/7 (the index gave it 7 hits, as above)."""
    (ep,), requests = run_stored(tmp_path, NewsagentAgentConfig(mode="rule-based", rephrase=False))
    assert requests == []
    assert ep["draft_ids"] == ["r1", "r2", "n1", "r3", "n2"] and ep["n_insert"] == 5
    assert ep["n_duplicate_insert"] == 0
    assert ep["edit_precision"] == pytest.approx(3 / 5) and ep["edit_recall"] == 0.75
    assert ep["search_precision"] == pytest.approx(3 / 7)
