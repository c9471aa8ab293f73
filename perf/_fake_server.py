"""A fake OpenAI-compatible chat server (aiohttp, loopback) for the harness benchmarks.

It answers ``POST /v1/chat/completions`` with a *valid* action for the two agent benchmarks, so
episodes run their full course (tool calls included) without a model:

* **newsagent** (1-step and 2-step): search (the task's first firsthand sentence, dated on the
  release date; after an empty result the title, then further firsthand sentences, at most 4
  searches), then insert the first retrieved object, then terminate; the rephrase turn
  returns the firsthand sentences (traceable). The state is read from the observation
  (``Operations used``, the retrieved-content and draft sections), as a model would.
* **livenews**: Search (the question), then Click the first result URL, then Finish; the turn is
  the number of assistant messages so far.

Every reply carries a short reasoning text padded to about the length a real model writes, and
``usage`` counts tokens as characters / 4 (close to a BPE tokenizer on English text).

Latency (``--latency model``; ``--latency instant`` answers at once, or after a fixed
``--delay-ms``) is a small simulation of one
vLLM engine with continuous batching, a fluid model with these parts:

* **Admission.** At most ``--max-batch`` requests run at once (vLLM's ``max_num_seqs``); the
  others wait in FIFO order.
* **Prefill.** An admitted request's prompt tokens not in the prefix cache cost
  ``uncached / --prefill-tps`` seconds of engine time; prefills are serialized and stall the
  decode of running requests meanwhile (engine time is shared; conservative for batching).
* **Prefix cache.** Prompts are hashed in 64-character blocks (chained, like vLLM's 16-token
  blocks); the leading blocks seen before are cached. LRU, ``--prefix-cache-tokens`` in all
  (0: off). Every turn of an episode shares the system prompt and task inputs.
* **Decode.** With ``n`` requests running, each decodes at ``r(n) = single * n**a / n`` tokens/s,
  i.e. the aggregate is ``single * n**a`` with ``a = log(agg/single) / log(batch_ref)``: 8 tok/s
  for one request rising to 22 tok/s in all at batch 8 by default (``--decode-tps``,
  ``--decode-agg-tps``, ``--decode-batch-ref``), so a request's decode time grows sub-linearly
  (``n**(1-a)``) with the batch. Progress is integrated between events (arrival, completion).
* ``--scale`` divides every latency (quick runs); reported token counts do not change.

Run it on its own (``python perf/_fake_server.py --port 8000 --latency model``) or through
:class:`FakeServer`, which starts it as a subprocess and stops it on exit. ``GET /stats``
returns counters, ``POST /reset`` clears them and the prefix cache.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import logging
import math
import os
import re
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("fake_server")

REPO = Path(__file__).resolve().parents[1]

# How the replies look (kept in sync with engine/benchmarks/*/prompts.py by the benchmarks' own
# parsers: a reply that does not parse ends the episode, which the benchmarks count).
NEWS_SYSTEM_PREFIX = "You are a professional news reporter agent"
NEWS_REPHRASE_PREFIX = "You are a professional news editor"
LIVE_SYSTEM_PREFIX = "# Actions you can take"
_RETRIEVED = re.compile(r'^- \{"text": "(.*?)"\} \(dated \d{4}-\d{2}-\d{2}\)$', re.M)
_URL = re.compile(r"^URL: (\S+)", re.M)
_FILLER = ("I should keep the draft grounded in what the observations show, so I will look at the "
           "retrieved material and the operation message before choosing the next step and keep "
           "the plan short and specific to the task at hand").split()


def _filler(words: int) -> str:
    return " ".join(_FILLER[i % len(_FILLER)] for i in range(words))


def _section(text: str, header: str) -> str:
    """The body of ``## header`` in a newsagent observation (up to the next blank line)."""
    start = text.find(header)
    if start < 0:
        return ""
    body = text[start + len(header):].lstrip("\n")
    end = body.find("\n\n")
    return body if end < 0 else body[:end]


