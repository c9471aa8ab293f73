"""The build's articles (engine.benchmarks.livenews.build.articles): JSON Lines and RealTime QA dumps,
every bad row named by file, row and field (or quarantined), duplicates and unusable dump results
counted, the order deterministic."""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from engine.benchmarks.livenews.build.articles import (
    Article,
    article_id,
    read_articles,
    read_jsonl,
    read_realtimeqa,
)
from engine.errors import BadDataError
from engine.inputs.quarantine import Quarantine


def art(i: int, **over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"url": f"https://www.example.co.uk/news/{i}", "title": f"Story {i}",
                           "text": f"Body of story {i}.", "publish_date": f"2025-07-{i + 1:02d}"}
    row.update(over)
    return {k: v for k, v in row.items() if v is not ...}


def write(path: Path, rows: list[Any]) -> Path:
    lines = [r if isinstance(r, str) else json.dumps(r) for r in rows]
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_reads_fields_and_derives_id_and_outlet(tmp_path: Path) -> None:
    f = write(tmp_path / "a.jsonl", [art(0), art(1, outlet="Example Times")])
    a, b = read_jsonl(f)
    assert a == Article(hashlib.sha256(a.url.encode()).hexdigest()[:16], "https://www.example.co.uk/news/0",
                        "Story 0", "Body of story 0.", dt.date(2025, 7, 1), "example.co.uk", str(f), 1)
    assert a.article_id == article_id(a.url) and len(a.article_id) == 16
    assert b.outlet == "Example Times" and b.row == 2
    assert read_jsonl(f) == [a, b]                      # same input, same articles


BAD_ROWS = [
    ("missing_url", art(0, url=...), "missing_field", "url"),
    ("missing_title", art(0, title=...), "missing_field", "title"),
    ("missing_text", art(0, text=...), "missing_field", "text"),
    ("missing_date", art(0, publish_date=...), "missing_field", "publish_date"),
    ("null_text", art(0, text=None), "missing_field", "text"),
    ("wrong_type_text", art(0, text=5), "wrong_type", "text"),
    ("wrong_type_outlet", art(0, outlet=["x"]), "wrong_type", "outlet"),
    ("blank_text", art(0, text="  \n "), "empty_text", "text"),
    ("blank_title", art(0, title=""), "empty_text", "title"),
    ("bad_date", art(0, publish_date="07/01/2025"), "bad_date", "publish_date"),
    ("partial_date", art(0, publish_date="2025-07"), "partial_date", "publish_date"),
    ("impossible_date", art(0, publish_date="2025-02-30"), "impossible_date", "publish_date"),
    ("relative_url", art(0, url="/news/0"), "bad_url", "url"),
    ("no_scheme_url", art(0, url="www.example.com/news/0"), "bad_url", "url"),
    ("text_too_long", art(0, text="x" * 101), "too_large", "text"),
    ("invalid_json", '{"url": "https://a.com/x", ', "invalid_json", None),
    ("not_object", "[1, 2]", "not_object", None),
]


@pytest.mark.parametrize("name,row,kind,field", BAD_ROWS, ids=[b[0] for b in BAD_ROWS])
def test_bad_row_names_file_row_and_field(tmp_path: Path, name: str, row: Any, kind: str, field: str | None) -> None:
    f = write(tmp_path / "a.jsonl", [art(1), row, art(2)])
    with pytest.raises(BadDataError) as e:
        read_jsonl(f, max_chars=100)
    assert e.value.kind == kind and e.value.row == 2 and e.value.field == field
    assert str(f) in str(e.value) and "row 2" in str(e.value)
    if field:
        assert f"field '{field}'" in str(e.value)


@pytest.mark.parametrize("name,row,kind,field", BAD_ROWS, ids=[b[0] for b in BAD_ROWS])
def test_bad_row_is_quarantined_and_the_rest_kept(tmp_path: Path, name: str, row: Any, kind: str,
                                                  field: str | None) -> None:
    f = write(tmp_path / "a.jsonl", [art(1), row, art(2)])
    bad = Quarantine()
    got = read_jsonl(f, bad, max_chars=100)
    assert [a.title for a in got] == ["Story 1", "Story 2"]
    [r] = bad.rows
    assert (r.file, r.row, r.field, r.kind) == (str(f), 2, field, kind)


def test_duplicate_url_first_complete_copy_wins(tmp_path: Path) -> None:
    u = "https://a.com/x"
    f = write(tmp_path / "a.jsonl", [art(0, url=u, text=" "), art(1, url=u), art(2, url=u), art(3)])
    bad, counts = Quarantine(), Counter[str]()
    got = read_jsonl(f, bad, counts=counts)
    assert [(a.url, a.title, a.row) for a in got] == [(u, "Story 1", 2), (art(3)["url"], "Story 3", 4)]
    assert counts == {"duplicate_url": 1} and [r.row for r in bad.rows] == [1]


# -- RealTime QA dumps ---------------------------------------------------------------------------

def result(url: str, date: str | None = "2023/01/05", text: str = "The Bills won.", title: str = "T") -> dict[str, Any]:
    return {"url": url, "title": title, "text": text, "authors": [], "publish_date": date}


def dump(folder: Path, week: str, gcs: list[list[dict[str, Any]]], time: str = "10:00") -> None:
    folder.mkdir(exist_ok=True)
    qa = [{"question_id": f"{week}_{i}", "question_date": f"{week[:4]}/{week[4:6]}/{week[6:]}",
           "question_sentence": "Which?", "choices": ["a", "b"], "answer": ["0"]} for i in range(len(gcs))]
    rows = [{"question_id": f"{week}_{i}", "search_time": f"{week[:4]}/{week[4:6]}/{week[6:]}/{time}",
             "search_result": results} for i, results in enumerate(gcs)]
    for kind, lines in (("qa", qa), ("gcs", rows)):
        with gzip.open(folder / f"{week}_{kind}.jsonl.gz", "wt") as f:
            f.writelines(json.dumps(x) + "\n" for x in lines)


