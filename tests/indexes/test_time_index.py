"""The time-aware FAISS index: identical to brute force, never returns an object dated on or
after the cutoff (property-based), on both the selector path and the over-fetch path."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexes.time_index import TimeAwareIndex, brute_force_search

BASE = dt.date(2020, 1, 1)


def unit(rng, n, d):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def dates(rng, n, span):
    return [BASE + dt.timedelta(days=int(x)) for x in rng.integers(0, span, n)]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["prefix", "overfetch"])
@pytest.mark.parametrize("threshold", [None, 0.2])
def test_equals_brute_force(mode, threshold):
    rng = np.random.default_rng(7)
    X, dts = unit(rng, 4000, 24), dates(rng, 4000, 900)
    Q, before = unit(rng, 300, 24), dates(rng, 300, 1000)
    index = TimeAwareIndex(X, dts, device="cpu")
    index.use_mode(mode)
    got = index.search(Q, before, 7, threshold)
    want = brute_force_search(X, dts, Q, before, 7, threshold)
    for g, w in zip(got, want):
        assert [h.row for h in g] == [h.row for h in w]
        np.testing.assert_allclose([h.score for h in g], [h.score for h in w], rtol=1e-5, atol=1e-6)


def test_cutoff_is_strict_and_empty_prefix():
    X = np.eye(3, dtype=np.float32)
    dts = [dt.date(2024, 1, 1), dt.date(2024, 1, 2), dt.date(2024, 1, 3)]
    index = TimeAwareIndex(X, dts, device="cpu")
    assert index.cut(dt.date(2024, 1, 2)) == 1
    res = index.search(X, [dt.date(2024, 1, 1), dt.date(2024, 1, 2), dt.date(2024, 1, 9)], 5)
    assert res[0] == []
    assert [h.row for h in res[1]] == [0]
    assert res[2][0].row == 2 and len(res[2]) == 3


def test_threshold_is_strictly_greater():
    X = np.array([[1.0, 0.0], [0.6, 0.8]], dtype=np.float32)
    index = TimeAwareIndex(X, [BASE, BASE], device="cpu")
    q = np.array([[0.6, 0.8]], dtype=np.float32)
    hits = index.search(q, [BASE + dt.timedelta(days=1)], 5, threshold=0.6)[0]
    assert [h.row for h in hits] == [1]          # the other scores exactly 0.6: not above


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(1, 400), k=st.integers(1, 12),
       span=st.integers(1, 60), mode=st.sampled_from(["prefix", "overfetch"]))
def test_never_returns_objects_on_or_after_cutoff(seed, n, k, span, mode):
    rng = np.random.default_rng(seed)
    X, dts = unit(rng, n, 8), dates(rng, n, span)
    Q, before = unit(rng, 20, 8), dates(rng, 20, span + 2)
    index = TimeAwareIndex(X, dts, device="cpu")
    index.use_mode(mode)
    for hits, b in zip(index.search(Q, before, k, None), before):
        assert all(dts[h.row] < b for h in hits)
        eligible = sum(d < b for d in dts)
        assert len(hits) == min(k, eligible)
