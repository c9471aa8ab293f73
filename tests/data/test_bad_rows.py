"""Malformed data (docs/design/data.md): every kind of bad row, in every loader, names its file,
row and field; with ``on_bad_rows=skip`` the same row is quarantined instead and the rest loads.

Bad inputs are small valid samples (the bundled ones, or a tiny RealTimeQA dump built here)
copied to tmp_path and mutated. ``CASES`` is the table: one row per (kind, loader)."""

from __future__ import annotations

import gzip
import json
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from engine.benchmarks.analyst.data import MAX_TEXT_BYTES
from engine.benchmarks.analyst.data import load_tasks as load_analyst
from engine.benchmarks.livenews.data import MAX_PAGE_CHARS, load_livenewsbench, load_pages, load_realtimeqa
from engine.benchmarks.newsagent import realtimeqa as rtqa
from engine.benchmarks.newsagent.data import MAX_TEXT_CHARS, load_dataset
from engine.errors import BadDataError, ConfigError, DataError
from engine.inputs.quarantine import KINDS, SCHEMA, BadRow, Quarantine
from engine.storage import read_quarantine
from ray_jobs.outputs.report import read_human

REPO = Path(__file__).resolve().parents[2]
NEWSAGENT = REPO / "engine" / "benchmarks" / "newsagent" / "sample_data"
LIVENEWS = REPO / "engine" / "benchmarks" / "livenews" / "sample_data"
ANALYST = REPO / "engine" / "benchmarks" / "analyst" / "sample_tasks"


# -- building bad inputs ------------------------------------------------------------------------

def read_rows(path: Path) -> list[Any]:
    data = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
    return [json.loads(ln) for ln in data.decode().splitlines() if ln.strip()]


def write_rows(path: Path, rows: list[Any]) -> Path:
    """One line per row: a dict as JSON, a str or bytes as they are (row N is line N)."""
    lines = [r if isinstance(r, bytes) else (r if isinstance(r, str) else json.dumps(r)).encode() for r in rows]
    data = b"\n".join(lines) + b"\n"
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


Edit = Callable[[list[Any]], None]


def put(row: int, key: str, value: Any) -> Edit:
    return lambda rows: rows[row - 1].__setitem__(key, value)


def drop(row: int, key: str) -> Edit:
    return lambda rows: rows[row - 1].pop(key)


def raw(row: int, line: str | bytes) -> Edit:
    return lambda rows: rows.__setitem__(row - 1, line)


def copy_of(row: int, key: str, source_row: int) -> Edit:
    return lambda rows: rows[row - 1].__setitem__(key, rows[source_row - 1][key])


@dataclass
class Built:
    load: Callable[[Quarantine | None], Any]    # the loader under test; a Quarantine means skip
    file: Path
    row: int | None
    field: str | None


@dataclass
class Case:
    id: str
    kind: str
    loader: str
    build: Callable[[Path], Built]
    skippable: bool = True       # with a quarantine the row is skipped (else it still raises)


def newsagent(file: str, row: int | None, field: str | None, tasks: Edit | None = None,
              objects: Edit | None = None) -> Callable[[Path], Built]:
    def build(tmp: Path) -> Built:
        d = tmp / "newsagent"
        shutil.copytree(NEWSAGENT, d)
        for name, edit in (("tasks.jsonl", tasks), ("objects.jsonl", objects)):
            if edit is not None:
                rows = read_rows(d / name)
                edit(rows)
                write_rows(d / name, rows)
        return Built(lambda bad: load_dataset(d, bad=bad), d / file, row, field)
    return build


def newsagent_file(file: str, how: Callable[[Path], None]) -> Callable[[Path], Built]:
    def build(tmp: Path) -> Built:
        d = tmp / "newsagent"
        shutil.copytree(NEWSAGENT, d)
        how(d / file)
        return Built(lambda bad: load_dataset(d, bad=bad), d / file, None, None)
    return build


