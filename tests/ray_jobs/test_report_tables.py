"""The report's tables in a browser: list.js (vendored in ray_jobs/outputs/report/static/, inlined into the
pages) sorts a table by the column whose header is clicked, its search keeps the rows holding the
words typed, and the score filter keeps the rows whose value in the chosen column lies in a range;
the episode index's status and error-kind selects filter through it too. Without JavaScript the
pages are plain tables with every row. The browser tests drive headless Chromium (tests/browser.py):
missing, they are skipped, and fail under DATELINE_CI=1."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from engine.benchmarks.newsagent import BENCHMARK as NEWS
from engine.storage import EpisodeStore
from ray_jobs.outputs.report import build, tables
from ray_jobs.outputs.report.episodes import write_pages
from ray_jobs.outputs.report.page import Page
from tests.browser import Browser
from tests.engine.scoring.test_pairwise import _episode as news_episode

STATIC = Path(tables.__file__).parent / "static"


def _run_dir(tmp_path: Path) -> Path:
    """cfgA: six scored episodes (search_f1 1, .667, .5, 1, .667, .5; edit_f1 0, 1, 0, 1, 0, 1), one
    error and one budget-stopped; cfgB: four scored episodes."""
    rows = []
    for i in range(6):
        r = news_episode(f"sample-0{i + 1}", "cfgA", f"text {i}", True)
        r.update(episode_id=f"a{i}", draft_ids=["h1"] if i % 2 else ["h2"], retrieved_ids=["h1", "h2", "h3"][: 1 + i % 3])
        rows.append(r)
    rows.append(dict(news_episode("sample-07", "cfgA", "", True, status="error"), episode_id="a6",
                     error="GenerationError: APIConnectionError: connection refused"))
    rows.append(dict(news_episode("sample-08", "cfgA", "", True, status="budget_exhausted"), episode_id="a7"))
    for i in range(4):
        rows.append(dict(news_episode(f"sample-0{i + 1}", "cfgB", f"text {i}", False), episode_id=f"b{i}",
                         agent=json.dumps({"mode": "1-step", "guided_json": False})))
    store = EpisodeStore(tmp_path / "run", NEWS.episode_fields)
    store.write_batch(rows, [])
    return store.root


def _rows(text: str, header: str) -> list[list[str]]:
    """The rows a reader sees under the table whose header line starts with ``header`` (cells
    split at tabs, as ``innerText`` writes a table)."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(header))
    out = []
    for ln in lines[start + 1:]:
        if "\t" not in ln:
            break
        out.append(ln.split("\t"))
    return out


def _after(browser, page, js: str):
    """``page`` loaded afresh, as it reads after ``js`` ran in it (clicks, typing)."""
    return browser.open(page, wait_for=f"(() => {{ {js}; return true; }})()")


def _type(selector: str, value: str) -> str:
    return (f"{{ const e = {selector}; e.value = {json.dumps(value)}; "
            f"e.dispatchEvent(new Event(e.tagName === 'SELECT' ? 'change' : 'input')); }}")


def _choose(selector: str, option_text: str) -> str:
    """Select the option of ``selector`` showing ``option_text``."""
    return (f"{{ const s = {selector}; s.value = [...s.options].find(o => o.text === {json.dumps(option_text)}).value; "
            "s.dispatchEvent(new Event('change')); }")


def test_report_tables_have_a_header_and_the_library_inlined(tmp_path):
    """Fast, no browser: a report table has its <thead> (what the script enhances), the page
    carries list.js inlined once, with its licence, and loads nothing from anywhere."""
    lib = (STATIC / "list.min.js").read_bytes()
    assert hashlib.sha256(lib).hexdigest() == tables.SHA256 and len(lib) < 100_000
    assert "MIT License" in (STATIC / "list.js.LICENSE").read_text()
    page = Page(tmp_path)
    page.table(["config", "score"], [["a", "0.5"], ["b", "1"]])
    page.markdown_table("| task | value |\n|---|---|\n| t1 | 2 |\n| t2 | 3 |")
    html = page.write_named("t", "tables").read_text()
    assert html.count("<table><thead><tr><th>config</th><th>score</th></tr></thead><tbody><tr><td>a</td>") == 1
    assert "<thead><tr><th>task</th><th>value</th></tr></thead>" in html
    assert html.count("<script") == 1 and tables.script() in html and "Jonny Str" in html
    assert not re.search(r"<script[^>]*\ssrc=|<link\b|https?://(?!listjs\.com|github\.com/nwoltman)", html), \
        "a page must load nothing from the network"
    assert "sourceMappingURL" not in html and not re.search(r"\son[a-z]+=", html)
    plain = Page(tmp_path)
    plain.para("no table")
    assert "<script" not in plain.write_named("p", "no tables").read_text()


