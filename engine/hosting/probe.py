"""Start a model's vLLM server on this machine and measure its prompt (prefill) and decode rates.

Shared by ``dateline doctor`` (``ray_jobs/cluster/doctor.py``: a ~10 s probe), ``perf/cpu_dtype.py`` (the
two dtypes side by side) and ``perf/engine_ceiling.py``. The server runs with the settings a
replica of the model would get on this machine (:func:`engine.hosting.vllm_server.engine_settings`),
plus ``VLLM_SERVER_DEV_MODE=1`` for ``POST /reset_prefix_cache``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine.hosting.vllm_server import VLLMServer, engine_settings

log = logging.getLogger(__name__)


def start_server(m: Any, log_path: Path, engine_args: dict[str, Any] | None = None) -> VLLMServer:
    """Model config ``m``'s server on loopback, healthy, with the engine settings a replica of it
    gets on this machine; ``engine_args`` are set over the config's (explicit values)."""
    if engine_args is not None:
        m = replace(m, engine_args={**m.engine_args, **engine_args})
    args, env = engine_settings(m)
    env["VLLM_SERVER_DEV_MODE"] = "1"           # POST /reset_prefix_cache between measurements
    server = VLLMServer(m.path, m.served_name or m.name, engine_args=args, env=env, log_path=log_path,
                        host="127.0.0.1", niceness=m.niceness)
    server.start()
    log.info("vLLM starting (log: %s)", log_path)
    took = server.wait_healthy(m.startup_timeout_s)
    log.info("vLLM healthy after %.0f s", took)
    return server


async def reset_prefix_cache(root: str) -> None:
    """Empty the server's prefix cache (it runs with ``VLLM_SERVER_DEV_MODE=1``)."""
    import httpx

    async with httpx.AsyncClient(timeout=60) as http:
        r = await http.post(root + "/reset_prefix_cache")
        if r.status_code != 200:
            raise RuntimeError(f"POST {root}/reset_prefix_cache answered {r.status_code}: {r.text[:200]} "
                               "(the server needs VLLM_SERVER_DEV_MODE=1)")


def probe_messages(i: int, words: int) -> list[dict[str, str]]:
    """A newsagent-like chat of about ``words`` words (~1.5 tokens each) of dated minutes; ``i``
    makes it distinct from the others (no shared prefix beyond the system prompt)."""
    body = " ".join(f"On day {d} the council of town {i} met to discuss item {d * 7 % 13} of the budget."
                    for d in range(max(1, words // 16)))
    return [{"role": "system", "content": "You are a news writer. Answer in JSON."},
            {"role": "user", "content": f"Objects (set {i}):\n{body}\nWrite the first sentence of the article."}]


async def measure(base: str, served: str, *, prompt_words: int = 1000, requests: int = 8, gen_tokens: int = 64,
                  decode_prompt_words: int | None = None) -> dict[str, Any]:
    """Rates of the server at ``base`` (``http://host:port``), after a warm-up request:

    * prefill: one request of a ``prompt_words`` prompt, ``max_tokens`` 1, prefix cache reset
      before it: prompt tokens / wall time;
    * decode: ``requests`` requests at once (distinct prompts of ``decode_prompt_words``, default
      ``prompt_words``), ``gen_tokens`` each with ``ignore_eos``: completion tokens / wall time.

    Greedy (temperature 0, seed 0); ``text`` is the first decode request's reply."""
    import httpx

    decode_words = prompt_words if decode_prompt_words is None else decode_prompt_words
    async with httpx.AsyncClient(base_url=base, timeout=3600) as http:
        async def chat(i: int, words: int, max_tokens: int) -> tuple[float, dict[str, Any]]:
            t0 = time.perf_counter()
            r = await http.post("/v1/chat/completions", json={
                "model": served, "messages": probe_messages(i, words), "max_tokens": max_tokens,
                "temperature": 0.0, "ignore_eos": True, "seed": 0})
            r.raise_for_status()
            body: dict[str, Any] = r.json()
            return time.perf_counter() - t0, body

        await chat(999, prompt_words, 4)                         # warm-up (first-request costs)
        await reset_prefix_cache(base)
        dt, one = await chat(0, prompt_words, 1)
        prompt_tokens = int(one["usage"]["prompt_tokens"])
        await reset_prefix_cache(base)
        t0 = time.perf_counter()
        outs = await asyncio.gather(*(chat(100 + i, decode_words, gen_tokens) for i in range(requests)))
        wall = time.perf_counter() - t0
        gen = sum(int(o["usage"]["completion_tokens"]) for _, o in outs)
        return {"prefill_tok_s": prompt_tokens / dt, "prompt_tokens": prompt_tokens, "prefill_s": dt,
                "decode_tok_s": gen / wall, "gen_tokens": gen, "decode_wall_s": wall, "requests": requests,
                "text": outs[0][1]["choices"][0]["message"]["content"]}
