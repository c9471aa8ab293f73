"""The human review (engine.benchmarks.livenews.build.review): accept/reject decisions read from a
CSV, every bad row named by file, row and field, and the verified subset they select."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.benchmarks.livenews.build.review import read_review, verified_subset
from engine.errors import BadDataError


def csv_file(tmp_path: Path, text: str, name: str = "review.csv") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_reads_decisions_and_ignores_other_columns(tmp_path: Path) -> None:
    p = csv_file(tmp_path, "question,ID,Decision,note\n"
                           "\"What, exactly?\",q1,accept,fine\n"
                           "\n"
                           "edited question,q2, REJECT ,\"two\nlines\"\n"
                           "x,q3,Accept\n")
    assert read_review(p) == {"q1": True, "q2": False, "q3": True}
    assert read_review(p, known={"q1", "q2", "q3", "q4"}) == {"q1": True, "q2": False, "q3": True}


def test_header_only_and_byte_order_mark(tmp_path: Path) -> None:
    assert read_review(csv_file(tmp_path, "id,decision\n")) == {}
    p = tmp_path / "bom.csv"
    p.write_bytes("\ufeffid,decision\nq1,reject\n".encode())
    assert read_review(p) == {"q1": False}


BAD = [
    ("no_decision_column", "id,verdict\nq1,accept\n", "missing_field", 1, "decision"),
    ("no_id_column", "question,decision\nq1,accept\n", "missing_field", 1, "id"),
    ("two_id_columns", "id,decision,id\nq1,accept,q2\n", "bad_table", 1, "id"),
    ("empty_id", "id,decision\nq1,accept\n ,reject\n", "empty_text", 3, "id"),
    ("short_row", "id,decision\nq1,accept\nq2\n", "empty_text", 3, "decision"),
    ("empty_decision", "id,decision\nq1,\n", "empty_text", 2, "decision"),
    ("unknown_decision", "id,decision\nq1,accept\nq2,maybe\n", "unknown_value", 3, "decision"),
    ("edit_is_not_a_decision", "id,decision\nq1,accept with edits\n", "unknown_value", 2, "decision"),
    ("duplicate_id", "id,decision\nq1,accept\nq2,reject\nq1,reject\n", "duplicate_id", 4, "id"),
    ("unknown_id", "id,decision\nq1,accept\nq9,accept\n", "unknown_reference", 3, "id"),
    ("after_a_multiline_cell", "id,decision,note\nq1,accept,\"a\nb\"\nq2,nope,\n", "unknown_value", 4, "decision"),
]


@pytest.mark.parametrize("name,text,kind,row,field", BAD, ids=[b[0] for b in BAD])
def test_bad_review_rows_name_file_row_and_field(tmp_path: Path, name: str, text: str, kind: str, row: int,
                                                 field: str) -> None:
    p = csv_file(tmp_path, text)
    with pytest.raises(BadDataError) as e:
        read_review(p, known={"q1", "q2"})
    assert (e.value.kind, e.value.row, e.value.field) == (kind, row, field)
    assert str(p) in str(e.value) and f"row {row}" in str(e.value) and f"field '{field}'" in str(e.value)


@pytest.mark.parametrize("setup,kind", [("missing", "missing_file"), ("empty", "empty_file"),
                                        ("blank", "empty_file"), ("latin1", "bad_utf8"), ("folder", "unsupported_file")])
def test_unreadable_review_files(tmp_path: Path, setup: str, kind: str) -> None:
    p = tmp_path / "review.csv"
    if setup == "empty":
        p.write_text("")
    elif setup == "blank":
        p.write_text("\n , \n")
    elif setup == "latin1":
        p.write_bytes("id,decision\nq1,accept\nq\xe9,reject\n".encode("latin-1"))
    elif setup == "folder":
        p.mkdir()
    with pytest.raises(BadDataError) as e:
        read_review(p)
    assert e.value.kind == kind and str(p) in str(e.value)


def test_verified_subset() -> None:
    ids = ["q1", "q2", "q3", "q4"]
    assert verified_subset(ids, {"q3": True, "q1": False, "q2": True}) == (["q2", "q3"], ["q1"], ["q4"])
    assert verified_subset(ids, {}) == ([], [], ids)
    with pytest.raises(ValueError, match=r"2 ids that are not among the 4 questions reviewed: 'x', 'y'"):
        verified_subset(ids, {"q1": True, "x": True, "y": False})
    with pytest.raises(ValueError, match="unique"):
        verified_subset(["q1", "q1"], {})
