"""``dateline race-replay RUN_DIR... [--metric M] [--orders 1000]``: what racing would have decided
on completed runs (issue 34).

Takes run dirs whose configurations each ran the same tasks in full, builds the matrix of task
values (configuration x task: the metric's mean over the task's seeds, failures at the benchmark's
failure value under each plan's policy, rescaled to [0, 1] by the metric's bounds, flipped where
lower is better), keeps the tasks every configuration finished, and replays racing
(``engine/scoring/racing.py``, the decision code a run uses) under ``--orders`` random task orders:

* **top-1 agreement**: racing for the best (goal ``best``) returns the configuration the full run
  ranks first (the survivors are run on every task, so the returned one is the best survivor);
* **top-3 agreement**: racing for ``top:3`` keeps a set whose best three are the full run's three;
* **episodes saved**: one minus the episodes a race runs over those of the full run.

This is the evidence on agent data that the simulation (``perf/adaptive_sim.py``) only imitates.
A sweep with fewer tasks than racing needs to separate its configurations saves nothing, and
says so: that is the honest answer, not a failure of the tool.
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.benchmarks import get_benchmark
from engine.errors import CliError
from engine.scoring.anytime import rescale
from engine.scoring.metric_table import store_benchmarks
from engine.scoring.outcomes import episode_values
from engine.scoring.racing import Design, replay
from engine.scoring.views import config_views
from engine.storage import EpisodeStore, is_run_dir


@dataclass(frozen=True)
class Matrix:
    """Task values of the configurations of one benchmark (rows) on the tasks all finished."""
    benchmark: str
    metric: str
    labels: list[str]
    tasks: list[str]
    values: np.ndarray          # (K, N) in [0, 1], higher is better
    dropped_tasks: int


def task_matrix(run_dirs: Sequence[str], metric: str | None = None, judge: str | None = None) -> list[Matrix]:
    """One matrix per benchmark found in ``run_dirs`` (every configuration of it, every judge view
    named by its judge too)."""
    per: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(dict)
    planned_tasks: dict[str, dict[str, set[str]]] = defaultdict(dict)
    metrics: dict[str, str] = {}
    for rd in run_dirs:
        for name in store_benchmarks(EpisodeStore(rd)):
            bench = get_benchmark(name)
            store = EpisodeStore(rd, bench.episode_fields)        # its own columns (what its metrics read)
            m = metric or bench.primary_metrics[0]
            if metrics.setdefault(name, m) != m:
                raise ValueError(f"{name}: two metrics asked for ({metrics[name]}, {m})")
            lo, hi = bench.metric_bounds.get(m, (0.0, 1.0))
            for v in config_views(store, bench, judge):
                label = f"{v.config_hash[:8]}{'/' + v.judge[:8] if v.judge else ''}@{rd}"
                vals: dict[str, list[float]] = defaultdict(list)
                tasks: set[str] = set()
                for ev in episode_values(bench, v.rows, v.planned, v.policy, judged=bool(v.judge)):
                    tasks.add(ev.planned.task_id)
                    if m in ev.values:
                        where = f"{rd}: configuration {v.config_hash}, task {ev.planned.task_id}, metric {m}"
                        x = float(rescale([ev.values[m]], lo, hi, where)[0])
                        vals[ev.planned.task_id].append(1.0 - x if m in bench.lower_is_better else x)
                    else:
                        vals[ev.planned.task_id].append(math.nan)
                per[name][label] = vals
                planned_tasks[name][label] = tasks
    out = []
    for name, configs in per.items():
        every = set.intersection(*planned_tasks[name].values())
        done = sorted(t for t in every if all(not any(math.isnan(x) for x in c[t]) and c[t] for c in configs.values()))
        labels = sorted(configs)
        values = np.array([[float(np.mean(configs[c][t])) for t in done] for c in labels]) if done \
            else np.zeros((len(labels), 0))
        union = set.union(*planned_tasks[name].values())
        out.append(Matrix(name, metrics[name], labels, done, values, len(union) - len(done)))
    return out


@dataclass(frozen=True)
class ReplayResult:
    orders: int
    top1_agree: float
    top3_agree: float
    used_best: float
    used_best_p90: float
    used_top3: float


def replay_orders(values: np.ndarray, orders: int = 1000, seed: int = 0, alpha: float = 0.05,
                  min_tasks: int = 10) -> ReplayResult:
    """Racing over ``orders`` random orders of the tasks of ``values`` (K x N)."""
    k, n = values.shape
    full = values.mean(axis=1)
    names = [f"c{i}" for i in range(k)]
    best = {i for i in range(k) if full[i] >= full.max() - 1e-12}
    top = sorted(full, reverse=True)[:3]
    rng = np.random.default_rng(seed)
    agree1 = agree3 = 0
    used1, used3 = [], []
    for _ in range(orders):
        perm = rng.permutation(n)
        x = values[:, perm]
        r1 = replay(Design(alpha=alpha, min_tasks=min_tasks), {names[i]: x[i] for i in range(k)}, n)
        surv = [i for i in range(k) if names[i] not in r1.stopped]
        agree1 += max(surv, key=lambda i: full[i]) in best
        used1.append((sum(r1.stopped.values()) + n * len(surv)) / (k * n))
        if k > 3:
            r3 = replay(Design(goal="top:3", alpha=alpha, min_tasks=min_tasks), {names[i]: x[i] for i in range(k)}, n)
            s3 = [i for i in range(k) if names[i] not in r3.stopped]
            agree3 += np.allclose(sorted((full[i] for i in s3), reverse=True)[:3], top)
            used3.append((sum(r3.stopped.values()) + n * len(s3)) / (k * n))
        else:
            agree3 += 1
            used3.append(1.0)
    return ReplayResult(orders, agree1 / orders, agree3 / orders, float(np.mean(used1)),
                        float(np.quantile(used1, 0.9)), float(np.mean(used3)))


def run(a: argparse.Namespace) -> int:
    """``dateline race-replay`` (arguments: ray_jobs/cli/main.py)."""
    for d in a.run_dirs:                # read-only: nothing is created at a wrong path
        if not is_run_dir(d):
            raise CliError(f"no run dir at {d} (no episodes/ folder there)")
    for m in task_matrix(a.run_dirs, a.metric, a.judge):
        k, n = m.values.shape
        print(f"{m.benchmark}: {k} configurations x {n} tasks every one finished "
              f"({m.dropped_tasks} left out), metric {m.metric}")
        if k < 2 or n == 0:
            print("  nothing to race: racing needs at least two configurations with common finished tasks")
            continue
        full = m.values.mean(axis=1)
        for i in np.argsort(-full):
            print(f"  {full[i]:.3f}  {m.labels[i]}")
        r = replay_orders(m.values, a.orders, a.seed, a.alpha, a.min_tasks)
        print(f"  {r.orders} random orders, alpha {a.alpha}: top-1 agreement {r.top1_agree:.3f}, "
              f"top-3 agreement {r.top3_agree:.3f}; episodes used {r.used_best:.3f} (p90 {r.used_best_p90:.3f}) "
              f"racing for the best, {r.used_top3:.3f} for the top 3; saved {1 - r.used_best:.3f}")
        if r.used_best > 0.999:
            print(f"  no episode saved: {n} tasks are too few for an anytime-valid rule to separate these "
                  "configurations at this alpha (the full set is what separates them)")
    return 0