@pytest.mark.slow
def test_episode_index_sorts_searches_and_filters_in_a_browser(tmp_path):
    build([str(_run_dir(tmp_path))], tmp_path / "rep", n_boot=20)
    [index] = [p for p in (tmp_path / "rep" / "episodes").glob("*/cfgA/index.html")]
    html = index.read_text()
    assert html.count('<tr class="ep"') == 8 and '<span id="shown">8</span> of 8 shown' in html
    head = "episode\ttask\tseed\tstatus"

    def ids(page):
        return [r[0] for r in _rows(page.text, head)]

    def column(page, name):
        lines = page.text.splitlines()
        i = next(ln for ln in lines if ln.startswith(head)).split("\t").index(name)
        return [r[i] for r in _rows(page.text, head)]

    with Browser() as b:
        page = b.open(index)
        assert page.errors == []
        assert ids(page) == [f"a{i}" for i in range(8)] and "8 of 8 shown" in page.text
        th = "document.querySelectorAll('#episodes thead th')"
        f1 = f"[...{th}].find(t => t.textContent === 'search_f1')"
        # sorting: a click on a header sorts by it, numerically (blanks last), a second click the other way
        up = _after(b, index, f"{f1}.click()")
        assert column(up, "search_f1") == ["0.5", "0.5", "0.667", "0.667", "1", "1", "", ""]
        assert ids(up)[:2] == ["a2", "a5"]
        down = _after(b, index, f"{f1}.click(); {f1}.click()")
        assert column(down, "search_f1") == ["1", "1", "0.667", "0.667", "0.5", "0.5", "", ""]
        task = _after(b, index, f"{th}[1].click(); {th}[1].click()")
        assert column(task, "task") == [f"sample-0{i}" for i in range(8, 0, -1)]
        # the search: every word typed, in any cell ("-" and "." are plain characters)
        one = _after(b, index, _type("document.querySelector('#filters .dl-q')", "sample-03"))
        assert ids(one) == ["a2"] and "1 of 8 shown" in one.text
        two = _after(b, index, _type("document.querySelector('#filters .dl-q')", "terminate 0.667"))
        assert ids(two) == ["a1", "a4"]
        after_sort = _after(b, index, f"{th}[1].click(); {th}[1].click();"
                            + _type("document.querySelector('#filters .dl-q')", "sample-03"))
        assert ids(after_sort) == ["a2"]
        # the header keeps its mark (an arrow, and aria-sort) through a search
        marked = _after(b, index, f"{th}[1].click(); {th}[1].click();"
                        + _type("document.querySelector('#filters .dl-q')", "sample")
                        + f"document.title = {th}[1].getAttribute('aria-sort') + ' ' + {th}[1].className")
        assert marked.title == "descending dl-sort desc"
        none = _after(b, index, _type("document.querySelector('#filters .dl-q')", "no-such-episode"))
        assert ids(none) == [] and "0 of 8 shown" in none.text
        # the score filter: a metric, from / to
        edit = "document.querySelector('#filters .dl-col')"
        lo, hi = "document.querySelector('#filters .dl-lo')", "document.querySelector('#filters .dl-hi')"
        high = _after(b, index, _choose(edit, "edit_f1") + _type(lo, "0.5"))
        assert ids(high) == ["a1", "a3", "a5"] and "3 of 8 shown" in high.text
        low = _after(b, index, _type(hi, "0.6"))                  # search_f1, the first metric, at most 0.6
        assert ids(low) == ["a2", "a5"]
        both = _after(b, index, _choose(edit, "edit_f1") + _type(lo, "0.5") + _type(hi, "0.5"))
        assert ids(both) == []
        # ... with the search and a sort at once
        mixed = _after(b, index, _choose(edit, "edit_f1") + _type(lo, "1")
                       + _type("document.querySelector('#filters .dl-q')", "sample-0") + f"{th}[1].click(); {th}[1].click()")
        assert ids(mixed) == ["a5", "a3", "a1"]
        # the status and error-kind selects
        err = _after(b, index, _type("document.getElementById('status')", "error"))
        assert ids(err) == ["a6"] and "1 of 8 shown" in err.text
        kind = _after(b, index, _type("document.getElementById('kind')", "budget_exhausted"))
        assert ids(kind) == ["a7"]
        assert _after(b, index, _type("document.getElementById('status')", "")).text.count("\tsample-0") == 8
        # the rows still link to their episodes
        assert "Conversation" in b.click(up, "a2").text
        # an index of one episode filters too
        store = EpisodeStore(tmp_path / "run", NEWS.episode_fields)
        href, n = write_pages(tmp_path / "one", store, NEWS, "cfgB", "B", limit=1, root=store.root)
        single = tmp_path / "one" / href
        assert n == 1 and "1 of 1 shown" in b.open(single).text
        assert "0 of 1 shown" in _after(b, single, _type("document.getElementById('episodes-from')", "2")).text
        assert "1 of 1 shown" in _after(b, single, _type("document.getElementById('episodes-search')", "b0")).text


