"""vLLM on this CPU: bfloat16 against float32, side by side in one run.

    python perf/cpu_dtype.py                     # both dtypes, 8 requests at once, 64 tokens each
    python perf/cpu_dtype.py --dtypes float32    # one

``conf/model/local_cpu.yaml`` serves the offline model in bfloat16, the dtype its safetensors
folder is saved in. Whether that is the faster choice depends on the CPU: vLLM's CPU kernels
compute bfloat16 natively with AVX-512 (AVX512_BF16 for the dot products). This starts the
default model's server (``conf/model/local_cpu.yaml``: its engine arguments and CPU
environment) once per dtype, one after the other, and measures on each:

* **prefill**: one request of a ~1,500-token newsagent-sized prompt, ``max_tokens`` 1 (prefix
  cache reset before it), prompt tokens / wall time;
* **decode**: ``--requests`` requests at once (distinct prompts), ``--gen-tokens`` tokens each
  with ``ignore_eos``, completion tokens / wall time;
* the greedy text of the first request, so the two dtypes' outputs can be compared.

It prints the CPU's relevant flags and the float32 / bfloat16 ratios. Measured here (AMD EPYC,
2 cores, AVX-512 with AVX512_BF16), two runs: float32 / bfloat16 prefill 0.54x and 0.53x, decode
0.54x and 0.61x (209-226 against 389-430 prompt tok/s, 8.6-8.7 against 14.3-15.9 completion tok/s
at 8 in flight), the same greedy first reply: bfloat16 stays the default. Run it on a CPU without AVX512_BF16 before choosing float32 there.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from perf.engine_ceiling import model_config, reset_prefix_cache, start_server  # noqa: E402

log = logging.getLogger("cpu_dtype")


def prompt(i: int, words: int) -> list[dict[str, str]]:
    body = " ".join(f"On day {d} the council of town {i} met to discuss item {d * 7 % 13} of the budget."
                    for d in range(words // 16))
    return [{"role": "system", "content": "You are a news writer. Answer in JSON."},
            {"role": "user", "content": f"Objects (set {i}):\n{body}\nWrite the first sentence of the article."}]


async def measure(base: str, served: str, a: argparse.Namespace) -> dict[str, Any]:
    import httpx

    async with httpx.AsyncClient(base_url=base, timeout=3600) as http:
        async def chat(i: int, max_tokens: int) -> tuple[float, dict[str, Any]]:
            t0 = time.perf_counter()
            r = await http.post("/v1/chat/completions", json={
                "model": served, "messages": prompt(i, a.prompt_words), "max_tokens": max_tokens,
                "temperature": 0.0, "ignore_eos": True, "seed": 0})
            r.raise_for_status()
            return time.perf_counter() - t0, r.json()

        await chat(999, 4)                                       # warm-up (first-request costs)
        await reset_prefix_cache(base)
        dt, one = await chat(0, 1)
        prefill = one["usage"]["prompt_tokens"] / dt
        await reset_prefix_cache(base)
        t0 = time.perf_counter()
        outs = await asyncio.gather(*(chat(100 + i, a.gen_tokens) for i in range(a.requests)))
        wall = time.perf_counter() - t0
        gen = sum(o["usage"]["completion_tokens"] for _, o in outs)
        return {"prefill_tok_s": prefill, "prompt_tokens": one["usage"]["prompt_tokens"],
                "decode_tok_s": gen / wall, "gen_tokens": gen, "decode_wall_s": wall,
                "text": outs[0][1]["choices"][0]["message"]["content"]}


def run_one(dtype: str, a: argparse.Namespace, logs: Path) -> dict[str, Any]:
    from engine.config import to_plain

    m = model_config()
    t0 = time.perf_counter()
    server = start_server(m, logs / f"vllm-{dtype}.log", engine_args={**to_plain(m.engine_args), "dtype": dtype})
    startup_s = time.perf_counter() - t0
    try:
        return {**asyncio.run(measure(server.local_url(), m.served_name, a)), "startup_s": startup_s}
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--prompt-words", type=int, default=1000)
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from engine.hosting.vllm_server import cpu_isa

    print("CPU flags that matter here:", ", ".join(sorted(cpu_isa())) or "(no AVX-512, no AMX)")
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in a.dtypes.split(","):
            results[dtype] = run_one(dtype, a, Path(tmp))
    print(f"{'dtype':10} {'startup s':>9} {'prefill tok/s':>14} {'decode tok/s':>13}  first reply")
    for dtype, r in results.items():
        print(f"{dtype:10} {r['startup_s']:9.0f} {r['prefill_tok_s']:14.1f} {r['decode_tok_s']:13.1f}  "
              f"{r['text'][:60]!r}")
    if {"bfloat16", "float32"} <= results.keys():
        b, f = results["bfloat16"], results["float32"]
        print(f"float32 / bfloat16: prefill {f['prefill_tok_s'] / b['prefill_tok_s']:.2f}x, "
              f"decode {f['decode_tok_s'] / b['decode_tok_s']:.2f}x")


if __name__ == "__main__":
    main()
