"""What a pairwise stage compares: the systems it collects from run dirs (their texts per task,
and the human reference), and the plan record (``plan.json``) that says which settings chose them.
The stage (``ray_jobs/judging/pairwise.py``) writes the record; the report (``ray_jobs/outputs/report/
compute_pairwise.py``) reads it and collects the current texts again, so both import this module
and neither imports the other's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.config import Config, PairwiseConfig, to_plain
from engine.errors import ConfigError
from engine.inputs.paths import out_path
from engine.protocol import Benchmark, PairwiseSpec
from engine.scoring.pairwise import REFERENCE, Comparison, labels
from engine.storage import EpisodeStore


def pairwise_spec(bench: Benchmark[Any]) -> PairwiseSpec:
    if bench.pairwise is None:
        raise ConfigError(f"benchmark: {bench.name} defines no pairwise judging")
    return bench.pairwise


def protocols(cfg: PairwiseConfig, bench: Benchmark[Any]) -> list[str]:
    return list(pairwise_spec(bench).protocols) if cfg.protocol == "both" else [cfg.protocol]


def run_roots(runs: Sequence[str]) -> list[Path]:
    """The run dirs a comparison reads (relative: in the working folder), each checked: a ConfigError
    names one that is not a run dir."""
    roots = [out_path(run) for run in runs]
    for root in roots:
        if not (root / "episodes").is_dir():
            raise ConfigError(f"runs: {root} is not a run directory (no episodes/ folder)")
    return roots


def collect(cfg: PairwiseConfig, bench: Benchmark[Any]) -> tuple[list[dict[str, Any]], dict[str, dict[str, str]], dict[str, int]]:
    """(systems, articles, counts): the systems (dicts, see ``engine.scoring.pairwise``), their texts per
    task, and how many episodes were left out and why."""
    systems: dict[str, dict[str, Any]] = {}
    best: dict[tuple[str, str], dict[str, Any]] = {}
    data_by_system: dict[str, str] = {}
    counts = {"episodes": 0, "not_ok": 0, "empty_output": 0, "other_seeds": 0, "filtered": 0}
    for root in run_roots(cfg.runs):
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
