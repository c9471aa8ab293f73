"""The GPU ("overfetch") path under FAISS GPU's k-selection limit, simulated on CPU.

FAISS GPU rejects a search for more than GPU_MAX_SELECTION_K (2048) results. Here the limit is
lowered to a few rows and the resident index (and the exact prefix fallback) are fakes that
raise like FAISS GPU does, so a large index with an early cutoff, which over-fetches
``k + (ntotal - n_cut)`` rows, would fail; results must still equal brute force exactly.
"""

from __future__ import annotations

import datetime as dt
from unittest import mock

import faiss
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexes import time_index
from indexes.time_index import TimeAwareIndex, brute_force_search

BASE = dt.date(2020, 1, 1)


class GpuLimitError(RuntimeError):
    pass


class LimitedFlat:
    """A CPU IndexFlatIP standing in for GpuIndexFlatIP: raises for k > limit, like FAISS GPU."""

    def __init__(self, inner, limit: int) -> None:
        self.inner, self.limit, self.ks = inner, limit, []

    @property
    def ntotal(self) -> int:
        return self.inner.ntotal

    def search(self, q, k):
        self.ks.append(k)
        if k > self.limit:
            raise GpuLimitError(f"k={k} > GPU_MAX_SELECTION_K={self.limit}")
        return self.inner.search(q, k)


class LimitedKnn:
    """Stands in for faiss.knn_gpu (bfKnn), which has the same limit."""

    def __init__(self, limit: int) -> None:
        self.limit, self.ks = limit, []

    def __call__(self, q, xb, k):
        self.ks.append(k)
        if k > self.limit:
            raise GpuLimitError(f"k={k} > GPU_MAX_SELECTION_K={self.limit}")
        return faiss.knn(q, xb, k, metric=faiss.METRIC_INNER_PRODUCT)


def unit(rng, n, d):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def simulated_gpu_index(X, dts, limit):
    index = TimeAwareIndex(X, dts, device="cpu")
    index.use_mode("overfetch")
    index._flat = LimitedFlat(index._flat, limit)
    index._prefix_knn = LimitedKnn(limit)       # no such hook on the old code: harmless there
    return index


def assert_same(got, want):
    for g, w in zip(got, want):
        assert [h.row for h in g] == [h.row for h in w]
        np.testing.assert_allclose([h.score for h in g], [h.score for h in w], rtol=1e-5, atol=1e-6)


def test_default_limit_is_faiss_gpu_selection_limit():
    assert time_index.GPU_MAX_K == 2048


@pytest.mark.parametrize("k", [3, 5])
@pytest.mark.parametrize("threshold", [None, 0.1])
def test_early_cutoff_stays_within_limit_and_exact(threshold, k):
    limit, n, d = 8, 600, 16
    rng = np.random.default_rng(3)
    day = rng.permutation(n)                          # one row a day, rows in random order
    X = unit(rng, n, d)
    u = unit(rng, 1, d)[0]
    late = day >= 590                                 # the 10 newest rows cluster around u
    X[late] = u + 0.05 * X[late]
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    dts = [BASE + dt.timedelta(days=int(x)) for x in day]
    Q = unit(rng, 80, d)
    Q[::2] = u + 0.05 * Q[::2]                        # half the queries: top 8 overall are all late
    Q /= np.linalg.norm(Q, axis=1, keepdims=True)
    # 10 rows eligible (the old code asks for k + 590); 590 (k + 10 > 8: for k=3 a capped call,
    # the late-looking queries fall back); 598 (k + 2 <= 8: one exact call); all rows; none
    cutoffs = [10, 590, 598, n, 0]
    before = [BASE + dt.timedelta(days=cutoffs[i % len(cutoffs)]) for i in range(len(Q))]
    with mock.patch.object(time_index, "GPU_MAX_K", limit, create=True):
        index = simulated_gpu_index(X, dts, limit)
        got = index.search(Q, before, k, threshold)
    assert index._flat.ks and max(index._flat.ks) <= limit
    assert index._prefix_knn.ks and max(index._prefix_knn.ks) <= limit   # the fallback ran too
    if k == 3:
        assert limit in index._flat.ks                # the capped over-fetch was tried
    assert_same(got, brute_force_search(X, dts, Q, before, k, threshold))
    for hits, b in zip(got, before):
        assert all(dts[h.row] < b for h in hits)


def test_k_above_limit_falls_back_to_cpu():
    rng = np.random.default_rng(5)
    X, n = unit(rng, 50, 8), 50
    dts = [BASE + dt.timedelta(days=i) for i in range(n)]
    Q = unit(rng, 4, 8)
    before = [BASE + dt.timedelta(days=d) for d in (5, 30, 49, 60)]
    with mock.patch.object(time_index, "GPU_MAX_K", 4, create=True):
        index = simulated_gpu_index(X, dts, 4)
        got = index.search(Q, before, 20)
    assert all(kk <= 4 for kk in index._flat.ks + index._prefix_knn.ks)
    assert_same(got, brute_force_search(X, dts, Q, before, 20))


@pytest.mark.slow
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(1, 300), k=st.integers(1, 10),
       limit=st.integers(1, 24), span=st.integers(1, 200), early=st.booleans(),
       threshold=st.sampled_from([None, 0.0, 0.3]))
def test_simulated_limit_equals_brute_force(seed, n, k, limit, span, early, threshold):
    rng = np.random.default_rng(seed)
    X = unit(rng, n, 6)
    dts = [BASE + dt.timedelta(days=int(d)) for d in rng.integers(0, span, n)]
    Q = unit(rng, 16, 6)
    hi = max(1, span // 8) if early else span + 2                # early: most rows excluded
    before = [BASE + dt.timedelta(days=int(d)) for d in rng.integers(0, hi + 1, len(Q))]
    with mock.patch.object(time_index, "GPU_MAX_K", limit, create=True):
        index = simulated_gpu_index(X, dts, limit)
        got = index.search(Q, before, k, threshold)
    assert all(kk <= limit for kk in index._flat.ks + index._prefix_knn.ks)
    assert_same(got, brute_force_search(X, dts, Q, before, k, threshold))
    for hits, b in zip(got, before):
        assert all(dts[h.row] < b for h in hits)
        if threshold is None:
            assert len(hits) == min(k, sum(d < b for d in dts))
