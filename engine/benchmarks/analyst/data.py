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

A task folder holds plain files and folders only, checked before anything in it is read: a link
(the folder itself too), a hard-linked file, a FIFO or a name that is not UTF-8 anywhere in it is
an error naming that entry (names become ids, prompts and stored text; a link or hard link would
bring bytes from outside the folder into every episode).

Every error is a :class:`~engine.errors.BadDataError` naming the file, the row (the line of the
field in a JSON file, the line of a bad byte, the criterion of a checklist; none for a whole-file
problem) and the field; with ``benchmark.on_bad_rows=skip`` a bad folder is skipped and
quarantined instead (``docs/design/data.md`` lists the checks).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import os
import re
import shutil
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.benchmarks.analyst.sources import TABLE_SUFFIXES, TEXT_SUFFIXES, read_table
from engine.errors import BadDataError, DataError
from engine.inputs.fdtree import escape_text
from engine.inputs.jsonl import check_id, field_str, loads
from engine.inputs.quarantine import Quarantine, reject

SETTINGS = ("T", "T+S", "T+S+ToC", "T+S+R*")
TASK_FIELDS = ("task_id", "instruction", "family", "variant", "domain", "template_from")
# Bytes of task.json, reference.md, toc.md, template.md, excluded.md and checklist.json; of one
# source file; characters of one task.json field.
MAX_TEXT_BYTES = 5_000_000
MAX_SOURCE_BYTES = 200_000_000
MAX_INSTRUCTION_CHARS = 100_000


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
    # who wrote the checklist: "hand-written", or the model that built it (its generated_by), and
    # that model's weights id: scores are flagged when the author is a model under comparison
    checklist_by: str = ""
    checklist_by_weights: str = ""
    checklist_failure: str = ""     # why the last build failed (no checklist)
    template_from: str = ""         # the task whose reference is the template (task.json)

    @property
    def sources_dir(self) -> Path:
        return self.folder / "sources"

    @property
    def checklist_id(self) -> str:
        """A short hash of the criteria: criterion judgements are keyed by it, so a rating always
        belongs to the checklist it was given against."""
        return checklist_id(self.checklist) if self.checklist else ""


def checklist_id(criteria: tuple[str, ...] | list[str]) -> str:
    return _checklist_id(tuple(criteria))


@functools.lru_cache(maxsize=1024)
def _checklist_id(criteria: tuple[str, ...]) -> str:
    # cached: metrics ask for it once per criterion of every episode
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


