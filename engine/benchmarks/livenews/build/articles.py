"""The build's articles: dated news articles read from local files, nothing fetched (the input of
the paper's section 2.1, after its retrieval and extraction steps).

Two forms:

* JSON Lines, one article a line: ``url`` (absolute), ``title``, ``text``, ``publish_date``
  (YYYY-MM-DD) and an optional ``outlet``. Other fields are ignored.
* A folder of RealTime QA dumps (``YYYYMMDD_qa.jsonl.gz`` + ``YYYYMMDD_gcs.jsonl.gz``), read by the
  shared dump reader :mod:`engine.inputs.realtimeqa`: each search result is an article, and of a
  URL seen in several weeks the dump's earliest usable crawl is kept.

Every bad row raises a :class:`~engine.errors.BadDataError` naming file, row and field, or, with a
:class:`~engine.inputs.quarantine.Quarantine`, is recorded there and skipped. A dump's result without
text, without a publish date, or over ``max_chars`` is not a bad row (the format allows them): it
is dropped and counted (``no_text``, ``no_publish_date``, ``too_long``). Undated results are dropped
rather than dated by their week: the date decides the event window, the split and the question's
freshness, and an undated page is often an old one (a profile, a topic page). A URL read twice
keeps its first complete copy; later copies are counted (``duplicate_url``). The counts go to the
caller's ``counts`` Counter.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from engine.errors import BadDataError
from engine.inputs import jsonl
from engine.inputs.jsonl import field_date, field_str, read_parsed
from engine.inputs.quarantine import Quarantine, reject
from engine.inputs.realtimeqa import load, week_files
from indexes.web import registered_domain

# Characters of one article's text (a news article is a few thousand; a million is not an article).
MAX_ARTICLE_CHARS = 1_000_000
# Characters of a title or an outlet.
MAX_TITLE_CHARS = 2_000
ID_CHARS = 16                      # hex digits of an article id

_DUMP_FILE = re.compile(r"^(\d{8})_(?:qa|gcs)\.jsonl(?:\.gz)?$")


@dataclass(frozen=True)
class Article:
    """One dated article. ``source`` and ``row``: the file and 1-based line it was read from (for a
    dump: the gcs file and line where its URL first appears)."""

    article_id: str
    url: str
    title: str
    text: str
    publish_date: dt.date
    outlet: str
    source: str
    row: int


def article_id(url: str) -> str:
    """A stable id: the first :data:`ID_CHARS` hex digits of the URL's sha256."""
    return hashlib.sha256(url.encode("utf-8", "surrogatepass")).hexdigest()[:ID_CHARS]


def is_absolute_url(url: str) -> bool:
    parts = urlsplit(url)
    return bool(parts.scheme) and bool(parts.netloc)


def _counter(counts: Counter[str] | None) -> Counter[str]:
    return Counter() if counts is None else counts


def _parse_row(max_chars: int) -> Callable[[Path, int, dict[str, Any]], Article]:
    def parse(path: Path, row: int, obj: dict[str, Any]) -> Article:
        url = field_str(path, row, obj, "url", max_chars=MAX_TITLE_CHARS)
        if not is_absolute_url(url):
            raise BadDataError("bad_url", path, row, "url", f"expected an absolute URL, got {url!r:.60}")
        title = field_str(path, row, obj, "title", max_chars=MAX_TITLE_CHARS)
        text = field_str(path, row, obj, "text", max_chars=max_chars)
        date = field_date(path, row, "publish_date", obj.get("publish_date"))
        outlet = field_str(path, row, obj, "outlet", required=False, max_chars=MAX_TITLE_CHARS)
        return Article(article_id(url), url, title, text, date, outlet or registered_domain(url),
                       str(path), row)
    return parse


def first_per_url(articles: Iterable[Article], counts: Counter[str] | None = None) -> list[Article]:
    """The first article of each URL, in the given order; the others are counted as ``duplicate_url``."""
    counts = _counter(counts)
    seen: dict[str, Article] = {}
    for a in articles:
        if a.url in seen:
            counts["duplicate_url"] += 1
        else:
            seen[a.url] = a
    return list(seen.values())


def read_jsonl(path: str | Path, bad: Quarantine | None = None, *, counts: Counter[str] | None = None,
               max_chars: int = MAX_ARTICLE_CHARS) -> list[Article]:
    """The articles of a JSON Lines file (plain or ``.gz``), in file order, one per URL."""
    rows = read_parsed(Path(path), bad, _parse_row(max_chars))
    return first_per_url((a for _, a in rows), counts)


