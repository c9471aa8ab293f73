"""Near-duplicate questions (the build's stage 6; the paper's releases hold one question per
article, and two articles on one event can yield the same question): by the cosine of their
embeddings, keeping the earliest of each set in the given order.

Greedy and deterministic: in order, an item whose cosine with some kept item is at least the
threshold is dropped as a duplicate of the most similar of them (ties: the earlier); else it is
kept. A dropped item never keeps a later one out. The cosines are computed in float64, a block
of rows at a time (memory: ``BLOCK`` x n), so a few thousand questions take well under a second.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

BLOCK = 512


def unit_rows(vectors: np.ndarray, n: int) -> np.ndarray:
    """``vectors`` as float64 rows of length one (a zero row stays zero), checked: ``n`` rows, finite."""
    v = np.asarray(vectors, dtype=np.float64)
    if v.ndim != 2 or v.shape[0] != n:
        raise ValueError(f"expected {n} vectors (one row per id), got an array of shape {v.shape}")
    if not np.isfinite(v).all():
        raise ValueError("a vector is not finite")
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    out = np.zeros_like(v)
    np.divide(v, norms, out=out, where=norms > 0)
    return out


def near_duplicates(ids: Sequence[str], vectors: np.ndarray, threshold: float) -> dict[str, str]:
    """Each dropped id -> the kept id it duplicates (cosine >= ``threshold``), in order of ``ids``.
    ``vectors``: one row per id (normalized here; a zero row duplicates nothing)."""
    if len(set(ids)) != len(ids):
        raise ValueError("near_duplicates: ids must be unique")
    if not -1.0 <= threshold <= 1.0:
        raise ValueError(f"near_duplicates: threshold must be a cosine in [-1, 1], got {threshold}")
    v = unit_rows(vectors, len(ids))
    zero: np.ndarray = np.logical_not(v.any(axis=1))
    kept = np.zeros(len(ids), dtype=bool)
    out: dict[str, str] = {}
    for start in range(0, len(ids), BLOCK):
        stop = min(start + BLOCK, len(ids))
        sims = v[start:stop] @ v[:stop].T               # this block against itself and everything before
        for i in range(start, stop):
            row = sims[i - start, :i]
            hits = kept[:i] & (row >= threshold) & ~zero[:i]
            if hits.any() and not zero[i]:
                out[ids[i]] = ids[int(np.argmax(np.where(hits, row, -np.inf)))]
            else:
                kept[i] = True
    return out
