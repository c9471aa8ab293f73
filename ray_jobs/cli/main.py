"""The ``dateline`` command: subcommands on argparse, each with its own ``--help``.

``run``, ``build``, ``estimate``, ``pairwise`` and ``analyst-checklists`` take Hydra overrides
(``GROUP=OPTION``, ``FIELD=VALUE``, ``-m`` for a sweep); ``dateline run --help`` lists the
user-facing config groups, their options and every field with its description. ``metrics``,
``tables``, ``report`` and ``show`` read a run dir and never create anything where there is none.
``doctor`` says what this machine gives a CPU replica and probes the model's speed here.
Results go to stdout, logs to stderr (``--log-level``); a ConfigError or DataError prints one
line naming the field or file and exits with status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from engine.errors import CliError
from engine.provenance import dateline_version as version
from engine.runtime.logs import configure as configure_logging
from ray_jobs.outputs import commands

HYDRA_COMMANDS = ("run", "build", "estimate", "pairwise", "analyst-checklists")
HYDRA_HELP: dict[str, tuple[str, list[tuple[str, str]]]] = {}    # (what it does, its own options) per command
OWN_PARSERS = ("report", "convert-realtimeqa")        # their options are defined with their code
REPORT_HELP = ("HTML + Markdown report of run and pairwise dirs: metrics with intervals, paired tests, plots, a "
               "page per episode (sortable, searchable tables)")


class OneLineParser(argparse.ArgumentParser):
    """argparse, with a mistake on one line (what is wrong, and where the help is) and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see `{self.prog} --help`)\n")


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="dateline", description="Distributed batch evaluation of search-and-write LLM "
                                "agents (newsagent, livenews, analyst). `dateline COMMAND --help` for each command.")
    p.add_argument("--version", action="version", version=f"dateline {version()}")
    p.add_argument("--log-level", default=os.environ.get("DATELINE_LOG_LEVEL", "INFO"),
                   choices=("DEBUG", "INFO", "WARNING", "ERROR"), help="logs on stderr from this level (default INFO)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    _hydra_commands(sub)
    _run_dir_commands(sub)
    _other_commands(sub)
    return p


def _hydra_commands(sub: Any) -> None:
    """The commands that take Hydra overrides."""
    def hydra_cmd(name: str, help_: str, extra: Callable[[argparse.ArgumentParser], Any] | None = None) -> None:
        c = sub.add_parser(name, help=help_, description=help_, add_help=False)
        c.add_argument("-h", "--help", action="store_true", help="the config groups, options and fields")
        if extra:
            extra(c)
        c.add_argument("overrides", nargs=argparse.REMAINDER, help="Hydra overrides: GROUP=OPTION, FIELD=VALUE, -m")
        HYDRA_HELP[name] = (help_, [(" ".join([a.option_strings[-1], *([a.metavar or a.dest.upper()] if a.nargs != 0
                                                                         else [])]), a.help or "")
                                    for a in c._actions if a.option_strings and a.dest not in ("help", "overrides")])

    hydra_cmd("run", "run a benchmark: generate what is missing, judge, reduce metrics (e.g. benchmark=livenews "
              "agent=livenews); exit status 1 when an episode failed (run.fail_on_error) or the run stopped at "
              "run.max_failures")
    hydra_cmd("build", "build benchmark data with models (e.g. build=livenews: fresh questions from dated articles, "
              "drafted by `model`, verified by judge.hosted_model), then publish the release (build.out)")
    hydra_cmd("estimate", "run a pilot of --tasks N tasks per configuration (-m: per sweep point) into RUN_DIR/_pilot "
              "and print the projected tokens, time and cost of the full run",
              lambda c: c.add_argument("--tasks", type=int, default=3, metavar="N", help="pilot tasks per configuration (default 3)"))
    hydra_cmd("pairwise", "judge finished runs two at a time (conf/pairwise.yaml), e.g. runs=[runs/a,runs/b] "
              "out=runs/pairwise both_orders=true")
    hydra_cmd("analyst-checklists", "build the missing analyst checklists (one per task, fixed for every system and "
              "judge) with the configured judge")


def _run_dir_commands(sub: Any) -> None:
    """The commands that read a run dir."""
    m = sub.add_parser("metrics", help="compute a run dir's metrics (one set per judge) and print them",
                       description="Compute the metrics of RUN_DIR from its Parquet, one set per judge, and print "
                                   "them. The flags change this output only: nothing is written, and `dateline "
                                   "tables`, the report and the API keep the default view.")
    m.add_argument("run_dir")
    m.add_argument("benchmark", nargs="?", help="only this benchmark's episodes (default: every benchmark the run dir "
                                                "holds; one it does not hold is an error)")
    m.add_argument("--judge", help="keep one judge: its id, an id prefix or its model name")
    m.add_argument("--score-failures", choices=("as_wrong", "exclude"),
                   help="what planned episodes without a scored result count as (default: each plan's)")
    m.add_argument("legacy", nargs="*", default=[], help=argparse.SUPPRESS)        # judge=J score_failures=X, as before

    t = sub.add_parser("tables", help="the benchmarks' paper-layout tables (Markdown) from a run dir's metrics",
                       description="Paper-layout tables from RUN_DIR's metrics, one set per judge: compared "
                                   "configurations on the tasks all of them finished, with the counts each number "
                                   "is over.")
    t.add_argument("run_dir")
    t.add_argument("benchmark", nargs="?", help="only this benchmark's tables (default: every benchmark the run dir "
                                                "holds; one it does not hold is an error)")
    t.add_argument("--all-tasks", action="store_true", help="each configuration over its own plan")

    # its own options come from ray_jobs/report (imported only for this command: see _own_parser)
    sub.add_parser("report", help=REPORT_HELP, add_help=False).add_argument("args", nargs=argparse.REMAINDER)

    sh = sub.add_parser("show", help="list a run dir's episodes, or print one episode's transcript",
                        description="Without EPISODE: the episodes of RUN_DIR. With EPISODE (an id or a prefix): its "
                                    "transcript, every model call turn by turn with the tool results, the final "
                                    "output next to the reference, its metrics and the judges' verdicts.")
    sh.add_argument("run_dir")
    sh.add_argument("episode", nargs="?", help="an episode id (or a prefix of one), or a task id")
    sh.add_argument("--full", action="store_true", help="whole messages (default: long ones cut in the middle)")
    sh.add_argument("--status", help="list only episodes with this status (ok, error, budget_exhausted)")
    sh.add_argument("--config", help="only this configuration (a config hash prefix): in the list, or to pick a task's episode")

    rp = sub.add_parser("repair", help="move shards that cannot be read into RUN_DIR/_corrupt/ (no other row touched)")
    rp.add_argument("run_dir")
    rp.add_argument("--dry-run", action="store_true", help="only say which")

    ex = sub.add_parser("export", help="a run dir into inspect's eval logs (`inspect view`), MLflow or W&B",
                        description="--to inspect: one inspect_ai eval log per configuration of RUN_DIR, a sample "
                                    "per episode (messages, tool calls, scores, the judges' explanations, tokens, "
                                    "errors, provenance), for `inspect view`. --to mlflow / wandb: each "
                                    "configuration as a run of an experiment tracker: its parameters, its metrics "
                                    "(with 95% intervals and counts), the transcripts as an artifact and (W&B) a "
                                    "per-sample table.")
    ex.add_argument("run_dir")
    ex.add_argument("--to", required=True, choices=("inspect", "mlflow", "wandb"))
    ex.add_argument("--log-dir", help="where the inspect logs go (default: RUN_DIR/_inspect)")
    ex.add_argument("--experiment", default="dateline", help="experiment (MLflow) or project (W&B) name")
    ex.add_argument("--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI or ./mlruns)")
    ex.add_argument("--dir", help="where W&B puts its wandb/ folder (default: the current directory); WANDB_MODE is honoured")


def _other_commands(sub: Any) -> None:
    rr = sub.add_parser("race-replay", help="replay racing over completed run dirs under random task orders: "
                        "top-1 / top-3 agreement and episodes saved",
                        description="What racing (engine/scoring/racing.py) would have decided on completed run "
                                    "dirs (every configuration x every task), under random task orders.")
    rr.add_argument("run_dirs", nargs="+", help="completed run dirs (every configuration x every task)")
    rr.add_argument("--metric", help="the metric raced on (default: the benchmark's first primary metric)")
    rr.add_argument("--judge", help="the judge view (its id, a prefix or its model name) for judged metrics")
    rr.add_argument("--orders", type=int, default=1000, help="random task orders to replay (default 1000)")
    rr.add_argument("--alpha", type=float, default=0.05, help="error level of the race (default 0.05)")
    rr.add_argument("--min-tasks", type=int, default=10, help="no decision before this many tasks (default 10)")
    rr.add_argument("--seed", type=int, default=0, help="seed of the random orders")

    sub.add_parser("convert-realtimeqa", help="RealTimeQA dumps -> a newsagent dataset folder",
                   add_help=False).add_argument("args", nargs=argparse.REMAINDER)

    dr = sub.add_parser("doctor", help="what this machine gives a CPU replica (flags, cores, memory, dtype, threads, "
                        "KV cache) and a ~10 s probe of the model's prompt and decode tokens/s",
                        description="What was detected (CPU flags, usable cores, memory available), what a replica "
                                    "of the configured model would run with here and why, then a ~10 s probe of the "
                                    "real vLLM server (prompt and decode tokens/s) and what it means for command 1. "
                                    "Exit status 2 when the model is missing.")
    dr.add_argument("--no-probe", action="store_true", help="do not start the server")
    dr.add_argument("overrides", nargs="*", help="Hydra overrides of the config, as for `dateline run` (model=..., "
                                                   "++model.engine_args.dtype=float32)")


def _split_hydra(argv: list[str]) -> tuple[list[str], list[str]] | None:
    """For a Hydra command: (what argparse parses: global options, the command and its own
    options), (the Hydra overrides, in order, ``-m`` included); None for other commands. argparse
    would take an override that starts with ``-`` (``-m``, ``--multirun``) after an option for an
    option of its own."""
    i = _command_at(argv)
    if i >= len(argv) or argv[i] not in HYDRA_COMMANDS:
        return None
    cmd, own, overrides = argv[i], [], []
    rest = iter(argv[i + 1:])
    for t in rest:
        if t in ("-h", "--help") or (cmd == "estimate" and t.startswith("--tasks=")):
            own.append(t)
        elif cmd == "estimate" and t == "--tasks":
            own += [t, next(rest, "")]
        else:
            overrides.append(t)
    return argv[:i + 1] + own, overrides


def _command_at(argv: list[str]) -> int:
    """Where the command is in ``argv`` (after the global options)."""
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] == "--log-level" else 1
    return i


