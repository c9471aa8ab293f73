"""What a run planned for each configuration (the ``plans`` table: the denominator of its metrics)
and which of its episodes are finished (the ``episodes`` table's ok rows): what planning reads of
a run dir before it runs anything. :class:`~engine.storage.episodes.EpisodeStore` builds on it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.storage.schema import PLAN_SCHEMA
from engine.storage.select import all_of, field_in, pick, sorted_unique
from engine.storage.shards import ShardedDir, new_batch_id


@dataclass(frozen=True)
class StoredPlan:
    """A configuration's newest plan: its episodes ``(episode_id, task_id, seed, failure)``, the hash of
    that set, and the run's scoring policy and evaluation settings (JSON) when it was planned; the
    date of each episode's question (by episode id, dated questions only) and the model's
    knowledge cutoff ("" unknown), which split its results (engine/scoring/cutoff.py)."""
    config_hash: str
    episodes: list[tuple[str, str, int, str]]
    task_set: str
    score_failures: str
    evaluation: str
    dates: dict[str, str] = field(default_factory=dict)
    knowledge_cutoff: str = ""


class PlanTable(ShardedDir):
    """The ``plans`` table of a run dir, and the finished episodes a plan is compared with."""
    schema: pa.Schema            # the episodes table's schema (the store's benchmark fields included)

    def write_plan(self, config_hash: str, planned: Sequence[tuple[str, str, int, str]], task_set: str,
                   score_failures: str, evaluation: str, dates: Sequence[str | None] | None = None,
                   knowledge_cutoff: str | None = None) -> bool:
        """Record what a run planned for ``config_hash``: ``(episode_id, task_id, seed, failure)``
        per episode, and (``dates``, aligned with it) each one's question date. Skipped (False)
        when the newest plan stored for it is the same."""
        have = self.plans([config_hash]).get(config_hash)
        dated = {p[0]: d for p, d in zip(planned, dates or ()) if d}
        if have is not None and have.task_set == task_set and have.score_failures == score_failures \
                and have.evaluation == evaluation and have.dates == dated \
                and have.knowledge_cutoff == (knowledge_cutoff or ""):
            return False
        batch_id = new_batch_id()
        t = pa.Table.from_pydict({
            "config_hash": [config_hash] * len(planned), "batch_id": [batch_id] * len(planned),
            "episode_id": [p[0] for p in planned], "task_id": [p[1] for p in planned],
            "seed": [p[2] for p in planned], "failure": [p[3] for p in planned], "task_set": [task_set] * len(planned),
            "score_failures": [score_failures] * len(planned), "evaluation": [evaluation] * len(planned),
            "date": [dated.get(p[0]) for p in planned], "knowledge_cutoff": [knowledge_cutoff] * len(planned)},
            schema=PLAN_SCHEMA)
        self.write(t, "plans", f"part-{batch_id}.parquet")
        return True

    def plans(self, config_hash: Iterable[str] | None = None) -> dict[str, StoredPlan]:
        """The newest plan of each configuration (of those in ``config_hash``), or none for a
        configuration run before plans were recorded (its stored episodes are then its plan)."""
        t = self.read("plans", PLAN_SCHEMA, None, field_in("config_hash", None if config_hash is None else list(config_hash)))
        if t.num_rows == 0:
            return {}
        newest = t.group_by("config_hash").aggregate([("batch_id", "max")])
        t = t.join(newest.rename_columns(["config_hash", "__newest"]), "config_hash")
        t = t.filter(pc.equal(t["batch_id"], t["__newest"]))
        out: dict[str, StoredPlan] = {}
        for h in cast("list[str]", pc.unique(t["config_hash"]).to_pylist()):
            sub = t.filter(pc.equal(t["config_hash"], pa.scalar(h)))
            sub = sub.take(pick(sub, ["episode_id"]))
            first = sub.slice(0, 1).to_pylist()[0]
            out[h] = StoredPlan(h, list(zip(cast("list[str]", sub["episode_id"].to_pylist()),
                                            cast("list[str]", sub["task_id"].to_pylist()),
                                            cast("list[int]", sub["seed"].to_pylist()),
                                            [f or "" for f in sub["failure"].to_pylist()])),
                                first["task_set"] or "", first["score_failures"] or "", first["evaluation"] or "",
                                {e: d for e, d in zip(cast("list[str]", sub["episode_id"].to_pylist()),
                                                      sub["date"].to_pylist()) if d},
                                first["knowledge_cutoff"] or "")
        return out

    def finished_ids(self, config_hash: str | Iterable[str] | None = None,
                     statuses: Sequence[str] = ("ok",)) -> set[str]:
        """Ids of episodes that need no re-run: a row with one of ``statuses`` (default ok; a
        resumed run adds "error" unless ``run.retry_failed``). One column read."""
        t = self.read("episodes", self.schema, ["episode_id"],
                       all_of(pc.field("status").isin(list(statuses)), field_in("config_hash", config_hash)))
        return set(cast("list[str]", pc.unique(t["episode_id"]).to_pylist()))     # a non-nullable column

    def _plans_keep(self, files: list[str]) -> pa.Array[Any]:
        """The rows of each configuration's newest plan."""
        t = self.read("plans", PLAN_SCHEMA, ["config_hash", "batch_id"], files=files)
        newest = t.group_by("config_hash").aggregate([("batch_id", "max")])
        t = t.append_column("__i", pa.array(np.arange(t.num_rows, dtype=np.int64)))
        t = t.join(newest.rename_columns(["config_hash", "__newest"]), "config_hash")
        return sorted_unique(pc.filter(t["__i"], pc.equal(t["batch_id"], t["__newest"])))
