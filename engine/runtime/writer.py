"""The driver's store writer: finished episodes leave the dispatch loop as one cheap hand-off.

The dispatch loop (``ray_jobs/run/dispatch_loop.py``) used to write, every ``run.flush_interval_s``,
one steps and one episodes shard (plus calls and messages) *per point*, synchronously: on S3
each shard is a PUT, a server-side copy and a delete, so a 32-point sweep spent 6-15 s per flush
cycle in which no worker slot was refilled. :class:`StoreWriter` takes the rows instead
(:meth:`StoreWriter.put` appends them to a buffer and returns) and a background thread writes
them: per flush, ONE shard per table per run dir, holding the rows of every point
(configuration) of that run dir (every row carries its ``config_hash``), through
``EpisodeStore.write_batch``: transcripts and steps first, then episodes, one ``batch_id``, so
the resume semantics of ``docs/design/resume.md`` are unchanged (an episode exists once its
episodes row does; it is handed to the writer exactly once).

A flush happens when a run dir's buffered rows exceed ``flush_bytes`` (estimated from the
Python values) or ``flush_s`` seconds after the previous one, whichever comes first.

Why a thread in the driver, not a Ray actor: the rows are already in the driver's memory (the
workers return them there); an actor would serialise every row once more, through the object
store, to another process, and its failures would come back as remote exceptions on a future
the loop must poll. A thread shares the rows without a copy, and Parquet encoding and S3 I/O
release the GIL, so the dispatch loop keeps running while a shard is written; its errors are
plain Python exceptions handed back to the loop. Memory stays bounded: when more than
``max_pending_bytes`` are buffered or being written, :meth:`put` waits for the writer (back
pressure instead of an unbounded backlog).

Errors. An ``OSError`` (a full disk, a lost mount, an S3 outage) keeps the rows buffered and
logs once; the next flush tries again (as the old synchronous flush did). Any other exception is
fatal: the writer stops and the next :meth:`put`, :meth:`check` or :meth:`close` raises that
original exception in the driver. :meth:`close` writes everything still buffered (in order, one
last pass), joins the thread, and raises :class:`~engine.errors.StoreWriteError` naming the run
dir and how many episodes were not written when that last pass still fails; nothing is lost
silently (the episodes not written run again on the same command: only stored rows count).

A row's content is not an error of the writer: text no UTF-8 file can hold is stored escaped,
and a row Arrow still cannot encode is set aside in ``RUN_DIR/quarantine`` by
``EpisodeStore.write_batch`` (``engine/storage/episodes.py``) while the rest of the flush lands. Such an
episode is not stored: it is not handed to ``on_written`` (its judges) and is counted in
``stats.set_aside``, not ``stats.episodes``.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from engine.errors import StoreWriteError
from engine.storage import EpisodeStore, Flush

log = logging.getLogger("dateline.writer")

FLUSH_BYTES = 32 << 20            # a run dir's shard is written once its rows are about this big
MAX_PENDING_BYTES = 512 << 20     # put() waits while more than this is buffered or being written


def approx_bytes(v: Any) -> int:
    """A cheap estimate of what a row (or value) weighs in a shard: string lengths, 8 per scalar."""
    if isinstance(v, str):
        return len(v)
    if isinstance(v, dict):
        return sum(approx_bytes(x) for x in v.values())
    if isinstance(v, (list, tuple)):
        return 8 + sum(approx_bytes(x) for x in v)
    return 8


@dataclass
class _Rows:
    episodes: list[dict[str, Any]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    messages: dict[str, dict[str, Any]] = field(default_factory=dict)
    judgements: list[dict[str, Any]] = field(default_factory=list)     # with their own _calls / _messages
    nbytes: int = 0

    def __bool__(self) -> bool:
        return bool(self.episodes or self.judgements)

    def extend(self, other: _Rows) -> None:
        self.episodes += other.episodes
        self.judgements += other.judgements
        self.steps += other.steps
        self.calls += other.calls
        for k, m in other.messages.items():
            self.messages.setdefault(k, m)
        self.nbytes += other.nbytes


@dataclass
class _Sink:
    """One run dir (and one episode schema, see :meth:`StoreWriter._sink`): its buffered rows."""
    store: EpisodeStore
    rows: _Rows = field(default_factory=_Rows)
    error: str = ""                  # the last write's OSError (its rows are kept), "" once written
    retry_at: float = 0.0            # after an OSError: not tried again before this (monotonic)


@dataclass
class WriterStats:
    flushes: int = 0                 # write cycles that wrote something
    shards: int = 0                  # write_batch calls (one per run dir per flush)
    episodes: int = 0
    set_aside: int = 0               # episodes whose row could not be encoded (RUN_DIR/quarantine)
    judgements: int = 0
    write_s: float = 0.0             # time spent writing (the writer thread)
    max_write_s: float = 0.0         # longest single flush cycle
    waits_s: float = 0.0             # time put() waited for the writer (back pressure)


def _write_rows(store: EpisodeStore, rows: _Rows) -> Flush | None:
    """One sink's flush: episodes with their steps and transcripts (one batch), then judgements
    (one shard); what ``write_batch`` stored. Episode rows are copied first: write_batch stamps the
    batch id into them, and the judges may be reading the same dicts."""
    out = None
    if rows.episodes:
        out = store.write_batch([dict(e) for e in rows.episodes], rows.steps, rows.calls, rows.messages.values())
    if rows.judgements:             # copies: write_judgements takes their transcripts out (a retry needs them)
        store.write_judgements([dict(j) for j in rows.judgements])
    return out


class StoreWriter:
    """A background writer of finished episodes, one shard per table per run dir per flush
    (see the module docstring). ``write`` is how one run dir's rows are written (tests, perf):
    by default :func:`_write_rows` (``store.write_batch`` for the episodes, ``store.write_judgements``
    for the judgements); what it returns, when a :class:`~engine.storage.Flush`, names the episodes
    set aside."""

    def __init__(self, flush_s: float, flush_bytes: int = FLUSH_BYTES, max_pending_bytes: int = MAX_PENDING_BYTES,
                 write: Callable[[EpisodeStore, _Rows], Any] | None = None, name: str = "dateline-store-writer",
                 on_written: Callable[[EpisodeStore, list[dict[str, Any]]], Any] | None = None) -> None:
        self.flush_s = max(0.0, float(flush_s))
        self.flush_bytes = flush_bytes
        self.max_pending_bytes = max(flush_bytes, max_pending_bytes)
        self._write = write or _write_rows
        # called (on the writer thread) with each written shard's episode rows, once they are
        # stored: the run hands them to its judges only then, so no judgement is ever stored for
        # an episode whose row is not (a crash in between would re-run the episode under the
        # same id, and the old verdict would be read as the new text's)
        self.on_written = on_written
        self._cond = threading.Condition()
        self._sinks: dict[Any, _Sink] = {}              # in first-seen order: the order of writes in a flush
        self._by_store: dict[int, Any] = {}              # id(store) -> sink key
        self._stores: list[EpisodeStore] = []            # keeps ids unique while the writer lives
        self._pending = 0                                # bytes buffered or being written
        self._fatal: BaseException | None = None
        self._closing = False
        self._closed = False
        self._flush_now = False
        self.stats = WriterStats()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # -- the dispatch side --------------------------------------------------------------------
    def put(self, store: EpisodeStore, episodes: Sequence[dict[str, Any]], steps: Sequence[dict[str, Any]] = (),
            calls: Sequence[dict[str, Any]] = (), messages: Mapping[str, dict[str, Any]] | None = None) -> None:
        """Hand over finished episodes of ``store``'s run dir with their steps and transcripts.
        Returns at once unless the writer is ``max_pending_bytes`` behind; raises the writer's
        error if it failed."""
        rows = _Rows(list(episodes), list(steps), list(calls), dict(messages or {}))
        rows.nbytes = approx_bytes(rows.episodes) + approx_bytes(rows.steps) + approx_bytes(rows.calls) \
            + approx_bytes(rows.messages)
        self._put(store, rows)

    def put_judgements(self, store: EpisodeStore, judgements: Sequence[dict[str, Any]]) -> None:
        """Hand over judgement rows (``ray_jobs.judging.stream.JudgeCaller``'s, each with its ``_calls`` and
        ``_messages``): written as one judgements shard per run dir per flush."""
        rows = _Rows(judgements=list(judgements))
        rows.nbytes = approx_bytes(rows.judgements)
        self._put(store, rows)

    def _put(self, store: EpisodeStore, rows: _Rows) -> None:
        with self._cond:
            self._raise_if_failed()
            if self._closing:
                raise RuntimeError("StoreWriter.put after close()")
            if self._pending > self.max_pending_bytes:
                t0 = time.monotonic()
                while self._pending > self.max_pending_bytes and self._fatal is None:
                    stuck = [s for s in self._sinks.values() if s.error]
                    if stuck:            # the writer cannot write: waiting would never end
                        raise self._write_error(stuck[0])
                    self._cond.wait(0.5)
                self.stats.waits_s += time.monotonic() - t0
                self._raise_if_failed()
            sink = self._sinks[self._sink(store)]
            sink.rows.extend(rows)
            self._pending += rows.nbytes
            self._cond.notify_all()

    def check(self) -> None:
        """Raise the writer's fatal error, if it had one (the original exception)."""
        with self._cond:
            self._raise_if_failed()

    def flush(self) -> None:
        """Ask for a flush now (returns at once)."""
        with self._cond:
            self._flush_now = True
            self._cond.notify_all()

    def drain(self, timeout: float | None = None) -> None:
        """Write everything handed over so far now, and wait until it is written (or raise what
        went wrong, as :meth:`close`)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._flush_now = True
            self._cond.notify_all()
            while self._pending > 0 and self._fatal is None:
                stuck = [s for s in self._sinks.values() if s.error]
                if stuck:
                    raise self._write_error(stuck[0])
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"the store writer did not write {self._pending} bytes in {timeout} s")
                self._cond.wait(0.2)
            self._raise_if_failed()

    def close(self) -> None:
        """Write everything buffered (one last pass, in order), stop the thread, and raise what
        went wrong: the writer's fatal error, or :class:`StoreWriteError` for rows the last pass
        could not write. Safe to call more than once."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join()
        with self._cond:
            self._closed = True
            self._raise_if_failed()
            stuck = [s for s in self._sinks.values() if s.rows]
            if stuck:
                raise self._write_error(stuck[0])

    def pending_bytes(self) -> int:
        with self._cond:
            return self._pending

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------------------
    def _raise_if_failed(self) -> None:
        if self._fatal is not None:
            raise self._fatal

    @staticmethod
    def _write_error(sink: _Sink) -> StoreWriteError:
        what = f"{len(sink.rows.episodes)} finished episodes" + (
            f" and {len(sink.rows.judgements)} judgements" if sink.rows.judgements else "")
        return StoreWriteError(
            f"could not write {what} to run dir {sink.store.uri}: {sink.error}. What is stored stays readable; "
            "free space and re-run the same command: these episodes run (and are judged) again.")

    def _sink(self, store: EpisodeStore) -> Any:
        """The sink of ``store``'s run dir (under the lock). Points of one run dir share one
        sink, written through one store whose episode schema is the union of theirs (a reader's
        explicit schema ignores the columns it does not know); a point whose benchmark's columns
        conflict in type with the others' gets a sink (and shards) of its own."""
        key = self._by_store.get(id(store))
        if key is not None:
            return key
        where = (store.fs.type_name, store.base)
        for k, sink in self._sinks.items():
            if k[:2] != where:
                continue
            if sink.store.schema.equals(store.schema):
                break
            try:
                unified = pa.unify_schemas([sink.store.schema, store.schema])
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                continue
            wider = copy.copy(sink.store)
            wider.schema = unified
            sink.store = wider
            break
        else:
            k = (*where, len(self._sinks))
            self._sinks[k] = _Sink(store)
        self._by_store[id(store)] = k
        self._stores.append(store)
        return k

    def _due(self, last: float) -> tuple[list[Any], float | None]:
        """Sinks to write now, and how long to wait otherwise (None: until rows come)."""
        now = time.monotonic()
        with_rows = [k for k, s in self._sinks.items() if s.rows]
        if self._closing:
            return with_rows, 0.0
        backing_off = [self._sinks[k].retry_at for k in with_rows if self._sinks[k].retry_at > now]
        with_rows = [k for k in with_rows if self._sinks[k].retry_at <= now]
        if not with_rows:
            return [], (min(backing_off) - now) if backing_off else None
        if self._flush_now or now - last >= self.flush_s:
            return with_rows, 0.0
        full = [k for k in with_rows if self._sinks[k].rows.nbytes >= self.flush_bytes]
        return full, max(0.0, min([last + self.flush_s, *backing_off]) - now)

    def _run(self) -> None:
        last = time.monotonic()
        while True:
            with self._cond:
                while True:
                    due, wait = self._due(last)
                    if due or self._closing:
                        break
                    self._cond.wait(wait)
                closing = self._closing
                if self._flush_now or closing or time.monotonic() - last >= self.flush_s:
                    last = time.monotonic()
                self._flush_now = False
                batch = []
                for k in due:                    # take the rows out; put() fills fresh buffers meanwhile
                    s = self._sinks[k]
                    batch.append((k, s.store, s.rows))
                    s.rows = _Rows()
            if batch and not self._write_batch(batch):
                return
            if closing:
                return

    def _write_batch(self, batch: list[tuple[Any, EpisodeStore, _Rows]]) -> bool:
        """Write one flush (a shard per table per sink, in order); False after a fatal error."""
        t0 = time.monotonic()
        wrote = 0
        for k, store, rows in batch:
            try:
                flushed = self._write(store, rows)
            except OSError as e:       # a full disk, a lost mount: the rows stay, the next flush retries
                with self._cond:
                    sink = self._sinks[k]
                    if not sink.error:
                        log.error("could not write %d episodes to %s (%s: %s); kept in memory, retrying",
                                  len(rows.episodes), store.uri, type(e).__name__, e)
                    sink.error = f"{type(e).__name__}: {e}"
                    sink.retry_at = time.monotonic() + max(self.flush_s, 0.5)
                    rows.extend(sink.rows)          # the failed rows first: order is kept
                    sink.rows = rows
                    self._cond.notify_all()
                continue
            except BaseException as e:  # noqa: BLE001 - handed to the driver by put/check/close
                with self._cond:
                    self._fatal = e
                    self._cond.notify_all()
                return False
            aside: Collection[str] = flushed.set_aside if isinstance(flushed, Flush) else ()
            stored = [e for e in rows.episodes if e["episode_id"] not in aside] if aside else rows.episodes
            with self._cond:
                self._sinks[k].error, self._sinks[k].retry_at = "", 0.0
                self._pending -= rows.nbytes
                self.stats.shards += 1
                self.stats.episodes += len(stored)
                self.stats.set_aside += len(rows.episodes) - len(stored)
                self.stats.judgements += len(rows.judgements)
                wrote += 1
                self._cond.notify_all()
            if self.on_written is not None and stored:
                try:
                    self.on_written(store, stored)
                except BaseException as e:  # noqa: BLE001 - handed to the driver by put/check/close
                    with self._cond:
                        self._fatal = e
                        self._cond.notify_all()
                    return False
        dt = time.monotonic() - t0
        with self._cond:
            if wrote:
                self.stats.flushes += 1
            self.stats.write_s += dt
            self.stats.max_write_s = max(self.stats.max_write_s, dt)
        return True