def _own_parser(cmd: str) -> tuple[argparse.ArgumentParser, Callable[[list[str]], list[str]]]:
    """The parser of a command whose options live with its module (imported only when it runs, so
    that ``dateline`` starts fast), and what rewrites older forms of its arguments first."""
    if cmd == "report":
        from ray_jobs.outputs import report

        p = OneLineParser(prog="dateline report", description=REPORT_HELP)
        report.add_arguments(p)
        p.set_defaults(own_run=report.run)
        return p, report.older_forms
    else:
        from engine.benchmarks.newsagent import realtimeqa

        p = OneLineParser(prog=f"dateline {cmd}", description=realtimeqa.DESCRIPTION)
        realtimeqa.add_arguments(p)
        p.set_defaults(own_run=realtimeqa.run)          # its exit code: 2 on bad data
        return p, list


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = parser()
    split = _split_hydra(argv)
    i = _command_at(argv)
    if split is not None:
        a = p.parse_args(split[0])
        a.overrides = split[1]
    elif i < len(argv) and argv[i] in OWN_PARSERS:
        a = p.parse_args(argv[:i + 1])
        own, prepare = _own_parser(argv[i])
        vars(a).update(vars(own.parse_args(prepare(argv[i + 1:]))))
    else:
        a = p.parse_args(argv)
    _logging(a.log_level)
    try:
        return _dispatch(a)
    except CliError as e:
        sys.stderr.write(f"dateline {a.command}: {e}\n")
        return 2
    except Exception as e:        # dateline's own errors say what to fix in one line
        from engine.errors import ConfigError, DataError
        from engine.runtime.runlock import RunDirLocked

        if isinstance(e, (ConfigError, DataError, RunDirLocked)):
            sys.stderr.write(f"dateline {a.command}: {type(e).__name__}: {e}\n")
            return 2
        raise


