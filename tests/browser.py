"""Headless Chromium for tests: open the project's static HTML pages (report pages), read their
rendered text (after their JavaScript ran), list and follow their links, save screenshots.

Chromium is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: JSON
messages ending in a NUL byte, commands on the browser's fd 3, replies and events on its fd 4),
so neither a websocket client, nor a TCP port, nor Node is needed: the standard library does it.

    from tests.browser import Browser

    with Browser() as b:                       # one Chromium, many pages; closed (killed) on exit
        page = b.open(tmp_path / "index.html")  # Page(url, title, text, links, errors)
        assert "Results" in page.text
        text = b.follow(page, "Details")        # clicks the link, returns the target's text
        b.screenshot(page, tmp_path / "shot.png", width=1280, height=800)

``render``, ``links``, ``follow`` and ``screenshot`` also exist as functions, each starting and
closing its own Chromium (about 0.3 s more per call).

Chromium is looked for at ``$DATELINE_CHROMIUM`` (a path or a name; when set, nothing else is
tried), ``/usr/bin/chromium``, then ``chromium`` and ``chromium-browser`` on PATH. Missing, the
test is skipped with the command that installs it (``bash scripts/setup.sh`` as root installs it
too); under ``DATELINE_CI=1`` it fails instead, like ``helpers.prepared_model_dir``.

Every call runs under a deadline (``timeout``, 60 s by default): past it, the browser's whole
process group is killed and ``BrowserTimeout`` raised; the next call starts a new browser.
"""

from __future__ import annotations

import base64
import errno
import fcntl
import json
import os
import select
import shutil
import signal
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import FULL

INSTALL = "apt-get install -y --no-install-recommends chromium"
CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser")
TIMEOUT = 60.0
WIDTH, HEIGHT = 1280, 800

# As root (no sandbox possible), headless, and quiet on the network: without the background
# networking/component/sync flags Chromium keeps dialling Google's services, which a closed
# network refuses. /dev/shm is 64 MB in a default container: shared memory goes to /tmp instead.
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--disable-extensions", "--no-default-browser-check",
    "--hide-scrollbars", "--mute-audio",
)


class BrowserError(RuntimeError):
    """The browser failed: it exited, a page did not load, the protocol answered an error."""


class BrowserTimeout(BrowserError, TimeoutError):
    """A browser call ran past its deadline (the browser was killed)."""


@dataclass
class Page:
    """A page as rendered: its final URL, title, visible text (``innerText``: what the reader
    sees, script and hidden elements left out), links as ``(text, absolute href)``, and the
    uncaught JavaScript exceptions thrown while it loaded."""
    url: str
    title: str
    text: str
    links: list[tuple[str, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def find_chromium() -> str | None:
    """Chromium's executable, or None."""
    env = os.environ.get("DATELINE_CHROMIUM")
    if env:
        return shutil.which(env)
    for name in CANDIDATES:
        if found := shutil.which(name):
            return found
    return None


def require_chromium() -> str:
    """Chromium's executable. Missing: the test is skipped, naming the install command; under
    ``DATELINE_CI=1`` it fails instead."""
    exe = find_chromium()
    if exe:
        return exe
    env = os.environ.get("DATELINE_CHROMIUM")
    if env:
        why = f"DATELINE_CHROMIUM={env!r} is not an executable Chromium"
    else:
        why = (f"Chromium is not installed (looked for {', '.join(CANDIDATES)} and $DATELINE_CHROMIUM): "
               f"install it with `{INSTALL}` as root (`bash scripts/setup.sh` does, when run as root)")
    if FULL:
        pytest.fail(why + " (DATELINE_CI=1: the browser tests may not skip)", pytrace=False)
    pytest.skip(why)


def to_url(target: Page | str | os.PathLike[str]) -> str:
    """A URL for a Page, a URL string (``file:``, ``http(s):``, ``about:``, ``data:``) or a local
    path (it must exist)."""
    if isinstance(target, Page):
        return target.url
    s = os.fspath(target)
    if isinstance(target, str) and s.split(":", 1)[0] in ("file", "http", "https", "about", "data"):
        return s
    p = Path(s).resolve()
    if not p.exists():
        raise FileNotFoundError(f"no such page: {p}")
    return p.as_uri()


class _Process:
    """The running browser: its process (leader of its own process group), our ends of the two
    pipes and its temporary folder (profile, log). ``kill`` is idempotent and also runs when the
    Browser is garbage-collected or the interpreter exits."""

    def __init__(self, exe: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="dl-chromium-"))
        self.log = self.dir / "chromium.log"
        cmd_r, self.cmd_w = os.pipe()
        self.out_r, out_w = os.pipe()
        # The browser reads fd 3 and writes fd 4: posix_spawn puts the pipes there (Popen passes
        # fds by their own numbers only). The copies sit at fd >= 10, so no move clobbers another,
        # and close on exec.
        a = fcntl.fcntl(cmd_r, fcntl.F_DUPFD_CLOEXEC, 10)
        b = fcntl.fcntl(out_w, fcntl.F_DUPFD_CLOEXEC, 10)
        for fd in (cmd_r, out_w):
            os.close(fd)
        env = {**os.environ, "XDG_CONFIG_HOME": str(self.dir), "XDG_CACHE_HOME": str(self.dir)}
        argv = [exe, *FLAGS, f"--user-data-dir={self.dir / 'profile'}", "--remote-debugging-pipe", "about:blank"]
        try:
            # setsid: the browser leads its own process group, which kill() ends as a whole.
            self.pid = os.posix_spawn(exe, argv, env, setsid=True, file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_OPEN, 1, str(self.log), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
                (os.POSIX_SPAWN_DUP2, 1, 2),
                (os.POSIX_SPAWN_DUP2, a, 3),
                (os.POSIX_SPAWN_DUP2, b, 4),
            ])
        except BaseException:
            for fd in (self.cmd_w, self.out_r):
                os.close(fd)
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        finally:
            os.close(a)
            os.close(b)
        os.set_blocking(self.cmd_w, False)
        self.killed = False

    def kill(self) -> None:
        if self.killed:
            return
        self.killed = True
        for fd in (self.cmd_w, self.out_r):
            try:
                os.close(fd)
            except OSError:
                pass
        # The whole group (zygote, renderers, GPU process...), while the leader is still unreaped
        # so that its id cannot have been reused.
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def exited(self, wait: float) -> bool:
        """Whether the leader exited within ``wait`` s (without reaping it)."""
        end = time.monotonic() + wait
        while True:
            try:
                if os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                    return True
            except ChildProcessError:
                return True
            if time.monotonic() >= end:
                return False
            time.sleep(0.02)

    def log_tail(self, n: int = 15) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        # Chromium's log is mostly D-Bus complaints (there is no bus here): leave those out.
        return "\n".join([ln for ln in lines if "dbus" not in ln.lower()][-n:])


