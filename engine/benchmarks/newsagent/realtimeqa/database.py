"""The historical database of the converter (steps 4, 5 and 7 of the specification in the package
docstring): one object per kept sentence, its id, its rendering as a quote or a description, and
the inverted index that finds the objects a sentence matches before a date."""

from __future__ import annotations

import bisect
import datetime as dt
import hashlib
import math
from collections import Counter
from dataclasses import dataclass
from itertools import chain
from typing import Any

from engine.benchmarks.newsagent.realtimeqa.text import MIN_CONTENT_TOKENS, as_quote


@dataclass
class DbObject:
    """One database object (step 7): a sentence, dated by its article, with its rendered text and
    content tokens; ``urls`` are all the articles that produced it (it is deduplicated)."""

    object_id: str
    date: dt.date
    sentence: str
    text: str
    kind: str
    source: str
    tokens: frozenset[str]
    urls: set[str]


def render(sentence: str) -> tuple[str, str]:
    """(text, kind) of a sentence as in step 4: ``[Name] quoted words`` and "quote", or itself and "description"."""
    q = as_quote(sentence)
    return (f"[{q[0]}] {q[1]}", "quote") if q else (sentence, "description")


def object_id(url: str, sentence: str, taken: dict[str, Any]) -> str:
    """``"rtqa-" + sha1(url + "\\n" + sentence)[:12]``, longer only when that id is in ``taken``."""
    digest = hashlib.sha1(f"{url}\n{sentence}".encode()).hexdigest()
    for n in (12, 16, 24, 40):  # longer only on a (never yet seen) 48-bit collision
        oid = "rtqa-" + digest[:n]
        if oid not in taken:
            return oid
    raise RuntimeError(f"object id collision for {url}")


class Index:
    """Inverted index over database objects (object indices ascending = date ascending)."""

    def __init__(self, objects: list[DbObject]) -> None:
        self.objects = objects
        self.ordinals = [o.date.toordinal() for o in objects]
        self.sizes = [len(o.tokens) for o in objects]
        self.postings: dict[str, list[int]] = {}
        for i, o in enumerate(objects):
            if len(o.tokens) >= MIN_CONTENT_TOKENS:
                for t in o.tokens:
                    self.postings.setdefault(t, []).append(i)

    def matches(self, tokens: frozenset[str], before: dt.date, threshold: float) -> list[int]:
        """Indices of objects dated strictly before ``before`` that match ``tokens``."""
        if len(tokens) < MIN_CONTENT_TOKENS:
            return []
        cut = bisect.bisect_left(self.ordinals, before.toordinal())
        lists = []
        for t in tokens:
            p = self.postings.get(t)
            if p:
                lists.append(p[:bisect.bisect_left(p, cut)])
        n = len(tokens)
        counts = Counter(chain.from_iterable(lists))
        floor = math.ceil(threshold * MIN_CONTENT_TOKENS - 1e-9)  # no match shares fewer tokens
        sizes = self.sizes
        out = [i for i, c in counts.items() if c >= floor and c >= threshold * min(n, sizes[i]) - 1e-9]
        out.sort()
        return out
