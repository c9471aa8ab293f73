"""``dateline analyst-checklists``: draft every missing checklist of the configured analyst tasks with
the configured judge (the paper's figures 15 and 16; the logic is ``engine/benchmarks/analyst/checklists.py``).
The first builder: a job whose model calls make benchmark data."""

from __future__ import annotations

import sys
from typing import Any


def analyst_checklists(cfg: Any, session: Any) -> None:
    """Build every missing checklist of the configured analyst tasks with the configured judge
    (the logic: engine/benchmarks/analyst/checklists.py), and say per task what happened."""
    from engine.benchmarks import get_benchmark
    from engine.benchmarks.analyst import checklists
    from engine.config import to_plain, validate
    from engine.scoring.judges import judge_identity
    from engine.storage import local_root
    from ray_jobs.config.point import run_dir
    from ray_jobs.judging.stream import judge_endpoints
    from ray_jobs.run.planning import needed_cpus

    validate(cfg)
    b = cfg.benchmark
    if b.name != "analyst" or cfg.judge.kind == "none":
        raise SystemExit("analyst-checklists: needs benchmark=analyst and a judge to write the checklists "
                         "(judge=openai_compatible, judge=hosted_model, or judge=self: the model under test writes "
                         "them, and every table flags its scores)")
    bench = get_benchmark("analyst")
    tasks = [t for t in bench.load_tasks(cfg) if not t.checklist]
    if not tasks:
        sys.stdout.write("every task has a checklist\n")
        return

    def hosted(m: Any) -> Any:
        session.ensure_ray(cfg, needed_cpus(cfg, bench))
        return session.pool(m, local_root(run_dir(cfg)) / "logs")       # a URI run dir: its local folder

    ident = judge_identity(cfg)
    who = {"judge": ident.id, "model": ident.model, "kind": ident.kind, "weights": ident.weights,
           "temperature": cfg.judge.temperature, "judge_config": to_plain(cfg.judge)}
    results = checklists.build(tasks, b, judge_endpoints(cfg, hosted), cfg.judge, who)
    for r in results:
        sys.stdout.write(f"{r.task_id}: {r.status} {r.path} {r.detail}\n")
    if any(r.status in ("failed", "endpoint_error") for r in results):
        raise SystemExit(1)
