"""The client's own CPU per model call, side by side in one run: the OpenAI SDK's
``chat.completions.create`` (what ``engine.llm.ChatClient`` called before) vs ``ChatClient.chat``
(the same SDK's ``post`` with the body as built, its typed errors and parsing kept).

    python perf/client_overhead.py                  # 4,000 judge-shaped calls, 64 in flight
    python perf/client_overhead.py --calls 20000 --chars 12000

An instant fake chat server (aiohttp, in a process of its own) answers every call at once, so
what is measured is the calling process: CPU seconds (``time.process_time``) and wall per call,
for ``--calls`` calls of one user message of ``--chars`` characters (an analyst checklist
judge's prompt is about 6,000), ``--inflight`` at a time. Each side runs ``--rounds`` times,
alternating, after one warm-up round each; the best round of each is printed, then new / old.
A judge actor or an episode worker spends this per call on top of the work it exists for.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SERVER = r"""
import sys
from aiohttp import web

async def chat(req):
    body = await req.json()
    n = len(body["messages"][0]["content"]) // 4
    return web.json_response({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "4"}}],
        "usage": {"prompt_tokens": n, "completion_tokens": 1, "total_tokens": n + 1}})

app = web.Application(client_max_size=1 << 24)
app.router.add_post("/v1/chat/completions", chat)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


async def sdk_side(base_url: str, texts: list[str], inflight: int, max_tokens: int) -> None:
    """The calls as ``ChatClient`` made them before: ``chat.completions.create(**kwargs)``."""
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base_url, api_key="EMPTY", max_retries=0, timeout=60)
    slots = asyncio.Semaphore(inflight)

    async def one(text: str) -> None:
        async with slots:
            r = await asyncio.wait_for(client.chat.completions.create(
                model="grader", messages=[{"role": "user", "content": text}], max_tokens=max_tokens,
                temperature=0.0, top_p=1.0, seed=0), 60)
            assert r.choices[0].message.content == "4"

    await asyncio.gather(*(one(t) for t in texts))
    await client.close()


async def client_side(base_url: str, texts: list[str], inflight: int, max_tokens: int) -> None:
    """The same calls through ``engine.llm.ChatClient.chat``."""
    from engine.llm import ChatClient, Endpoint, SamplingParams

    client = ChatClient(Endpoint(base_url, "grader", ""), SamplingParams(temperature=0.0, top_p=1.0, seed=0,
                                                                        timeout_s=60), inflight)

    async def one(text: str) -> None:
        c = await client.chat([{"role": "user", "content": text}], max_tokens)
        assert c.text == "4"

    await asyncio.gather(*(one(t) for t in texts))
    await client.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=4000)
    ap.add_argument("--chars", type=int, default=6000, help="characters of each call's user message")
    ap.add_argument("--inflight", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()

    from perf.driver_scale import serve_chat

    server, base_url = serve_chat(SERVER)
    try:
        words = "the report states that unemployment rose in the third quarter by 0.4 points ".split()
        texts = [(" ".join(words[(i + j) % len(words)] for j in range(a.chars // 5)))[: a.chars] + f" #{i}"
                 for i in range(a.calls)]
        sides: dict[str, Any] = {"SDK create (before)": sdk_side, "ChatClient.chat (now)": client_side}
        best: dict[str, tuple[float, float]] = {}
        for r in range(a.rounds + 1):
            for name, side in sides.items():
                c0, w0 = time.process_time(), time.perf_counter()
                asyncio.run(side(base_url, texts, a.inflight, 16))
                cpu, wall = time.process_time() - c0, time.perf_counter() - w0
                if r:                     # round 0 warms imports and the server
                    best[name] = min(best.get(name, (cpu, wall)), (cpu, wall))
    finally:
        server.terminate()
    print(f"{a.calls} calls of {a.chars} characters, {a.inflight} in flight, an instant fake server; "
          f"best of {a.rounds} rounds")
    print(f"{'':26s}{'client CPU / call (ms)':>24s}{'wall / call (ms)':>18s}{'calls/s':>10s}")
    for name, (cpu, wall) in best.items():
        print(f"{name:26s}{cpu / a.calls * 1e3:>24.3f}{wall / a.calls * 1e3:>18.3f}{a.calls / wall:>10.0f}")
    (c_old, w_old), (c_new, w_new) = best.values()
    print(f"now / before: CPU per call {c_new / c_old:.3f}, wall {w_new / w_old:.3f}")


if __name__ == "__main__":
    main()
