"""Helpers to pull one JSON action out of free-form model output (shared by benchmarks)."""

from __future__ import annotations

import json
import re
from typing import Any

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S | re.I)


class ParseError(ValueError):
    """The output holds no usable action; the message is shown to the model."""


def first_json_object(text: str) -> dict[str, Any]:
    """The first balanced ``{...}`` that parses as a JSON object (code fences allowed)."""
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    last_err = "no JSON object found"
    for cand in candidates:
        start = cand.find("{")
        while start != -1:
            depth, in_str, esc = 0, False, False
            for i in range(start, len(cand)):
                ch = cand[i]
                if in_str:
                    if esc:
                        esc = False
                    elif ch == "\\":
                        esc = True
                    elif ch == '"':
                        in_str = False
                elif ch == '"':
                    in_str = True
                elif ch == "{":
                    depth += 1
                elif ch == "}":
                    depth -= 1
                    if depth == 0:
                        try:
                            obj = json.loads(cand[start: i + 1])
                        except json.JSONDecodeError as e:
                            last_err = f"invalid JSON ({e.msg})"
                            break
                        if isinstance(obj, dict):
                            return obj
                        break
            else:
                last_err = "unterminated JSON object (output cut off?)"
            start = cand.find("{", start + 1)
    raise ParseError(last_err)


def get_ci(obj: dict[str, Any], *names: str) -> Any:
    """Case-insensitive key lookup."""
    lower = {k.lower(): v for k, v in obj.items() if isinstance(k, str)}
    for n in names:
        if n.lower() in lower:
            return lower[n.lower()]
    return None
