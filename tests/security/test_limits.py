"""Limits that hold against a hostile model or endpoint, measured on the real parts (no Ray):

* an endpoint that drips one byte a second fails each call within ``request_timeout_s`` + 1 s
  (the HTTP client's timeout is per read; the call has a deadline of its own);
* a catastrophically backtracking regular expression costs the grep tool under a second;
* 300 MB of snippet output raise the worker's peak memory by less than 50 MB.

These are bounds a deadline or a cap must keep, not speed targets: what they cost is printed by
``perf/sandbox_limits.py``.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time

import pytest

from engine.llm import ChatClient, Endpoint, GenerationError, SamplingParams
from tests.helpers import REPO


class DripServer:
    """Answers every request with headers, then one byte of body a second, forever."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        try:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
            while not self.stop:
                time.sleep(1.0)
                conn.sendall(b" ")
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.stop = True
        self.sock.close()


@pytest.mark.slow
def test_a_dripping_endpoint_fails_each_call_within_its_timeout():
    srv = DripServer()
    try:
        async def go() -> float:
            c = ChatClient(Endpoint(f"http://127.0.0.1:{srv.port}/v1", "m"), SamplingParams(timeout_s=2.0, max_retries=0))
            t0 = time.monotonic()
            with pytest.raises(GenerationError, match="no complete answer within request_timeout_s=2"):
                await c.chat([{"role": "user", "content": "hi"}], 8)
            took = time.monotonic() - t0
            await c.close()
            return took
        took = asyncio.run(go())
    finally:
        srv.close()
    assert took < 2.0 + 1.0, took


@pytest.mark.slow
def test_a_regex_bomb_costs_the_grep_tool_under_a_second(tmp_path):
    from engine.benchmarks.analyst.generation import _observation
    from engine.sandbox import Limits, Sandbox

    box = Sandbox(tmp_path / "episode", Limits(timeout_s=5))
    box.write_text("sources/a.txt", ("a" * 30 + "b\n") * 50)
    for pattern in ("(a+)+$", "(a|aa)+$", "(x+x+)+y", "(.*a){20}"):
        # what a bomb costs is CPU (the pattern's budget, GREP_BUDGET_S = 0.5 s); the wall clock of a
        # loaded machine adds waiting for a core (1.17 s once under two test runs on 2 cores)
        t0, c0 = time.monotonic(), time.process_time()
        obs, ok = _observation(box, {"tool": "grep", "pattern": pattern, "path": "sources"}, 4000)
        assert time.process_time() - c0 < 1.0 and time.monotonic() - t0 < 5.0, (pattern, obs)


@pytest.mark.slow
def test_300_mb_of_output_raise_the_workers_memory_by_under_50_mb(tmp_path):
    code = f"""
import resource, sys
sys.path.insert(0, {str(REPO)!r})
from engine.sandbox import Limits, Sandbox
box = Sandbox({str(tmp_path / 'episode')!r}, Limits(timeout_s=60))
box.run_python("print(1)")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
res = box.run_python("import sys\\nfor i in range(100_000):\\n sys.stdout.write('x' * 3000 + '\\\\n')")
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(res.output_bytes["stdout"], before, after)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    printed, before, after = map(int, out.stdout.split())
    assert printed == 300_100_000
    assert (after - before) * 1024 < 50 * 1024 * 1024, (before, after)


@pytest.mark.slow
def test_reading_three_lines_of_a_64_mb_file_costs_the_worker_under_16_mb(tmp_path):
    """The ``read`` tool streams the file and keeps the lines it returns (it loaded and split
    the whole file: +1.4 GB for 64 MB of short lines)."""
    code = f"""
import resource, sys
sys.path.insert(0, {str(REPO)!r})
from engine.benchmarks.analyst.generation import _observation
from engine.sandbox import Limits, Sandbox
box = Sandbox({str(tmp_path / 'episode')!r}, Limits(timeout_s=60))
with open({str(tmp_path / 'episode' / 'big.txt')!r}, 'w') as f:
    for _ in range(64):
        f.write('y\\n' * (1 << 19))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
obs, ok = _observation(box, {{"tool": "read", "path": "big.txt", "start": 5, "end": 7}}, 4000)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
assert ok and obs.startswith("big.txt lines 5-7 of 33554432"), obs[:200]
print(before, after)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    before, after = map(int, out.stdout.split())
    assert (after - before) * 1024 < 16 * 1024 * 1024, (before, after)
