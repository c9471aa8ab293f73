"""Reading a RealTime QA dump (``YYYYMMDD_qa.jsonl.gz`` + ``YYYYMMDD_gcs.jsonl.gz`` per week): its
weekly file pairs, the checked fields of a qa row and of a gcs row, and step 1 of the newsagent
converter's specification (``engine.benchmarks.newsagent.realtimeqa``), which keeps one version (the
earliest usable crawl) of each article. Bad rows raise or go to the quarantine here.

Shared by the benchmarks that read these dumps (the newsagent converter; the livenews build's
articles, ``engine.benchmarks.livenews.build.articles``): a benchmark package may not import
another's. ``engine.benchmarks.newsagent.realtimeqa.dump`` re-exports it."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

from engine.errors import BadDataError, DataError
from engine.inputs.jsonl import UniqueIds, field_date, field_id, field_str, read_jsonl
from engine.inputs.quarantine import Quarantine, reject

MAX_ARTICLE_CHARS = 5_000_000      # characters of one search result's text or title

_WEEK_FILE = re.compile(r"^(\d{8})_qa\.jsonl(?:\.gz)?$")
_WS = re.compile(r"\s+")


def _one_line(text: str) -> str:
    """``text`` with each run of whitespace made one space, stripped (as the converter's text.py)."""
    return _WS.sub(" ", text).strip()


def _parse_date(path: Path, row: int, fld: str, raw: Any) -> dt.date:
    return field_date(path, row, fld, raw)


def _req_str(path: Path, row: int, obj: dict[str, Any], key: str, where: str = "") -> str:
    return field_str(path, row, obj, key, name=where + key, max_chars=MAX_ARTICLE_CHARS)


def _opt_str(path: Path, row: int, obj: dict[str, Any], key: str, where: str = "") -> str:
    return field_str(path, row, obj, key, required=False, strip=False, name=where + key, max_chars=MAX_ARTICLE_CHARS)


_SEARCH_TIME = re.compile(r"^(\d{4})[/-](\d{2})[/-](\d{2})(?:[/ T](\d{2}):(\d{2})(?::\d{2}(?:\.\d+)?)?)?$")


def _parse_search_time(path: Path, row: int, raw: Any) -> dt.datetime | None:
    """The crawl time of a gcs row (step 1); None when absent."""
    if raw is None or raw == "":
        return None
    m = _SEARCH_TIME.match(raw.strip()) if isinstance(raw, str) else None
    if m is None:
        raise BadDataError("bad_date", path, row, "search_time", f"expected YYYY/MM/DD/HH:MM, got {raw!r:.60}")
    try:
        y, mo, d, h, mi = (int(g) if g else 0 for g in m.groups())
        return dt.datetime(y, mo, d, h, mi)
    except ValueError as e:
        raise BadDataError("impossible_date", path, row, "search_time", f"no such time {raw!r:.60} ({e})") from None


@dataclass
class Article:
    """The version kept of one URL's article (step 1), and its cleaned paragraphs once step 2 ran."""

    url: str
    title: str
    date: dt.date | None
    text: str
    paragraphs: list[list[str]] = field(default_factory=list)
    crawled: dt.datetime | None = None   # search_time of the crawl this version comes from
    crawls: int = 1                      # search results seen for this URL

    def sentences(self, limit: int) -> list[str]:
        return list(chain.from_iterable(self.paragraphs))[:limit]

    def usable(self) -> bool:
        return self.date is not None and bool(self.text.strip())

    def better_than(self, other: Article) -> bool:
        """Step 1: the earliest usable crawl; then publish date, longest text, latest date, title."""
        if self.usable() != other.usable():
            return self.usable()
        if self.usable() and self.crawled != other.crawled:
            return other.crawled is None or (self.crawled is not None and self.crawled < other.crawled)

        def key(a: Article) -> tuple[Any, ...]:
            return (a.date is not None, len(a.text), a.date or dt.date.min, a.title)
        return key(self) > key(other)


@dataclass
class Question:
    """One question: its date, the URLs of its search results and its cutoff (step 1)."""

    qid: str
    date: dt.date
    urls: list[str] | None = None  # None: no search-results row
    crawled: dt.datetime | None = None  # its search_time: the cutoff for the crawls it may use


def week_files(src: Path, weeks: Iterable[Any] | None) -> list[tuple[str, Path, Path]]:
    """(week, qa file, gcs file) of each week in ``src`` (``weeks``: those only), in week order."""
    if not src.is_dir():
        raise BadDataError("missing_file", src, None, None, "source folder not found")

    def pick(week: str, kind: str) -> Path:
        for name in (f"{week}_{kind}.jsonl.gz", f"{week}_{kind}.jsonl"):
            if (src / name).exists():
                return src / name
        raise BadDataError("missing_file", src / f"{week}_{kind}.jsonl.gz", None, None, "file not found")

    if weeks is None:
        names = sorted({m.group(1) for p in src.iterdir() if (m := _WEEK_FILE.match(p.name))})
    else:
        names = []
        for w in weeks:
            s = w.strftime("%Y%m%d") if isinstance(w, dt.date) else re.sub(r"[^0-9]", "", str(w))
            if len(s) != 8:
                raise ValueError(f"week {w!r}: expected YYYYMMDD")
            names.append(s)
        names = sorted(set(names))
    return [(w, pick(w, "qa"), pick(w, "gcs")) for w in names]


def _gcs_row(path: Path, row: int, obj: dict[str, Any]) -> tuple[str, dt.datetime | None, list[Article]]:
    """(question id, search time, one article per search result) of a gcs row, all checked
    before any of it is used (a bad result rejects its whole row)."""
    qid = field_id(path, row, obj, "question_id")
    items = obj.get("search_result")
    if items is None:
        raise BadDataError("missing_field", path, row, "search_result", "missing")
    if not isinstance(items, list):
        raise BadDataError("wrong_type", path, row, "search_result", f"expected a list, got {type(items).__name__}")
    crawled = _parse_search_time(path, row, obj.get("search_time"))
    found = []
    for k, item in enumerate(items):
        where = f"search_result[{k}]."
        if not isinstance(item, dict):
            raise BadDataError("wrong_type", path, row, f"search_result[{k}]", "expected an object")
        url = _req_str(path, row, item, "url", where)
        raw_date = item.get("publish_date")
        date = None if raw_date in (None, "") else _parse_date(path, row, where + "publish_date", raw_date)
        found.append(Article(url, _one_line(_opt_str(path, row, item, "title", where)), date,
                              _opt_str(path, row, item, "text", where), crawled=crawled))
    return qid, crawled, found


def load(files: list[tuple[str, Path, Path]], stats: dict[str, Any], bad: Quarantine | None = None
          ) -> tuple[list[Question], dict[str, Article]]:
    """The questions of all weeks and the kept article of each URL (step 1); counts go to ``stats``."""
    questions: dict[str, Question] = {}
    where_q = UniqueIds()
    for _, qa_path, _ in files:
        for row, obj in read_jsonl(qa_path, bad):
            try:
                qid = field_id(qa_path, row, obj, "question_id")
                where_q.check(qid, qa_path, row, "question_id")
                date = _parse_date(qa_path, row, "question_date", obj.get("question_date"))
            except DataError as e:
                reject(bad, e, obj)
                continue
            where_q.add(qid, qa_path, row)
            questions[qid] = Question(qid, date)

    articles: dict[str, Article] = {}
    seen_gcs = UniqueIds()
    results = 0
    for _, _, gcs_path in files:
        for row, obj in read_jsonl(gcs_path, bad):
            try:
                qid, crawled, found = _gcs_row(gcs_path, row, obj)
                seen_gcs.check(qid, gcs_path, row, "question_id")
            except DataError as e:
                reject(bad, e, obj)
                continue
            seen_gcs.add(qid, gcs_path, row)
            urls: list[str] = []
            for art in found:
                url = art.url
                results += 1
                old = articles.get(url)
                if old is not None:
                    art.crawls = old.crawls + 1
                    if not art.better_than(old):
                        old.crawls = art.crawls
                        art = old
                articles[url] = art
                if url not in urls:
                    urls.append(url)
            q = questions.get(qid)
            if q is None:
                stats["results_without_question"] += 1
            else:
                q.urls = urls
                q.crawled = crawled
    stats["search_results"] = results
    return list(questions.values()), articles
