"""End-to-end comparison of two articles (paper section 3.3): the dimension-wise prompt of
appendix B.3 and the single-turn baseline of appendix C, verbatim, and their parsers.

The prompts keep the paper's emphasis markers (``**``) as printed; the PDF lost only line
breaks. A parsed judgement is a small JSON string (stored as the judgement's value):
``{"overall": "first"|"second", "dimensions": {name: "first"|"second"|"tie"|null}}``.
The overall winner is required (the prompt allows no tie): output without one is malformed
and retried by the judge stage. A dimension that is missing or has an unusable winner is kept
as null (a *partial* judgement): the overall verdict still counts, and the report shows per
dimension how many judgements it rests on.
"""

from __future__ import annotations

import json
import re
from typing import Any

DIMENSIONS = ("Factual Consistency", "Logical Consistency", "Importance", "Readability", "Objectivity",
              "Journalistic Style")
PROTOCOLS = ("dimension", "single")

DIMENSION_PROMPT = """You are an expert evaluator of news articles.

Evaluate the two candidate articles on **6 dimensions** below. Decide the winner per dimension, then pick an **Overall** winner. Briefly explain each choice. **Return a single JSON object. Do NOT use Markdown code fences or backticks.**

Dimensions:
1. Factual Consistency: factually sound and correct.
2. Logical Consistency: coherent and self-consistent.
3. Importance: conveys more important information.
4. Readability: fluent and easy to read.
5. Objectivity: neutral, minimal opinion.
6. Journalistic Style: adheres to journalistic style.

Overall: best considering all dimensions above. **No tie allowed.**

First Article:
{first}

Second Article:
{second}

Return **only** JSON with this schema (no extra text):
{{
 "Factual Consistency": {{"winner": "first"|"second"|"tie", "reasoning": "brief"}},
 "Logical Consistency": {{"winner": "first"|"second"|"tie", "reasoning": "brief"}},
 "Importance": {{"winner": "first"|"second"|"tie", "reasoning": "brief"}},
 "Readability": {{"winner": "first"|"second"|"tie", "reasoning": "brief"}},
 "Objectivity": {{"winner": "first"|"second"|"tie", "reasoning": "brief"}},
 "Journalistic Style": {{"winner": "first"|"second"|"tie", "reasoning": "brief"}},
 "Overall": {{"winner": "first"|"second", "reasoning": "brief"}}
}}"""

SINGLE_PROMPT = """You are an expert evaluator of news articles.
Read the two candidate articles below and decide which one is better overall as a news article.

First Article:
{first}

Second Article:
{second}

Return only a JSON object with the following format:
{{
 "winner": "first" | "second",
 "reason": "brief explanation"
}}"""


def messages(protocol: str, first: str, second: str) -> list[dict[str, str]]:
    template = {"dimension": DIMENSION_PROMPT, "single": SINGLE_PROMPT}[protocol]
    return [{"role": "user", "content": template.format(first=first, second=second)}]


def _verdict_schema(allow_tie: bool, reason_key: str) -> dict[str, Any]:
    return {"type": "object",
            "properties": {"winner": {"type": "string",
                                      "enum": ["first", "second", "tie"] if allow_tie else ["first", "second"]},
                           reason_key: {"type": "string", "maxLength": 160}},
            "required": ["winner", reason_key]}


def json_schema(protocol: str) -> dict[str, Any]:
    """The prompt's output schema, for judges that constrain decoding (vLLM structured outputs).
    Reasons are bounded so a small judge cannot ramble past ``max_tokens``."""
    if protocol == "single":
        return _verdict_schema(False, "reason")
    props = {d: _verdict_schema(True, "reasoning") for d in DIMENSIONS}
    props["Overall"] = _verdict_schema(False, "reasoning")
    return {"type": "object", "properties": props, "required": [*DIMENSIONS, "Overall"]}


def _norm_key(k: str) -> str:
    return re.sub(r"[^a-z]", "", k.lower())


_SIDES = {"first": "first", "second": "second", "tie": "tie", "firstarticle": "first",
          "secondarticle": "second", "article1": "first", "article2": "second", "1": "first", "2": "second"}


def _side(v: Any) -> str | None:
    if isinstance(v, dict):
        v = v.get("winner", v.get("Winner"))
    if isinstance(v, float):        # 1.0 is 1; 1.5, NaN and infinity are no side
        v = int(v) if v.is_integer() else None
    if isinstance(v, int) and not isinstance(v, bool):
        v = str(v)
    if not isinstance(v, str):
        return None
    return _SIDES.get(re.sub(r"[^a-z0-9]", "", v.lower()))


def _json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in ``text``, tolerating code fences and prose around it."""
    t = re.sub(r"```(?:json)?", "", text)
    start = t.find("{")
    while start != -1:
        try:
            obj, _ = json.JSONDecoder().raw_decode(t[start:])
            if isinstance(obj, dict):
                return obj
        except (ValueError, RecursionError):   # JSONDecodeError, an over-long integer, deep nesting
            pass
        start = t.find("{", start + 1)
    return None


def parse(protocol: str, text: str) -> str | None:
    """The normalised verdict (JSON string), or None when the output is unusable."""
    obj = _json_object(text)
    if obj is None:
        return None
    keys = {_norm_key(k): v for k, v in obj.items()}
    if protocol == "single":
        overall = _side(keys.get("winner"))
        dims: dict[str, str | None] = {}
    else:
        overall = _side(keys.get("overall"))
        dims = {}
        for d in DIMENSIONS:
            side = _side(keys.get(_norm_key(d)))
            dims[d] = side
    if overall not in ("first", "second"):
        return None
    return json.dumps({"overall": overall, "dimensions": dims}, sort_keys=True)