@pytest.mark.slow
def test_report_configuration_table_sorts_searches_and_filters_in_a_browser(tmp_path):
    path = build([str(_run_dir(tmp_path))], tmp_path / "rep", n_boot=20)
    head = "configuration\tconfig hash\tplanned"
    find = ("[...document.querySelectorAll('table')].find(t => t.tHead && "
            "t.tHead.textContent.includes('config hash') && t.tHead.textContent.includes('transcripts'))")
    tools = f"{find}.previousElementSibling"

    def labels(page):
        return [r[0] for r in _rows(page.text, head)]

    with Browser() as b:
        page = b.open(path)
        assert page.errors == []
        assert labels(page) == ["qwen (guided_json=False)", "qwen (guided_json=True)"]
        assert "2 of 2 shown" in page.text
        desc = _after(b, path, f"{find}.tHead.rows[0].cells[0].click(); {find}.tHead.rows[0].cells[0].click()")
        assert labels(desc) == ["qwen (guided_json=True)", "qwen (guided_json=False)"]
        planned = _after(b, path, f"{find}.tHead.rows[0].cells[2].click()")           # 4 before 8
        assert labels(planned) == ["qwen (guided_json=False)", "qwen (guided_json=True)"]
        found = _after(b, path, _type(f"{tools}.querySelector('.dl-q')", "guided_json=true"))
        assert labels(found) == ["qwen (guided_json=True)"] and "1 of 2 shown" in found.text
        errors = _after(b, path, _choose(f"{tools}.querySelector('.dl-col')", "error")
                        + _type(f"{tools}.querySelector('.dl-lo')", "1"))
        assert labels(errors) == ["qwen (guided_json=True)"]
        few = _after(b, path, _choose(f"{tools}.querySelector('.dl-col')", "planned")
                     + _type(f"{tools}.querySelector('.dl-hi')", "5"))
        assert labels(few) == ["qwen (guided_json=False)"]
        # the link in a row still opens its configuration's episodes
        assert "8 of 8 shown" in b.click(page, "8 episodes").text


@pytest.mark.slow
def test_report_pages_are_plain_tables_without_javascript(tmp_path):
    """A page with its one script left out (as with JavaScript disabled) shows every row, and no
    control that would do nothing."""
    path = build([str(_run_dir(tmp_path))], tmp_path / "rep", n_boot=20)
    [index] = [p for p in (tmp_path / "rep" / "episodes").glob("*/cfgA/index.html")]
    with Browser() as b:
        for page, header, n in ((index, "episode\ttask\tseed", 8), (path, "configuration\tconfig hash", 2)):
            html = page.read_text()
            assert html.count("<script") == 1 and tables.script() in html
            bare = page.with_name("bare-" + page.name)
            bare.write_text(html.replace(tables.script(), ""))
            text = b.open(bare).text
            assert len(_rows(text, header)) == n
            assert "\nany\n" not in text and " from  to " not in text and " shown" not in text.replace("8 of 8 shown", "")
            with_js = b.open(page).text
            assert "\nany\n" in with_js or page == path
            assert " from  to " in with_js
