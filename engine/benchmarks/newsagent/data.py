"""The newsagent task format (paper section 3.1) and its loader.

A dataset is a folder with two JSON Lines files:

``objects.jsonl`` - the historical database, shared by all tasks (one FAISS index)::

    {"object_id": "h0001", "date": "2025-02-01", "text": "...", "kind": "description", "source": "..."}

``tasks.jsonl`` - one newswriting task per line::

    {"task_id": "...", "title": "...", "release_date": "2025-03-14",
     "firsthand": ["...", "[Caption] ...", "[Speaker] ..."],
     "reference_evidence": ["h0001", ...], "reference_article": "..."}

``kind`` is description, caption (text starts with ``[Caption]``) or quote (``[Speaker] text``).
Every reference id must name an object dated strictly before the task's release date.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import DataError
from engine.jsonl import field_date, field_str, read_jsonl

OBJECT_KINDS = ("description", "caption", "quote")


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
    return field_str(path, i, row, key, required=required, strip=False)


def _date(path: Path, i: int, row: dict[str, Any], key: str) -> dt.date:
    return field_date(path, i, key, _str(path, i, row, key))


def _str_list(path: Path, i: int, row: dict[str, Any], key: str, required: bool = True) -> tuple[str, ...]:
    if key not in row:
        if required:
            raise DataError(path, i, key, "missing")
        return ()
    value = row[key]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise DataError(path, i, key, "expected a list of non-empty strings")
    return tuple(value)


def load_objects(path: Path) -> list[HistoricalObject]:
    objects: list[HistoricalObject] = []
    seen: dict[str, int] = {}
    for i, row in read_jsonl(path):
        oid = _str(path, i, row, "object_id")
        if oid in seen:
            raise DataError(path, i, "object_id", f"duplicate id {oid!r} (first at row {seen[oid]})")
        seen[oid] = i
        kind = _str(path, i, row, "kind", required=False) or "description"
        if kind not in OBJECT_KINDS:
            raise DataError(path, i, "kind", f"expected one of {OBJECT_KINDS}, got {kind!r}")
        objects.append(HistoricalObject(oid, _date(path, i, row, "date"), _str(path, i, row, "text"), kind,
                                        _str(path, i, row, "source", required=False)))
    return objects


def load_tasks(path: Path, objects: dict[str, HistoricalObject] | None = None) -> list[NewsTask]:
    tasks: list[NewsTask] = []
    seen: dict[str, int] = {}
    for i, row in read_jsonl(path):
        tid = _str(path, i, row, "task_id")
        if tid in seen:
            raise DataError(path, i, "task_id", f"duplicate id {tid!r} (first at row {seen[tid]})")
        seen[tid] = i
        release = _date(path, i, row, "release_date")
        firsthand = _str_list(path, i, row, "firsthand")
        if not firsthand:
            raise DataError(path, i, "firsthand", "a task needs at least one firsthand object")
        refs = _str_list(path, i, row, "reference_evidence", required=False)
        if objects is not None:
            for ref in refs:
                obj = objects.get(ref)
                if obj is None:
                    raise DataError(path, i, "reference_evidence", f"unknown object id {ref!r}")
                if obj.date >= release:
                    raise DataError(path, i, "reference_evidence",
                                    f"object {ref!r} is dated {obj.date}, not before the release date {release}")
        tasks.append(NewsTask(tid, _str(path, i, row, "title"), release, firsthand, refs,
                              _str(path, i, row, "reference_article", required=False),
                              _str(path, i, row, "source", required=False)))
    return tasks


def load_dataset(root: str | Path, limit: int | None = None) -> NewsDataset:
    root = Path(root)
    objects = load_objects(root / "objects.jsonl")
    tasks = load_tasks(root / "tasks.jsonl", {o.object_id: o for o in objects})
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
