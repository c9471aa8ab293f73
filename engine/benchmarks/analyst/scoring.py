"""Parsing judge outputs and the arithmetic of the analyst metrics (paper section 4).

* Checklist: each criterion is scored 1-5 in its own call (figure 16), parsed from the last
  "therefore, the rating is: X". The score is the sum over criteria / (5 x criteria) x 100:
  the paper does not state it, but its per-report numbers (93.33, 57.33, 45.3, 86.7 %) are all
  multiples of 1/75 for 15 criteria, which this formula gives and ``(s-1)/4`` cannot. A
  criterion without a rating (malformed after retries, or reasoning cut at max_tokens) makes the
  whole score missing (counted by the metrics), never a score over the criteria that finished.
  Its floor is 20 % (every criterion rated 1).
* Claims: figure 17's JSON object {claim: quote}; hallucination % = unsupported claims / claims
  meant to be verified x 100, where a verification that cannot be parsed (or was never made)
  counts as unsupported and its share is reported beside it (``unverified``), never dropped.
* Figures: captions from Markdown images (alt text) and "Figure N: ..." lines; a reference
  figure is covered when some generated caption's MiniLM cosine similarity reaches the
  threshold (the paper gives none; ``agent.figure_match_threshold``, default 0.6).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.llm.actions import ParseError, first_json_object

# Each run of whitespace is read by one \s* (r"is\s*:?\s*\**\s*" backtracked cubically: a
# judge's "rating is" followed by a few thousand blanks took minutes).
_RATING = re.compile(r"rating\s+is\s*(?::\s*)?(?:\*+\s*)?\(?([1-5])(?:\s*/\s*5)?\b", re.I)


def parse_rating(text: str) -> int | None:
    """The X of the last "therefore, the rating is: X" (1-5), else None. "1/5" is 1."""
    found = _RATING.findall(text)
    return int(found[-1]) if found else None


def parse_checklist(text: str) -> list[str] | None:
    """Figure 15's output: top-level "- The response should ..." items with their 1-5 bullets.
    Returns one string per criterion (description + guide), or None when none parse."""
    items: list[list[str]] = []
    for line in text.splitlines():
        if re.match(r"^- \S", line):
            items.append([line[2:].strip()])
        elif items and re.match(r"^\s+- [1-5]\s*:", line):
            items[-1].append(line.strip())
    complete = ["\n".join([c[0], *c[1:]]) for c in items if len(c) == 6]
    return complete or None


_PLACEHOLDER = re.compile(r"^\s*atomic claim \d+ here\s*$", re.IGNORECASE)


def valid_claims(obj: object) -> dict[str, str] | None:
    """``{claim: quote}`` as figure 17 asks, or None. Keys copied from the prompt's example
    ("Atomic claim 1 here") are not claims: verifying them would count a formatting slip as a
    hallucination, so such an answer is malformed."""
    if not isinstance(obj, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in obj.items()):
        return None
    if any(_PLACEHOLDER.match(k) for k in obj):
        return None
    return {k.strip(): v for k, v in obj.items() if k.strip()}


def parse_claims(text: str) -> dict[str, str] | None:
    try:
        obj = first_json_object(text)
    except (ParseError, ValueError):
        return None
    return valid_claims(obj)


def stored_claims(value: str | None) -> list[str] | None:
    """The claims of a stored ``claims`` judgement (None: failed, or stored before a parser fix
    made it invalid: it is read through the same check)."""
    if not value:
        return None
    claims = valid_claims(json.loads(value))
    return list(claims) if claims is not None else None


# The whole output is the one word the prompt asks for, anchored at both ends: optionally wrapped in
# whitespace, markdown, quotes, brackets or punctuation (never "?"), optionally after an
# "Answer:" / "Verdict:" label. "Not supported", "partially supported" or prose are not verdicts.
_VERDICT = re.compile(r"^(?:[^\w?]|_)*(?:(?:final\s+)?(?:answer|verdict)(?:[^\w?]|_)*?:(?:[^\w?]|_)*)?"
                      r"(UNSUPPORTED|SUPPORTED)(?:[^\w?]|_)*$", re.IGNORECASE)


def parse_verdict(text: str) -> bool | None:
    """True for SUPPORTED, False for UNSUPPORTED, None for anything but that one word (see
    ``_VERDICT``): a malformed verdict leaves the claim unverified instead of guessing."""
    text = text.strip()
    m = _VERDICT.match(text) if len(text) <= 64 else None
    return None if m is None else m.group(1).upper() == "SUPPORTED"


CLAIM_VERIFICATION = """You check whether a claim is supported by source excerpts. (This prompt is dateline's: the paper does not print its verification prompt.)

Source excerpts:
{evidence}

Claim:
{claim}

Is the claim fully supported by the source excerpts above? Numbers, names and dates must match. Answer with one word: SUPPORTED or UNSUPPORTED."""


@dataclass(frozen=True)
class ChecklistScore:
    percent: float | None      # None when no criterion could be scored
    scored: int
    unscored: int


CHECKLIST_FLOOR = 20.0          # every criterion rated 1: the score of the worst report written


def checklist_score(ratings: Sequence[int | None]) -> ChecklistScore:
    """The score over every criterion; None when any criterion has no rating (the score over the
    others would be over the criteria the judge happened to finish)."""
    ok = [r for r in ratings if r is not None]
    if any(r < 1 or r > 5 for r in ok):
        raise ValueError(f"ratings must be 1-5, got {ok}")
    complete = bool(ratings) and len(ok) == len(ratings)
    pct = 100.0 * sum(ok) / (5 * len(ok)) if complete else None
    return ChecklistScore(pct, len(ok), len(ratings) - len(ok))


@dataclass(frozen=True)
class HallucinationRate:
    percent: float | None
    claims: int
    unsupported: int
    unverified: int


def hallucination_rate(verdicts: Sequence[bool | None]) -> HallucinationRate:
    """Unsupported share of the claims meant to be verified; a verdict that could not be parsed
    (None) counts as unsupported, and ``unverified`` says how many those were."""
    unverified = sum(1 for v in verdicts if v is None)
    bad = sum(1 for v in verdicts if v is not True)
    return HallucinationRate(100.0 * bad / len(verdicts) if verdicts else None, len(verdicts), bad, unverified)


_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FIG_LINE = re.compile(r"^\s*\**\s*(?:Figure|Fig\.|Chart)\s*\d+[.:]?\**\s*[:.\-–]?\s*(.+)$", re.I | re.M)


@dataclass(frozen=True)
class Figure:
    caption: str
    path: str        # "" for a caption without an image


def figures(markdown: str) -> list[Figure]:
    """Figures of a Markdown report: each image with its alt text, or (when that is empty) the
    "Figure N:" line right below it, which belongs to the image either way; "Figure N:" lines without an image count too (a
    reference report scraped from the web keeps captions even where images are gone)."""
    out: list[Figure] = []
    used_lines: set[int] = set()
    lines = markdown.splitlines()
    for i, line in enumerate(lines):
        for m in _IMAGE.finditer(line):
            cap = m.group(1).strip()
            for j in (i + 1, i + 2):            # a "Figure N:" line right below is this image's caption
                if j < len(lines) and (fm := _FIG_LINE.match(lines[j])):
                    cap = cap or fm.group(1).strip()
                    used_lines.add(j)
                    break
            out.append(Figure(cap, m.group(2)))
    for i, line in enumerate(lines):
        if i not in used_lines and not _IMAGE.search(line) and (fm := _FIG_LINE.match(line)):
            out.append(Figure(fm.group(1).strip(), ""))
    return out


def coverage(similarity: Any, threshold: float) -> tuple[float | None, int, int]:
    """``similarity[i, j]``: reference figure i vs generated figure j. Returns (percent covered,
    covered, reference figures); percent is None when the reference has no figures."""
    n_ref = len(similarity)
    if n_ref == 0:
        return None, 0, 0
    covered = sum(1 for row in similarity if len(row) and max(row) >= threshold)
    return 100.0 * covered / n_ref, covered, n_ref