def after_cutoff(tmp: Path) -> Built:
    """Task 1's release date moved to the date of its first reference object."""
    def edit(rows: list[Any]) -> None:
        dates = {o["object_id"]: o["date"] for o in read_rows(NEWSAGENT / "objects.jsonl")}
        rows[0]["release_date"] = dates[rows[0]["reference_evidence"][0]]
    return newsagent("tasks.jsonl", 1, "reference_evidence", tasks=edit)(tmp)


def livenews(file: str, row: int | None, field: str | None, questions: Edit | None = None,
             pages: Edit | None = None) -> Callable[[Path], Built]:
    def build(tmp: Path) -> Built:
        d = tmp / "livenews"
        shutil.copytree(LIVENEWS, d)
        for name, edit in (("questions.jsonl", questions), ("pages.jsonl", pages)):
            if edit is not None:
                rows = read_rows(d / name)
                edit(rows)
                write_rows(d / name, rows)
        return Built(lambda bad: (load_pages(d / "pages.jsonl", bad), load_livenewsbench(d / "questions.jsonl", bad)),
                     d / file, row, field)
    return build


# A tiny RealTimeQA week (the shared slice stays out of tests): 3 questions, 3 search rows.
WEEK = "20230106"


def qa_row(i: int) -> dict[str, Any]:
    return {"question_id": f"{WEEK}_{i}", "question_date": "2023/01/06", "question_source": "CNN",
            "question_url": "https://edition.cnn.com/quiz", "question_sentence": f"Which team {i}?",
            "choices": ["Steelers", "Bengals", "Bills", "Browns"], "answer": ["2"], "evidence": ""}


def gcs_row(i: int) -> dict[str, Any]:
    return {"question_id": f"{WEEK}_{i}", "search_time": "2023/01/06/10:00", "search_result": [
        {"url": f"https://news.example.com/{i}", "title": f"Story {i}", "text": "The Bills won the game on Sunday.",
         "authors": [], "publish_date": "2023/01/05"}]}


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-8])        # no gzip trailer: the stream never ends


def corrupt(path: Path) -> None:
    path.write_bytes(b"this is not gzip\n")


def realtimeqa(loader: str, file: str, row: int | None, field: str | None, qa: Edit | None = None,
               gcs: Edit | None = None, damage: Callable[[Path], None] | None = None) -> Callable[[Path], Built]:
    def build(tmp: Path) -> Built:
        d = tmp / "dumps"
        d.mkdir()
        files = {}
        for kind, make, edit in (("qa", qa_row, qa), ("gcs", gcs_row, gcs)):
            rows = [make(i) for i in range(3)]
            if edit is not None:
                edit(rows)
            files[kind] = write_rows(d / f"{WEEK}_{kind}.jsonl.gz", rows)
        if damage is not None:
            damage(files[file])

        def load(bad: Quarantine | None) -> Any:
            if loader == "livenews-realtimeqa":
                return load_realtimeqa(d, bad)
            stats = rtqa.convert(d, tmp / "out", on_bad_rows="error" if bad is None else "skip")
            if bad is not None:      # what the converter quarantined, read back from its file
                bad.rows += [BadRow(**r) for r in pq.read_table(tmp / "out" / "quarantine.parquet").to_pylist()]
            return stats
        return Built(load, files[file], row, field)
    return build


def analyst(file: str, row: int | None, field: str | None, edit: Callable[[Path], None]) -> Callable[[Path], Built]:
    def build(tmp: Path) -> Built:
        d = tmp / "tasks"
        shutil.copytree(ANALYST, d)
        edit(d)
        return Built(lambda bad: load_analyst(d, bad=bad), d / file, row, field)
    return build


def edit_task_json(task: str, **changes: Any) -> Callable[[Path], None]:
    def edit(d: Path) -> None:
        meta = json.loads((d / task / "task.json").read_text())
        for k, v in changes.items():
            if v is None:
                meta.pop(k)
            else:
                meta[k] = v
        (d / task / "task.json").write_text(json.dumps(meta, indent=2))
    return edit


