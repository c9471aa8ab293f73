"""Driver: ``dateline pairwise [overrides]`` (conf/pairwise.yaml). Judge the outputs of finished
runs two at a time, as a stage of its own over their Parquet.

1. Systems: every configuration of the benchmark in the given run directories (plus the tasks'
   reference texts), each with its output per task (the lowest seed when there are several).
2. Comparisons: every pair on every task both have an output for, the order seeded
   (``engine.pairwise``); written to ``OUT/comparisons`` before any judging.
3. Judging: the batched judge stage machinery (``ray_jobs.judge.judge_batch``): all verdicts in
   flight at once, malformed ones retried then stored as failures, results flushed as they come
   to ``OUT/judgements``, keyed by (comparison, judge identity, protocol). A re-run judges only
   what is missing; new systems or tasks add comparisons without repeating old ones.
4. A summary (win rates, Bradley-Terry) is printed; ``dateline report OUT`` draws it all.

``OUT/plan.json`` (written with ``systems.json``, before judging) records this run's plan: the
settings that choose it, its systems and its comparison ids. Reports count only verdicts on that
plan's comparisons whose texts are still the systems' current outputs (``engine.pairwise.CurrentPlan``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from dataclasses import asdict
from typing import Any

from engine.benchmarks import get_benchmark
from engine.config import Config, ModelConfig, PairwiseConfig, replica_count, to_plain, validate_pairwise
from engine.errors import ConfigError
from engine.judges import judge_identity, same_model
from engine.pairwise import REFERENCE, Comparison, labels, plan
from engine.paths import repo_path
from engine.protocol import Benchmark, JudgeRequest, PairwiseSpec
from engine.storage import EpisodeStore, PairwiseStore
from ray_jobs.judge import judge_batch, judge_endpoints, settled
from ray_jobs.session import Session

log = logging.getLogger("dateline.pairwise")


def pairwise_spec(bench: Benchmark[Any]) -> PairwiseSpec:
    if bench.pairwise is None:
        raise ConfigError(f"benchmark: {bench.name} defines no pairwise judging")
    return bench.pairwise


def protocols(cfg: PairwiseConfig, bench: Benchmark[Any]) -> list[str]:
    return list(pairwise_spec(bench).protocols) if cfg.protocol == "both" else [cfg.protocol]


def collect(cfg: PairwiseConfig, bench: Benchmark[Any]) -> tuple[list[dict[str, Any]], dict[str, dict[str, str]], dict[str, int]]:
    """(systems, articles, counts): the systems (dicts, see ``engine.pairwise``), their texts per
    task, and how many episodes were left out and why."""
    systems: dict[str, dict[str, Any]] = {}
    best: dict[tuple[str, str], dict[str, Any]] = {}
    data_by_system: dict[str, str] = {}
    counts = {"episodes": 0, "not_ok": 0, "empty_output": 0, "other_seeds": 0, "filtered": 0}
    for run in cfg.runs:
        root = repo_path(run)
        if not (root / "episodes").is_dir():
            raise ConfigError(f"runs: {root} is not a run directory (no episodes/ folder)")
        for r in EpisodeStore(root, bench.episode_fields).episodes().to_pylist():
            if r["benchmark"] != bench.name:
                continue
            counts["episodes"] += 1
            if cfg.systems and not any(r["config_hash"].startswith(p) for p in cfg.systems):
                counts["filtered"] += 1
                continue
            if r["status"] != "ok":
                counts["not_ok"] += 1
                continue
            sid = f"{r['model']}:{r['config_hash'][:8]}"
            systems.setdefault(sid, {"system_id": sid, "model": r["model"], "config_hash": r["config_hash"],
                                     "run_dir": str(root), "agent": r["agent"], "weights_id": r["weights_id"] or ""})
            data_by_system.setdefault(sid, r["data"] or "")
            key = (sid, r["task_id"])
            counts["other_seeds"] += key in best
            if key not in best or r["seed"] < best[key]["seed"]:
                best[key] = r
    articles: dict[str, dict[str, str]] = {}
    for (sid, task_id), r in sorted(best.items()):
        counts["empty_output"] += not (r["output"] or "").strip()
        articles.setdefault(sid, {})[task_id] = r["output"] or ""
    if not systems:
        raise ConfigError(f"runs: no finished {bench.name} episodes in {', '.join(cfg.runs)}")
    if cfg.include_reference:
        ref: dict[str, str] = {}
        for data in sorted(set(data_by_system.values())):
            if not data:
                continue
            bcfg = bench.benchmark_schema(**(json.loads(data) | {"limit": None}))
            for task in bench.load_tasks(Config(benchmark=bcfg, agent=bench.agent_schema())):
                text = pairwise_spec(bench).reference(task)
                if text.strip():
                    ref.setdefault(task.task_id, text)
        if ref:
            systems[REFERENCE] = {"system_id": REFERENCE, "model": "human", "config_hash": "", "run_dir": "",
                                  "agent": ""}
            articles[REFERENCE] = ref
    tasks = sorted({t for s, a in articles.items() if s != REFERENCE for t in a})
    if cfg.limit is not None:
        tasks = tasks[: cfg.limit]
    keep = set(tasks)
    articles = {s: {t: x for t, x in a.items() if t in keep} for s, a in articles.items()}
    names = labels(list(systems.values()))
    rows = [dict(s, label=names[s["system_id"]]) for s in sorted(systems.values(), key=lambda s: s["system_id"])]
    return rows, articles, counts


PLAN_FILE = "plan.json"
PLAN_SETTINGS = ("benchmark", "runs", "systems", "include_reference", "seed", "both_orders", "limit")


def plan_record(cfg: PairwiseConfig, systems: list[dict[str, Any]], comps: list[Comparison]) -> dict[str, Any]:
    """What ``plan.json`` holds: the settings that choose the plan, its systems and comparison ids."""
    plain = to_plain(cfg)
    return {"config": {k: plain[k] for k in PLAN_SETTINGS}, "systems": [s["system_id"] for s in systems],
            "comparisons": sorted(c.comparison_id for c in comps)}


def plan_config(settings: dict[str, Any]) -> PairwiseConfig:
    """A config that collects what a recorded plan collected (``plan_record``'s settings, or the
    ``config`` of a ``pairwise-*.json``), with ``limit`` off so every current text is read."""
    return PairwiseConfig(benchmark=str(settings.get("benchmark") or "newsagent"),
                          runs=[str(r) for r in settings.get("runs") or []],
                          systems=[str(x) for x in settings.get("systems") or []],
                          include_reference=bool(settings.get("include_reference", True)), limit=None)


def run_pairwise(cfg: PairwiseConfig, session: Session | None = None) -> dict[str, Any]:
    from engine.runlock import RunDirLock

    validate_pairwise(cfg)
    with RunDirLock(repo_path(cfg.out), "dateline pairwise"):        # one writer per pairwise dir
        return _run_pairwise(cfg, session)


def _run_pairwise(cfg: PairwiseConfig, session: Session | None) -> dict[str, Any]:
    bench = get_benchmark(cfg.benchmark)
    spec = pairwise_spec(bench)
    t0 = time.time()
    systems, articles, counts = collect(cfg, bench)
    comps, skipped = plan(articles, cfg.seed, cfg.both_orders)
    store = PairwiseStore(repo_path(cfg.out))
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
                            # by name: engine/judges.py same_model): it judges pairs it is in
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
    store.write_json(f"pairwise-{time.strftime('%Y%m%d-%H%M%S')}.json", info)
    from ray_jobs.report import pairwise_summary

    sys.stderr.write(pairwise_summary(store.root) + "\n")
    return info


def hydra_entry() -> None:
    from ray_jobs.configs import hydra_main

    hydra_main("pairwise", lambda cfg, session: run_pairwise(cfg, session))


if __name__ == "__main__":
    hydra_entry()
