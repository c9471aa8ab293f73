"""Exact, time-aware top-k search over normalized vectors with FAISS.

Vectors are stored sorted by date, so "dated strictly before D" is the row prefix
``[0, cut(D))``. A batch of queries is grouped by cutoff and each group is one FAISS call.
On CPU ("prefix" mode) that call is ``faiss.knn`` over the prefix, a zero-copy slice: exact,
BLAS-backed, and no excluded row is ever scored (3x faster than an ``IDSelectorRange`` on an
``IndexFlatIP``, which scans row by row). On GPU ("overfetch" mode) the vectors stay resident
in a ``GpuIndexFlatIP``; a group searches the whole index for its top ``fetch`` rows and keeps
those inside the prefix. FAISS GPU k-selection rejects k > ``GPU_MAX_K`` (its
``GPU_MAX_SELECTION_K``, 2048), so ``fetch`` is capped there. ``fetch = k + (ntotal - n_cut)``
always yields k valid rows, so when that fits under the cap one call is exact; otherwise one
capped call is tried when the prefix is large enough to expect k valid rows among the top
``GPU_MAX_K`` (late cutoffs, the common case), and every query still short of k valid rows, or
every query of a group whose prefix is too small for that, gets an exact search over the
prefix alone: ``faiss.knn_gpu`` (brute force, the prefix as database, no over-fetch; k <=
``GPU_MAX_K`` as well) or, for k > ``GPU_MAX_K``, CPU ``faiss.knn``. No FAISS GPU call ever asks
for more than ``GPU_MAX_K`` results, and no row dated on or after the cutoff is returned.
Tests lower ``GPU_MAX_K`` and run this algorithm on a CPU index (``use_mode("overfetch")``).
Scores are inner products of unit vectors, i.e. cosine similarity.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

# FAISS GPU k-selection limit (GPU_MAX_SELECTION_K: 2048 in current builds, 1024 in some old
# ones; 16384 with cuVS). Every FAISS GPU search here asks for at most this many results.
# Tests lower it to exercise the capped path on CPU.
GPU_MAX_K = 2048


@dataclass(frozen=True)
class SearchHit:
    row: int          # row in the caller's original order
    score: float


def _as_days(dates: Sequence[dt.date] | np.ndarray) -> np.ndarray:
    arr = np.asarray(dates, dtype="datetime64[D]")
    return arr.astype(np.int64)


def faiss_gpu_available() -> bool:
    import faiss

    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


class TimeAwareIndex:
    def __init__(self, vectors: np.ndarray, dates: Sequence[dt.date] | np.ndarray, device: str = "auto") -> None:
        import faiss

        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2:
            raise ValueError(f"vectors must be 2-D, got shape {vectors.shape}")
        days = _as_days(dates)
        if len(days) != len(vectors):
            raise ValueError(f"{len(vectors)} vectors but {len(days)} dates")
        self.order = np.argsort(days, kind="stable")          # sorted position -> original row
        self.sorted_days = days[self.order]
        self.dim = vectors.shape[1]
        self.ntotal = len(vectors)
        self.sorted_vectors = np.ascontiguousarray(vectors[self.order])
        use_gpu = device == "gpu" or (device == "auto" and faiss_gpu_available())
        if device == "gpu" and not faiss_gpu_available():
            raise RuntimeError("index.device=gpu but this FAISS build has no GPU support or sees no GPU")
        self.on_gpu = bool(use_gpu)
        self.mode = "overfetch" if self.on_gpu else "prefix"
        self._flat: Any = None
        # exact top-k over a prefix when the capped over-fetch falls short (k <= GPU_MAX_K)
        self._prefix_knn: Callable[[np.ndarray, np.ndarray, int], tuple[np.ndarray, np.ndarray]] = _cpu_knn
        if self.on_gpu:  # pragma: no cover - no GPU in CI
            self._res = faiss.StandardGpuResources()
            self._flat = faiss.index_cpu_to_gpu(self._res, 0, self._flat_cpu())
            self._prefix_knn = self._gpu_knn

    def _flat_cpu(self) -> Any:
        import faiss

        index = faiss.IndexFlatIP(self.dim)
        if self.ntotal:
            index.add(self.sorted_vectors)
        return index

    def use_mode(self, mode: str) -> None:
        """Force "prefix" or "overfetch" (tests run the GPU algorithm on a CPU index)."""
        if mode == "overfetch" and self._flat is None:
            self._flat = self._flat_cpu()
        self.mode = mode

    def cut(self, before: dt.date | np.datetime64) -> int:
        """Number of rows dated strictly before ``before``."""
        d = before.astype("datetime64[D]") if isinstance(before, np.datetime64) else np.datetime64(before, "D")
        day = d.astype(np.int64)
        return int(np.searchsorted(self.sorted_days, day, side="left"))

    def search(self, queries: np.ndarray, before: Sequence[dt.date], k: int,
               threshold: float | None = None) -> list[list[SearchHit]]:
        """Top-k rows dated strictly before each query's date, best first, score > threshold."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if len(queries) != len(before):
            raise ValueError(f"{len(queries)} queries but {len(before)} dates")
        cuts = np.array([self.cut(b) for b in before], dtype=np.int64)
        results: list[list[SearchHit]] = [[] for _ in range(len(queries))]
        for n_cut in np.unique(cuts):
            if n_cut == 0:
                continue
            members = np.nonzero(cuts == n_cut)[0]
            scores, idx = self._search_prefix(queries[members], int(n_cut), min(k, int(n_cut)))
            for qi, srow, irow in zip(members, scores, idx):
                hits = []
                for s, i in zip(srow, irow):
                    if i < 0:
                        continue
                    if threshold is not None and not s > threshold:
                        continue
                    hits.append(SearchHit(int(self.order[i]), float(s)))
                results[qi] = hits
        return results

    def _search_prefix(self, q: np.ndarray, n_cut: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        if self.mode == "prefix":
            return _cpu_knn(q, self.sorted_vectors[:n_cut], k)
        limit = GPU_MAX_K
        out_s = np.full((len(q), k), -np.inf, dtype=np.float32)
        out_i = np.full((len(q), k), -1, dtype=np.int64)
        todo = np.arange(len(q))
        # k + (ntotal - n_cut) results always hold k rows of the prefix (k <= n_cut).
        need = min(self.ntotal, k + (self.ntotal - n_cut))
        # Above the cap, try one capped call only if ~2k of its rows are expected in the prefix.
        if k <= limit and (need <= limit or limit * n_cut >= 2 * k * self.ntotal):
            fetch = min(need, limit)
            scores, idx = self._flat.search(q, fetch)
            valid = (idx >= 0) & (idx < n_cut)
            done = valid.sum(axis=1) >= k
            for r in np.nonzero(done)[0]:
                keep = np.nonzero(valid[r])[0][:k]
                out_s[r] = scores[r, keep]
                out_i[r] = idx[r, keep]
            todo = np.nonzero(~done)[0]
        if len(todo):
            knn = self._prefix_knn if k <= limit else _cpu_knn
            s, i = knn(np.ascontiguousarray(q[todo]), self.sorted_vectors[:n_cut], k)
            out_s[todo], out_i[todo] = s, i
        return out_s, out_i

    def _gpu_knn(self, q: np.ndarray, xb: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
        import faiss

        return faiss.knn_gpu(self._res, q, xb, k, metric=faiss.METRIC_INNER_PRODUCT)


def _cpu_knn(q: np.ndarray, xb: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    import faiss

    return faiss.knn(q, xb, k, metric=faiss.METRIC_INNER_PRODUCT)


def brute_force_search(vectors: np.ndarray, dates: Sequence[dt.date] | np.ndarray, queries: np.ndarray,
                       before: Sequence[dt.date], k: int, threshold: float | None = None) -> list[list[SearchHit]]:
    """The reference: per query, numpy scores over every row dated strictly before its date."""
    days = _as_days(dates)
    out: list[list[SearchHit]] = []
    for q, b in zip(queries, before):
        allowed = np.nonzero(days < np.datetime64(b, "D").astype(np.int64))[0]
        if len(allowed) == 0:
            out.append([])
            continue
        s = vectors[allowed] @ q
        top = np.argsort(-s, kind="stable")[:k]
        out.append([SearchHit(int(allowed[t]), float(s[t])) for t in top
                    if threshold is None or s[t] > threshold])
    return out