def write_file(rel: str, content: str | bytes) -> Callable[[Path], None]:
    def edit(d: Path) -> None:
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content.encode() if isinstance(content, str) else content)
    return edit


def remove(rel: str) -> Callable[[Path], None]:
    def edit(d: Path) -> None:
        p = d / rel
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    return edit


def empty_sources(d: Path) -> None:
    for p in (d / "crashes-2023" / "sources").iterdir():
        p.unlink()


def symlink_out(d: Path) -> None:
    (d / "outside.md").write_text("# Not a source of this task\n")
    os.symlink(d / "outside.md", d / "crashes-2023" / "sources" / "linked.md")


def human(row: int, field: str, *rows: dict[str, Any]) -> Callable[[Path], Built]:
    def build(tmp: Path) -> Built:
        p = write_rows(tmp / "human.jsonl", list(rows))
        return Built(lambda bad: read_human(p, {"A", "B"}, {"t1", "t2"}), p, row, field)
    return build


def label(**changes: Any) -> dict[str, Any]:
    return {"task_id": "t1", "system_a": "A", "system_b": "B", "winner": "A", **changes}


T23 = "crashes-2023/task.json"
# task.json as edit_task_json writes it (indent=2): line 2 task_id, 3 family, 4 variant, 5 domain,
# 6 instruction, 7 template_from, 8 a new key
CASES = [
    # newsagent: tasks.jsonl and objects.jsonl
    Case("newsagent-missing-title", "missing_field", "newsagent",
         newsagent("tasks.jsonl", 2, "title", tasks=drop(2, "title"))),
    Case("newsagent-text-is-number", "wrong_type", "newsagent",
         newsagent("objects.jsonl", 3, "text", objects=put(3, "text", 42))),
    Case("newsagent-firsthand-is-string", "wrong_type", "newsagent",
         newsagent("tasks.jsonl", 1, "firsthand", tasks=put(1, "firsthand", "one string, not a list"))),
    Case("newsagent-blank-text", "empty_text", "newsagent",
         newsagent("objects.jsonl", 5, "text", objects=put(5, "text", "   "))),
    Case("newsagent-huge-article", "too_large", "newsagent",
         newsagent("tasks.jsonl", 3, "reference_article", tasks=put(3, "reference_article", "x" * (MAX_TEXT_CHARS + 1)))),
    Case("newsagent-bad-date", "bad_date", "newsagent",
         newsagent("objects.jsonl", 2, "date", objects=put(2, "date", "Jan 5 2012"))),
    Case("newsagent-feb-30", "impossible_date", "newsagent",
         newsagent("objects.jsonl", 4, "date", objects=put(4, "date", "2023-02-30"))),
    Case("newsagent-year-only", "partial_date", "newsagent",
         newsagent("tasks.jsonl", 2, "release_date", tasks=put(2, "release_date", "2024"))),
    Case("newsagent-year-0202", "date_out_of_range", "newsagent",
         newsagent("objects.jsonl", 6, "date", objects=put(6, "date", "0202-01-01"))),
    Case("newsagent-evidence-after-release", "after_cutoff", "newsagent", after_cutoff),
    Case("newsagent-unknown-evidence", "unknown_reference", "newsagent",
         newsagent("tasks.jsonl", 2, "reference_evidence", tasks=put(2, "reference_evidence", ["h0001", "h-none"]))),
    Case("newsagent-duplicate-task", "duplicate_id", "newsagent",
         newsagent("tasks.jsonl", 3, "task_id", tasks=copy_of(3, "task_id", 1))),
    Case("newsagent-duplicate-object", "duplicate_id", "newsagent",
         newsagent("objects.jsonl", 10, "object_id", objects=copy_of(10, "object_id", 1))),
    Case("newsagent-task-id-traversal", "unsafe_name", "newsagent",
         newsagent("tasks.jsonl", 1, "task_id", tasks=put(1, "task_id", "../escape"))),
    Case("newsagent-object-id-nul", "unsafe_name", "newsagent",
         newsagent("objects.jsonl", 1, "object_id", objects=put(1, "object_id", "h\x000001"))),
    Case("newsagent-unknown-kind", "unknown_value", "newsagent",
         newsagent("objects.jsonl", 8, "kind", objects=put(8, "kind", "poem"))),
    Case("newsagent-invalid-json", "invalid_json", "newsagent",
         newsagent("objects.jsonl", 7, None, objects=raw(7, '{"object_id": "h0007", "date": '))),
    Case("newsagent-top-level-list", "not_object", "newsagent",
         newsagent("tasks.jsonl", 2, None, tasks=raw(2, '["sample-02", "a list"]'))),
    Case("newsagent-bad-utf8", "bad_utf8", "newsagent",
         newsagent("tasks.jsonl", 2, None, tasks=raw(2, b'{"task_id": "sample-02", "title": "caf\xe9"}'))),
    Case("newsagent-no-tasks", "empty_file", "newsagent",
         newsagent_file("tasks.jsonl", lambda p: p.write_text("\n")), skippable=False),
    Case("newsagent-no-objects-file", "missing_file", "newsagent",
         newsagent_file("objects.jsonl", lambda p: p.unlink()), skippable=False),
    # livenews: LiveNewsBench questions and the pages corpus
    Case("livenews-missing-answer", "missing_field", "livenews",
         livenews("questions.jsonl", 2, "answer", questions=drop(2, "answer"))),
    Case("livenews-bad-event-date", "bad_date", "livenews",
         livenews("questions.jsonl", 1, "event_date", questions=put(1, "event_date", "June 1"))),
    Case("livenews-year-month-date", "partial_date", "livenews",
         livenews("questions.jsonl", 3, "event_date", questions=put(3, "event_date", "2023-01"))),
    Case("livenews-duplicate-question", "duplicate_id", "livenews",
         livenews("questions.jsonl", 4, "id", questions=copy_of(4, "id", 1))),
    Case("livenews-absolute-path-id", "unsafe_name", "livenews",
         livenews("questions.jsonl", 2, "id", questions=put(2, "id", "/etc/passwd"))),
    Case("livenews-link-not-url", "bad_url", "livenews",
         livenews("questions.jsonl", 1, "link", questions=put(1, "link", "www.bbc.co.uk/news"))),
    Case("livenews-page-url-not-url", "bad_url", "livenews",
         livenews("pages.jsonl", 4, "url", pages=put(4, "url", "example.com/story"))),
    Case("livenews-page-title-number", "wrong_type", "livenews",
         livenews("pages.jsonl", 2, "title", pages=put(2, "title", 3))),
    Case("livenews-page-bad-utf8", "bad_utf8", "livenews",
         livenews("pages.jsonl", 5, None, pages=raw(5, b'{"url": "https://a.com/x", "text": "\xc3\x28"}'))),
    Case("livenews-huge-page", "too_large", "livenews",
         livenews("pages.jsonl", 3, "text", pages=put(3, "text", "y" * (MAX_PAGE_CHARS + 1)))),
    # livenews over RealTimeQA dumps
    Case("livenews-rtqa-truncated-gzip", "truncated_gzip", "livenews-realtimeqa",
         realtimeqa("livenews-realtimeqa", "qa", 4, None, damage=truncate)),
    Case("livenews-rtqa-not-gzip", "corrupt_gzip", "livenews-realtimeqa",
         realtimeqa("livenews-realtimeqa", "gcs", 1, None, damage=corrupt)),
    Case("livenews-rtqa-missing-date", "missing_field", "livenews-realtimeqa",
         realtimeqa("livenews-realtimeqa", "qa", 2, "question_date", qa=drop(2, "question_date"))),
    Case("livenews-rtqa-answer-out-of-range", "unknown_value", "livenews-realtimeqa",
         realtimeqa("livenews-realtimeqa", "qa", 1, "answer", qa=put(1, "answer", ["7"]))),
    Case("livenews-rtqa-negative-answer", "unknown_value", "livenews-realtimeqa",
         realtimeqa("livenews-realtimeqa", "qa", 3, "answer", qa=put(3, "answer", ["-1"]))),
    Case("livenews-rtqa-results-not-list", "wrong_type", "livenews-realtimeqa",
         realtimeqa("livenews-realtimeqa", "gcs", 1, "search_result", gcs=put(1, "search_result", "none"))),
    Case("livenews-rtqa-article-without-url", "missing_field", "livenews-realtimeqa",
         realtimeqa("livenews-realtimeqa", "gcs", 2, "search_result[0].url",
                    gcs=lambda rows: rows[1]["search_result"][0].pop("url"))),
    # the RealTimeQA -> newsagent converter
    Case("convert-missing-articles", "missing_field", "convert-realtimeqa",
         realtimeqa("convert", "gcs", 2, "search_result", gcs=drop(2, "search_result"))),
    Case("convert-duplicate-question", "duplicate_id", "convert-realtimeqa",
         realtimeqa("convert", "qa", 2, "question_id", qa=copy_of(2, "question_id", 1))),
    Case("convert-search-time-feb-30", "impossible_date", "convert-realtimeqa",
         realtimeqa("convert", "gcs", 1, "search_time", gcs=put(1, "search_time", "2023/02/30/10:00"))),
    Case("convert-question-id-nul", "unsafe_name", "convert-realtimeqa",
         realtimeqa("convert", "qa", 1, "question_id", qa=put(1, "question_id", "2023\x00"))),
    Case("convert-truncated-gzip", "truncated_gzip", "convert-realtimeqa",
         realtimeqa("convert", "gcs", 4, None, damage=truncate)),
    Case("convert-invalid-json", "invalid_json", "convert-realtimeqa",
         realtimeqa("convert", "qa", 3, None, qa=raw(3, '{"question_id": "x", '))),
    # analyst task folders
    Case("analyst-no-task-json", "missing_file", "analyst",
         analyst(T23, None, None, remove(T23))),
    Case("analyst-no-sources", "missing_file", "analyst",
         analyst("crashes-2023/sources", None, None, remove("crashes-2023/sources"))),
    Case("analyst-empty-sources", "empty_file", "analyst",
         analyst("crashes-2023/sources", None, None, empty_sources)),
    Case("analyst-task-json-invalid", "invalid_json", "analyst",
         analyst(T23, 1, None, write_file(T23, "{"))),
    Case("analyst-task-json-list", "not_object", "analyst",
         analyst(T23, 1, None, write_file(T23, '["crashes-2023"]'))),
    Case("analyst-task-json-typo", "unknown_field", "analyst",
         analyst(T23, 8, "instructions", edit_task_json("crashes-2023", instructions="typo"))),
    Case("analyst-family-number", "wrong_type", "analyst",
         analyst(T23, 3, "family", edit_task_json("crashes-2023", family=7))),
    Case("analyst-blank-instruction", "empty_text", "analyst",
         analyst(T23, 6, "instruction", edit_task_json("crashes-2023", instruction="  "))),
    Case("analyst-task-id-not-folder", "inconsistent", "analyst",
         analyst(T23, 2, "task_id", edit_task_json("crashes-2023", task_id="crashes-2024"))),
    Case("analyst-template-traversal", "unsafe_name", "analyst",
         analyst(T23, 7, "template_from", edit_task_json("crashes-2023", template_from="../crashes-2022"))),
    Case("analyst-template-unknown", "unknown_reference", "analyst",
         analyst(T23, 7, "template_from", edit_task_json("crashes-2023", template_from="crashes-1999"))),
    Case("analyst-pdf-source", "unsupported_file", "analyst",
         analyst("crashes-2023/sources/report.pdf", None, None, write_file("crashes-2023/sources/report.pdf", b"%PDF-1.4"))),
    Case("analyst-ragged-csv", "bad_table", "analyst",
         analyst("crashes-2023/sources/extra.csv", 3, None, write_file("crashes-2023/sources/extra.csv", "a,b\n1,2\n3\n"))),
    Case("analyst-source-bad-utf8", "bad_utf8", "analyst",
         analyst("crashes-2023/sources/notes.md", 2, None, write_file("crashes-2023/sources/notes.md", b"# Notes\nbad \xff\n"))),
    Case("analyst-source-symlink-out", "unsafe_name", "analyst",
         analyst("crashes-2023/sources/linked.md", None, None, symlink_out)),
    Case("analyst-checklist-criterion", "malformed_value", "analyst",
         analyst("unemployment-brief/checklist.json", 1, "criterion",
                 write_file("unemployment-brief/checklist.json", '["The response should x."]'))),
    Case("analyst-checklist-other-reference", "inconsistent", "analyst",
         analyst("unemployment-brief/checklist.json", None, "reference_sha256",
                 write_file("unemployment-brief/checklist.json", json.dumps(
                     {"criteria": ["c\n- 1: a\n- 2: b\n- 3: c\n- 4: d\n- 5: e"], "reference_sha256": "0" * 64})))),
    Case("analyst-huge-reference", "too_large", "analyst",
         analyst("crashes-2023/reference.md", None, None, write_file("crashes-2023/reference.md", "z" * (MAX_TEXT_BYTES + 1)))),
    Case("analyst-empty-reference", "empty_text", "analyst",
         analyst("crashes-2023/reference.md", None, None, write_file("crashes-2023/reference.md", "\n \n"))),
    # human preference labels (report --human)
    Case("human-unknown-task", "unknown_reference", "human-labels",
         human(2, "task_id", label(), label(task_id="t9")), skippable=False),
    Case("human-unknown-system", "unknown_reference", "human-labels",
         human(1, "system_b", label(system_b="C")), skippable=False),
    Case("human-same-system", "inconsistent", "human-labels",
         human(1, "system_b", label(system_b="A")), skippable=False),
    Case("human-winner-not-a-system", "unknown_value", "human-labels",
         human(1, "winner", label(winner="first")), skippable=False),
    Case("human-pair-labelled-twice", "duplicate_id", "human-labels",
         human(2, "task_id", label(), label(system_a="B", system_b="A", winner="B")), skippable=False),
    Case("human-missing-winner", "missing_field", "human-labels",
         human(1, "winner", {"task_id": "t1", "system_a": "A", "system_b": "B"}), skippable=False),
]


