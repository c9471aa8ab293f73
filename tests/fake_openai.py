"""A scripted OpenAI-compatible chat server on loopback, for unit tests of the client path.

It answers ``/v1/chat/completions`` with whatever ``responder(messages, request)`` returns, and
counts tokens crudely (whitespace words) so token accounting is exercised end to end. It is a
stand-in for the model only; the real-model tests use vLLM.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# a reply: its text; (status, message) for an HTTP error; or {"text": ..., "finish_reason": ...}
# (e.g. "length": an answer cut at max_tokens)
Responder = Callable[[list[dict[str, Any]], dict[str, Any]], "str | tuple[int, str] | dict[str, str]"]


class FakeOpenAI:
    def __init__(self, responder: Responder, delay_s: float = 0.0, port: int = 0,
                 models: list[dict[str, Any]] | None = None) -> None:
        self.responder = responder
        # what GET /v1/models lists (vLLM's entries: id, root, max_model_len); None: no model list
        self.models = models
        self.delay_s = delay_s
        self.requests: list[dict[str, Any]] = []
        self.auth: list[str] = []          # each request's Authorization header
        self.gets: list[str] = []          # each GET's path, with its query
        self.inflight = 0
        self.max_inflight = 0
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                body = b'{"status": "ok"}'
                outer.gets.append(self.path)
                if outer.models is not None and self.path.split("?")[0].rstrip("/").endswith("/models"):
                    body = json.dumps({"object": "list", "data": [{"object": "model", "owned_by": "vllm", **m}
                                                                   for m in outer.models]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", 0))
                req = json.loads(self.rfile.read(n))
                with outer._lock:
                    outer.requests.append(req)
                    outer.auth.append(self.headers.get("Authorization", ""))
                    outer.inflight += 1
                    outer.max_inflight = max(outer.max_inflight, outer.inflight)
                try:
                    if outer.delay_s:
                        time.sleep(outer.delay_s)
                    text = outer.responder(req["messages"], req)
                finally:
                    with outer._lock:
                        outer.inflight -= 1
                if isinstance(text, tuple):      # (status, message): an HTTP error, as vLLM sends for a too-long prompt
                    status, msg = text
                    err = json.dumps({"object": "error", "message": msg, "type": "BadRequestError",
                                      "code": status}).encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(err)))
                    self.end_headers()
                    self.wfile.write(err)
                    return
                finish = "stop"
                if isinstance(text, dict):
                    text, finish = text["text"], text.get("finish_reason", "stop")
                prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in req["messages"])
                body = json.dumps({
                    "id": "fake", "object": "chat.completion", "created": int(time.time()), "model": req["model"],
                    "choices": [{"index": 0, "finish_reason": finish,
                                 "message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(text.split()),
                              "total_tokens": prompt_tokens + len(text.split())},
                }).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        ThreadingHTTPServer.allow_reuse_address = True     # a restarted server takes its old port at once
        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)   # shutdown() waits up to one poll interval (0.5 s by default)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
