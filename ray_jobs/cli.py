"""``dateline`` command: ``run``, ``estimate`` and ``pairwise`` (Hydra overrides follow), ``report``, ``metrics``,
``tables``, ``convert-realtimeqa``, ``analyst-checklists`` (Hydra overrides follow)."""

from __future__ import annotations

import sys
from typing import Any, Callable

USAGE = """usage:
  dateline run [hydra overrides ...]        run a benchmark (e.g. benchmark=newsagent model=local_cpu)
  dateline estimate [--tasks N] [hydra overrides ...]
                                            run a pilot of N tasks (default 3) per configuration (-m:
                                            per sweep point) into RUN_DIR/_pilot, print the projected
                                            tokens, time and cost of the full run
  dateline metrics RUN_DIR BENCHMARK [judge=J] [score_failures=as_wrong|exclude]
                                            recompute the metrics table from a run's Parquet, one set
                                            per judge (judge=J keeps one: id, id prefix or model name);
                                            failures count as each plan's run.score_failures said
                                            unless score_failures= is given
  dateline tables RUN_DIR [BENCHMARK] [--all-tasks]
                                            the benchmark's paper-layout tables (Markdown) from its
                                            metrics, one set per judge: compared configurations on
                                            the tasks all of them finished (--all-tasks: each over
                                            its own plan), with the counts each number is over
  dateline pairwise [hydra overrides ...]   judge finished runs two at a time (conf/pairwise.yaml),
                                            e.g. runs=[runs/a,runs/b] out=runs/pairwise both_orders=true
  dateline report PATH... [--out DIR]       HTML + Markdown report (intervals, plots, cost) of run
                                            and pairwise directories; --help for options
  dateline repair RUN_DIR [--dry-run]       move shards that cannot be read (run dir or pairwise dir)
                                            into RUN_DIR/_corrupt/; no other row is touched
  dateline convert-realtimeqa SRC OUT       RealTimeQA dumps -> newsagent dataset folder
  dateline analyst-checklists [hydra overrides ...]
                                            build the missing analyst checklists (one per task, fixed
                                            for every system and judge) with the configured judge
"""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "run":
        from ray_jobs.run import hydra_entry

        return _hydra(hydra_entry, rest)
    if cmd == "estimate":
        from ray_jobs.estimate import main as estimate_main

        return estimate_main(rest)
    if cmd == "metrics":
        return metrics(rest)
    if cmd == "pairwise":
        from ray_jobs.pairwise import hydra_entry as pairwise_entry

        return _hydra(pairwise_entry, rest)
    if cmd == "report":
        from ray_jobs.report import main as report_main

        return report_main(rest)
    if cmd == "tables":
        all_tasks = "--all-tasks" in rest
        rest = [a for a in rest if a != "--all-tasks"]
        if len(rest) not in (1, 2):
            sys.stderr.write(USAGE)
            return 2
        return tables(rest[0], rest[1] if len(rest) == 2 else None, all_tasks)
    if cmd == "analyst-checklists":
        from ray_jobs.configs import hydra_main

        given = {a.split("=", 1)[0].lstrip("+~") for a in rest if "=" in a}
        sys.argv = [sys.argv[0], *[f"{g}=analyst" for g in ("benchmark", "agent") if g not in given], *rest]
        hydra_main("config", analyst_checklists)
        return 0
    if cmd == "repair":
        return repair(rest)
    if cmd == "convert-realtimeqa":
        from engine.benchmarks.newsagent import realtimeqa

        return realtimeqa.main(rest)          # its exit code: 2 on bad data
    sys.stderr.write(f"unknown command {cmd!r}\n{USAGE}")
    return 2


def _hydra(entry: Callable[[], None], overrides: list[str]) -> int:
    """Run a Hydra entry point on these overrides (Hydra reads them from ``sys.argv``)."""
    sys.argv = [sys.argv[0], *overrides]
    entry()
    return 0