def test_the_table_lists_every_kind():
    kinds = {c.kind for c in CASES}
    assert kinds == set(KINDS), f"kinds without a case: {set(KINDS) - kinds}; unknown: {kinds - set(KINDS)}"
    assert len(kinds) >= 25
    assert len({c.id for c in CASES}) == len(CASES)
    assert {c.loader for c in CASES} == {"newsagent", "livenews", "livenews-realtimeqa", "convert-realtimeqa",
                                         "analyst", "human-labels"}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_row_names_file_row_and_field(case: Case, tmp_path: Path):
    built = case.build(tmp_path)
    with pytest.raises(DataError) as e:
        built.load(None)
    err = e.value
    assert isinstance(err, BadDataError) and err.kind == case.kind, str(err)
    assert (Path(err.path), err.row, err.field) == (built.file, built.row, built.field), str(err)
    text = str(err)
    assert text.startswith(str(built.file))
    assert (f", row {built.row}" in text) == (built.row is not None)
    assert (f", field '{built.field}'" in text) == (built.field is not None)


@pytest.mark.parametrize("case", [c for c in CASES if c.skippable], ids=[c.id for c in CASES if c.skippable])
def test_skip_quarantines_the_same_row(case: Case, tmp_path: Path):
    built = case.build(tmp_path)
    bad = Quarantine()
    built.load(bad)                     # no error: the row is skipped
    hits = [r for r in bad.rows if (r.kind, Path(r.file), r.row, r.field) ==
            (case.kind, built.file, built.row, built.field)]
    assert hits, bad.rows
    assert hits[0].reason and len(hits[0].raw) <= 200


