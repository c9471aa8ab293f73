"""tests/browser.py: headless Chromium renders a static page (its JavaScript run), follows a
relative link and saves a screenshot. No Chromium: skipped, naming the install command (failed
under DATELINE_CI=1)."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest

from tests import browser as br


@pytest.fixture(scope="module")
def browser():
    with br.Browser(timeout=60) as b:
        yield b


@pytest.fixture
def pages(tmp_path: Path) -> Path:
    (tmp_path / "sub").mkdir()
    (tmp_path / "index.html").write_text("""<!doctype html>
<html><head><title>Run report</title></head><body>
<h1>Run report</h1>
<p id="status">static text</p>
<script>document.getElementById('status').textContent = 'Written by JavaScript: 22 episodes';</script>
<p style="display:none">hidden paragraph</p>
<p><a href="sub/details.html">Episode  details</a> | <a href="missing.html">Broken link</a></p>
</body></html>
""")
    (tmp_path / "sub" / "details.html").write_text("""<!doctype html>
<html><head><title>Details</title></head><body>
<h2>Episode details</h2><table><tr><th>task</th><th>score</th></tr><tr><td>t-07</td><td>0.83</td></tr></table>
<a href="../index.html">Back to the report</a>
</body></html>
""")
    return tmp_path


@pytest.mark.slow
def test_render_follow_screenshot(browser: br.Browser, pages: Path, tmp_path: Path) -> None:
    t0 = time.monotonic()
    page = browser.open(pages / "index.html")
    assert time.monotonic() - t0 < 30
    assert page.title == "Run report"
    assert page.url == (pages / "index.html").as_uri()
    assert "Written by JavaScript: 22 episodes" in page.text          # the script ran
    assert "static text" not in page.text
    assert "hidden paragraph" not in page.text                        # visible text only
    assert "document.getElementById" not in page.text
    assert page.errors == []
    assert page.links == [("Episode details", (pages / "sub" / "details.html").as_uri()),
                          ("Broken link", (pages / "missing.html").as_uri())]

    details = browser.click(page, "Episode details")                  # a relative link, clicked
    assert details.url == (pages / "sub" / "details.html").as_uri()
    assert "Episode details" in details.text and "t-07\t0.83" in details.text
    assert "Run report" in browser.follow(details, "Back to the report")

    with pytest.raises(LookupError, match="no link 'Nope'.*Episode details"):
        browser.follow(page, "Nope")
    with pytest.raises(br.BrowserError, match="failed to load"):
        browser.follow(page, "Broken link")

    png = browser.screenshot(page, tmp_path / "shots" / "index.png", width=1024, height=600)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (1024, 600)           # IHDR: width, height
    assert 1_000 < len(data) < 5_000_000

    full = browser.screenshot(page, tmp_path / "full.png", width=400, height=100, full_page=True)
    w, h = struct.unpack(">II", full.read_bytes()[16:24])
    assert w == 400 and h > 100


@pytest.mark.slow
def test_js_errors_and_wait_for(browser: br.Browser, tmp_path: Path) -> None:
    (tmp_path / "late.html").write_text("""<body><div id=out>loading</div><script>
setTimeout(() => { document.getElementById('out').textContent = 'filled in later'; }, 300);
undefinedFunction();
</script></body>""")
    page = browser.open(tmp_path / "late.html", wait_for="document.getElementById('out').textContent !== 'loading'")
    assert page.text.strip() == "filled in later"
    assert len(page.errors) == 1 and "undefinedFunction" in page.errors[0]


@pytest.mark.slow
def test_timeout_kills_the_browser(tmp_path: Path) -> None:
    (tmp_path / "p.html").write_text("<p>never true</p>")
    with br.Browser(timeout=60) as b:
        b.render(tmp_path / "p.html")
        b.timeout = 1
        with pytest.raises(br.BrowserTimeout, match="no answer in 1 s"):   # (on a busy machine it may
            # run out while loading, before the wait for 'false')
            b.open(tmp_path / "p.html", wait_for="false")
        assert b._p is None                                            # killed; the next call starts anew
        b.timeout = 60
        assert "never true" in b.render(tmp_path / "p.html")


@pytest.mark.slow
def test_one_shot_functions(pages: Path, tmp_path: Path) -> None:
    assert "Written by JavaScript" in br.render((pages / "index.html").as_uri())
    png = br.screenshot(pages / "index.html", tmp_path / "one.png", width=800, height=500)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_chromium_skips_or_fails_under_ci(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DATELINE_CHROMIUM", str(tmp_path / "no-such-chromium"))
    assert br.find_chromium() is None
    monkeypatch.setattr(br, "FULL", False)
    with pytest.raises(pytest.skip.Exception, match="DATELINE_CHROMIUM"):
        br.require_chromium()
    monkeypatch.setattr(br, "FULL", True)
    with pytest.raises(pytest.fail.Exception, match="DATELINE_CI=1"):
        br.Browser()
    monkeypatch.delenv("DATELINE_CHROMIUM")
    monkeypatch.setattr(br, "CANDIDATES", ("no-such-chromium-browser",))
    with pytest.raises(pytest.fail.Exception, match="apt-get install -y --no-install-recommends chromium"):
        br.require_chromium()
