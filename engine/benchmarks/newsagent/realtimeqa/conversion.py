"""The conversion itself: :func:`convert` reads a dump (:mod:`.dump`), cleans its articles (step 2),
builds the historical database (step 7), makes one task per question or counts why not (steps 6,
8, 9, 10), writes the dataset folder and returns the stats. The rules of each step are in the
package docstring; the text rules are in :mod:`.text`, the database in :mod:`.database`."""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from engine.benchmarks.newsagent.data import HistoricalObject, NewsTask, write_dataset
from engine.benchmarks.newsagent.realtimeqa.database import DbObject, Index, object_id, render
from engine.benchmarks.newsagent.realtimeqa.dump import Article, Question, load, week_files
from engine.benchmarks.newsagent.realtimeqa.text import (
    MIN_LINE_WORDS,
    clean_article,
    content_tokens,
    lines_of,
    normalize,
)
from engine.inputs.quarantine import Quarantine, check_mode, write_quarantine_file

# The package's name, as when the converter was one module: its log lines keep their logger.
log = logging.getLogger("engine.benchmarks.newsagent.realtimeqa")

MIN_FIRSTHAND = 3
REFERENCE_ARTICLE_SENTENCES = 60

SKIP_REASONS = ("no_search_results", "no_target_article", "no_reference_evidence", "too_few_firsthand")

# A target article's sentences, each with the database objects it matches before the release date.
Matched = list[tuple[str, list[int]]]


def _first_sentences(paragraphs: list[list[str]], limit: int) -> str:
    out, n = [], 0
    for p in paragraphs:
        if n >= limit:
            break
        out.append(" ".join(p[:limit - n]))
        n += len(p[:limit - n])
    return "\n\n".join(out)


def _crawled_by(crawled: dt.datetime | None, cutoff: dt.datetime | None) -> bool:
    """A crawl made at or before a cutoff (an unknown time on either side constrains nothing)."""
    return crawled is None or cutoff is None or crawled <= cutoff


def _target_rank(a: Article) -> tuple[int, int, str]:
    """The target article of a question: the latest publish date, then the longest text, then the URL."""
    assert a.date is not None       # only dated articles are eligible
    return -a.date.toordinal(), -len(a.text), a.url


def _boilerplate(articles: dict[str, Article], min_articles: int, max_sentences: int) -> frozenset[str]:
    """Step 2: lines repeated across many articles are boilerplate; every article with text gets
    its cleaned paragraphs. Returns the boilerplate lines (normalized)."""
    line_freq: Counter[str] = Counter()
    for a in articles.values():
        line_freq.update({normalize(ln) for ln in lines_of(a.text) if len(ln.split()) >= MIN_LINE_WORDS})
    boilerplate = frozenset(k for k, c in line_freq.items() if c >= min_articles and k)
    keep = max(max_sentences, REFERENCE_ARTICLE_SENTENCES)
    for a in articles.values():
        if a.text.strip():
            a.paragraphs = clean_article(a.text, boilerplate, keep)
    return boilerplate


def _database(articles: dict[str, Article], max_sentences: int) -> list[DbObject]:
    """Step 7: the database, in (date, url) order, deduplicated by (normalized text, date)."""
    objects: list[DbObject] = []
    by_key: dict[tuple[str, dt.date], DbObject] = {}
    by_id: dict[str, DbObject] = {}
    dated = sorted((a for a in articles.values() if a.date is not None and a.paragraphs),
                   key=lambda a: (a.date, a.url))
    for a in dated:
        assert a.date is not None
        for s in a.sentences(max_sentences):
            key = (normalize(s), a.date)
            if key in by_key:
                by_key[key].urls.add(a.url)
                continue
            text, kind = render(s)
            o = DbObject(object_id(a.url, s, by_id), a.date, s, text, kind, a.url, content_tokens(s), {a.url})
            by_key[key] = o
            by_id[o.object_id] = o
            objects.append(o)
    return objects


def _target(q: Question, articles: dict[str, Article], stats: dict[str, Any]) -> Article | str:
    """Step 6: the question's target article, or why it has none (a skip reason)."""
    if not q.urls:
        return "no_search_results"
    eligible = [articles[u] for u in q.urls
                if (published := articles[u].date) is not None and published <= q.date and articles[u].paragraphs]
    in_time = [a for a in eligible if _crawled_by(a.crawled, q.crawled)]
    stats["targets_crawled_later"] += len(eligible) - len(in_time)
    if not in_time:
        return "no_target_article"
    return min(in_time, key=_target_rank)


def _task(q: Question, target: Article, matched: Matched, objects: list[DbObject]) -> NewsTask | str:
    """Steps 8 and 9: the task of a question and its target, or why it is skipped (a skip reason)."""
    assert target.date is not None
    firsthand: list[str] = []
    seen: set[str] = set()
    for s, hits in matched:
        norm = normalize(s)
        if not hits and norm not in seen:
            seen.add(norm)
            firsthand.append(render(s)[0])
    qurls = set(q.urls or ())
    refs = sorted({i for _, hits in matched for i in hits if objects[i].urls & qurls})
    if not refs:
        return "no_reference_evidence"
    if len(firsthand) < MIN_FIRSTHAND:
        return "too_few_firsthand"
    reference_article = _first_sentences(target.paragraphs, REFERENCE_ARTICLE_SENTENCES)
    title = target.title or target.sentences(1)[0][:200]
    return NewsTask(f"rtqa-{q.qid}", title, target.date, tuple(firsthand),
                    tuple(objects[i].object_id for i in refs), reference_article, q.qid)