@pytest.mark.parametrize("case", [c for c in CASES if not c.skippable and c.loader != "human-labels"],
                         ids=[c.id for c in CASES if not c.skippable and c.loader != "human-labels"])
def test_file_level_problems_raise_even_when_skipping(case: Case, tmp_path: Path):
    """A missing data file, or no rows left at all, has no row to skip."""
    built = case.build(tmp_path)
    with pytest.raises(BadDataError) as e:
        built.load(Quarantine())
    assert e.value.kind == case.kind and Path(e.value.path) == built.file


# -- skip through the real entry points ---------------------------------------------------------

def _bad_newsagent(tmp_path: Path) -> tuple[Path, int]:
    """The sample with 3 bad rows: the first object task sample-01 cites (an impossible date),
    task 3 (no title) and a task line that is not JSON. Returns the folder and the object's row."""
    d = tmp_path / "data"
    shutil.copytree(NEWSAGENT, d)
    objects, tasks = read_rows(d / "objects.jsonl"), read_rows(d / "tasks.jsonl")
    row = next(i for i, o in enumerate(objects, start=1) if o["object_id"] == tasks[0]["reference_evidence"][0])
    objects[row - 1]["date"] = "2012-02-30"
    write_rows(d / "objects.jsonl", objects)
    tasks[2].pop("title")
    write_rows(d / "tasks.jsonl", [*tasks, "{oops"])
    return d, row


