"""The human-verified subset (the paper's section 2.2, "Human-Verified Test Set"): a reviewer
accepts or rejects each question and edits none. Decisions come back as a CSV with the columns
``id`` and ``decision`` (``accept`` or ``reject``, any case); other columns (the question, the
answer, a note) are ignored, so an edited question changes nothing. A missing column, an empty id,
an unknown decision or an id given twice is a :class:`~engine.errors.BadDataError` naming the
file, the row (the CSV line; the header is row 1) and the field. Human decisions are not skipped:
a bad row always raises.
"""

from __future__ import annotations

import csv
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path

from engine.errors import BadDataError
from engine.inputs.jsonl import UniqueIds

COLUMNS = ("id", "decision")
DECISIONS = {"accept": True, "reject": False}


def _rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(CSV line, cells) of each row that is not blank; the header first."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            try:
                for cells in reader:
                    if any(c.strip() for c in cells):
                        yield reader.line_num, cells
            except csv.Error as e:
                raise BadDataError("bad_table", path, reader.line_num, None, f"cannot read CSV: {e}") from None
    except FileNotFoundError:
        raise BadDataError("missing_file", path, None, None, "review file not found") from None
    except UnicodeDecodeError as e:
        raise BadDataError("bad_utf8", path, None, None, f"not UTF-8: {e}") from None
    except IsADirectoryError:
        raise BadDataError("unsupported_file", path, None, None, "a folder, not a CSV file") from None


def _columns(path: Path, line: int, header: list[str]) -> tuple[int, int]:
    names = [h.strip().lower() for h in header]
    where = []
    for col in COLUMNS:
        if col not in names:
            raise BadDataError("missing_field", path, line, col,
                               f"no {col!r} column (the header has: {', '.join(repr(n) for n in names)})")
        if names.count(col) > 1:
            raise BadDataError("bad_table", path, line, col, f"two {col!r} columns")
        where.append(names.index(col))
    return where[0], where[1]


def read_review(path: str | Path, known: Collection[str] | None = None) -> dict[str, bool]:
    """id -> accepted (True) or rejected (False), in file order. With ``known``, an id not in it is
    an ``unknown_reference`` (a review of another release). A header with no rows gives {}."""
    path = Path(path)
    rows = _rows(path)
    first = next(rows, None)
    if first is None:
        raise BadDataError("empty_file", path, None, None, "no header: expected the columns id and decision")
    id_col, decision_col = _columns(path, *first)
    seen = UniqueIds("reviewed id")
    out: dict[str, bool] = {}
    for line, cells in rows:
        qid = cells[id_col].strip() if id_col < len(cells) else ""
        decision = cells[decision_col].strip().lower() if decision_col < len(cells) else ""
        if not qid:
            raise BadDataError("empty_text", path, line, "id", "empty id")
        if not decision:
            raise BadDataError("empty_text", path, line, "decision", f"no decision for {qid!r}")
        if decision not in DECISIONS:
            raise BadDataError("unknown_value", path, line, "decision",
                               f"expected accept or reject, got {cells[decision_col].strip()!r:.40}")
        seen.check(qid, path, line, "id")
        if known is not None and qid not in known:
            raise BadDataError("unknown_reference", path, line, "id", f"{qid!r:.60} is not a question under review")
        seen.add(qid, path, line)
        out[qid] = DECISIONS[decision]
    return out


def verified_subset(ids: Sequence[str], decisions: dict[str, bool]) -> tuple[list[str], list[str], list[str]]:
    """(accepted, rejected, unreviewed) ids, each in the order of ``ids``. A decision about an id
    not in ``ids`` raises ValueError (read the CSV with ``known=ids`` to have it named by row)."""
    if len(set(ids)) != len(ids):
        raise ValueError("verified_subset: ids must be unique")
    wanted = set(ids)
    stray = [i for i in decisions if i not in wanted]
    if stray:
        raise ValueError(f"the review decides {len(stray)} ids that are not among the {len(ids)} questions "
                         f"reviewed: {', '.join(repr(i) for i in stray[:3])}" + (", ..." if len(stray) > 3 else ""))
    accepted = [i for i in ids if decisions.get(i) is True]
    rejected = [i for i in ids if decisions.get(i) is False]
    return accepted, rejected, [i for i in ids if i not in decisions]