def _logging(level: str) -> None:
    os.environ["DATELINE_LOG_LEVEL"] = level
    # no colour codes in redirected output (Ray colours its workers' log prefixes)
    if not sys.stderr.isatty():
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")
    configure_logging(level)


def _dispatch(a: argparse.Namespace) -> int:
    cmd = a.command
    if cmd in HYDRA_COMMANDS:
        from ray_jobs.config.help import config_help
        from ray_jobs.config.overrides import check_overrides

        overrides = list(a.overrides)
        name = "pairwise" if cmd == "pairwise" else "config"
        if a.help or "--help" in overrides or "-h" in overrides:
            description, options = HYDRA_HELP[cmd]
            sys.stdout.write(config_help(name, [o for o in overrides if o not in ("-h", "--help")], f"dateline {cmd}",
                                         description, options))
            return 0
        # a misspelt field, group or option: one line, exit 2, before anything starts or is created
        check_overrides(name, [*(["benchmark=analyst", "agent=analyst"] if cmd == "analyst-checklists" else []),
                               *overrides])
        if cmd == "run":
            from ray_jobs.run.entry import hydra_entry

            return _hydra(hydra_entry, overrides)
        if cmd == "build":
            from ray_jobs.build.entry import hydra_build

            return _hydra(hydra_build, overrides)
        if cmd == "estimate":
            from ray_jobs.run.estimate import main as estimate_main

            return estimate_main([f"--tasks={a.tasks}", *overrides])
        if cmd == "pairwise":
            from ray_jobs.judging.pairwise import hydra_entry as pairwise_entry
            from ray_jobs.outputs.report import pairwise_summary

            def summary(info: dict[str, Any]) -> None:
                sys.stderr.write(pairwise_summary(info["out"]) + "\n")

            return _hydra(lambda: pairwise_entry(summary), overrides)
        from ray_jobs.build.checklists import analyst_checklists
        from ray_jobs.config.harness import hydra_main

        given = {o.split("=", 1)[0].lstrip("+~") for o in overrides if "=" in o}
        sys.argv = [sys.argv[0], *[f"{g}=analyst" for g in ("benchmark", "agent") if g not in given], *overrides]
        hydra_main("config", analyst_checklists)
        return 0
    if cmd == "metrics":
        return commands.metrics(a)
    if cmd == "tables":
        return commands.tables(a.run_dir, a.benchmark, a.all_tasks)
    if cmd in OWN_PARSERS:
        return int(a.own_run(a))
    if cmd == "show":
        return commands.show(a)
    if cmd == "repair":
        return commands.repair(a.run_dir, a.dry_run)
    if cmd == "export":
        from ray_jobs.outputs.export import export

        for line in export(a.run_dir, a.to, a.experiment, tracking_uri=a.tracking_uri, wandb_dir=a.dir,
                           log_dir=a.log_dir):
            sys.stdout.write(line + "\n")
        return 0
    if cmd == "doctor":
        from ray_jobs.cluster.doctor import DoctorError, doctor

        try:
            return doctor(a.overrides, probe=not a.no_probe, say=lambda line: sys.stdout.write(line + "\n"))
        except DoctorError as e:
            raise CliError(str(e)) from e
    if cmd == "race-replay":
        from ray_jobs.outputs.race_replay import run as race_replay

        return race_replay(a)
    raise CliError(f"unknown command {cmd!r}")


def _hydra(entry: Callable[[], None], overrides: list[str]) -> int:
    """Run a Hydra entry point on these overrides (Hydra reads them from ``sys.argv``)."""
    sys.argv = [sys.argv[0], *overrides]
    try:
        entry()
    except SystemExit as e:             # the run's honest exit status (ray_jobs.run.results.exit_code), 130 / 143
        return int(e.code or 0) if not isinstance(e.code, str) else 1      # after a signal (ray_jobs/cluster/signals.py)
    except KeyboardInterrupt:           # Ctrl-C before the entry point armed its own handlers
        sys.stderr.write("dateline: stopped by SIGINT before it started; the same command starts it\n")
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
