"""JSON Lines input (plain or gzipped) with errors that name the file, row and field."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import re
import zlib
from pathlib import Path
from typing import Any, Iterator

from engine.errors import DataError


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (1-based line number, object) for each non-blank line; ``.gz`` is decompressed."""
    if not path.exists():
        raise DataError(path, None, None, "file not found")
    opener: Any = gzip.open if path.name.endswith(".gz") else open
    row = 0
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for row, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataError(path, row, None, f"invalid JSON: {e.msg} at column {e.colno}") from None
                if not isinstance(obj, dict):
                    raise DataError(path, row, None, f"expected a JSON object, got {type(obj).__name__}")
                yield row, obj
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as e:
        raise DataError(path, row + 1, None, f"cannot read: {e}") from None


_DATE = re.compile(r"^(\d{4})[/-](\d{1,2})[/-](\d{1,2})(?:[ T/].*)?$")


def field_str(path: Path, row: int, obj: dict[str, Any], key: str, *, required: bool = True, strip: bool = True,
              name: str | None = None) -> str:
    """``obj[key]`` as a string. Required: present and non-blank. Optional: missing or null gives "".
    ``name`` is the field as errors report it (e.g. ``search_result.url`` for nested rows)."""
    name = name or key
    value = obj.get(key)
    if value is None:
        if required:
            raise DataError(path, row, name, "missing")
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise DataError(path, row, name, f"expected a non-empty string, got {value!r:.60}")
    return value.strip() if strip else value


def field_date(path: Path, row: int, name: str, raw: Any) -> dt.date:
    """A date written ``YYYY-MM-DD`` or ``YYYY/MM/DD``, optionally followed by a time."""
    m = _DATE.match(raw.strip()) if isinstance(raw, str) else None
    try:
        if not m:
            raise ValueError
        return dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError:
        raise DataError(path, row, name, f"expected a date YYYY-MM-DD (or YYYY/MM/DD), got {raw!r:.60}") from None
