"""Sequential baseline: the same newsagent tasks one episode at a time, as the papers' scripts
do, vs dateline's concurrent harness, against the same fake model server with a real model's
latency; prints both wall times and the speed-up.

    python perf/sequential_baseline.py [--tasks 22] [--scale 1] [--max-batch 8] [--inflight 8]
    python perf/sequential_baseline.py --tasks 6 --scale 20          # quick

Goal (issue): speed-up >= 5x with the fake server's latency set to a real model's.

The server (``perf/_fake_server.py``, aiohttp on loopback, its own process) answers each
turn with a valid action (search, insert, terminate, rephrase) after a latency from its engine
model: serialized prefill at ``--prefill-tps`` (430 prompt tokens/s) over the prompt tokens the
prefix cache does not hold, and continuous-batching decode at 8 tokens/s for one request rising
to 22 tokens/s in all at batch 8 (a power law; per-request decode time grows sub-linearly with
the batch), at most ``--max-batch`` requests decoding at once (vLLM ``max_num_seqs``; 8 in
``conf/model/local_cpu.yaml``). Replies are about as long as a small model's (actions ~60
tokens, the rephrased article ~150-250). ``--scale`` divides every latency for quick runs.

Both sides run the same code in this process: :class:`engine.runtime.dispatch.EpisodeRunner` with the
in-process index (:class:`indexes.service.IndexService`: MiniLM + FAISS over the sample corpus).

* **sequential**: ``for spec in specs: await runner.run(spec)``: one episode, one request at a time.
* **dateline**: every episode at once (``--concurrency``, default all), at most ``--inflight``
  requests in flight (``model.max_inflight_per_replica``; 8 for the local CPU model).

The server's prefix cache and counters are reset between the two. The speed-up is bounded by
the latency model itself: decode-only, running ``b`` requests at once is at most
``aggregate(b) / single`` times faster (2.75x at batch 8 with the defaults), and prefill does not
batch; the script prints that ceiling next to the measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _fake_server import FakeServer, LatencyModel, add_latency_args, latency_from_args  # noqa: E402

log = logging.getLogger("sequential_baseline")
SPEEDUP_GOAL = 5.0


def build(a: argparse.Namespace) -> tuple[Any, list[Any], list[Any]]:
    from engine.benchmarks import get_benchmark
    from engine.benchmarks.newsagent.config import NewsagentAgentConfig, NewsagentBenchmarkConfig
    from engine.runtime.dispatch import EpisodeSpec

    bench = get_benchmark("newsagent")
    cfg = SimpleNamespace(benchmark=NewsagentBenchmarkConfig(limit=a.tasks), agent=NewsagentAgentConfig())
    tasks = bench.load_tasks(cfg)
    specs = [EpisodeSpec(f"{t.task_id}-s{s}", "seq", t, t.task_id, s) for s in range(a.seeds) for t in tasks]
    return cfg, bench.corpus(cfg), specs


def make_runner(cfg: Any, base_url: str, inflight: int, index: Any) -> Any:
    from engine.config import IndexConfig, to_plain
    from engine.llm import Endpoint, SamplingParams
    from engine.protocol import dumps
    from engine.runtime.dispatch import EpisodeRunner, WorkerSetup, agent_json

    ic = IndexConfig()
    setup = WorkerSetup(benchmark="newsagent", model_name="fake", agent=cfg.agent, agent_json=agent_json(cfg.agent),
                        endpoints=[Endpoint(base_url, "fake")], sampling=SamplingParams(0.0, 1.0, None, 3600.0, 0),
                        inflight_per_replica=inflight, top_k=ic.top_k, threshold=ic.threshold,
                        data_json=dumps(to_plain(cfg.benchmark)))
    return EpisodeRunner(setup, index, "baseline")


async def sequential(runner: Any, specs: list[Any]) -> list[dict[str, Any]]:
    rows = []
    for spec in specs:
        rows.append((await runner.run(spec))["episode"])
        log.info("sequential: %d/%d episodes", len(rows), len(specs))
    return rows


async def concurrent(runner: Any, specs: list[Any], concurrency: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    it = iter(specs)

    async def lane() -> None:
        for spec in it:
            rows.append((await runner.run(spec))["episode"])

    await asyncio.gather(*(lane() for _ in range(concurrency)))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=22, help="newsagent sample tasks (22 bundled)")
    ap.add_argument("--seeds", type=int, default=1, help="episodes per task")
    ap.add_argument("--concurrency", type=int, default=0, help="concurrent episodes (0: all)")
    ap.add_argument("--inflight", type=int, default=8, help="requests in flight (model.max_inflight_per_replica)")
    ap.add_argument("--thought-words", type=int, default=24, help="reasoning words in each action reply")
    add_latency_args(ap)
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s %(name)s] %(message)s", datefmt="%H:%M:%S")
    for name in ("httpx", "httpx2", "openai", "faiss.loader", "sentence_transformers", "indexes.service"):
        logging.getLogger(name).setLevel(logging.WARNING)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    lat: LatencyModel = latency_from_args(a)
    cfg, docs, specs = build(a)
    conc = a.concurrency or len(specs)

    from engine.hosting.prepare_model import cache_dir
    from indexes.service import IndexService

    out: dict[str, Any] = {}
    with FakeServer(lat, a.thought_words) as server:
        log.info("fake server at %s (scale %g); %d episodes", server.base_url, lat.scale, len(specs))

        async def go() -> None:
            index = IndexService(docs, "all-MiniLM-L6-v2", "cpu", 256, str(cache_dir() / "embeddings"))
            logging.getLogger().setLevel(logging.WARNING)
            logging.getLogger("sequential_baseline").setLevel(logging.INFO)
            await index.embed(["warm-up"])
            for name in ("sequential", "dateline"):
                runner = make_runner(cfg, server.base_url, 1 if name == "sequential" else a.inflight, index)
                server.reset()
                t0 = time.perf_counter()
                rows = await (sequential(runner, specs) if name == "sequential" else concurrent(runner, specs, conc))
                wall = time.perf_counter() - t0
                out[name] = (wall, rows, server.stats())
                log.info("%s: %.1f s", name, wall)
                await runner.router.close()

        asyncio.run(go())

    print()
    print(f"newsagent, {len(specs)} episodes ({a.tasks} tasks x {a.seeds} seeds), fake server latency model: "
          f"prefill {lat.prefill_tps:g} tok/s, decode {lat.decode_tps:g} tok/s alone -> {lat.decode_agg_tps:g} "
          f"tok/s at batch {lat.decode_batch_ref} (a={lat.alpha:.3f}), max batch {lat.max_batch}, prefix cache "
          f"{lat.prefix_cache_tokens:,} tokens, latencies / {lat.scale:g}")
    hdr = (f"{'run':<12}{'wall s':>9}{'model s':>9}{'episodes':>9}{'errors':>7}{'steps':>7}{'requests':>9}"
           f"{'tok in':>9}{'cached':>8}{'tok out':>8}{'max batch':>10}")
    print(hdr)
    print("-" * len(hdr))
    for name in ("sequential", "dateline"):
        wall, rows, st = out[name]
        errors = sum(r["status"] != "ok" for r in rows)
        print(f"{name:<12}{wall:>9.1f}{st.get('engine_busy_s', 0):>9.1f}{len(rows):>9}{errors:>7}"
              f"{sum(r['n_steps'] for r in rows):>7}{st['requests']:>9}{st['prompt_tokens']:>9}"
              f"{st['cached_tokens'] / max(1, st['prompt_tokens']):>8.0%}{st['completion_tokens']:>8}"
              f"{st.get('engine_max_running', 0):>10}")
    print("(model s: time the simulated engine was busy (prefill + decode), in wall seconds at this scale; "
          "cached: prompt tokens served from the prefix cache)")
    seq_wall, seq_rows, seq_st = out["sequential"]
    con_wall, con_rows, _ = out["dateline"]
    speedup = seq_wall / con_wall
    b = min(lat.max_batch, a.inflight, len(specs))
    ceiling = lat.aggregate_tps(b) / lat.decode_tps
    overhead = seq_wall - seq_st.get("engine_busy_s", 0.0)
    print()
    print(f"sequential: {seq_wall:.1f} s, of which {overhead:.1f} s ({overhead / seq_wall:.0%}) outside the "
          f"model (harness, index, HTTP; not divided by --scale, so a high scale inflates the speed-up)")
    print(f"speed-up of dateline (all {conc} episodes at once, {a.inflight} requests in flight) over one at a time: "
          f"{speedup:.2f}x = {speedup / SPEEDUP_GOAL:.2f} of the {SPEEDUP_GOAL:g}x goal "
          f"[{'met' if speedup >= SPEEDUP_GOAL else 'MISSED'}]")
    if lat.scale != 1:
        con_st = out["dateline"][2]
        seq1 = seq_st.get("engine_busy_s", 0.0) * lat.scale + overhead
        con1 = con_st.get("engine_busy_s", 0.0) * lat.scale + max(0.0, con_wall - con_st.get("engine_busy_s", 0.0))
        print(f"projected to the real latency (--scale 1: model time x {lat.scale:g}, the rest as measured): "
              f"sequential {seq1:.0f} s, dateline {con1:.0f} s, speed-up {seq1 / con1:.2f}x")
    print(f"ceiling set by the latency model at batch {b}: decode {ceiling:.2f}x (aggregate "
          f"{lat.aggregate_tps(b):.1f} / {lat.decode_tps:g} tok/s), prefill 1x; dateline reaches "
          f"{speedup / ceiling:.0%} of the decode ceiling")
    bad = [r for r in seq_rows + con_rows if r["status"] != "ok"]
    if bad:
        print(f"errors: {len(bad)}; first: {bad[0]['error'].splitlines()[0][:200]}")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
