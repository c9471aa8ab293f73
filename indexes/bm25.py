"""Okapi BM25 over dated documents, with per-query filters (the offline web's ranking).

The inverted index keeps, per term, the postings (document ids and term frequencies) as
numpy arrays. A query accumulates ``idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avgdl))``
over its terms' postings into one dense score vector, masks documents the caller excludes
(blocked domains, a date window) and takes the top k with ``argpartition``. Documents that
share no term with the query score 0 and are never returned. ``exhaustive_scores`` computes
the same formula document by document: the reference the tests and benchmark compare against.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

_TOKEN = re.compile(r"[a-z0-9]+")
STOPWORDS = frozenset(
    "a an and are as at be by for from has have he her his in is it its of on or she that the their they "
    "this to was were will with who what when where which why how do does did".split())


def tokenize(text: str) -> list[str]:
    return [t for t in _TOKEN.findall(text.lower()) if t not in STOPWORDS]


@dataclass(frozen=True)
class BM25Hit:
    doc: int
    score: float


class BM25Index:
    def __init__(self, texts: Sequence[str], k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.n = len(texts)
        postings: dict[str, tuple[list[int], list[int]]] = {}
        lengths = np.zeros(self.n, dtype=np.float64)
        for doc, text in enumerate(texts):
            counts = Counter(tokenize(text))
            lengths[doc] = sum(counts.values())
            for term, tf in counts.items():
                docs, tfs = postings.setdefault(term, ([], []))
                docs.append(doc)
                tfs.append(tf)
        self.lengths = lengths
        self.avgdl = float(lengths.mean()) if self.n else 0.0
        self.postings = {t: (np.asarray(d, dtype=np.int32), np.asarray(f, dtype=np.float64))
                         for t, (d, f) in postings.items()}
        self.idf = {t: self._idf(len(d)) for t, (d, _) in self.postings.items()}
        # Per-document length normalisation, precomputed once.
        self._norm = k1 * (1 - b + b * lengths / self.avgdl) if self.n else lengths

    def _idf(self, df: int) -> float:
        return math.log(1.0 + (self.n - df + 0.5) / (df + 0.5))

    def scores(self, query: str) -> np.ndarray:
        out = np.zeros(self.n, dtype=np.float64)
        for term, qtf in Counter(tokenize(query)).items():
            if term not in self.postings:
                continue
            docs, tf = self.postings[term]
            out[docs] += qtf * self.idf[term] * tf * (self.k1 + 1) / (tf + self._norm[docs])
        return out

    def search(self, query: str, k: int, allowed: np.ndarray | None = None) -> list[BM25Hit]:
        """Top k documents by score (> 0), best first; ``allowed`` is a boolean mask or None."""
        s = self.scores(query)
        if allowed is not None:
            s = np.where(allowed, s, 0.0)
        candidates = np.nonzero(s > 0)[0]
        if len(candidates) > k:
            part = np.argpartition(-s[candidates], k - 1)[:k]
            candidates = candidates[part]
        order = candidates[np.lexsort((candidates, -s[candidates]))]   # score desc, then doc id
        return [BM25Hit(int(d), float(s[d])) for d in order]


def exhaustive_scores(texts: Sequence[str], query: str, k1: float = 1.2, b: float = 0.75) -> list[float]:
    """BM25 computed document by document, without an index (the reference)."""
    docs = [Counter(tokenize(t)) for t in texts]
    n = len(docs)
    avgdl = sum(sum(d.values()) for d in docs) / n if n else 0.0
    q = Counter(tokenize(query))
    df = {t: sum(1 for d in docs if t in d) for t in q}
    out = []
    for d in docs:
        length = sum(d.values())
        score = 0.0
        for term, qtf in q.items():
            tf = d.get(term, 0)
            if tf:
                idf = math.log(1.0 + (n - df[term] + 0.5) / (df[term] + 0.5))
                score += qtf * idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / avgdl))
        out.append(score)
    return out
