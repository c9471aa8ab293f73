"""A folder of tables written as atomic shards: the machinery every store shares. Its public API
(:meth:`ShardedDir.path`, :meth:`ShardedDir.write`, :meth:`ShardedDir.read`, the text and JSON
files, :meth:`ShardedDir.repair`) is what other modules use; the quarantine table (``RUN_DIR/quarantine``) is written here too;
rows that cannot be encoded are escaped or set aside here (the package docstring)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from engine.errors import CorruptShard
from engine.inputs.fdtree import escape_text, has_surrogate
from engine.inputs.quarantine import SCHEMA as QUARANTINE_SCHEMA
from engine.inputs.quarantine import WRITER_KINDS, BadRow, excerpt, part_name, quarantine_table
from engine.storage.fs import local_root, open_root, scratch_dir

log = logging.getLogger("dateline.storage")


_T = TypeVar("_T")

_DONE = object()

def new_batch_id() -> str:
    return f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"

# a shard written by one flush is named after its batch id and holds only that batch's rows
BATCH_SHARD = re.compile(r"part-(\d{20}-[0-9a-f]{8})\.parquet")

# -- rows Arrow cannot encode (the module docstring) -------------------------------------------
# what converting a value to Arrow raises when it cannot (UnicodeEncodeError and ArrowInvalid are
# ValueErrors, ArrowTypeError a TypeError)
_ENCODE_ERRORS = (ValueError, TypeError, OverflowError, pa.ArrowNotImplementedError)

def _escaped(v: Any) -> Any:
    """``v`` with :func:`escape_text` applied to every string in it (in lists, tuples and dicts,
    keys too); ``v`` itself when nothing changed."""
    if isinstance(v, str):
        return escape_text(v) if has_surrogate(v) else v
    if isinstance(v, (list, tuple)):
        items = [_escaped(x) for x in v]
        return v if all(a is b for a, b in zip(items, v)) else items
    if isinstance(v, dict):
        pairs = [(_escaped(k), _escaped(x)) for k, x in v.items()]
        return v if all(a is k and b is x for (a, b), (k, x) in zip(pairs, v.items())) else dict(pairs)
    return v

def _row_id(row: dict[str, Any]) -> str:
    for key in ("episode_id", "comparison_id", "message_id"):
        if row.get(key) is not None:
            return f"{key.removesuffix('_id')} {escape_text(str(row[key]))}"
    return "a row"

@dataclass(frozen=True)
class Flush:
    """What :meth:`EpisodeStore.write_batch` stored: its batch id, and the episodes whose row was
    set aside (``RUN_DIR/quarantine``): they do not exist in the store."""
    batch_id: str
    set_aside: frozenset[str] = frozenset()

# -- vectorised dedup ------------------------------------------------------------------------
class ShardedDir:
    """A folder of tables written as atomic shards (staged, then moved into place), on a local
    disk (fsync + ``os.replace``) or any pyarrow filesystem (``s3://``, ``gs://``: the move is a
    copy + delete, but readers only list final paths, where an object appears whole)."""
    SUBDIRS: tuple[str, ...] = ()
    # remote I/O is one round trip per object: compaction's footer reads, shard reads and deletes
    # run this many at a time on a remote filesystem (one at a time on a local disk, as before)
    REMOTE_IO_THREADS = 16
    # a read on a remote filesystem fetches this many shards at once (Arrow's default is 4, and
    # its I/O pool 8 threads): a reduce of one configuration touches every shard that holds its
    # rows, one 40-100 ms GET each. Measured on moto + 40 ms: 37.1 s -> 8.6 s for a reduce of 8
    # configurations over 180 shards (docs/design/driver.md)
    REMOTE_READAHEAD = 32

    def __init__(self, root: str | Path, *, filesystem: pafs.FileSystem | None = None,
                 local_dir: str | Path | None = None) -> None:
        self.fs, self.base = open_root(root, filesystem)
        self.local = isinstance(self.fs, pafs.LocalFileSystem)
        # ``root``: a local folder callers may join paths to (logs, artifacts). For a local
        # store it is the store itself; for a remote one a scratch folder on this machine.
        if filesystem is not None:
            self.root = Path(self.base) if self.local else scratch_dir(self.fs, self.base, local_dir)
            self.uri = self.base if self.local else f"{self.fs.type_name}://{self.base}"
        else:
            self.root = local_root(root, local_dir)
            self.uri = self.base if self.local else str(root)
        if self.local:
            for sub in (*self.SUBDIRS, "_staging"):
                (Path(self.base) / sub).mkdir(parents=True, exist_ok=True)
        else:
            self.root.mkdir(parents=True, exist_ok=True)

    def remote_dir(self, sub: str) -> str:
        """The URI of ``sub`` inside a remote run dir (its options kept: ``s3://b/p/logs?endpoint_
        override=...``), where what lives in :attr:`root` on a node is copied; "" for a local store."""
        if self.local:
            return ""
        head, q, query = self.uri.partition("?")
        return f"{head.rstrip('/')}/{sub}{q}{query}"

    # -- paths and atomic writes ------------------------------------------------------------
    def path(self, *parts: str) -> str:
        return "/".join([self.base, *parts])

    def _publish(self, staged: str, final: str) -> None:
        if self.local:
            with open(staged, "rb") as f:
                os.fsync(f.fileno())
            os.replace(staged, final)
        else:
            self.fs.move(staged, final)

    def write(self, table: pa.Table, sub: str, name: str, row_group_size: int | None = None) -> Path | str:
        final = self.path(sub, name)
        if not self.local:
            # An object store publishes an object whole when its upload completes (a PUT, or a
            # multipart upload's completion): written straight to its final key, a reader never
            # sees part of it, and the shard costs 3 requests instead of 6 (no copy, delete or
            # staging marker). An upload that fails is aborted and leaves no object.
            try:
                pq.write_table(table, final, filesystem=self.fs, row_group_size=row_group_size)
            except BaseException:
                try:
                    self.fs.delete_file(final)
                except OSError:
                    pass
                raise
            return final
        staged = self.path("_staging", f"{sub}-{name}")
        try:
            pq.write_table(table, staged, filesystem=self.fs, row_group_size=row_group_size)
        except BaseException:       # a full disk: no partial shard is left behind (readers never see one)
            try:
                self.fs.delete_file(staged)
            except OSError:
                pass
            raise
        self._publish(staged, final)
        return Path(final)

    def _table(self, sub: str, rows: Sequence[dict[str, Any]], schema: pa.Schema) -> tuple[pa.Table, list[BadRow]]:
        """``rows`` as a ``schema`` table, whatever text they hold (the module docstring): when
        Arrow refuses them, lone surrogates are escaped; rows that still fail are left out and
        written to ``quarantine/`` (returned too), each with a warning."""
        try:
            return pa.Table.from_pylist(list(rows), schema=schema), []
        except _ENCODE_ERRORS:
            pass
        fixed = []
        escaped: list[str] = []
        for r in rows:
            e = {k: _escaped(v) for k, v in r.items()}
            changed = [k for k in r if e[k] is not r[k]]
            if changed:
                escaped.append(f"{_row_id(r)} field {', '.join(changed)}")
            fixed.append(e)
        if escaped:
            log.warning("%s/%s: %d row(s) hold text that is not UTF-8 (a lone surrogate, e.g. a file name that is "
                        "not UTF-8), stored escaped (\\xNN): %s%s", self.uri, sub, len(escaped),
                        "; ".join(escaped[:5]), f" and {len(escaped) - 5} more" if len(escaped) > 5 else "")
        try:
            return pa.Table.from_pylist(fixed, schema=schema), []
        except _ENCODE_ERRORS:
            pass
        kept, bad = [], []
        for r, e in zip(rows, fixed):
            try:
                pa.Table.from_pylist([e], schema=schema)
            except _ENCODE_ERRORS as err:
                bad.append(self._set_aside(sub, r, e, schema, err))
                continue
            kept.append(e)
        write_quarantine(self, bad)
        return pa.Table.from_pylist(kept, schema=schema), bad

    def _set_aside(self, sub: str, raw: dict[str, Any], row: dict[str, Any], schema: pa.Schema,
                   err: BaseException) -> BadRow:
        """The quarantine row of a ``sub`` row Arrow cannot encode (``row``: ``raw`` escaped),
        naming the first field it refuses; warns."""
        field = None
        for f in schema:
            try:
                pa.array([row.get(f.name)], type=f.type)
            except _ENCODE_ERRORS:
                field = f.name
                break
        why = escape_text(f"{type(err).__name__}: {err}")
        content = json.dumps(raw, default=str)       # ASCII: lone surrogates stay as \udcff escapes
        eid = raw.get("episode_id")
        log.warning("%s/%s: the row of %s cannot be stored (field %s: %s); set aside in %s/quarantine, the rest of "
                    "the flush is stored", self.uri, sub, _row_id(raw), field, why, self.uri)
        return BadRow(f"{self.uri}/{sub}", None, field, "unencodable_row",
                      f"{sub} row of {_row_id(raw)}: field {field} cannot be stored ({why})", excerpt(content),
                      None if eid is None else escape_text(str(eid)), content)

    def write_text(self, name: str, text: str) -> None:
        """Write ``name`` (relative to the store, e.g. ``metrics/tables.md``) atomically."""
        staged = self.path("_staging", name.replace("/", "-"))
        if self.local:
            Path(self.path(name)).parent.mkdir(parents=True, exist_ok=True)
        with self.fs.open_output_stream(staged) as f:
            f.write(text.encode())
        self._publish(staged, self.path(name))

    def read_text(self, name: str) -> str | None:
        path = self.path(name)
        if self.fs.get_file_info(path).type != pafs.FileType.File:
            return None
        with self.fs.open_input_stream(path) as f:
            return f.read().decode()

    def exists(self, name: str) -> bool:
        return self.fs.get_file_info(self.path(name)).type != pafs.FileType.NotFound

    def read_json(self, name: str) -> Any:
        text = self.read_text(name)
        return json.loads(text) if text is not None else None

    def run_infos(self, prefix: str = "run-") -> list[dict[str, Any]]:
        """The info JSONs drivers leave after each run (``run-*.json``, ``pairwise-*.json``)."""
        infos = self.fs.get_file_info(pafs.FileSelector(self.base, allow_not_found=True))
        names = sorted(i.base_name for i in infos if i.type == pafs.FileType.File
                       and i.base_name.startswith(prefix) and i.base_name.endswith(".json"))
        return [json.loads(self.read_text(n) or "null") for n in names]

    def write_json(self, name: str, obj: Any) -> None:
        """``name`` as JSON, secrets redacted (``engine.config.redact``: env values, keys, URL
        credentials and query strings): nothing a run dir holds can leak them."""
        from engine.config.values import redact

        self.write_text(name, json.dumps(redact(json.loads(json.dumps(obj, default=str))), indent=2, default=str))

    def _map(self, fn: Callable[[Any], _T], items: Sequence[Any]) -> list[_T]:
        """``[fn(x) for x in items]``; on a remote filesystem from a pool of threads."""
        if self.local or len(items) <= 1:
            return [fn(x) for x in items]
        with ThreadPoolExecutor(min(self.REMOTE_IO_THREADS, len(items))) as ex:
            return list(ex.map(fn, items))

    # -- reading ---------------------------------------------------------------------------
    def _files(self, sub: str, batches: set[str] | None = None) -> list[str]:
        """The final shards of ``sub``, in name order. With ``batches``, shards named after a
        batch not in it are skipped (compacted shards are always read)."""
        out = []
        for info in self.fs.get_file_info(pafs.FileSelector(self.path(sub), allow_not_found=True)):
            name = info.base_name
            if info.type != pafs.FileType.File or not (name.startswith("part-") and name.endswith(".parquet")):
                continue
            if batches is not None and (m := BATCH_SHARD.fullmatch(name)) and m.group(1) not in batches:
                continue
            out.append(info.path)
        return sorted(out)

    def _dataset(self, sub: str, schema: pa.Schema, files: list[str] | None = None) -> ds.Dataset:
        cache: dict[tuple[str, pa.Schema], ds.Dataset] | None = self.__dict__.get("_read_cache")
        if cache is not None and files is None and (sub, schema) in cache:
            return cache[(sub, schema)]
        listed = self._files(sub) if files is None else files
        d: ds.Dataset
        if not listed:
            d = ds.dataset(schema.empty_table())
        else:
            # an explicit schema: shards written before a column existed read it as nulls
            d = ds.dataset(listed, schema=schema, format="parquet", filesystem=self.fs)
            if cache is not None and files is None:
                # footers (and their row-group statistics) read once, from the pool, for every
                # read of this snapshot
                self._map(lambda f: f.ensure_complete_metadata(), list(d.get_fragments()))
        if cache is not None and files is None:
            cache[(sub, schema)] = d
        return d

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Within it, each table's shard listing and footers are read once and reused by every
        read (a reduce reads one configuration at a time: on an object store each read would
        otherwise list the table and fetch every shard's footer again). Rows written meanwhile
        are not seen."""
        self.__dict__["_read_cache"] = {}
        try:
            yield
        finally:
            self.__dict__.pop("_read_cache", None)

    def read(self, sub: str, schema: pa.Schema, columns: list[str] | dict[str, pc.Expression] | None = None,
              filter: pc.Expression | None = None, files: list[str] | None = None) -> pa.Table:
        """The rows of every shard of ``sub`` (no dedup), only ``columns``, only rows matching
        ``filter``; both are pushed down to the Parquet reader (pruned columns are never read).
        A shard that cannot be read is a :class:`CorruptShard` naming it and what to do."""
        ahead = 4                                                # Arrow's default
        if not self.local:
            ahead = self.REMOTE_READAHEAD
            if pa.io_thread_count() < ahead:                     # the process's pool: only ever raised
                pa.set_io_thread_count(ahead)
        try:
            return self._dataset(sub, schema, files).to_table(columns=columns, filter=filter,
                                                              fragment_readahead=ahead)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as e:
            bad = self.corrupt_shards(sub, schema, files)
            if not bad:
                raise
            path, why = bad[0]
            raise CorruptShard(path, None, None, (
                f"this {sub} shard of run dir {self.uri} cannot be read ({why}){f' (and {len(bad) - 1} more)' if len(bad) > 1 else ''}. "
                f"Run `dateline repair {self.uri}` to move it aside into _corrupt/ (only its rows are lost: "
                "re-running the same command runs those episodes again), or restore it from a backup")) from e

    def corrupt_shards(self, sub: str, schema: pa.Schema, files: list[str] | None = None) -> list[tuple[str, str]]:
        """``(path, why)`` of every shard of ``sub`` that cannot be read whole with ``schema``."""
        out = []
        for f in self._files(sub) if files is None else files:
            try:
                ds.dataset([f], schema=schema, format="parquet", filesystem=self.fs).to_table()
            except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as e:
                out.append((f, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"))
        return out

    def repair(self, dry_run: bool = False) -> list[tuple[str, str, str]]:
        """Move every shard that cannot be read into ``_corrupt/<table>/`` (no other row is touched);
        ``(shard, where it went, why)`` for each. With ``dry_run``, only say which."""
        moved = []
        for sub, schema in self._tables():
            for path, why in self.corrupt_shards(sub, schema):
                name = path.rsplit("/", 1)[-1]
                dest = self.path("_corrupt", sub, name)
                if not dry_run:
                    if self.local:
                        Path(dest).parent.mkdir(parents=True, exist_ok=True)
                    self.fs.move(path, dest)
                moved.append((path, dest, why))
        return moved

    def _tables(self) -> list[tuple[str, pa.Schema]]:
        return []


# -- the quarantine table (RUN_DIR/quarantine): rows a loader skipped or the writer set aside ----
def write_quarantine(store: ShardedDir, rows: Sequence[BadRow]) -> Path | str | None:
    """Write ``rows`` as ``quarantine/part-<id>.parquet`` of ``store`` (an ``EpisodeStore`` or
    any store with the atomic shard writer) and log the count; nothing when there are none."""
    if not rows:
        return None
    if store.local:      # the writer moves a staged shard into place; a local folder must exist
        Path(store.path("quarantine")).mkdir(parents=True, exist_ok=True)
    path = store.write(quarantine_table(rows), "quarantine", part_name(rows))
    log.warning("%d bad rows skipped, see %s/quarantine (%s)", len(rows), store.uri,
                ", ".join(f"{k} {n}" for k, n in sorted(Counter(r.kind for r in rows).items())))
    return path


def read_quarantine(store: ShardedDir) -> pa.Table:
    """Every quarantined row of a store (all parts)."""
    return store.read("quarantine", QUARANTINE_SCHEMA)


def set_aside_episodes(store: ShardedDir) -> dict[str, str]:
    """``{episode_id: reason}`` of the episodes rows the store writer set aside: episodes that
    ran but whose result is nowhere else in the run dir (a re-run that stores one runs it again)."""
    t = read_quarantine(store).select(["file", "kind", "episode_id", "reason"]).to_pylist()
    return {r["episode_id"]: r["reason"] for r in t if r["kind"] in WRITER_KINDS and r["episode_id"]
            and str(r["file"]).rsplit("/", 1)[-1] == "episodes"}