def _line_at(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def _read(path: Path, required: bool, limit: int = MAX_TEXT_BYTES) -> str:
    """A UTF-8 text file of at most ``limit`` bytes ("" when it is optional and absent)."""
    if not path.is_file():
        if required:
            raise BadDataError("missing_file", path, None, None, "file not found")
        return ""
    size = path.stat().st_size
    if size > limit:
        raise BadDataError("too_large", path, None, None, f"{size:,} bytes, over the limit of {limit:,}")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")     # as written: the reference's hash keys its checklist
    except UnicodeDecodeError as e:
        raise BadDataError("bad_utf8", path, _line_at(data, e.start), None,
                           f"not UTF-8: byte 0x{data[e.start]:02x} at byte {e.start}") from None
    if required and not text.strip():
        raise BadDataError("empty_text", path, None, None, "empty")
    return text


def _json(path: Path, text: str) -> object:
    return loads(text, path, None)


def _key_line(text: str, key: str) -> int:
    """The line of ``"key":`` in a JSON document (1 when it is not there): the row its errors name."""
    m = re.search(rf'"{re.escape(key)}"\s*:', text)
    return text.count("\n", 0, m.start()) + 1 if m else 1


def _checklist(path: Path, reference: str) -> tuple[tuple[str, ...], str, str, str]:
    """(criteria, origin, author, author's weights id) of a checklist file: a hand-written list,
    or a built object. Errors about one criterion name it as row N (1-based)."""
    if not path.exists():
        return (), "", "", ""
    author, weights = "hand-written", ""
    obj = _json(path, _read(path, True))
    where = ""
    if isinstance(obj, dict):
        ref = obj.get("reference_sha256")
        if ref is not None and ref != reference_sha256(reference):
            raise BadDataError("inconsistent", path, None, "reference_sha256", "built for another reference.md than "
                               "the task's (delete the file to rebuild the checklist)")
        gen = obj.get("generated_by")
        by: dict[str, Any] = gen if isinstance(gen, dict) else {}
        author, weights = str(by.get("model") or by.get("judge") or "unknown"), str(by.get("weights") or "")
        origin = (f"{path}: built by {by.get('judge', '?')} (model {by.get('model', '?')}), "
                  f"prompts {obj.get('prompt_version', '?')}, {obj.get('created_at', '?')}")
        items, where = obj.get("criteria"), "criteria"
    else:
        items, origin = obj, f"{path}: hand-written"
    if not isinstance(items, list) or not items:
        raise BadDataError("missing_field" if items is None else "wrong_type", path, None, where or None,
                           "expected a non-empty JSON list of criteria")
    name = where or "criterion"
    for i, c in enumerate(items, start=1):
        if not isinstance(c, str) or not c.strip():
            raise BadDataError("wrong_type" if not isinstance(c, str) else "empty_text", path, i, name,
                               "expected a non-empty string")
        levels = [ln.strip()[:4] for ln in c.splitlines()[1:]]
        if levels != ["- 1:", "- 2:", "- 3:", "- 4:", "- 5:"]:
            raise BadDataError("malformed_value", path, i, name,
                               'expected a description line, then "- 1: ..." to "- 5: ..." lines')
    return tuple(items), origin, author, weights


def _meta(meta_path: Path, folder: Path) -> dict[str, str]:
    """task.json, checked: its fields, their types, and that task_id names the folder."""
    text = _read(meta_path, True)
    meta = _json(meta_path, text)
    if not isinstance(meta, dict):
        raise BadDataError("not_object", meta_path, 1, None, f"expected a JSON object, got {type(meta).__name__}")
    for key in meta:
        if key not in TASK_FIELDS:
            raise BadDataError("unknown_field", meta_path, _key_line(text, key), key,
                               f"not a task.json field (fields: {', '.join(TASK_FIELDS)})")
    out: dict[str, str] = {}
    for key in TASK_FIELDS:
        required = key in ("task_id", "instruction")
        value = field_str(meta_path, _key_line(text, key), meta, key, required=required, strip=False,
                          max_chars=MAX_INSTRUCTION_CHARS)
        if key in ("task_id", "template_from") and value:
            check_id(meta_path, _key_line(text, key), key, value)
        out[key] = value
    if out["task_id"] != folder.name:
        raise BadDataError("inconsistent", meta_path, _key_line(text, "task_id"), "task_id",
                           f"{out['task_id']!r} differs from the folder name {folder.name!r}")
    return out


def _check_entry(p: Path, st: os.stat_result) -> None:
    """One entry of a task folder (``st``: its lstat), refused with a BadDataError naming it when
    its name is not UTF-8 (``bad_utf8``: it would reach ids, prompts and stored text as a lone
    surrogate), it is a link or a hard-linked file (``unsafe_name``: its bytes live elsewhere,
    maybe outside the folder, and a hard link cannot be told from its target), or it is not a
    plain file or folder (``unsupported_file``: a FIFO blocks a read or a copy)."""
    try:
        os.fsencode(p.name).decode("utf-8")
    except UnicodeDecodeError:
        raise BadDataError("bad_utf8", p, None, None, f"the name is not UTF-8 ({escape_text(p.name)!r}): rename it "
                                                      "(names become ids, prompts and stored text)") from None
    if stat.S_ISLNK(st.st_mode):
        raise BadDataError("unsafe_name", p, None, None, f"is a link (to {escape_text(os.readlink(p))}): a task "
                                                         "folder holds plain files and folders (links are never followed)")
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        raise BadDataError("unsupported_file", p, None, None, "is not a regular file (a FIFO, socket or "
                                                              "device): a task folder holds plain files")
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        raise BadDataError("unsafe_name", p, None, None, f"is a hard link ({st.st_nlink} names for the same bytes, "
                                                         "maybe outside the task folder): copy the file instead")


def _entries(root: Path) -> list[Path]:
    """The regular files below ``root`` (hidden entries, never read, left out), walked without
    following links, ``root`` and every entry checked (:func:`_check_entry`: ``root`` must not be
    a link either, so a task folder linked to ``/`` is refused, not walked). None when ``root``
    does not exist (the caller names what is missing)."""
    try:
        _check_entry(root, root.lstat())
    except FileNotFoundError:
        return []
    out = []
    for d, dirs, files in os.walk(root, followlinks=False):
        for name in sorted(dirs + files):
            p = Path(d) / name
            if name.startswith("."):
                if name in dirs:
                    dirs.remove(name)
                continue
            st = p.lstat()
            _check_entry(p, st)
            if stat.S_ISREG(st.st_mode):
                out.append(p)
    return sorted(out)


def copy_sources(src: Path, dst: Path) -> None:
    """Copy a task's ``sources/`` into an episode folder without following links. Checked again
    here, the task folder may have changed since it loaded: each file is opened without following
    a link (a file swapped for one fails to open) and must still be a regular file of one name."""
    files = _entries(src)
    dst.mkdir(parents=True, exist_ok=True)
    for p in files:
        target = dst / p.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
            raise BadDataError("unsafe_name", p, None, None, "became a link after the task loaded (links are never "
                                                             "followed)") from None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise BadDataError("unsupported_file", p, None, None, "is not a regular file")
            if st.st_nlink > 1:
                raise BadDataError("unsafe_name", p, None, None, f"is a hard link ({st.st_nlink} names for the same "
                                                                 "bytes, maybe outside the task folder)")
            with open(target, "xb") as out:
                shutil.copyfileobj(f, out)


def _check_sources(folder: Path, files: list[Path]) -> None:
    """sources/ holds at least one file; each a plain file (no link, FIFO or device anywhere
    there), of a readable type (``.md``/``.markdown``/``.txt`` UTF-8 text, ``.csv`` a UTF-8 table
    with rows as wide as its header, ``.xlsx`` a workbook) and at most ``MAX_SOURCE_BYTES``."""
    src = folder / "sources"
    if not src.is_dir() or src.is_symlink():
        raise BadDataError("missing_file", src, None, None, "a task needs a sources/ folder with at least one file")
    files = [p for p in files if p.is_relative_to(src)]
    if not files:
        raise BadDataError("empty_file", src, None, None, "a task needs a sources/ folder with at least one file")
    for p in files:
        suffix = p.suffix.lower()
        if suffix not in TEXT_SUFFIXES | TABLE_SUFFIXES:
            raise BadDataError("unsupported_file", p, None, None,
                               f"unsupported source type {suffix!r} (use .md, .txt, .csv or .xlsx)")
        if suffix == ".xlsx":
            if p.stat().st_size > MAX_SOURCE_BYTES:
                raise BadDataError("too_large", p, None, None, f"over the limit of {MAX_SOURCE_BYTES:,} bytes")
            with p.open("rb") as f:
                if f.read(4) != b"PK\x03\x04":
                    raise BadDataError("bad_table", p, None, None, "not an XLSX workbook (no zip header)")
            continue
        _read(p, False, MAX_SOURCE_BYTES)     # UTF-8, within the limit
        if suffix == ".csv":
            read_table(p)


def _failure(path: Path) -> str:
    if not path.exists():
        return ""
    try:
        obj = loads(path.read_text(encoding="utf-8"), path, None)
    except (BadDataError, UnicodeDecodeError):
        return f"{path}: unreadable"
    return str(obj.get("reason", "")) if isinstance(obj, dict) else ""


def load_task(folder: Path, checklists_dir: Path | None = None) -> AnalystTask:
    """One task folder, checked (``docs/design/data.md``); raises a BadDataError naming the file,
    the row (a line, or a checklist criterion) and the field. First the folder itself and every
    entry in it (:func:`_check_entry`): no name that is not UTF-8, no link, no hard link, nothing
    but plain files and folders, so that nothing read below comes from outside it."""
    files = _entries(folder)
    meta_path = folder / "task.json"
    meta = _meta(meta_path, folder)
    _check_sources(folder, files)
    reference = _read(folder / "reference.md", True)
    checklist, origin, by, by_weights = _checklist(folder / "checklist.json", reference)   # the task's own comes first
    target = checklist_target(folder, meta["task_id"], reference, checklists_dir)
    if not checklist and checklists_dir is not None:
        checklist, origin, by, by_weights = _checklist(target, reference)
    return AnalystTask(
        task_id=meta["task_id"], instruction=meta["instruction"].strip(), family=meta["family"] or meta["task_id"],
        variant=meta["variant"], domain=meta["domain"], folder=folder,
        reference=reference, toc=_read(folder / "toc.md", False),
        template=_read(folder / "template.md", False), excluded=_read(folder / "excluded.md", False),
        checklist=checklist, checklist_origin=origin, checklist_by=by, checklist_by_weights=by_weights,
        checklist_failure="" if checklist else _failure(failure_path(target)), template_from=meta["template_from"])


def load_tasks(tasks_dir: Path, limit: int | None = None, checklists_dir: Path | None = None,
               bad: Quarantine | None = None) -> list[AnalystTask]:
    """The task folders under ``tasks_dir``; built checklists are also looked up in
    ``checklists_dir`` (a checklist store) when given. Without ``bad`` the first bad folder
    raises; with it, bad folders are recorded there and skipped (a task whose template task was
    skipped too). No task at all is an error either way."""
    if not tasks_dir.is_dir():
        raise BadDataError("missing_file", tasks_dir, None, None, "tasks folder not found")
    tasks = []
    for d in sorted(tasks_dir.iterdir()):
        if not d.is_dir() or d.name.startswith("."):
            continue
        try:
            tasks.append(load_task(d, checklists_dir))
        except DataError as e:
            reject(bad, e, _raw(d))
    by_id = {t.task_id: t for t in tasks}
    out = []
    for t in tasks:                     # R*: another variant's reference report
        src = t.template_from
        if not t.template and src:
            try:
                meta_path = t.folder / "task.json"
                line = _key_line(meta_path.read_text(encoding="utf-8-sig"), "template_from")
                if src not in by_id:
                    raise BadDataError("unknown_reference", meta_path, line, "template_from",
                                       f"no task {src!r} in {tasks_dir}")
                if by_id[src].family != t.family:
                    raise BadDataError("inconsistent", meta_path, line, "template_from",
                                       f"{src!r} is a {by_id[src].family!r} task, not a variant of {t.family!r}")
            except DataError as e:
                reject(bad, e, _raw(t.folder))
                continue
            t = replace(t, template=by_id[src].reference)
        out.append(t)
    if not out:
        raise BadDataError("empty_file", tasks_dir, None, None,
                           "no task folders" + (f" left after skipping {len(bad)} bad ones" if bad else ""))
    return out[:limit] if limit is not None else out


def _raw(folder: Path) -> str:
    """What the quarantine keeps of a bad folder: its name and the start of its task.json."""
    try:
        head = (folder / "task.json").read_bytes()[:300].decode("utf-8", "replace")
    except OSError:
        head = ""
    return f"{folder.name}/ {head}"