def metrics(rest: list[str]) -> int:
    """``dateline metrics RUN_DIR BENCHMARK [judge=J]``: recompute and print a run's metrics table."""
    from engine.benchmarks import get_benchmark
    from engine.config import SCORE_FAILURES
    from engine.judges import SELF_JUDGED
    from engine.outcomes import n_cell
    from engine.progress import table
    from engine.runlock import RunDirLock
    from engine.storage import EpisodeStore
    from ray_jobs.run import reduce_metrics

    judge = [x[6:] for x in rest[2:] if x.startswith("judge=")]
    policy = [x.split("=", 1)[1] for x in rest[2:] if x.startswith("score_failures=")]
    if len(rest) != 2 + len(judge) + len(policy) or len(judge) > 1 or len(policy) > 1 \
            or any(p not in SCORE_FAILURES for p in policy):
        sys.stderr.write(USAGE)
        return 2
    store = EpisodeStore(rest[0], get_benchmark(rest[1]).episode_fields)
    with RunDirLock(rest[0], "dateline metrics"):        # it writes the metrics table
        rows = reduce_metrics(store, rest[1], judge[0] if judge else None, policy[0] if policy else None)
    mine = [r for r in rows if r.get("scope") == "all"]
    sys.stdout.write(table(["model", "config", "judge", "metric", "value", "n", "scored/planned"],
                           [(r["model"], r["config_hash"],
                             (r["judge"] or "-") + (f" ({SELF_JUDGED})" if r["self_judged"] else ""),
                             r["metric"], r["value"], r["n"], n_cell(r)) for r in mine]) + "\n")
    for note in sorted({str(r["note"]) for r in mine if r.get("note")}):
        sys.stdout.write(note + "\n")
    if any(r["self_judged"] for r in rows):
        sys.stdout.write(f"**{SELF_JUDGED.upper()}**: rows marked ({SELF_JUDGED}) were graded by the model under "
                         "test; they are not measurements of quality.\n")
    return 0


def repair(rest: list[str]) -> int:
    """``dateline repair RUN_DIR [--dry-run]``: move every shard that cannot be read aside."""
    from engine.runlock import RunDirLock
    from engine.storage import EpisodeStore, PairwiseStore, is_run_dir

    dry = "--dry-run" in rest
    args = [a for a in rest if a != "--dry-run"]
    if len(args) != 1:
        sys.stderr.write(USAGE)
        return 2
    root = args[0]
    pairwise = is_run_dir(root, "comparisons")
    if not pairwise and not is_run_dir(root):
        sys.stderr.write(f"dateline repair: no run dir at {root} (no episodes/ or comparisons/ folder)\n")
        return 2
    with RunDirLock(root, "dateline repair"):
        store = PairwiseStore(root) if pairwise else EpisodeStore(root)
        moved = store.repair(dry_run=dry)
    for path, dest, why in moved:
        sys.stdout.write(f"{'would move' if dry else 'moved'} {path} -> {dest}: {why}\n")
    sys.stdout.write(f"{len(moved)} unreadable shard(s){' found' if dry else ' moved aside'}; every other row is "
                     f"kept{'' if dry or not moved else '. Re-run the same command to run their episodes again'}\n")
    return 0


def analyst_checklists(cfg: Any, session: Any) -> None:
    """Build every missing checklist of the configured analyst tasks with the configured judge
    (the logic: engine/benchmarks/analyst/checklists.py), and say per task what happened."""
    from engine.benchmarks import get_benchmark
    from engine.benchmarks.analyst import checklists
    from engine.config import to_plain, validate
    from engine.judges import judge_identity
    from ray_jobs.judge import judge_endpoints
    from engine.storage import local_root
    from ray_jobs.run import needed_cpus, run_dir

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


def tables(run_dir: str, benchmark: str | None, all_tasks: bool = False) -> int:
    """Print (and write next to the metrics, as tables.md) every table the benchmarks of a run
    directory define, from its metrics Parquet: one set per judge, compared configurations on the
    tasks all of them finished (``all_tasks``: each over its own plan), incomplete ones marked."""
    from pathlib import Path

    import json

    from engine.benchmarks import get_benchmark
    from engine.judges import SELF_JUDGED
    from engine.outcomes import table_rows
    from engine.storage import EpisodeStore

    store = EpisodeStore(run_dir)
    rows = store.metrics().to_pylist()
    names = [benchmark] if benchmark else sorted({r["benchmark"] for r in rows})
    if not rows:
        sys.stderr.write(f"{run_dir}: no metrics yet (run `dateline metrics RUN_DIR BENCHMARK` after a run)\n")
        return 1
    out = []
    for name in names:
        mine = [r for r in rows if r["benchmark"] == name]
        for judge in sorted({r["judge"] or "" for r in mine}):     # one set of tables per judge, never mixed
            these, notes = table_rows([r for r in mine if (r["judge"] or "") == judge], all_tasks)
            bench = get_benchmark(name)
            notes += sorted({f"**{w}** ({r['model']} [{r['config_hash'][:8]}])" for r in these
                             for w in bench.config_warnings(json.loads(r["agent"] or "{}"))})
            by = f" (judge {judge})" if judge else " (no judge)"
            warn = (f"**{SELF_JUDGED.upper()}**: judge-based columns were graded by the model under test.\n\n"
                    if any(r["self_judged"] for r in these) else "")
            below = "".join(f"\n{n}\n" for n in notes)
            for title, md in get_benchmark(name).tables(these).items():
                out.append(f"## {name} {title}{by}\n\n{warn}{md}\n{below}")
    text = "\n".join(out) if out else f"no tables defined for {', '.join(names)}\n"
    (Path(run_dir) / "metrics" / "tables.md").write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
