"""The livenews release: kept pairs -> a dataset folder ``dateline run benchmark=livenews
benchmark.data_dir=OUT`` runs as it is (the paper's sections 2.2-2.3).

* near-duplicate questions are removed (MiniLM cosine >= ``dedupe_threshold``; the earlier event
  keeps its question): the ``dedupe`` stage;
* each question names its source article (``link``), so the agent's blocklist holds its domain;
* the main set is split by event date (test: the last two months, validation: the month before,
  train: older); the longitudinal set (answers that may change) is its own file;
* with ``review`` (a CSV of accept/reject decisions, no edits), the verified subset of the test
  split, and the rejections counted.

Files: ``questions.jsonl`` (every main-set pair, with its ``split``), ``questions_<split>.jsonl``,
``longitudinal.jsonl``, ``questions_verified.jsonl`` (with a review), ``pages.jsonl`` (every article
read: the offline web), ``rejected.jsonl`` (every rejected item with its stage and reason).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.benchmarks.livenews.build.dedupe import near_duplicates
from engine.benchmarks.livenews.build.intake import embed_texts, intake
from engine.benchmarks.livenews.build.review import read_review, verified_subset
from engine.benchmarks.livenews.build.split import date_split, split_ranges
from engine.benchmarks.livenews.build.stages import DEDUPE, LONGITUDINAL, MAIN
from engine.build.protocol import Verdict
from engine.errors import ConfigError
from engine.inputs.paths import data_path

if TYPE_CHECKING:
    from engine.config.schema import Config

SPLITS = ("train", "validation", "test")


def _jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n")


def dedupe(kept: list[Verdict], threshold: float) -> tuple[list[Verdict], list[Verdict]]:
    """(kept, rejected as duplicates): in the order the articles were published, a question too
    close to an earlier kept one is dropped, naming it."""
    kept = sorted(kept, key=lambda v: tuple(str(v.record.get(k)) for k in ("publish_date", "article_url")))
    if len(kept) < 2:
        return kept, []
    vecs = embed_texts([str(v.record["question"]) for v in kept])
    dropped = near_duplicates([v.item_id for v in kept], vecs, threshold)
    rejected = [replace(v, kept=False, set="", stage=DEDUPE.name, reason="duplicate", record=v.record | {
        "duplicate_of": dropped[v.item_id]}) for v in kept if v.item_id in dropped]
    return [v for v in kept if v.item_id not in dropped], rejected


def _question(v: Verdict, split: str) -> dict[str, Any]:
    r = v.record
    return {"id": v.item_id, "question": r["question"], "answer": r["answer"], "event_date": r["event_date"],
            "link": r["article_url"], "split": split, "stability": r.get("stability") or "",
            "event": r.get("event_summary") or ""}


def publish(verdicts: Sequence[Verdict], cfg: Config, out: Path) -> tuple[list[Verdict], dict[str, Any]]:
    b = cfg.benchmark
    ink = intake(b)
    kept, dupes = dedupe([v for v in verdicts if v.kept], b.dedupe_threshold)
    final = [v for v in verdicts if not v.kept] + kept + dupes
    main = [v for v in kept if v.set == MAIN]
    as_of = dt.date.fromisoformat(b.as_of) if b.as_of else None
    try:
        split = date_split({v.item_id: dt.date.fromisoformat(v.record["event_date"]) for v in main}, as_of)
    except ValueError as e:
        raise ConfigError(f"benchmark.as_of: {e}") from None
    questions = [_question(v, split[v.item_id]) for v in main]
    _jsonl(out / "questions.jsonl", questions)
    for s in SPLITS:
        _jsonl(out / f"questions_{s}.jsonl", [q for q in questions if q["split"] == s])
    _jsonl(out / "longitudinal.jsonl", [_question(v, "longitudinal") for v in kept if v.set == LONGITUDINAL])
    _jsonl(out / "pages.jsonl", [{"url": a.url, "title": a.title, "text": a.text,
                                  "publish_date": a.publish_date.isoformat()} for a in ink.articles])
    _jsonl(out / "rejected.jsonl", [{"id": v.item_id, "stage": v.stage, "reason": v.reason, "pending": v.pending,
                                     **{k: x for k, x in v.record.items() if k != "rules"}}
                                    for v in final if not v.kept])
    extra: dict[str, Any] = {
        "intake": dict(ink.counts), "splits": {s: {"n": sum(q["split"] == s for q in questions), **rng}
                                                for s, rng in split_ranges(split_dates(questions), as_of).items()},
        "files": sorted(p.name for p in out.iterdir()), "dedupe_threshold": b.dedupe_threshold,
        "stages_off": [name for name, on in (("relevance", cfg.agent.check_relevance),
                                             ("adherence", b.check_adherence)) if not on],
        "as_of": b.as_of}
    if b.review:
        decisions = read_review(data_path(b.review), known=[q["id"] for q in questions])
        test_ids = [q["id"] for q in questions if q["split"] == "test"]
        accepted, rejected, unreviewed = verified_subset(test_ids, {i: d for i, d in decisions.items()
                                                                    if i in set(test_ids)})
        keep = set(accepted)
        _jsonl(out / "questions_verified.jsonl", [q for q in questions if q["id"] in keep])
        extra["review"] = {"file": str(data_path(b.review)), "accepted": len(accepted), "rejected": len(rejected),
                           "unreviewed": len(unreviewed), "outside_test": len(decisions) - len(accepted) - len(rejected)}
        extra["files"] = sorted(p.name for p in out.iterdir())
    return final, extra


def split_dates(questions: list[dict[str, Any]]) -> dict[str, dt.date]:
    return {q["id"]: dt.date.fromisoformat(q["event_date"]) for q in questions}