def _tasks(questions: list[Question], articles: dict[str, Article], objects: list[DbObject], max_sentences: int,
           threshold: float, stats: dict[str, Any]) -> tuple[list[NewsTask], Counter[str], Counter[str]]:
    """Steps 6, 8, 9 and 10 for every question: (tasks, skips by reason, tasks per target URL)."""
    index = Index(objects)
    tasks: list[NewsTask] = []
    skipped: Counter[str] = Counter({r: 0 for r in SKIP_REASONS})
    target_cache: dict[str, Matched] = {}
    target_uses: Counter[str] = Counter()
    for q in questions:
        target = _target(q, articles, stats)
        if isinstance(target, str):
            skipped[target] += 1
            continue
        assert target.date is not None
        release = target.date
        if target.url not in target_cache:
            target_cache[target.url] = [(s, index.matches(content_tokens(s), release, threshold))
                                        for s in target.sentences(max_sentences)]
        task = _task(q, target, target_cache[target.url], objects)
        if isinstance(task, str):
            skipped[task] += 1
            continue
        target_uses[target.url] += 1
        tasks.append(task)
    return tasks, skipped, target_uses


def _stats(*, weeks: int, questions: int, articles: dict[str, Article], tasks: list[NewsTask],
           skipped: Counter[str], stats: dict[str, Any], boilerplate: frozenset[str],
           out_objects: list[HistoricalObject], target_uses: Counter[str], bad: Quarantine | None,
           t0: float) -> dict[str, Any]:
    """The stats dict :func:`convert` returns and logs."""
    n_tasks = len(tasks)
    return {
        "weeks": weeks,
        "questions": questions,
        "tasks": n_tasks,
        "skipped": dict(skipped),
        "search_results": stats["search_results"],
        "articles": len(articles),
        "articles_undated": sum(1 for a in articles.values() if a.date is None),
        "articles_without_text": sum(1 for a in articles.values() if not a.text.strip()),
        "articles_without_sentences": sum(1 for a in articles.values() if a.text.strip() and not a.paragraphs),
        "articles_crawled_more_than_once": sum(1 for a in articles.values() if a.crawls > 1),
        "targets_crawled_later": stats["targets_crawled_later"],
        "results_without_question": stats["results_without_question"],
        "boilerplate_lines": len(boilerplate),
        "objects": len(out_objects),
        "objects_quote": sum(1 for o in out_objects if o.kind == "quote"),
        "reference_evidence_total": sum(len(t.reference_evidence) for t in tasks),
        "firsthand_total": sum(len(t.firsthand) for t in tasks),
        "firsthand_mean": round(sum(len(t.firsthand) for t in tasks) / n_tasks, 2) if n_tasks else 0.0,
        "reference_evidence_mean": (round(sum(len(t.reference_evidence) for t in tasks) / n_tasks, 2)
                                    if n_tasks else 0.0),
        "shared_targets": sum(c - 1 for c in target_uses.values() if c > 1),
        "bad_rows_skipped": len(bad) if bad else 0,
        "seconds": round(time.monotonic() - t0, 2),
    }


def convert(src_dir: str | Path, out_dir: str | Path, max_sentences: int = 40, threshold: float = 0.6,
            weeks: Iterable[Any] | None = None, boilerplate_min_articles: int = 5,
            on_bad_rows: str = "error") -> dict[str, Any]:
    """Convert the RealTime QA weeks in ``src_dir`` into a newsagent dataset folder ``out_dir``.
    ``on_bad_rows``: "error" raises on the first bad row; "skip" leaves bad rows out, writes them
    to ``out_dir/quarantine.parquet`` and counts them (``bad_rows_skipped``)."""
    check_mode(on_bad_rows)
    if max_sentences < 1:
        raise ValueError("max_sentences must be >= 1")
    if not 0.0 < threshold <= 1.0:
        raise ValueError("threshold must be in (0, 1]")
    t0 = time.monotonic()
    src = Path(src_dir)
    stats: dict[str, Any] = Counter()
    files = week_files(src, weeks)
    bad = Quarantine() if on_bad_rows == "skip" else None
    questions, articles = load(files, stats, bad)
    boilerplate = _boilerplate(articles, boilerplate_min_articles, max_sentences)
    objects = _database(articles, max_sentences)
    tasks, skipped, target_uses = _tasks(questions, articles, objects, max_sentences, threshold, stats)

    horizon = max((t.release_date for t in tasks), default=dt.date.min)
    out_objects = [HistoricalObject(o.object_id, o.date, o.text, o.kind, o.source)
                   for o in objects if o.date < horizon]
    write_dataset(out_dir, tasks, out_objects)
    write_quarantine_file(Path(out_dir) / "quarantine.parquet", bad.rows if bad else [])

    result = _stats(weeks=len(files), questions=len(questions), articles=articles, tasks=tasks, skipped=skipped,
                    stats=stats, boilerplate=boilerplate, out_objects=out_objects, target_uses=target_uses,
                    bad=bad, t0=t0)
    log.info("realtimeqa: %s -> %s: %s", src, out_dir, json.dumps(result, sort_keys=True))
    return result
