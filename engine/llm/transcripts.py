"""Transcripts: every message of every model call an episode (or a judge) made, stored once.

A call is one row of the ``calls`` table: who made it (episode, or judge and key), its position,
the sampling parameters, the replica and endpoint that served it, latency, token counts, the
completion and its finish reason, or the error. Its prompt is a list of message ids: each
distinct message (role + content) is one row of the ``messages`` table, keyed by a hash of its
content, so the system prompt every episode shares, and every turn an agent resends, is stored
once per run dir (per flush at worst; readers deduplicate by id). ``docs/design/transcripts.md``
gives the storage cost per episode of each benchmark.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


def message_id(role: str, content: str) -> str:
    return hashlib.sha256(f"{role}\0{content}".encode("utf-8", "surrogatepass")).hexdigest()[:20]


@dataclass
class CallRecord:
    """One model call as the client saw it."""
    messages: list[dict[str, str]]
    completion: str = ""
    finish_reason: str = ""
    error: str = ""
    model: str = ""
    replica: int = -1
    endpoint: str = ""                 # scheme://host:port (never a path or query)
    params: dict[str, Any] = field(default_factory=dict)   # max_tokens, temperature, top_p, seed, constraints
    tokens_in: int = 0
    tokens_out: int = 0
    latency_s: float = 0.0
    started_at: float = 0.0


def rows(calls: Sequence[CallRecord], episode_id: str, purpose: str = "episode", judge: str = "",
         key: str = "") -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The ``calls`` rows of ``calls`` and the ``messages`` rows they refer to (by id)."""
    import datetime as dt

    out: list[dict[str, Any]] = []
    msgs: dict[str, dict[str, Any]] = {}
    for i, c in enumerate(calls):
        ids = []
        for m in c.messages:
            role, content = str(m.get("role", "")), str(m.get("content", ""))
            mid = message_id(role, content)
            msgs.setdefault(mid, {"message_id": mid, "role": role, "content": content})
            ids.append(mid)
        out.append({"episode_id": episode_id, "purpose": purpose, "judge": judge, "key": key, "call": i,
                    "message_ids": ids, "completion": c.completion, "finish_reason": c.finish_reason,
                    "error": c.error, "model": c.model, "replica": c.replica, "endpoint": c.endpoint,
                    "params": json.dumps(c.params, sort_keys=True, default=str), "tokens_in": c.tokens_in,
                    "tokens_out": c.tokens_out, "latency_s": c.latency_s,
                    "started_at": dt.datetime.fromtimestamp(c.started_at or 0, tz=dt.UTC)})
    return out, msgs


def conversation(call: dict[str, Any], messages: dict[str, dict[str, Any]]) -> list[dict[str, str]]:
    """A stored call's prompt as messages again (a message a reader cannot find is marked)."""
    out = []
    for mid in call.get("message_ids") or []:
        m = messages.get(mid)
        out.append({"role": m["role"], "content": m["content"]} if m else
                   {"role": "?", "content": f"[message {mid} not in the store]"})
    return out
