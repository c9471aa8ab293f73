"""The commands of ``dateline`` that read a run dir (``metrics``, ``tables``, ``show``, ``repair``)
and ``analyst-checklists``: what each prints. ``ray_jobs/cli/main.py`` parses the command line and
dispatches here."""

from __future__ import annotations

import argparse
import sys

from engine.errors import CliError
from engine.runtime.progress import table  # stdlib only: the CLI starts fast


def _require_run_dir(path: str, table: str = "episodes") -> None:
    """Read-only commands look before they touch: nothing is created at a wrong path."""
    from engine.storage import is_run_dir

    if not is_run_dir(path, table):
        raise CliError(f"no run dir at {path} (no {table}/ folder there)")


def metrics(a: argparse.Namespace) -> int:
    """``dateline metrics RUN_DIR [BENCHMARK] [--judge J] [--score-failures X]``: compute and print
    a run's metrics table under these flags (nothing is written); the run dir knows its benchmark."""
    judge, policy = a.judge, a.score_failures
    if a.benchmark and "=" in a.benchmark:           # no benchmark, then the older forms
        a.legacy, a.benchmark = [a.benchmark, *a.legacy], None
    for x in a.legacy:                  # the older judge=J / score_failures=X forms
        k, _, v = x.partition("=")
        if k == "judge" and v:
            judge = v
        elif k == "score_failures" and v in ("as_wrong", "exclude"):
            policy = v
        else:
            raise CliError(f"unexpected argument {x!r} (see dateline metrics --help)")
    _require_run_dir(a.run_dir)
    from engine.benchmarks import get_benchmark
    from engine.scoring.judge_checks import FAILED
    from engine.scoring.judges import SELF_JUDGED
    from engine.scoring.metric_table import split_notes, store_benchmarks
    from engine.scoring.outcomes import count_notes, interval_cell, n_cell
    from engine.scoring.views import first_per_config, reduce_store
    from engine.storage import EpisodeStore

    names = _pick(store_benchmarks(EpisodeStore(a.run_dir)), a.run_dir, a.benchmark)
    if not names:
        sys.stderr.write(f"{a.run_dir}: no episodes yet\n")
        return 1
    for i, name in enumerate(names):
        if len(names) > 1:
            sys.stdout.write(("\n" if i else "") + f"## {name}\n")
        bench = get_benchmark(name)
        store = EpisodeStore(a.run_dir, bench.episode_fields)
        # computed, printed, never stored: the flags change this output only (engine/scoring/metric_table.py)
        rows = reduce_store(store, bench, judge, policy)
        mine = [r for r in rows if r.get("scope") == "all"]
        if judge and not any(r.get("judge") for r in mine):
            _no_such_judge(a.run_dir, name, judge, reduce_store(store, bench, None, policy))
        sys.stdout.write(table(["model", "config", "judge", "metric", "value", "95% interval", "n", "scored/planned",
                                "marks"],
                               [(r["model"], r["config_hash"],
                                 (r["judge"] or "-") + (f" ({SELF_JUDGED})" if r["self_judged"] else ""),
                                 r["metric"], "-" if r.get("race") and r["value"] != r["value"] else r["value"],
                                 interval_cell(r), r["n"], n_cell(r), FAILED if r.get("judge_check") else "")
                                for r in mine]) + "\n")
        for note in sorted({str(r["note"]) for r in mine if r.get("note")}):
            sys.stdout.write(note + "\n")
        for j, why in sorted({(str(r["judge"]), str(r["judge_check"])) for r in mine if r.get("judge_check")}):
            sys.stdout.write(f"judge {j}: {why}\n")
        for r in first_per_config(mine):                # its judge's coverage, its plan
            for note in count_notes(r):
                sys.stdout.write(f"{r['model']} [{r['config_hash'][:8]}]: {note}\n")
        for line in split_notes(bench, mine):     # dated questions: each model's knowledge-cutoff split
            sys.stdout.write(line + "\n")
        if any(r["self_judged"] for r in rows):
            sys.stdout.write(f"**{SELF_JUDGED.upper()}**: rows marked ({SELF_JUDGED}) were graded by the model under "
                             "test; they are not measurements of quality.\n")
    return 0


def _no_such_judge(run_dir: str, name: str, judge: str, rows: list[dict[str, object]]) -> None:
    """``--judge`` kept nothing: say so and name the judges there are (never an empty table, exit 0)."""
    have = sorted({f"{r['judge']} ({r['judge_model']})" for r in rows if r.get("judge")})
    raise CliError(f"{run_dir}: no {name} judgements by a judge matching {judge!r} (an id, an id prefix or a "
                   f"model name); judges there: {', '.join(have) or 'none (nothing was judged)'}")


def _pick(have: list[str], run_dir: str, benchmark: str | None) -> list[str]:
    """The benchmarks to print: those whose episodes RUN_DIR holds (the run dir knows them), or the
    one named, which must be among them."""
    if benchmark is not None and benchmark not in have:
        raise CliError(f"{run_dir} has no {benchmark} episodes (it has: {', '.join(have) or 'none'}); "
                       "leave the benchmark out: the run dir knows it")
    return [benchmark] if benchmark else have


