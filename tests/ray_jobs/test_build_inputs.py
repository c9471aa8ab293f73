"""``dateline build build=livenews`` and its inputs, on scripted models (tests/ray_jobs/build_helpers.py):
bad article rows quarantined with file, row and field and counted in the manifest (or, by default,
refused in one line before anything runs), the human review's CSV of accept/reject decisions
selecting the verified subset of the test split, its rejections counted, and a verifier that was
down for a call: that pair is pending, not rejected, and the next build asks the call again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from engine.benchmarks.livenews.build.articles import article_id
from engine.storage import EpisodeStore, read_quarantine
from tests.fake_openai import FakeOpenAI
from tests.helpers import REPO
from tests.ray_jobs.build_helpers import build_in_process, build_overrides, generator, verifier

pytestmark = [pytest.mark.slow]

# Two more July events, each with one article the scripted models keep (title -> its fact): with
# the helpers' heatwave story, three questions in the test split for the reviewer.
EXTRA = [("2025-07-20", "https://www.apnews.com/story/20", "Wildfire contained near Athens", "nine days"),
         ("2025-07-24", "https://www.reuters.com/story/21", "Central bank of Brazil raises its rate", "15 percent")]
HEAT = "https://www.bbc.co.uk/story/6"            # the helpers' July story (kept, test split)
PORT = "https://www.apnews.com/story/0"           # the helpers' March story (kept, train split)


def _extra_fact(prompt: str) -> tuple[str, str] | None:
    """(title, fact) of the EXTRA article a prompt is about, if any."""
    return next(((t, f) for _, _, t, f in EXTRA if t in prompt), None)


def gen(messages: list[dict[str, Any]], req: dict[str, Any]) -> str:
    p = messages[0]["content"]
    hit = _extra_fact(p)
    if hit is None:
        return generator(messages, req)
    if "News event summary:" in p:
        return "Answer: Yes"
    return (f"Question: What figure was reported about: {hit[0]}?\nAnswer: {hit[1]}\n"
            "Temporal Stability: Unlikely to change over time\nExplanation: fixed.")


def ver(messages: list[dict[str, Any]], req: dict[str, Any]) -> str:
    p = messages[0]["content"]
    hit = _extra_fact(p)
    if hit is not None and "reply exactly: N/A" in p:
        return hit[1]
    return verifier(messages, req)       # the grader and the guideline check read the prompt alone


def _append(path: Path, rows: list[dict[str, Any] | str]) -> int:
    """Append rows (objects, or raw lines) to a JSON Lines file; the 1-based row of the first."""
    first = len(path.read_text().splitlines()) + 1
    with path.open("a") as f:
        for r in rows:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return first


BAD = [{"url": "https://www.apnews.com/story/90", "title": "Undated story", "text": "Some text."},
       {"url": "/story/91", "title": "Relative link", "text": "Some text.", "publish_date": "2025-07-02"},
       {"url": "https://www.apnews.com/story/92", "title": "No text", "text": "   ", "publish_date": "2025-07-02"}]
BAD_FIELDS = ["publish_date", "url", "text"]


def _inputs(folder: Path, gen_url: str, ver_url: str, run_dir: Path, *extra: str) -> tuple[list[str], Path, int]:
    """The helpers' nine articles and events, the two EXTRA ones, then the BAD rows: the build's
    overrides, the articles file and the row of the first bad one."""
    over = build_overrides(gen_url, ver_url, folder, run_dir, *extra)
    arts, events = folder / "articles.jsonl", folder / "events.jsonl"
    text = ". Reporters confirmed the figure: {}. " + "Background paragraph. " * 20
    _append(arts, [{"url": u, "title": t, "text": t + text.format(f), "publish_date": d} for d, u, t, f in EXTRA])
    _append(events, [{"date": d, "summary": t} for d, _, t, _ in EXTRA])
    return over, arts, _append(arts, list(BAD))


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@pytest.mark.ray
@pytest.mark.timeout(600)
def test_bad_article_rows_are_quarantined_and_counted_and_a_review_selects_the_verified_test_questions(tmp_path):
    review = tmp_path / "review.csv"
    (wildfire, bank) = (article_id(u) for _, u, _, _ in EXTRA)
    review.write_text("id,decision,question\n"
                      f"{article_id(HEAT)},accept,an edited question changes nothing\n"
                      f"{wildfire},REJECT,\n"
                      f"{article_id(PORT)},accept,\n")          # a train question: outside the test split
    with FakeOpenAI(gen) as g, FakeOpenAI(ver) as v:
        over, arts, first_bad = _inputs(tmp_path / "in", g.base_url, v.base_url, tmp_path / "run",
                                        "benchmark.on_bad_rows=skip", f"benchmark.review={review}")
        out, m = build_in_process(over)

    q = sorted(read_quarantine(EpisodeStore(tmp_path / "run")).to_pylist(), key=lambda r: r["row"])
    assert [(r["file"], r["row"], r["field"]) for r in q] == [
        (str(arts), first_bad + i, f) for i, f in enumerate(BAD_FIELDS)]
    assert [r["kind"] for r in q] == ["missing_field", "bad_url", "empty_text"]
    assert m["stages"]["intake"]["counts"]["quarantined"] == 3
    assert m["stages"]["intake"]["rejected"]["quarantined"] == 3
    assert m["stages"]["intake"]["passed"] == 11 and m["stages"]["relevance"]["in"] == 11
    pages = {p["url"] for p in _lines(out / "pages.jsonl")}
    assert len(pages) == 11 and not pages & {b["url"] for b in BAD}       # the good rows, and only they
    assert m["kept"] == 5 and m["sets"] == {"main": 4, "longitudinal": 1}

    test_ids = [x["id"] for x in _lines(out / "questions_test.jsonl")]
    assert sorted(test_ids) == sorted([article_id(HEAT), wildfire, bank])
    verified = _lines(out / "questions_verified.jsonl")
    assert [x["id"] for x in verified] == [article_id(HEAT)]
    assert verified[0]["question"] == "What figure was reported about: Heatwave record in Madrid?"
    assert m["review"] == {"file": str(review), "accepted": 1, "rejected": 1, "unreviewed": 1, "outside_test": 1}
    assert "questions_verified.jsonl" in m["files"]
    assert "1 accepted, 1 rejected, 1 not reviewed" in (out / "card.md").read_text()
    assert str(review) in [i["path"] for i in m["inputs"]]


def test_a_bad_article_row_stops_the_build_in_one_line_before_anything_runs(tmp_path):
    """The default (benchmark.on_bad_rows=error): the first bad row, by file, row and field."""
    with FakeOpenAI(gen) as g, FakeOpenAI(ver) as v:
        over, arts, first_bad = _inputs(tmp_path / "in", g.base_url, v.base_url, tmp_path / "run")
        p = subprocess.run([sys.executable, "-m", "ray_jobs.cli", "build", *over], cwd=REPO, text=True,
                           capture_output=True, timeout=300, env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
        asked = len(g.requests) + len(v.requests)
    assert p.returncode == 2, p.stderr[-3000:]
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("dateline build:")]
    assert errors == [f"dateline build: BadDataError: {arts}, row {first_bad}, field 'publish_date': missing"], \
        p.stderr[-3000:]
    assert "Traceback" not in p.stderr and asked == 0
    assert not (tmp_path / "run" / "episodes").exists() and not (tmp_path / "run" / "release").exists()


@pytest.mark.ray
@pytest.mark.timeout(900)
def test_a_verifier_call_that_failed_at_the_endpoint_leaves_its_pair_pending_until_the_next_build(tmp_path):
    down = threading.Event()
    down.set()

    def flaky(messages: list[dict[str, Any]], req: dict[str, Any]) -> Any:
        p = messages[0]["content"]
        if down.is_set() and "reply exactly: N/A" in p and "Jezero-2" in p:      # the [differ] pair's answer
            return (500, "verifier down")
        return verifier(messages, req)

    with FakeOpenAI(generator) as g, FakeOpenAI(flaky) as v:
        over = build_overrides(g.base_url, v.base_url, tmp_path / "in", tmp_path / "run")
        out, m = build_in_process(over)
        assert m["pending"] == 1 and m["stages"]["answer"]["pending"] == 1
        assert m["stages"]["answer"]["rejected"] == {"verifier_found_no_answer": 1}      # no "verifier_unreadable"
        assert m["stages"]["match"]["rejected"] == {} and m["kept"] == 3
        pending = [r for r in _lines(out / "rejected.jsonl") if r["pending"]]
        assert [(r["stage"], r["reason"], r["article_title"]) for r in pending] == [
            ("answer", "no_answer_yet", "Rover lands on Mars crater Jezero-2 [differ]")]
        down.clear()
        asked = len(v.requests)
        _, again = build_in_process([*over, "build.overwrite=true"])
        retried = [r["messages"][0]["content"] for r in v.requests[asked:]]
    assert again["pending"] == 0 and again["stages"]["match"]["rejected"] == {"answers_differ": 1}
    # the call that failed, then the match it unblocked: nothing else was asked again
    assert len(retried) == 2 and "Jezero-2" in retried[0] and "Gold target: Jezero-2" in retried[1]
