"""A run dir (:class:`EpisodeStore`): episodes, steps, calls, messages, metrics, and (from the
classes it builds on) plans and judgements, written as atomic shards and read deduplicated;
compaction."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from engine.errors import CorruptShard
from engine.storage.judgements import JudgedDir
from engine.storage.plans import PlanTable
from engine.storage.schema import (
    CALL_SCHEMA,
    EPISODE_ROW_GROUP,
    JUDGEMENT_ROW_GROUP,
    JUDGEMENT_SCHEMA,
    MESSAGE_SCHEMA,
    METRIC_KEY,
    METRIC_SCHEMA,
    PLAN_SCHEMA,
    STEP_SCHEMA,
    conform,
    episode_schema,
)
from engine.storage.select import all_of, field_in, ok_rank, pair, pick, sorted_unique
from engine.storage.shards import Flush, new_batch_id

log = logging.getLogger("dateline.storage")


_T = TypeVar("_T")
_DONE = object()


class EpisodeStore(PlanTable, JudgedDir):
    """A run directory: episodes, steps, judgements and metrics of every config run into it.
    ``run_dir`` is a local path or a pyarrow filesystem URI (``s3://bucket/prefix``, ``gs://…``)."""
    SUBDIRS = ("episodes", "steps", "metrics", "judgements", "plans", "calls", "messages")

    def _tables(self) -> list[tuple[str, pa.Schema]]:
        return [("episodes", self.schema), ("steps", STEP_SCHEMA), ("judgements", JUDGEMENT_SCHEMA),
                ("plans", PLAN_SCHEMA), ("calls", CALL_SCHEMA), ("messages", MESSAGE_SCHEMA)]

    def __init__(self, run_dir: str | Path, extra_fields: Iterable[pa.Field[Any]] = (), *,
                 filesystem: pafs.FileSystem | None = None, local_dir: str | Path | None = None) -> None:
        super().__init__(run_dir, filesystem=filesystem, local_dir=local_dir)
        self.schema = episode_schema(extra_fields)

    def write_batch(self, episodes: list[dict[str, Any]], steps: list[dict[str, Any]],
                    calls: Sequence[dict[str, Any]] = (), messages: Iterable[dict[str, Any]] = ()) -> Flush:
        """Write finished episodes, their steps and transcripts (``calls``, ``messages``) as one
        flush, transcripts and steps first (an episode exists once its row does). Text Arrow
        refuses is escaped, and a row it still cannot encode is set aside (the module docstring):
        the returned :class:`Flush` names the episodes whose row was."""
        if not episodes:
            return Flush("")
        batch_id = new_batch_id()
        name = f"part-{batch_id}.parquet"
        for r in episodes:
            r["batch_id"] = batch_id
        for s in steps:
            s["batch_id"] = batch_id
        eps, bad = self._table("episodes", episodes, self.schema)      # encoded before anything is written
        # transcripts and steps first (on an object store at once: one round trip each, from the
        # pool), then the episodes that make the batch exist
        self._map(lambda f: f(), [lambda: self.write_transcripts(batch_id, calls, messages),
                                  lambda: self.write(self._table("steps", steps, STEP_SCHEMA)[0], "steps", name)])
        # sorted by configuration in small row groups, as judgements (a shard holds every point of its run dir)
        if eps.num_rows:
            self.write(eps.sort_by("config_hash"), "episodes", name, EPISODE_ROW_GROUP)
        return Flush(batch_id, frozenset(b.episode_id for b in bad if b.episode_id is not None))

    def write_transcripts(self, batch_id: str, calls: Sequence[dict[str, Any]],
                           messages: Iterable[dict[str, Any]]) -> None:
        """The calls of one batch, and the messages they refer to that this store object has not
        written yet (readers deduplicate by id, so a message written twice costs only bytes)."""
        if not calls:
            return
        name = f"part-{batch_id}.parquet"
        written = self.__dict__.setdefault("_messages_written", set())
        new = {}
        for m in messages:
            if m["message_id"] not in written and m["message_id"] not in new:
                new[m["message_id"]] = {**m, "batch_id": batch_id}
        if new:
            t = self._table("messages", list(new.values()), MESSAGE_SCHEMA)[0]
            self.write(t, "messages", name)
            written |= set(cast("list[str]", t["message_id"].to_pylist()))     # not those set aside
        self.write(self._table("calls", [{**c, "batch_id": batch_id} for c in calls], CALL_SCHEMA)[0], "calls", name)

    def calls(self, episode_ids: Iterable[str], purpose: str | None = None) -> list[dict[str, Any]]:
        """The model calls of these episodes: an episode's own (of the batch of its stored row) and
        its judges' (every judgement batch), in order."""
        ids = list(episode_ids)
        winners = self.episodes(["episode_id", "batch_id"], episode_ids=ids)
        won = {(r["episode_id"], r["batch_id"]) for r in winners.to_pylist()}
        t = self.read("calls", CALL_SCHEMA, None, all_of(field_in("episode_id", ids), field_in("purpose", purpose)))
        out = [r for r in t.to_pylist() if r["purpose"] != "episode" or (r["episode_id"], r["batch_id"]) in won]
        return sorted(out, key=lambda r: (r["episode_id"], r["purpose"] != "episode", r["judge"] or "", r["key"] or "",
                                          r["batch_id"], r["call"]))

    def messages(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """``{message_id: {"role", "content"}}`` for these ids (found ones)."""
        want = list(dict.fromkeys(ids))
        if not want:
            return {}
        t = self.read("messages", MESSAGE_SCHEMA, ["message_id", "role", "content"], field_in("message_id", want))
        return {r["message_id"]: r for r in t.to_pylist()}

    def write_metrics(self, rows: list[dict[str, Any]], key: str) -> Path | str:
        """Store the metrics table as a cache of the rows computed under ``key`` (what they were
        computed from: engine/scoring/metric_table.py ``metric_key``); only ``dateline run`` writes it, and a
        reader uses it only while its key still matches (:meth:`cached_metrics`)."""
        schema = METRIC_SCHEMA.with_metadata({METRIC_KEY: key})
        return self.write(pa.Table.from_pylist(rows, schema=schema), "metrics", "metrics.parquet")

    def cached_metrics(self, key: str) -> list[dict[str, Any]] | None:
        """The stored metrics rows when they were computed under ``key``; None when there are none,
        they were computed from something else (rows added since, another code version, other
        flags) or cannot be read (the cache is derived: it is then recomputed, never trusted)."""
        path = self.path("metrics", "metrics.parquet")
        try:
            if self.fs.get_file_info(path).type != pafs.FileType.File:
                return None
            meta = pq.read_schema(path, filesystem=self.fs).metadata or {}
            if meta.get(METRIC_KEY.encode()) != key.encode():
                return None
            return conform(pq.read_table(path, filesystem=self.fs), METRIC_SCHEMA).to_pylist()
        except (pa.ArrowInvalid, OSError) as e:
            log.warning("%s: the stored metrics table cannot be read (%s); recomputing", path, e)
            return None

    def listing_digest(self, subs: Sequence[str]) -> str:
        """A digest of the final shards of ``subs`` (names and sizes): it changes whenever rows
        are added, compacted or moved aside."""
        parts = []
        for sub in subs:
            for info in self.fs.get_file_info(pafs.FileSelector(self.path(sub), allow_not_found=True)):
                if info.type == pafs.FileType.File and info.base_name.startswith("part-"):
                    parts.append(f"{sub}/{info.base_name}:{info.size}")
        from engine.config.values import stable_hash

        return stable_hash(*sorted(parts), n=16)

    def with_fields(self, extra_fields: Iterable[pa.Field[Any]]) -> EpisodeStore:
        """The same run dir read with another benchmark's episode columns."""
        return EpisodeStore(self.base, extra_fields, filesystem=self.fs, local_dir=None if self.local else self.root)

    @staticmethod
    def _columns(schema: pa.Schema, columns: Sequence[str] | None) -> list[str]:
        if columns is None:
            return schema.names
        cols = list(columns)
        unknown = [c for c in cols if c not in schema.names]
        if unknown:
            raise KeyError(f"unknown columns {unknown}; the table has {schema.names}")
        return cols

    def episodes(self, columns: Sequence[str] | None = None, *, config_hash: str | Iterable[str] | None = None,
                 benchmark: str | Iterable[str] | None = None, episode_ids: Iterable[str] | None = None,
                 ok_only: bool = False, filter: pc.Expression | None = None) -> pa.Table:
        """Deduplicated episodes: per id, an ok row over an error row, then the newest.

        ``columns``: only these (in this order; only they and the dedup keys are read).
        ``config_hash`` / ``benchmark`` / ``episode_ids`` (a value or a collection) and
        ``ok_only`` are pushed down to the Parquet reader (they are the same on every row of an
        episode id, or, for ``ok_only``, commute with the dedup). ``filter`` (a
        ``pyarrow.compute`` expression over any columns) is applied to the deduplicated rows."""
        cols = self._columns(self.schema, columns)
        proj: dict[str, pc.Expression] = {c: pc.field(c) for c in dict.fromkeys([*cols, "episode_id", "status",
                                                                                 "batch_id"])}
        if filter is not None:
            proj["__match"] = filter                 # evaluated while scanning, applied after the dedup
        pushed = all_of(field_in("config_hash", config_hash), field_in("benchmark", benchmark), field_in("episode_id", episode_ids),
                      pc.field("status") == "ok" if ok_only else None)
        t = self.read("episodes", self.schema, proj, pushed)
        t = t.append_column("__ok", ok_rank(t["status"], "ok"))
        t = t.take(pick(t, ["episode_id"], [("__ok", "descending"), ("batch_id", "descending")]))
        if filter is not None:
            t = t.filter(t["__match"])
        return t.select(cols).cast(pa.schema([self.schema.field(c) for c in cols]))

    def steps(self, columns: Sequence[str] | None = None, *, episode_ids: Iterable[str] | None = None,
              config_hash: str | Iterable[str] | None = None) -> pa.Table:
        """The steps of the episodes :meth:`episodes` keeps (only that row's batch), one row per
        step number. ``episode_ids`` / ``config_hash`` restrict to those episodes; shards of
        other batches are not opened."""
        cols = self._columns(STEP_SCHEMA, columns)
        ids = None if episode_ids is None else list(episode_ids)
        winners = self.episodes(["episode_id", "batch_id"], episode_ids=ids, config_hash=config_hash)
        batches = cast("list[str]", pc.unique(winners["batch_id"]).to_pylist())      # a non-nullable column
        files = self._files("steps", batches=set(batches))
        need = list(dict.fromkeys([*cols, "episode_id", "batch_id", "step"]))
        t = self.read("steps", STEP_SCHEMA, need, field_in("episode_id", ids), files)
        wanted = pair(winners["episode_id"], winners["batch_id"]).combine_chunks()
        t = t.filter(pc.is_in(pair(t["episode_id"], t["batch_id"]), value_set=wanted))
        t = t.take(pick(t, ["episode_id", "batch_id", "step"]))     # a compaction cut short leaves copies
        return t.select(cols)

    def metrics(self) -> pa.Table:
        path = self.path("metrics", "metrics.parquet")
        if self.fs.get_file_info(path).type != pafs.FileType.File:
            return METRIC_SCHEMA.empty_table()
        try:
            return conform(pq.read_table(path, filesystem=self.fs), METRIC_SCHEMA)
        except (pa.ArrowInvalid, OSError) as e:
            raise CorruptShard(path, None, None, f"the metrics table of run dir {self.uri} cannot be read ({e}); it is "
                                                 f"derived: recompute it with `dateline metrics {self.uri} BENCHMARK`") from e

    # -- maintenance -----------------------------------------------------------------------
    def compact(self) -> None:
        """Rewrite each table as one shard of the rows readers can see (steps, then episodes,
        then judgements; atomic per table: the new shard is in place before the old ones go)."""
        self._compact("steps", STEP_SCHEMA, self._steps_keep)
        # every column any episode shard has: a run dir holds several benchmarks' episodes, each
        # with its own columns, and this store object knows one benchmark's (compacting through
        # its schema alone would drop the others')
        stored = self._map(lambda f: pq.read_schema(f, filesystem=self.fs), self._files("episodes"))
        # tables read per configuration are written sorted by it, in small row groups, so a
        # later per-configuration read prunes the others' row groups by their statistics
        self._compact("episodes", pa.unify_schemas([self.schema, *(x.remove_metadata() for x in stored)]),
                      self._episodes_keep, EPISODE_ROW_GROUP, sort_by="config_hash")
        self._compact("judgements", JUDGEMENT_SCHEMA, self._judgements_keep, JUDGEMENT_ROW_GROUP, sort_by="config_hash")
        self._compact("plans", PLAN_SCHEMA, self._plans_keep, sort_by="config_hash")
        self._compact("messages", MESSAGE_SCHEMA, self._messages_keep)
        self._compact("calls", CALL_SCHEMA, self._calls_keep)

    def _messages_keep(self, files: list[str]) -> pa.Array[Any]:
        """One row per message id."""
        t = self.read("messages", MESSAGE_SCHEMA, ["message_id"], files=files)
        return pick(t, ["message_id"])

    def _calls_keep(self, files: list[str]) -> pa.Array[Any]:
        """An episode's calls of its stored row's batch, and every judge call."""
        winners = self.episodes(["episode_id", "batch_id"])
        t = self.read("calls", CALL_SCHEMA, ["episode_id", "batch_id", "purpose"], files=files)
        won = pc.is_in(pair(t["episode_id"], t["batch_id"]),
                       value_set=pair(winners["episode_id"], winners["batch_id"]).combine_chunks())
        judge = np.asarray(pc.not_equal(t["purpose"], pa.scalar("episode")).fill_null(True))
        return sorted_unique(np.flatnonzero(judge | np.asarray(won)))

    def _episodes_keep(self, files: list[str]) -> pa.Array[Any]:
        t = self.read("episodes", self.schema, ["episode_id", "status", "batch_id"], files=files)
        t = t.append_column("__ok", ok_rank(t["status"], "ok"))
        return pick(t, ["episode_id"], [("__ok", "descending"), ("batch_id", "descending")])

    def _steps_keep(self, files: list[str]) -> pa.Array[Any]:
        winners = self.episodes(["episode_id", "batch_id"])
        t = self.read("steps", STEP_SCHEMA, ["episode_id", "batch_id", "step"], files=files)
        mask = pc.is_in(pair(t["episode_id"], t["batch_id"]),
                        value_set=pair(winners["episode_id"], winners["batch_id"]).combine_chunks())
        rows = pc.indices_nonzero(mask)
        return sorted_unique(pc.take(rows, pick(t.filter(mask), ["episode_id", "batch_id", "step"])))

    def _compact(self, sub: str, schema: pa.Schema, keep: Callable[[list[str]], pa.Array[Any]],
                 rows_per_group: int = 65536, sort_by: str | None = None) -> None:
        """Stream the kept rows (global indices over ``files`` in order) of each old shard into
        one new shard, a shard at a time, then delete the old ones. ``sort_by``: the new shard is
        sorted by that column (ties in the old order), written a row group at a time."""
        files = self._files(sub)
        if len(files) <= 1:
            return
        idx = np.asarray(keep(files), dtype=np.int64)
        frags = list(self._dataset(sub, schema, files).get_fragments())
        offsets = np.cumsum([0] + self._map(lambda f: f.count_rows(), frags))
        name = f"part-{time.time_ns():020d}-compact.parquet"
        staged = self.path("_staging", f"{sub}-{name}")
        if sort_by is not None:
            self._write_sorted(sub, schema, files, frags, offsets, idx, sort_by, rows_per_group, staged)
            self._publish(staged, self.path(sub, name))
            self._map(self.fs.delete_file, files)
            return
        spans = [(i, *np.searchsorted(idx, [offsets[i], offsets[i + 1]])) for i in range(len(frags))]
        spans = [(i, lo, hi) for i, lo, hi in spans if hi > lo]
        buf: list[pa.Table] = []
        with pq.ParquetWriter(staged, schema, filesystem=self.fs) as w:
            tables = self._ordered(lambda s: frags[s[0]].to_table(schema=schema), spans)
            for n, ((i, lo, hi), t) in enumerate(zip(spans, tables)):
                buf.append(t.take(pa.array(idx[lo:hi] - offsets[i])))
                if sum(b.num_rows for b in buf) >= rows_per_group or n == len(spans) - 1:
                    w.write_table(pa.concat_tables(buf))
                    buf = []
        self._publish(staged, self.path(sub, name))
        self._map(self.fs.delete_file, files)

    def _write_sorted(self, sub: str, schema: pa.Schema, files: list[str], frags: list[Any], offsets: np.ndarray,
                      idx: np.ndarray, sort_by: str, rows_per_group: int, staged: str) -> None:
        """The kept rows ``idx`` sorted by ``sort_by`` into ``staged``: the sort column alone is
        read whole; each row group of the output takes its rows from the shards that hold them
        (``Fragment.take``), so memory stays at one row group. The writer's shards are each one
        flush (a few configurations), so a shard feeds few output groups."""
        keys = self.read(sub, schema, [sort_by], files=files)[sort_by]
        kept = pa.table({"k": pc.take(keys, pa.array(idx)), "i": pa.array(idx)})
        order = idx[np.asarray(pc.sort_indices(kept, sort_keys=[("k", "ascending"), ("i", "ascending")]),
                               dtype=np.int64)]
        with pq.ParquetWriter(staged, schema, filesystem=self.fs) as w:
            for start in range(0, len(order), rows_per_group):
                chunk = order[start:start + rows_per_group]
                frag_of = np.searchsorted(offsets, chunk, side="right") - 1
                parts, positions = [], []
                for f in np.unique(frag_of):
                    at = np.flatnonzero(frag_of == f)
                    local = chunk[at] - offsets[f]
                    srt = np.argsort(local, kind="stable")
                    parts.append(conform(frags[f].take(pa.array(local[srt])), schema))
                    positions.append(at[srt])
                t = pa.concat_tables(parts)
                back = np.empty(len(chunk), dtype=np.int64)
                back[np.concatenate(positions)] = np.arange(len(chunk))
                w.write_table(t.take(back), row_group_size=rows_per_group)

    def _ordered(self, fn: Callable[[Any], _T], items: Sequence[Any]) -> Iterator[_T]:
        """``fn(x)`` for each item, in order; on a remote filesystem up to ``REMOTE_IO_THREADS``
        ahead of the consumer (so at most that many results are held at once)."""
        if self.local:
            yield from (fn(x) for x in items)
            return
        with ThreadPoolExecutor(self.REMOTE_IO_THREADS) as ex:
            ahead: deque[Future[_T]] = deque()
            rest = iter(items)
            for x in rest:
                ahead.append(ex.submit(fn, x))
                if len(ahead) >= self.REMOTE_IO_THREADS:
                    break
            while ahead:
                out = ahead.popleft().result()
                nxt = next(rest, _DONE)
                if nxt is not _DONE:
                    ahead.append(ex.submit(fn, nxt))
                yield out
