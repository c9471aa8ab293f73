"""Events and the article-event assignment (engine.benchmarks.livenews.build.events): the event list
read with named bad rows, the paper's 3-before/11-after window, the most similar event, grouping
without an event list, the outlet allowlist. A keyword embedder stands in for MiniLM, except in the
one slow test that uses the real one."""

from __future__ import annotations

import datetime as dt
import json
import random
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.benchmarks.livenews.build.articles import Article, article_id
from engine.benchmarks.livenews.build.events import (
    ARTICLE_CHARS,
    PAPER_OUTLETS,
    Event,
    allowed,
    article_text,
    assign_to_events,
    event_id,
    group_id,
    group_into_events,
    read_events,
)
from engine.errors import BadDataError
from engine.inputs.quarantine import Quarantine

TOPICS = ("earthquake", "election", "bridge", "vaccine", "storm")


class KeywordEmbed:
    """A vector of topic-word counts (an extra axis for none); records what it embedded."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        self.seen += texts
        rows = [[t.lower().count(w) for w in TOPICS] + [0 if any(w in t.lower() for w in TOPICS) else 1]
                for t in texts]
        return np.array(rows, dtype=np.float32).reshape(len(texts), len(TOPICS) + 1)


def d(s: str) -> dt.date:
    return dt.date.fromisoformat(s)


def article(url: str, date: str, title: str, text: str = "Some text.", outlet: str = "") -> Article:
    return Article(article_id(url), url, title, text, d(date), outlet or url.split("/")[2], "a.jsonl", 1)


def write(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


# -- read_events ---------------------------------------------------------------------------------

def test_read_events_with_and_without_ids(tmp_path: Path) -> None:
    f = write(tmp_path / "ev.jsonl", [
        {"date": "2025-07-10", "summary": "An earthquake strikes.", "category": "Disasters"},
        {"id": "e2", "date": "2025-07-11", "summary": "An election is held."}])
    a, b = read_events(f)
    assert a == Event(event_id(d("2025-07-10"), "An earthquake strikes."), d("2025-07-10"), "An earthquake strikes.")
    assert a.event_id.startswith("ev-") and b == Event("e2", d("2025-07-11"), "An election is held.")
    assert read_events(f) == [a, b]


def ev(**over: Any) -> dict[str, Any]:
    row = {"date": "2025-07-10", "summary": "A storm.", **over}
    return {k: v for k, v in row.items() if v is not ...}


BAD_EVENTS = [
    ("missing_date", ev(date=...), "missing_field", "date"),
    ("bad_date", ev(date="10 July 2025"), "bad_date", "date"),
    ("impossible_date", ev(date="2025-06-31"), "impossible_date", "date"),
    ("missing_summary", ev(summary=...), "missing_field", "summary"),
    ("blank_summary", ev(summary=" "), "empty_text", "summary"),
    ("wrong_type_summary", ev(summary=["a"]), "wrong_type", "summary"),
    ("wrong_type_id", ev(id=7), "wrong_type", "id"),
    ("unsafe_id", ev(id="../x"), "unsafe_name", "id"),
    ("duplicate_id", ev(id="first", summary="Another."), "duplicate_id", "id"),
    ("duplicate_event", ev(date="2025-07-01", summary="The same."), "duplicate_id", "summary"),
    ("invalid_json", "{", "invalid_json", None),
]


@pytest.mark.parametrize("name,row,kind,field", BAD_EVENTS, ids=[b[0] for b in BAD_EVENTS])
def test_bad_event_named_or_quarantined(tmp_path: Path, name: str, row: Any, kind: str, field: str | None) -> None:
    first = ev(date="2025-07-01", summary="The same.") if name == "duplicate_event" else ev(id="first")
    f = write(tmp_path / "ev.jsonl", [first, row])
    with pytest.raises(BadDataError) as e:
        read_events(f)
    assert (e.value.kind, e.value.row, e.value.field) == (kind, 2, field)
    assert str(f) in str(e.value) and "row 2" in str(e.value)
    bad = Quarantine()
    assert read_events(f, bad) == read_events(write(tmp_path / "first.jsonl", [first]))
    assert [(r.file, r.row, r.field, r.kind) for r in bad.rows] == [(str(f), 2, field, kind)]


# -- assign_to_events ----------------------------------------------------------------------------

def test_window_is_three_days_before_to_eleven_after() -> None:
    event = Event("e", d("2025-07-10"), "The bridge collapses.")
    arts = [article(f"https://a.com/{day}", f"2025-07-{day:02d}", "Bridge news") for day in (6, 7, 10, 21, 22)]
    counts = Counter[str]()
    got = assign_to_events(arts, [event], KeywordEmbed(), counts=counts)
    assert [a.publish_date.day for a, _ in got] == [7, 10, 21]
    assert counts == {"assigned": 3, "outside_event_window": 2}
    wider = assign_to_events(arts, [event], KeywordEmbed(), before_days=4, after_days=12)
    assert len(wider) == 5


def test_joins_the_most_similar_event_in_its_window_and_embeds_only_what_it_needs() -> None:
    events = [Event("quake", d("2025-07-10"), "An earthquake hits the coast."),
              Event("vote", d("2025-07-11"), "An election is called."),
              Event("far", d("2025-03-01"), "An election long ago.")]
    arts = [article("https://a.com/1", "2025-07-12", "Election day set"),
            article("https://a.com/2", "2025-07-12", "Aftershocks", "The earthquake left thousands homeless."),
            article("https://a.com/3", "2025-01-01", "Old election story")]
    embed = KeywordEmbed()
    got = assign_to_events(arts, events, embed)
    assert [(a.url, e.event_id) for a, e in got] == [("https://a.com/1", "vote"), ("https://a.com/2", "quake")]
    assert "An election long ago." not in embed.seen and not any("Old election" in t for t in embed.seen)


def test_equal_similarity_goes_to_the_earlier_event() -> None:
    events = [Event("b", d("2025-07-11"), "A storm."), Event("a", d("2025-07-11"), "A storm."),
              Event("c", d("2025-07-10"), "A storm.")]
    [(_, e)] = assign_to_events([article("https://a.com/1", "2025-07-12", "Storm")], events, KeywordEmbed())
    assert e.event_id == "c"
    [(_, e)] = assign_to_events([article("https://a.com/1", "2025-07-12", "Storm")], events[:2], KeywordEmbed())
    assert e.event_id == "a"


def test_no_events_or_no_articles() -> None:
    counts = Counter[str]()
    assert assign_to_events([article("https://a.com/1", "2025-07-12", "x")], [], KeywordEmbed(), counts=counts) == []
    assert counts == {"outside_event_window": 1}
    assert assign_to_events([], [Event("e", d("2025-07-10"), "x")], KeywordEmbed()) == []


def test_bad_embedder_and_window_are_refused() -> None:
    arts, events = [article("https://a.com/1", "2025-07-12", "x")], [Event("e", d("2025-07-10"), "x")]
    with pytest.raises(ValueError, match="shape"):
        assign_to_events(arts, events, lambda texts: np.zeros((len(texts) + 1, 3)))
    with pytest.raises(ValueError, match="not finite"):
        assign_to_events(arts, events, lambda texts: np.full((len(texts), 3), np.nan))
    with pytest.raises(ValueError, match="negative"):
        assign_to_events(arts, events, KeywordEmbed(), before_days=-1)


def test_article_text_is_title_and_start_of_text() -> None:
    a = article("https://a.com/1", "2025-07-12", "Title", "x" * 1000)
    assert article_text(a) == "Title\n" + "x" * ARTICLE_CHARS


# -- group_into_events ---------------------------------------------------------------------------

def grouping_articles() -> list[Article]:
    return [article("https://a.com/q1", "2025-07-10", "Earthquake hits", "The earthquake toppled homes."),
            article("https://b.com/q2", "2025-07-12", "Earthquake aftermath", "Rescuers after the earthquake."),
            article("https://c.com/e1", "2025-07-11", "Election called", "The election is in May."),
            article("https://d.com/q3", "2025-07-20", "Earthquake inquiry", "An earthquake inquiry opens."),
            article("https://e.com/mix", "2025-07-12", "Storm and bridge", "A storm closed the bridge.")]


def test_groups_by_window_and_similarity() -> None:
    counts = Counter[str]()
    got = group_into_events(grouping_articles(), KeywordEmbed(), window_days=3, threshold=0.8, counts=counts)
    by_url = {a.url: e for a, e in got}
    assert [a.url for a, _ in got] == ["https://a.com/q1", "https://c.com/e1", "https://b.com/q2",
                                       "https://e.com/mix", "https://d.com/q3"]
    quake = by_url["https://a.com/q1"]
    assert by_url["https://b.com/q2"] == quake
    assert quake == Event(group_id(grouping_articles()[0]), d("2025-07-10"), "Earthquake hits")
    assert by_url["https://d.com/q3"] != quake            # 10 days after the group's first article
    assert by_url["https://c.com/e1"] != quake and by_url["https://e.com/mix"] not in (quake, by_url["https://c.com/e1"])
    assert counts == {"assigned": 5, "groups": 4}


def test_grouping_threshold_and_determinism() -> None:
    arts = grouping_articles()
    loose = group_into_events(arts, KeywordEmbed(), window_days=30, threshold=0.0)
    assert len({e for _, e in loose}) == 1                  # every cosine here is >= 0
    strict = group_into_events(arts, KeywordEmbed(), window_days=30, threshold=1.01)
    assert len({e for _, e in strict}) == len(arts)
    shuffled = arts[:]
    random.Random(7).shuffle(shuffled)
    assert group_into_events(shuffled, KeywordEmbed(), 3, 0.8) == group_into_events(arts, KeywordEmbed(), 3, 0.8)
    assert group_into_events([], KeywordEmbed(), 3, 0.8) == []


@pytest.mark.slow
def test_real_minilm_groups_one_event_together(embedder: Any) -> None:
    # MiniLM cosines here: the two quake articles 0.43, either with the Fed article about 0.0
    arts = [article("https://a.com/1", "2023-02-06", "Powerful earthquake kills thousands in Turkey and Syria",
                    "A magnitude 7.8 earthquake struck southern Turkey and northern Syria before dawn, "
                    "toppling buildings and killing thousands."),
            article("https://b.com/2", "2023-02-07", "Rescuers search rubble after Turkey-Syria quake",
                    "Rescue teams dug through collapsed apartment blocks in Gaziantep as the death toll "
                    "from Monday's earthquake rose."),
            article("https://c.com/3", "2023-02-07", "Federal Reserve signals more interest rate hikes",
                    "The Fed chair said the central bank may need to raise interest rates further to "
                    "bring down inflation.")]
    got = dict((a.url, e) for a, e in group_into_events(arts, embedder.encode, window_days=3, threshold=0.35))
    assert got["https://a.com/1"] == got["https://b.com/2"] != got["https://c.com/3"]
    events = [Event("quake", d("2023-02-06"), "A 7.8 magnitude earthquake strikes Turkey and Syria."),
              Event("fed", d("2023-02-07"), "The US Federal Reserve raises its benchmark interest rate.")]
    assert [e.event_id for _, e in assign_to_events(arts, events, embedder.encode)] == ["quake", "quake", "fed"]


# -- allowed -------------------------------------------------------------------------------------

def test_allowlist_by_domain_section_and_outlet() -> None:
    assert allowed(article("https://anything.org/x", "2025-07-01", "t"), [])
    bbc = article("https://www.bbc.com/news/x", "2025-07-01", "t")
    assert allowed(bbc, ["bbc.com"]) and allowed(bbc, [".bbc.com/"]) and allowed(bbc, ["https://www.BBC.com"])
    assert not allowed(article("https://notbbc.com/x", "2025-07-01", "t"), ["bbc.com"])
    assert not allowed(bbc, ["cnn.com"])
    spiegel = ["spiegel.de/international/"]
    assert allowed(article("https://www.spiegel.de/international/world/x", "2025-07-01", "t"), spiegel)
    assert not allowed(article("https://www.spiegel.de/politik/x", "2025-07-01", "t"), spiegel)
    archived = article("https://archive.ph/abc", "2025-07-01", "t", outlet="reuters.com")
    assert allowed(archived, ["reuters.com"]) and not allowed(archived, ["bbc.com"])
    assert not allowed(article("https://archive.ph/abc", "2025-07-01", "t", outlet="Reuters"), ["reuters.com"])


def test_paper_outlets_as_read_off_figure_4() -> None:
    assert len(PAPER_OUTLETS) == len(set(PAPER_OUTLETS)) == 95
    for fixed in ("washingtonpost.com", "justthenews.com", "newsmax.com", "themoscowtimes.com", "telegraphindia.com"):
        assert fixed in PAPER_OUTLETS
    assert allowed(article("https://www.usatoday.com/story/x", "2023-01-05", "t"), PAPER_OUTLETS)
    assert allowed(article("https://asia.nikkei.com/x", "2023-01-05", "t"), PAPER_OUTLETS)
    assert not allowed(article("https://www.nikkei.com/x", "2023-01-05", "t"), PAPER_OUTLETS)
    assert not allowed(article("https://www.lemonde.fr/politique/x", "2023-01-05", "t"), PAPER_OUTLETS)
