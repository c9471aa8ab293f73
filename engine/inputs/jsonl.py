"""JSON Lines input (plain or gzipped) and field checks, with errors that name the file, the
1-based row (line) and the field, each of a kind of :data:`engine.inputs.quarantine.KINDS`.

Lines are read as bytes and decoded one at a time, so bad UTF-8 names its own line (and byte
offset) and, with a :class:`~engine.inputs.quarantine.Quarantine`, costs only that line. A truncated or
damaged gzip stream ends the file: the rows before it are kept (with a quarantine) and the error
names the first line that could not be read.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import re
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from engine.errors import BadDataError, DataError
from engine.inputs.fdtree import has_surrogate
from engine.inputs.quarantine import Quarantine, reject

# A line longer than this is not parsed (one would be read whole into memory to parse it).
MAX_LINE_BYTES = 64 * 1024 * 1024
# Default limit of one text field (characters); loaders document their own.
MAX_TEXT_CHARS = 5_000_000
# A date before MIN_YEAR is a typo (0202), not news; so is one more than MAX_AHEAD after today
# (2150): news and its evidence are not dated in the future, and a release date far ahead would
# let every object of a corpus count as evidence from "before" it. Relative to today, so data
# that loads today loads tomorrow too.
MIN_YEAR = 1800
MAX_AHEAD = dt.timedelta(days=366)
# Ids and names become parts of keys, file names and URLs: at most this long, no path syntax.
MAX_ID_CHARS = 200


# JSON nested deeper than this is not data any loader reads (and Python's parser recurses: a
# 100,000-deep line raised a bare RecursionError); integers longer than this many digits are
# not plausible counts or ids (Python refuses to convert over 4,300 digits with a bare ValueError).
MAX_JSON_DEPTH = 64
MAX_INT_DIGITS = 100


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _TooLarge(f"an integer of {len(text.lstrip('-')):,} digits (over {MAX_INT_DIGITS})")
    return int(text)


class _TooLarge(ValueError):
    pass


def _depth(text: str) -> int:
    """The deepest nesting of brackets outside strings (a linear scan; no recursion)."""
    depth = deepest = 0
    in_str = esc = False
    for c in text:
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


def loads(text: str, path: Path, row: int | None) -> Any:
    """``json.loads`` whose every failure is a BadDataError naming the file and row: invalid JSON,
    nesting deeper than :data:`MAX_JSON_DEPTH`, integers longer than :data:`MAX_INT_DIGITS` digits."""
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH:     # only then can it be too deep (counted in C)
        if (d := _depth(text)) > MAX_JSON_DEPTH:
            raise BadDataError("too_large", path, row, None, f"JSON nested {d:,} levels deep (over {MAX_JSON_DEPTH})")
    try:
        return json.loads(text, parse_int=_bounded_int)
    except json.JSONDecodeError as e:
        raise BadDataError("invalid_json", path, row if row is not None else e.lineno, None,
                           f"invalid JSON: {e.msg} at column {e.colno}") from None
    except _TooLarge as e:
        raise BadDataError("too_large", path, row, None, str(e)) from None
    except (RecursionError, ValueError) as e:          # anything else the parser cannot take
        raise BadDataError("invalid_json", path, row, None, f"unreadable JSON: {type(e).__name__}: {e}") from None


def read_jsonl(path: Path, bad: Quarantine | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (1-based line number, object) for each non-blank line; ``.gz`` is decompressed.
    With ``bad`` a bad line is recorded there and skipped; without, it raises."""
    path = Path(path)
    if not path.exists():
        raise BadDataError("missing_file", path, None, None, "file not found")
    gz = path.name.endswith(".gz")
    opener: Any = gzip.open if gz else open
    row, offset = 0, 0           # lines read, bytes (decompressed) before the current line
    where = "decompressed byte" if gz else "byte"
    try:
        with opener(path, "rb") as f:
            while True:
                raw = f.readline(MAX_LINE_BYTES + 1)
                if not raw:
                    return
                row += 1
                start, offset = offset, offset + len(raw)
                if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                    while (more := f.readline(1 << 20)) and not more.endswith(b"\n"):
                        offset += len(more)
                    offset += len(more)
                    reject(bad, BadDataError("too_large", path, row, None,
                                             f"line longer than {MAX_LINE_BYTES} bytes"), raw)
                    continue
                try:
                    line = raw.decode("utf-8-sig" if row == 1 else "utf-8")
                except UnicodeDecodeError as e:
                    reject(bad, BadDataError("bad_utf8", path, row, None,
                                             f"not UTF-8: byte 0x{raw[e.start]:02x} at {where} {start + e.start}"), raw)
                    continue
                if not line.strip():
                    continue
                try:
                    obj = loads(line, path, row)
                except BadDataError as e:
                    reject(bad, e, line)
                    continue
                if not isinstance(obj, dict):
                    reject(bad, BadDataError("not_object", path, row, None,
                                             f"expected a JSON object, got {type(obj).__name__}"), line)
                    continue
                yield row, obj
    except EOFError:
        reject(bad, BadDataError("truncated_gzip", path, row + 1, None,
                                 f"truncated gzip: the stream ends after line {row} ({where} {offset})"))
    except (zlib.error, gzip.BadGzipFile) as e:
        reject(bad, BadDataError("corrupt_gzip", path, row + 1, None,
                                 f"damaged gzip after line {row} ({where} {offset}): {e}"))
    except OSError as e:
        raise BadDataError("missing_file", path, row + 1 if row else None, None, f"cannot read: {e}") from None


