"""The build's events and which article belongs to which (the paper's section 2.1).

The paper starts from the Wikipedia Current Events Archive: one event per summary, and for each
event the articles of an outlet allowlist (its Figure 4: :data:`PAPER_OUTLETS`) published in a
14-day window around the event date, 3 days before to 11 after. Here nothing is searched: the
articles are given, and each joins the event whose window holds its publish date and whose summary
is most like it (:func:`assign_to_events`). Without an event list, articles are grouped into events
by date and similarity (:func:`group_into_events`).

Similarity is the cosine of vectors from an injected ``embed(texts)`` (MiniLM in a build); an
article is embedded as its title and the first :data:`ARTICLE_CHARS` characters of its text.
Everything is deterministic: ties go to the earlier event (by date, then id) or group.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from engine.benchmarks.livenews.build.articles import Article
from engine.benchmarks.livenews.build.dedupe import unit_rows
from engine.inputs.jsonl import UniqueIds, field_date, field_id, field_str, read_parsed
from engine.inputs.quarantine import Quarantine

# Normalized vectors of ``texts``, one row each (indexes.embeddings.Embedder.encode is one).
Embed = Callable[[Sequence[str]], np.ndarray]

MAX_SUMMARY_CHARS = 20_000
ARTICLE_CHARS = 300          # characters of an article's text embedded after its title
BLOCK = 1024                 # articles per block of the similarity matrix


@dataclass(frozen=True)
class Event:
    event_id: str
    date: dt.date
    summary: str


def event_id(date: dt.date, summary: str) -> str:
    """The id of an event given without one: a short sha256 of its date and summary."""
    return "ev-" + hashlib.sha256(f"{date.isoformat()}\n{summary}".encode("utf-8", "surrogatepass")).hexdigest()[:16]


def read_events(path: str | Path, bad: Quarantine | None = None) -> list[Event]:
    """Events from JSON Lines in the form of the Wikipedia Current Events Archive: ``date``
    (YYYY-MM-DD), ``summary`` and an optional ``id`` (else :func:`event_id`); other fields are
    ignored. A bad row, or an event whose id (or date and summary) an earlier row has, raises a
    BadDataError naming file, row and field, or with ``bad`` is recorded there and skipped."""
    seen = UniqueIds("event")

    def parse(p: Path, row: int, obj: dict[str, Any]) -> Event:
        date = field_date(p, row, "date", obj.get("date"))
        summary = field_str(p, row, obj, "summary", max_chars=MAX_SUMMARY_CHARS)
        given = obj.get("id") is not None
        eid = field_id(p, row, obj, "id") if given else event_id(date, summary)
        seen.check(eid, p, row, "id" if given else "summary")
        seen.add(eid, p, row)
        return Event(eid, date, summary)

    return [e for _, e in read_parsed(Path(path), bad, parse)]


def article_text(a: Article) -> str:
    """What is embedded of an article: its title and the start of its text."""
    start = a.text[:ARTICLE_CHARS]
    return f"{a.title}\n{start}" if a.title else start


def unit_vectors(embed: Embed, texts: Sequence[str]) -> np.ndarray:
    """``embed(texts)`` as float64 rows of length one (a zero row stays zero); checks the shape."""
    return unit_rows(embed(list(texts)), len(texts))


def _counter(counts: Counter[str] | None) -> Counter[str]:
    return Counter() if counts is None else counts


def assign_to_events(articles: Sequence[Article], events: Sequence[Event], embed: Embed,
                     before_days: int = 3, after_days: int = 11, *,
                     counts: Counter[str] | None = None) -> list[tuple[Article, Event]]:
    """Each article with the event whose window (``before_days`` before its date to ``after_days``
    after) holds the article's publish date and whose summary is most similar, in the order of
    ``articles``. An article in no window is dropped (counted as ``outside_event_window``; the
    others as ``assigned``). Only articles in some window, and events with some article, are embedded."""
    if before_days < 0 or after_days < 0:
        raise ValueError(f"the event window must not be negative: before_days={before_days}, after_days={after_days}")
    counts = _counter(counts)
    evs = sorted(events, key=lambda e: (e.date, e.event_id))
    ev_day = np.array([e.date.toordinal() for e in evs], dtype=np.int64)
    a_day = np.array([a.publish_date.toordinal() for a in articles], dtype=np.int64)
    # the events in an article's window are those dated day - after .. day + before: a slice of evs
    lo = np.searchsorted(ev_day, a_day - after_days, side="left")
    hi = np.searchsorted(ev_day, a_day + before_days, side="right")
    inside = np.flatnonzero(hi > lo)
    counts["outside_event_window"] += len(articles) - len(inside)
    if not len(inside):
        return []
    edges = np.zeros(len(evs) + 1, dtype=np.int64)          # +1 where a window starts, -1 after it ends
    np.add.at(edges, lo[inside], 1)
    np.add.at(edges, hi[inside], -1)
    used = np.flatnonzero(np.cumsum(edges)[:-1] > 0)
    picked = unit_vectors(embed, [evs[j].summary for j in used])
    ev_vec = np.zeros((len(evs), picked.shape[1]))
    ev_vec[used] = picked
    out: list[tuple[Article, Event]] = []
    for start in range(0, len(inside), BLOCK):
        block = inside[start:start + BLOCK]
        vecs = unit_vectors(embed, [article_text(articles[i]) for i in block])
        sims = vecs @ ev_vec.T
        cols = np.arange(len(evs))
        in_window = (cols >= lo[block, None]) & (cols < hi[block, None])
        best = np.argmax(np.where(in_window, sims, -np.inf), axis=1)     # the first of equals: the earlier event
        out += [(articles[i], evs[int(j)]) for i, j in zip(block, best)]
    counts["assigned"] += len(out)
    return out


def group_id(first: Article) -> str:
    """The id of an event grouped around ``first`` (its earliest article): a short hash of its URL."""
    return "grp-" + hashlib.sha256(first.url.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def group_into_events(articles: Sequence[Article], embed: Embed, window_days: int, threshold: float, *,
                      counts: Counter[str] | None = None) -> list[tuple[Article, Event]]:
    """Articles grouped into events when there is no event list. In (publish date, URL) order each
    article joins the most similar group whose first article is at most ``window_days`` older and
    whose centroid (the normalized sum of its members) has a cosine of at least ``threshold`` with
    it; else it starts a group. An event's date is its first (earliest) article's, its summary that
    article's title (or the start of its text), its id :func:`group_id`. Pairs in (date, URL) order;
    ``counts`` gets ``assigned`` and ``groups``."""
    if window_days < 0:
        raise ValueError(f"window_days must not be negative, got {window_days}")
    counts = _counter(counts)
    order = sorted(articles, key=lambda a: (a.publish_date, a.url))
    vecs = unit_vectors(embed, [article_text(a) for a in order]) if order else np.zeros((0, 1))
    sums = np.zeros((0, vecs.shape[1]))          # the open groups' summed vectors
    first_day: list[int] = []                    # ... their first article's day
    open_events: list[Event] = []
    out: list[tuple[Article, Event]] = []
    for a, v in zip(order, vecs):
        day = a.publish_date.toordinal()
        keep = [k for k, d in enumerate(first_day) if day - d <= window_days]   # the rest can never reopen
        if len(keep) < len(first_day):
            sums, first_day, open_events = sums[keep], [first_day[k] for k in keep], [open_events[k] for k in keep]
        norms = np.linalg.norm(sums, axis=1)
        sims = np.divide(sums @ v, norms, out=np.zeros(len(norms)), where=norms > 0)
        k = int(np.argmax(sims)) if len(sims) else -1
        if k >= 0 and sims[k] >= threshold:
            sums[k] += v
            out.append((a, open_events[k]))
            continue
        event = Event(group_id(a), a.publish_date, a.title or a.text[:200].strip())
        sums = np.vstack([sums, v[None, :]])
        first_day.append(day)
        open_events.append(event)
        out.append((a, event))
        counts["groups"] += 1
    counts["assigned"] += len(out)
    return out


# The paper's Figure 4, as printed, with the text extraction's typos mended: washingtonpost.com
# (printed washingtontpost), washingtonexaminer.com (washingtontexaminer), justthenews.com
# (justthene.ws.com), newsmax.com (newmax), themoscowtimes.com (themocowtimes), telegraphindia.com
# (telephragindia); time.com/* is time.com. An entry with a path allows that section only.
PAPER_OUTLETS: tuple[str, ...] = (
    "alternet.org", "apnews.com", "theatlantic.com", "thedailybeast.com", "democracynow.org", "huffpost.com",
    "theintercept.com", "jacobin.com", "motherjones.com", "msnbc.com", "thenation.com", "nytimes.com",
    "newyorker.com", "slate.com", "vox.com", "abcnews.go.com", "axios.com", "bloomberg.com", "cbsnews.com",
    "cnn.com", "insider.com", "nbcnews.com", "npr.org", "politico.com", "propublica.org", "semafor.com",
    "time.com", "usatoday.com", "washingtonpost.com", "csmonitor.com", "cnbc.com", "forbes.com",
    "newsnationnow.com", "newsweek.com", "reason.com", "reuters.com", "wsj.com", "thedispatch.com",
    "theepochtimes.com", "foxbusiness.com", "thefp.com", "justthenews.com", "nationalreview.com", "nypost.com",
    "upward.news", "washingtonexaminer.com", "washingtontimes.com", "theamericanconservative.com",
    "spectator.org", "theblaze.com", "breitbart.com", "cbn.com", "dailycaller.com", "dailymail.co.uk",
    "dailywire.com", "foxnews.com", "thefederalist.com", "ijr.com", "newsmax.com", "oann.com",
    "thepostmillennial.com", "freebeacon.com", "bbc.com", "theguardian.com", "independent.co.uk", "ft.com",
    "telegraph.co.uk", "dw.com", "thelocal.de", "spiegel.de/international/", "france24.com", "thelocal.fr",
    "lemonde.fr/en/", "euronews.com", "ukrinform.net", "kyivindependent.com", "kyivpost.com", "rt.com",
    "sputniknews.com", "themoscowtimes.com", "chinadaily.com.cn", "globaltimes.cn", "scmp.com",
    "japantimes.co.jp", "asia.nikkei.com", "timesofindia.indiatimes.com", "thehindu.com",
    "economictimes.indiatimes.com", "telegraphindia.com", "indianexpress.com", "aljazeera.com", "haaretz.com",
    "timesofisrael.com", "jpost.com", "mexiconewsdaily.com",
)


def _entry(entry: str) -> tuple[str, str]:
    """(host, path prefix) of an allowlist entry: ``.spiegel.de/international/`` ->
    (``spiegel.de``, ``/international/``); a scheme, a leading dot and ``www.`` are dropped."""
    e = entry.strip().lower()
    e = e.split("://", 1)[1] if "://" in e else e
    host, slash, path = e.lstrip(".").partition("/")
    host = host.removeprefix("www.")
    return host, (slash + path if path.strip("/*") else "")


def _on_host(host: str, allowed_host: str) -> bool:
    return host == allowed_host or host.endswith("." + allowed_host)


def allowed(article: Article, allowlist: Sequence[str]) -> bool:
    """Whether the article's outlet is on ``allowlist`` (empty: every outlet is). An entry is a
    domain (``bbc.com`` allows ``www.bbc.com`` and ``news.bbc.com``), optionally with a path
    (``spiegel.de/international/``: that section only). The URL's host is checked, and, for an
    entry without a path, the article's ``outlet`` too (an archived copy's URL is the archive's)."""
    if not allowlist:
        return True
    parts = urlsplit(article.url)
    host = (parts.hostname or "").lower()
    outlet = article.outlet.strip().lower().removeprefix("www.")
    for entry in allowlist:
        h, path = _entry(entry)
        if not h:
            continue
        if _on_host(host, h) and parts.path.lower().startswith(path):
            return True
        if not path and _on_host(outlet, h):
            return True
    return False
