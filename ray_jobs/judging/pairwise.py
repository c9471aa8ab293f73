"""Driver: ``dateline pairwise [overrides]`` (conf/pairwise.yaml). Judge the outputs of finished
runs two at a time, as a stage of its own over their Parquet.

1. Systems: every configuration of the benchmark in the given run directories (plus the tasks'
   reference texts), each with its output per task (the lowest seed when there are several).
2. Comparisons: every pair on every task both have an output for, the order seeded
   (``engine.scoring.pairwise``); written to ``OUT/comparisons`` before any judging.
3. Judging: the batched judge stage machinery (``ray_jobs.judging.stream.judge_batch``): all verdicts in
   flight at once, malformed ones retried then stored as failures, results flushed as they come
   to ``OUT/judgements``, keyed by (comparison, judge identity, protocol). A re-run judges only
   what is missing; new systems or tasks add comparisons without repeating old ones.
4. A summary (win rates, Bradley-Terry) is printed; ``dateline report OUT`` draws it all.

``OUT/plan.json`` (written with ``systems.json``, before judging) records this run's plan: the
settings that choose it, its systems and its comparison ids. Reports count only verdicts on that
plan's comparisons whose texts are still the systems' current outputs (``engine.scoring.pairwise.CurrentPlan``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from engine.benchmarks import get_benchmark
from engine.config import ModelConfig, PairwiseConfig, replica_count, to_plain, validate_pairwise
from engine.inputs.paths import out_path
from engine.protocol import JudgeRequest
from engine.scoring.judges import judge_identity, same_model
from engine.scoring.pairwise import plan
from engine.scoring.pairwise_plan import PLAN_FILE, collect, pairwise_spec, plan_record, protocols, run_roots
from engine.storage import PairwiseStore
from ray_jobs.cluster.session import Session
from ray_jobs.judging.stream import judge_batch, judge_endpoints, settled

log = logging.getLogger("dateline.pairwise")


def run_pairwise(cfg: PairwiseConfig, session: Session | None = None) -> dict[str, Any]:
    from engine.runtime.runlock import RunDirLock

    validate_pairwise(cfg)
    run_roots(cfg.runs)                 # a refused comparison creates nothing: checked before the out dir's lock
    with RunDirLock(out_path(cfg.out), "dateline pairwise"):        # one writer per pairwise dir
        return _run_pairwise(cfg, session)


def _run_pairwise(cfg: PairwiseConfig, session: Session | None) -> dict[str, Any]:
    bench = get_benchmark(cfg.benchmark)
    spec = pairwise_spec(bench)
    t0 = time.time()
    systems, articles, counts = collect(cfg, bench)
    comps, skipped = plan(articles, cfg.seed, cfg.both_orders)
    store = PairwiseStore(out_path(cfg.out))
    known = {c["comparison_id"] for c in store.comparisons()}
    new = [dict(asdict(c), benchmark=bench.name) for c in comps if c.comparison_id not in known]
    store.write_comparisons(new)
    store.write_json("systems.json", systems)
    store.write_json(PLAN_FILE, plan_record(cfg, systems, comps))
    judge = judge_identity(cfg, spec.prompt_version, {"guided_json": cfg.guided_json, "max_tokens": cfg.max_tokens})
    judge_id = judge.id
    done = settled(store, judge_id)
    requests = []
    for c in comps:
        for proto in protocols(cfg, bench):
            if proto in done.get(c.comparison_id, {}):
                continue
            msgs = spec.messages(proto, articles[c.first][c.task_id], articles[c.second][c.task_id])
            requests.append(JudgeRequest(c.comparison_id, proto, msgs, cfg.max_tokens,
                                         spec.json_schema(proto) if cfg.guided_json else None))
    info: dict[str, Any] = {"systems": len(systems), "comparisons": len(comps), "new_comparisons": len(new),
                            "skipped_pairs": len(skipped), "episodes": counts, "judge": judge_id,
                            "judge_model": judge.model, "requests": len(requests),
                            # the judge's model is one of the compared systems (by what it serves, then
                            # by name: engine/scoring/judges.py same_model): it judges pairs it is in
                            "self_judged": same_model(judge.weights, [judge.model],
                                                      [s.get("weights_id") for s in systems],
                                                      [s["model"] for s in systems])}
    log.info("%d systems, %d comparisons (%d new), %d pair-tasks skipped (missing text), %d verdicts to judge",
             len(systems), len(comps), len(new), len(skipped), len(requests))
    own = session is None
    session = session or Session()
    try:
        if requests:
            def hosted(m: ModelConfig) -> list[Any]:
                session.ensure_ray(cfg, replica_count(m) * m.num_cpus if m.kind == "vllm" else 0)
                return session.pool(m, store.root / "logs")

            t1 = time.time()
            endpoints = judge_endpoints(cfg, hosted)
            info["judge_startup_s"] = round(time.time() - t1, 1)
            replica_s0 = session.replica_seconds()
            stats = asyncio.run(judge_batch(requests, endpoints, cfg.judge, spec.parse, judge,
                                            store.write_judgements))
            info["judge_stats"] = stats
            info["replica_seconds"] = session.replica_seconds() - replica_s0
    finally:
        if own:
            session.close()
    info["wall_s"] = round(time.time() - t0, 1)
    info["config"] = to_plain(cfg)
    info["out"] = str(store.root)
    store.write_json(f"pairwise-{time.strftime('%Y%m%d-%H%M%S')}.json", info)
    return info


def hydra_entry(done: Callable[[dict[str, Any]], object] | None = None) -> None:
    """``dateline pairwise``: each composed comparison judged; ``done(info)`` after each (the CLI
    prints the summary from the report's module: a judging job imports no output)."""
    from ray_jobs.config.harness import hydra_main

    def body(cfg: PairwiseConfig, session: Session) -> None:
        info = run_pairwise(cfg, session)
        if done is not None:
            done(info)

    hydra_main("pairwise", body)


if __name__ == "__main__":
    hydra_entry()
