"""Source documents as text, and token-bounded chunks of it (the vanilla pipeline's input).

Markdown and text files are used as they are. Tables (CSV, XLSX) are summarised the way the
paper describes ("statistics in large input tables are summarized, and a preview of the table
rows is included"): shape, per-column type and statistics (numeric: min / mean / max; other:
distinct values and the most common ones), then the first ``preview_rows`` rows as a Markdown
table. Small tables (at most ``full_rows`` rows) are included whole.

Token counts come from a :class:`TokenCounter`: the served model's own tokenizer when its folder
is local, otherwise UTF-8 bytes, an upper bound for byte-level BPE tokenizers (every token is at
least one byte), so a chunk that fits by bytes fits the model.
"""

from __future__ import annotations

import csv
import functools
import math
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from engine.errors import BadDataError, DataError

TEXT_SUFFIXES = {".md", ".markdown", ".txt"}
TABLE_SUFFIXES = {".csv", ".xlsx"}


class TokenCounter(Protocol):
    name: str

    def __call__(self, text: str) -> int: ...


class ByteCounter:
    """UTF-8 bytes: never fewer than the tokens of a byte-level BPE tokenizer."""
    name = "utf8-bytes"

    def __call__(self, text: str) -> int:
        return len(text.encode("utf-8"))


class HFTokenCounter:
    """The model's tokenizer, loaded from its local folder (never from a hub)."""

    def __init__(self, model_dir: str | Path) -> None:
        from transformers import AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
        self.name = f"hf:{Path(model_dir).name}"

    def __call__(self, text: str) -> int:
        return len(self.tok(text, add_special_tokens=False)["input_ids"])


_COUNTER_LOCK = threading.Lock()


def token_counter(model_path: str | None) -> TokenCounter:
    """One counter per model folder and process: the tokenizer is loaded once, not per episode
    (async callers load it through ``asyncio.to_thread``: loading blocks for seconds). One thread
    at a time: transformers imports lazily, and threads importing it at once get ImportError
    ("cannot import name 'AutoTokenizer'") from the half-initialised module."""
    with _COUNTER_LOCK:
        return _token_counter(model_path)


@functools.lru_cache(maxsize=4)
def _token_counter(model_path: str | None) -> TokenCounter:
    if model_path and Path(model_path).is_dir():
        return HFTokenCounter(model_path)
    return ByteCounter()


# -- tables -------------------------------------------------------------------------------------

def read_table(path: Path) -> tuple[list[str], list[list[str]]]:
    """Header and rows as strings. Errors name the file (and the sheet/row for XLSX/CSV)."""
    if path.suffix.lower() == ".csv":
        try:
            with open(path, newline="", encoding="utf-8-sig") as f:
                rows = list(csv.reader(f))
        except (UnicodeDecodeError, csv.Error) as e:
            kind = "bad_utf8" if isinstance(e, UnicodeDecodeError) else "bad_table"
            raise BadDataError(kind, path, None, None, f"cannot read CSV: {e}") from None
    else:
        try:
            import openpyxl
        except ImportError:
            raise DataError(path, None, None, "reading XLSX needs openpyxl (pip install openpyxl)") from None
        try:
            wb = openpyxl.load_workbook(path, read_only=True, data_only=True)
        except Exception as e:  # openpyxl raises several types for a bad file
            raise BadDataError("bad_table", path, None, None, f"cannot read XLSX: {e}") from None
        ws = wb.worksheets[0]
        rows = [["" if v is None else str(v) for v in r] for r in ws.iter_rows(values_only=True)]
        wb.close()
    rows = [r for r in rows if any(c.strip() for c in r)]
    if not rows:
        raise BadDataError("bad_table", path, None, None, "empty table")
    header, body = rows[0], rows[1:]
    for i, r in enumerate(body, start=2):
        if len(r) != len(header):
            raise BadDataError("bad_table", path, i, None, f"{len(r)} cells, the header has {len(header)}")
    return header, body


def _num(s: str) -> float | None:
    try:
        v = float(s.replace(",", ""))
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    esc = lambda c: str(c).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = ["| " + " | ".join(map(esc, header)) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(map(esc, r)) + " |" for r in rows]
    return "\n".join(lines)


