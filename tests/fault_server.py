"""A fault-injecting OpenAI-compatible chat server on loopback (issue 12, part 2).

Each ``POST /v1/chat/completions`` draws what happens from a seeded mix (``random.Random(seed)``,
in arrival order) or from an explicit ``script`` (a list consumed first):

* ``ok``: a normal answer from ``responder(messages, request)`` (as :class:`tests.fake_openai.FakeOpenAI`);
* ``429``: rate limited, with ``Retry-After`` (seconds, ``retry_after_s``);
* ``500``, ``503``: server errors (JSON error body);
* ``reset``: the connection is closed with a TCP reset before any response;
* ``timeout``: the answer comes after ``timeout_s`` (longer than the client waits);
* ``truncated``: a 200 whose JSON body is cut in the middle (``Content-Length`` of the whole);
* ``badjson``: a 200 whose body is JSON cut in the middle, complete as sent (``Content-Length`` of the cut);
* ``empty``: a 200 with ``"choices": []``.

``faults`` counts what was injected per kind, ``requests`` every request body, ``times`` when
each arrived (``time.monotonic()``), so a test can check backoff and ``Retry-After``.
"""

from __future__ import annotations

import json
import random
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

KINDS = ("ok", "429", "500", "503", "reset", "timeout", "truncated", "badjson", "empty")


class FaultServer:
    def __init__(self, responder: Callable[[list[dict[str, Any]], dict[str, Any]], str], *, seed: int = 0,
                 mix: dict[str, float] | None = None, script: list[str] | None = None, retry_after_s: float = 1.0,
                 timeout_s: float = 5.0) -> None:
        self.responder = responder
        self.rng = random.Random(seed)
        self.mix = mix or {"ok": 1.0}
        bad = set(self.mix) - set(KINDS)
        if bad:
            raise ValueError(f"unknown fault kinds {sorted(bad)}; known: {KINDS}")
        self.script = list(script or [])
        self.retry_after_s = retry_after_s
        self.timeout_s = timeout_s
        self.faults: Counter[str] = Counter()
        self.requests: list[dict[str, Any]] = []
        self.times: list[float] = []
        self.kinds: list[str] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None,
                      cut: bool = False, bad: bool = False) -> None:
                body = json.dumps(payload).encode()
                if bad:
                    body = body[: len(body) // 2]
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body[: len(body) // 2] if cut else body)
                if cut:
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)

            def do_GET(self) -> None:
                self._json(200, {"status": "ok"})

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", 0))
                req = json.loads(self.rfile.read(n) or b"{}")
                kind = outer.draw()
                with outer._lock:
                    outer.requests.append(req)
                    outer.times.append(time.monotonic())
                    outer.kinds.append(kind)
                    outer.faults[kind] += 1
                if kind == "reset":
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True
                    self.connection.close()
                    return
                if kind == "timeout":
                    time.sleep(outer.timeout_s)
                if kind in ("429", "500", "503"):
                    headers = {"Retry-After": f"{outer.retry_after_s:g}"} if kind == "429" else {}
                    self._json(int(kind), {"object": "error", "message": f"injected {kind}", "code": int(kind)},
                               headers)
                    return
                text = outer.responder(req.get("messages") or [], req)
                prompt = sum(len(str(m.get("content", "")).split()) for m in req.get("messages") or [])
                choices = [] if kind == "empty" else [
                    {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}]
                try:
                    self._json(200, {"id": "fault", "object": "chat.completion", "created": int(time.time()),
                                     "model": req.get("model", ""), "choices": choices,
                                     "usage": {"prompt_tokens": prompt, "completion_tokens": len(text.split()),
                                               "total_tokens": prompt + len(text.split())}},
                               cut=kind == "truncated", bad=kind == "badjson")
                except OSError:        # the client gave up (timeout) and closed
                    pass

        ThreadingHTTPServer.daemon_threads = True
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)   # shutdown() waits up to one poll interval (0.5 s by default)

    def draw(self) -> str:
        with self._lock:
            if self.script:
                return self.script.pop(0)
            kinds, weights = zip(*self.mix.items())
            return self.rng.choices(kinds, weights)[0]

    def __enter__(self) -> FaultServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