def _first_rows(gcs_files: Sequence[Path], wanted: set[str], skipped: set[tuple[str, int | None]]
                ) -> dict[str, tuple[Path, int, int]]:
    """(gcs file, line, index in its search results) where each wanted URL first appears, over
    the rows the dump reader kept (``skipped``: the (file, row) it quarantined)."""
    where: dict[str, tuple[Path, int, int]] = {}
    for gcs in gcs_files:
        for row, obj in jsonl.read_jsonl(gcs, Quarantine()):      # bad lines: already raised or recorded
            results = obj.get("search_result")
            if (str(gcs), row) in skipped or not isinstance(results, list):
                continue
            for k, r in enumerate(results):
                url = r.get("url") if isinstance(r, dict) else None
                if isinstance(url, str) and url in wanted and url not in where:
                    where[url] = (gcs, row, k)
    return where


def _dump_weeks(folder: Path) -> list[str]:
    return sorted({m.group(1) for p in folder.iterdir() if (m := _DUMP_FILE.match(p.name))})


def read_realtimeqa(folder: str | Path, bad: Quarantine | None = None, *, counts: Counter[str] | None = None,
                    max_chars: int = MAX_ARTICLE_CHARS) -> list[Article]:
    """The articles of a folder of RealTime QA dumps (every week needs its qa and gcs file): each
    URL once, in the order the dump first lists them. Results without text or publish date, or over
    ``max_chars``, are dropped and counted; a result whose URL is not absolute is a bad row."""
    folder, counts = Path(folder), _counter(counts)
    if not folder.is_dir():
        raise BadDataError("missing_file", folder, None, None, "dumps folder not found")
    files = week_files(folder, _dump_weeks(folder))
    before = len(bad) if bad is not None else 0
    _, found = load(files, Counter(), bad)
    skipped = {(r.file, r.row) for r in bad.rows[before:]} if bad is not None else set()
    where = _first_rows([gcs for _, _, gcs in files], set(found), skipped)
    out: list[Article] = []
    for url, art in sorted(found.items(), key=lambda kv: where[kv[0]][:2]):
        gcs, row, k = where[url]
        text = art.text.strip()
        reason = ("no_text" if not text else "no_publish_date" if art.date is None else
                  "too_long" if len(text) > max_chars else "")
        if reason:
            counts[reason] += 1
        elif not is_absolute_url(url):
            reject(bad, BadDataError("bad_url", gcs, row, f"search_result[{k}].url",
                                     f"expected an absolute URL, got {url!r:.60}"))
        elif art.date is not None:
            out.append(Article(article_id(url), url, art.title, text, art.date, registered_domain(url),
                               str(gcs), row))
    return out


def _is_dump_folder(folder: Path) -> bool:
    return bool(_dump_weeks(folder))


def _jsonl_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith((".jsonl", ".jsonl.gz")))


def read_articles(paths: Sequence[str | Path], bad: Quarantine | None = None, *,
                  counts: Counter[str] | None = None, max_chars: int = MAX_ARTICLE_CHARS) -> list[Article]:
    """The articles of each path: a JSON Lines file (``.jsonl``, ``.jsonl.gz``), a folder of them
    (not recursive), or a folder of RealTime QA dumps. A URL read twice keeps its first copy (in
    the order of ``paths``); the result is sorted by (publish date, URL)."""
    counts = _counter(counts)
    found: list[Article] = []
    for p in map(Path, paths):
        if p.is_file():
            if not p.name.endswith((".jsonl", ".jsonl.gz")):
                raise BadDataError("unsupported_file", p, None, None,
                                   "expected a .jsonl or .jsonl.gz file of articles, or a folder")
            found += read_jsonl(p, bad, counts=counts, max_chars=max_chars)
        elif p.is_dir() and _is_dump_folder(p):
            found += read_realtimeqa(p, bad, counts=counts, max_chars=max_chars)
        elif p.is_dir():
            files = _jsonl_files(p)
            if not files:
                raise BadDataError("empty_file", p, None, None,
                                   "no .jsonl or .jsonl.gz files and no RealTime QA dumps in this folder")
            for f in files:
                found += read_jsonl(f, bad, counts=counts, max_chars=max_chars)
        else:
            raise BadDataError("missing_file", p, None, None, "articles file or folder not found")
    return sorted(first_per_url(found, counts), key=lambda a: (a.publish_date, a.url))
