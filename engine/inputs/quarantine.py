"""Bad input rows that loaders skip instead of failing on (``benchmark.on_bad_rows=skip``).

Every loader check raises a :class:`~engine.errors.BadDataError`: a :class:`DataError` naming
the file, the 1-based row and the field, with a ``kind`` from :data:`KINDS`. What happens then
is the benchmark's ``on_bad_rows``:

* ``error`` (default): the loader raises it; nothing runs on data with a bad row.
* ``skip``: the loader hands it to a :class:`Quarantine` (:func:`reject`), drops the row (a
  task, an object, a question, a page, a task folder) and goes on; whatever depended on a
  dropped row is checked as usual (a task citing a dropped object is itself dropped as an
  ``unknown_reference``). A file-level problem in the middle of a file (a truncated gzip)
  keeps the rows read before it. Problems with no row to drop (a missing data file or folder,
  no rows left at all) raise in both modes.

Nothing is dropped silently: each load logs how many rows it skipped, by kind, and the driver
(``ray_jobs.run.make_point``) collects the rows skipped while it loads the tasks
(:func:`collecting`) and writes them to ``RUN_DIR/quarantine/part-<id>.parquet``
(``engine.storage.write_quarantine``): file, row, field, kind, reason and the first 200 characters of the
raw row. ``docs/design/data.md`` lists the kinds per loader.

The run's store writer sets rows aside here too (:data:`WRITER_KINDS`, ``engine/storage/shards.py``):
a row Arrow cannot encode even after its text is escaped. Such a row also names its
``episode_id`` and keeps its whole ``content`` (JSON, ASCII-escaped: nothing is lost).
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import logging
import os
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from engine.errors import DataError
from engine.inputs.fdtree import escape_text

log = logging.getLogger("dateline.quarantine")

ON_BAD_ROWS = ("error", "skip")
RAW_CHARS = 200          # of the raw row kept in the quarantine table

# The kinds of bad input the loaders tell apart (the ``kind`` of a BadDataError).
KINDS: dict[str, str] = {
    "missing_file": "a required file or folder is absent",
    "empty_file": "a data file or folder with no rows (or none left after skipping)",
    "bad_utf8": "bytes that are not UTF-8",
    "truncated_gzip": "a gzip stream that ends before its end marker",
    "corrupt_gzip": "not a gzip stream, or a damaged one",
    "invalid_json": "a line (or file) that is not JSON",
    "not_object": "JSON whose top level is not an object",
    "unknown_field": "a field the format does not have (a typo would be ignored otherwise)",
    "missing_field": "a required field is absent or null",
    "wrong_type": "a value of the wrong JSON type (a number for a string, a string for a list)",
    "empty_text": "a required text that is empty or blank",
    "too_large": "a text, line or file over the loader's documented size limit",
    "bad_date": "a date not written YYYY-MM-DD (or YYYY/MM/DD)",
    "partial_date": "a year or year-month where a full date is required",
    "impossible_date": "a date that does not exist (2023-02-30)",
    "date_out_of_range": "a date before 1800 (a typo such as 0202) or more than a year from today (2150)",
    "after_cutoff": "evidence dated on or after the task's release date (it would leak the future)",
    "duplicate_id": "an id (or labelled pair) seen before",
    "unknown_reference": "a reference to an object, task, system or template that does not exist",
    "unknown_value": "a value outside its allowed set (an enum, an index into choices)",
    "unsafe_name": "an id or file name that could leave its folder: '/', '\\\\', '..', NUL, control "
                   "characters, a symlink (never followed)",
    "bad_url": "a URL that is not absolute (scheme://host/...)",
    "inconsistent": "fields that contradict each other or the folder (task_id vs folder name, a "
                    "pair of one system, a checklist built for another reference)",
    "unsupported_file": "a source file of a type the benchmark cannot read, or not a regular file (FIFO, device)",
    "bad_table": "a CSV table that cannot be read (empty, ragged rows)",
    "malformed_value": "a string not in its required format (a checklist criterion's scoring lines)",
}

# The kinds of rows a run's store writer sets aside (``engine.storage``), not a loader's.
WRITER_KINDS: dict[str, str] = {
    "unencodable_row": "a result row Arrow cannot store even with its text escaped (a value of the wrong type)",
}

_FIELDS: list[pa.Field[Any]] = [
    pa.field("file", pa.string()),
    pa.field("row", pa.int64()),          # 1-based line or record; null for a whole-file problem
    pa.field("field", pa.string()),
    pa.field("kind", pa.string()),        # one of KINDS ("other" for a DataError without a kind)
    pa.field("reason", pa.string()),
    pa.field("raw", pa.string()),         # the start of the raw row (RAW_CHARS characters)
    # rows a store writer set aside (WRITER_KINDS; null for a loader's): whose, and the whole row
    pa.field("episode_id", pa.string()),
    pa.field("content", pa.string()),     # JSON, ASCII-escaped (lone surrogates kept as \udcff)
]
SCHEMA = pa.schema(_FIELDS)


@dataclass(frozen=True)
class BadRow:
    file: str
    row: int | None
    field: str | None
    kind: str
    reason: str
    raw: str
    episode_id: str | None = None
    content: str | None = None


def excerpt(raw: Any) -> str:
    """The first :data:`RAW_CHARS` characters of a raw row (bytes decoded with replacement,
    objects as JSON)."""
    if raw is None:
        return ""
    if isinstance(raw, bytes):
        text = raw[: RAW_CHARS * 4].decode("utf-8", "replace")
    elif isinstance(raw, str):
        text = raw[: RAW_CHARS]
    else:
        try:
            text = json.dumps(raw, ensure_ascii=False, default=str)[: RAW_CHARS * 2]
        except (TypeError, ValueError):
            text = repr(raw)
    return text[:RAW_CHARS]


class Quarantine:
    """The bad rows skipped by loaders running with ``on_bad_rows=skip``."""

    def __init__(self) -> None:
        self.rows: list[BadRow] = []

    def __len__(self) -> int:
        return len(self.rows)

    def add(self, err: DataError, raw: Any = None) -> None:
        self.rows.append(BadRow(str(err.path), err.row, err.field, getattr(err, "kind", "other"),
                                getattr(err, "message", str(err)), excerpt(raw)))

    def kinds(self, since: int = 0) -> dict[str, int]:
        return dict(Counter(r.kind for r in self.rows[since:]))


_active: contextvars.ContextVar[Quarantine | None] = contextvars.ContextVar("dateline_quarantine", default=None)


@contextmanager
def collecting() -> Iterator[Quarantine]:
    """Collect every row skipped inside the block (by loaders whose ``on_bad_rows`` is skip)
    into one :class:`Quarantine`: what the driver writes to the run dir."""
    q = Quarantine()
    token = _active.set(q)
    try:
        yield q
    finally:
        _active.reset(token)


def check_mode(on_bad_rows: str) -> None:
    if on_bad_rows not in ON_BAD_ROWS:
        raise ValueError(f"on_bad_rows: must be one of {ON_BAD_ROWS}, got {on_bad_rows!r}")


@contextmanager
def skipping(on_bad_rows: str, what: str) -> Iterator[Quarantine | None]:
    """The quarantine a loader of ``what`` is given: None for ``error`` (bad rows raise), else
    the :func:`collecting` block's (or a new one). Logs the rows skipped inside, by kind."""
    check_mode(on_bad_rows)
    if on_bad_rows == "error":
        yield None
        return
    q = _active.get()
    if q is None:         # (not ``or``: an empty Quarantine is falsy)
        q = Quarantine()
    before = len(q)
    yield q
    if len(q) > before:
        log.warning("%s: %d bad rows skipped (benchmark.on_bad_rows=skip): %s", what, len(q) - before,
                    ", ".join(f"{k} {n}" for k, n in sorted(q.kinds(before).items())))


