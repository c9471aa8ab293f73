"""The run's Parquet dataset: the only module that knows its layout.

    RUN_DIR/
      episodes/part-*.parquet   one row per finished episode
      steps/part-*.parquet      one row per model turn / environment step
      metrics/metrics.parquet   metric rows per (benchmark, model, agent config)
      judgements/part-*.parquet one row per judge call's result (episode, judge identity, key)
      plans/part-*.parquet      what each run planned per configuration (one row per episode):
                                the denominator of its metrics (engine/outcomes.py)
      calls/part-*.parquet      one row per model call of an episode or a judge (engine/transcripts.py):
                                params, replica, latency, tokens, completion, its prompt as message ids
      messages/part-*.parquet   each distinct prompt message once (id = hash of role and content)
      run-*.json                what each run did (counts, timings, uptime, prices)
      _staging/                 shards are written here, then renamed into place

    PAIRWISE_DIR/               (``dateline pairwise``)
      comparisons/part-*.parquet  one row per planned comparison (task, pair, order, seed)
      judgements/part-*.parquet   verdicts, keyed by (comparison id, judge identity, protocol)
      systems.json                the compared systems; pairwise-*.json: what each stage did
      plan.json                   the newest stage's plan (settings, systems, comparison ids):
                                  reports count only its comparisons, on texts still current

A flush writes the steps shard first, then the episodes shard; both carry the flush's
``batch_id``. An episode exists once its episodes row does; readers keep, per episode id, the
best row (status ok over error, then newest) and only the steps of that row's batch, so a kill
between the two renames, or a re-run of a failed episode, never shows lost or duplicated rows.

A flush never dies of one row's text. Python text may hold what no UTF-8 file can: a lone
surrogate, e.g. a non-UTF-8 file name (b'chart\\xff.png') as ``os.listdir`` decodes it
(surrogateescape: 'chart\\udcff.png') in an episode's output or a step's result; Arrow refuses
it, and one such string used to fail the whole flush, and every re-run. So when a table of a
flush cannot be built, each string in its rows (nested values too) has its lone surrogates
escaped (``engine.fdtree.escape_text``: ``\\xff`` for a surrogate-escaped byte, ``\\ud800``
for any other) and the row is stored so, with a warning naming the episode and field. A row
that still cannot be encoded (a value of the wrong type) is set aside, not written:
``RUN_DIR/quarantine`` keeps it whole (``engine.quarantine``, kind ``unencodable_row``: table,
episode id, field, the error, the row as ASCII-escaped JSON), a warning names it, the rest of
the flush lands, and the run summary (and ``dateline show``) counts the episode among those
without a result. An episode whose row was set aside does not exist in the store (its steps and
calls are never read), so the same command runs it again.

RUN_DIR is a local path or a pyarrow filesystem URI (``s3://bucket/prefix``, ``gs://…``); all
I/O goes through ``store.fs``. Reads are ``pyarrow.dataset`` scans with column projection and
filter pushdown, deduplicated with Arrow compute (``docs/design/resume.md``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, TypeAlias, TypeVar, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from engine.errors import CorruptShard
from engine.fdtree import escape_text, has_surrogate
from engine.protocol import MetricRow, StepRecord
from engine.quarantine import BadRow, excerpt, write_quarantine

log = logging.getLogger("dateline.storage")

EPISODE_FIELDS: list[pa.Field[Any]] = [
    pa.field("episode_id", pa.string(), nullable=False),
    pa.field("batch_id", pa.string(), nullable=False),
    pa.field("config_hash", pa.string()),
    pa.field("benchmark", pa.string()),
    pa.field("task_id", pa.string()),
    pa.field("model", pa.string()),
    pa.field("agent", pa.string()),          # agent config as JSON
    pa.field("data", pa.string()),           # benchmark config as JSON, without the task limit
    pa.field("seed", pa.int64()),
    pa.field("status", pa.string()),         # ok | error
    pa.field("error", pa.string()),
    pa.field("finish_reason", pa.string()),
    pa.field("output", pa.string()),
    pa.field("n_steps", pa.int32()),
    pa.field("tokens_in", pa.int64()),
    pa.field("tokens_out", pa.int64()),
    pa.field("wall_time_s", pa.float64()),
    pa.field("started_at", pa.timestamp("ms", tz="UTC")),
    pa.field("finished_at", pa.timestamp("ms", tz="UTC")),
    pa.field("worker", pa.string()),
    pa.field("replica", pa.int32()),
    # what generated it beyond the config hash (engine.identity.engine_identity, JSON): weights
    # (path + content fingerprint), engine args, reproducible mode, the agent prompts' version.
    # A configuration never holds two (a resumed run that would mix them is refused).
    pa.field("engine", pa.string()),
    pa.field("weights_id", pa.string()),     # engine.hosting.weights.weights_id (self-judging is decided by it)
]

_CALL_FIELDS: list[pa.Field[Any]] = [
    pa.field("episode_id", pa.string(), nullable=False),
    pa.field("batch_id", pa.string(), nullable=False),     # the episode's (or the judgement's) batch
    pa.field("purpose", pa.string()),        # episode | judge
    pa.field("judge", pa.string()),          # judge id (judge calls)
    pa.field("key", pa.string()),            # judgement key (judge calls)
    pa.field("call", pa.int32()),            # position among the episode's (or judgement's) calls
    pa.field("message_ids", pa.list_(pa.string())),
    pa.field("completion", pa.string()),
    pa.field("finish_reason", pa.string()),
    pa.field("error", pa.string()),
    pa.field("model", pa.string()),
    pa.field("replica", pa.int32()),
    pa.field("endpoint", pa.string()),
    pa.field("params", pa.string()),         # JSON: max_tokens, temperature, top_p, seed, constraints
    pa.field("tokens_in", pa.int64()),
    pa.field("tokens_out", pa.int64()),
    pa.field("latency_s", pa.float64()),
    pa.field("started_at", pa.timestamp("ms", tz="UTC")),
]
CALL_SCHEMA = pa.schema(_CALL_FIELDS)
MESSAGE_SCHEMA = pa.schema([pa.field("message_id", pa.string(), nullable=False),
                            pa.field("batch_id", pa.string(), nullable=False),
                            pa.field("role", pa.string()), pa.field("content", pa.string())])

_STEP_FIELDS: list[pa.Field[Any]] = [
    pa.field("episode_id", pa.string(), nullable=False),
    pa.field("batch_id", pa.string(), nullable=False),
    pa.field("step", pa.int32()),
    pa.field("turn", pa.string()),
    pa.field("observation_chars", pa.int32()),
    pa.field("raw_output", pa.string()),
    pa.field("parsed_action", pa.string()),
    pa.field("result", pa.string()),
    pa.field("ok", pa.bool_()),
    pa.field("tokens_in", pa.int32()),
    pa.field("tokens_out", pa.int32()),
    pa.field("latency_s", pa.float64()),
    pa.field("call", pa.int32()),            # the model call behind the step (calls.call), -1 if none
]
STEP_SCHEMA = pa.schema(_STEP_FIELDS)

_METRIC_FIELDS: list[pa.Field[Any]] = [
    pa.field("benchmark", pa.string()), pa.field("model", pa.string()), pa.field("config_hash", pa.string()),
    pa.field("agent", pa.string()), pa.field("data", pa.string()),
    pa.field("judge", pa.string()),          # judge identity behind the judged metrics ("" when nothing was judged)
    pa.field("judge_model", pa.string()),
    pa.field("self_judged", pa.bool_()),     # the model under test judged its own outputs
    pa.field("metric", pa.string()), pa.field("value", pa.float64()),
    pa.field("n", pa.int64()),               # episodes the value is over (engine/outcomes.py)
    # what the number is over (engine/outcomes.py): the episodes planned for the configuration,
    # those with a scored result, those that failed, were stopped by the budget or never ran
    pa.field("n_planned", pa.int64()), pa.field("n_scored", pa.int64()), pa.field("n_error", pa.int64()),
    pa.field("n_budget_stopped", pa.int64()), pa.field("n_not_run", pa.int64()),
    pa.field("incomplete", pa.bool_()),      # some planned episode has no scored result
    pa.field("n_outside_plan", pa.int64()),  # stored episodes the plan leaves out (an earlier run planned more)
    pa.field("n_judged", pa.int64()),        # scored planned episodes the row's judge saw (null: no judge)
    pa.field("score_failures", pa.string()), # as_wrong | exclude (run.score_failures)
    pa.field("scope", pa.string()),          # all (the configuration's plan) | common (tasks every compared config finished)
    pa.field("task_set", pa.string()),       # hash of the planned (task, seed) set
    pa.field("tasks_dropped", pa.int64()),   # scope common: planned tasks of this config left out
    pa.field("note", pa.string()),           # what else a reader must know (e.g. who wrote the checklists)
    # the value's 95% interval (engine.stats.interval; null where there is none) and how it was made:
    # exact | bootstrap | too_few_tasks, "" for a value that is not a mean (older files: null)
    pa.field("lo", pa.float64()), pa.field("hi", pa.float64()), pa.field("interval", pa.string()),
]
METRIC_SCHEMA = pa.schema(_METRIC_FIELDS)
# the Parquet metadata key of the stored metrics table: what its rows were computed from
METRIC_KEY = "dateline.key"

_JUDGEMENT_FIELDS: list[pa.Field[Any]] = [
    pa.field("episode_id", pa.string(), nullable=False),
    pa.field("batch_id", pa.string(), nullable=False),
    pa.field("judge", pa.string()),          # judge identity id (hashes model, endpoint, sampling, prompt version)
    pa.field("judge_model", pa.string()),    # the judging model's name
    pa.field("judge_kind", pa.string()),     # hosted | openai_compatible
    pa.field("judge_prompt", pa.string()),   # version of the benchmark's judge prompts (a hash of their text)
    pa.field("key", pa.string()),            # which judgement of the episode (e.g. "grade")
    pa.field("value", pa.string()),          # parsed value; null when every attempt was malformed
    pa.field("ok", pa.bool_()),
    pa.field("attempts", pa.int32()),
    pa.field("raw_output", pa.string()),     # the last attempt's text
    pa.field("error", pa.string()),
    pa.field("tokens_in", pa.int64()),
    pa.field("tokens_out", pa.int64()),
    pa.field("latency_s", pa.float64()),
    pa.field("truncated", pa.bool_()),       # the last attempt stopped at its max_tokens (finish_reason length)
    pa.field("evaluation", pa.string()),     # the evaluation settings it was made under (JSON; part of the judge id)
    pa.field("judge_weights", pa.string()),  # weights id of the judging model (self-judging is decided by it)
    # the configuration whose episode was judged (reduce reads one configuration's judgements at a
    # time); null in rows written before it, and in pairwise stores
    pa.field("config_hash", pa.string()),
]
JUDGEMENT_SCHEMA = pa.schema(_JUDGEMENT_FIELDS)

_PLAN_FIELDS: list[pa.Field[Any]] = [
    pa.field("config_hash", pa.string(), nullable=False),
    pa.field("batch_id", pa.string(), nullable=False),     # one plan = one batch; the newest per config counts
    pa.field("episode_id", pa.string()),
    pa.field("task_id", pa.string()),
    pa.field("seed", pa.int64()),
    pa.field("task_set", pa.string()),       # hash of the plan's (task, seed) pairs
    pa.field("score_failures", pa.string()), # run.score_failures of the run that planned it
    pa.field("evaluation", pa.string()),     # the benchmark's evaluation settings then (JSON)
    pa.field("failure", pa.string()),        # what the episode counts as without a scored result (JSON; "" = the benchmark's default)
]
PLAN_SCHEMA = pa.schema(_PLAN_FIELDS)


_COMPARISON_FIELDS: list[pa.Field[Any]] = [
    pa.field("comparison_id", pa.string(), nullable=False),
    pa.field("batch_id", pa.string(), nullable=False),
    pa.field("benchmark", pa.string()),
    pa.field("task_id", pa.string()),
    pa.field("system_a", pa.string()),       # the pair, sorted; outcomes are stated for a vs b
    pa.field("system_b", pa.string()),
    pa.field("first", pa.string()),          # system shown as the first article
    pa.field("second", pa.string()),
    pa.field("order", pa.string()),          # random (seeded) | swapped (the both-orders repeat)
    pa.field("seed", pa.int64()),
    pa.field("first_sha", pa.string()),      # hashes of the two texts judged
    pa.field("second_sha", pa.string()),
]
COMPARISON_SCHEMA = pa.schema(_COMPARISON_FIELDS)


# Rows per Parquet row group of episodes and judgements shards (written sorted by config_hash): a
# per-configuration read prunes row groups of other configurations by their min/max statistics.
EPISODE_ROW_GROUP = 1024
JUDGEMENT_ROW_GROUP = 8192


def _conform(t: pa.Table, schema: pa.Schema) -> pa.Table:
    """``t`` in ``schema``'s column order and types; columns it was written without are nulls."""
    for name in schema.names:
        if name not in t.column_names:
            t = t.append_column(schema.field(name), pa.nulls(t.num_rows, schema.field(name).type))
    return t.select(schema.names).cast(schema)


