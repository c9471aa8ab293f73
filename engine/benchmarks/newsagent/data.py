"""The newsagent task format (paper section 3.1) and its loader.

A dataset is a folder with two JSON Lines files:

``objects.jsonl`` - the historical database, shared by all tasks (one FAISS index)::

    {"object_id": "h0001", "date": "2025-02-01", "text": "...", "kind": "description", "source": "..."}

``tasks.jsonl`` - one newswriting task per line::

    {"task_id": "...", "title": "...", "release_date": "2025-03-14",
     "firsthand": ["...", "[Caption] ...", "[Speaker] ..."],
     "reference_evidence": ["h0001", ...], "reference_article": "..."}

``kind`` is description, caption (text starts with ``[Caption]``) or quote (``[Speaker] text``).
Every reference id must name an object dated strictly before the task's release date. Dates are
full dates from 1800 to a year after today (``engine.inputs.jsonl.field_date``: a release date in 2150 is
a typo, and would make every object of the corpus evidence from "before" it). Ids are
unique, safe as names (no path syntax); texts are non-blank and at most ``MAX_TEXT_CHARS``. Every
bad row raises a :class:`~engine.errors.BadDataError` naming file, row and field, or with a
:class:`~engine.inputs.quarantine.Quarantine` is skipped (``docs/design/data.md``).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import BadDataError
from engine.inputs.jsonl import field_date, field_id, field_list, field_str, read_unique
from engine.inputs.quarantine import Quarantine

OBJECT_KINDS = ("description", "caption", "quote")
# Characters of one text field (an object's text, a firsthand item, a reference article).
MAX_TEXT_CHARS = 5_000_000


@dataclass(frozen=True)
class HistoricalObject:
    object_id: str
    date: dt.date
    text: str
    kind: str = "description"
    source: str = ""


@dataclass(frozen=True)
class NewsTask:
    task_id: str
    title: str
    release_date: dt.date
    firsthand: tuple[str, ...]
    reference_evidence: tuple[str, ...] = ()
    reference_article: str = ""
    source: str = ""


@dataclass
class NewsDataset:
    root: Path
    tasks: list[NewsTask]
    objects: list[HistoricalObject]
    _by_id: dict[str, HistoricalObject] = field(default_factory=dict, repr=False)

    def object(self, object_id: str) -> HistoricalObject:
        if not self._by_id:
            self._by_id = {o.object_id: o for o in self.objects}
        return self._by_id[object_id]


def _str(path: Path, i: int, row: dict[str, Any], key: str, required: bool = True) -> str:
    return field_str(path, i, row, key, required=required, strip=False, max_chars=MAX_TEXT_CHARS)


def _date(path: Path, i: int, row: dict[str, Any], key: str) -> dt.date:
    return field_date(path, i, key, row.get(key))


def _object(path: Path, i: int, row: dict[str, Any]) -> HistoricalObject:
    kind = _str(path, i, row, "kind", required=False) or "description"
    if kind not in OBJECT_KINDS:
        raise BadDataError("unknown_value", path, i, "kind", f"expected one of {OBJECT_KINDS}, got {kind!r}")
    return HistoricalObject(field_id(path, i, row, "object_id"), _date(path, i, row, "date"),
                            _str(path, i, row, "text"), kind, _str(path, i, row, "source", required=False))


def load_objects(path: Path, bad: Quarantine | None = None) -> list[HistoricalObject]:
    """The objects of ``objects.jsonl``; with ``bad``, bad rows are recorded there and skipped."""
    return list(read_unique(path, bad, _object, lambda o: o.object_id, "object_id"))


def _task(path: Path, i: int, row: dict[str, Any], objects: dict[str, HistoricalObject] | None) -> NewsTask:
    tid = field_id(path, i, row, "task_id")
    release = _date(path, i, row, "release_date")
    firsthand = field_list(path, i, row, "firsthand", max_chars=MAX_TEXT_CHARS)
    if not firsthand:
        raise BadDataError("empty_text", path, i, "firsthand", "a task needs at least one firsthand object")
    refs = field_list(path, i, row, "reference_evidence", required=False)
    for k, ref in enumerate(refs):
        if ref in refs[:k]:
            raise BadDataError("duplicate_id", path, i, "reference_evidence", f"object id {ref!r} listed twice")
        if objects is None:
            continue
        obj = objects.get(ref)
        if obj is None:
            raise BadDataError("unknown_reference", path, i, "reference_evidence", f"unknown object id {ref!r}")
        if obj.date >= release:
            raise BadDataError("after_cutoff", path, i, "reference_evidence",
                               f"object {ref!r} is dated {obj.date}, not before the release date {release}")
    return NewsTask(tid, _str(path, i, row, "title"), release, firsthand, refs,
                    _str(path, i, row, "reference_article", required=False),
                    _str(path, i, row, "source", required=False))


def load_tasks(path: Path, objects: dict[str, HistoricalObject] | None = None,
               bad: Quarantine | None = None) -> list[NewsTask]:
    """The tasks of ``tasks.jsonl``, their reference evidence checked against ``objects`` when
    given; with ``bad``, bad rows are recorded there and skipped."""
    return list(read_unique(path, bad, lambda p, i, row: _task(p, i, row, objects), lambda t: t.task_id, "task_id"))


def load_dataset(root: str | Path, limit: int | None = None, bad: Quarantine | None = None) -> NewsDataset:
    """The dataset folder ``root``. Without ``bad`` the first bad row raises a DataError; with it,
    bad rows are recorded there and skipped (a task citing a skipped object is skipped too).
    A dataset without any task is an error either way."""
    root = Path(root)
    objects = load_objects(root / "objects.jsonl", bad)
    if not objects:          # an empty index: every search would find nothing, silently
        raise BadDataError("empty_file", root / "objects.jsonl", None, None,
                           "no objects: the search corpus is empty" + (f" after skipping {len(bad)} bad rows" if bad else ""))
    tasks = load_tasks(root / "tasks.jsonl", {o.object_id: o for o in objects}, bad)
    if not tasks:
        raise BadDataError("empty_file", root / "tasks.jsonl", None, None,
                           "no tasks" + (f" left after skipping {len(bad)} bad rows" if bad else ""))
    if limit is not None:
        tasks = tasks[:limit]
    return NewsDataset(root, tasks, objects)


def write_dataset(root: str | Path, tasks: list[NewsTask], objects: list[HistoricalObject]) -> None:
    """Write a dataset folder (used by converters); files are written whole, then renamed."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)

    def dump(name: str, rows: list[dict[str, Any]]) -> None:
        tmp = root / f".{name}.tmp"
        with tmp.open("w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        tmp.replace(root / name)

    dump("objects.jsonl", [{"object_id": o.object_id, "date": o.date.isoformat(), "text": o.text,
                            "kind": o.kind, "source": o.source} for o in objects])
    dump("tasks.jsonl", [{"task_id": t.task_id, "title": t.title, "release_date": t.release_date.isoformat(),
                          "firsthand": list(t.firsthand), "reference_evidence": list(t.reference_evidence),
                          "reference_article": t.reference_article, "source": t.source} for t in tasks])
