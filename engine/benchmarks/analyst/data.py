"""Analyst task folders.

    <tasks_dir>/<task_id>/
      task.json        {"task_id", "instruction", "family", "variant", "domain", "template_from"?}
      sources/         the source documents: .md / .txt / .csv / .xlsx (subfolders allowed)
      reference.md     the reference report R
      toc.md           optional: the table of contents (input setting T+S+ToC)
      template.md      optional: the template document R*; else ``template_from`` names another
                       task (a variant of the same family) whose reference report is used
      excluded.md      optional: reference content not derivable from the sources (checklist input)
      checklist.json   optional: a list of criteria, each "The response should ..." followed by
                       its five "- N: ..." scoring lines; when absent, one is generated (figure 15)

Every error names the file and field.
"""

from __future__ import annotations

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

    @property
    def sources_dir(self) -> Path:
        return self.folder / "sources"


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


def _checklist(path: Path) -> tuple[str, ...]:
    if not path.exists():
        return ()
    try:
        items = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise DataError(path, e.lineno, None, f"invalid JSON: {e.msg}") from None
    if not isinstance(items, list) or not items:
        raise DataError(path, None, None, "expected a non-empty JSON list of criteria")
    for i, c in enumerate(items, start=1):
        if not isinstance(c, str) or not c.strip():
            raise DataError(path, None, f"[{i}]", "expected a non-empty string")
        levels = [ln.strip()[:4] for ln in c.splitlines()[1:]]
        if levels != ["- 1:", "- 2:", "- 3:", "- 4:", "- 5:"]:
            raise DataError(path, None, f"[{i}]", 'expected a description line, then "- 1: ..." to "- 5: ..." lines')
    return tuple(items)


def load_task(folder: Path) -> AnalystTask:
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
    return AnalystTask(
        task_id=meta["task_id"], instruction=meta["instruction"].strip(), family=str(meta.get("family", meta["task_id"])),
        variant=str(meta.get("variant", "")), domain=str(meta.get("domain", "")), folder=folder,
        reference=_read(folder / "reference.md", True), toc=_read(folder / "toc.md", False),
        template=_read(folder / "template.md", False), excluded=_read(folder / "excluded.md", False),
        checklist=_checklist(folder / "checklist.json"))


def load_tasks(tasks_dir: Path, limit: int | None = None) -> list[AnalystTask]:
    if not tasks_dir.is_dir():
        raise DataError(tasks_dir, None, None, "tasks folder not found")
    tasks = [load_task(d) for d in sorted(tasks_dir.iterdir()) if d.is_dir() and not d.name.startswith(".")]
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
