"""livenews building blocks: the figure-8 grader parsing, the figure-7 action blocks, loaders."""

from __future__ import annotations

import datetime as dt
import gzip
import json

import pytest

from engine.benchmarks import get_benchmark
from engine.benchmarks.livenews.actions import LiveAction, parse_action_block
from engine.benchmarks.livenews.data import load_livenewsbench, load_realtimeqa
from engine.benchmarks.livenews.grader import GRADER_PROMPT, grader_prompt, parse_grade
from engine.errors import ConfigError, DataError
from engine.llm.actions import ParseError


@pytest.mark.parametrize("out,grade", [
    ("A", "CORRECT"), ("B", "INCORRECT"), ("C", "NOT ATTEMPTED"), (" b\n", "INCORRECT"), ('"C"', "NOT ATTEMPTED"),
    ("CORRECT", "CORRECT"), ("NOT ATTEMPTED", "NOT ATTEMPTED"),
    ("A: CORRECT", "CORRECT"), ("C) not attempted", "NOT ATTEMPTED"),
])
def test_grades(out, grade):
    assert parse_grade(out) == grade


@pytest.mark.parametrize("out", ["", "D", "maybe", "CORRECT or INCORRECT", "I cannot grade this answer",
                                 "The answer is INCORRECT."])   # prose around a grade: malformed, retried
def test_malformed_grades(out):
    assert parse_grade(out) is None


def test_grader_prompt_is_figure_8():
    p = grader_prompt("Who won?", "Buffalo Bills", "the Bills")
    assert p.startswith("Your job is to look at a question, a gold target, and a predicted answer")
    assert "Question: Who won?\nGold target: Buffalo Bills\nPredicted answer: the Bills" in p
    assert p.endswith('Just return the letters "A", "B", or "C", with no text around it.')
    assert GRADER_PROMPT.count("{question}") == 1


def test_action_blocks():
    assert parse_action_block("I will look.\n```action\ntype: Search\nbills hamlin\nhamlin team\n```") == \
        LiveAction("search", ("bills hamlin", "hamlin team"))
    assert parse_action_block("action\ntype: Click\nhttps://a.com/x\naction") == LiveAction("visit", ("https://a.com/x",))
    assert parse_action_block("```\ntype: Finish\nBuffalo\nBills\n```") == LiveAction("finish", ("Buffalo Bills",))


@pytest.mark.parametrize("text,reason", [
    ("no block here", "no action block"),
    ("```action\ntype: Search\na\n```\n```action\ntype: Finish\nb\n```", "only one action block"),
    ("```action\ntype: Jump\nx\n```", "unknown action type 'Jump'"),
    ("```action\ntype: Search\n```", "Search needs at least one query"),
])
def test_action_block_errors(text, reason):
    with pytest.raises(ParseError, match=reason):
        parse_action_block(text)


def test_livenewsbench_loader(tmp_path):
    f = tmp_path / "q.jsonl"
    rows = [{"question": "Q1?", "answer": "A1", "event_date": "2025-06-01", "link": "https://www.bbc.co.uk/news/1"},
            {"question": "Q2?", "answer": "A2", "event_date": "2025-06-02", "second_level_domain": "Reuters.com"}]
    f.write_text("\n".join(json.dumps(r) for r in rows))
    q = load_livenewsbench(f)
    assert [(x.source_domain, x.event_date) for x in q] == [("bbc.co.uk", dt.date(2025, 6, 1)), ("reuters.com", dt.date(2025, 6, 2))]
    f.write_text(json.dumps({"question": "Q?", "answer": "A", "event_date": "June 1"}))
    with pytest.raises(DataError, match=r"q.jsonl, row 1, field 'link'"):
        load_livenewsbench(f)
    f.write_text(json.dumps({"question": "Q?", "answer": "A", "event_date": "June", "link": "https://x.com"}))
    with pytest.raises(DataError, match=r"row 1, field 'event_date'"):
        load_livenewsbench(f)


def _gz(path, rows):
    with gzip.open(path, "wt") as f:
        f.write("\n".join(json.dumps(r) for r in rows))


def test_realtimeqa_loader_dedupes_pages(tmp_path):
    _gz(tmp_path / "20230106_qa.jsonl.gz", [
        {"question_id": "q1", "question_date": "2023/01/05", "question_url": "https://edition.cnn.com/quiz",
         "question_sentence": "Which team?", "choices": ["Steelers", "Bengals", "Bills", "Browns"], "answer": ["2"]}])
    page = {"url": "https://a.com/1", "title": "T", "text": "Bills news.", "publish_date": "2023/01/04"}
    _gz(tmp_path / "20230106_gcs.jsonl.gz", [
        {"question_id": "q1", "search_result": [page, dict(page, text="a later copy"), {"url": "https://b.com/2", "text": None}]},
        {"question_id": "q2", "search_result": [dict(page, url="https://c.com/3", publish_date=None)]}])
    questions, pages = load_realtimeqa(tmp_path)
    (q,) = questions
    assert (q.answer, q.source_domain, q.event_date, len(q.choices)) == ("Bills", "cnn.com", dt.date(2023, 1, 5), 4)
    assert [(p.url, p.text, p.date) for p in pages] == [("https://a.com/1", "Bills news.", dt.date(2023, 1, 4)),
                                                       ("https://c.com/3", "Bills news.", None)]
    _gz(tmp_path / "20230106_qa.jsonl.gz", [{"question_id": "q1", "question_date": "2023/01/05",
                                              "question_sentence": "?", "choices": ["a"], "answer": ["7"]}])
    with pytest.raises(DataError, match=r"20230106_qa.jsonl.gz, row 1, field 'answer'"):
        load_realtimeqa(tmp_path)


def test_unfinished_benchmark_folder_is_not_runnable(tmp_path, monkeypatch):
    from engine.benchmarks import runnable_benchmarks

    (tmp_path / "halfbuilt").mkdir()
    (tmp_path / "halfbuilt" / "__init__.py").write_text('"""no BENCHMARK yet"""\n')
    monkeypatch.setenv("DATELINE_BENCHMARKS", str(tmp_path))
    with pytest.raises(ConfigError, match="defines no BENCHMARK"):
        get_benchmark("halfbuilt")
    assert "halfbuilt" not in runnable_benchmarks()
    assert {"newsagent", "livenews"} <= set(runnable_benchmarks())


def test_pages_jsonl_dedupes_by_url_and_names_bad_rows(tmp_path):
    from engine.benchmarks.livenews.data import load_pages

    p = tmp_path / "pages.jsonl"
    rows = [{"url": "https://a.com/1", "title": "first", "text": "one", "publish_date": "2023-01-02"},
            {"url": "https://a.com/1", "title": "copy", "text": "two"},
            {"url": "https://b.co.uk/2", "text": "three", "publish_date": "2023/01/03 10:00"}]
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    pages = load_pages(p)
    assert [(x.url, x.title, x.date) for x in pages] == [
        ("https://a.com/1", "first", dt.date(2023, 1, 2)), ("https://b.co.uk/2", "", dt.date(2023, 1, 3))]
    for bad, field in (({"url": "a.com/x", "text": "t"}, "url"), ({"url": "https://a.com/x"}, "text"),
                       ({"url": "https://a.com/x", "text": "t", "publish_date": "Jan 3"}, "publish_date"),
                       ({"url": "https://a.com/x", "text": "t", "title": 3}, "title")):
        p.write_text(json.dumps(rows[0]) + "\n" + json.dumps(bad) + "\n")
        with pytest.raises(DataError, match=rf"pages.jsonl, row 2, field '{field}'"):
            load_pages(p)
