"""The build's intake (the paper's section 2.1 without the fetching): articles read from local
files (bad rows raise or are quarantined), kept when their outlet is allowed, and paired with an
event: from an event list by date window and MiniLM similarity, or grouped into events by date
and similarity when there is none. Deterministic, so the driver, a resume and the publish step
all see the same items; cached per process by the settings that decide it."""

from __future__ import annotations

import datetime as dt
import functools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.benchmarks.livenews.build.articles import Article, read_articles
from engine.benchmarks.livenews.build.config import LivenewsBuildConfig
from engine.benchmarks.livenews.build.events import (
    PAPER_OUTLETS,
    Event,
    allowed,
    assign_to_events,
    group_into_events,
    read_events,
)
from engine.config.values import stable_hash
from engine.errors import BadDataError
from engine.hosting.prepare_model import cache_dir
from engine.inputs import quarantine
from engine.inputs.paths import data_path
from indexes.embeddings import Embedder, EmbeddingCache, embed_with_cache


@dataclass(frozen=True)
class BuildItem:
    """One article with the event it was assigned to, as the generator sees it."""
    task_id: str
    url: str
    title: str
    text: str                 # cut to max_article_chars
    outlet: str
    publish_date: str
    event_id: str
    event_date: str
    event_summary: str
    knowledge_date: str


@dataclass
class Intake:
    items: list[BuildItem]
    articles: list[Article]                              # every article read (the release's pages)
    counts: Counter[str] = field(default_factory=Counter)  # intake reasons: read, quarantined, outlet_not_allowed...
    bad_rows: list[Any] = field(default_factory=list)


def embed_texts(texts: Sequence[str]) -> np.ndarray:
    """MiniLM vectors of ``texts`` (normalized), reusing the machine's embedding cache."""
    e = _embedder()
    return embed_with_cache(list(texts), e, EmbeddingCache(cache_dir() / "build-embeddings", e.model_name, e.dim))


@functools.cache
def _embedder() -> Embedder:
    return Embedder()


def _key(b: LivenewsBuildConfig) -> str:
    return stable_hash([b.articles, b.events, b.outlets, b.before_days, b.after_days, b.group_window_days,
                        b.group_threshold, b.knowledge_date, b.max_article_chars, b.on_bad_rows])


_CACHE: dict[str, Intake] = {}


def intake(b: LivenewsBuildConfig) -> Intake:
    """The items of build settings ``b`` (computed once per process; a later call inside a
    driver's quarantine block hands that block the bad rows again)."""
    key = _key(b)
    if key not in _CACHE:
        _CACHE[key] = _intake(b)
        return _CACHE[key]
    cached = _CACHE[key]
    with quarantine.skipping(b.on_bad_rows, "livenews build articles") as bad:
        if bad is not None:
            bad.rows.extend(r for r in cached.bad_rows if r not in bad.rows)
    return cached


def _intake(b: LivenewsBuildConfig) -> Intake:
    counts: Counter[str] = Counter()
    with quarantine.skipping(b.on_bad_rows, "livenews build articles") as bad:
        articles = read_articles([data_path(p) for p in b.articles], bad, counts=counts)
        events = read_events(data_path(b.events), bad) if b.events else None
    skipped = len(bad) if bad is not None else 0
    counts["read"] = len(articles) + counts.get("duplicate_url", 0)
    counts["quarantined"] = skipped
    if not articles:
        raise BadDataError("empty_file", data_path(b.articles[0]), None, None,
                           "no articles" + (f" left after skipping {skipped} bad rows" if skipped else ""))
    outlets = list(PAPER_OUTLETS) if b.outlets == ["paper"] else list(b.outlets)
    kept = [a for a in articles if allowed(a, outlets)]
    counts["outlet_not_allowed"] = len(articles) - len(kept)
    if events is not None:
        pairs = assign_to_events(kept, events, embed_texts, b.before_days, b.after_days, counts=counts)
    else:
        pairs = group_into_events(kept, embed_texts, b.group_window_days, b.group_threshold, counts=counts)
    first = min((e.date for _, e in pairs), default=dt.date.today())
    knowledge = b.knowledge_date or first.replace(day=1).isoformat()
    items = [_item(a, e, b.max_article_chars, knowledge) for a, e in pairs]
    counts["items"] = len(items)
    return Intake(items, articles, counts, list(bad.rows) if bad is not None else [])


def _item(a: Article, e: Event, max_chars: int, knowledge: str) -> BuildItem:
    return BuildItem(a.article_id, a.url, a.title, a.text[:max_chars], a.outlet, a.publish_date.isoformat(),
                     e.event_id, e.date.isoformat(), e.summary, knowledge)
