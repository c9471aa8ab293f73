"""Engine ceiling: how close the agent harness drives a real vLLM server to what the server can
do with the same requests.

    python perf/engine_ceiling.py                       # 8 newsagent tasks, the offline model
    python perf/engine_ceiling.py --tasks 4 --max-operations 3         # quick

1. **agent**: newsagent episodes (``--tasks``, all at once, ``--inflight`` requests in flight,
   as a run does: :class:`engine.runtime.dispatch.EpisodeRunner`, MiniLM + FAISS index in process)
   against a vLLM server on this machine serving the offline model (``conf/model/local_cpu.yaml``,
   with the engine settings a replica gets on this machine). Every request is recorded as sent (body, and when
   it was sent and answered: ``ChatClient.on_call``).
2. **replay**: the prefix cache is reset (``POST /reset_prefix_cache``; the server runs with
   ``VLLM_SERVER_DEV_MODE=1`` for it) and the recorded requests are sent again to the same
   server **open-loop**: all at once (or at most ``--replay-concurrency``), no request waiting
   for another's answer, so the engine always has the whole backlog to batch. The bodies are
   identical (messages, ``max_tokens``, temperature, seed, response format).

Tokens/s on each side = completion tokens the server reported / wall time from the first request
sent to the last answer (the agent's wall leaves out loading the index; both sides include
prefill). The ratio agent / replay is the share of the engine's throughput the harness gets
while it runs episodes whose next request waits for the previous answer (goal >= 0.9). Prompt
tokens are printed too: the agent's turns of one episode reuse the prefix cache turn after turn;
the replay's, all at once, share it only across requests that run together.

``--trace FILE`` keeps the recorded requests (JSON lines); ``--replay-only FILE`` replays a
trace against a server at ``--base-url`` (or one started here).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.hosting.probe import reset_prefix_cache, start_server  # noqa: E402

log = logging.getLogger("engine_ceiling")
RATIO_GOAL = 0.9


def model_config() -> Any:
    """The default model of a run (conf/model/local_cpu.yaml), as Hydra composes it."""
    from ray_jobs.config.compose import compose

    return compose([]).model


def build(a: argparse.Namespace) -> tuple[Any, list[Any], list[Any]]:
    from engine.benchmarks import get_benchmark
    from engine.benchmarks.newsagent.config import NewsagentAgentConfig, NewsagentBenchmarkConfig
    from engine.runtime.dispatch import EpisodeSpec

    bench = get_benchmark("newsagent")
    agent = NewsagentAgentConfig(max_operations=a.max_operations, rephrase=a.rephrase)
    cfg = SimpleNamespace(benchmark=NewsagentBenchmarkConfig(limit=a.tasks), agent=agent)
    tasks = bench.load_tasks(cfg)
    specs = [EpisodeSpec(f"{t.task_id}-s0", "ceiling", t, t.task_id, 0) for t in tasks]
    return cfg, bench.corpus(cfg), specs


async def agent_side(a: argparse.Namespace, m: Any, base_url: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Run the episodes; returns their rows and the recorded requests."""
    from engine.config import IndexConfig, to_plain
    from engine.hosting.prepare_model import cache_dir
    from engine.llm import Endpoint, SamplingParams
    from engine.protocol import dumps
    from engine.runtime.dispatch import EpisodeRunner, WorkerSetup, agent_json
    from indexes.service import IndexService

    cfg, docs, specs = build(a)
    ic = IndexConfig()
    index = IndexService(docs, ic.embedding_model, "cpu", 256, str(cache_dir() / "embeddings"))
    await index.embed(["warm-up"])
    setup = WorkerSetup(benchmark="newsagent", model_name=m.name, agent=cfg.agent, agent_json=agent_json(cfg.agent),
                        endpoints=[Endpoint(base_url + "/v1", m.served_name)],
                        sampling=SamplingParams(m.temperature, 1.0, None, float(m.request_timeout_s), 0),
                        inflight_per_replica=a.inflight, top_k=ic.top_k, threshold=ic.threshold,
                        data_json=dumps(to_plain(cfg.benchmark)))
    runner = EpisodeRunner(setup, index, "ceiling")
    calls: list[dict[str, Any]] = []

    def record(request: dict[str, Any], c: Any, t_sent: float, t_done: float) -> None:
        calls.append({"request": json.loads(json.dumps(request)), "t_sent": t_sent, "t_done": t_done,
                      "prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens})

    runner.router.on_call = record
    log.info("agent: %d episodes at once, %d requests in flight", len(specs), a.inflight)
    rows = [r["episode"] for r in await asyncio.gather(*(runner.run(s) for s in specs))]
    await runner.router.close()
    return rows, calls


async def replay(calls: list[dict[str, Any]], base_url: str, concurrency: int) -> list[dict[str, Any]]:
    """Send every recorded request at once (at most ``concurrency`` in flight; 0: no bound)."""
    import httpx

    slots = asyncio.Semaphore(concurrency or len(calls) or 1)
    out: list[dict[str, Any]] = []
    limits = httpx.Limits(max_connections=max(1, concurrency or len(calls)), max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=base_url + "/v1", timeout=3600, limits=limits) as http:
        async def one(call: dict[str, Any]) -> None:
            async with slots:
                t0 = time.perf_counter()
                r = await http.post("/chat/completions", json=call["request"])
                t1 = time.perf_counter()
            if r.status_code != 200:
                raise RuntimeError(f"replay: {r.status_code} {r.text[:300]}")
            u = r.json().get("usage") or {}
            out.append({"t_sent": t0, "t_done": t1, "prompt_tokens": int(u.get("prompt_tokens") or 0),
                        "completion_tokens": int(u.get("completion_tokens") or 0)})
        await asyncio.gather(*(one(c) for c in calls))
    return out


def summary(calls: list[dict[str, Any]]) -> dict[str, float]:
    wall = max(c["t_done"] for c in calls) - min(c["t_sent"] for c in calls)
    tin = sum(c["prompt_tokens"] for c in calls)
    tout = sum(c["completion_tokens"] for c in calls)
    return {"requests": len(calls), "wall_s": wall, "tokens_in": tin, "tokens_out": tout,
            "out_tps": tout / wall, "all_tps": (tin + tout) / wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=8, help="newsagent sample tasks (one episode each)")
    ap.add_argument("--max-operations", type=int, default=6, help="agent.max_operations (paper: 20)")
    ap.add_argument("--rephrase", action="store_true", help="also the rephrase turn (long replies)")
    ap.add_argument("--inflight", type=int, default=8, help="requests in flight (model.max_inflight_per_replica)")
    ap.add_argument("--replay-concurrency", type=int, default=0, help="replay: requests in flight (0: all)")
    ap.add_argument("--base-url", default="", help="a running server (http://host:port); default: start one")
    ap.add_argument("--trace", default="", help="write the recorded requests here (JSON lines)")
    ap.add_argument("--replay-only", default="", help="replay this trace only (no agent side)")
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s %(name)s] %(message)s", datefmt="%H:%M:%S")
    for name in ("httpx", "httpx2", "openai", "faiss.loader", "sentence_transformers", "indexes.service", "engine.hosting"):
        logging.getLogger(name).setLevel(logging.WARNING)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    m = model_config()
    server = None
    base = a.base_url.rstrip("/")
    if not base:
        server = start_server(m, Path(tempfile.gettempdir()) / f"engine_ceiling-vllm-{os.getpid()}.log")
        base = server.local_url()
    try:
        if a.replay_only:
            calls = [json.loads(line) for line in Path(a.replay_only).read_text().splitlines() if line.strip()]
            rows: list[dict[str, Any]] = []
        else:
            rows, calls = asyncio.run(agent_side(a, m, base))
            if a.trace:
                Path(a.trace).write_text("".join(json.dumps(c) + "\n" for c in calls))
        if not calls:
            raise SystemExit("no request was recorded")
        asyncio.run(reset_prefix_cache(base))
        log.info("replay: %d requests open-loop", len(calls))
        replayed = asyncio.run(replay(calls, base, a.replay_concurrency))
    finally:
        if server is not None:
            server.stop()

    sides = [("agent", summary(calls)), ("replay", summary(replayed))]
    print()
    print(f"model {m.name} on vLLM ({base}); newsagent, {a.tasks} tasks, max_operations {a.max_operations}, "
          f"rephrase {'on' if a.rephrase else 'off'}, {a.inflight} requests in flight; replay open-loop "
          f"({a.replay_concurrency or 'all'} in flight)")
    hdr = f"{'side':<8}{'requests':>9}{'wall s':>9}{'tok in':>9}{'tok out':>9}{'out tok/s':>11}{'all tok/s':>11}"
    print(hdr)
    print("-" * len(hdr))
    for name, s in sides:
        print(f"{name:<8}{s['requests']:>9}{s['wall_s']:>9.1f}{s['tokens_in']:>9}{s['tokens_out']:>9}"
              f"{s['out_tps']:>11.2f}{s['all_tps']:>11.1f}")
    if rows:
        bad = [r for r in rows if r["status"] != "ok"]
        print(f"episodes: {len(rows)}, {len(bad)} not ok" + (f" (first: {bad[0]['error'][:160]})" if bad else ""))
    ag, rp = sides[0][1], sides[1][1]
    ratio = ag["out_tps"] / rp["out_tps"]
    print(f"agent / replay completion tokens/s: {ratio:.2f} (goal >= {RATIO_GOAL}) "
          f"[{'met' if ratio >= RATIO_GOAL else 'MISSED'}]; all tokens/s: {ag['all_tps'] / rp['all_tps']:.2f}")


if __name__ == "__main__":
    main()
