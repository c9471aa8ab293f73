"""``dateline export --to mlflow|wandb RUN_DIR``: a run dir into an experiment tracker.

Each configuration of each benchmark, seen through each judge (or none), becomes one tracker run:
its parameters (model, config hash, agent and benchmark settings, judge, scoring policy, what the
numbers are over), its metrics (each with its 95% interval and its count, as ``<metric>``,
``<metric>.lo``, ``<metric>.hi``, ``<metric>.n``; the parameter ``<metric>.interval`` says how the
interval was made, exact | bootstrap | too_few_tasks, the last without .lo/.hi; engine.stats.interval),
and its transcripts (the calls
and the messages they refer to, as Parquet) as an artifact. MLflow logs to ``--tracking-uri`` (or
``$MLFLOW_TRACKING_URI``, else a local file store ``./mlruns``); W&B runs offline unless
``WANDB_MODE`` says otherwise (no network needed).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq


def _records(run_dir: str, n_boot: int = 200) -> Iterator[dict[str, Any]]:
    """One record per (benchmark, configuration, judge): name, params, metrics, episode ids."""
    from ray_jobs.report.compute_runs import run_sections

    for section in run_sections(Path(run_dir), n_boot, {}):
        for block in section.blocks:
            for g in block.groups:
                c = g.counts
                params: dict[str, Any] = {"benchmark": section.name, "model": g.model, "config_hash": g.config_hash,
                                          "judge": g.judge or "none", "self_judged": g.self_judged,
                                          "score_failures": g.policy, "task_set": g.task_set,
                                          "scope": block.scope, "run_dir": str(run_dir)}
                if c is not None:
                    params.update(n_planned=c.n_planned, n_scored=c.n_scored, n_error=c.n_error,
                                  n_budget_stopped=c.n_budget_stopped, n_not_run=c.n_not_run, incomplete=c.incomplete)
                params |= {f"agent.{k}": v for k, v in g.agent.items()}
                params |= {f"benchmark.{k}": v for k, v in g.data.items()}
                metrics: dict[str, float] = {}
                for m, (value, n) in block.plain[g.config_hash].items():
                    if isinstance(value, float) and math.isnan(value):
                        continue
                    metrics[m] = float(value)
                    metrics[f"{m}.n"] = float(n)
                    e = block.estimates[g.config_hash].get(m)
                    if e is not None:        # the report's interval (stats.interval), and how it was made
                        params[f"{m}.interval"] = e.method
                        if not math.isnan(e.lo):        # none with too few tasks: never a zero-width stand-in
                            metrics[f"{m}.lo"], metrics[f"{m}.hi"] = e.lo, e.hi
                yield {"name": f"{section.name} {g.label}" + (f" [judge {g.judge}]" if g.judge else ""),
                       "params": params, "metrics": metrics, "episodes": [r["episode_id"] for r in g.rows],
                       "config_hash": g.config_hash, "benchmark": section.name}


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
           wandb_dir: str | None = None) -> list[str]:
    """Log every configuration of ``run_dir`` to ``to`` (mlflow | wandb); what was logged, a line each."""
    from engine.storage import is_run_dir

    if not is_run_dir(run_dir):
        from ray_jobs.cli import CliError

        raise CliError(f"no run dir at {run_dir} (no episodes/ folder there)")
    lines = []
    with tempfile.TemporaryDirectory(prefix="dateline-export-") as tmp:
        for i, rec in enumerate(_records(run_dir)):
            files = _transcripts(run_dir, rec["episodes"], Path(tmp) / str(i))
            if to == "mlflow":
                lines.append(_mlflow(rec, files, experiment, tracking_uri))
            elif to == "wandb":
                lines.append(_wandb(rec, files, experiment, wandb_dir))
            else:
                raise ValueError(f"export: unknown tracker {to!r}")
    return lines


def _mlflow(rec: dict[str, Any], files: list[Path], experiment: str, tracking_uri: str | None) -> str:
    import mlflow

    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or Path("mlruns").resolve().as_uri()
    if uri.startswith("file:") or "://" not in uri:
        # MLflow 3 keeps its local file store behind this switch (no database needed for it)
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment(experiment)
    with mlflow.start_run(run_name=rec["name"][:250]) as run:
        mlflow.log_params({k: _param(v) for k, v in rec["params"].items()})
        mlflow.log_metrics({k.replace(":", "_"): v for k, v in rec["metrics"].items()})
        for f in files:
            mlflow.log_artifact(str(f), artifact_path="transcripts")
        return f"mlflow {uri}: run {run.info.run_id} {rec['name']} ({len(rec['metrics'])} metrics, transcripts)"


def _wandb(rec: dict[str, Any], files: list[Path], project: str, wandb_dir: str | None) -> str:
    import wandb

    mode: Any = os.environ.get("WANDB_MODE", "offline")
    d = Path(wandb_dir or ".").resolve()          # W&B writes its runs under d/wandb/
    d.mkdir(parents=True, exist_ok=True)
    run = wandb.init(project=project, name=rec["name"][:120], config={k: _param(v) for k, v in rec["params"].items()},
                     dir=str(d), mode=mode, reinit="create_new")
    try:
        run.summary.update({k.replace(":", "_"): v for k, v in rec["metrics"].items()})
        art = wandb.Artifact(f"transcripts-{rec['config_hash'][:12]}", type="transcripts")
        for f in files:
            art.add_file(str(f))
        run.log_artifact(art)
        return f"wandb ({mode}) {d}: run {run.id} {rec['name']} ({len(rec['metrics'])} metrics, transcripts)"
    finally:
        run.finish()