@pytest.mark.slow
def test_newsagent_skip_end_to_end(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    """make_point (the driver) loads the tasks through NewsAgentBenchmark.load_tasks with
    on_bad_rows=skip: the good tasks are planned, the bad rows are in RUN_DIR/quarantine and
    the count is logged; the config hash is the same as with on_bad_rows=error."""
    from ray_jobs.config.compose import compose
    from ray_jobs.run import make_point, plan, resolve

    d, obj_row = _bad_newsagent(tmp_path)
    n_tasks = len(read_rows(NEWSAGENT / "tasks.jsonl"))
    over = ["agent.mode=rule-based", "judge=none", f"benchmark.data_dir={d}", f"run.dir={tmp_path / 'run'}"]
    with pytest.raises(DataError, match=rf"objects.jsonl, row {obj_row}, field 'date': no such date"):
        make_point(compose(over))
    cfg = compose([*over, "benchmark.on_bad_rows=skip"])
    with caplog.at_level(logging.WARNING, logger="dateline.quarantine"):
        point = make_point(cfg)
    planned = {s.task_id for s in point.plan.specs}
    assert len(planned) == n_tasks - 2 and "sample-01" not in planned and "sample-03" not in planned
    q = pq.read_table(tmp_path / "run" / "quarantine")
    assert q.schema.equals(SCHEMA)
    got = sorted((Path(r["file"]).name, r["row"], r["field"], r["kind"]) for r in q.to_pylist())
    assert got == [("objects.jsonl", obj_row, "date", "impossible_date"),
                   ("tasks.jsonl", 1, "reference_evidence", "unknown_reference"),
                   ("tasks.jsonl", 3, "title", "missing_field"),
                   ("tasks.jsonl", n_tasks + 1, None, "invalid_json")]
    assert all(r["reason"] and 0 < len(r["raw"]) <= 200 for r in q.to_pylist())
    assert read_quarantine(point.store).num_rows == 4
    assert f"4 bad rows skipped, see {tmp_path / 'run'}/quarantine" in caplog.text
    assert "newsagent data" in caplog.text and "bad rows skipped (benchmark.on_bad_rows=skip)" in caplog.text
    # a re-run rewrites the same part; the episode identity ignores on_bad_rows
    make_point(cfg)
    assert len(list((tmp_path / "run" / "quarantine").glob("part-*.parquet"))) == 1
    clean = compose(["agent.mode=rule-based", "judge=none", f"run.dir={tmp_path / 'run2'}"])
    skip = compose(["agent.mode=rule-based", "judge=none", f"run.dir={tmp_path / 'run2'}", "benchmark.on_bad_rows=skip"])
    assert plan(resolve(clean)).config_hash == plan(resolve(skip)).config_hash


def test_livenews_and_analyst_skip_through_load_tasks(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    from engine.benchmarks import get_benchmark
    from engine.inputs.quarantine import collecting
    from ray_jobs.config.compose import compose

    d = tmp_path / "livenews"
    shutil.copytree(LIVENEWS, d)
    questions = read_rows(d / "questions.jsonl")
    questions[1]["event_date"] = "2023"
    write_rows(d / "questions.jsonl", questions)
    cfg = compose(["benchmark=livenews", "agent=livenews", f"benchmark.questions={d / 'questions.jsonl'}",
                   f"benchmark.pages={d / 'pages.jsonl'}", "benchmark.on_bad_rows=skip"])
    with collecting() as bad, caplog.at_level(logging.WARNING, logger="dateline.quarantine"):
        tasks = get_benchmark("livenews").load_tasks(cfg)
    assert sorted(t.task_id for t in tasks) == sorted(q["id"] for i, q in enumerate(questions) if i != 1)
    assert [(r.row, r.field, r.kind) for r in bad.rows] == [(2, "event_date", "partial_date")]
    assert "livenews livenewsbench data: 1 bad rows skipped" in caplog.text

    t = tmp_path / "tasks"
    shutil.copytree(ANALYST, t)
    (t / "crashes-2022" / "sources" / "deck.pptx").write_bytes(b"PK")
    cfg = compose(["benchmark=analyst", "agent=analyst", f"benchmark.tasks_dir={t}", "benchmark.on_bad_rows=skip"])
    with collecting() as bad:
        tasks = get_benchmark("analyst").load_tasks(cfg)
    # crashes-2023 takes its template from crashes-2022: it goes too, as an unknown reference
    assert [x.task_id for x in tasks] == ["unemployment-brief"]
    assert [(Path(r.file).name, r.kind) for r in bad.rows] == [("deck.pptx", "unsupported_file"),
                                                               ("task.json", "unknown_reference")]
    with pytest.raises(DataError, match=r"deck.pptx: unsupported source type"):
        get_benchmark("analyst").load_tasks(compose(["benchmark=analyst", "agent=analyst",
                                                     f"benchmark.tasks_dir={t}"]))


def test_converter_skip_writes_quarantine_and_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    built = realtimeqa("convert", "qa", 2, "question_date", qa=put(2, "question_date", "2023/13/01"))(tmp_path)
    src = built.file.parent
    assert rtqa.main([str(src), str(tmp_path / "out"), "--on-bad-rows", "skip"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["bad_rows_skipped"] == 1 and stats["questions"] == 2
    rows = pq.read_table(tmp_path / "out" / "quarantine.parquet").to_pylist()
    assert [(r["row"], r["field"], r["kind"]) for r in rows] == [(2, "question_date", "impossible_date")]
    assert rtqa.main([str(src), str(tmp_path / "out2")]) == 2           # error mode: stops, names the row
    assert "row 2, field 'question_date'" in capsys.readouterr().err


def test_on_bad_rows_is_validated():
    from ray_jobs.config.compose import compose

    for bench in ("newsagent", "livenews", "analyst"):
        assert compose([f"benchmark={bench}", f"agent={bench}", "benchmark.on_bad_rows=skip"]).benchmark.on_bad_rows == "skip"
        with pytest.raises(ConfigError, match="benchmark.on_bad_rows: must be error or skip"):
            compose([f"benchmark={bench}", f"agent={bench}", "benchmark.on_bad_rows=drop"])


def test_bundled_samples_have_no_bad_rows():
    from engine.benchmarks import get_benchmark
    from ray_jobs.config.compose import compose

    for bench, least in (("newsagent", 20), ("livenews", 10), ("analyst", 3)):
        cfg = compose([f"benchmark={bench}", f"agent={bench}"])
        assert cfg.benchmark.on_bad_rows == "error"
        assert len(get_benchmark(bench).load_tasks(cfg)) >= least
    assert len(get_benchmark("newsagent").corpus(compose([]))) >= 500
