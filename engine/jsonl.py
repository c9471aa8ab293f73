"""JSON Lines input (plain or gzipped) with errors that name the file, row and field."""

from __future__ import annotations

import gzip
import json
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
