"""The offline web's search at 100k pages: queries/s of the BM25 inverted index vs an exhaustive
scan, with recall@k of the index against the scan, measured side by side in one run.

    python perf/websearch.py [--pages 100000] [--queries 300] [--scan-queries 60] [--k 10]

Pages are built from real news text: sentences of the bundled livenews sample (RealTimeQA
search results) drawn at random, 6-12 per page, with dates over 2022-2023 and domains from the
sample's, so term statistics look like news rather than random words. Queries are the sample's
questions plus phrases cut from random pages. Every search runs with a per-question blocklist
and date window, as episodes do.

The exhaustive scan is BM25 computed page by page over pre-tokenized pages (no index); it is
the reference for recall and runs on a subset of the queries (``--scan-queries``) because it
is slow. The index's top-k must equal the scan's (ties broken by page id on both sides).
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import random
import re
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.benchmarks.livenews.config import LivenewsBenchmarkConfig  # noqa: E402
from engine.benchmarks.livenews.data import load  # noqa: E402
from indexes.bm25 import tokenize  # noqa: E402
from indexes.web import OfflineWeb, WebPage  # noqa: E402


def build_pages(n: int, seed: int) -> tuple[list[WebPage], list[str]]:
    questions, sample = load(LivenewsBenchmarkConfig())
    sentences = [s.strip() for p in sample for s in re.split(r"(?<=[.!?])\s+", p.text) if len(s.split()) >= 5]
    domains = sorted({p.url.split("/")[2] for p in sample})
    rng = random.Random(seed)
    start = dt.date(2022, 1, 1).toordinal()
    pages = []
    for i in range(n):
        text = " ".join(rng.choice(sentences) for _ in range(rng.randint(6, 12)))
        title = " ".join(text.split()[:8])
        pages.append(WebPage(f"https://{rng.choice(domains)}/p/{i}", title, text,
                             dt.date.fromordinal(start + rng.randrange(730))))
    return pages, [q.question for q in questions]


class Scan:
    """BM25 page by page over pre-tokenized pages: the exhaustive reference."""

    def __init__(self, texts: list[str], k1: float = 1.2, b: float = 0.75) -> None:
        self.docs = [Counter(tokenize(t)) for t in texts]
        self.lengths = [sum(d.values()) for d in self.docs]
        self.avgdl = sum(self.lengths) / len(self.docs)
        self.df: Counter[str] = Counter()
        for d in self.docs:
            self.df.update(d.keys())
        self.k1, self.b, self.n = k1, b, len(self.docs)

    def score(self, i: int, q: Counter[str], idf: dict[str, float]) -> float:
        d, s = self.docs[i], 0.0
        for term, qtf in q.items():
            tf = d.get(term, 0)
            if tf:
                s += qtf * idf[term] * tf * (self.k1 + 1) / (tf + self.k1 * (1 - self.b + self.b * self.lengths[i] / self.avgdl))
        return s

    def top(self, query: str, k: int, allowed: np.ndarray) -> tuple[list[int], dict[int, float]]:
        """The top k ids, and a scorer's view of any id (for tie-aware comparison)."""
        q = Counter(tokenize(query))
        idf = {t: math.log(1.0 + (self.n - self.df[t] + 0.5) / (self.df[t] + 0.5)) for t in q}
        scored = []
        for i in range(self.n):
            if allowed[i]:
                s = self.score(i, q, idf)
                if s > 0:
                    scored.append((-s, i))
        scored.sort()
        return [i for _, i in scored[:k]], {i: -s for s, i in scored}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--scan-queries", type=int, default=60)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    t0 = time.perf_counter()
    pages, questions = build_pages(a.pages, a.seed)
    rng = random.Random(a.seed + 1)
    queries = list(questions)
    while len(queries) < a.queries:
        words = rng.choice(pages).text.split()
        j = rng.randrange(max(1, len(words) - 4))
        queries.append(" ".join(words[j: j + rng.randint(2, 5)]))
    queries = queries[: a.queries]
    domains = sorted({p.domain for p in pages})
    policies = []
    for _ in queries:
        cutoff = dt.date(2022, 3, 1) + dt.timedelta(days=rng.randrange(640))
        policies.append(([rng.choice(domains), "archive.org"], None, cutoff))
    print(f"{len(pages):,} pages from {len(set(p.text for p in pages)):,} distinct texts, {len(queries)} queries "
          f"(built in {time.perf_counter() - t0:.1f} s)")

    t0 = time.perf_counter()
    web = OfflineWeb(pages)
    print(f"index build: {time.perf_counter() - t0:.1f} s, {len(web.index.postings):,} terms")
    t0 = time.perf_counter()
    scan = Scan([f"{p.title}\n{p.text}" for p in web.pages])
    print(f"scan pre-tokenization: {time.perf_counter() - t0:.1f} s (not counted in its query time)")

    masks = [web.allowed(b, after, before) for b, after, before in policies]
    t0 = time.perf_counter()
    got = [[h.doc for h in web.index.search(q, a.k, m)] for q, m in zip(queries, masks)]
    t_index = time.perf_counter() - t0
    t0 = time.perf_counter()
    full = [web.search(q, a.k, b, after, before) for q, (b, after, before) in zip(queries, policies)]
    t_full = time.perf_counter() - t0

    n_scan = min(a.scan_queries, len(queries))
    t0 = time.perf_counter()
    ref = [scan.top(q, a.k, m) for q, m in zip(queries[:n_scan], masks[:n_scan])]
    t_scan = time.perf_counter() - t0

    hits = tied = exact = total = 0
    for g, (r, scores) in zip(got[:n_scan], ref):
        total += len(r)
        exact += g == r
        hits += len(set(g) & set(r))
        # a different page whose exhaustive score ties the k-th result (to 1e-9) is an equally
        # valid top-k member: the two sum the same floats in a different order
        kth = scores[r[-1]] if r else 0.0
        tied += sum(1 for d in set(g) - set(r) if abs(scores.get(d, -1.0) - kth) <= 1e-9 * max(1.0, kth))
    leaks = sum(1 for res, (b, _, before) in zip(full, policies) for r in res
                if r.date is None or r.date >= before or r.url.split("/")[2] in b)
    qps_index, qps_full, qps_scan = len(queries) / t_index, len(queries) / t_full, n_scan / t_scan
    print()
    print(f"{'method':<44}{'queries':>9}{'seconds':>10}{'q/s':>10}")
    print(f"{'BM25 inverted index, top-k (with masks)':<44}{len(queries):>9}{t_index:>10.2f}{qps_index:>10.1f}")
    print(f"{'OfflineWeb.search (+ mask, snippets)':<44}{len(queries):>9}{t_full:>10.2f}{qps_full:>10.1f}")
    print(f"{'exhaustive scan (pre-tokenized)':<44}{n_scan:>9}{t_scan:>10.2f}{qps_scan:>10.2f}")
    print()
    print(f"recall@{a.k} of the index vs the exhaustive scan: {hits / max(total, 1):.4f} "
          f"({hits}/{total} results; identical ranked lists {exact}/{n_scan}); counting exact score ties "
          f"at rank {a.k} as hits: {(hits + tied) / max(total, 1):.4f}")
    print(f"results dated on/after the cutoff or on a blocked domain: {leaks}")
    print(f"speed-up of the index over the scan: {qps_index / qps_scan:.0f}x "
          f"(OfflineWeb.search incl. snippets: {qps_full / qps_scan:.0f}x)")


if __name__ == "__main__":
    main()
