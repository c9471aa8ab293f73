"""The LiveNewsBench question builder (``livenews:qa``): dated articles in, a livenews dataset out.

Items are (article, event) pairs after the intake (:mod:`.intake`). A draft, on the generator,
checks the article's relevance to its event, then drafts one Q&A pair or skips. The verifier then
answers the question from the article alone and checks the guidelines (round one), and the
livenews grader compares the two answers (round two). :meth:`QABuilder.verdict` reads the row and
its checks in the stages' order; :mod:`.publish` removes near-duplicates, splits by date and writes
the release.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from engine.benchmarks.livenews.build import stages as S
from engine.benchmarks.livenews.build.config import LivenewsBuildConfig, LivenewsDraftConfig
from engine.benchmarks.livenews.build.intake import BuildItem, intake
from engine.benchmarks.livenews.build.publish import publish
from engine.benchmarks.livenews.build.stages import LONGITUDINAL, MAIN
from engine.build.memo import COLUMN, StageCall, dump_calls, stage_call
from engine.build.protocol import KEPT, Stage, Verdict, stage_key, stage_of
from engine.config.values import stable_hash
from engine.errors import ConfigError
from engine.inputs.order import task_order
from engine.protocol import EpisodeContext, EpisodeOutcome, Judged, JudgeRequest, Row, ServiceSpec, select_tasks

if TYPE_CHECKING:
    from engine.config.schema import Config

ANSWER_KEY = stage_key(S.ANSWER)
MATCH_KEY = stage_key(S.MATCH, S.ANSWER)
ADHERENCE_KEY = stage_key(S.ADHERENCE)


_STR = ("article_url", "article_title", "outlet", "publish_date", "event_id", "event_date", "event_summary",
        "article_text", "knowledge_date", "relevance", "question", "answer", "stability", "explanation")


class QABuilder:
    name = "qa"
    config_schema = LivenewsBuildConfig
    draft_schema = LivenewsDraftConfig
    prompt_version = stable_hash(S.RELEVANCE.version, S.DRAFT.version, n=8)
    episode_fields: list[pa.Field[Any]] = [pa.field(n, pa.string()) for n in _STR]
    evaluation_fields = ("dedupe_threshold", "as_of", "review", "answer_max_tokens", "adherence_max_tokens",
                         "check_adherence", "on_bad_rows")
    stages: tuple[Stage, ...] = S.STAGES
    sets = (MAIN, LONGITUDINAL)

    def validate(self, cfg: Config) -> None:
        b = cfg.benchmark
        if b.on_bad_rows not in ("error", "skip"):
            raise ConfigError(f"benchmark.on_bad_rows: must be error or skip, got {b.on_bad_rows!r}")
        for key in ("before_days", "after_days", "group_window_days"):
            if getattr(b, key) < 0:
                raise ConfigError(f"benchmark.{key}: must be >= 0, got {getattr(b, key)}")
        for key in ("group_threshold", "dedupe_threshold"):
            if not 0 < getattr(b, key) <= 1:
                raise ConfigError(f"benchmark.{key}: must be in (0, 1], got {getattr(b, key)}")
        for key in ("knowledge_date", "as_of"):
            if getattr(b, key) is not None:
                try:
                    dt.date.fromisoformat(getattr(b, key))
                except ValueError:
                    raise ConfigError(f"benchmark.{key}: expected YYYY-MM-DD, got {getattr(b, key)!r}") from None
        if not b.articles:
            raise ConfigError("benchmark.articles: name at least one file or folder of articles")

    def items(self, cfg: Config) -> Sequence[BuildItem]:
        items = intake(cfg.benchmark).items
        return select_tasks(items, cfg.benchmark.task_ids, cfg.benchmark.limit, ", ".join(cfg.benchmark.articles),
                            task_order(cfg))

    def services(self, cfg: Config) -> list[ServiceSpec]:
        return []

    async def draft(self, item: BuildItem, ctx: EpisodeContext) -> EpisodeOutcome:
        a: LivenewsDraftConfig = ctx.agent
        calls: list[StageCall] = []
        extras: dict[str, Any] = {
            "article_url": item.url, "article_title": item.title, "outlet": item.outlet,
            "publish_date": item.publish_date, "event_id": item.event_id, "event_date": item.event_date,
            "event_summary": item.event_summary, "article_text": item.text, "knowledge_date": item.knowledge_date}
        if a.check_relevance:
            said = await stage_call(ctx, calls, S.RELEVANCE.name, S.RELEVANCE.version,
                                    S.relevance_messages(item.event_summary, item.title, item.text),
                                    a.relevance_max_tokens)
            relevant = S.parse_relevance(said)
            extras["relevance"] = {True: "yes", False: "no", None: "unreadable"}[relevant]
            if relevant is not True:
                return EpisodeOutcome("", "irrelevant" if relevant is False else "relevance_unreadable",
                                      extras | {COLUMN: dump_calls(calls)})
        said = await stage_call(ctx, calls, S.DRAFT.name, S.DRAFT.version,
                                S.draft_messages(item.title, item.text, item.knowledge_date), a.draft_max_tokens)
        qa = S.parse_draft(said)
        extras[COLUMN] = dump_calls(calls)
        if qa is None:
            return EpisodeOutcome("", "draft_unreadable", extras)
        if not qa:
            return EpisodeOutcome("", "skipped", extras)
        extras |= {k: qa.get(k, "") for k in ("question", "answer", "stability", "explanation")}
        return EpisodeOutcome(json.dumps({"question": qa["question"], "answer": qa["answer"]}, ensure_ascii=False),
                              "drafted", extras)

    def checks(self, row: Row, judged: Judged) -> list[JudgeRequest]:
        if row.get("finish_reason") != "drafted":
            return []
        b = _settings(row)
        eid, q, ans = row["episode_id"], row["question"], row["answer"]
        title, text = row["article_title"], row["article_text"]
        out = [JudgeRequest(eid, ANSWER_KEY, S.answer_messages(q, title, text), int(b.get("answer_max_tokens", 48)))]
        if b.get("check_adherence", True):
            out.append(JudgeRequest(eid, ADHERENCE_KEY, S.adherence_messages(q, ans, title, text, row["knowledge_date"]),
                                    int(b.get("adherence_max_tokens", 160)), json_schema=S.ADHERENCE_SCHEMA))
        verified = judged.get(eid, {}).get(ANSWER_KEY)
        if verified is not None and not verified.strip().upper().startswith(S.NOT_ANSWERED):   # else nothing to compare
            out.append(JudgeRequest(eid, MATCH_KEY, S.match_messages(q, ans, verified), 8))
        return out

    def parse_check(self, key: str, text: str) -> str | None:
        """A check's answer, by its stage (a stored check of an older prompt version is read as
        its stage's; only the current version's key counts in a verdict)."""
        parse = {S.ANSWER.name: S.parse_answer, S.MATCH.name: S.parse_match,
                 S.ADHERENCE.name: S.parse_adherence}.get(stage_of(key))
        if parse is None:
            raise ValueError(f"livenews:qa: no check {key!r}")
        return parse(text)

    def verdict(self, row: Row) -> Verdict:
        return verdict(row)

    def publish(self, verdicts: Sequence[Verdict], cfg: Config, out: Path) -> tuple[list[Verdict], dict[str, Any]]:
        return publish(verdicts, cfg, out)


def _settings(row: Row) -> dict[str, Any]:
    """The build settings a row is checked under: its data, then the run's evaluation settings."""
    data: dict[str, Any] = json.loads(row["data"]) if row.get("data") else {}
    return {**data, **(row.get("evaluation") or {})}


