"""``dateline export --to mlflow|wandb|inspect RUN_DIR``: a run dir into an experiment tracker, or
into inspect_ai eval logs (``ray_jobs/outputs/inspect/``: one log per configuration, a sample per
episode, for ``inspect view``).

Each configuration of each benchmark, seen through each judge (or none), becomes one tracker run,
with the numbers every other reader shows (the metrics table of ``engine/scoring/metric_table.py``: the
same values, scopes, counts and marks as ``dateline tables``, the report and the API):

* metrics: each metric over the configuration's plan under its plain name (``accuracy``,
  ``accuracy.n``, and ``accuracy.lo`` / ``accuracy.hi`` where an interval means something; the tag
  ``accuracy.interval`` says how it was made: exact | bootstrap | too_few_tasks), the
  comparison over the tasks every compared configuration finished beside it
  (``common.accuracy``, ``common.accuracy.n``), and the counts (``n_planned``, ``n_scored``...);
  for dated questions also each mean over the questions after the model's knowledge cutoff
  (``accuracy.after_cutoff``, its ``.n``, ``.lo``, ``.hi``) and the questions on each side
  (``questions_after_cutoff``, ``questions_before_cutoff``: engine/scoring/cutoff.py);
* parameters: only what never changes for the run (model, config hash, judge, agent and
  benchmark settings, scoring policy, task set);
* tags: what can change as episodes are added or judged again: ``dateline.incomplete``,
  ``dateline.self_judged``, ``dateline.partially_judged``, ``dateline.marks`` (every mark, as the
  report prints them), ``dateline.n_outside_plan`` (stored episodes outside the plan) and
  ``dateline.n_judged`` (the episodes its judge saw; also metrics), for dated questions
  ``dateline.knowledge_cutoff`` (the date, or "cutoff unknown") and ``dateline.cutoff_split`` (in
  words); and the marks are in the run's
  name (``livenews scripted [judge grader:ab12] [INCOMPLETE]``);
* the transcripts (the calls and the messages they refer to, as Parquet) as an artifact;
* W&B also gets a per-sample table (history key ``samples``, as lm-eval logs one): a row per episode
  with its task and episode id, status, final output, reference, each per-episode metric value under
  the run's judge and that judge's verdicts with their text (``sample_rows``).

Exporting again updates the same tracker runs (found by the tag ``dateline.key``: run dir,
benchmark, configuration, judge) instead of adding new ones. MLflow logs to ``--tracking-uri``
(or ``$MLFLOW_TRACKING_URI``, else a local file store ``./mlruns``); W&B runs offline unless
``WANDB_MODE`` says otherwise (no network needed).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections import defaultdict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from engine.scoring import cutoff, outcomes
from engine.scoring.judge_checks import FAILED
from engine.scoring.outcome_marks import warnings_of
from ray_jobs.outputs import inspect as inspect_logs
from ray_jobs.outputs.report.episodes import EpisodeView
from ray_jobs.outputs.runs_behind import RunsBehind, tasks_text

# the W&B history key of a configuration's per-sample table
SAMPLES_KEY = "samples"

# metric-row columns that are counts of the plan (metrics) rather than values
_COUNTS = ("n_planned", "n_scored", "n_error", "n_budget_stopped", "n_stopped_early", "n_not_run")


def _records(run_dir: str) -> Iterator[dict[str, Any]]:
    """One record per (benchmark, configuration, judge): name, params, metrics, tags, episode ids."""
    from engine.benchmarks import get_benchmark
    from engine.config import config_labels, stable_hash
    from engine.scoring.judges import SELF_JUDGED
    from engine.scoring.metric_table import metric_table
    from engine.storage import EpisodeStore

    store = EpisodeStore(run_dir)
    rows = metric_table(store)
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["benchmark"], r["config_hash"], r["judge"] or "")].append(r)
    firsts = {k: next(r for r in rs if (r["scope"] or outcomes.ALL) == outcomes.ALL) for k, rs in groups.items()}
    labels: dict[tuple[str, str], str] = {}
    for bench in sorted({k[0] for k in groups}):
        items = {k[1]: firsts[k] for k in groups if k[0] == bench}
        names = config_labels([(r["model"], json.loads(r["agent"] or "{}") | {
            k: v for k, v in json.loads(r["data"] or "{}").items() if k != "limit"}, h) for h, r in items.items()])
        labels |= {(bench, h): n for h, n in zip(items, names)}
    behind = RunsBehind(store)                                          # run-*.json read once, not per record
    adaptive = store.read_json("adaptive.json") or {}                   # an adaptive run's decisions (ray_jobs/run/adaptive.py)
    episodes: dict[tuple[str, str], list[str]] = defaultdict(list)      # (benchmark, config) -> its episode ids
    for e in store.episodes(["episode_id", "config_hash", "benchmark"]).to_pylist():
        episodes[(e["benchmark"], e["config_hash"])].append(e["episode_id"])
    for (bench, h, judge), rs in sorted(groups.items()):
        first = firsts[(bench, h, judge)]
        c = outcomes.Counts.of_row(first)
        agent, data = json.loads(first["agent"] or "{}"), json.loads(first["data"] or "{}")
        check = next((str(r["judge_check"]) for r in rs if r.get("judge_check")), "")   # judge_checks.py
        marks = (["INCOMPLETE"] * c.incomplete + [outcomes.PARTIALLY_JUDGED] * c.partially_judged
                 + [SELF_JUDGED.upper()] * bool(first["self_judged"]) + [FAILED] * bool(check)
                 + [w.split(":")[0].strip() for w in warnings_of(get_benchmark(bench), agent, data)])
        params: dict[str, Any] = {"benchmark": bench, "model": first["model"], "config_hash": h,
                                  "judge": judge or "none", "score_failures": first["score_failures"],
                                  "task_set": first["task_set"], "run_dir": str(run_dir)}
        params |= {f"agent.{k}": v for k, v in agent.items()}
        # benchmark.limit is no part of a configuration (the config hash leaves it out): which tasks
        # the newest run took is a tag, as mutable as the plan (issue 46)
        params |= {f"benchmark.{k}": v for k, v in data.items() if k != "limit"}
        metrics: dict[str, float] = {k: float(first[k] or 0) for k in _COUNTS}
        metrics["n_outside_plan"] = float(c.n_outside_plan)
        if c.n_judged is not None:
            metrics["n_judged"] = float(c.n_judged)
        interval: dict[str, str] = {}
        values: list[dict[str, Any]] = []          # what `metrics` holds, one entry per metric row (inspect's results)
        ad = (adaptive.get("configurations") or {}).get(h) if adaptive.get("benchmark") == bench else None
        if ad is not None:
            m = adaptive["metric"]
            metrics[f"adaptive.{m}.lo"], metrics[f"adaptive.{m}.hi"] = (float(x) for x in ad["interval"])
            metrics["adaptive.tasks_admitted"] = float(ad["tasks_admitted"])
            params |= {"adaptive.strategy": adaptive["design"]["strategy"], "adaptive.goal": adaptive["design"]["goal"],
                       "adaptive.alpha": adaptive["design"]["alpha"], "adaptive.design_hash": adaptive["design_hash"]}
            interval["dateline.adaptive_state"] = ad["state"]
            interval["dateline.adaptive_wording"] = adaptive["wording"]
            if ad["reason"]:
                interval["dateline.adaptive_reason"] = ad["reason"][:4000]
            if ad["state"] == "stopped_early":      # halving's drop is SCREENING (engine/scoring/race_view.py)
                marks.append(outcomes.SCREENING_MARK if adaptive.get("screening") else outcomes.STOPPED_EARLY_MARK)
        for r in rs:
            if ad is not None and ad["state"] == "stopped_early" and not adaptive.get("screening"):
                break                   # never a bare mean after adaptive stopping: the interval above instead
            if outcomes.own_plan(r):
                continue                # nothing to compare on: its own plan, exported above unprefixed (issue 46)
            prefix = "" if (r["scope"] or outcomes.ALL) == outcomes.ALL else "common."
            if r["value"] is None or (isinstance(r["value"], float) and math.isnan(r["value"])):
                continue
            m = prefix + r["metric"]
            metrics[m], metrics[f"{m}.n"] = float(r["value"]), float(r["n"])
            lo, hi = r.get("lo"), r.get("hi")
            if lo is not None and hi is not None and not (math.isnan(lo) or math.isnan(hi)):
                # none with too few tasks: never a zero-width stand-in (engine.scoring.stats.interval)
                metrics[f"{m}.lo"], metrics[f"{m}.hi"] = float(lo), float(hi)
            if r.get("interval"):
                interval[f"{m}.interval"] = r["interval"]          # exact | bootstrap | too_few_tasks
            values.append({"metric": r["metric"], "scope": outcomes.COMMON if prefix else outcomes.ALL,
                           "value": float(r["value"]), "n": int(r["n"]), "lo": metrics.get(f"{m}.lo"),
                           "hi": metrics.get(f"{m}.hi"), "interval": r.get("interval") or ""})
        if check:
            interval["dateline.judge_check"] = check[:4000]
        tags = interval | {"dateline.incomplete": str(c.incomplete).lower(),
                "dateline.self_judged": str(bool(first["self_judged"])).lower(),
                "dateline.marks": ", ".join(marks) or "none",
                "dateline.key": stable_hash(str(Path(run_dir).resolve()) if "://" not in str(run_dir) else str(run_dir),
                                            bench, h, judge)}
        # counts a later run changes (a larger plan, another judge's pass): tags, not params
        taken = behind.tasks(h)
        tags["dateline.tasks"] = tasks_text(taken)
        if taken is None:
            tags |= dict.fromkeys(("dateline.limit", "dateline.order", "dateline.order_seed"), "not recorded")
        else:
            tags |= {"dateline.limit": "all" if taken["limit"] is None else str(taken["limit"]),
                     "dateline.order": str(taken["order"]),
                     "dateline.order_seed": "none" if taken["order_seed"] is None else str(taken["order_seed"])}
        tags |= {"dateline.n_outside_plan": str(c.n_outside_plan),
                 "dateline.partially_judged": str(c.partially_judged).lower()}
        if c.n_judged is not None:
            tags["dateline.n_judged"] = str(c.n_judged)
        if cutoff.splits(get_benchmark(bench)):     # dated questions: the metrics' .after_cutoff rows, and the split
            tags["dateline.knowledge_cutoff"] = first.get("knowledge_cutoff") or cutoff.UNKNOWN
            tags["dateline.cutoff_split"] = cutoff.cutoff_note([r for r in rs if (r["scope"] or outcomes.ALL) == outcomes.ALL])
        name = (f"{bench} {labels[(bench, h)]}" + (f" [judge {judge}]" if judge else "")
                + "".join(f" [{m}]" for m in marks))
        yield {"name": name, "params": params, "metrics": metrics, "tags": tags,
               "episodes": episodes[(bench, h)],
               "config_hash": h, "benchmark": bench, "judge": judge, "row": first, "values": values}


def _transcripts(run_dir: str, episode_ids: list[str], out: Path) -> list[Path]:
    """The calls of these episodes and the messages they refer to, as two Parquet files."""
    from engine.storage import CALL_SCHEMA, MESSAGE_SCHEMA, EpisodeStore

    store = EpisodeStore(run_dir)
    calls = store.calls(episode_ids)
    msgs = store.messages(m for c in calls for m in c["message_ids"] or [])
    out.mkdir(parents=True, exist_ok=True)
    cpath, mpath = out / "calls.parquet", out / "messages.parquet"
    pq.write_table(pa.Table.from_pylist(calls, schema=CALL_SCHEMA), cpath)
    pq.write_table(pa.Table.from_pylist([{**m, "batch_id": ""} for m in msgs.values()], schema=MESSAGE_SCHEMA), mpath)
    return [cpath, mpath]


def _param(v: Any) -> str:
    s = v if isinstance(v, str) else json.dumps(v, default=str)
    return s[:500]


def export(run_dir: str, to: str, experiment: str = "dateline", tracking_uri: str | None = None,
           wandb_dir: str | None = None, log_dir: str | None = None) -> list[str]:
    """Log every configuration of ``run_dir`` to ``to`` (mlflow | wandb), or write it as inspect eval
    logs (``inspect``: into ``log_dir``, default ``RUN_DIR/_inspect``); what was done, a line each."""
    from engine.storage import is_run_dir

    if not is_run_dir(run_dir):
        from engine.errors import CliError

        raise CliError(f"no run dir at {run_dir} (no episodes/ folder there)")
    if to not in ("mlflow", "wandb", "inspect"):
        raise ValueError(f"export: unknown tracker {to!r}")
    if to == "inspect":
        return inspect_logs.write_logs(run_dir, list(_records(run_dir)), log_dir)
    lines = []
    views: dict[tuple[str, str], list[EpisodeView]] = {}       # a configuration's episodes (W&B's tables)
    with tempfile.TemporaryDirectory(prefix="dateline-export-") as tmp:
        for i, rec in enumerate(_records(run_dir)):
            files = _transcripts(run_dir, rec["episodes"], Path(tmp) / str(i))
            if to == "mlflow":
                lines.append(_mlflow(rec, files, experiment, tracking_uri))
            else:
                key = (rec["benchmark"], rec["config_hash"])
                if key not in views:
                    views[key] = inspect_logs.views(run_dir, *key)
                lines.append(_wandb(rec, files, experiment, wandb_dir, views[key]))
    return lines


def sample_rows(rec: Mapping[str, Any], views: list[EpisodeView]) -> tuple[list[str], list[list[Any]]]:
    """The per-sample table of one configuration seen through one judge (lm-eval's W&B tables):
    columns and one row per episode: task and episode id, seed, status, finish reason, error kind,
    final output, reference, each per-episode metric value under the record's judge (the values
    ``dateline show`` prints; an episode that judge did not see: its unjudged values; a failed one:
    none), and each of that judge's verdicts with the judge's own text."""
    judge = str(rec["judge"])
    vals = [v.values.get(judge) or v.values.get("") or {} for v in views]
    metrics = sorted({m for d in vals for m in d})
    keys = sorted({k for v in views for (j, k) in inspect_logs.verdicts(v) if j == judge}) if judge else []
    columns = ["task_id", "episode_id", "seed", "status", "finish_reason", "error_kind", "output", "reference",
               *metrics, *(c for k in keys for c in (f"verdict.{k}", f"verdict.{k}.explanation"))]
    rows = []
    for v, d in zip(views, vals):
        r, verdict = v.row, inspect_logs.verdicts(v)
        row = [r["task_id"], v.episode_id, r["seed"], r["status"], r["finish_reason"],
               outcomes.error_kind(r) if r["status"] != "ok" else "", r["output"] or "", v.reference,
               *(d.get(m) for m in metrics)]
        for k in keys:
            j = verdict.get((judge, k))
            row += [j["value"] if j else None, str(j["raw_output"] or "") if j else None]
        rows.append(row)
    return columns, rows


def _mlflow(rec: dict[str, Any], files: list[Path], experiment: str, tracking_uri: str | None) -> str:
    import mlflow

    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or Path("mlruns").resolve().as_uri()
    if uri.startswith("file:") or "://" not in uri:
        # MLflow 3 keeps its local file store behind this switch (no database needed for it)
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment(experiment)
    key = rec["tags"]["dateline.key"]
    found = mlflow.search_runs(experiment_names=[experiment], filter_string=f"tags.`dateline.key` = '{key}'",
                               output_format="list")
    with mlflow.start_run(run_id=found[0].info.run_id) if found else mlflow.start_run(run_name=rec["name"][:250]) as run:
        mlflow.set_tags({**rec["tags"], "mlflow.runName": rec["name"][:250]})     # marks change: the name follows
        params = {k: _param(v) for k, v in rec["params"].items()}
        if found:       # params are immutable in MLflow: log only what the run does not have yet
            params = {k: v for k, v in params.items() if k not in found[0].data.params}
        if params:
            mlflow.log_params(params)
        mlflow.log_metrics({k.replace(":", "_"): v for k, v in rec["metrics"].items()})
        for f in files:
            mlflow.log_artifact(str(f), artifact_path="transcripts")
        what = "updated" if found else "run"
        return f"mlflow {uri}: {what} {run.info.run_id} {rec['name']} ({len(rec['metrics'])} metrics, transcripts)"


def _wandb(rec: dict[str, Any], files: list[Path], project: str, wandb_dir: str | None,
           views: list[EpisodeView]) -> str:
    import wandb

    mode: Any = os.environ.get("WANDB_MODE", "offline")
    d = Path(wandb_dir or ".").resolve()          # W&B writes its runs under d/wandb/
    d.mkdir(parents=True, exist_ok=True)
    marks = [t for t in rec["tags"]["dateline.marks"].split(", ") if t != "none"]
    # the same id every export: W&B resumes that run (its summary is replaced) instead of adding one
    run = wandb.init(project=project, name=rec["name"][:120], id=rec["tags"]["dateline.key"], resume="allow",
                     config={k: _param(v) for k, v in rec["params"].items()}, tags=marks, dir=str(d), mode=mode,
                     reinit="create_new")
    try:
        run.summary.update({k.replace(":", "_"): v for k, v in rec["metrics"].items()})
        art = wandb.Artifact(f"transcripts-{rec['config_hash'][:12]}", type="transcripts")
        for f in files:
            art.add_file(str(f))
        run.log_artifact(art)
        columns, rows = sample_rows(rec, views)
        names: list[str | int] = [*columns]
        run.log({SAMPLES_KEY: wandb.Table(columns=names, data=rows)})
        return (f"wandb ({mode}) {d}: run {run.id} {rec['name']} ({len(rec['metrics'])} metrics, transcripts, "
                f"{len(rows)} samples)")
    finally:
        run.finish()
