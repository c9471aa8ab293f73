"""The one fake OpenAI-compatible chat server every test uses (loopback, scripted).

``POST /v1/chat/completions`` answers with whatever ``responder(messages, request)`` returns and
counts tokens crudely (whitespace words) so token accounting is exercised end to end. It stands
in for the model only; the real-model tests use vLLM. Three ways to run it:

* **in process** (:class:`FakeOpenAI`, a context manager on a thread): the client path, judges,
  whole drivers pointed at an external endpoint;
* **with injected faults** (``faults=Faults(...)``, or :func:`FaultServer`): each completion draws
  what happens from a seeded mix or a script (:data:`KINDS`: 429 with ``Retry-After``, 500, 503,
  a TCP reset, a timeout, a truncated or cut JSON body, no choices), counted per kind with arrival
  times, so a test checks retries, backoff and how each failure is named;
* **as a hosted replica's server process** (``tests/fake_vllm_server.py``, ``model.server_module``):
  the same server with vLLM's routes and failure modes (``engine=EngineBehaviour(...)``:
  ``/health``, ``/metrics``, ``/info``, the served names, ``VLLM_API_KEY``, a wedged or saturated
  engine, one long busy step, the liveness canary).
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
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# a reply: its text; (status, message) for an HTTP error; or {"text": ..., "finish_reason": ...}
# (e.g. "length": an answer cut at max_tokens)
Responder = Callable[[list[dict[str, Any]], dict[str, Any]], "str | tuple[int, str] | dict[str, str]"]

KINDS = ("ok", "429", "500", "503", "reset", "timeout", "truncated", "badjson", "empty")


class Faults:
    """What each completion request gets, drawn in arrival order: ``script`` first (a list of
    :data:`KINDS`), then ``random.Random(seed)`` over ``mix`` (kind -> weight). ``faults`` counts
    what was injected per kind, ``times`` when each request arrived (``time.monotonic()``)."""

    def __init__(self, *, seed: int = 0, mix: dict[str, float] | None = None, script: list[str] | None = None,
                 retry_after_s: float = 1.0, timeout_s: float = 5.0) -> None:
        self.rng = random.Random(seed)
        self.mix = mix or {"ok": 1.0}
        bad = (set(self.mix) | set(script or [])) - set(KINDS)
        if bad:
            raise ValueError(f"unknown fault kinds {sorted(bad)}; known: {KINDS}")
        self.script = list(script or [])
        self.retry_after_s = retry_after_s
        self.timeout_s = timeout_s
        self.faults: Counter[str] = Counter()
        self.times: list[float] = []
        self.kinds: list[str] = []
        self._lock = threading.Lock()

    def draw(self) -> str:
        with self._lock:
            kind = self.script.pop(0) if self.script else self.rng.choices(*zip(*self.mix.items()))[0]
            self.times.append(time.monotonic())
            self.kinds.append(kind)
            self.faults[kind] += 1
            return kind


@dataclass
class EngineBehaviour:
    """vLLM's routes and the failure modes a replica's lifecycle must handle
    (``tests/fake_vllm_server.py`` sets them from its flags)."""

    served: list[str]                       # the served model names: another name gets vLLM's 404
    info: dict[str, Any] = field(default_factory=dict)   # GET /info (pid, argv, ...)
    wedge_after: int = -1                   # after N completions every request hangs; /health answers
    blackhole_after: int = -1               # after N completions every request, /health too, hangs (a lost node)
    held_log: str = ""                      # a file that gets a line for each episode call the black hole holds
    health_delay_s: float = 0.0             # /health answers after this (a saturated server)
    busy: bool = False                      # the completion delay computes instead of sleeping
    canary: str = "answer"                  # "behind": the liveness canary waits for the long steps
    api_key: str = ""                       # as vLLM: /v1 routes need it, /health does not
    log: bool = True                        # one line per request on stdout (the replica's log)


class FakeOpenAI:
    def __init__(self, responder: Responder | None = None, delay_s: float = 0.0, port: int = 0,
                 models: list[dict[str, Any]] | None = None, *, host: str = "127.0.0.1",
                 faults: Faults | None = None, engine: EngineBehaviour | None = None) -> None:
        self.responder: Responder = responder or (lambda messages, request: "ok")
        # what GET /v1/models lists (vLLM's entries: id, root, max_model_len); None: no model list
        self.models = models
        self.delay_s = delay_s
        self.fault = faults
        self.engine = engine
        self.requests: list[dict[str, Any]] = []
        self.auth: list[str] = []          # each request's Authorization header
        self.gets: list[str] = []          # each GET's path, with its query
        self.inflight = 0
        self.max_inflight = 0
        # engine progress, as vLLM's /metrics shows it
        self.progress = {"running": 0, "prompt_tokens": 0, "generation_tokens": 0, "completions": 0, "steps": 0}
        self.wedged = threading.Event()
        self._lock = threading.Lock()
        handler = type("Handler", (_Handler,), {"srv": self,
                                                 "protocol_version": "HTTP/1.1" if faults else "HTTP/1.0"})
        ThreadingHTTPServer.allow_reuse_address = True     # a restarted server takes its old port at once
        ThreadingHTTPServer.daemon_threads = True
        self.server = ThreadingHTTPServer((host, port), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)   # shutdown() waits up to one poll interval (0.5 s by default)

    # the fault counters, for tests of retries
    @property
    def faults(self) -> Counter[str]:
        assert self.fault is not None, "a server without faults=Faults(...)"
        return self.fault.faults

    @property
    def mix(self) -> dict[str, float]:
        """The fault mix the next requests draw from; a test may change it mid-run."""
        assert self.fault is not None, "a server without faults=Faults(...)"
        return self.fault.mix

    @mix.setter
    def mix(self, value: dict[str, float]) -> None:
        assert self.fault is not None, "a server without faults=Faults(...)"
        bad = set(value) - set(KINDS)
        if bad:
            raise ValueError(f"unknown fault kinds {sorted(bad)}; known: {KINDS}")
        with self.fault._lock:
            self.fault.mix = dict(value)

    @property
    def times(self) -> list[float]:
        assert self.fault is not None, "a server without faults=Faults(...)"
        return self.fault.times

    @property
    def kinds(self) -> list[str]:
        assert self.fault is not None, "a server without faults=Faults(...)"
        return self.fault.kinds

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def serve_forever(self) -> None:
        """Serve on this thread until the process ends (the replica's server process)."""
        try:
            self.server.serve_forever()
        finally:
            self.server.server_close()

    def metrics_text(self) -> str:
        name = self.engine.served[0] if self.engine else "fake"
        with self._lock:
            p = dict(self.progress)
        return ("# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
                "# TYPE vllm:num_requests_running gauge\n"
                f'vllm:num_requests_running{{model_name="{name}"}} {p["running"]}\n'
                f'vllm:num_requests_waiting{{model_name="{name}"}} 0\n'
                f'vllm:prompt_tokens_total{{model_name="{name}"}} {p["prompt_tokens"]}\n'
                f'vllm:generation_tokens_total{{model_name="{name}"}} {p["generation_tokens"]}\n')


def _completion(model: str, text: str, prompt: int, completion: int, finish: str = "stop",
                choices: bool = True) -> dict[str, Any]:
    return {"id": f"fake-{time.time_ns()}", "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "finish_reason": finish, "message": {"role": "assistant", "content": text}}]
            if choices else [],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}}