class Browser:
    """One headless Chromium (started on first use), one tab. Use it as a context manager, or
    call ``close()``; every call is bounded by ``timeout`` seconds."""

    def __init__(self, executable: str | None = None, *, timeout: float = TIMEOUT,
                 width: int = WIDTH, height: int = HEIGHT) -> None:
        self.executable = executable or require_chromium()
        self.timeout = timeout
        self.width, self.height = width, height
        self._p: _Process | None = None
        self._finalizer: weakref.finalize[[], Browser] | None = None  # kills the browser if never closed
        self._session = ""
        self._id = 0
        self._buf = b""
        self._events: list[dict[str, Any]] = []

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the public calls ------------------------------------------------------------------

    def open(self, target: Page | str | os.PathLike[str], *, wait_for: str | None = None) -> Page:
        """Load a page (a path, a URL or a Page, loaded again) and read it once its ``load`` event
        fired and the scripts queued by then ran. ``wait_for``: a JavaScript expression polled
        until it is truthy, for pages that fill themselves in later."""
        with self._deadline() as deadline:
            mark = self._goto(to_url(target), deadline)
            return self._read(mark, deadline, wait_for)

    def render(self, target: Page | str | os.PathLike[str], *, wait_for: str | None = None) -> str:
        """The page's visible text, after its JavaScript ran."""
        return self.open(target, wait_for=wait_for).text

    def links(self, page: Page | str | os.PathLike[str]) -> list[tuple[str, str]]:
        """The page's links, ``(visible text, absolute href)``, in document order."""
        return page.links if isinstance(page, Page) else self.open(page).links

    def click(self, page: Page | str | os.PathLike[str], link_text: str, *,
              wait_for: str | None = None) -> Page:
        """Load ``page``, click its first link whose visible text is ``link_text`` (whitespace
        collapsed; ``target`` attributes ignored, so it opens in this tab) and return the page it
        leads to. No such link: LookupError, naming the links there are. A target that fails to
        load (a broken relative link): BrowserError."""
        with self._deadline() as deadline:
            self._goto(to_url(page), deadline)
            mark = len(self._events)
            found = self._eval("""(text => {
                const norm = s => (s || '').replace(/\\s+/g, ' ').trim();
                const all = Array.from(document.querySelectorAll('a[href]'));
                const a = all.find(a => norm(a.innerText || a.textContent) === norm(text));
                if (!a) return {links: all.map(a => norm(a.innerText || a.textContent))};
                const here = location.href.split('#')[0], there = a.href.split('#')[0];
                a.removeAttribute('target');
                a.click();
                return {href: a.href, same: here === there};
            })(%s)""" % json.dumps(link_text), deadline)  # noqa: UP031 (braces are JavaScript's)
            if "href" not in found:
                raise LookupError(f"no link {link_text!r} on {to_url(page)}; its links: {found['links']}")
            if not found["same"]:
                nav = self._wait(deadline, lambda e: e["method"] == "Page.frameNavigated"
                                 and not e["params"]["frame"].get("parentId"), start=mark)
                frame = nav["params"]["frame"]
                if frame["url"].startswith("chrome-error:"):
                    raise BrowserError(f"link {link_text!r} on {to_url(page)} -> {found['href']}: "
                                       "the page failed to load")
                self._wait_load(frame["loaderId"], deadline, start=mark)
            return self._read(mark, deadline, wait_for)

    def follow(self, page: Page | str | os.PathLike[str], link_text: str, *,
               wait_for: str | None = None) -> str:
        """The visible text of the page that ``page``'s link ``link_text`` leads to (see click)."""
        return self.click(page, link_text, wait_for=wait_for).text

    def screenshot(self, target: Page | str | os.PathLike[str], out_png: str | os.PathLike[str], *,
                   width: int | None = None, height: int | None = None, full_page: bool = False,
                   wait_for: str | None = None) -> Path:
        """Load the page in a ``width`` x ``height`` viewport (the browser's size by default) and
        save a PNG of it (of the whole page's height with ``full_page``). Returns the PNG's path."""
        out = Path(out_png)
        w, h = width or self.width, height or self.height
        with self._deadline() as deadline:
            self._ensure(deadline)
            self._viewport(w, h, deadline)
            try:
                mark = self._goto(to_url(target), deadline)
                self._read(mark, deadline, wait_for)
                if full_page:
                    full = self._eval("Math.ceil(document.documentElement.scrollHeight)", deadline)
                    self._viewport(w, max(h, int(full)), deadline)
                shot = self._send("Page.captureScreenshot", {"format": "png"}, deadline, session=True)
            finally:
                if self._p is not None:
                    self._viewport(self.width, self.height, deadline)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(base64.b64decode(shot["data"]))
        return out

    def close(self) -> None:
        """Close the browser: politely for 2 s, then its whole process group is killed."""
        p, self._p = self._p, None
        if p is None:
            return
        if self._finalizer is not None:
            self._finalizer.detach()
        try:
            self._send_raw(p, {"id": -1, "method": "Browser.close"}, time.monotonic() + 1)
            p.exited(2)
        except (BrowserError, OSError):
            pass
        p.kill()

    # -- the protocol ----------------------------------------------------------------------

    class _Deadline:
        def __init__(self, browser: Browser) -> None:
            self.b = browser

        def __enter__(self) -> float:
            return time.monotonic() + self.b.timeout

        def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
            if isinstance(exc, BrowserError):
                # A timed-out or broken browser is not reused; the next call starts a new one.
                # (A page that failed to load leaves the browser as it was: only its tab.)
                if isinstance(exc, BrowserTimeout) or self.b._p is None or self.b._p.exited(0):
                    self.b.close()

    def _deadline(self) -> Browser._Deadline:
        return Browser._Deadline(self)

    def _ensure(self, deadline: float) -> None:
        if self._p is None:
            self._start(deadline)

    def _start(self, deadline: float) -> None:
        self._p = _Process(self.executable)
        self._finalizer = weakref.finalize(self, self._p.kill)
        self._buf, self._events, self._id = b"", [], 0
        target = self._send("Target.createTarget", {"url": "about:blank"}, deadline)["targetId"]
        self._session = self._send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                   deadline)["sessionId"]
        for method in ("Page.enable", "Runtime.enable"):
            self._send(method, {}, deadline, session=True)
        self._send("Page.setLifecycleEventsEnabled", {"enabled": True}, deadline, session=True)
        self._viewport(self.width, self.height, deadline)

    def _viewport(self, width: int, height: int, deadline: float) -> None:
        self._send("Emulation.setDeviceMetricsOverride",
                   {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
                   deadline, session=True)

    def _goto(self, url: str, deadline: float) -> int:
        """Navigate the tab to ``url`` and wait for its load event; returns the event mark the
        navigation started at (for the page's errors)."""
        self._ensure(deadline)
        self._events.clear()
        r = self._send("Page.navigate", {"url": url}, deadline, session=True)
        if r.get("errorText"):
            raise BrowserError(f"{url}: {r['errorText']}")
        if r.get("loaderId"):                                     # not a same-document (#fragment) move
            self._wait_load(r["loaderId"], deadline)
        return 0

    def _wait_load(self, loader: str, deadline: float, start: int = 0) -> None:
        self._wait(deadline, lambda e: e["method"] == "Page.lifecycleEvent"
                   and e["params"]["name"] == "load" and e["params"]["loaderId"] == loader, start=start)

    def _read(self, mark: int, deadline: float, wait_for: str | None) -> Page:
        if wait_for is not None:
            while not self._eval(f"!!({wait_for})", deadline):
                if time.monotonic() + 0.05 >= deadline:
                    raise self._timeout(f"waiting for {wait_for!r}")
                time.sleep(0.05)
        # Let what the load event queued (timers of 0 ms, promise callbacks) run first.
        self._eval("new Promise(r => setTimeout(r, 0))", deadline)
        got = self._eval("""({
            url: document.URL, title: document.title,
            text: (document.body || document.documentElement).innerText,
            links: Array.from(document.querySelectorAll('a[href]'),
                              a => [(a.innerText || a.textContent || '').replace(/\\s+/g, ' ').trim(), a.href]),
        })""", deadline)
        if got["url"].startswith("chrome-error:"):
            raise BrowserError(f"the page failed to load: {got['url']}")
        errors = [(d.get("exception") or {}).get("description") or d.get("text", "")
                  for e in self._events[mark:] if e["method"] == "Runtime.exceptionThrown"
                  for d in [e["params"]["exceptionDetails"]]]
        return Page(got["url"], got["title"], got["text"], [tuple(x) for x in got["links"]], errors)

    def _eval(self, expression: str, deadline: float) -> Any:
        r = self._send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                            "awaitPromise": True}, deadline, session=True)
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise BrowserError(f"JavaScript failed: {(d.get('exception') or {}).get('description') or d['text']}")
        return r["result"].get("value")

    def _send(self, method: str, params: dict[str, Any], deadline: float, *, session: bool = False) -> Any:
        if self._p is None:
            raise BrowserError("the browser is closed")
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self._session
        self._send_raw(self._p, msg, deadline)
        reply = self._wait(deadline, lambda m: m.get("id") == msg["id"], what=method)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error'].get('message')}")
        return reply["result"]

    def _send_raw(self, p: _Process, msg: dict[str, Any], deadline: float) -> None:
        data = json.dumps(msg).encode() + b"\0"
        while data:
            if not select.select([], [p.cmd_w], [], max(0.0, deadline - time.monotonic()))[1]:
                raise self._timeout(f"sending {msg['method']}")
            try:
                data = data[os.write(p.cmd_w, data):]
            except BlockingIOError:
                continue
            except BrokenPipeError:
                raise self._exited() from None

    def _wait(self, deadline: float, match: Any, *, start: int = 0, what: str = "") -> dict[str, Any]:
        """The first message that ``match``es: a reply (consumed) or an event (kept, from index
        ``start`` of the events since the last navigation)."""
        for e in self._events[start:]:
            if match(e):
                return e
        assert self._p is not None
        while True:
            while b"\0" not in self._buf:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self._p.out_r], [], [], left)[0]:
                    raise self._timeout(what or "waiting for the page")
                try:
                    chunk = os.read(self._p.out_r, 1 << 20)
                except OSError as e:
                    if e.errno != errno.EINTR:
                        raise self._exited() from e
                    continue
                if not chunk:
                    raise self._exited()
                self._buf += chunk
            raw, self._buf = self._buf.split(b"\0", 1)
            m = json.loads(raw)
            if "id" not in m:
                self._events.append(m)
            if match(m):
                return m  # type: ignore[no-any-return]

    def _timeout(self, what: str) -> BrowserTimeout:
        return BrowserTimeout(f"Chromium: {what}: no answer in {self.timeout:g} s (browser killed)")

    def _exited(self) -> BrowserError:
        tail = self._p.log_tail() if self._p else ""
        return BrowserError("Chromium exited" + (f"; its log ends:\n{tail}" if tail else ""))


# -- one-shot functions: a browser each ---------------------------------------------------------

def render(target: str | os.PathLike[str], *, timeout: float = TIMEOUT, wait_for: str | None = None) -> str:
    with Browser(timeout=timeout) as b:
        return b.render(target, wait_for=wait_for)


def links(target: str | os.PathLike[str], *, timeout: float = TIMEOUT) -> list[tuple[str, str]]:
    with Browser(timeout=timeout) as b:
        return b.links(target)


def follow(target: str | os.PathLike[str], link_text: str, *, timeout: float = TIMEOUT) -> str:
    with Browser(timeout=timeout) as b:
        return b.follow(target, link_text)


def screenshot(target: str | os.PathLike[str], out_png: str | os.PathLike[str], width: int = WIDTH,
               height: int = HEIGHT, *, full_page: bool = False, timeout: float = TIMEOUT) -> Path:
    with Browser(timeout=timeout, width=width, height=height) as b:
        return b.screenshot(target, out_png, full_page=full_page)