def episode_schema(extra: Iterable[pa.Field[Any]]) -> pa.Schema:
    return pa.schema(EPISODE_FIELDS + list(extra))


_T = TypeVar("_T")
_DONE = object()


def _batch_id() -> str:
    return f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"


# a shard written by one flush is named after its batch id and holds only that batch's rows
_BATCH_SHARD = re.compile(r"part-(\d{20}-[0-9a-f]{8})\.parquet")


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


# -- where a store lives ---------------------------------------------------------------------
def is_uri(root: str | Path) -> bool:
    """True for a filesystem URI (``s3://bucket/prefix``, ``gs://…``, ``file:///…``)."""
    return isinstance(root, str) and "://" in root


def open_root(root: str | Path, filesystem: pafs.FileSystem | None = None) -> tuple[pafs.FileSystem, str]:
    """``(filesystem, path inside it)`` for a local path or any URI pyarrow understands. S3
    options go in the query string (``s3://b/p?endpoint_override=http://127.0.0.1:9000``) or
    in the usual AWS environment variables (``AWS_ENDPOINT_URL`` is honoured)."""
    if filesystem is not None:
        return filesystem, str(root).rstrip("/")
    if is_uri(root):
        fs, path = pafs.FileSystem.from_uri(str(root))
        return fs, path.rstrip("/")
    return pafs.LocalFileSystem(), os.path.abspath(root)