def _field(text: str, prefix: str) -> str:
    for line in text.splitlines():
        if line.startswith(prefix):
            return line[len(prefix):].strip()
    return ""


def _firsthand(text: str) -> list[str]:
    body = _section(text, "Firsthand information:")
    return [ln[2:] for ln in body.splitlines() if ln.startswith("- ")]


def news_action(obs: str, thought_words: int) -> dict[str, Any]:
    """search -> insert (the first retrieved object) -> terminate. A search that returns nothing
    is followed by another (the title, then the next firsthand sentences; at most 4 in all)."""
    thought = _filler(thought_words)
    m = re.search(r"Operations used: (\d+) of", obs)
    ops = int(m.group(1)) if m else 0
    draft = _section(obs, "## Draft state").strip()
    retrieved = _RETRIEVED.findall(_section(obs, "## Retrieved content"))
    if draft == "(none)" and retrieved:
        return {"Thought": thought, "Action": "insert", "obj": {"text": retrieved[0]}}
    firsthand = [f for f in _firsthand(obs) if not f.startswith("[")]
    queries = (firsthand[:1] + [_field(obs, "Title:")] + firsthand[1:])[:4]
    if draft == "(none)" and ops < len(queries):
        y, mo, d = (_field(obs, "Release date:") or "2030-01-01").split("-")
        return {"Thought": thought, "Action": "search", "query": queries[ops], "year": y, "month": mo, "day": d}
    return {"Thought": thought, "Action": "terminate"}


def respond(messages: list[dict[str, Any]], thought_words: int = 24) -> tuple[str, str]:
    """(reply, kind) for one chat request; kind names the turn for the stats ("unknown" when the
    request is from neither benchmark)."""
    system = str(messages[0].get("content", "")) if messages else ""
    last = str(messages[-1].get("content", "")) if messages else ""
    if system.startswith(NEWS_REPHRASE_PREFIX):
        firsthand = [f for f in _firsthand(last) if not f.startswith("[")]
        return " ".join(firsthand) or "The council met.", "news_rephrase"
    if system.startswith(NEWS_SYSTEM_PREFIX):
        if last.startswith("Give the search"):       # 2-step arguments turns
            obs = str(messages[1].get("content", ""))
            a = news_action(obs, 0)
            return json.dumps({k: a[k] for k in ("query", "year", "month", "day")}), "news_args"
        if last.startswith("Give the object to insert"):
            a = news_action(str(messages[1].get("content", "")), 0)
            return json.dumps({"obj": a.get("obj", {"text": ""})}), "news_args"
        a = news_action(last, thought_words)
        if "only \"Thought\" and \"Action\"" in last:  # 2-step choose turn
            a = {"Thought": a["Thought"], "Action": a["Action"]}
        return json.dumps(a), "news_" + a["Action"]
    if system.startswith(LIVE_SYSTEM_PREFIX):
        turn = sum(m.get("role") == "assistant" for m in messages)
        reasoning = "Let me think step by step. " + _filler(2 * thought_words) + "."
        if turn == 0:
            lines = last.splitlines()
            q = lines[1] if len(lines) > 1 and lines[0].startswith("# Question") else last
            return f"{reasoning}\n```action\ntype: Search\n{q[:200]}\n```", "live_search"
        urls = _URL.findall(last)
        if turn == 1 and urls:
            return f"{reasoning}\n```action\ntype: Click\n{urls[0]}\n```", "live_click"
        title = _field(last, "Title:") or "unknown"
        answer = " ".join(title.split()[:4]) or "unknown"
        return f"{reasoning}\n```action\ntype: Finish\n{answer}\n```", "live_finish"
    return "```action\ntype: Finish\nunknown\n```", "unknown"


def count_tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4)


