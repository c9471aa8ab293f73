"""livenews questions and their offline web, from two sources.

* LiveNewsBench JSON Lines: ``question``, ``answer``, ``event_date`` (YYYY-MM-DD) and either
  ``link`` (the source article) or ``second_level_domain``; the source domain is blocked.
* RealTimeQA dumps (``YYYYMMDD_qa.jsonl.gz`` + ``YYYYMMDD_gcs.jsonl.gz``): each question
  becomes a short-answer question whose gold answer is the correct choice's text (the
  multiple-choice form is kept), cut off at its question date; its search results become
  corpus pages, deduplicated by URL over the whole dump (first complete copy wins).

Every bad row raises a :class:`~engine.errors.BadDataError` naming file, row and field, or with
``benchmark.on_bad_rows=skip`` is skipped and quarantined (``docs/design/data.md``): ids unique
and safe as names, URLs absolute, dates full and real, texts non-blank and within
``MAX_QUESTION_CHARS`` / ``MAX_PAGE_CHARS``.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from engine.benchmarks.livenews.config import LivenewsBenchmarkConfig
from engine.errors import BadDataError
from engine.inputs import quarantine
from engine.inputs.jsonl import UniqueIds, field_date, field_id, field_str, read_parsed, read_unique
from engine.inputs.paths import data_path
from engine.inputs.quarantine import Quarantine
from indexes.web import WebPage, registered_domain

log = logging.getLogger(__name__)

# Characters of a question, an answer or a choice, and of one page's text.
MAX_QUESTION_CHARS = 100_000
MAX_PAGE_CHARS = 5_000_000


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


def _text(path: Path, row: int, obj: dict[str, Any], field: str, max_chars: int = MAX_QUESTION_CHARS) -> str:
    return field_str(path, row, obj, field, max_chars=max_chars)


def _url(path: Path, row: int, field: str, url: str) -> str:
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        raise BadDataError("bad_url", path, row, field, f"expected an absolute URL, got {url!r:.60}")
    return url


def _choices(path: Path, row: int, obj: dict[str, Any], required: bool) -> tuple[str, ...]:
    choices = obj.get("choices")
    if choices is None and not required:
        return ()
    if choices is None:
        raise BadDataError("missing_field", path, row, "choices", "missing")
    if not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
        raise BadDataError("wrong_type", path, row, "choices", "expected a list of strings")
    if required and not choices:
        raise BadDataError("empty_text", path, row, "choices", "expected a non-empty list")
    return tuple(choices)


def _livenewsbench_row(path: Path, row: int, obj: dict[str, Any]) -> LiveQuestion:
    qid = obj.get("id")
    if qid is None:
        qid = f"lnb-{row}"
    elif isinstance(qid, int) and not isinstance(qid, bool):
        qid = str(qid)
    else:
        qid = field_id(path, row, obj, "id")
    link, sld = obj.get("link"), obj.get("second_level_domain")
    if not link and not sld:
        raise BadDataError("missing_field", path, row, "link", "one of link or second_level_domain is required")
    if link:
        domain = registered_domain(_url(path, row, "link", field_str(path, row, obj, "link")))
    else:
        domain = field_str(path, row, obj, "second_level_domain").lower()
    return LiveQuestion(qid, _text(path, row, obj, "question"), _text(path, row, obj, "answer"),
                        _date(path, row, "event_date", obj.get("event_date")), domain,
                        _choices(path, row, obj, required=False))


def _qid(q: LiveQuestion) -> str:
    return q.question_id


def load_livenewsbench(path: str | Path, bad: Quarantine | None = None) -> list[LiveQuestion]:
    """LiveNewsBench questions; with ``bad``, bad rows are recorded there and skipped."""
    path = Path(path)
    return list(read_unique(path, bad, _livenewsbench_row, _qid, "id", UniqueIds("question id")))


def _realtimeqa_question(qa: Path, row: int, obj: dict[str, Any]) -> LiveQuestion:
    qid = field_id(qa, row, obj, "question_id")
    choices = _choices(qa, row, obj, required=True)
    answer = obj.get("answer")
    try:
        if not isinstance(answer, list):
            raise TypeError
        index = int(answer[0])
    except (TypeError, ValueError, IndexError):
        raise BadDataError("wrong_type" if answer is not None else "missing_field", qa, row, "answer",
                           f"expected [\"<index into choices>\"], got {answer!r:.40}") from None
    if not 0 <= index < len(choices):
        raise BadDataError("unknown_value", qa, row, "answer",
                           f"index {index} is not one of the {len(choices)} choices")
    url = field_str(qa, row, obj, "question_url", required=False)
    return LiveQuestion(qid, _text(qa, row, obj, "question_sentence"), choices[index].strip(),
                        _date(qa, row, "question_date", obj.get("question_date")),
                        registered_domain(_url(qa, row, "question_url", url)) if url else "", choices)


def _realtimeqa_pages(gcs: Path, row: int, obj: dict[str, Any]) -> list[WebPage]:
    results = obj.get("search_result")
    if results is None:
        raise BadDataError("missing_field", gcs, row, "search_result", "missing")
    if not isinstance(results, list):
        raise BadDataError("wrong_type", gcs, row, "search_result", f"expected a list, got {type(results).__name__}")
    out = []
    for k, r in enumerate(results):
        where = f"search_result[{k}]"
        if not isinstance(r, dict):
            raise BadDataError("wrong_type", gcs, row, where, f"expected an object, got {type(r).__name__}")
        url = _url(gcs, row, where + ".url", field_str(gcs, row, r, "url", name=where + ".url"))
        text = field_str(gcs, row, r, "text", required=False, strip=False, name=where + ".text",
                         max_chars=MAX_PAGE_CHARS)
        title = field_str(gcs, row, r, "title", required=False, name=where + ".title")
        raw_date = r.get("publish_date")
        date = _date(gcs, row, where + ".publish_date", raw_date) if raw_date not in (None, "") else None
        if text.strip():      # a result without text is unusable, not bad (the real dumps have a few)
            out.append(WebPage(url, title, text, date))
    return out


def load_realtimeqa(src: str | Path, bad: Quarantine | None = None) -> tuple[list[LiveQuestion], list[WebPage]]:
    """Questions and pages of a RealTimeQA dumps folder; with ``bad``, bad rows are recorded
    there and skipped (a bad gcs row drops all of its search results)."""
    src = Path(src)
    if not src.is_dir():
        raise BadDataError("missing_file", src, None, None, "dumps folder not found")
    questions: list[LiveQuestion] = []
    seen = UniqueIds("question id")          # over all weeks
    for qa in sorted(src.glob("*_qa.jsonl*")):
        questions += read_unique(qa, bad, _realtimeqa_question, _qid, "question_id", seen)
    pages: dict[str, WebPage] = {}
    for gcs in sorted(src.glob("*_gcs.jsonl*")):
        for _, found in read_parsed(gcs, bad, _realtimeqa_pages):
            for page in found:
                pages.setdefault(page.url, page)
    return questions, list(pages.values())


def _page(path: Path, row: int, obj: dict[str, Any]) -> WebPage:
    url = _url(path, row, "url", _text(path, row, obj, "url"))
    text = _text(path, row, obj, "text", MAX_PAGE_CHARS)
    raw_date = obj.get("publish_date")
    date = _date(path, row, "publish_date", raw_date) if raw_date not in (None, "") else None
    return WebPage(url, field_str(path, row, obj, "title", required=False), text, date)


def load_pages(path: str | Path, bad: Quarantine | None = None) -> list[WebPage]:
    """Pages JSON Lines: ``url``, ``text``, optional ``title`` and ``publish_date``; deduplicated by
    URL (the first row wins; later rows with the same URL are counted in the log). With ``bad``,
    bad rows are recorded there and skipped."""
    path = Path(path)
    pages: dict[str, WebPage] = {}
    repeated = 0
    for _, page in read_parsed(path, bad, _page):
        repeated += page.url in pages
        pages.setdefault(page.url, page)
    if repeated:
        log.info("%s: %d rows repeat an earlier URL (the first row of each URL is kept)", path, repeated)
    return list(pages.values())


def load(bench: LivenewsBenchmarkConfig, pages_only: bool = False) -> tuple[list[LiveQuestion], list[WebPage]]:
    """Questions (cut to ``bench.limit``) and pages for a ``LivenewsBenchmarkConfig``; bad rows
    raise or are skipped as its ``on_bad_rows`` says. No questions at all is an error."""
    source = bench.source
    with quarantine.skipping(bench.on_bad_rows, f"livenews {source} data") as bad:
        if source == "realtimeqa":
            where = data_path(bench.pages)
            questions, pages = load_realtimeqa(where, bad)
        elif source == "livenewsbench":
            pages = load_pages(data_path(bench.pages), bad)
            where = data_path(bench.questions)
            questions = [] if pages_only else load_livenewsbench(where, bad)
        else:
            raise ValueError(f"benchmark.source: unknown source {source!r}")
    if not questions and not (pages_only and source == "livenewsbench"):
        raise BadDataError("empty_file", where, None, None,
                           "no questions" + (f" left after skipping {len(bad)} bad rows" if bad else ""))
    if not pages:            # an empty web: every search would find nothing, silently
        raise BadDataError("empty_file", data_path(bench.pages), None, None,
                           "no pages: the offline web is empty" + (f" after skipping {len(bad)} bad rows" if bad else ""))
    limit = bench.limit
    return (questions[:limit] if limit is not None else questions), pages