def is_run_dir(root: str | Path, table: str = "episodes", filesystem: pafs.FileSystem | None = None) -> bool:
    """Whether ``root`` (path or URI) holds a ``table`` folder (``episodes``: a run dir,
    ``comparisons``: a pairwise dir); creates nothing."""
    fs, base = open_root(root, filesystem)
    return fs.get_file_info(f"{base}/{table}").type == pafs.FileType.Directory


def upload_tree(local: Path, uri: str) -> int:
    """Copy the regular files under ``local`` to ``uri`` (a remote folder, its options in the
    query: ``s3://b/run/artifacts/e1?endpoint_override=...``), keeping relative paths; returns how
    many. A run dir on an object store keeps what episodes leave on a worker's disk this way (the
    node may be gone when someone looks). The folder may have been written by model code: it is
    walked and read through descriptors (``engine/fdtree.py``): a link, FIFO or a file swapped for
    a link after it was listed is skipped, never followed; names that are not UTF-8 are uploaded
    under their escaped form (``chart\\xff.png``), and any depth of folders costs no recursion."""
    from engine import fdtree

    try:
        top = os.open(local, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return 0
    fs, base = open_root(uri)
    n = skipped = 0
    try:
        for e in fdtree.walk(top):
            if not e.is_file:
                skipped += not e.is_dir
                continue
            fd = fdtree.open_file(e)
            if fd is None:
                skipped += 1
                continue
            key = f"{base}/{fdtree.show(e.rel)}"
            if len(key.partition("/")[2].encode()) > 1024:      # an S3 key (after the bucket) ends at 1,024 bytes
                os.close(fd)
                skipped += 1
                continue
            if isinstance(fs, pafs.LocalFileSystem):        # an object store has no folders to make
                fs.create_dir(key.rpartition("/")[0], recursive=True)
            with os.fdopen(fd, "rb") as f, fs.open_output_stream(key) as out:
                while chunk := f.read(1 << 20):
                    out.write(chunk)
            n += 1
    finally:
        os.close(top)
    if skipped:
        log.warning("artifacts %s: %d entries not uploaded: not regular files (links, FIFOs, or swapped since "
                    "they were listed), or paths too long for an object key", local, skipped)
    return n


def sub_uri(uri: str, *parts: str) -> str:
    """``uri`` with ``parts`` appended to its path, its query (endpoint options) kept."""
    head, q, query = uri.partition("?")
    return "/".join([head.rstrip("/"), *parts]) + q + query


def local_root(root: str | Path, local_dir: str | Path | None = None) -> Path:
    """The local folder for what a run keeps beside its tables (``logs/``, ``artifacts/``): the
    run dir itself when it is local; for a remote one (``s3://bucket/prefix``) ``local_dir``, else
    ``$DATELINE_LOCAL_DIR/<scheme>/<bucket>/<prefix>`` (default: under the temp dir). Creates nothing."""
    if not is_uri(root):
        return Path(root)
    fs, base = open_root(root)
    if isinstance(fs, pafs.LocalFileSystem):
        return Path(base)
    return _scratch(fs, base, local_dir)


def _scratch(fs: pafs.FileSystem, base: str, local_dir: str | Path | None) -> Path:
    if local_dir is not None:
        return Path(local_dir)
    scratch = os.environ.get("DATELINE_LOCAL_DIR") or os.path.join(tempfile.gettempdir(), "dateline")
    return Path(scratch) / fs.type_name / base.lstrip("/")


# -- vectorised dedup ------------------------------------------------------------------------
def _and(*exprs: pc.Expression | None) -> pc.Expression | None:
    out = None
    for e in exprs:
        if e is not None:
            out = e if out is None else out & e
    return out


def _eq(name: str, value: str | Iterable[str] | None) -> pc.Expression | None:
    """``name == value`` (a str) or ``name in value`` (an iterable); None when value is None."""
    if value is None:
        return None
    if isinstance(value, str):
        return pc.field(name) == value
    return pc.field(name).isin(pa.array(list(value), pa.string()))


# pyarrow-stubs quirks the code below works around: kernels are typed as returning an Array even
# for ChunkedArray input (they return a ChunkedArray), comparisons take only Arrow scalars (a Python
# value is wrapped with ``pa.scalar`` by pyarrow itself), and ``pc.fill_null`` is typed as
# ``coalesce`` (same-typed arguments), so nulls are filled with the ``.fill_null`` method.
_Column: TypeAlias = "pa.Array[Any] | pa.ChunkedArray[Any]"      # the stubs' generics, not subscriptable at run time
_Order: TypeAlias = Literal["ascending", "descending"]


# what :meth:`EpisodeStore.judges` describes a judge by
_JUDGE_INFO = ("judge", "judge_model", "judge_kind", "judge_prompt", "evaluation", "judge_weights")


def _config_rows(config_hash: str | None, episode_ids: Iterable[str] | None) -> pc.Expression | None:
    """Judgement rows of one configuration: stamped with its hash, or (written before the stamp)
    of one of its ``episode_ids``; None (every row) without ``config_hash``."""
    if config_hash is None:
        return None
    where = pc.field("config_hash") == config_hash
    if episode_ids is not None:
        where = where | (pc.field("config_hash").is_null()
                         & pc.field("episode_id").isin(pa.array(list(episode_ids), pa.string())))
    return where


def _ok_rank(col: _Column, ok_value: Any = True) -> _Column:
    """1 where ``col == ok_value`` (``"ok"`` for a status, True for a flag), else 0 (nulls too)."""
    return pc.cast(pc.equal(col, pa.scalar(ok_value)).fill_null(False), pa.int8())


def _starts(sorted_keys: pa.Table) -> pa.ChunkedArray[Any]:
    """For rows sorted by their key columns: True where a row's key differs from the previous
    row's (a null equals a null), i.e. where a group starts."""
    n = sorted_keys.num_rows
    if n == 0:
        return pa.chunked_array([], pa.bool_())
    diff: pa.ChunkedArray[Any] = pa.chunked_array([pa.array(np.zeros(n - 1, dtype=bool))])
    for col in sorted_keys.columns:
        cur, prev = col.slice(1), col.slice(0, n - 1)
        cn, pn = pc.is_null(cur), pc.is_null(prev)
        d = pc.if_else(pc.or_(cn, pn), pc.xor(cn, pn), pc.not_equal(cur, prev).fill_null(False))
        diff = cast("pa.ChunkedArray[Any]", pc.or_(diff, d))     # ChunkedArray in, ChunkedArray out
    return pa.chunked_array([pa.array([True]), *diff.chunks], pa.bool_())


def _sorted_unique(idx: _Column | np.ndarray[Any, Any]) -> pa.Array[Any]:
    return pa.array(np.unique(np.asarray(idx, dtype=np.int64)), pa.int64())


def _pick(t: pa.Table, keys: list[str], rank: Sequence[tuple[str, _Order]] = (),
          first_seen: bool = False) -> pa.Array[Any]:
    """Row indices of ``t``: per distinct ``keys`` (nulls are one value) the first row by ``rank``
    (ties: the earliest row, the sort is stable). Ascending, or with ``first_seen`` in the order
    in which the groups first appear (the iteration order of a dict filled row by row)."""
    if t.num_rows == 0:
        return pa.array([], pa.int64())
    by_key: list[tuple[str, _Order]] = [(k, "ascending") for k in keys]
    idx = pc.sort_indices(t, sort_keys=by_key + list(rank))
    starts = _starts(t.select(keys).take(idx))
    win = pc.filter(idx, starts)
    if not first_seen:
        return _sorted_unique(win)
    first = pc.filter(pc.sort_indices(t, sort_keys=by_key), starts)   # same groups, same positions
    return pc.take(win, pc.sort_indices(first))


def _pair(a: pa.ChunkedArray[Any], b: pa.ChunkedArray[Any]) -> pa.ChunkedArray[Any]:
    # the stubs allow no plain-str separator (the last positional argument)
    joined: pa.ChunkedArray[Any] = pc.binary_join_element_wise(a, b, "\x1f")  # type: ignore[call-overload]
    return joined


class _ShardedDir:
    """A folder of tables written as atomic shards (staged, then moved into place), on a local
    disk (fsync + ``os.replace``) or any pyarrow filesystem (``s3://``, ``gs://``: the move is a
    copy + delete, but readers only list final paths, where an object appears whole)."""
    SUBDIRS: tuple[str, ...] = ()

    def __init__(self, root: str | Path, *, filesystem: pafs.FileSystem | None = None,
                 local_dir: str | Path | None = None) -> None:
        self.fs, self.base = open_root(root, filesystem)
        self.local = isinstance(self.fs, pafs.LocalFileSystem)
        # ``root``: a local folder callers may join paths to (logs, artifacts). For a local
        # store it is the store itself; for a remote one a scratch folder on this machine.
        if filesystem is not None:
            self.root = Path(self.base) if self.local else _scratch(self.fs, self.base, local_dir)
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
    def _path(self, *parts: str) -> str:
        return "/".join([self.base, *parts])

    def _publish(self, staged: str, final: str) -> None:
        if self.local:
            with open(staged, "rb") as f:
                os.fsync(f.fileno())
            os.replace(staged, final)
        else:
            self.fs.move(staged, final)

    def _write(self, table: pa.Table, sub: str, name: str, row_group_size: int | None = None) -> Path | str:
        final = self._path(sub, name)
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
        staged = self._path("_staging", f"{sub}-{name}")
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
        staged = self._path("_staging", name.replace("/", "-"))
        if self.local:
            Path(self._path(name)).parent.mkdir(parents=True, exist_ok=True)
        with self.fs.open_output_stream(staged) as f:
            f.write(text.encode())
        self._publish(staged, self._path(name))

    def read_text(self, name: str) -> str | None:
        path = self._path(name)
        if self.fs.get_file_info(path).type != pafs.FileType.File:
            return None
        with self.fs.open_input_stream(path) as f:
            return f.read().decode()

    def exists(self, name: str) -> bool:
        return self.fs.get_file_info(self._path(name)).type != pafs.FileType.NotFound

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

    # remote I/O is one round trip per object: compaction's footer reads, shard reads and deletes
    # run this many at a time on a remote filesystem (one at a time on a local disk, as before)
    REMOTE_IO_THREADS = 16
    # a read on a remote filesystem fetches this many shards at once (Arrow's default is 4, and
    # its I/O pool 8 threads): a reduce of one configuration touches every shard that holds its
    # rows, one 40-100 ms GET each. Measured on moto + 40 ms: 37.1 s -> 8.6 s for a reduce of 8
    # configurations over 180 shards (docs/design/driver.md)
    REMOTE_READAHEAD = 32

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
        for info in self.fs.get_file_info(pafs.FileSelector(self._path(sub), allow_not_found=True)):
            name = info.base_name
            if info.type != pafs.FileType.File or not (name.startswith("part-") and name.endswith(".parquet")):
                continue
            if batches is not None and (m := _BATCH_SHARD.fullmatch(name)) and m.group(1) not in batches:
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

    def _read(self, sub: str, schema: pa.Schema, columns: list[str] | dict[str, pc.Expression] | None = None,
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
                dest = self._path("_corrupt", sub, name)
                if not dry_run:
                    if self.local:
                        Path(dest).parent.mkdir(parents=True, exist_ok=True)
                    self.fs.move(path, dest)
                moved.append((path, dest, why))
        return moved

    def _tables(self) -> list[tuple[str, pa.Schema]]:
        return []

    def _judgement_table(self, columns: list[str], filter: pc.Expression | None = None,
                         files: list[str] | None = None) -> pa.Table:
        t = self._read("judgements", JUDGEMENT_SCHEMA, list(dict.fromkeys(columns)), filter, files)
        return t.append_column("__ok", _ok_rank(t["ok"]))

    # -- judgements ------------------------------------------------------------------------
    def write_judgements(self, rows: list[dict[str, Any]]) -> str:
        """One shard of judge results (the judge stage flushes as it goes); a row's ``_calls`` /
        ``_messages`` (its transcript, engine/transcripts.py) go to the calls and messages tables."""
        if not rows:
            return ""
        batch_id = _batch_id()
        calls = [c for r in rows for c in r.pop("_calls", [])]
        messages = [m for r in rows for m in r.pop("_messages", {}).values()]
        if calls and isinstance(self, EpisodeStore):
            self._write_transcripts(batch_id, calls, messages)
        for r in rows:
            r["batch_id"] = batch_id
        # sorted by configuration in small row groups: a reader of one configuration
        # (engine.outcomes.reduce) skips the other configurations' row groups by their statistics
        t = self._table("judgements", rows, JUDGEMENT_SCHEMA)[0].sort_by("config_hash")
        if t.num_rows:
            self._write(t, "judgements", f"part-{batch_id}.parquet", JUDGEMENT_ROW_GROUP)
        return batch_id

    def judgements(self, judge: str | None = None) -> dict[str, dict[str, str | None]]:
        """``{episode_id: {key: value}}`` for one judge (all judges when None); per (episode, key)
        an ok row wins over a failed one, then the newest. A failed judgement maps to None."""
        t = self._judgement_table(["episode_id", "key", "value", "ok", "batch_id"], _eq("judge", judge))
        t = t.take(_pick(t, ["episode_id", "key"], [("__ok", "descending"), ("batch_id", "descending")], True))
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
        return self._by_judge(self._judgement_table(cols, _config_rows(config_hash, episode_ids)), parse)

    def judged(self, parse: Callable[[str, str], str | None] | None = None, *, config_hash: str | None = None,
               episode_ids: Iterable[str] | None = None
               ) -> tuple[dict[str, dict[str, dict[str, str | None]]], dict[str, dict[str, str]]]:
        """:meth:`judgements_by_judge` and :meth:`judges` from one read of the judgements table
        (what a reduce of one configuration needs of it)."""
        cols = ["episode_id", "judge", "key", "value", "ok", "batch_id", *_JUDGE_INFO] + (["raw_output"] if parse
                                                                                          else [])
        t = self._judgement_table(cols, _config_rows(config_hash, episode_ids))
        return self._by_judge(t.drop_columns(list(_JUDGE_INFO[1:])), parse), self._judges_of(t.select(list(_JUDGE_INFO)))

    def _by_judge(self, t: pa.Table, parse: Callable[[str, str], str | None] | None
                  ) -> dict[str, dict[str, dict[str, str | None]]]:
        t = t.append_column("__judge", t["judge"].fill_null(pa.scalar("")))
        t = t.take(_pick(t, ["__judge", "episode_id", "key"], [("__ok", "descending"), ("batch_id", "descending")],
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
        has = _ok_rank(pc.not_equal(t["judge_kind"], pa.scalar("")).fill_null(False))
        k = pa.Table.from_pydict({"jid": t["judge"].fill_null(pa.scalar("")), "has": has,
                                  "sec": pc.if_else(pc.equal(has, pa.scalar(1)), i, pc.negate(i))})
        return _pick(k, ["jid"], [("has", "descending"), ("sec", "ascending")], True)

    def judges(self) -> dict[str, dict[str, str]]:
        """``{judge id: {"model", "kind", "prompt"}}`` for every judge with rows here (one
        configuration's: :meth:`judged`). Rows written before the identity columns existed give
        the model from the id ("<model>:<hash>")."""
        return self._judges_of(self._read("judgements", JUDGEMENT_SCHEMA, list(_JUDGE_INFO)))

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
        t = self._read("judgements", JUDGEMENT_SCHEMA, ["judge", "episode_id"])
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
        return self._read("judgements", JUDGEMENT_SCHEMA, cols, _and(_eq("judge", judge), flag,
                                                                    _eq("episode_id", episode_ids))).to_pylist()

    def _judgements_keep(self, files: list[str]) -> pa.Array[Any]:
        """Rows of ``files`` compaction keeps: per (judge, episode, key) the best row (ok over
        failed, then newest), and, when that row's value is None (so ``ray_jobs.judge.settled``
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
        starts = _starts(s.select(keys))
        ok = s["__ok"]
        prev_ok = pa.chunked_array([pa.array([1], pa.int8()), *ok.slice(0, s.num_rows - 1).chunks], pa.int8())
        # in a group's run, failed rows follow ok rows, newest first: the newest failed row is the
        # first failed one
        first_failed = pc.and_(pc.equal(ok, pa.scalar(0)), pc.or_(starts, pc.equal(prev_ok, pa.scalar(1))))
        run = pc.subtract(pc.cumulative_sum(pc.cast(starts, pa.int64())), 1)
        best_none = pc.filter(pc.or_(pc.is_null(s["value"]), pc.equal(ok, pa.scalar(0))), starts)
        keep = pc.or_(starts, pc.and_(first_failed, pc.take(best_none, run)))
        return _sorted_unique(np.concatenate([np.asarray(pc.filter(idx, keep)),
                                              np.asarray(self._judge_info_rows(t))]))


@dataclass(frozen=True)
class StoredPlan:
    """A configuration's newest plan: its episodes ``(episode_id, task_id, seed, failure)``, the hash of
    that set, and the run's scoring policy and evaluation settings (JSON) when it was planned."""
    config_hash: str
    episodes: list[tuple[str, str, int, str]]
    task_set: str
    score_failures: str
    evaluation: str


class EpisodeStore(_ShardedDir):
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
        batch_id = _batch_id()
        name = f"part-{batch_id}.parquet"
        for r in episodes:
            r["batch_id"] = batch_id
        for s in steps:
            s["batch_id"] = batch_id
        eps, bad = self._table("episodes", episodes, self.schema)      # encoded before anything is written
        # transcripts and steps first (on an object store at once: one round trip each, from the
        # pool), then the episodes that make the batch exist
        self._map(lambda f: f(), [lambda: self._write_transcripts(batch_id, calls, messages),
                                  lambda: self._write(self._table("steps", steps, STEP_SCHEMA)[0], "steps", name)])
        # sorted by configuration in small row groups, as judgements (a shard holds every point of its run dir)
        if eps.num_rows:
            self._write(eps.sort_by("config_hash"), "episodes", name, EPISODE_ROW_GROUP)
        return Flush(batch_id, frozenset(b.episode_id for b in bad if b.episode_id is not None))

    def _write_transcripts(self, batch_id: str, calls: Sequence[dict[str, Any]],
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
            self._write(t, "messages", name)
            written |= set(cast("list[str]", t["message_id"].to_pylist()))     # not those set aside
        self._write(self._table("calls", [{**c, "batch_id": batch_id} for c in calls], CALL_SCHEMA)[0], "calls", name)

    def calls(self, episode_ids: Iterable[str], purpose: str | None = None) -> list[dict[str, Any]]:
        """The model calls of these episodes: an episode's own (of the batch of its stored row) and
        its judges' (every judgement batch), in order."""
        ids = list(episode_ids)
        winners = self.episodes(["episode_id", "batch_id"], episode_ids=ids)
        won = {(r["episode_id"], r["batch_id"]) for r in winners.to_pylist()}
        t = self._read("calls", CALL_SCHEMA, None, _and(_eq("episode_id", ids), _eq("purpose", purpose)))
        out = [r for r in t.to_pylist() if r["purpose"] != "episode" or (r["episode_id"], r["batch_id"]) in won]
        return sorted(out, key=lambda r: (r["episode_id"], r["purpose"] != "episode", r["judge"] or "", r["key"] or "",
                                          r["batch_id"], r["call"]))

    def messages(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """``{message_id: {"role", "content"}}`` for these ids (found ones)."""
        want = list(dict.fromkeys(ids))
        if not want:
            return {}
        t = self._read("messages", MESSAGE_SCHEMA, ["message_id", "role", "content"], _eq("message_id", want))
        return {r["message_id"]: r for r in t.to_pylist()}

    def write_plan(self, config_hash: str, planned: Sequence[tuple[str, str, int, str]], task_set: str,
                   score_failures: str, evaluation: str) -> bool:
        """Record what a run planned for ``config_hash``: ``(episode_id, task_id, seed, failure)``
        per episode. Skipped (False) when the newest plan stored for it is the same."""
        have = self.plans([config_hash]).get(config_hash)
        if have is not None and have.task_set == task_set and have.score_failures == score_failures \
                and have.evaluation == evaluation:
            return False
        batch_id = _batch_id()
        t = pa.Table.from_pydict({
            "config_hash": [config_hash] * len(planned), "batch_id": [batch_id] * len(planned),
            "episode_id": [p[0] for p in planned], "task_id": [p[1] for p in planned],
            "seed": [p[2] for p in planned], "failure": [p[3] for p in planned], "task_set": [task_set] * len(planned),
            "score_failures": [score_failures] * len(planned), "evaluation": [evaluation] * len(planned)},
            schema=PLAN_SCHEMA)
        self._write(t, "plans", f"part-{batch_id}.parquet")
        return True

    def plans(self, config_hash: Iterable[str] | None = None) -> dict[str, StoredPlan]:
        """The newest plan of each configuration (of those in ``config_hash``), or none for a
        configuration run before plans were recorded (its stored episodes are then its plan)."""
        t = self._read("plans", PLAN_SCHEMA, None, _eq("config_hash", None if config_hash is None else list(config_hash)))
        if t.num_rows == 0:
            return {}
        newest = t.group_by("config_hash").aggregate([("batch_id", "max")])
        t = t.join(newest.rename_columns(["config_hash", "__newest"]), "config_hash")
        t = t.filter(pc.equal(t["batch_id"], t["__newest"]))
        out: dict[str, StoredPlan] = {}
        for h in cast("list[str]", pc.unique(t["config_hash"]).to_pylist()):
            sub = t.filter(pc.equal(t["config_hash"], pa.scalar(h)))
            sub = sub.take(_pick(sub, ["episode_id"]))
            first = sub.slice(0, 1).to_pylist()[0]
            out[h] = StoredPlan(h, list(zip(cast("list[str]", sub["episode_id"].to_pylist()),
                                            cast("list[str]", sub["task_id"].to_pylist()),
                                            cast("list[int]", sub["seed"].to_pylist()),
                                            [f or "" for f in sub["failure"].to_pylist()])),
                                first["task_set"] or "", first["score_failures"] or "", first["evaluation"] or "")
        return out

    def write_metrics(self, rows: list[dict[str, Any]], key: str) -> Path | str:
        """Store the metrics table as a cache of the rows computed under ``key`` (what they were
        computed from: engine/metric_table.py ``metric_key``); only ``dateline run`` writes it, and a
        reader uses it only while its key still matches (:meth:`cached_metrics`)."""
        schema = METRIC_SCHEMA.with_metadata({METRIC_KEY: key})
        return self._write(pa.Table.from_pylist(rows, schema=schema), "metrics", "metrics.parquet")

    def cached_metrics(self, key: str) -> list[dict[str, Any]] | None:
        """The stored metrics rows when they were computed under ``key``; None when there are none,
        they were computed from something else (rows added since, another code version, other
        flags) or cannot be read (the cache is derived: it is then recomputed, never trusted)."""
        path = self._path("metrics", "metrics.parquet")
        try:
            if self.fs.get_file_info(path).type != pafs.FileType.File:
                return None
            meta = pq.read_schema(path, filesystem=self.fs).metadata or {}
            if meta.get(METRIC_KEY.encode()) != key.encode():
                return None
            return _conform(pq.read_table(path, filesystem=self.fs), METRIC_SCHEMA).to_pylist()
        except (pa.ArrowInvalid, OSError) as e:
            log.warning("%s: the stored metrics table cannot be read (%s); recomputing", path, e)
            return None

    def listing_digest(self, subs: Sequence[str]) -> str:
        """A digest of the final shards of ``subs`` (names and sizes): it changes whenever rows
        are added, compacted or moved aside."""
        parts = []
        for sub in subs:
            for info in self.fs.get_file_info(pafs.FileSelector(self._path(sub), allow_not_found=True)):
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
        pushed = _and(_eq("config_hash", config_hash), _eq("benchmark", benchmark), _eq("episode_id", episode_ids),
                      pc.field("status") == "ok" if ok_only else None)
        t = self._read("episodes", self.schema, proj, pushed)
        t = t.append_column("__ok", _ok_rank(t["status"], "ok"))
        t = t.take(_pick(t, ["episode_id"], [("__ok", "descending"), ("batch_id", "descending")]))
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
        t = self._read("steps", STEP_SCHEMA, need, _eq("episode_id", ids), files)
        wanted = _pair(winners["episode_id"], winners["batch_id"]).combine_chunks()
        t = t.filter(pc.is_in(_pair(t["episode_id"], t["batch_id"]), value_set=wanted))
        t = t.take(_pick(t, ["episode_id", "batch_id", "step"]))     # a compaction cut short leaves copies
        return t.select(cols)

    def metrics(self) -> pa.Table:
        path = self._path("metrics", "metrics.parquet")
        if self.fs.get_file_info(path).type != pafs.FileType.File:
            return METRIC_SCHEMA.empty_table()
        try:
            return _conform(pq.read_table(path, filesystem=self.fs), METRIC_SCHEMA)
        except (pa.ArrowInvalid, OSError) as e:
            raise CorruptShard(path, None, None, f"the metrics table of run dir {self.uri} cannot be read ({e}); it is "
                                                 f"derived: recompute it with `dateline metrics {self.uri} BENCHMARK`") from e

    def finished_ids(self, config_hash: str | Iterable[str] | None = None,
                     statuses: Sequence[str] = ("ok",)) -> set[str]:
        """Ids of episodes that need no re-run: a row with one of ``statuses`` (default ok; a
        resumed run adds "error" unless ``run.retry_failed``). One column read."""
        t = self._read("episodes", self.schema, ["episode_id"],
                       _and(pc.field("status").isin(list(statuses)), _eq("config_hash", config_hash)))
        return set(cast("list[str]", pc.unique(t["episode_id"]).to_pylist()))     # a non-nullable column

    # -- maintenance -----------------------------------------------------------------------
    def compact(self) -> None:
        """Rewrite each table as one shard of the rows readers can see (steps, then episodes,
        then judgements; atomic per table: the new shard is in place before the old ones go)."""
        self._compact("steps", STEP_SCHEMA, self._steps_keep)
        # every column any episode shard has: a run dir holds several benchmarks' episodes, each
        # with its own columns, and this store object knows one benchmark's (compacting through
        # its schema alone would drop the others')
        stored = self._map(lambda f: pq.read_schema(f, filesystem=self.fs), self._files("episodes"))
        self._compact("episodes", pa.unify_schemas([self.schema, *(x.remove_metadata() for x in stored)]),
                      self._episodes_keep)
        self._compact("judgements", JUDGEMENT_SCHEMA, self._judgements_keep)
        self._compact("plans", PLAN_SCHEMA, self._plans_keep)
        self._compact("messages", MESSAGE_SCHEMA, self._messages_keep)
        self._compact("calls", CALL_SCHEMA, self._calls_keep)

    def _messages_keep(self, files: list[str]) -> pa.Array[Any]:
        """One row per message id."""
        t = self._read("messages", MESSAGE_SCHEMA, ["message_id"], files=files)
        return _pick(t, ["message_id"])

    def _calls_keep(self, files: list[str]) -> pa.Array[Any]:
        """An episode's calls of its stored row's batch, and every judge call."""
        winners = self.episodes(["episode_id", "batch_id"])
        t = self._read("calls", CALL_SCHEMA, ["episode_id", "batch_id", "purpose"], files=files)
        won = pc.is_in(_pair(t["episode_id"], t["batch_id"]),
                       value_set=_pair(winners["episode_id"], winners["batch_id"]).combine_chunks())
        judge = np.asarray(pc.not_equal(t["purpose"], pa.scalar("episode")).fill_null(True))
        return _sorted_unique(np.flatnonzero(judge | np.asarray(won)))

    def _plans_keep(self, files: list[str]) -> pa.Array[Any]:
        """The rows of each configuration's newest plan."""
        t = self._read("plans", PLAN_SCHEMA, ["config_hash", "batch_id"], files=files)
        newest = t.group_by("config_hash").aggregate([("batch_id", "max")])
        t = t.append_column("__i", pa.array(np.arange(t.num_rows, dtype=np.int64)))
        t = t.join(newest.rename_columns(["config_hash", "__newest"]), "config_hash")
        return _sorted_unique(pc.filter(t["__i"], pc.equal(t["batch_id"], t["__newest"])))

    def _episodes_keep(self, files: list[str]) -> pa.Array[Any]:
        t = self._read("episodes", self.schema, ["episode_id", "status", "batch_id"], files=files)
        t = t.append_column("__ok", _ok_rank(t["status"], "ok"))
        return _pick(t, ["episode_id"], [("__ok", "descending"), ("batch_id", "descending")])

    def _steps_keep(self, files: list[str]) -> pa.Array[Any]:
        winners = self.episodes(["episode_id", "batch_id"])
        t = self._read("steps", STEP_SCHEMA, ["episode_id", "batch_id", "step"], files=files)
        mask = pc.is_in(_pair(t["episode_id"], t["batch_id"]),
                        value_set=_pair(winners["episode_id"], winners["batch_id"]).combine_chunks())
        rows = pc.indices_nonzero(mask)
        return _sorted_unique(pc.take(rows, _pick(t.filter(mask), ["episode_id", "batch_id", "step"])))

    def _compact(self, sub: str, schema: pa.Schema, keep: Callable[[list[str]], pa.Array[Any]],
                 rows_per_group: int = 65536) -> None:
        """Stream the kept rows (global indices over ``files`` in order) of each old shard into
        one new shard, a shard at a time, then delete the old ones."""
        files = self._files(sub)
        if len(files) <= 1:
            return
        idx = np.asarray(keep(files), dtype=np.int64)
        frags = list(self._dataset(sub, schema, files).get_fragments())
        offsets = np.cumsum([0] + self._map(lambda f: f.count_rows(), frags))
        name = f"part-{time.time_ns():020d}-compact.parquet"
        staged = self._path("_staging", f"{sub}-{name}")
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
        self._publish(staged, self._path(sub, name))
        self._map(self.fs.delete_file, files)

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


class PairwiseStore(_ShardedDir):
    """A pairwise-judging directory: the planned comparisons and their judgements."""
    SUBDIRS = ("comparisons", "judgements")

    def _tables(self) -> list[tuple[str, pa.Schema]]:
        return [("comparisons", COMPARISON_SCHEMA), ("judgements", JUDGEMENT_SCHEMA)]

    def write_comparisons(self, rows: list[dict[str, Any]]) -> str:
        if not rows:
            return ""
        batch_id = _batch_id()
        rows = [{**r, "batch_id": batch_id} for r in rows]
        self._write(self._table("comparisons", rows, COMPARISON_SCHEMA)[0], "comparisons", f"part-{batch_id}.parquet")
        return batch_id

    def comparisons(self) -> list[dict[str, Any]]:
        """One row per comparison id (the first written; a comparison's content never changes)."""
        t = self._read("comparisons", COMPARISON_SCHEMA)
        return t.take(_pick(t, ["comparison_id"])).to_pylist()


def step_rows(episode_id: str, steps: list[StepRecord]) -> list[dict[str, Any]]:
    return [{"episode_id": episode_id, **asdict(s)} for s in steps]


def metric_rows(benchmark: str, model: str, config_hash: str, agent: str, data: str,
                rows: list[MetricRow], judge: str = "", judge_model: str = "",
                self_judged: bool = False, **counts: Any) -> list[dict[str, Any]]:
    """Metrics table rows; ``counts``: the columns saying what they are over (``n_planned``...,
    ``scope``, ``task_set``; engine/outcomes.py), the same for every row given."""
    return [{"benchmark": benchmark, "model": model, "config_hash": config_hash, "agent": agent, "data": data,
             "judge": judge, "judge_model": judge_model, "self_judged": self_judged,
             "metric": m.metric, "value": m.value, "n": m.n, "lo": m.lo, "hi": m.hi, "interval": m.interval,
             **counts} for m in rows]