# -- the latency model ------------------------------------------------------------------------
@dataclass
class LatencyModel:
    prefill_tps: float = 430.0
    decode_tps: float = 8.0            # one request alone
    decode_agg_tps: float = 22.0       # all requests together at decode_batch_ref
    decode_batch_ref: int = 8
    max_batch: int = 8
    prefix_cache_tokens: int = 87_000  # ~1 GiB of KV for a 0.5B Qwen (12 KiB/token)
    scale: float = 1.0

    @property
    def alpha(self) -> float:
        if self.decode_batch_ref <= 1:
            return 1.0
        return math.log(self.decode_agg_tps / self.decode_tps) / math.log(self.decode_batch_ref)

    def per_request_tps(self, n: int) -> float:
        return self.decode_tps * n ** self.alpha / n if n > 0 else self.decode_tps

    def aggregate_tps(self, n: int) -> float:
        return self.decode_tps * n ** self.alpha


class PrefixCache:
    """LRU over chained 64-character block hashes (~16 tokens, vLLM's block size)."""

    BLOCK = 64

    def __init__(self, capacity_tokens: int) -> None:
        self.capacity_blocks = capacity_tokens * 4 // self.BLOCK
        self.blocks: collections.OrderedDict[int, None] = collections.OrderedDict()

    def lookup_insert(self, text: str) -> int:
        """Characters of ``text`` already cached (leading whole blocks); caches all its blocks."""
        if self.capacity_blocks <= 0:
            return 0
        h, cached, hit = 0, 0, True
        for i in range(0, len(text) - self.BLOCK + 1, self.BLOCK):
            h = hash((h, text[i: i + self.BLOCK]))
            if hit and h in self.blocks:
                cached += self.BLOCK
                self.blocks.move_to_end(h)
            else:
                hit = False
                self.blocks[h] = None
        while len(self.blocks) > self.capacity_blocks:
            self.blocks.popitem(last=False)
        return cached

    def clear(self) -> None:
        self.blocks.clear()


@dataclass
class _Req:
    prefill_tokens: float
    remaining: float                       # decode tokens left
    done: asyncio.Future[None]
    t_arrive: float = 0.0


@dataclass
class Engine:
    """One simulated engine (see the module docstring)."""
    model: LatencyModel
    waiting: collections.deque[_Req] = field(default_factory=collections.deque)
    running: list[_Req] = field(default_factory=list)
    busy_s: float = 0.0
    max_running: int = 0
    # (start, end, requests in the batch): the batch's occupancy over time, for batch_occupancy()
    segments: list[tuple[float, float, int]] = field(default_factory=list)
    _wake: asyncio.Event | None = None
    _task: asyncio.Task[None] | None = None

    def submit(self, prefill_tokens: int, decode_tokens: int) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._run())
        r = _Req(float(prefill_tokens), float(decode_tokens), loop.create_future(), loop.time())
        self.waiting.append(r)
        assert self._wake is not None
        self._wake.set()
        return r.done

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        m = self.model
        assert self._wake is not None
        while True:
            if not self.waiting and not self.running:
                self._wake.clear()
                await self._wake.wait()
            admitted: list[_Req] = []
            while self.waiting and len(self.running) + len(admitted) < m.max_batch:
                admitted.append(self.waiting.popleft())
            if admitted:                       # serialized prefill; decode stalls meanwhile
                work = sum(r.prefill_tokens for r in admitted) / m.prefill_tps / m.scale
                t0 = loop.time()
                if work > 0:
                    await asyncio.sleep(work)
                self.busy_s += loop.time() - t0
                self.segments.append((t0, loop.time(), len(self.running) + len(admitted)))
                for r in admitted:
                    if r.remaining <= 0:
                        r.done.set_result(None)
                    else:
                        self.running.append(r)
                self.max_running = max(self.max_running, len(self.running))
            if not self.running:
                continue
            n = len(self.running)
            rate = m.per_request_tps(n) * m.scale          # tokens per wall second, per request
            t_next = min(r.remaining for r in self.running) / rate
            t0 = loop.time()
            self._wake.clear()
            if self.waiting or n >= m.max_batch:
                await asyncio.sleep(t_next)
            else:                              # an arrival joins the batch at once
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=t_next)
                except TimeoutError:
                    pass
            dt = loop.time() - t0
            self.busy_s += dt
            self.segments.append((t0, t0 + dt, n))
            still = []
            for r in self.running:
                r.remaining -= rate * dt
                if r.remaining <= 1e-6:
                    r.done.set_result(None)
                else:
                    still.append(r)
            self.running = still


    def batch_occupancy(self, lo: float = 0.0, hi: float = 1.0) -> float:
        """Mean share of the batch's ``max_batch`` slots in use, over the part ``[lo, hi]`` of the
        time from the first request to the last one finished (idle gaps count as empty)."""
        if not self.segments:
            return 0.0
        t_first, t_last = self.segments[0][0], max(e for _, e, _ in self.segments)
        a, b = t_first + lo * (t_last - t_first), t_first + hi * (t_last - t_first)
        if b <= a:
            return 0.0
        used = sum(max(0.0, min(e, b) - max(s, a)) * n for s, e, n in self.segments)
        return used / ((b - a) * self.model.max_batch)


