"""Exact, time-aware top-k search over normalized vectors with FAISS.

Vectors are stored sorted by date, so "dated strictly before D" is the row prefix
``[0, cut(D))``. A batch of queries is grouped by cutoff and each group is one FAISS call.
On CPU ("prefix" mode) that call is ``faiss.knn`` over the prefix, a zero-copy slice: exact,
BLAS-backed, and no excluded row is ever scored (3x faster than an ``IDSelectorRange`` on an
``IndexFlatIP``, which scans row by row). On GPU ("overfetch" mode) the vectors stay resident
in a ``GpuIndexFlatIP``; a group searches the whole index and keeps rows inside the prefix,
doubling the fetch until k valid rows are found or the index is exhausted, which is exact too.
Scores are inner products of unit vectors, i.e. cosine similarity.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

log = logging.getLogger(__name__)


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
        if self.on_gpu:  # pragma: no cover - no GPU in CI
            self._res = faiss.StandardGpuResources()
            self._flat = faiss.index_cpu_to_gpu(self._res, 0, self._flat_cpu())

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
        day = np.datetime64(before, "D").astype(np.int64)
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
        import faiss

        if self.mode == "prefix":
            return faiss.knn(q, self.sorted_vectors[:n_cut], k, metric=faiss.METRIC_INNER_PRODUCT)
        fetch = min(self.ntotal, max(2 * k, k + (self.ntotal - n_cut)) if n_cut < self.ntotal else k)
        while True:
            scores, idx = self._flat.search(q, fetch)
            valid = (idx >= 0) & (idx < n_cut)
            if fetch >= self.ntotal or np.all(valid.sum(axis=1) >= k):
                break
            fetch = min(self.ntotal, fetch * 2)
        out_s = np.full((len(q), k), -np.inf, dtype=np.float32)
        out_i = np.full((len(q), k), -1, dtype=np.int64)
        for r in range(len(q)):
            keep = np.nonzero(valid[r])[0][:k]
            out_s[r, : len(keep)] = scores[r, keep]
            out_i[r, : len(keep)] = idx[r, keep]
        return out_s, out_i


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
