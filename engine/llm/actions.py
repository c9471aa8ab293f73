"""Helpers to pull one JSON action out of free-form model output (shared by benchmarks)."""

from __future__ import annotations

import json
import re
from typing import Any

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S | re.I)
# Characters the brace scan may visit per character of output (plus a floor). Each "{" starts a
# scan that can run to the end, so degenerate output ("{{{{...", '{"a": {"a": ...' to max_tokens)
# would cost quadratic time, seconds per turn on the worker's event loop; this keeps it linear.
# Real outputs need one or a few scans.
_SCAN_PER_CHAR, _SCAN_FLOOR = 20, 100_000


class ParseError(ValueError):
    """The output holds no usable action; the message is shown to the model."""


def first_json_object(text: str) -> dict[str, Any]:
    """The first balanced ``{...}`` that parses as a JSON object (code fences allowed) and holds
    only valid Unicode; raises :class:`ParseError` (never another exception) when there is none."""
    stripped = text.strip()
    if stripped.startswith("{") and not _FENCE.search(text):
        # the common case, a bare object (a judge's claims, an action): one C-level parse; the
        # same object the scan below would find, since valid JSON balances its own braces
        try:
            obj = json.loads(stripped)
        except (ValueError, RecursionError):
            pass
        else:
            if isinstance(obj, dict) and not _lone_surrogate(obj):
                return obj
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    last_err = "no JSON object found"
    budget = _SCAN_FLOOR + _SCAN_PER_CHAR * len(text)
    for cand in candidates:
        start = cand.find("{")
        while start != -1:
            depth, in_str, esc = 0, False, False
            end = min(len(cand), start + budget)
            for i in range(start, end):
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
                        except RecursionError:
                            last_err = "invalid JSON (nested too deeply)"
                            break
                        except ValueError:       # an integer past int()'s 4,300-digit limit
                            last_err = "invalid JSON (a number with too many digits)"
                            break
                        if isinstance(obj, dict):
                            if _lone_surrogate(obj):
                                # an escape such as \ud800 decodes to a str that UTF-8 cannot encode, so
                                # neither the step row (Parquet) nor the next prompt could hold it
                                last_err = "invalid JSON (a string holds an unpaired surrogate escape)"
                                break
                            return obj
                        break
            else:
                if end < len(cand):
                    raise ParseError(f"{last_err}; gave up: too many unbalanced braces")
                last_err = "unterminated JSON object (output cut off?)"
            budget -= i + 1 - start
            start = cand.find("{", start + 1)
    raise ParseError(last_err)


def _lone_surrogate(obj: Any) -> bool:
    """Whether a decoded JSON value holds a string with an unpaired surrogate."""
    todo = [obj]
    while todo:
        x = todo.pop()
        if isinstance(x, str):
            try:
                x.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(x, dict):
            todo += x.keys()
            todo += x.values()
        elif isinstance(x, list):
            todo += x
    return False


def get_ci(obj: dict[str, Any], *names: str) -> Any:
    """Case-insensitive key lookup."""
    lower = {k.lower(): v for k, v in obj.items() if isinstance(k, str)}
    for n in names:
        if n.lower() in lower:
            return lower[n.lower()]
    return None
