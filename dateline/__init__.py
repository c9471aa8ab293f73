"""dateline's Python API: compose a config as the CLI does, run it, read what it wrote.

    from dateline import compose, run, results

    cfg = compose(["agent=newsagent_rule_based", "benchmark.limit=3", "run.dir=runs/api-demo"])
    info = run(cfg)                          # one job: generate, judge, reduce (a sweep: run_sweep)
    r = results("runs/api-demo")
    print(r.metrics().to_pandas())           # the metrics table: value, n, n_planned, n_scored, ...
    eid = r.episodes()["episode_id"][0].as_py()
    print(r.transcript(eid))                 # every model call, tool result, output, metrics, verdicts

Everything here is what ``dateline run`` / ``dateline show`` use (ray_jobs/, engine/).
"""

from __future__ import annotations

from typing import Any

from engine.config import Config

__all__ = ["compose", "run", "run_sweep", "results", "Results", "main"]


def compose(overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """The run config for these Hydra overrides (typed, validated), as ``dateline run`` composes it."""
    from ray_jobs.config.compose import compose as _compose

    return _compose(list(overrides))


def run(cfg: Config) -> dict[str, Any]:
    """Run one configuration (resuming what its run dir holds); its run info."""
    from ray_jobs.run.sweep import run as _run

    return dict(_run(cfg))


def run_sweep(cfgs: list[Config]) -> list[dict[str, Any]]:
    """Run several configurations as one job (one queue per model, shared replicas)."""
    from ray_jobs.run.sweep import run_sweep as _run_sweep

    return [dict(i) for i in _run_sweep(cfgs)]


class Results:
    """What a run dir holds, read through the store (local path or ``s3://`` URI)."""

    def __init__(self, run_dir: str) -> None:
        from engine.storage import EpisodeStore, is_run_dir

        if not is_run_dir(run_dir):
            raise FileNotFoundError(f"no run dir at {run_dir}")
        self.run_dir = run_dir
        self.store = EpisodeStore(run_dir)

    def metrics(self) -> Any:
        """The metrics table (pyarrow): per configuration and judge, every metric with the counts it is
        over, in the default view (each plan's failure policy, every judge), as ``dateline tables`` and
        the report read it; computed from the store (the cache ``dateline run`` wrote while it is current).
        For dated questions (livenews) it also holds each mean over the questions after the model's
        knowledge cutoff (``accuracy.after_cutoff``: its own n and interval), the questions on each side
        (``questions_after_cutoff``, ``questions_before_cutoff``), and the cutoff itself in the
        ``knowledge_cutoff`` column (null: cutoff unknown; engine/scoring/cutoff.py)."""
        import pyarrow as pa

        from engine.scoring.metric_table import metric_table
        from engine.storage import METRIC_SCHEMA

        return pa.Table.from_pylist(metric_table(self.store), schema=METRIC_SCHEMA)

    def episodes(self, **where: Any) -> Any:
        """Episodes (pyarrow), deduplicated; ``where``: ``config_hash=``, ``benchmark=``, ``ok_only=`` ..."""
        return self.store.episodes(**where)

    def steps(self, episode_ids: list[str]) -> Any:
        return self.store.steps(episode_ids=episode_ids)

    def transcript(self, episode_id: str, width: int = 0) -> str:
        """One episode as ``dateline show`` prints it."""
        from engine.benchmarks import get_benchmark
        from engine.storage import EpisodeStore
        from ray_jobs.outputs.report import episodes as ev

        (row,) = self.store.episodes(["benchmark"], episode_ids=[episode_id]).to_pylist()
        bench = get_benchmark(row["benchmark"])
        return ev.render_text(ev.load(EpisodeStore(self.run_dir, bench.episode_fields), bench, episode_id), width)


def results(run_dir: str) -> Results:
    return Results(run_dir)


def main(argv: list[str] | None = None) -> int:
    from ray_jobs.cli.main import main as _main

    return _main(argv)