_DATE = re.compile(r"^(\d{4})[/-](\d{1,2})[/-](\d{1,2})(?:[ T/].*)?$")
_PARTIAL_DATE = re.compile(r"^\d{4}(?:[/-]\d{1,2})?$")


def field_str(path: Path, row: int | None, obj: dict[str, Any], key: str, *, required: bool = True,
              strip: bool = True, name: str | None = None, max_chars: int = MAX_TEXT_CHARS) -> str:
    """``obj[key]`` as a string. Required: present and non-blank. Optional: missing or null gives "".
    At most ``max_chars`` characters. ``name`` is the field as errors report it (e.g.
    ``search_result[0].url`` for nested rows)."""
    name = name or key
    value = obj.get(key)
    if value is None:
        if required:
            raise BadDataError("missing_field", path, row, name, "missing")
        return ""
    if not isinstance(value, str):
        raise BadDataError("wrong_type", path, row, name, f"expected a string, got {type(value).__name__} "
                           f"{json.dumps(value, default=str)[:60]}")
    if required and not value.strip():
        raise BadDataError("empty_text", path, row, name, "empty")
    if len(value) > max_chars:
        raise BadDataError("too_large", path, row, name, f"{len(value):,} characters, over the limit of {max_chars:,}")
    return value.strip() if strip else value


def check_id(path: Path, row: int | None, name: str, value: str) -> str:
    """``value`` unless it is unsafe as a name: path separators, ``.``/``..``, NUL or control
    characters, a lone surrogate (a JSON ``\\udcff``: no file name, key or stored row can hold
    it as itself), surrounding blanks, over :data:`MAX_ID_CHARS` characters."""
    why = ("contains a path separator" if "/" in value or "\\" in value else
           "is a relative path component" if value in (".", "..") else
           "contains NUL or a control character" if any(ord(c) < 32 or ord(c) == 127 for c in value) else
           "contains a lone surrogate (not UTF-8 text)" if has_surrogate(value) else
           "has leading or trailing blanks" if value != value.strip() else
           f"is longer than {MAX_ID_CHARS} characters" if len(value) > MAX_ID_CHARS else "")
    if why:
        raise BadDataError("unsafe_name", path, row, name, f"unsafe id {value[:60]!r}: {why}")
    return value


def field_id(path: Path, row: int | None, obj: dict[str, Any], key: str, *, name: str | None = None) -> str:
    """A required id: a non-empty string that is safe as a name (:func:`check_id`)."""
    return check_id(path, row, name or key, field_str(path, row, obj, key, strip=False, name=name))


