"""The offline web as a service: one actor per run holds the BM25 index over every page, and
episodes call ``search`` / ``visit`` on it (``ctx.services["web"]``).

Blocklists and date windows are per question, so they travel with each call; the service keeps
no per-episode state (the episode remembers which URLs its searches returned).
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from typing import Any

from indexes.web import OfflineWeb, VisitRefused


@dataclass(frozen=True)
class Hit:
    title: str
    url: str
    snippet: str
    date: dt.date | None


@dataclass(frozen=True)
class Visit:
    ok: bool
    text: str            # the page, or the refusal message


class WebService:
    def __init__(self, bench: Any) -> None:
        from engine.benchmarks.livenews.data import load

        t0 = time.perf_counter()
        _, pages = load(bench, pages_only=True)
        self.web = OfflineWeb(pages)
        self.build_s = time.perf_counter() - t0
        self.stats = {"queries": 0, "visits": 0, "refused": 0}

    def info(self) -> dict[str, Any]:
        return {"pages": len(self.web.pages), "build_s": round(self.build_s, 2)}

    def search(self, queries: list[str], k: int, blocked: list[str], after: dt.date | None,
               before: dt.date | None) -> list[list[Hit]]:
        self.stats["queries"] += len(queries)
        return [[Hit(r.title, r.url, r.snippet, r.date) for r in self.web.search(q, k, blocked, after, before)]
                for q in queries]

    def visit(self, url: str, returned: list[str], blocked: list[str], max_tokens: int) -> Visit:
        self.stats["visits"] += 1
        try:
            return Visit(True, self.web.visit(url, returned, blocked, max_tokens))
        except VisitRefused as e:
            self.stats["refused"] += 1
            return Visit(False, f"Error: cannot open {url}: {e}. You can only click on links returned "
                                "by your earlier Search actions, and some domains are blocked.")

    def get_stats(self) -> dict[str, Any]:
        return dict(self.stats)