def summarise_table(name: str, header: list[str], rows: list[list[str]], preview_rows: int = 10,
                    full_rows: int = 40) -> str:
    out = [f"### Table `{name}`: {len(rows)} rows x {len(header)} columns"]
    if len(rows) <= full_rows:
        return "\n".join(out + ["", _md_table(header, rows)])
    out.append("")
    out.append("Column summary:")
    for j, col in enumerate(header):
        values = [r[j] for r in rows if r[j].strip()]
        nums = [v for v in map(_num, values) if v is not None]
        if values and len(nums) == len(values):
            out.append(f"- {col}: numeric, {len(nums)} values, min {min(nums):g}, mean {sum(nums) / len(nums):.4g}, "
                       f"max {max(nums):g}")
        else:
            common = ", ".join(f"{v} ({c})" for v, c in Counter(values).most_common(5))
            out.append(f"- {col}: text, {len(set(values))} distinct of {len(values)}; most common: {common}")
    out += ["", f"First {preview_rows} rows:", "", _md_table(header, rows[:preview_rows])]
    return "\n".join(out)


@dataclass(frozen=True)
class SourceText:
    name: str       # path relative to the task's sources folder
    text: str


def source_texts(sources_dir: Path, preview_rows: int = 10, full_rows: int = 40) -> list[SourceText]:
    out = []
    for p in sorted(sources_dir.rglob("*")):
        if not p.is_file() or p.name.startswith("."):
            continue
        rel = str(p.relative_to(sources_dir))
        suffix = p.suffix.lower()
        if suffix in TEXT_SUFFIXES:
            try:
                out.append(SourceText(rel, p.read_text(encoding="utf-8")))
            except UnicodeDecodeError as e:
                raise BadDataError("bad_utf8", p, None, None, f"not UTF-8 text: {e}") from None
        elif suffix in TABLE_SUFFIXES:
            header, rows = read_table(p)
            out.append(SourceText(rel, summarise_table(rel, header, rows, preview_rows, full_rows)))
        else:
            raise BadDataError("unsupported_file", p, None, None,
                               f"unsupported source type {suffix!r} (use .md, .txt, .csv or .xlsx)")
    return out


# -- chunking -----------------------------------------------------------------------------------

def chunk_text(text: str, max_tokens: int, count: Callable[[str], int]) -> list[str]:
    """Split ``text`` into chunks of at most ``max_tokens`` tokens each, preferring paragraph,
    then line, then word boundaries; a single word longer than the budget is cut by characters."""
    if max_tokens < 1:
        raise ValueError("max_tokens must be >= 1")
    if count(text) <= max_tokens:
        return [text] if text else []
    chunks: list[str] = []

    def pieces(t: str, seps: Sequence[str]) -> list[str]:
        if count(t) <= max_tokens:
            return [t]
        if not seps:        # cut by characters: the longest prefix that fits
            out, rest = [], t
            while rest:
                lo, hi = 1, len(rest)
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    if count(rest[:mid]) <= max_tokens:
                        lo = mid
                    else:
                        hi = mid - 1
                out.append(rest[:lo])
                rest = rest[lo:]
            return out
        sep, *more = seps
        parts = t.split(sep)
        out, cur = [], ""
        for part in parts:
            cand = part if not cur else cur + sep + part
            if count(cand) <= max_tokens:
                cur = cand
                continue
            if cur:
                out.append(cur)
            if count(part) <= max_tokens:
                cur = part
            else:
                sub = pieces(part, more)
                out += sub[:-1]
                cur = sub[-1] if sub else ""
        if cur:
            out.append(cur)
        return out

    chunks = pieces(text, ["\n\n", "\n", " "])
    return [c for c in chunks if c.strip()]


def chunk_sources(sources: Sequence[SourceText], max_tokens: int, count: Callable[[str], int]) -> list[str]:
    """Chunks that each start with their source's name; a chunk never mixes two sources' text
    unless whole sources fit together (small sources are packed to save map calls)."""
    packed: list[str] = []
    cur = ""
    for s in sources:
        head = f"## Source: {s.name}\n\n"
        budget = max_tokens - count(head)
        if budget < 16:
            raise ValueError(f"max_tokens={max_tokens} leaves no room for text after the header of {s.name}")
        for piece in chunk_text(s.text, budget, count):
            block = head + piece
            cand = block if not cur else cur + "\n\n" + block
            if count(cand) <= max_tokens:
                cur = cand
            else:
                if cur:
                    packed.append(cur)
                cur = block
    if cur:
        packed.append(cur)
    return packed


def read_text_file(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(path, None, None, "file not found") from None
    except UnicodeDecodeError as e:
        raise DataError(path, None, None, f"not UTF-8 text: {e}") from None

