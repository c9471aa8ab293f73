"""The pieces of ``dateline build build=livenews`` without Ray: the stages' parsers
(engine/benchmarks/livenews/build/stages.py), the builder's checks and verdicts on hand-made rows
(builder.py), the stage keys (engine/build/protocol.py), the stage-call memo over a stored run dir
(engine/build/memo.py) and the manifest's counts per stage (ray_jobs/build/publish.py)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from engine.benchmarks import get_benchmark
from engine.benchmarks.livenews.build import builder as B
from engine.benchmarks.livenews.build import stages as S
from engine.benchmarks.livenews.build.config import LivenewsDraftConfig
from engine.benchmarks.livenews.build.intake import BuildItem
from engine.build.memo import COLUMN, MEMO, StageCall, StageMemo, call_key, dump_calls, stage_call
from engine.build.protocol import Verdict, stage_key, stage_of
from engine.llm.types import Completion
from engine.protocol import EpisodeContext
from engine.runtime.services import LocalService
from engine.storage import EpisodeStore
from ray_jobs.build.publish import failed_at_endpoint, stage_counts
from ray_jobs.judging.stream import MALFORMED
from tests.factories import episode_row

ALL_PASS = {r: True for r in S.RULES}


# -- the parsers ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "want"), [
    ("The article is about the strike.\nAnswer: Yes", True),
    ("Answer: No", False),
    ("First thought. Answer: Yes\nOn reflection it is another story.\nAnswer: No", False),   # the last one
    ("**Answer:** yes", True),
    ("Answer: **No**", False),
    ("Answer：Yes", True),                   # a full-width colon
    ("The article reports the event.", None),
    ("Answer: Yesterday's story", None),     # not a verdict
    ("Answer: maybe", None),
    ("", None),
    ("No", False),                          # the word alone (the bundled 0.5B model's whole reply)
    ("**Yes.**", True),
    ("No, because it is about a storm", None),   # a sentence is not the word alone
])
def test_parse_relevance_reads_the_last_answer_line(text, want):
    assert S.parse_relevance(text) is want


FIG6 = ("I considered two candidates.\nQuestion: How many days did the port strike last?\nAnswer: 12 days\n"
        "Temporal Stability: Unlikely to change over time\nExplanation: a fixed, reported duration.")


@pytest.mark.parametrize(("text", "want"), [
    (FIG6, {"question": "How many days did the port strike last?", "answer": "12 days",
            "stability": "Unlikely to change over time", "explanation": "a fixed, reported duration."}),
    ("**Question:** Q?\n**Answer:** 44.1 C\n**Temporal Stability:** Unlikely to change over time\n"
     "**Explanation:** e", {"question": "Q?", "answer": "44.1 C", "stability": "Unlikely to change over time",
                            "explanation": "e"}),
    ("- Question: Q?\n- Answer: 12", {"question": "Q?", "answer": "12"}),
    ("### Question: Q?\n### Answer: Lisbon", {"question": "Q?", "answer": "Lisbon"}),
    # candidates first, the chosen pair last: the last block counts
    ("Question: first?\nAnswer: one\nBetter:\nQuestion: second?\nAnswer: two", {"question": "second?", "answer": "two"}),
    # a line that only mentions the word is no field
    ("The answer: unclear so far\nQuestion: Q?\nAnswer: X", {"question": "Q?", "answer": "X"}),
])
def test_parse_draft_reads_the_figure_6_block(text, want):
    assert S.parse_draft(text) == want


@pytest.mark.parametrize("text", [
    "Question: N/A\nAnswer: N/A\nTemporal Stability: N/A\nExplanation: nothing to ask.",
    "**Question:** N/A\n**Answer:** N/A",
    "Question: Who won?\nAnswer: n/a",        # no answer is a skip too
])
def test_parse_draft_reads_a_skip_as_empty(text):
    assert S.parse_draft(text) == {}


@pytest.mark.parametrize("text", ["", "I cannot write a question for this.", "Question: Q?",
                                  "Answer: 12", "Question:\nAnswer: 12"])
def test_parse_draft_without_a_question_and_an_answer_is_unreadable(text):
    assert S.parse_draft(text) is None


@pytest.mark.parametrize(("text", "want"), [("44.1 C", "44.1 C"), ("\n  **Lisbon**  \nbecause the article says", "Lisbon"),
                                            ("N/A", "N/A"), ("", None), ("  \n\n ", None)])
def test_parse_answer_is_the_first_line(text, want):
    assert S.parse_answer(text) == want


def test_parse_adherence_is_canonical_json_of_every_rule():
    shuffled = {r: r != "stable" for r in reversed(S.RULES)}
    got = S.parse_adherence("Each rule checked.\n```json\n" + json.dumps(shuffled) + "\n```")
    assert got == json.dumps({r: r != "stable" for r in S.RULES}, sort_keys=True)
    assert list(json.loads(got)) == sorted(S.RULES)
    assert S.parse_adherence(json.dumps({**ALL_PASS, "extra": 1})) == json.dumps(ALL_PASS, sort_keys=True)


@pytest.mark.parametrize("text", [
    json.dumps({r: True for r in S.RULES if r != "stable"}),         # a rule missing
    json.dumps({**ALL_PASS, "objective": "yes"}),                     # not a boolean
    json.dumps({**ALL_PASS, "objective": 1}),
    json.dumps({**ALL_PASS, "objective": None}),
    "{not json", json.dumps(ALL_PASS)[:-5], "[true, false]", "", "all good",
])
def test_parse_adherence_without_every_rule_as_a_boolean_is_none(text):
    assert S.parse_adherence(text) is None


# -- stage keys -----------------------------------------------------------------------------------

def test_a_stage_key_changes_with_its_version_and_the_versions_it_reads():
    match, answer = S.MATCH, S.ANSWER
    key = stage_key(match, answer)
    assert stage_of(key) == "match" and key.startswith("match@") and key == stage_key(match, answer)
    assert stage_key(replace(answer, version="new")) != stage_key(answer)
    assert stage_key(match, replace(answer, version="new")) != key          # a changed upstream check
    assert stage_key(replace(match, version="new"), answer) != key
    assert stage_key(match) != key
    assert stage_of("adherence@00000000") == "adherence" and stage_of("plain") == "plain"


# -- the checks and the verdict on hand-made rows -------------------------------------------------

def row(finish: str = "drafted", status: str = "ok", **judgements: str | None) -> dict[str, Any]:
    """A draft row of the builder; ``judgements`` by stage (answer, match, adherence) under the
    current keys, or by an explicit key (``**{"adherence@00000000": ...}``)."""
    keys = {"answer": B.ANSWER_KEY, "match": B.MATCH_KEY, "adherence": B.ADHERENCE_KEY}
    return {"episode_id": "e1", "task_id": "a1", "status": status, "finish_reason": finish,
            "question": "How many days did the strike last?", "answer": "12 days", "stability": "Unlikely",
            "article_url": "https://apnews.com/x", "article_title": "Port strike ends", "outlet": "apnews.com",
            "article_text": "The port strike ended after 12 days.", "publish_date": "2025-03-03",
            "event_date": "2025-03-03", "event_summary": "A port strike ends", "knowledge_date": "2025-03-01",
            "data": json.dumps({"answer_max_tokens": 48}), "evaluation": {},
            "judgements": {keys.get(k, k): v for k, v in judgements.items()}}


def rules(**failed: bool) -> str:
    return json.dumps({**ALL_PASS, **failed}, sort_keys=True)


@pytest.mark.parametrize(("r", "stage", "reason"), [
    (row("irrelevant"), "relevance", "irrelevant"),
    (row("relevance_unreadable"), "relevance", "relevance_unreadable"),
    (row("skipped"), "draft", "skipped"),
    (row("draft_unreadable"), "draft", "draft_unreadable"),
    (row(answer="N/A", match="INCORRECT", adherence=rules()), "answer", "verifier_found_no_answer"),
    (row(answer="11 days", match="INCORRECT", adherence=rules()), "match", "answers_differ"),
    (row(answer="11 days", match="NOT ATTEMPTED", adherence=rules()), "match", "answers_differ"),
    (row(answer="12 days", match="CORRECT", adherence=rules(unambiguous=False)), "adherence", "guideline:unambiguous"),
    (row(answer="12 days", match="CORRECT", adherence=rules(stable=False, objective=False)), "adherence",
     "guideline:objective,stable"),
    (row(answer="12 days", match="CORRECT", adherence=rules(unambiguous=False, stable=False, from_article=False)),
     "adherence", "guideline:from_article,stable,unambiguous"),
])
def test_each_stage_rejects_with_its_reason(r, stage, reason):
    v = B.verdict(r)
    assert (v.kept, v.pending, v.set, v.stage, v.reason) == (False, False, "", stage, reason)
    assert v.item_id == "a1" and v.episode_id == "e1" and v.record["question"] == r["question"]


def test_a_pair_passing_every_check_is_kept_in_main_and_one_failing_only_stable_in_longitudinal():
    main = B.verdict(row(answer="12 days", match="CORRECT", adherence=rules()))
    assert (main.kept, main.set, main.reason, main.pending) == (True, "main", "kept", False)
    assert main.record["verifier_answer"] == "12 days" and main.record["rules"] == ALL_PASS
    longi = B.verdict(row(answer="12 days", match="CORRECT", adherence=rules(stable=False)))
    assert (longi.kept, longi.set, longi.reason) == (True, "longitudinal", "kept")


@pytest.mark.parametrize(("r", "stage"), [
    (row(status="error", finish=""), "draft"),                         # the draft failed: it runs again
    (row(), "answer"),                                                  # no check answered yet
    (row(adherence=rules()), "answer"),
    (row(answer="12 days", adherence=rules()), "match"),                # the match comes after the answer
    (row(answer="12 days", match="CORRECT"), "adherence"),
])
def test_an_item_waiting_for_a_draft_or_a_check_is_pending_not_rejected(r, stage):
    v = B.verdict(r)
    assert (v.kept, v.pending, v.stage) == (False, True, stage)


def test_a_check_stored_under_an_old_prompt_version_does_not_count():
    old = row(answer="12 days", match="CORRECT", **{"adherence@00000000": rules()})
    v = B.verdict(old)
    assert (v.kept, v.pending, v.stage) == (False, True, "adherence")
    stale_answer = row(match="CORRECT", adherence=rules(), **{"answer@00000000": "12 days"})
    assert B.verdict(stale_answer).pending and B.verdict(stale_answer).stage == "answer"
    # the stored old answer is parsed by its stage's parser (so it stays readable) but never decides
    assert B.QA_BUILDER.parse_check("adherence@00000000", json.dumps(ALL_PASS)) == rules()
    with pytest.raises(ValueError, match="no check"):
        B.QA_BUILDER.parse_check("relevance@1", "Answer: Yes")


def test_round_one_asks_the_answer_and_the_guidelines_and_the_match_waits_for_the_answer():
    r = row()
    first = B.QA_BUILDER.checks(r, {})
    assert [q.key for q in first] == [B.ANSWER_KEY, B.ADHERENCE_KEY]
    answer, adherence = first
    assert answer.json_schema is None and answer.max_tokens == 48
    assert adherence.json_schema == S.ADHERENCE_SCHEMA and set(adherence.json_schema["required"]) == set(S.RULES)
    assert "How many days did the strike last?" in answer.messages[0]["content"]
    assert "12 days" not in answer.messages[0]["content"].split("Article:")[0]     # the verifier does not see the answer
    assert "Answer: 12 days" in adherence.messages[0]["content"]
    # the answer of an older answer prompt is not this answer: the match still waits
    assert [q.key for q in B.QA_BUILDER.checks(r, {"e1": {"answer@00000000": "12 days"}})] == [B.ANSWER_KEY,
                                                                                               B.ADHERENCE_KEY]
    second = B.QA_BUILDER.checks(r, {"e1": {B.ANSWER_KEY: "twelve days"}})
    assert [q.key for q in second] == [B.ANSWER_KEY, B.ADHERENCE_KEY, B.MATCH_KEY]
    match = second[-1].messages[0]["content"]
    assert "Gold target: 12 days" in match and "Predicted answer: twelve days" in match
    # an evaluation setting overrides what the row was drafted under
    assert B.QA_BUILDER.checks({**r, "evaluation": {"answer_max_tokens": 20}}, {})[0].max_tokens == 20


@pytest.mark.parametrize("finish", ["irrelevant", "relevance_unreadable", "skipped", "draft_unreadable"])
def test_nothing_is_checked_for_an_item_without_a_draft(finish):
    assert B.QA_BUILDER.checks(row(finish), {"e1": {B.ANSWER_KEY: "12 days"}}) == []


# -- the memo of stage calls ----------------------------------------------------------------------

class ScriptedChat:
    """``ctx.llm``: replies by the prompt (figure 5 or figure 6), counting its calls."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    async def chat(self, messages: list[dict[str, str]], max_tokens: int, json_schema: Any = None,
                   seed: int | None = None, regex: str | None = None, temperature: float | None = None) -> Completion:
        p = messages[0]["content"]
        self.prompts.append(p)
        text = "It reports the strike.\nAnswer: Yes" if "News event summary:" in p else FIG6
        return Completion(text, len(p) // 4, len(text) // 4, 0.01)


ITEM = BuildItem("a1", "https://apnews.com/x", "Port strike ends", "The port strike ended after 12 days.",
                 "apnews.com", "2025-03-03", "ev1", "2025-03-03", "A port strike ends", "2025-03-01")


def ctx(model: ScriptedChat, memo: StageMemo | None) -> EpisodeContext:
    return EpisodeContext(episode_id="e1", seed=0, agent=LivenewsDraftConfig(), llm=model, index=None,
                          services={MEMO: LocalService(memo)} if memo is not None else {})


def store_draft(root: Path, extras: dict[str, Any], eid: str = "e1", status: str = "ok") -> None:
    """One draft row of ``livenews:qa`` in the run dir ``root``, as the driver stores it."""
    bench = get_benchmark("livenews:qa")
    r = episode_row("livenews", benchmark="livenews:qa", episode_id=eid, task_id="a1", status=status,
                    finish_reason="drafted", **{k: extras.get(k) for k in (f.name for f in bench.episode_fields)})
    EpisodeStore(root, bench.episode_fields).write_batch([r], [])


def test_a_stored_stage_call_is_answered_from_the_memo_and_not_asked_again(tmp_path):
    first = ScriptedChat()
    c1 = ctx(first, StageMemo(str(tmp_path), "gen-id"))         # not a run dir yet: nothing stored
    out = asyncio.run(B.QA_BUILDER.draft(ITEM, c1))
    assert out.finish_reason == "drafted" and len(first.prompts) == 2
    assert [s.result for s in c1.steps] == ["", ""]
    store_draft(tmp_path, out.extras)

    memo = StageMemo(str(tmp_path), "gen-id")
    assert len(memo.calls) == 2
    again = ScriptedChat()
    c2 = ctx(again, memo)
    out2 = asyncio.run(B.QA_BUILDER.draft(ITEM, c2))
    assert again.prompts == []                                   # the model was not called
    assert out2.output == out.output and out2.finish_reason == "drafted"
    assert [(s.turn, s.result) for s in c2.steps] == [("relevance", "stored call (memo)"), ("draft", "stored call (memo)")]
    assert [c["memo"] for c in json.loads(out2.extras[COLUMN])] == [True, True]
    assert memo.get_stats() == {"stored_calls": 2, "reused": 2}


def test_a_call_with_other_messages_or_another_model_is_not_answered_from_the_memo(tmp_path):
    msgs = S.relevance_messages("A port strike ends", ITEM.title, ITEM.text)
    stored = StageCall("relevance", S.RELEVANCE.version, call_key("relevance", S.RELEVANCE.version, "gen-id", msgs,
                                                                   max_tokens=160, json_schema=None),
                       "Answer: No", 10, 2, "gen-id")
    store_draft(tmp_path, {COLUMN: dump_calls([stored])})

    async def ask(model: ScriptedChat, memo: StageMemo, messages: list[dict[str, str]], version: str) -> tuple[str, Any]:
        c = ctx(model, memo)
        calls: list[StageCall] = []
        said = await stage_call(c, calls, "relevance", version, messages, 160)
        return said, (c.steps[-1].result, calls[-1].memo)

    chat = ScriptedChat()
    memo = StageMemo(str(tmp_path), "gen-id")
    assert asyncio.run(ask(chat, memo, msgs, S.RELEVANCE.version)) == ("Answer: No", ("stored call (memo)", True))
    assert chat.prompts == []
    other_text = S.relevance_messages("A port strike ends", ITEM.title, ITEM.text + " Updated.")
    assert asyncio.run(ask(chat, memo, other_text, S.RELEVANCE.version))[1] == ("", False)
    assert asyncio.run(ask(chat, memo, msgs, "another-version"))[1] == ("", False)
    assert len(chat.prompts) == 2
    other_model = StageMemo(str(tmp_path), "another-model-id")
    assert other_model.calls == {}
    assert asyncio.run(ask(chat, other_model, msgs, S.RELEVANCE.version))[1] == ("", False)
    assert len(chat.prompts) == 3


def test_the_memo_keeps_only_this_models_own_calls_of_ok_rows(tmp_path):
    own = StageCall("relevance", "v1", "k-own", "Answer: Yes", 5, 1, "gen-id")
    other = StageCall("relevance", "v1", "k-other", "Answer: No", 5, 1, "other-id")
    reused = StageCall("draft", "v1", "k-reused", FIG6, model="gen-id", memo=True)
    store_draft(tmp_path, {COLUMN: dump_calls([own, other, reused])})
    store_draft(tmp_path, {COLUMN: dump_calls([StageCall("draft", "v1", "k-failed", FIG6, model="gen-id")])},
                eid="e2", status="error")
    memo = StageMemo(str(tmp_path), "gen-id")
    assert set(memo.calls) == {"k-own"}
    assert asyncio.run(LocalService(memo).get("k-own"))["output"] == "Answer: Yes"
    assert memo.get("k-reused") is None and memo.get("k-other") is None and memo.get("k-failed") is None
    assert StageMemo(str(tmp_path), "other-id").calls.keys() == {"k-other"}


# -- counts per stage -----------------------------------------------------------------------------

def verdict(i: int, stage: str, reason: str, kept: bool = False, set_: str = "", pending: bool = False) -> Verdict:
    return Verdict(f"a{i}", f"e{i}", kept, set_, stage, reason, pending=pending)


def test_stage_counts_follow_the_items_through_every_stage():
    bench = get_benchmark("livenews:qa")
    verdicts = [verdict(0, "relevance", "irrelevant"), verdict(1, "relevance", "irrelevant"),
                verdict(2, "draft", "skipped"), verdict(3, "draft", "draft_failed", pending=True),
                verdict(4, "answer", "verifier_found_no_answer"), verdict(5, "match", "answers_differ"),
                verdict(6, "match", "no_match_yet", pending=True), verdict(7, "adherence", "guideline:stable,unambiguous"),
                verdict(8, "adherence", "kept", kept=True, set_="main"),
                verdict(9, "adherence", "kept", kept=True, set_="longitudinal"),
                verdict(10, "dedupe", "duplicate"), verdict(11, "adherence", "kept", kept=True, set_="main")]
    intake = {"read": 15, "quarantined": 2, "outlet_not_allowed": 1, "outside_event_window": 2, "duplicate_url": 0,
              "assigned": 12, "groups": 0, "items": 12}
    c = stage_counts(bench, verdicts, intake)
    assert list(c) == ["intake", "relevance", "draft", "answer", "match", "adherence", "dedupe", "split"]
    got = {s: (e["in"], e["passed"], e["rejected"], e["pending"]) for s, e in c.items()}
    assert got == {
        # tallies (read, assigned, groups, items) are no rejection, and a zero count is left out
        "intake": (17, 12, {"quarantined": 2, "outlet_not_allowed": 1, "outside_event_window": 2}, 0),   # in = passed + left out
        "relevance": (12, 10, {"irrelevant": 2}, 0),
        "draft": (10, 8, {"skipped": 1}, 1),
        "answer": (8, 7, {"verifier_found_no_answer": 1}, 0),
        "match": (7, 5, {"answers_differ": 1}, 1),
        "adherence": (5, 4, {"guideline:stable,unambiguous": 1}, 0),     # the kept ones pass it
        "dedupe": (4, 3, {"duplicate": 1}, 0),
        "split": (3, 3, {}, 0),
    }
    assert c["intake"]["counts"] == intake
    assert c["relevance"]["model"] == "generator" and c["answer"]["model"] == "verifier"
    assert c["match"]["version"] == S.MATCH.version and c["dedupe"]["model"] == ""


def test_a_build_of_fewer_items_than_the_intake_passed_counts_its_model_stages_from_the_drafts():
    """benchmark.limit=2 of 9 items: the relevance stage saw 2, not 9 (the other 7 were not drafted)."""
    verdicts = [verdict(0, "relevance", "irrelevant"), verdict(1, "adherence", "kept", kept=True, set_="main")]
    c = stage_counts(get_benchmark("livenews:qa"), verdicts, {"read": 9, "assigned": 9, "items": 9})
    assert (c["intake"]["in"], c["intake"]["passed"], c["intake"]["not_drafted"]) == (9, 9, 7)
    assert (c["relevance"]["in"], c["relevance"]["passed"]) == (2, 1)
    assert (c["split"]["in"], c["split"]["passed"]) == (1, 1)
    full = stage_counts(get_benchmark("livenews:qa"), verdicts, {"read": 2, "items": 2})
    assert "not_drafted" not in full["intake"]


def test_a_check_that_failed_at_the_endpoint_is_asked_again_and_one_answered_badly_is_final():
    def j(eid: str, key: str, batch: str, ok: bool, error: str = "") -> dict[str, Any]:
        return {"episode_id": eid, "key": key, "batch_id": batch, "ok": ok, "error": error}

    rows = [j("e1", "answer@1", "b1", False, "HTTP 500: down"),                 # down: asked again
            j("e2", "answer@1", "b1", False, MALFORMED + ": no answer"),          # answered badly: final
            j("e3", "answer@1", "b1", False, MALFORMED + ": no answer"),
            j("e3", "answer@1", "b2", False, "timed out"),                         # the newest failure counts
            j("e4", "answer@1", "b1", False, "timed out"), j("e4", "answer@1", "b2", True)]   # answered since
    assert failed_at_endpoint(rows) == {("e1", "answer@1"), ("e3", "answer@1")}
    # the verdict of a row whose answer check is left out is pending (the row keeps the others)
    v = B.verdict(row(adherence=rules()))
    assert v.pending and v.reason == "no_answer_yet"
    assert not B.verdict(row(answer=None, adherence=rules())).pending       # unreadable: rejected, final


def test_the_guideline_check_switched_off_is_not_asked_and_keeps_what_the_comparison_passed():
    off = {**row(), "evaluation": {"check_adherence": False}}
    assert [r.key for r in B.QA_BUILDER.checks(off, {})] == [B.ANSWER_KEY]
    kept = B.verdict({**row(answer="12 days", match="CORRECT"), "evaluation": {"check_adherence": False}})
    assert kept.kept and kept.set == "main" and kept.stage == "match" and not kept.pending
    differ = B.verdict({**row(answer="9 days", match="INCORRECT"), "evaluation": {"check_adherence": False}})
    assert not differ.kept and differ.reason == "answers_differ"
    assert B.verdict(row(answer="12 days", match="CORRECT")).pending          # on by default: waits for it
