"""Driver: ``dateline run [overrides]``. Validate the config, plan episodes, skip the finished
ones, start (or join) Ray, host the model, start the shared index and the episode workers,
write results to Parquet as they arrive, then reduce to the metrics table.

The store is the source of truth: a re-run with the same config plans only episodes that
have no ok row yet, and when nothing is left it exits without starting Ray.

The stages, in the order they run (each module's docstring says what it does):

``entry.py``          ``dateline run`` / ``python -m ray_jobs.run``: Hydra composes the sweep
``sweep.py``          ``run_sweep``: the stages below as a table of contents
``planning.py``       each configuration becomes a point: its plan, store and run info
``waves.py``          the models hosted in waves that fit the cluster, each wave sized
``dispatch_loop.py``  one queue per model feeding its workers; rows to the writer and the judges.
                      It keeps the loop and delegates to units: ``queues.py`` (the episodes waiting, no
                      Ray), ``workers.py`` (the worker actors), ``sink.py`` (rows to the writer and the
                      judges), ``budget_watch.py`` (spent budgets, the drain reserve, a lost ledger),
                      ``adaptive_gate.py`` (the race's pauses and stops), ``pool_control.py`` (pools
                      released, grown or failing)
``judging.py``        the stream of judgements fed as rows are stored
``results.py``        failures, the exit code, metrics and the printed summary

This package re-exports what other modules and plugins import from ``ray_jobs.run``.
"""

# what other modules import from here; the identity functions are engine.identity's
from engine.identity import data_identity, engine_identity
from ray_jobs.config.point import PointSpec, resolve, run_dir
from ray_jobs.run.entry import hydra_entry
from ray_jobs.run.info import RunInfo
from ray_jobs.run.planning import (
    Plan,
    Point,
    check_engine,
    judges_episodes,
    make_point,
    needed_cpus,
    open_point,
    plan,
    plan_point,
)
from ray_jobs.run.queues import interleave
from ray_jobs.run.results import exit_code, failure_summary, failures, reduce_metrics, summary
from ray_jobs.run.sweep import run, run_sweep
from ray_jobs.run.waves import plan_waves

__all__ = [
    "Plan", "Point", "check_engine", "data_identity", "engine_identity", "exit_code", "failure_summary", "failures",
    "hydra_entry", "interleave", "judges_episodes", "make_point", "needed_cpus", "open_point", "plan", "plan_point",
    "plan_waves", "reduce_metrics", "resolve", "run", "run_dir", "run_sweep", "summary", "PointSpec", "RunInfo",
]