# -- the server ---------------------------------------------------------------------------------
class Stats:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.requests = 0
        self.kinds: collections.Counter[str] = collections.Counter()
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.completion_tokens = 0
        self.inflight = 0
        self.max_inflight = 0
        self.errors = 0
        self.started = time.time()

    def as_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "kinds": dict(self.kinds), "prompt_tokens": self.prompt_tokens,
                "cached_tokens": self.cached_tokens, "completion_tokens": self.completion_tokens,
                "max_inflight": self.max_inflight, "errors": self.errors,
                "since_s": round(time.time() - self.started, 3)}


def make_app(latency: LatencyModel | None, thought_words: int, delay_s: float = 0.0) -> Any:
    from aiohttp import web

    stats = Stats()
    cache = PrefixCache(latency.prefix_cache_tokens if latency else 0)
    engine = Engine(latency) if latency else None

    async def chat(request: web.Request) -> web.Response:
        stats.requests += 1
        stats.inflight += 1
        stats.max_inflight = max(stats.max_inflight, stats.inflight)
        try:
            req = await request.json()
            messages = req.get("messages") or []
            text, kind = respond(messages, thought_words)
            stats.kinds[kind] += 1
            prompt = "".join(f"<|{m.get('role')}|>{m.get('content', '')}" for m in messages)
            prompt_tokens, completion_tokens = count_tokens(prompt), count_tokens(text)
            if engine is not None:
                cached = min(prompt_tokens - 1, count_tokens(prompt[: cache.lookup_insert(prompt)]))
                stats.cached_tokens += max(0, cached)
                await engine.submit(prompt_tokens - max(0, cached), completion_tokens)
            elif delay_s > 0:
                await asyncio.sleep(delay_s)
            stats.prompt_tokens += prompt_tokens
            stats.completion_tokens += completion_tokens
            body = {
                "id": f"fake-{stats.requests}", "object": "chat.completion", "created": int(time.time()),
                "model": req.get("model", "fake"),
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_tokens + completion_tokens},
            }
            return web.json_response(body)
        except Exception as e:  # noqa: BLE001 - a 500 the client sees; counted
            stats.errors += 1
            log.exception("request failed")
            return web.json_response({"object": "error", "message": str(e)}, status=500)
        finally:
            stats.inflight -= 1

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def get_stats(request: web.Request) -> web.Response:
        d = stats.as_dict()
        if engine is not None:
            d.update(engine_busy_s=round(engine.busy_s, 3), engine_max_running=engine.max_running,
                     batch_occupancy=round(engine.batch_occupancy(), 4),
                     # the body: without the first and last 10% of the time (start-up and the tail)
                     batch_occupancy_body=round(engine.batch_occupancy(0.1, 0.9), 4))
        return web.json_response(d)

    async def reset(request: web.Request) -> web.Response:
        stats.reset()
        cache.clear()
        if engine is not None:
            engine.busy_s = 0.0
            engine.max_running = 0
            engine.segments.clear()
        return web.json_response({"ok": True})

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.add_routes([web.post("/v1/chat/completions", chat), web.get("/health", health),
                    web.get("/v1/models", health), web.get("/stats", get_stats), web.post("/reset", reset)])
    return app


