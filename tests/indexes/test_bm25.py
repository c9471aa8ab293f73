"""BM25: the inverted index scores exactly like a per-document scan; filters and ties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from indexes.bm25 import BM25Index, exhaustive_scores, tokenize

DOCS = [
    "Flood waters rose in Kelbridge as the river Ash burst its banks on Monday.",
    "The Kelbridge council approved a flood defence plan worth 12 million pounds.",
    "Harbor City Gulls sacked their manager after a winless run.",
    "A heatwave in Varnell pushed temperatures above 40 degrees.",
    "Flood flood flood: the word repeated does not make a page relevant forever.",
]


def test_tokenize_drops_stopwords_and_punctuation():
    assert tokenize("The U.S. flood-defence plan, in 2024!") == ["u", "s", "flood", "defence", "plan", "2024"]


def test_scores_match_exhaustive_scan():
    index = BM25Index(DOCS)
    for q in ("Kelbridge flood", "manager sacked", "heatwave temperatures Varnell", "nothing matches zzz"):
        np.testing.assert_allclose(index.scores(q), exhaustive_scores(DOCS, q), rtol=1e-5, atol=1e-6)


def test_search_order_filter_and_no_zero_scores():
    index = BM25Index(DOCS)
    hits = index.search("Kelbridge flood plan", 10)
    assert [h.doc for h in hits][:2] == [1, 0] and all(h.score > 0 for h in hits)
    assert 2 not in [h.doc for h in hits] and 3 not in [h.doc for h in hits]
    allowed = np.array([True, False, True, True, True])
    assert 1 not in [h.doc for h in index.search("Kelbridge flood plan", 10, allowed)]
    assert index.search("zzz", 10) == []


@settings(max_examples=40, deadline=None)
@given(docs=st.lists(st.lists(st.sampled_from(["ash", "flood", "river", "vote", "tram", "city", "fire"]),
                              min_size=1, max_size=12).map(" ".join), min_size=1, max_size=30),
       query=st.lists(st.sampled_from(["ash", "flood", "vote", "fire", "none"]), min_size=1, max_size=3).map(" ".join),
       k=st.integers(1, 10))
def test_top_k_equals_exhaustive_ranking(docs, query, k):
    index = BM25Index(docs)
    ref = exhaustive_scores(docs, query)
    want = sorted((i for i, s in enumerate(ref) if s > 0), key=lambda i: (-ref[i], i))[:k]
    got = index.search(query, k)
    # Same scores in the same order; among float ties either document is a correct answer.
    assert [h.score for h in got] == pytest.approx([ref[i] for i in want], rel=1e-5)
    assert all(h.score == pytest.approx(ref[h.doc], rel=1e-5) for h in got)
