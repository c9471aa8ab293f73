"""An offline, dated web: the search engine and page store behind livenews's Search and Visit.

Search returns the top results as title / URL / snippet, ranked by BM25 (``indexes.bm25``):
questions about fresh news are mostly names, places and numbers, where exact term matching is
strong and needs no embedding pass over every page. Results can exclude blocked domains (the
source article's domain and web archives) and keep a publish-date window. Visit returns a
page's text cut to a token budget, and only for URLs an earlier search returned and that are
not blocked; the agent pays budget for a refused visit all the same (the caller counts).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import numpy as np

from indexes.bm25 import BM25Index, tokenize

ARCHIVE_DOMAINS = frozenset({"archive.org", "archive.today", "archive.ph", "archive.is", "archive.li",
                             "archive.vn", "archive.md", "archive.fo"})
# Public suffixes with two labels that are common in news URLs (bbc.co.uk, abc.net.au, ...).
_TWO_LABEL_SUFFIXES = frozenset({"co.uk", "org.uk", "ac.uk", "gov.uk", "com.au", "net.au", "org.au", "co.nz",
                                 "co.jp", "co.in", "com.br", "co.za", "com.sg", "com.hk", "com.cn"})


def registered_domain(url_or_host: str) -> str:
    """``https://www.bbc.co.uk/news/x`` -> ``bbc.co.uk``; ``edition.cnn.com`` -> ``cnn.com``."""
    host = urlsplit(url_or_host).hostname if "://" in url_or_host else url_or_host
    labels = (host or "").lower().strip(".").split(".")
    if len(labels) >= 3 and ".".join(labels[-2:]) in _TWO_LABEL_SUFFIXES:
        return ".".join(labels[-3:])
    return ".".join(labels[-2:])


@dataclass(frozen=True)
class WebPage:
    url: str
    title: str
    text: str
    date: dt.date | None = None

    @property
    def domain(self) -> str:
        return registered_domain(self.url)


@dataclass(frozen=True)
class SearchResult:
    title: str
    url: str
    snippet: str
    date: dt.date | None


class VisitRefused(Exception):
    """A visit the environment refuses (never returned by a search, or blocked)."""


_SPLIT = re.compile(r"[^a-z0-9]+")


def _split(token: str) -> list[str]:
    return _SPLIT.split(token.lower())


def snippet(text: str, query: str, words: int = 40) -> str:
    """The window of ``words`` words holding the most query terms (first such window)."""
    tokens = text.split()
    if len(tokens) <= words:
        return " ".join(tokens)
    terms = set(tokenize(query))
    hits = np.fromiter((any(p in terms for p in _split(t)) for t in tokens), dtype=np.int32, count=len(tokens))
    window = np.convolve(hits, np.ones(words, dtype=np.int32), mode="valid")
    start = int(np.argmax(window))
    out = " ".join(tokens[start: start + words])
    return ("... " if start else "") + out + (" ..." if start + words < len(tokens) else "")


def blocked_domains(blocked: Iterable[str]) -> set[str]:
    """Blocklist entries (hosts or URLs) as registered domains, the form pages are matched on."""
    return {registered_domain(b) for b in blocked}


class OfflineWeb:
    def __init__(self, pages: Iterable[WebPage]) -> None:
        by_url: dict[str, WebPage] = {}
        for p in pages:                       # the first page for a URL wins (corpora are deduped upstream)
            by_url.setdefault(p.url, p)
        self.pages = list(by_url.values())
        self.by_url = by_url
        self.index = BM25Index([f"{p.title}\n{p.text}" for p in self.pages])
        codes: dict[str, int] = {}
        self.domain_codes = np.array([codes.setdefault(p.domain, len(codes)) for p in self.pages], dtype=np.int32)
        self._codes = codes
        self.days = np.array([p.date.toordinal() if p.date else -1 for p in self.pages], dtype=np.int64)

    def allowed(self, blocked: Iterable[str] = (), after: dt.date | None = None,
                before: dt.date | None = None) -> np.ndarray:
        """Mask of searchable pages: domain not blocked; with a window, dated inside it
        (``after`` inclusive, ``before`` exclusive); undated pages are excluded when a window is set."""
        blocked_set = blocked_domains(blocked)
        blocked_codes = [self._codes[d] for d in blocked_set if d in self._codes]
        mask = (~np.isin(self.domain_codes, blocked_codes) if blocked_codes
                else np.ones(len(self.pages), bool))
        if after is not None or before is not None:
            mask &= self.days >= 0
            if after is not None:
                mask &= self.days >= after.toordinal()
            if before is not None:
                mask &= self.days < before.toordinal()
        return mask

    def search(self, query: str, k: int = 10, blocked: Sequence[str] = (), after: dt.date | None = None,
               before: dt.date | None = None) -> list[SearchResult]:
        hits = self.index.search(query, k, self.allowed(blocked, after, before))
        return [SearchResult(self.pages[h.doc].title, self.pages[h.doc].url,
                             snippet(self.pages[h.doc].text, query), self.pages[h.doc].date) for h in hits]

    def visit(self, url: str, returned: Iterable[str], blocked: Sequence[str] = (), max_tokens: int = 8000) -> str:
        """The page's title, URL and text, cut to ``max_tokens`` whitespace tokens."""
        url = url.strip()
        if url not in set(returned):
            raise VisitRefused(f"{url} was not returned by an earlier search")
        if registered_domain(url) in blocked_domains(blocked):
            raise VisitRefused(f"{url} is on a blocked domain")
        page = self.by_url[url]
        tokens = re.split(r"(\s+)", page.text)
        words = tokens[::2]
        text = page.text if len(words) <= max_tokens else "".join(tokens[: 2 * max_tokens - 1]) + " [truncated]"
        return f"Title: {page.title}\nURL: {page.url}\n\n{text}"
