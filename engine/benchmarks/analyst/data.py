"""Analyst task folders.

    <tasks_dir>/<task_id>/
      task.json        {"task_id", "instruction", "family", "variant", "domain", "template_from"?}
      sources/         the source documents: .md / .txt / .csv / .xlsx (subfolders allowed)
      reference.md     the reference report R
      toc.md           optional: the table of contents (input setting T+S+ToC)
      template.md      optional: the template document R*; else ``template_from`` names another
                       task (a variant of the same family) whose reference report is used
      excluded.md      optional: reference content not derivable from the sources (checklist input)
      checklist.json   optional: the task's checklist. Either a list of criteria, each "The
                       response should ..." followed by its five "- N: ..." scoring lines (written
                       by hand), or what ``dateline analyst-checklists`` builds: an object with
                       ``criteria`` (the same list), ``generated_by``, ``prompt_version``,
                       ``created_at`` and ``reference_sha256`` (``checklists.py``)
      checklist.failed.json  the last failed build (why), when there is no checklist yet

A task without checklist.json may have a built one in a checklist store
(``benchmark.checklists_dir``): ``<task_id>-<first 12 hex of the reference's sha256>.json``, so
an edited reference never meets an old checklist. A built checklist whose ``reference_sha256``
is not the task's reference is an error (delete it to rebuild).

Every error names the file and field.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import DataError

SETTINGS = ("T", "T+S", "T+S+ToC", "T+S+R*")


@dataclass(frozen=True)
class AnalystTask:
    task_id: str
    instruction: str
    family: str
    variant: str
    domain: str
    folder: Path
    reference: str
    toc: str = ""
    template: str = ""
    excluded: str = ""
    checklist: tuple[str, ...] = field(default_factory=tuple)
    checklist_origin: str = ""      # the file it came from, and who built it when
    checklist_failure: str = ""     # why the last build failed (no checklist)

    @property
    def sources_dir(self) -> Path:
        return self.folder / "sources"

    @property
    def checklist_id(self) -> str:
        """A short hash of the criteria: criterion judgements are keyed by it, so a rating always
        belongs to the checklist it was given against."""
        return checklist_id(self.checklist) if self.checklist else ""


def checklist_id(criteria: "tuple[str, ...] | list[str]") -> str:
    return hashlib.sha256(json.dumps(list(criteria), ensure_ascii=False).encode()).hexdigest()[:8]


def reference_sha256(reference: str) -> str:
    return hashlib.sha256(reference.encode("utf-8")).hexdigest()


def checklist_target(folder: Path, task_id: str, reference: str, checklists_dir: Path | None) -> Path:
    """Where the task's built checklist lives: its folder's checklist.json, or its entry in the
    checklist store (keyed by task id and reference hash)."""
    if checklists_dir is None:
        return folder / "checklist.json"
    return checklists_dir / f"{task_id}-{reference_sha256(reference)[:12]}.json"


def failure_path(target: Path) -> Path:
    return target.with_name(target.name[: -len(".json")] + ".failed.json")


def _read(path: Path, required: bool) -> str:
    if not path.exists():
        if required:
            raise DataError(path, None, None, "file not found")
        return ""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DataError(path, None, None, f"not UTF-8 text: {e}") from None
    if required and not text.strip():
        raise DataError(path, None, None, "empty")
    return text


def _checklist(path: Path, reference: str) -> tuple[tuple[str, ...], str]:
    """(criteria, origin) of a checklist file: a hand-written list, or a built object."""
    if not path.exists():
        return (), ""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise DataError(path, e.lineno, None, f"invalid JSON: {e.msg}") from None
    where = ""
    if isinstance(obj, dict):
        ref = obj.get("reference_sha256")
        if ref is not None and ref != reference_sha256(reference):
            raise DataError(path, None, "reference_sha256", "built for another reference.md than the task's "
                            "(delete the file to rebuild the checklist)")
        by = obj.get("generated_by") if isinstance(obj.get("generated_by"), dict) else {}
        origin = (f"{path}: built by {by.get('judge', '?')} (model {by.get('model', '?')}), "
                  f"prompts {obj.get('prompt_version', '?')}, {obj.get('created_at', '?')}")
        items, where = obj.get("criteria"), "criteria"
    else:
        items, origin = obj, f"{path}: hand-written"
    if not isinstance(items, list) or not items:
        raise DataError(path, None, where or None, "expected a non-empty JSON list of criteria")
    for i, c in enumerate(items, start=1):
        if not isinstance(c, str) or not c.strip():
            raise DataError(path, None, f"{where}[{i}]", "expected a non-empty string")
        levels = [ln.strip()[:4] for ln in c.splitlines()[1:]]
        if levels != ["- 1:", "- 2:", "- 3:", "- 4:", "- 5:"]:
            raise DataError(path, None, f"{where}[{i}]",
                            'expected a description line, then "- 1: ..." to "- 5: ..." lines')
    return tuple(items), origin


def _failure(path: Path) -> str:
    if not path.exists():
        return ""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return f"{path}: unreadable"
    return str(obj.get("reason", "")) if isinstance(obj, dict) else ""


def load_task(folder: Path, checklists_dir: Path | None = None) -> AnalystTask:
    meta_path = folder / "task.json"
    try:
        meta = json.loads(_read(meta_path, True))
    except json.JSONDecodeError as e:
        raise DataError(meta_path, e.lineno, None, f"invalid JSON: {e.msg}") from None
    if not isinstance(meta, dict):
        raise DataError(meta_path, None, None, "expected a JSON object")
    for key in ("task_id", "instruction"):
        if not isinstance(meta.get(key), str) or not meta[key].strip():
            raise DataError(meta_path, None, key, "missing" if key not in meta else "expected a non-empty string")
    if meta["task_id"] != folder.name:
        raise DataError(meta_path, None, "task_id", f"{meta['task_id']!r} differs from the folder name {folder.name!r}")
    if not (folder / "sources").is_dir() or not any(p.is_file() for p in (folder / "sources").rglob("*")):
        raise DataError(folder / "sources", None, None, "a task needs a sources/ folder with at least one file")
    reference = _read(folder / "reference.md", True)
    checklist, origin = _checklist(folder / "checklist.json", reference)       # the task's own comes first
    target = checklist_target(folder, meta["task_id"], reference, checklists_dir)
    if not checklist and checklists_dir is not None:
        checklist, origin = _checklist(target, reference)
    return AnalystTask(
        task_id=meta["task_id"], instruction=meta["instruction"].strip(), family=str(meta.get("family", meta["task_id"])),
        variant=str(meta.get("variant", "")), domain=str(meta.get("domain", "")), folder=folder,
        reference=reference, toc=_read(folder / "toc.md", False),
        template=_read(folder / "template.md", False), excluded=_read(folder / "excluded.md", False),
        checklist=checklist, checklist_origin=origin,
        checklist_failure="" if checklist else _failure(failure_path(target)))


def load_tasks(tasks_dir: Path, limit: int | None = None, checklists_dir: Path | None = None) -> list[AnalystTask]:
    """The task folders under ``tasks_dir``; built checklists are also looked up in
    ``checklists_dir`` (a checklist store) when given."""
    if not tasks_dir.is_dir():
        raise DataError(tasks_dir, None, None, "tasks folder not found")
    tasks = [load_task(d, checklists_dir) for d in sorted(tasks_dir.iterdir())
             if d.is_dir() and not d.name.startswith(".")]
    if not tasks:
        raise DataError(tasks_dir, None, None, "no task folders")
    by_id = {t.task_id: t for t in tasks}
    out = []
    for t in tasks:                     # R*: another variant's reference report
        meta = json.loads((t.folder / "task.json").read_text(encoding="utf-8"))
        src = meta.get("template_from")
        if not t.template and src:
            if src not in by_id:
                raise DataError(t.folder / "task.json", None, "template_from", f"no task {src!r} in {tasks_dir}")
            if by_id[src].family != t.family:
                raise DataError(t.folder / "task.json", None, "template_from",
                                f"{src!r} is a {by_id[src].family!r} task, not a variant of {t.family!r}")
            t = AnalystTask(**{**t.__dict__, "template": by_id[src].reference})
        out.append(t)
    return out[:limit] if limit is not None else out
