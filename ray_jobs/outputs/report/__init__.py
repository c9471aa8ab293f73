"""``dateline report PATH... [--out DIR]``: one self-contained HTML page (plots embedded, and
also saved as PNG next to it) and the same tables as Markdown, for any mix of run directories
and pairwise directories.

Every number that estimates something carries a 95% interval (``engine.scoring.stats.interval``: exact for
a share with one 0/1 value per task, else a bootstrap that resamples tasks, and none, said so, with
too few tasks) and the count it rests on. Per run directory and benchmark: metrics per
configuration, paired tests between configurations on the benchmark's primary metrics, its
paper-layout tables, tokens and cost per episode, and the benchmark's curve (livenews: accuracy
vs search budget) or per-task chart (analyst: checklist by task). Per pairwise directory: the
win-rate matrix (heatmap), Bradley-Terry ratings, dimension-wise win/tie/loss shares, sign
tests, position bias, judge failures, and agreement with human labels when a file is given.

Computing and rendering are apart: ``compute_runs`` (with ``costs``; ``leaderboard`` for several
run dirs together) and ``compute_pairwise`` turn directories into sections (``sections``:
dataclasses of numbers, estimates and labels; prices by ``engine.budget.cost``);
``render_runs``, ``render_pairwise`` and ``plots`` put sections on a ``page.Page`` (Markdown,
HTML, PNG).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from engine.budget.cost import Prices, parse_overrides
from engine.errors import CliError, DataError
from engine.runtime.logs import configure as configure_logging
from ray_jobs.outputs.report.compute_pairwise import (
    PairwiseSection,
    load_verdicts,
    pairwise_section,
    read_human,
    sign_tests,
    stage_summaries,
)
from ray_jobs.outputs.report.compute_runs import run_sections
from ray_jobs.outputs.report.headline import headlines, render_headline, render_provenance
from ray_jobs.outputs.report.leaderboard import cross_run_section
from ray_jobs.outputs.report.page import Page
from ray_jobs.outputs.report.plots import plot_names
from ray_jobs.outputs.report.render_pairwise import render_pairwise, summary_text
from ray_jobs.outputs.report.render_runs import render_benchmark, render_cross_runs
from ray_jobs.outputs.report.sections import BenchmarkSection

__all__ = ["build", "main", "pairwise_summary", "read_human", "sign_tests", "load_verdicts", "plot_names"]


def build(paths: Sequence[str | Path], out: Path, n_boot: int = 1000, human: Path | None = None,
          prices: Mapping[str, Prices] | None = None, title: str = "dateline report", judge: str | None = None,
          all_tasks: bool = False, score_failures: str | None = None, episodes: int = 500) -> Path:
    """Write ``report.html``, ``report.md`` and the figures of ``paths`` to ``out``; the HTML's path.
    Every path is checked before anything is written."""
    for p in map(Path, paths):
        if not (p / "comparisons").is_dir() and not (p / "episodes").is_dir():
            raise DataError(p, None, None, "no run dir here (no episodes/ folder) and no pairwise dir (no "
                                           "comparisons/ folder); nothing was written")
    out.mkdir(parents=True, exist_ok=True)
    page = Page(out)
    # everything is computed first, then rendered: the summary and provenance lead the page,
    # then the leaderboards, then each run dir's sections and the pairwise ones
    run_dirs: dict[str, list[Path]] = {}
    parts: list[BenchmarkSection | PairwiseSection] = []
    for p in map(Path, paths):
        if (p / "comparisons").is_dir():
            parts.append(pairwise_section(p, n_boot, human, prices))
        else:
            for section in run_sections(p, n_boot, prices or {}, judge, all_tasks, score_failures):
                parts.append(section)
                run_dirs.setdefault(section.name, []).append(p)
    # several run dirs of one benchmark: one table across all their configurations, and a leaderboard
    crosses = [cross_run_section(roots, name, n_boot, judge, all_tasks, score_failures)
               for name, roots in run_dirs.items() if len(roots) > 1]
    render_headline(page, headlines([s for s in parts if isinstance(s, BenchmarkSection)]))
    if run_dirs:
        render_provenance(page, list(dict.fromkeys(r for roots in run_dirs.values() for r in roots)))
    for c in crosses:
        render_cross_runs(page, c)
    for s in parts:
        if isinstance(s, BenchmarkSection):
            render_benchmark(page, s, episodes)
        else:
            render_pairwise(page, s)
    return page.write(title)


def pairwise_summary(root: Path) -> str:
    """Markdown: win rates and Bradley-Terry per judge and protocol (for the end of a stage)."""
    return summary_text(stage_summaries(root))


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """``dateline report``'s options (its subparser in ray_jobs/cli/main.py, and :func:`main`)."""
    ap.add_argument("paths", nargs="+", help="run directories and/or pairwise directories")
    ap.add_argument("--out", help="output folder (default: the first path's report/)")
    ap.add_argument("--boot", type=int, default=1000, help="bootstrap resamples (default 1000)")
    ap.add_argument("--human", help="JSON Lines of human preferences for agreement (pairwise)")
    ap.add_argument("--price", action="append", default=[], metavar="MODEL=IN,OUT[,HOUR[,UNITS]]",
                    help="price a model (overrides what its runs recorded): a hosted model by its name, an "
                         "API judge by its judge.name or judge.model; repeatable")
    ap.add_argument("--judge", help="show only this judge's numbers (its id, an id prefix, or its model name); "
                                    "default: every judge, each in its own block")
    ap.add_argument("--all-tasks", action="store_true",
                    help="each configuration over its own plan (default: compared configurations on the tasks "
                         "every one of them finished)")
    ap.add_argument("--score-failures", choices=("as_wrong", "exclude"),
                    help="what planned episodes without a scored result count as (default: what each run's "
                         "run.score_failures said)")
    ap.add_argument("--episodes", type=int, default=500, metavar="N",
                    help="an HTML page per episode (its transcript, output, reference, metrics and verdicts), at most "
                         "N per configuration; 0: none (default 500)")
    ap.add_argument("--title", default="dateline report")


def older_forms(argv: Sequence[str]) -> list[str]:
    """``judge=X`` as at metrics time (``dateline metrics RUN judge=X``) is ``--judge X``."""
    return [f"--judge={x[6:]}" if x.startswith("judge=") else x for x in argv]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dateline report", description=(__doc__ or "").split("\n\n")[0])
    add_arguments(ap)
    try:
        return run(ap.parse_args(older_forms(argv or [])))
    except (CliError, DataError) as e:
        sys.stderr.write(f"dateline report: {e}\n")
        return 2


def run(a: argparse.Namespace) -> int:
    """Build the report the parsed options ask for; a mistake in them is a CliError (one line, exit 2)."""
    try:
        prices = parse_overrides(a.price)
    except ValueError as e:
        raise CliError(str(e)) from e
    out = Path(a.out) if a.out else Path(a.paths[0]) / "report"
    configure_logging()
    path = build(a.paths, out, a.boot, Path(a.human) if a.human else None, prices, a.title, a.judge, a.all_tasks,
                 a.score_failures, a.episodes)
    sys.stdout.write(f"{path}\n{out / 'report.md'}\n")
    return 0
