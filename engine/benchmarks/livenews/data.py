"""livenews questions and their offline web, from two sources.

* LiveNewsBench JSON Lines: ``question``, ``answer``, ``event_date`` (YYYY-MM-DD) and either
  ``link`` (the source article) or ``second_level_domain``; the source domain is blocked.
* RealTimeQA dumps (``YYYYMMDD_qa.jsonl.gz`` + ``YYYYMMDD_gcs.jsonl.gz``): each question
  becomes a short-answer question whose gold answer is the correct choice's text (the
  multiple-choice form is kept), cut off at its question date; its search results become
  corpus pages, deduplicated by URL over the whole dump (first complete copy wins).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from engine.errors import DataError
from engine.jsonl import field_date, field_str, read_jsonl
from indexes.web import WebPage, registered_domain


@dataclass(frozen=True)
class LiveQuestion:
    question_id: str
    question: str
    answer: str
    event_date: dt.date
    source_domain: str = ""
    choices: tuple[str, ...] = ()


def _date(path: Path, row: int, field: str, raw: object) -> dt.date:
    return field_date(path, row, field, raw)


def _text(path: Path, row: int, obj: dict, field: str) -> str:
    return field_str(path, row, obj, field)


def load_livenewsbench(path: str | Path) -> list[LiveQuestion]:
    path = Path(path)
    out = []
    for row, obj in read_jsonl(path):
        link, sld = obj.get("link"), obj.get("second_level_domain")
        if not link and not sld:
            raise DataError(path, row, "link", "one of link or second_level_domain is required")
        domain = registered_domain(str(link)) if link else str(sld).lower()
        choices = obj.get("choices") or []
        if not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
            raise DataError(path, row, "choices", "expected a list of strings")
        out.append(LiveQuestion(str(obj.get("id", f"lnb-{row}")), _text(path, row, obj, "question"),
                                _text(path, row, obj, "answer"),
                                _date(path, row, "event_date", _text(path, row, obj, "event_date")), domain,
                                tuple(choices)))
    return out


def load_realtimeqa(src: str | Path) -> tuple[list[LiveQuestion], list[WebPage]]:
    src = Path(src)
    questions: list[LiveQuestion] = []
    for qa in sorted(src.glob("*_qa.jsonl*")):
        for row, obj in read_jsonl(qa):
            choices = obj.get("choices")
            if not isinstance(choices, list) or not choices:
                raise DataError(qa, row, "choices", "expected a non-empty list")
            answer = obj.get("answer")
            try:
                gold = choices[int(answer[0])]
            except (TypeError, ValueError, IndexError, KeyError):
                raise DataError(qa, row, "answer", f"expected [\"<index into choices>\"], got {answer!r:.40}") from None
            url = obj.get("question_url") or ""
            questions.append(LiveQuestion(_text(qa, row, obj, "question_id"), _text(qa, row, obj, "question_sentence"),
                                          str(gold).strip(), _date(qa, row, "question_date", obj.get("question_date")),
                                          registered_domain(url) if url else "", tuple(map(str, choices))))
    pages: dict[str, WebPage] = {}
    for gcs in sorted(src.glob("*_gcs.jsonl*")):
        for row, obj in read_jsonl(gcs):
            results = obj.get("search_result")
            if not isinstance(results, list):
                raise DataError(gcs, row, "search_result", "expected a list")
            for r in results:
                url, text = r.get("url"), r.get("text")
                if not url or not text or url in pages:
                    continue
                date = _date(gcs, row, "search_result.publish_date", r["publish_date"]) if r.get("publish_date") else None
                pages[url] = WebPage(url, str(r.get("title") or ""), text, date)
    return questions, list(pages.values())


def load_pages(path: str | Path) -> list[WebPage]:
    """Pages JSON Lines: ``url``, ``text``, optional ``title`` and ``publish_date``; deduplicated by
    URL (the first row wins; a later row with the same URL is counted, not silently merged)."""
    path = Path(path)
    pages: dict[str, WebPage] = {}
    for row, obj in read_jsonl(path):
        url = _text(path, row, obj, "url")
        if "://" not in url:
            raise DataError(path, row, "url", f"expected an absolute URL, got {url!r:.60}")
        text = _text(path, row, obj, "text")
        date = _date(path, row, "publish_date", obj["publish_date"]) if obj.get("publish_date") else None
        title = obj.get("title") or ""
        if not isinstance(title, str):
            raise DataError(path, row, "title", f"expected a string, got {title!r:.40}")
        pages.setdefault(url, WebPage(url, title.strip(), text, date))
    return list(pages.values())


REPO_ROOT = Path(__file__).resolve().parents[3]


def _path(p: str) -> Path:
    q = Path(p)
    return q if q.is_absolute() else REPO_ROOT / q


def load(bench: object, pages_only: bool = False) -> tuple[list[LiveQuestion], list[WebPage]]:
    """Questions (cut to ``bench.limit``) and pages for a ``LivenewsBenchmarkConfig``."""
    source = getattr(bench, "source")
    if source == "realtimeqa":
        questions, pages = load_realtimeqa(_path(getattr(bench, "pages")))
    elif source == "livenewsbench":
        pages = load_pages(_path(getattr(bench, "pages")))
        questions = [] if pages_only else load_livenewsbench(_path(getattr(bench, "questions")))
    else:
        raise ValueError(f"benchmark.source: unknown source {source!r}")
    seen: dict[str, int] = {}
    for i, q in enumerate(questions):
        if q.question_id in seen:
            raise DataError(getattr(bench, "questions") if source == "livenewsbench" else getattr(bench, "pages"),
                            i + 1, "id", f"duplicate question id {q.question_id!r} (first at {seen[q.question_id] + 1})")
        seen[q.question_id] = i
    limit = getattr(bench, "limit")
    return (questions[:limit] if limit is not None else questions), pages