def verdict(row: Row) -> Verdict:
    """The stages in order; the first that rejects decides. A check with no answer yet (failed at
    the endpoint, or not run) leaves the item pending, never silently rejected."""
    eid, item = row["episode_id"], row["task_id"]
    shown = {k: row.get(k) for k in ("question", "answer", "stability", "article_url", "outlet", "publish_date",
                                     "event_date", "event_summary", "article_title")}

    def reject(stage: Stage, reason: str, **more: Any) -> Verdict:
        return Verdict(item, eid, False, "", stage.name, reason, shown | more)

    if row.get("status") != "ok":
        return Verdict(item, eid, False, "", S.DRAFT.name, "draft_failed", shown, pending=True)
    fin = row.get("finish_reason")
    if fin in ("irrelevant", "relevance_unreadable"):
        return reject(S.RELEVANCE, fin)
    if fin in ("skipped", "draft_unreadable"):
        return reject(S.DRAFT, fin)
    j = row.get("judgements") or {}
    verified, match, rules = j.get(ANSWER_KEY), j.get(MATCH_KEY), j.get(ADHERENCE_KEY)
    if ANSWER_KEY not in j or verified is None:
        return Verdict(item, eid, False, "", S.ANSWER.name, "no_answer_yet" if ANSWER_KEY not in j
                       else "verifier_unreadable", shown, pending=ANSWER_KEY not in j)
    if verified.strip().upper().startswith(S.NOT_ANSWERED):
        return reject(S.ANSWER, "verifier_found_no_answer", verifier_answer=verified)
    if MATCH_KEY not in j or match is None:
        return Verdict(item, eid, False, "", S.MATCH.name, "no_match_yet" if MATCH_KEY not in j else
                       "grade_unreadable", shown | {"verifier_answer": verified}, pending=MATCH_KEY not in j)
    if match != "CORRECT":
        return reject(S.MATCH, "answers_differ", verifier_answer=verified, grade=match)
    if not _settings(row).get("check_adherence", True):       # the guideline check switched off
        return Verdict(item, eid, True, MAIN, S.MATCH.name, KEPT, shown | {"verifier_answer": verified})
    if ADHERENCE_KEY not in j or rules is None:
        return Verdict(item, eid, False, "", S.ADHERENCE.name, "no_adherence_yet" if ADHERENCE_KEY not in j
                       else "adherence_unreadable", shown | {"verifier_answer": verified},
                       pending=ADHERENCE_KEY not in j)
    failed = [r for r, ok in json.loads(rules).items() if not ok]
    kept = shown | {"verifier_answer": verified, "rules": json.loads(rules)}
    if not failed:
        return Verdict(item, eid, True, MAIN, S.ADHERENCE.name, KEPT, kept)
    if failed == ["stable"]:
        return Verdict(item, eid, True, LONGITUDINAL, S.ADHERENCE.name, KEPT, kept)
    return reject(S.ADHERENCE, "guideline:" + ",".join(sorted(failed)), verifier_answer=verified,
                  rules=json.loads(rules))


QA_BUILDER = QABuilder()