class _Handler(BaseHTTPRequestHandler):
    srv: FakeOpenAI

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None, *, cut: bool = False,
              bad: bool = False, text: str | None = None) -> None:
        """``cut``: the body is sent half, with the whole length, then a reset; ``bad``: a body cut
        in the middle, complete as sent."""
        body = text.encode() if text is not None else json.dumps(payload).encode()
        if bad:
            body = body[: len(body) // 2]
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; version=0.0.4" if text is not None else "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body[: len(body) // 2] if cut else body)
        if cut:
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        if self.srv.engine and self.srv.engine.log and self.path != "/metrics":
            with self.srv._lock:
                print(f"{self.command} {self.path} {status}", flush=True)

    def _authorized(self) -> bool:
        key = self.srv.engine.api_key if self.srv.engine else ""
        if not key or not self.path.startswith("/v1") or self.headers.get("Authorization", "") == f"Bearer {key}":
            return True
        self._send(401, {"error": "Unauthorized"})
        return False

    def _blackholed(self) -> bool:
        eng = self.srv.engine
        return eng is not None and 0 <= eng.blackhole_after <= self.srv.progress["completions"]

    def do_GET(self) -> None:
        srv, eng, path = self.srv, self.srv.engine, self.path.split("?")[0].rstrip("/")
        srv.gets.append(self.path)
        if self._blackholed():
            threading.Event().wait()            # accepted, never answered
        if not self._authorized():
            return
        if path == "/health" and eng and eng.health_delay_s:
            time.sleep(eng.health_delay_s)
        if path.endswith("/models") and srv.models is not None:
            self._send(200, {"object": "list", "data": [{"object": "model", "owned_by": "vllm", **m}
                                                         for m in srv.models]})
        elif path.endswith("/models") and eng:
            self._send(200, {"object": "list", "data": [{"id": n, "object": "model"} for n in eng.served]})
        elif path == "/metrics":
            self._send(200, None, text=srv.metrics_text())
        elif path == "/info" and eng:
            self._send(200, eng.info)
        elif eng and path == "/health":
            self._send(200, {})                 # as vLLM: an empty body
        elif eng:
            self._send(404, {"object": "error", "message": f"no route {self.path}"})
        else:
            self._send(200, {"status": "ok"})

    def do_POST(self) -> None:
        srv, eng = self.srv, self.srv.engine
        n = int(self.headers.get("Content-Length", 0))
        raw = self.rfile.read(n)
        if self._blackholed():
            if eng and eng.held_log and not self.headers.get("X-Dateline-Canary"):
                with open(eng.held_log, "a") as f:  # the test counts the calls that had to move
                    f.write(f"held {self.path}\n")
            threading.Event().wait()            # accepted, never answered
        if not self._authorized():
            return
        try:
            req = json.loads(raw or b"{}")
        except json.JSONDecodeError as e:
            self._send(400, {"object": "error", "message": str(e), "type": "BadRequestError", "code": 400})
            return
        if eng and self.path != "/v1/chat/completions":
            self._send(404, {"object": "error", "message": f"no route {self.path}"})
            return
        if eng and req.get("model") not in eng.served:
            self._send(404, {"object": "error", "message": f"The model `{req.get('model')}` does not exist.",
                             "type": "NotFoundError", "code": 404})
            return
        with srv._lock:
            srv.progress["running"] += 1        # in the engine until answered (vLLM's /metrics)
        try:
            self._handle(req)
        finally:
            with srv._lock:
                srv.progress["running"] -= 1

    def _handle(self, req: dict[str, Any]) -> None:
        srv, eng = self.srv, self.srv.engine
        if eng:
            with srv._lock:
                if 0 <= eng.wedge_after <= srv.progress["completions"]:
                    srv.wedged.set()
            if srv.wedged.is_set():
                threading.Event().wait()        # a wedged engine never answers, canary included; /health does
            if self.headers.get("X-Dateline-Canary"):
                self._canary(req)
                return
        with srv._lock:
            srv.requests.append(req)
            srv.auth.append(self.headers.get("Authorization", ""))
        kind = srv.fault.draw() if srv.fault else "ok"
        if self._fault(kind):
            return
        self._answer(req, kind)

    def _fault(self, kind: str) -> bool:
        """Send an injected fault; True when the request is answered (or dropped) by it."""
        f = self.srv.fault
        if kind == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()
            return True
        if kind == "timeout" and f is not None:
            time.sleep(f.timeout_s)
        if kind in ("429", "500", "503") and f is not None:
            headers = {"Retry-After": f"{f.retry_after_s:g}"} if kind == "429" else {}
            self._send(int(kind), {"object": "error", "message": f"injected {kind}", "code": int(kind)}, headers)
            return True
        return False

    def _canary(self, req: dict[str, Any]) -> None:
        """A replica's liveness probe: no script, no log line; "behind" waits for the long steps."""
        srv = self.srv
        while srv.engine is not None and srv.engine.canary == "behind":
            with srv._lock:
                if not srv.progress["steps"]:
                    break
            time.sleep(0.05)
        with srv._lock:
            srv.progress["prompt_tokens"] += 1
            srv.progress["generation_tokens"] += 1
        body = json.dumps(dict(_completion(req["model"], "1", 1, 1, "length"), id="canary")).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _engine_step(self) -> None:
        """The completion's delay: a sleep, or one long step that computes (``busy``)."""
        srv, eng = self.srv, self.srv.engine
        with srv._lock:
            srv.progress["steps"] += 1
        try:
            if srv.delay_s and eng and eng.busy:
                end = time.monotonic() + srv.delay_s
                while time.monotonic() < end:
                    sum(i * i for i in range(10_000))
            elif srv.delay_s:
                time.sleep(srv.delay_s)
        finally:
            with srv._lock:
                srv.progress["steps"] -= 1

    def _answer(self, req: dict[str, Any], kind: str) -> None:
        srv = self.srv
        with srv._lock:
            srv.inflight += 1
            srv.max_inflight = max(srv.max_inflight, srv.inflight)
        try:
            self._engine_step()
            messages = req.get("messages") or []
            reply = srv.responder(messages, req)
        finally:
            with srv._lock:
                srv.inflight -= 1
        if isinstance(reply, tuple):      # (status, message): an HTTP error, as vLLM sends for a too-long prompt
            status, msg = reply
            self._send(status, {"object": "error", "message": msg, "type": "BadRequestError", "code": status})
            return
        text, finish = (reply["text"], reply.get("finish_reason", "stop")) if isinstance(reply, dict) else (reply, "stop")
        prompt = sum(len(str(m.get("content", "")).split()) for m in messages)
        # a hosted engine always generates a token (at least its end of sequence)
        completion = max(1, len(text.split())) if srv.engine else len(text.split())
        with srv._lock:
            srv.progress["completions"] += 1
            srv.progress["prompt_tokens"] += prompt
            srv.progress["generation_tokens"] += completion
        try:
            self._send(200, _completion(req.get("model", ""), text, prompt, completion, finish,
                                        choices=kind != "empty"),
                       cut=kind == "truncated", bad=kind == "badjson")
        except OSError:        # the client gave up (a timeout) and closed
            pass


def FaultServer(responder: Responder, *, seed: int = 0, mix: dict[str, float] | None = None,
                script: list[str] | None = None, retry_after_s: float = 1.0, timeout_s: float = 5.0) -> FakeOpenAI:
    """A :class:`FakeOpenAI` that injects faults (:class:`Faults`)."""
    return FakeOpenAI(responder, faults=Faults(seed=seed, mix=mix, script=script, retry_after_s=retry_after_s,
                                               timeout_s=timeout_s))

