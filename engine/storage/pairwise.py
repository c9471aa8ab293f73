"""A pairwise dir (:class:`PairwiseStore`): planned comparisons and their verdicts."""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa

from engine.storage.judgements import JudgedDir
from engine.storage.schema import COMPARISON_SCHEMA, JUDGEMENT_SCHEMA
from engine.storage.select import pick
from engine.storage.shards import new_batch_id

log = logging.getLogger("dateline.storage")


class PairwiseStore(JudgedDir):
    """A pairwise-judging directory: the planned comparisons and their judgements."""
    SUBDIRS = ("comparisons", "judgements")

    def _tables(self) -> list[tuple[str, pa.Schema]]:
        return [("comparisons", COMPARISON_SCHEMA), ("judgements", JUDGEMENT_SCHEMA)]

    def write_comparisons(self, rows: list[dict[str, Any]]) -> str:
        if not rows:
            return ""
        batch_id = new_batch_id()
        rows = [{**r, "batch_id": batch_id} for r in rows]
        self.write(self._table("comparisons", rows, COMPARISON_SCHEMA)[0], "comparisons", f"part-{batch_id}.parquet")
        return batch_id

    def comparisons(self) -> list[dict[str, Any]]:
        """One row per comparison id (the first written; a comparison's content never changes)."""
        t = self.read("comparisons", COMPARISON_SCHEMA)
        return t.take(pick(t, ["comparison_id"])).to_pylist()