def add_latency_args(ap: argparse.ArgumentParser) -> None:
    d = LatencyModel()
    ap.add_argument("--prefill-tps", type=float, default=d.prefill_tps, help="prompt tokens/s (serialized prefill)")
    ap.add_argument("--decode-tps", type=float, default=d.decode_tps, help="decode tokens/s of one request alone")
    ap.add_argument("--decode-agg-tps", type=float, default=d.decode_agg_tps,
                    help="decode tokens/s of all requests together at --decode-batch-ref")
    ap.add_argument("--decode-batch-ref", type=int, default=d.decode_batch_ref)
    ap.add_argument("--max-batch", type=int, default=d.max_batch, help="requests decoded at once (max_num_seqs)")
    ap.add_argument("--prefix-cache-tokens", type=int, default=d.prefix_cache_tokens, help="0: no prefix cache")
    ap.add_argument("--scale", type=float, default=1.0, help="divide every latency by this (quick runs)")


def latency_from_args(a: argparse.Namespace) -> LatencyModel:
    return LatencyModel(a.prefill_tps, a.decode_tps, a.decode_agg_tps, a.decode_batch_ref, a.max_batch,
                        a.prefix_cache_tokens, a.scale)


def latency_argv(m: LatencyModel) -> list[str]:
    return ["--latency", "model", "--prefill-tps", str(m.prefill_tps), "--decode-tps", str(m.decode_tps),
            "--decode-agg-tps", str(m.decode_agg_tps), "--decode-batch-ref", str(m.decode_batch_ref),
            "--max-batch", str(m.max_batch), "--prefix-cache-tokens", str(m.prefix_cache_tokens),
            "--scale", str(m.scale)]


class FakeServer:
    """The server in a subprocess of its own (so it does not share the harness's event loop or
    GIL); ``base_url`` once started. ``stats()`` / ``reset()`` talk to it over HTTP."""

    def __init__(self, latency: LatencyModel | None = None, thought_words: int = 24, delay_ms: float = 0.0) -> None:
        self.argv = [sys.executable, str(Path(__file__).resolve()), "--port", "0",
                     "--thought-words", str(thought_words), "--delay-ms", str(delay_ms)]
        self.argv += latency_argv(latency) if latency else ["--latency", "instant"]
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> FakeServer:
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, text=True, cwd=str(REPO))
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        m = re.match(r"listening on (\d+)", line)
        if not m:
            self.__exit__()
            raise RuntimeError(f"fake server did not start: {line!r}")
        self.port = int(m.group(1))
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2).read()
                break
            except OSError:
                time.sleep(0.05)
        return self

    def _call(self, path: str, method: str = "GET") -> dict[str, Any]:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", method=method,
                                     data=b"" if method == "POST" else None)
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def stats(self) -> dict[str, Any]:
        return self._call("/stats")

    def reset(self) -> None:
        self._call("/reset", "POST")

    def cpu_seconds(self) -> float:
        """User + system CPU time the server process used so far (Linux /proc)."""
        if self.proc is None:
            return 0.0
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return 0.0

    def __exit__(self, *exc: Any) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0: any free port (printed on stdout)")
    ap.add_argument("--latency", choices=("instant", "model"), default="instant")
    ap.add_argument("--thought-words", type=int, default=24, help="reasoning words in each action reply")
    ap.add_argument("--delay-ms", type=float, default=0.0, help="instant mode: a fixed delay per request")
    add_latency_args(ap)
    a = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    from aiohttp import web

    async def serve() -> None:
        app = make_app(latency_from_args(a) if a.latency == "model" else None, a.thought_words, a.delay_ms / 1000)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, a.host, a.port, backlog=4096)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        print(f"listening on {port}", flush=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
