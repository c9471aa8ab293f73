"""Stage calls inside a draft, kept by content: a build never repeats a stored call.

A draft may make several generator calls (LiveNewsBench: relevance, then drafting). Each is
recorded in the draft's row (the ``stage_calls`` column, JSON) with its content key: a hash of the
stage, its prompt version, the model's identity and the exact messages. :class:`StageMemo`, a
service of every build, indexes the stored rows of the run dir when the build starts; a draft
asks it before calling the model. So after a kill only calls that were never stored run again,
and a changed drafting prompt (new draft ids) still finds the relevance answers it did not change.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa

from engine.config.values import stable_hash
from engine.protocol import EpisodeContext, ServiceSpec
from engine.storage import EpisodeStore, is_run_dir

log = logging.getLogger("dateline.build")

MEMO = "stage_memo"                    # the service's name in ctx.services
COLUMN = "stage_calls"                 # the draft row's column of its stage calls (JSON list)


@dataclass(frozen=True)
class StageCall:
    """One generator call of a draft stage, as stored in its row."""
    stage: str
    version: str
    key: str                 # content key (:func:`call_key`)
    output: str
    tokens_in: int = 0
    tokens_out: int = 0
    model: str = ""          # the model identity the key was made with
    memo: bool = False       # answered from a stored call, not by the model


def call_key(stage: str, version: str, model: str, messages: Sequence[dict[str, str]], **params: Any) -> str:
    return stable_hash(stage, version, model, list(messages), params, n=24)


class StageMemo:
    """The stored stage calls of one run dir for one model identity (a service actor: built once,
    read by every draft). It only reads: a call is stored with the draft's row."""

    def __init__(self, root: str, model: str) -> None:
        self.model = model
        self.calls: dict[str, dict[str, Any]] = {}
        self.hits = 0
        if is_run_dir(root):
            t = EpisodeStore(root, [pa.field(COLUMN, pa.string())]).episodes([COLUMN], ok_only=True)
            for raw in (t.column(COLUMN).to_pylist() if COLUMN in t.schema.names else []):
                for c in json.loads(raw or "[]"):
                    if c.get("model") == model and not c.get("memo"):
                        self.calls.setdefault(c["key"], c)
        log.info("stage memo: %d stored calls of %s", len(self.calls), model)

    def get(self, key: str) -> dict[str, Any] | None:
        hit = self.calls.get(key)
        self.hits += hit is not None
        return hit

    def identity(self) -> str:
        return self.model

    def get_stats(self) -> dict[str, Any]:
        """What the run's info records of the service: stored calls known, and reused."""
        return {"stored_calls": len(self.calls), "reused": self.hits}


def memo_service(root: str, model: str) -> ServiceSpec:
    return ServiceSpec(MEMO, "engine.build.memo:StageMemo", {"root": root, "model": model}, num_cpus=0.1,
                       identity=f"{MEMO}:{root}:{model}")


async def stage_call(ctx: EpisodeContext, calls: list[StageCall], stage: str, version: str,
                     messages: list[dict[str, str]], max_tokens: int,
                     json_schema: dict[str, Any] | None = None) -> str:
    """The answer of the generator to ``messages`` for ``stage``: the stored one when the memo has
    it, else the model's (recorded as a step either way, and appended to ``calls``)."""
    memo = ctx.services.get(MEMO)
    model = str(await memo.identity()) if memo is not None else ""
    key = call_key(stage, version, model, messages, max_tokens=max_tokens, json_schema=json_schema)
    hit = await memo.get(key) if memo is not None else None
    chars = sum(len(m["content"]) for m in messages)
    if hit is not None:
        calls.append(StageCall(stage, version, key, hit["output"], model=model, memo=True))
        ctx.record(turn=stage, observation_chars=chars, raw_output=hit["output"], parsed_action="",
                   result="stored call (memo)", ok=True)
        return str(hit["output"])
    c = await ctx.model.chat(messages, max_tokens, json_schema=json_schema)
    calls.append(StageCall(stage, version, key, c.text, c.prompt_tokens, c.completion_tokens, model))
    ctx.record(turn=stage, observation_chars=chars, raw_output=c.text, parsed_action="", result="", ok=True,
               tokens_in=c.prompt_tokens, tokens_out=c.completion_tokens, latency_s=c.latency_s)
    return c.text


def dump_calls(calls: Sequence[StageCall]) -> str:
    return json.dumps([asdict(c) for c in calls], ensure_ascii=False, sort_keys=True)
