"""vLLM on this CPU: bfloat16 against float32, side by side in one run.

    python perf/cpu_dtype.py                     # both dtypes, 8 requests at once, 64 tokens each
    python perf/cpu_dtype.py --dtypes float32    # one

Without an explicit ``model.engine_args.dtype`` a CPU replica runs bfloat16 where the CPU
computes it natively (AVX512_BF16 or AMX on x86, BF16 on Arm) and float32 elsewhere
(``engine/hosting/machine.py``). This starts the default model's server (``conf/model/local_cpu.yaml``,
with the settings a replica gets on this machine: ``engine.hosting.probe.start_server``) once per
dtype, one after the other, and measures on each (``engine.hosting.probe.measure``):

* **prefill**: one request of a ~1,500-token newsagent-sized prompt, ``max_tokens`` 1 (prefix
  cache reset before it), prompt tokens / wall time;
* **decode**: ``--requests`` requests at once (distinct prompts), ``--gen-tokens`` tokens each
  with ``ignore_eos``, completion tokens / wall time;
* the greedy text of the first request, so the two dtypes' outputs can be compared.

It prints the CPU's relevant flags and the float32 / bfloat16 ratios. Measured here (AMD EPYC,
2 cores, AVX-512 with AVX512_BF16), two runs: float32 / bfloat16 prefill 0.54x and 0.53x, decode
0.54x and 0.61x (209-226 against 389-430 prompt tok/s, 8.6-8.7 against 14.3-15.9 completion tok/s
at 8 in flight), the same greedy first reply. On an AVX2-only AMD EPYC, bfloat16 prefilled at ~20
tokens/s against ~95 in float32: hence the choice by CPU flags.
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

from engine.hosting.probe import measure, start_server  # noqa: E402
from perf.engine_ceiling import model_config  # noqa: E402

log = logging.getLogger("cpu_dtype")


def run_one(dtype: str, a: argparse.Namespace, logs: Path) -> dict[str, Any]:
    m = model_config()
    t0 = time.perf_counter()
    server = start_server(m, logs / f"vllm-{dtype}.log", engine_args={"dtype": dtype})
    startup_s = time.perf_counter() - t0
    try:
        rates = measure(server.local_url(), m.served_name, prompt_words=a.prompt_words, requests=a.requests,
                        gen_tokens=a.gen_tokens)
        return {**asyncio.run(rates), "startup_s": startup_s}
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
    from engine.hosting.machine import derived_dtype, detect

    facts = detect()
    print("CPU flags that matter here:", ", ".join(sorted(facts.flags)) or "(no AVX-512, no AMX)",
          "- without an explicit dtype a replica here runs {} ({})".format(*derived_dtype(facts)))
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
