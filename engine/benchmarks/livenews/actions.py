"""The action blocks of LiveNewsBench figure 7: one block per turn,

    ```action
    type: Search
    query 1
    query 2
    ```

with ``type`` Search (queries), Click/Visit (URLs) or Finish (the answer). The PDF loses the
fence characters; we accept the block fenced with ``` (optionally tagged ``action``) or
delimited by lines that read ``action``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.llm.actions import ParseError

KINDS = {"search": "search", "click": "visit", "visit": "visit", "finish": "finish"}
_FENCED = re.compile(r"```[ \t]*(?:action)?[ \t]*\n(.*?)```", re.S | re.I)
_BARE = re.compile(r"^[ \t]*action[ \t]*\n(.*?)\n[ \t]*action[ \t]*$", re.S | re.I | re.M)


@dataclass(frozen=True)
class LiveAction:
    kind: str                 # search | visit | finish
    items: tuple[str, ...]    # queries, URLs, or (answer,)


def parse_action_block(text: str) -> LiveAction:
    blocks = [b for b in _FENCED.findall(text) if re.search(r"^\s*type\s*:", b, re.M | re.I)]
    if not blocks:
        blocks = _BARE.findall(text)
    if not blocks:
        raise ParseError("no action block")
    if len(blocks) > 1:
        raise ParseError(f"{len(blocks)} action blocks; only one action block per turn")
    lines = [ln.strip() for ln in blocks[0].strip().splitlines() if ln.strip()]
    m = re.match(r"type\s*:\s*(\w+)", lines[0], re.I) if lines else None
    if not m:
        raise ParseError('the action block must start with "type: Search|Click|Finish"')
    kind = KINDS.get(m.group(1).lower())
    if kind is None:
        raise ParseError(f"unknown action type {m.group(1)!r}")
    items = tuple(lines[1:])
    if not items:
        raise ParseError(f"{m.group(1)} needs at least one {'query' if kind == 'search' else 'URL' if kind == 'visit' else 'answer line'}")
    if kind == "finish":
        items = (" ".join(items),)
    return LiveAction(kind, items)
