"""The judgements table, shared by run dirs and pairwise dirs (:class:`JudgedDir`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.storage.schema import JUDGEMENT_ROW_GROUP, JUDGEMENT_SCHEMA
from engine.storage.select import JUDGE_INFO, all_of, config_rows, field_in, group_starts, ok_rank, pick, sorted_unique
from engine.storage.shards import ShardedDir, new_batch_id

log = logging.getLogger("dateline.storage")


class JudgedDir(ShardedDir):
    """A sharded folder with a judgements table (a run dir, a pairwise dir): judge results, keyed
    by (episode or comparison, judge identity, key); readers keep per key an ok row over a failed
    one, then the newest."""

    def write_transcripts(self, batch_id: str, calls: Sequence[dict[str, Any]],
                          messages: Sequence[dict[str, Any]]) -> None:
        """Where a judgement's calls and messages go: nowhere here (a pairwise dir keeps no
        transcripts); a run dir's calls and messages tables (:class:`EpisodeStore`)."""

    def _judgement_table(self, columns: list[str], filter: pc.Expression | None = None,
                         files: list[str] | None = None) -> pa.Table:
        t = self.read("judgements", JUDGEMENT_SCHEMA, list(dict.fromkeys(columns)), filter, files)
        return t.append_column("__ok", ok_rank(t["ok"]))

    # -- judgements ------------------------------------------------------------------------
    def write_judgements(self, rows: list[dict[str, Any]]) -> str:
        """One shard of judge results (the judge stage flushes as it goes); a row's ``_calls`` /
        ``_messages`` (its transcript, engine/llm/transcripts.py) go to the calls and messages tables."""
        if not rows:
            return ""
        batch_id = new_batch_id()
        calls = [c for r in rows for c in r.pop("_calls", [])]
        messages = [m for r in rows for m in r.pop("_messages", {}).values()]
        if calls:
            self.write_transcripts(batch_id, calls, messages)
        for r in rows:
            r["batch_id"] = batch_id
        # sorted by configuration in small row groups: a reader of one configuration
        # (engine.scoring.views.reduce) skips the other configurations' row groups by their statistics
        t = self._table("judgements", rows, JUDGEMENT_SCHEMA)[0].sort_by("config_hash")
        if t.num_rows:
            self.write(t, "judgements", f"part-{batch_id}.parquet", JUDGEMENT_ROW_GROUP)
        return batch_id

    def judgements(self, judge: str | None = None) -> dict[str, dict[str, str | None]]:
        """``{episode_id: {key: value}}`` for one judge (all judges when None); per (episode, key)
        an ok row wins over a failed one, then the newest. A failed judgement maps to None."""
        t = self._judgement_table(["episode_id", "key", "value", "ok", "batch_id"], field_in("judge", judge))
        t = t.take(pick(t, ["episode_id", "key"], [("__ok", "descending"), ("batch_id", "descending")], True))
        out: dict[str, dict[str, str | None]] = {}
        for r in t.select(["episode_id", "key", "value", "ok"]).to_pylist():
            out.setdefault(r["episode_id"], {})[r["key"]] = r["value"] if r["ok"] else None
        return out

    def judgements_by_judge(self, parse: Callable[[str, str], str | None] | None = None, *,
                            config_hash: str | None = None, episode_ids: Iterable[str] | None = None
                            ) -> dict[str, dict[str, dict[str, str | None]]]:
        """``{judge id: {episode_id: {key: value}}}``, every judge kept apart (same precedence as
        :meth:`judgements`). With ``parse(key, raw_output)``, an ok row's value is re-read from its
        raw output through the current parser, so a parser fix applies to stored judgements: an
        answer the parser now rejects counts as malformed (None). With ``config_hash``, only that
        configuration's judgements: rows stamped with it (row groups of others are skipped by
        their statistics), and rows written before the stamp whose episode is in ``episode_ids``."""
        cols = ["episode_id", "judge", "key", "value", "ok", "batch_id"] + (["raw_output"] if parse else [])
        return self._by_judge(self._judgement_table(cols, config_rows(config_hash, episode_ids)), parse)

    def judged(self, parse: Callable[[str, str], str | None] | None = None, *, config_hash: str | None = None,
               episode_ids: Iterable[str] | None = None
               ) -> tuple[dict[str, dict[str, dict[str, str | None]]], dict[str, dict[str, str]]]:
        """:meth:`judgements_by_judge` and :meth:`judges` from one read of the judgements table
        (what a reduce of one configuration needs of it)."""
        cols = ["episode_id", "judge", "key", "value", "ok", "batch_id", *JUDGE_INFO] + (["raw_output"] if parse
                                                                                          else [])
        t = self._judgement_table(cols, config_rows(config_hash, episode_ids))
        return self._by_judge(t.drop_columns(list(JUDGE_INFO[1:])), parse), self._judges_of(t.select(list(JUDGE_INFO)))

    def _by_judge(self, t: pa.Table, parse: Callable[[str, str], str | None] | None
                  ) -> dict[str, dict[str, dict[str, str | None]]]:
        t = t.append_column("__judge", t["judge"].fill_null(pa.scalar("")))
        t = t.take(pick(t, ["__judge", "episode_id", "key"], [("__ok", "descending"), ("batch_id", "descending")],
                         True))
        out: dict[str, dict[str, dict[str, str | None]]] = {}
        for r in t.drop_columns(["judge", "batch_id", "__ok"]).to_pylist():
            value = r["value"] if r["ok"] else None
            if value is not None and parse is not None:
                value = parse(r["key"], r["raw_output"] or "")
            out.setdefault(r["__judge"], {}).setdefault(r["episode_id"], {})[r["key"]] = value
        return out

    @staticmethod
    def _judge_info_rows(t: pa.Table) -> pa.Array[Any]:
        """Per judge id (null = ""), the row :meth:`judges` describes it by: the first with an
        endpoint kind, else the last (rows written before the identity columns have none)."""
        i = pa.array(np.arange(t.num_rows, dtype=np.int64), pa.int64())
        has = ok_rank(pc.not_equal(t["judge_kind"], pa.scalar("")).fill_null(False))
        k = pa.Table.from_pydict({"jid": t["judge"].fill_null(pa.scalar("")), "has": has,
                                  "sec": pc.if_else(pc.equal(has, pa.scalar(1)), i, pc.negate(i))})
        return pick(k, ["jid"], [("has", "descending"), ("sec", "ascending")], True)

    def judges(self) -> dict[str, dict[str, str]]:
        """``{judge id: {"model", "kind", "prompt"}}`` for every judge with rows here (one
        configuration's: :meth:`judged`). Rows written before the identity columns existed give
        the model from the id ("<model>:<hash>")."""
        return self._judges_of(self.read("judgements", JUDGEMENT_SCHEMA, list(JUDGE_INFO)))

    def _judges_of(self, t: pa.Table) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for r in t.take(self._judge_info_rows(t)).to_pylist():
            jid = r["judge"] or ""
            out[jid] = {"model": r["judge_model"] or jid.rsplit(":", 1)[0], "kind": r["judge_kind"] or "",
                        "prompt": r["judge_prompt"] or ""}
            if r["evaluation"]:           # rows written before these columns have neither
                out[jid]["evaluation"] = r["evaluation"]
            if r["judge_weights"]:
                out[jid]["weights"] = r["judge_weights"]
        return out

    def judged_episodes(self) -> dict[str, set[str]]:
        """Per judge id, the episodes it has any judgement row for (one read of two columns)."""
        t = self.read("judgements", JUDGEMENT_SCHEMA, ["judge", "episode_id"])
        out: dict[str, set[str]] = {}
        for r in t.group_by(["judge", "episode_id"]).aggregate([]).to_pylist():
            if r["judge"]:
                out.setdefault(r["judge"], set()).add(r["episode_id"])
        return out

    def judgement_rows(self, columns: Sequence[str] | None = None, *, judge: str | None = None,
                       ok: bool | None = None, episode_ids: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Judgement rows as written (every attempt's summary, all judges), optionally only
        ``columns``, one ``judge``'s, only ok (``ok=True``) or failed (``ok=False``) rows.
        Compaction (:meth:`EpisodeStore.compact`) drops rows no reader can use."""
        flag = None if ok is None else (pc.field("ok") == True if ok  # noqa: E712
                                        else pc.field("ok").is_null() | (pc.field("ok") == False))  # noqa: E712
        cols = list(columns) if columns is not None else None
        return self.read("judgements", JUDGEMENT_SCHEMA, cols, all_of(field_in("judge", judge), flag,
                                                                    field_in("episode_id", episode_ids))).to_pylist()

    def _judgements_keep(self, files: list[str]) -> pa.Array[Any]:
        """Rows of ``files`` compaction keeps: per (judge, episode, key) the best row (ok over
        failed, then newest), and, when that row's value is None (so ``ray_jobs.judging.stream.settled``
        looks at the newest failed row's error to decide a retry), the newest failed row too;
        per judge the row :meth:`judges` reads its identity from."""
        t = self._judgement_table(["judge", "episode_id", "key", "value", "ok", "batch_id", "judge_model",
                                   "judge_kind", "judge_prompt"], files=files)
        if t.num_rows == 0:
            return pa.array([], pa.int64())
        keys = ["judge", "episode_id", "key"]
        idx = pc.sort_indices(t, sort_keys=[(k, "ascending") for k in keys]
                              + [("__ok", "descending"), ("batch_id", "descending")])
        s = t.take(idx)
        starts = group_starts(s.select(keys))
        ok = s["__ok"]
        prev_ok = pa.chunked_array([pa.array([1], pa.int8()), *ok.slice(0, s.num_rows - 1).chunks], pa.int8())
        # in a group's run, failed rows follow ok rows, newest first: the newest failed row is the
        # first failed one
        first_failed = pc.and_(pc.equal(ok, pa.scalar(0)), pc.or_(starts, pc.equal(prev_ok, pa.scalar(1))))
        run = pc.subtract(pc.cumulative_sum(pc.cast(starts, pa.int64())), 1)
        best_none = pc.filter(pc.or_(pc.is_null(s["value"]), pc.equal(ok, pa.scalar(0))), starts)
        keep = pc.or_(starts, pc.and_(first_failed, pc.take(best_none, run)))
        return sorted_unique(np.concatenate([np.asarray(pc.filter(idx, keep)),
                                              np.asarray(self._judge_info_rows(t))]))
