"""The offline web: blocked domains never appear, the date window holds, visits are checked."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from indexes.web import ARCHIVE_DOMAINS, OfflineWeb, VisitRefused, WebPage, registered_domain, snippet

D = dt.date
PAGES = [
    WebPage("https://www.bbc.co.uk/news/kelbridge-flood", "Kelbridge flood", "The river Ash flooded Kelbridge.", D(2024, 9, 18)),
    WebPage("https://edition.cnn.com/2024/09/19/kelbridge", "Kelbridge flood update", "Kelbridge flood waters fell on Thursday.", D(2024, 9, 19)),
    WebPage("https://web.archive.org/web/2024/https://bbc.co.uk/x", "Archived: Kelbridge flood", "Kelbridge flood archive copy.", D(2024, 9, 18)),
    WebPage("https://apnews.com/article/kelbridge", "Kelbridge plan", "Kelbridge council flood plan approved.", D(2025, 5, 8)),
    WebPage("https://example.org/undated", "Kelbridge history", "Kelbridge flood history without a date.", None),
]


def test_registered_domain():
    assert registered_domain("https://www.bbc.co.uk/news/x") == "bbc.co.uk"
    assert registered_domain("https://edition.cnn.com/a") == "cnn.com"
    assert registered_domain("web.archive.org") == "archive.org"


def test_blocklist_and_window():
    web = OfflineWeb(PAGES)
    urls = [r.url for r in web.search("Kelbridge flood", blocked=["bbc.co.uk", *ARCHIVE_DOMAINS])]
    assert not any("bbc.co.uk/news" in u or "archive.org" in u for u in urls) and len(urls) == 3
    window = web.search("Kelbridge flood", after=D(2024, 9, 1), before=D(2024, 9, 19))
    assert {r.url for r in window} == {PAGES[0].url, PAGES[2].url}   # undated and later pages drop out


def test_visit_rules_and_token_limit():
    web = OfflineWeb(PAGES)
    returned = [r.url for r in web.search("Kelbridge flood")]
    with pytest.raises(VisitRefused, match="not returned"):
        web.visit("https://nowhere.com/x", returned)
    with pytest.raises(VisitRefused, match="blocked"):
        web.visit(PAGES[0].url, returned, blocked=["bbc.co.uk"])
    page = web.visit(PAGES[1].url, returned, max_tokens=3)
    assert page.startswith("Title: Kelbridge flood update\nURL: https://edition.cnn.com")
    assert page.endswith("Kelbridge flood waters [truncated]")


def test_snippet_centres_on_query_terms():
    text = " ".join(["filler"] * 100 + ["Kelbridge", "flood", "barrier"] + ["filler"] * 100)
    s = snippet(text, "Kelbridge barrier", words=10)
    assert "Kelbridge" in s and "barrier" in s and s.startswith("... ") and s.endswith(" ...")


DOMAINS = ["bbc.co.uk", "cnn.com", "apnews.com", "reuters.com", "archive.org"]


@settings(max_examples=50, deadline=None)
@given(pages=st.lists(st.tuples(st.sampled_from(DOMAINS), st.integers(0, 60),
                                st.lists(st.sampled_from(["flood", "vote", "fire", "tram"]), min_size=1, max_size=6)),
                      min_size=1, max_size=25),
       blocked=st.lists(st.sampled_from(DOMAINS), max_size=3), start=st.integers(0, 60), span=st.integers(1, 30))
def test_blocked_domains_and_window_never_leak(pages, blocked, start, span):
    base = D(2024, 1, 1)
    web = OfflineWeb(WebPage(f"https://www.{dom}/p{i}", f"page {i}", " ".join(words), base + dt.timedelta(days=day))
                     for i, (dom, day, words) in enumerate(pages))
    after, before = base + dt.timedelta(days=start), base + dt.timedelta(days=start + span)
    for r in web.search("flood vote fire tram", k=50, blocked=blocked, after=after, before=before):
        assert registered_domain(r.url) not in blocked
        assert after <= r.date < before