def test_dump_articles_with_source_row_and_counts(tmp_path: Path) -> None:
    d = tmp_path / "dumps"
    dump(d, "20230106", [[result("https://www.cbsnews.com/a", title="A  one")],
                         [result("https://b.com/undated", date=None), result("https://c.com/empty", text=" "),
                          result("https://d.com/long", text="x" * 50)]])
    dump(d, "20230113", [[result("https://e.com/new", date="2023/01/12"),
                          result("https://www.cbsnews.com/a", title="A later crawl")]])
    counts = Counter[str]()
    got = read_realtimeqa(d, counts=counts, max_chars=40)
    assert [(a.url, a.title, a.outlet, Path(a.source).name, a.row) for a in got] == [
        ("https://www.cbsnews.com/a", "A one", "cbsnews.com", "20230106_gcs.jsonl.gz", 1),   # earliest crawl
        ("https://e.com/new", "T", "e.com", "20230113_gcs.jsonl.gz", 1)]
    assert got[1].publish_date == dt.date(2023, 1, 12) and got[0].text == "The Bills won."
    assert counts == {"no_publish_date": 1, "no_text": 1, "too_long": 1}
    assert read_realtimeqa(d, max_chars=40) == got


def test_dump_bad_url_names_gcs_file_row_and_field(tmp_path: Path) -> None:
    d = tmp_path / "dumps"
    dump(d, "20230106", [[result("https://a.com/1")], [result("https://a.com/2"), result("/relative")]])
    with pytest.raises(BadDataError) as e:
        read_realtimeqa(d)
    assert (e.value.kind, e.value.row, e.value.field) == ("bad_url", 2, "search_result[1].url")
    assert "20230106_gcs.jsonl.gz" in str(e.value)
    bad = Quarantine()
    assert [a.url for a in read_realtimeqa(d, bad)] == ["https://a.com/1", "https://a.com/2"]
    assert [(Path(r.file).name, r.row, r.kind) for r in bad.rows] == [("20230106_gcs.jsonl.gz", 2, "bad_url")]


def test_dump_bad_row_quarantined_and_row_numbers_skip_it(tmp_path: Path) -> None:
    d = tmp_path / "dumps"
    dump(d, "20230106", [[result("https://a.com/1", date="2023/13/01")], [result("https://a.com/1")]])
    with pytest.raises(BadDataError) as e:
        read_realtimeqa(d)
    assert (e.value.kind, e.value.row, e.value.field) == ("impossible_date", 1, "search_result[0].publish_date")
    bad = Quarantine()
    [a] = read_realtimeqa(d, bad)
    assert a.row == 2 and [r.row for r in bad.rows] == [1]       # the kept copy's row, not the bad one


def test_dump_week_without_its_qa_file_is_named(tmp_path: Path) -> None:
    d = tmp_path / "dumps"
    dump(d, "20230106", [[result("https://a.com/1")]])
    (d / "20230106_qa.jsonl.gz").unlink()
    with pytest.raises(BadDataError, match="20230106_qa.jsonl.gz.*file not found") as e:
        read_articles([d])
    assert e.value.kind == "missing_file"


# -- read_articles -------------------------------------------------------------------------------

def test_read_articles_dispatches_dedupes_across_paths_and_sorts(tmp_path: Path) -> None:
    d = tmp_path / "dumps"
    dump(d, "20230106", [[result("https://a.com/dump", date="2023/01/04"), result("https://dup.com/x")]])
    folder = tmp_path / "jsonl"
    folder.mkdir()
    write(folder / "2.jsonl", [art(5, url="https://z.com/late", publish_date="2023-01-09")])
    with gzip.open(folder / "1.jsonl.gz", "wt") as f:
        f.write(json.dumps(art(6, url="https://b.com/gz", publish_date="2023-01-04")) + "\n")
    (folder / "notes.txt").write_text("ignored")
    single = write(tmp_path / "one.jsonl", [art(7, url="https://dup.com/x", publish_date="2023-01-02",
                                                   title="first copy")])
    counts = Counter[str]()
    got = read_articles([single, d, str(folder)], counts=counts)
    assert [(a.publish_date.isoformat(), a.url) for a in got] == [
        ("2023-01-02", "https://dup.com/x"), ("2023-01-04", "https://a.com/dump"),
        ("2023-01-04", "https://b.com/gz"), ("2023-01-09", "https://z.com/late")]
    assert got[0].title == "first copy" and counts == {"duplicate_url": 1}
    dump_first = read_articles([d, single, folder])          # the order of paths decides which copy wins
    assert [(a.url, a.title, a.publish_date.isoformat()) for a in dump_first if "dup" in a.url] == [
        ("https://dup.com/x", "T", "2023-01-05")]


@pytest.mark.parametrize("what,kind", [("missing", "missing_file"), ("empty", "empty_file"),
                                       ("csv", "unsupported_file")])
def test_read_articles_path_problems_raise(tmp_path: Path, what: str, kind: str) -> None:
    p = tmp_path / what
    if what == "empty":
        p.mkdir()
    elif what == "csv":
        p = tmp_path / "a.csv"
        p.write_text("url,title\n")
    with pytest.raises(BadDataError) as e:
        read_articles([p], Quarantine())        # a file-level problem raises even when skipping rows
    assert e.value.kind == kind and str(p) in str(e.value)

