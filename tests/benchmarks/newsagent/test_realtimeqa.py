"""Tests for the RealTime QA -> newsagent converter (engine/benchmarks/newsagent/realtimeqa/).

The hand-made fixture below has two weeks and six questions; every sentence's fate (firsthand,
historical, reference, dropped) is worked out by hand in the comments and asserted exactly.
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
import random
from pathlib import Path

import pytest

from engine.benchmarks.newsagent import realtimeqa as rtqa
from engine.benchmarks.newsagent.data import load_dataset
from engine.errors import DataError

REPO_ROOT = Path(__file__).resolve().parents[3]
SHARED_RTQA = REPO_ROOT / ".." / "shared" / "data" / "realtimeqa"

U = "https://news.example.com/"

# --- A_old: 2023-01-02, in both weeks' results -------------------------------------------------
H1 = "The Riverton city council approved a new budget for the public library system."
H2 = "Local farmers reported record pumpkin harvests across the northern valley region this autumn."
OLD_TEXT = "\n\n".join([
    "Sign up for our daily newsletter to get the latest news every morning.",  # boilerplate prefix
    "By Staff Writer",  # short line
    "RIVERTON NEWS TODAY UPDATE FOR THE WEEK OF JANUARY.",  # all-caps header
    "https://news.example.com/some/other/page",  # URL line
    H1 + " " + H2,
    "Editor's note: this story was corrected on Tuesday afternoon after publication.",
])

# --- A_tgt: 2023-01-05, target of question 20230106_0 ----------------------------------------
T1 = "The Riverton city council approved a new budget for the public library system on Wednesday."  # ~H1
T2 = "Librarian Maria Gomez unveiled plans for a children's reading garden behind the main branch."
T3 = "Construction crews will begin renovating the historic reading room next month."
T4 = "The expanded evening hours are expected to draw hundreds of students during exam season."
T5 = "Officials said the winter storm caused widespread power outages across Harlan County."
T6 = "Volunteers from the Harlan County food bank delivered meals to stranded elderly residents."  # ~C1
T7 = "“We finally have the resources our readers have been asking for,” Gomez said."
T7_RENDERED = "[Gomez] We finally have the resources our readers have been asking for."
TGT_TEXT = "\n\n".join([
    "Riverton library budget",  # short line
    f"{T1} {T2}", f"{T3} {T4}", T5, T6, T7,
    "Follow us on social media for more coverage of the Riverton library story.",
])

# --- A_same: 2023-01-05 (same day as A_tgt, shorter) ------------------------------------------
S1 = "Construction crews will begin renovating the historic reading room early next month."  # ~T3
SAME_TEXT = f"{S1}\n\n{T5}"  # T5 verbatim: one object for both (same normalized text, same date)

# --- A_future: 2023-01-20, after both question dates ------------------------------------------
F1 = T2  # identical to T2, but later: never historical for the 2023-01-05 task
F2 = "Something else entirely about the regional airport expansion project and new runways."
FUTURE_TEXT = f"{F1} {F2}"

# --- C: 2023-01-03, target of question 20230106_2 ---------------------------------------------
C1 = "Volunteers from the Harlan County food bank delivered hot meals to stranded elderly residents."
C2 = "The regional transit authority suspended bus service on three rural routes indefinitely."
C_TEXT = f"{C1}\n{C2}"

# --- B_tgt: 2023-01-12, target of question 20230113_0 -----------------------------------------
B1 = "The expanded evening hours are expected to draw hundreds of students during final exam season."  # ~T4
B2 = ("Officials said the winter storm caused widespread power outages across Harlan County "
      "last week.")  # ~T5/S2
B3 = "Volunteers from the Harlan County food bank delivered meals to stranded residents."  # ~T6, ~C1
B4 = "Student government leaders collected more than two thousand petition signatures in December."
B5 = "The university provost promised additional security guards for late-night study sessions."
B6 = "Parking restrictions near the campus library will be lifted after ten o'clock."
B7 = "Crews will begin renovating the historic reading room next month, officials confirmed."  # ~T3, ~S1
B_TEXT = "\n\n".join([f"{B1} {B2}", B3, f"{B4} {B5}", B6, B7])

# --- D: 2023-01-10, target of question 20230113_1 ---------------------------------------------
D1 = "Local farmers reported record pumpkin harvests across the northern valley region in October."  # ~H2
D2 = "The county fair board voted to move the annual rodeo to the spring season."
D3 = "Ticket prices for the grandstand concerts will rise by five dollars next summer."
D_TEXT = f"{D1} {D2} {D3}"

E_TEXT = "The ice festival opened downtown with sculptures carved by twelve international teams."


def result(name: str, date: str | None, text: str | None, title: str | None = None) -> dict:
    r = {"url": U + name, "title": title or f"Story {name}"}
    if text is not None:
        r.update(text=text, authors=[], publish_date=date)
    return r


def qa(qid: str, date: str) -> dict:
    return {"question_id": qid, "question_date": date, "question_source": "CNN",
            "question_url": "https://example.com/quiz", "question_sentence": "Which?",
            "choices": ["a", "b", "c", "d"], "answer": ["0"], "evidence": "..."}


def gcs(qid: str, results: list[dict]) -> dict:
    return {"question_id": qid, "search_time": "2023/01/07/05:11", "search_result": results}


def write_gz(path: Path, rows: list, raw_lines: dict[int, str] | None = None) -> Path:
    lines = [json.dumps(r) for r in rows]
    for lineno, raw in (raw_lines or {}).items():
        lines.insert(lineno - 1, raw)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path


A_OLD = result("a-old", "2023/01/02", OLD_TEXT)
A_TGT = result("a-tgt", "2023/01/05", TGT_TEXT, "Riverton library gets a budget boost")
A_TGT_SHORT = result("a-tgt", "2023/01/05", T1, "Riverton library gets a budget ...")  # a poorer copy
A_SAME = result("a-same", "2023/01/05", SAME_TEXT)
A_FUTURE = result("a-future", "2023/01/20", FUTURE_TEXT)
C = result("c", "2023/01/03", C_TEXT)
B_TGT = result("b-tgt", "2023/01/12", B_TEXT, "Library hours expand for exams")
D = result("d", "2023/01/10", D_TEXT)
E = result("e", "2023/01/20", E_TEXT)
UNDATED = result("undated", None, None)  # title and url only, as in the real dumps


@pytest.fixture
def src(tmp_path: Path) -> Path:
    d = tmp_path / "rtqa"
    d.mkdir()
    write_gz(d / "20230106_qa.jsonl.gz", [qa("20230106_0", "2023/01/05"), qa("20230106_1", "2023/01/05"),
                                          qa("20230106_2", "2023/01/05")])
    write_gz(d / "20230106_gcs.jsonl.gz", [
        gcs("20230106_0", [A_OLD, A_TGT, A_SAME, A_FUTURE]),
        gcs("20230106_1", []),
        gcs("20230106_2", [C, A_OLD]),
    ])
    write_gz(d / "20230113_qa.jsonl.gz", [qa("20230113_0", "2023/01/12"), qa("20230113_1", "2023/01/12"),
                                          qa("20230113_2", "2023/01/12")])
    write_gz(d / "20230113_gcs.jsonl.gz", [
        gcs("20230113_0", [B_TGT, A_TGT_SHORT, A_FUTURE, A_TGT]),
        gcs("20230113_1", [D, A_OLD]),
        gcs("20230113_2", [E, UNDATED]),
    ])
    return d


def oid(name: str, sentence: str) -> str:
    return "rtqa-" + hashlib.sha1(f"{U}{name}\n{sentence}".encode()).hexdigest()[:12]


def test_fixture_exact_sets(src: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    stats = rtqa.convert(src, out)
    ds = load_dataset(out)  # validates references strictly before release
    tasks = {t.task_id: t for t in ds.tasks}
    assert list(tasks) == ["rtqa-20230106_0", "rtqa-20230113_0"]

    t1 = tasks["rtqa-20230106_0"]
    assert t1.release_date == dt.date(2023, 1, 5) and t1.source == "20230106_0"
    assert t1.title == "Riverton library gets a budget boost"  # the full copy, not the poorer duplicate
    # T1 matches H1 (earlier, same question) -> reference; T6 matches C1 (earlier, other question)
    # -> neither firsthand nor reference; T2 equals a *later* sentence, T3 resembles a *same-day*
    # one, T5 is shared with a same-day article: all firsthand.
    assert list(t1.firsthand) == [T2, T3, T4, T5, T7_RENDERED]
    assert list(t1.reference_evidence) == [oid("a-old", H1)]
    assert t1.reference_article.split("\n\n") == [f"{T1} {T2}", f"{T3} {T4}", T5, T6, T7]

    t2 = tasks["rtqa-20230113_0"]
    assert t2.release_date == dt.date(2023, 1, 12) and t2.title == "Library hours expand for exams"
    assert list(t2.firsthand) == [B4, B5, B6]
    # B1~T4, B3~T6 (C1 also matches but C is not in this question's results), B7~T3 (S1 too, but
    # a-same is not in the results), B2~T5: that object was deduplicated into a-same's copy
    # (a-same sorts first) and still counts because a-tgt produced it too. Database order.
    assert list(t2.reference_evidence) == [oid("a-same", T5), oid("a-tgt", T3), oid("a-tgt", T4),
                                           oid("a-tgt", T6)]

    # The database: every article dated strictly before the latest release (2023-01-12); B (on that
    # date), A_future and E (later) are out; boilerplate lines are gone; T5 is stored once.
    by_text = {o.text: o for o in ds.objects}
    assert set(by_text) == {H1, H2, C1, C2, S1, T5, T1, T2, T3, T4, T6, T7_RENDERED, D1, D2, D3}
    assert len(ds.objects) == 15
    assert by_text[T5].source == U + "a-same" and by_text[T5].object_id == oid("a-same", T5)
    assert by_text[T7_RENDERED].kind == "quote"
    assert {o.kind for o in ds.objects if o.text != T7_RENDERED} == {"description"}
    assert by_text[H1].date == dt.date(2023, 1, 2) and by_text[H1].source == U + "a-old"
    assert all(o.date < dt.date(2023, 1, 12) for o in ds.objects)
    assert [o.date for o in ds.objects] == sorted(o.date for o in ds.objects)

    assert stats["tasks"] == 2 and stats["questions"] == 6 and stats["weeks"] == 2
    assert stats["skipped"] == {"no_search_results": 1, "no_target_article": 1,
                                "no_reference_evidence": 1, "too_few_firsthand": 1}
    assert stats["objects"] == 15 and stats["objects_quote"] == 1
    assert stats["reference_evidence_total"] == 5 and stats["firsthand_total"] == 8
    assert stats["firsthand_mean"] == 4.0
    assert stats["articles"] == 9 and stats["articles_undated"] == 1 and stats["articles_without_text"] == 1
    assert stats["search_results"] == 14


def test_dedupe_by_url_and_stable_output(src: Path, tmp_path: Path) -> None:
    rtqa.convert(src, tmp_path / "a")
    rtqa.convert(src, tmp_path / "b")
    for name in ("objects.jsonl", "tasks.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    objs = [json.loads(line) for line in (tmp_path / "a" / "objects.jsonl").open()]
    ids = [o["object_id"] for o in objs]
    assert len(ids) == len(set(ids))
    # a-old appears in three questions, a-tgt in two (once as a poorer copy): one set of sentences each
    assert sum(o["source"] == U + "a-old" for o in objs) == 2
    assert sum(o["source"] == U + "a-tgt" for o in objs) == 6


def test_article_on_release_date_is_never_historical(tmp_path: Path) -> None:
    # Only a same-day article repeats the target: nothing is historical, so no reference evidence.
    d = tmp_path / "src"
    d.mkdir()
    write_gz(d / "20230106_qa.jsonl.gz", [qa("20230106_0", "2023/01/05")])
    write_gz(d / "20230106_gcs.jsonl.gz", [gcs("20230106_0", [A_TGT, result("copy", "2023/01/05", T1)])])
    stats = rtqa.convert(d, tmp_path / "out")
    assert stats["tasks"] == 0 and stats["skipped"]["no_reference_evidence"] == 1

    # One day earlier, the same copy becomes the reference.
    write_gz(d / "20230106_gcs.jsonl.gz", [gcs("20230106_0", [A_TGT, result("copy", "2023/01/04", T1)])])
    stats = rtqa.convert(d, tmp_path / "out")
    ds = load_dataset(tmp_path / "out")
    assert stats["tasks"] == 1
    assert list(ds.tasks[0].reference_evidence) == [oid("copy", T1)]
    assert [o.text for o in ds.objects] == [T1]  # A_TGT (on the release date) is not in the database


def test_target_choice_latest_on_or_before_question_date_then_longer(tmp_path: Path) -> None:
    d = tmp_path / "src"
    d.mkdir()
    short = result("short", "2023/01/05", f"{T2} {T3} {T4}", "Short")
    write_gz(d / "20230106_qa.jsonl.gz", [qa("20230106_0", "2023/01/05")])
    write_gz(d / "20230106_gcs.jsonl.gz", [gcs("20230106_0", [A_FUTURE, short, A_TGT, A_OLD])])
    rtqa.convert(d, tmp_path / "out")
    (task,) = load_dataset(tmp_path / "out").tasks
    assert task.title == "Riverton library gets a budget boost"  # same day as "short", longer text
    assert task.release_date == dt.date(2023, 1, 5)  # A_FUTURE (2023-01-20) is after the question


def test_weeks_and_options(src: Path, tmp_path: Path) -> None:
    stats = rtqa.convert(src, tmp_path / "w1", weeks=["20230106"])
    assert stats["weeks"] == 1 and stats["questions"] == 3 and stats["tasks"] == 1
    # max_sentences=3 keeps T1..T3 of the target: T1 is matched, T2 and T3 are too few firsthand.
    stats = rtqa.convert(src, tmp_path / "cap", weeks=["2023-01-06"], max_sentences=3)
    assert stats["tasks"] == 0 and stats["skipped"]["too_few_firsthand"] == 1
    # At threshold 1.0 every content token of the smaller sentence must be shared: B2 still
    # matches T5 (T5's tokens are a subset), B7 no longer matches T3 (no "construction").
    rtqa.convert(src, tmp_path / "strict", threshold=1.0)
    t2 = {t.task_id: t for t in load_dataset(tmp_path / "strict").tasks}["rtqa-20230113_0"]
    assert list(t2.reference_evidence) == [oid("a-same", T5), oid("a-tgt", T4), oid("a-tgt", T6)]
    assert list(t2.firsthand) == [B4, B5, B6, B7]
    with pytest.raises(DataError, match="20230120_qa.jsonl.gz.*file not found"):
        rtqa.convert(src, tmp_path / "x", weeks=["20230120"])


def test_boilerplate_repeated_across_articles(tmp_path: Path) -> None:
    # The promo line is in 5 articles (4 earlier ones and the target): boilerplate by default.
    promo = "Support local journalism and subscribe to the Riverton Gazette today for full access."
    d = tmp_path / "src"
    d.mkdir()
    arts = [result(f"p{i}", f"2023/01/0{i + 1}", f"{promo}\n{s}") for i, s in enumerate([H1, H2, C1, C2])]
    arts.append(result("t", "2023/01/05", f"{promo}\n{T1} {T2} {T3} {T4}"))
    write_gz(d / "20230106_qa.jsonl.gz", [qa("20230106_0", "2023/01/06")])
    write_gz(d / "20230106_gcs.jsonl.gz", [gcs("20230106_0", arts)])
    rtqa.convert(d, tmp_path / "out")
    ds = load_dataset(tmp_path / "out")
    assert [o.text for o in ds.objects] == [H1, H2, C1, C2]
    assert list(ds.tasks[0].reference_evidence) == [oid("p0", H1)]
    assert list(ds.tasks[0].firsthand) == [T2, T3, T4]
    # Counted as boilerplate only from 6 articles on: the promo is kept and even becomes "evidence".
    rtqa.convert(d, tmp_path / "out6", boilerplate_min_articles=6)
    ds = load_dataset(tmp_path / "out6")
    assert promo in [o.text for o in ds.objects]
    assert oid("p0", promo) in ds.tasks[0].reference_evidence


# --- bad input -------------------------------------------------------------------------------------


def test_malformed_json_line_names_file_and_row(src: Path, tmp_path: Path) -> None:
    path = src / "20230113_gcs.jsonl.gz"
    write_gz(path, [gcs("20230113_0", [B_TGT]), gcs("20230113_1", [D])], raw_lines={2: '{"question_id": "x", '})
    with pytest.raises(DataError) as e:
        rtqa.convert(src, tmp_path / "out")
    assert e.value.path == path and e.value.row == 2 and e.value.field is None
    assert "20230113_gcs.jsonl.gz, row 2" in str(e.value) and "invalid JSON" in str(e.value)
    assert not (tmp_path / "out").exists()


def test_missing_field_names_file_row_and_field(src: Path, tmp_path: Path) -> None:
    path = src / "20230106_qa.jsonl.gz"
    bad = qa("20230106_2", "2023/01/05")
    del bad["question_date"]
    write_gz(path, [qa("20230106_0", "2023/01/05"), qa("20230106_1", "2023/01/05"), bad])
    with pytest.raises(DataError) as e:
        rtqa.convert(src, tmp_path / "out")
    assert (e.value.path, e.value.row, e.value.field) == (path, 3, "question_date")
    assert str(e.value) == f"{path}, row 3, field 'question_date': missing"


@pytest.mark.parametrize("mutate, row, field", [
    (lambda rows: rows[1]["search_result"][0].update(publish_date="2023/13/45"), 2, "search_result[0].publish_date"),
    (lambda rows: rows[0]["search_result"][1].pop("url"), 1, "search_result[1].url"),
    (lambda rows: rows[2].pop("search_result"), 3, "search_result"),
    (lambda rows: rows[2].update(question_id="20230113_0"), 3, "question_id"),  # duplicate
])
def test_bad_gcs_rows(src: Path, tmp_path: Path, mutate, row: int, field: str) -> None:
    rows = json.loads(json.dumps([gcs("20230113_0", [B_TGT, A_TGT]), gcs("20230113_1", [D, A_OLD]),
                                  gcs("20230113_2", [E, UNDATED])]))
    mutate(rows)
    path = write_gz(src / "20230113_gcs.jsonl.gz", rows)
    with pytest.raises(DataError) as e:
        rtqa.convert(src, tmp_path / "out")
    assert (e.value.path, e.value.row, e.value.field) == (path, row, field)


def test_bad_question_date(src: Path, tmp_path: Path) -> None:
    path = write_gz(src / "20230106_qa.jsonl.gz", [qa("20230106_0", "Jan 5 2023")])
    with pytest.raises(DataError, match=r"row 1, field 'question_date': expected a date"):
        rtqa.convert(src, tmp_path / "out")
    assert path.name == "20230106_qa.jsonl.gz"


def test_cli_prints_stats(src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert rtqa.main([str(src), str(tmp_path / "out"), "--max-sentences", "40", "--threshold", "0.6"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["tasks"] == 2 and len(load_dataset(tmp_path / "out").tasks) == 2
    assert rtqa.main([str(tmp_path / "missing"), str(tmp_path / "out2")]) == 2
    assert "source folder not found" in capsys.readouterr().err


# --- text helpers ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("Mr. Smith met Dr. Jones on Jan. 5 in St. Louis. They talked.",
     ["Mr. Smith met Dr. Jones on Jan. 5 in St. Louis.", "They talked."]),
    ("The U.S. economy grew 2.9% last year. The Fed raised rates by 0.25 points.",
     ["The U.S. economy grew 2.9% last year.", "The Fed raised rates by 0.25 points."]),
    ("He moved to the U.S. But he missed home.", ["He moved to the U.S.", "But he missed home."]),
    ("George W. Bush addressed the U.S. Senate at 3 p.m. Friday.",
     ["George W. Bush addressed the U.S. Senate at 3 p.m. Friday."]),
    ("“We will win,” Biden said. “It is over.” The crowd cheered!",
     ["“We will win,” Biden said.", "“It is over.”", "The crowd cheered!"]),
    ('She asked, "Is this it?" he replied no. Then he left.',
     ['She asked, "Is this it?" he replied no.', "Then he left."]),
    ("Apple Inc. reported $1.2 billion in sales. It ranks No. 1 again.",
     ["Apple Inc. reported $1.2 billion in sales.", "It ranks No. 1 again."]),
])
def test_split_sentences(text: str, expected: list[str]) -> None:
    assert rtqa.split_sentences(text) == expected


def test_boilerplate_lines() -> None:
    drop = ["Editor's note: a version of this story appeared in our weekly newsletter.",
            "Follow every game: Latest NBA Scores and Schedules for tonight.",
            "Sign up for CNN's Wonder Theory science newsletter and more today.",
            "Read more: what the budget means for the city and its residents.",
            "Related: What the budget means for the city and its residents.",
            "https://www.example.com/a/very/long/link/that/is/a/line",
            "THE LATEST HEADLINES FROM AROUND THE WORLD TODAY.",
            "Too short to be a sentence.",
            "A headline without any punctuation at the end of the line",
            "Reach the reporter at someone@example.com or on Twitter for more details."]
    for line in drop:
        assert rtqa.is_boilerplate_line(line), line
    assert not rtqa.is_boilerplate_line(H1)
    assert rtqa.clean_article("(CNN) — " + H1) == [[H1]]


def test_quotes() -> None:
    assert rtqa.as_quote(T7) == ("Gomez", "We finally have the resources our readers have been asking for.")
    assert rtqa.as_quote("“We are going to win this fight and we will never back down from it,” "
                         "said Sen. Chuck Schumer.") == (
        "Sen. Chuck Schumer", "We are going to win this fight and we will never back down from it.")
    assert rtqa.as_quote("“We are going to win this fight,” he said.") is None  # no attributable speaker
    assert rtqa.as_quote("“We win,” Biden said in a long speech at the White House on Tuesday.") is None
    assert rtqa.as_quote(H1) is None


def test_matching_rule_and_index_agree() -> None:
    assert rtqa.content_tokens("Biden's plan didn't pass the U.S. Senate, he said.") == {
        "biden", "plan", "pass", "senate"}
    a, b = rtqa.content_tokens(T3), rtqa.content_tokens(B7)
    assert rtqa.is_match(a, b, 0.6) and not rtqa.is_match(a, b, 1.0)
    assert not rtqa.is_match(frozenset("abcd"), frozenset("abcd"))  # fewer than 5 content tokens

    rng = random.Random(7)
    vocab = [f"w{i}" for i in range(40)]
    objs = []
    for i in range(400):
        toks = frozenset(rng.sample(vocab, rng.randint(3, 12)))
        objs.append(rtqa.DbObject(f"o{i}", dt.date(2023, 1, 1) + dt.timedelta(days=i // 20), "", "", "description",
                                 "", toks, set()))
    index = rtqa.Index(objs)
    for _ in range(50):
        q = frozenset(rng.sample(vocab, rng.randint(3, 12)))
        before = dt.date(2023, 1, 1) + dt.timedelta(days=rng.randint(0, 21))
        for th in (0.5, 0.6, 0.8):
            brute = [i for i, o in enumerate(objs) if o.date < before and rtqa.is_match(q, o.tokens, th)]
            assert index.matches(q, before, th) == brute


# --- the real Q1 2023 slice --------------------------------------------------------------------------


@pytest.mark.real(model=False)          # converts the whole real slice: ~15 s
@pytest.mark.skipif(not SHARED_RTQA.exists(), reason="shared RealTime QA slice not present")
def test_real_q1_slice(tmp_path: Path) -> None:
    stats = rtqa.convert(SHARED_RTQA, tmp_path / "rtqa")
    ds = load_dataset(tmp_path / "rtqa")
    assert stats["tasks"] >= 50 and len(ds.tasks) == stats["tasks"]
    assert len(ds.objects) == stats["objects"] > 1000
    assert all(len(t.firsthand) >= 3 and t.reference_evidence for t in ds.tasks)
    assert sum(stats["skipped"].values()) + stats["tasks"] == stats["questions"]


# --- several crawls of one article: the earliest usable crawl, at or before the question's cutoff ---

UPDATE = "On Friday the council reversed course and cut the library budget in half after a lawsuit."
A_TGT_UPDATED = result("a-tgt", "2023/01/05", TGT_TEXT + "\n\n" + UPDATE, "Riverton library budget cut after lawsuit")
A_TGT_NO_TEXT = result("a-tgt", None, None, "Riverton library gets a budget boost")  # as in the real dumps


def crawl(qid: str, results: list[dict], when: str) -> dict:
    return {"question_id": qid, "search_time": when, "search_result": results}


def test_earliest_crawl_is_kept_not_the_longer_update(tmp_path: Path) -> None:
    """a-tgt (released 2023-01-05) is crawled on 01-07 for the first week's question and again on
    01-14, when a sentence written after the release had been added (the later copy is longer).
    The task built on it and the database objects it feeds use the 01-07 text."""
    d = tmp_path / "src"
    d.mkdir()
    write_gz(d / "20230106_qa.jsonl.gz", [qa("20230106_0", "2023/01/05")])
    write_gz(d / "20230106_gcs.jsonl.gz", [crawl("20230106_0", [A_OLD, A_TGT], "2023/01/07/05:11")])
    write_gz(d / "20230113_qa.jsonl.gz", [qa("20230113_0", "2023/01/12")])
    write_gz(d / "20230113_gcs.jsonl.gz", [crawl("20230113_0", [B_TGT, A_TGT_UPDATED], "2023/01/14/09:30")])
    stats = rtqa.convert(d, tmp_path / "out")
    ds = load_dataset(tmp_path / "out")
    tasks = {t.task_id: t for t in ds.tasks}
    t1 = tasks["rtqa-20230106_0"]
    assert t1.release_date == dt.date(2023, 1, 5)
    assert t1.title == "Riverton library gets a budget boost"
    assert t1.reference_article.split("\n\n") == [f"{T1} {T2}", f"{T3} {T4}", T5, T6, T7]
    assert UPDATE not in t1.reference_article and UPDATE not in t1.firsthand
    assert list(t1.firsthand) == [T2, T3, T4, T5, T6, T7_RENDERED]
    # the 2023-01-12 task sees a-tgt in its database: the 01-07 sentences only
    assert "rtqa-20230113_0" in tasks
    a_tgt = {o.text for o in ds.objects if o.source == U + "a-tgt"}
    assert a_tgt == {T1, T2, T3, T4, T5, T6, T7_RENDERED}
    assert stats["articles_crawled_more_than_once"] == 1 and stats["targets_crawled_later"] == 0


def test_earliest_crawl_wins_in_any_input_order(tmp_path: Path) -> None:
    d = tmp_path / "src"
    d.mkdir()
    write_gz(d / "20230106_qa.jsonl.gz", [qa("20230106_0", "2023/01/05"), qa("20230106_1", "2023/01/05")])
    outs = []
    for rows in ([crawl("20230106_0", [A_TGT_UPDATED, A_OLD], "2023/01/09/10:00"),
                  crawl("20230106_1", [A_TGT, A_OLD], "2023/01/07/05:11")],
                 [crawl("20230106_1", [A_TGT, A_OLD], "2023/01/07/05:11"),
                  crawl("20230106_0", [A_TGT_UPDATED, A_OLD], "2023/01/09/10:00")]):
        write_gz(d / "20230106_gcs.jsonl.gz", rows)
        out = tmp_path / f"out{len(outs)}"
        rtqa.convert(d, out)
        outs.append((out / "tasks.jsonl").read_bytes())
        tasks = load_dataset(out).tasks
        assert len(tasks) == 2 and all(UPDATE not in t.reference_article for t in tasks)
    assert outs[0] == outs[1]


def test_no_crawl_after_the_question_cutoff(tmp_path: Path) -> None:
    """The first question's own copy of a-tgt has no text or date; the only usable crawl comes a
    week later, after that question's cutoff (its search_time): a-tgt is no target for it."""
    d = tmp_path / "src"
    d.mkdir()
    write_gz(d / "20230106_qa.jsonl.gz", [qa("20230106_0", "2023/01/05")])
    write_gz(d / "20230106_gcs.jsonl.gz", [crawl("20230106_0", [A_TGT_NO_TEXT], "2023/01/07/05:11")])
    write_gz(d / "20230113_qa.jsonl.gz", [qa("20230113_0", "2023/01/12")])
    write_gz(d / "20230113_gcs.jsonl.gz", [crawl("20230113_0", [B_TGT, A_TGT, A_OLD], "2023/01/14/09:30")])
    stats = rtqa.convert(d, tmp_path / "out")
    assert stats["targets_crawled_later"] == 1 and stats["skipped"]["no_target_article"] == 1
    assert [t.task_id for t in load_dataset(tmp_path / "out").tasks] == ["rtqa-20230113_0"]


def test_bad_search_time(src: Path, tmp_path: Path) -> None:
    path = write_gz(src / "20230113_gcs.jsonl.gz", [crawl("20230113_0", [B_TGT], "last Tuesday")])
    with pytest.raises(DataError) as e:
        rtqa.convert(src, tmp_path / "out")
    assert (e.value.path, e.value.row, e.value.field) == (path, 1, "search_time")