def field_date(path: Path, row: int | None, name: str, raw: Any) -> dt.date:
    """A date written ``YYYY-MM-DD`` or ``YYYY/MM/DD``, optionally followed by a time, from year
    :data:`MIN_YEAR` to :data:`MAX_AHEAD` after today. A missing (None) value is a ``missing_field``."""
    if raw is None:
        raise BadDataError("missing_field", path, row, name, "missing")
    if not isinstance(raw, str):
        raise BadDataError("wrong_type", path, row, name, f"expected a date string, got {type(raw).__name__} "
                           f"{json.dumps(raw, default=str)[:60]}")
    text = raw.strip()
    m = _DATE.match(text)
    if not m:
        if _PARTIAL_DATE.match(text):
            raise BadDataError("partial_date", path, row, name, f"expected a full date YYYY-MM-DD, got {raw!r:.60}")
        raise BadDataError("bad_date", path, row, name, f"expected a date YYYY-MM-DD (or YYYY/MM/DD), got {raw!r:.60}")
    try:
        date = dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError as e:
        raise BadDataError("impossible_date", path, row, name, f"no such date {raw!r:.60} ({e})") from None
    if date.year < MIN_YEAR:
        raise BadDataError("date_out_of_range", path, row, name, f"year {date.year} is before {MIN_YEAR}: {raw!r:.60}")
    latest = dt.date.today() + MAX_AHEAD
    if date > latest:
        raise BadDataError("date_out_of_range", path, row, name,
                           f"{date} is more than a year from today (latest {latest}): {raw!r:.60}")
    return date


def field_list(path: Path, row: int | None, obj: dict[str, Any], key: str, *, required: bool = True,
               max_chars: int = MAX_TEXT_CHARS) -> tuple[str, ...]:
    """A list of non-blank strings, each at most ``max_chars``; optional: missing or null gives ()."""
    value = obj.get(key)
    if value is None:
        if required:
            raise BadDataError("missing_field", path, row, key, "missing")
        return ()
    if not isinstance(value, list):
        raise BadDataError("wrong_type", path, row, key, f"expected a list of strings, got {type(value).__name__}")
    for i, v in enumerate(value, start=1):
        if not isinstance(v, str):
            raise BadDataError("wrong_type", path, row, key, f"item {i}: expected a string, got {type(v).__name__}")
        if not v.strip():
            raise BadDataError("empty_text", path, row, key, f"item {i}: empty")
        if len(v) > max_chars:
            raise BadDataError("too_large", path, row, key,
                               f"item {i}: {len(v):,} characters, over the limit of {max_chars:,}")
    return tuple(value)


class UniqueIds:
    """The first row of every id a loader has kept, over one file or several: ``check`` raises a
    ``duplicate_id`` DataError naming the row, the field and where the id first stood; ``add``
    records a row once it is kept (a rejected row claims no id)."""

    def __init__(self, what: str = "id") -> None:
        self.what = what                                  # how the message names the id
        self._first: dict[str, tuple[Path, int]] = {}

    def check(self, key: str, path: Path, row: int, field: str) -> None:
        first = self._first.get(key)
        if first is not None:
            at = f"row {first[1]}" if first[0] == path else f"{first[0]}, row {first[1]}"
            raise BadDataError("duplicate_id", path, row, field, f"duplicate {self.what} {key!r} (first at {at})")

    def add(self, key: str, path: Path, row: int) -> None:
        self._first.setdefault(key, (path, row))


T = TypeVar("T")


def read_unique(path: Path, bad: Quarantine | None, parse: Callable[[Path, int, dict[str, Any]], T],
                key: Callable[[T], str], field: str, seen: UniqueIds | None = None) -> Iterator[T]:
    """The rows of a JSON Lines file parsed by ``parse(path, row, obj)``, each id (``key``) once:
    a bad row, or a row whose id an earlier row holds (``seen`` may span several files), raises
    a DataError or, with ``bad``, is recorded there and skipped."""
    seen = UniqueIds() if seen is None else seen
    for row, obj in read_jsonl(path, bad):
        try:
            item = parse(path, row, obj)
            seen.check(key(item), path, row, field)
        except DataError as e:
            reject(bad, e, obj)
            continue
        seen.add(key(item), path, row)
        yield item


def read_parsed(path: Path, bad: Quarantine | None,
                parse: Callable[[Path, int, dict[str, Any]], T]) -> Iterator[tuple[int, T]]:
    """``(row, parse(path, row, obj))`` for the rows of a JSON Lines file; a bad row raises a
    DataError or, with ``bad``, is recorded there and skipped."""
    for row, obj in read_jsonl(path, bad):
        try:
            item = parse(path, row, obj)
        except DataError as e:
            reject(bad, e, obj)
            continue
        yield row, item
