"""``dateline`` command: ``run`` and ``pairwise`` (Hydra overrides follow), ``report``, ``metrics``,
``tables``, ``convert-realtimeqa``."""

from __future__ import annotations

import sys

USAGE = """usage:
  dateline run [hydra overrides ...]        run a benchmark (e.g. benchmark=newsagent model=local_cpu)
  dateline metrics RUN_DIR BENCHMARK        recompute the metrics table from a run's Parquet
  dateline tables RUN_DIR [BENCHMARK]       the benchmark's paper-layout tables (Markdown) from its metrics
  dateline pairwise [hydra overrides ...]   judge finished runs two at a time (conf/pairwise.yaml),
                                            e.g. runs=[runs/a,runs/b] out=runs/pairwise both_orders=true
  dateline report PATH... [--out DIR]       HTML + Markdown report (intervals, plots, cost) of run
                                            and pairwise directories; --help for options
  dateline convert-realtimeqa SRC OUT       RealTimeQA dumps -> newsagent dataset folder
"""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "run":
        from ray_jobs.run import hydra_entry

        sys.argv = [sys.argv[0], *rest]
        hydra_entry()
        return 0
    if cmd == "metrics":
        from engine.benchmarks import get_benchmark
        from engine.storage import EpisodeStore
        from ray_jobs.run import reduce_metrics

        if len(rest) != 2:
            sys.stderr.write(USAGE)
            return 2
        store = EpisodeStore(rest[0], get_benchmark(rest[1]).episode_fields)
        from engine.progress import table

        rows = reduce_metrics(store, rest[1])
        sys.stdout.write(table(["model", "config", "metric", "value", "n"],
                               [(r["model"], r["config_hash"], r["metric"], r["value"], r["n"]) for r in rows]) + "\n")
        return 0
    if cmd == "pairwise":
        from ray_jobs.pairwise import hydra_entry as pairwise_entry

        sys.argv = [sys.argv[0], *rest]
        pairwise_entry()
        return 0
    if cmd == "report":
        from ray_jobs.report import main as report_main

        return report_main(rest)
    if cmd == "tables":
        if len(rest) not in (1, 2):
            sys.stderr.write(USAGE)
            return 2
        return tables(rest[0], rest[1] if len(rest) == 2 else None)
    if cmd == "convert-realtimeqa":
        from engine.benchmarks.newsagent import realtimeqa

        sys.argv = [sys.argv[0], *rest]
        realtimeqa.main()
        return 0
    sys.stderr.write(f"unknown command {cmd!r}\n{USAGE}")
    return 2


def tables(run_dir: str, benchmark: str | None) -> int:
    """Print (and write next to the metrics, as tables.md) every table the benchmarks of a run
    directory define, from its metrics Parquet."""
    from pathlib import Path

    from engine.benchmarks import get_benchmark
    from engine.storage import EpisodeStore

    store = EpisodeStore(run_dir)
    rows = store.metrics().to_pylist()
    names = [benchmark] if benchmark else sorted({r["benchmark"] for r in rows})
    if not rows:
        sys.stderr.write(f"{run_dir}: no metrics yet (run `dateline metrics RUN_DIR BENCHMARK` after a run)\n")
        return 1
    out = []
    for name in names:
        for title, md in get_benchmark(name).tables([r for r in rows if r["benchmark"] == name]).items():
            out.append(f"## {name} {title}\n\n{md}\n")
    text = "\n".join(out) if out else f"no tables defined for {', '.join(names)}\n"
    (Path(run_dir) / "metrics" / "tables.md").write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
