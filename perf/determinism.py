"""Determinism: the same newsagent episodes run several times against one vLLM server at
temperature 0, each run in a different arrival order (reversed, staggered), with
``model.reproducible`` off and then on; how many actions and metrics differ from the first run.

    python perf/determinism.py                       # 4 tasks x 3 runs, off then on
    python perf/determinism.py --tasks 8 --runs 4 --modes off

Off, the server batches up to ``max_num_seqs`` requests and reuses cached prefixes, so what a
request is computed with (its batch mates, a cache hit or not) depends on arrival order. On
(``engine.hosting.vllm_server.reproducible_settings``): one sequence at a time on CPU, no prefix
cache. ``tests/e2e/test_real_lifecycle.py`` runs the "on" case in CI.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def start_server(reproducible: bool, log_path: Path) -> Any:
    from engine.hosting.prepare_model import default_model_dir
    from engine.hosting.vllm_server import VLLMServer, engine_settings
    from ray_jobs.config.compose import compose

    m = compose([f"model.reproducible={str(reproducible).lower()}"]).model     # the default model, as a run has it
    args, env = engine_settings(m)
    server = VLLMServer(str(default_model_dir()), m.served_name, engine_args=args, env=env, host="127.0.0.1",
                        log_path=log_path)
    server.start()
    server.wait_healthy(m.startup_timeout_s)
    return server


async def run_once(endpoint: Any, tasks: list[Any], index: Any, agent: Any, reverse: bool,
                   stagger_s: float) -> dict[str, dict[str, Any]]:
    """One run of the episodes, all in flight at once (``reverse``: started in the other order,
    ``stagger_s`` apart): per task, its action outputs, article and metric values."""
    from engine.benchmarks.newsagent import BENCHMARK
    from engine.llm import SamplingParams
    from engine.runtime.dispatch import EpisodeRunner, EpisodeSpec, WorkerSetup

    setup = WorkerSetup("newsagent", "qwen", agent, "{}", [endpoint], SamplingParams(), 8, 5, 0.7)
    runner = EpisodeRunner(setup, index)
    order = list(enumerate(tasks))[::-1] if reverse else list(enumerate(tasks))

    async def one(pos: int, i: int, task: Any) -> dict[str, Any]:
        await asyncio.sleep(pos * stagger_s)
        return await runner.run(EpisodeSpec(f"{i:016x}", "h", task, task.task_id, 0))

    results = await asyncio.gather(*(one(pos, i, t) for pos, (i, t) in enumerate(order)))
    out = {}
    for r in results:
        ep = r["episode"]
        if ep["status"] != "ok":
            raise RuntimeError(f"episode {ep['task_id']} failed: {ep['error']}")
        values = BENCHMARK.episode_values([ep])[0]
        out[ep["task_id"]] = {"actions": [s["raw_output"] for s in r["steps"]], "output": ep["output"],
                              "values": values}
    return out


def compare(first: dict[str, dict[str, Any]], other: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Actions (position by position), articles and metric values of ``other`` that differ from
    ``first``'s."""
    n = diff = episodes = articles = values = 0
    for task, a in first.items():
        b = other[task]
        pairs = list(zip(a["actions"], b["actions"]))
        d = sum(x != y for x, y in pairs) + abs(len(a["actions"]) - len(b["actions"]))
        n += max(len(a["actions"]), len(b["actions"]))
        diff += d
        episodes += d > 0
        articles += a["output"] != b["output"]
        values += a["values"] != b["values"]
    return {"actions": n, "actions_differ": diff, "episodes_differ": episodes, "articles_differ": articles,
            "metric_values_differ": values}


def agent_config(max_operations: int, max_retrieved: int = 25) -> Any:
    """Guided JSON actions, no rephrase turn (its long reply would dominate the time)."""
    from engine.benchmarks.newsagent.config import NewsagentAgentConfig

    return NewsagentAgentConfig(guided_json=True, max_operations=max_operations, rephrase=False,
                                max_retrieved_in_observation=max_retrieved)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3, help="runs per mode (the first is the reference)")
    ap.add_argument("--max-operations", type=int, default=4)
    ap.add_argument("--modes", default="off,on")
    args = ap.parse_args()

    from engine.benchmarks.newsagent.data import load_dataset
    from engine.llm import Endpoint
    from indexes.corpus import Document
    from indexes.embeddings import Embedder
    from indexes.service import AsyncLocalIndex, LocalIndex

    data = load_dataset(REPO / "engine/benchmarks/newsagent/sample_data")
    index = AsyncLocalIndex(LocalIndex([Document(o.object_id, o.text, o.date) for o in data.objects], Embedder(),
                                       Path(tempfile.mkdtemp(prefix="determinism-emb-"))))
    tasks = data.tasks[: args.tasks]
    agent = agent_config(args.max_operations)
    rows = []
    for mode in args.modes.split(","):
        server = start_server(mode == "on", Path(tempfile.gettempdir()) / f"determinism-vllm-{mode}.log")
        try:
            ep = Endpoint(server.local_url() + "/v1", server.cmd[server.cmd.index("--served-model-name") + 1])
            t0 = time.monotonic()
            runs = [asyncio.run(run_once(ep, tasks, index, agent, reverse=bool(r % 2), stagger_s=0.7 * (r > 0)))
                    for r in range(args.runs)]
            wall = time.monotonic() - t0
        finally:
            server.stop()
        for r, other in enumerate(runs[1:], 2):
            c = compare(runs[0], other)
            rows.append((mode, r, c, wall / args.runs))
            print(f"reproducible={mode:3s} run {r} vs run 1: {c['actions_differ']}/{c['actions']} actions differ "
                  f"({c['episodes_differ']}/{len(tasks)} episodes), {c['articles_differ']} articles, "
                  f"{c['metric_values_differ']} metric rows; {wall / args.runs:.0f} s per run", flush=True)
    for mode in args.modes.split(","):
        mine = [c for m, _, c, _ in rows if m == mode]
        n, d = sum(c["actions"] for c in mine), sum(c["actions_differ"] for c in mine)
        secs = [s for m, _, _, s in rows if m == mode][0]
        print(f"SUMMARY reproducible={mode}: {d}/{n} actions differ ({100 * d / max(n, 1):.1f}%) over "
              f"{len(mine)} repeated runs of {len(tasks)} episodes; {secs:.0f} s per run")


if __name__ == "__main__":
    main()