def reject(bad: Quarantine | None, err: DataError, raw: Any = None) -> None:
    """Raise ``err`` (``on_bad_rows=error``), or record it with its raw row to skip the row."""
    if bad is None:
        raise err
    bad.add(err, raw)


def quarantine_table(rows: Sequence[BadRow]) -> pa.Table:
    # a path or row may hold a name that is not UTF-8: stored escaped, never the table's end
    return pa.Table.from_pylist([{k: escape_text(v) if isinstance(v, str) else v for k, v in asdict(r).items()}
                                 for r in rows], schema=SCHEMA)


def part_name(rows: Sequence[BadRow]) -> str:
    # named after the content: a re-run that skips the same rows rewrites the same part
    digest = hashlib.sha256(json.dumps([asdict(r) for r in rows], sort_keys=True).encode()).hexdigest()
    return f"part-{digest[:16]}.parquet"


def write_quarantine_file(path: Path, rows: Sequence[BadRow]) -> Path | None:
    """Write ``rows`` as one Parquet file (converters, which have no run store): staged, then
    renamed into place; logs the count. Nothing (and any old file removed) when there are none."""
    if not rows:
        path.unlink(missing_ok=True)
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(quarantine_table(rows), tmp)
    os.replace(tmp, path)
    log.warning("%d bad rows skipped, see %s", len(rows), path)
    return path