def show(a: argparse.Namespace) -> int:
    """``dateline show RUN_DIR [EPISODE]``: the episodes, or one episode's transcript."""
    from engine.benchmarks import get_benchmark
    from engine.storage import EpisodeStore
    from ray_jobs.outputs.report import episodes as ev

    _require_run_dir(a.run_dir)
    store = EpisodeStore(a.run_dir)
    if a.episode:
        ids = ev.find(store, a.episode)
        by_task = False
        if not ids:                 # a task id: its one episode (or the list of them)
            cands = store.episodes(["episode_id", "task_id", "config_hash"]).to_pylist()
            ids = sorted(r["episode_id"] for r in cands if r["task_id"] == a.episode
                         and (not a.config or str(r["config_hash"]).startswith(a.config)))
            by_task = True
        if not ids:
            raise CliError(f"no episode or task {a.episode!r} in {a.run_dir}")
        if len(ids) > 1:
            what = "task" if by_task else "prefix"
            raise CliError(f"{what} {a.episode!r} matches {len(ids)} episodes ({', '.join(i[:12] for i in ids[:5])}"
                           f"{' ...' if len(ids) > 5 else ''}): give an episode id"
                           + (" or --config" if by_task else " (more of it)"))
        (row,) = store.episodes(["benchmark"], episode_ids=ids).to_pylist()
        bench = get_benchmark(row["benchmark"])
        view = ev.load(EpisodeStore(a.run_dir, bench.episode_fields), bench, ids[0])
        sys.stdout.write(ev.render_text(view, 0 if a.full else 2000))
        return 0
    if a.full:
        raise CliError("--full applies to one episode's transcript: give EPISODE")
    t = store.episodes(["episode_id", "config_hash", "model", "task_id", "seed", "status", "finish_reason", "n_steps",
                        "tokens_in", "tokens_out", "error"])
    rows = [r for r in t.to_pylist() if (not a.status or r["status"] == a.status)
            and (not a.config or str(r["config_hash"]).startswith(a.config))]
    from engine.scoring.outcomes import error_kind

    sys.stdout.write(table(["episode", "config", "model", "task", "seed", "status", "finish", "steps", "tokens",
                            "error kind"],
                           [(r["episode_id"][:16], r["config_hash"][:8], r["model"], r["task_id"], r["seed"],
                             r["status"], r["finish_reason"], r["n_steps"], f"{r['tokens_in']}+{r['tokens_out']}",
                             error_kind(r) if r["status"] != "ok" else "")
                            for r in sorted(rows, key=lambda r: (r["config_hash"], r["task_id"], r["seed"]))]) + "\n")
    sys.stdout.write(f"{len(rows)} episode(s); `dateline show {a.run_dir} EPISODE` prints one\n")
    for line in ev.cutoff_lines(store, a.config):         # dated questions: each configuration's knowledge-cutoff split
        sys.stdout.write(line + "\n")
    from engine.storage import set_aside_episodes

    have = set(t["episode_id"].to_pylist())
    if aside := {e: why for e, why in set_aside_episodes(store).items() if e not in have}:
        sys.stdout.write(f"{len(aside)} more ran but could not be stored (set aside in {a.run_dir}/quarantine; the "
                         "same command runs them again):\n" + "".join(f"  {why}\n" for why in list(aside.values())[:5]))
    from engine.hosting.events import describe, read_events

    if lines := describe(read_events(store)):     # what the model replicas went through, by cause
        sys.stdout.write("replicas (every run of this run dir):\n" + "\n".join(f"  {ln}" for ln in lines) + "\n")
    return 0


def repair(root: str, dry: bool) -> int:
    """``dateline repair RUN_DIR [--dry-run]``: move every shard that cannot be read aside."""
    from engine.runtime.runlock import RunDirLock
    from engine.storage import EpisodeStore, PairwiseStore, is_run_dir

    pairwise = is_run_dir(root, "comparisons")
    if not pairwise and not is_run_dir(root):
        raise CliError(f"no run dir at {root} (no episodes/ or comparisons/ folder)")
    with RunDirLock(root, "dateline repair"):
        store = PairwiseStore(root) if pairwise else EpisodeStore(root)
        moved = store.repair(dry_run=dry)
    for path, dest, why in moved:
        sys.stdout.write(f"{'would move' if dry else 'moved'} {path} -> {dest}: {why}\n")
    sys.stdout.write(f"{len(moved)} unreadable shard(s){' found' if dry else ' moved aside'}; every other row is "
                     f"kept{'' if dry or not moved else '. Re-run the same command to run their episodes again'}\n")
    return 0


def tables(run_dir: str, benchmark: str | None, all_tasks: bool = False) -> int:
    """Print every table the benchmarks of a run directory define, in the default view (each
    plan's failure policy, every judge: engine/scoring/metric_table.py; the cache ``dateline run`` wrote
    while it is current, else recomputed): one set per judge, compared configurations on the
    tasks all of them finished (``all_tasks``: each over its own plan), incomplete ones marked.
    It writes nothing (``dateline run`` writes ``metrics/tables.md``)."""
    from engine.scoring.metric_table import metric_table, store_benchmarks, tables_markdown
    from engine.storage import EpisodeStore

    _require_run_dir(run_dir)
    store = EpisodeStore(run_dir)
    names = _pick(store_benchmarks(store), run_dir, benchmark)
    if not names:
        sys.stderr.write(f"{run_dir}: no episodes yet\n")
        return 1
    sys.stdout.write(tables_markdown(metric_table(store, names), names, all_tasks))
    return 0
