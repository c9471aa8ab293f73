"""Wrong eliminations and episodes spent by the adaptive strategies, on at least 10,000 simulated
sweeps run through the real decision code (``engine/scoring/racing/`` via
``engine/scoring/racing_sim.py``); issue 34. No Ray, no model: outcomes come from a 2PL
item-response model with tasks shared by every configuration (section 9 of
``../shared/design/adaptive-evaluation.md``).

    python perf/adaptive_sim.py [--sweeps 10000] [--headline 200] [--workers 2] [--seed 0]

Three parts, each in the same run:

* **The error-rate grid.** K in {4, 6, 10, 20, 50} configurations x N in {100, 300, 1000} tasks,
  goal ``best``, alpha 0.05, task coupling rho alternating 0.3 / 0.7, and one sweep in four with an
  exact tie at the top. A sweep is wrong when every configuration that is best on the full set is
  stopped. Smaller cells get more sweeps (they are cheaper); the total is at least ``--sweeps``.
  An ``eps_best`` slice (6 budget points, rho 0.7, epsilon 0.02) is counted the same way: wrong
  when no survivor is within epsilon of the full-set best.
* **The headline**: 20 models x 500 tasks, ``race`` (goal best) and ``incumbent`` (one model
  hosted at a time, ordered by a noisy prior of their ability), episodes used (mean and p90).
* **Naive peeking**, for contrast: a fixed-n 95 % normal interval of each paired difference,
  checked after every task with no correction, on the same 20 x 500 sweeps.

Prints, per part, wrong / sweeps with the Clopper-Pearson 95 % upper bound and the fraction of
episodes used, then the acceptance checks of issue 34.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.scoring.racing import Design  # noqa: E402
from engine.scoring.racing_sim import irt_sweep, run_sweep  # noqa: E402
from engine.scoring.stats import clopper_pearson  # noqa: E402

ALPHA = 0.05
KS, NS = (4, 6, 10, 20, 50), (100, 300, 1000)


def _cell_share(k: int, n: int) -> float:
    """Sweeps per cell, inversely to its cost (pairs x tasks), so the grid runs in minutes."""
    return 1.0 / math.sqrt(k * (k - 1) / 2 * n)


def _grid_cell(args: tuple[int, int, int, int]) -> tuple[int, int, int, int, list[float]]:
    k, n, sweeps, seed = args
    rng = np.random.default_rng(seed)
    wrong, used = 0, []
    for s in range(sweeps):
        x = irt_sweep(rng, k, n, rho=0.3 if s % 2 == 0 else 0.7, ties=1 if s % 4 == 3 else 0)
        r = run_sweep(Design(alpha=ALPHA), x)
        wrong += r.wrong
        used.append(r.used)
    return k, n, sweeps, wrong, used


def _eps_cell(args: tuple[int, int]) -> tuple[int, int, list[float]]:
    sweeps, seed = args
    rng = np.random.default_rng(seed)
    d = Design(goal="eps_best", epsilon=0.02, alpha=ALPHA)
    wrong, used = 0, []
    for _ in range(sweeps):
        theta = np.linspace(-0.6, 0.16, 6) + rng.normal(0, 0.05, 6)       # budget points: near-tied at the top
        r = run_sweep(d, irt_sweep(rng, 6, 500, rho=0.7, abilities=theta))
        wrong += r.wrong
        used.append(r.used)
    return sweeps, wrong, used


def _headline(args: tuple[str, int, int]) -> tuple[str, int, int, list[float]]:
    strategy, sweeps, seed = args
    rng = np.random.default_rng(seed)
    wrong, used = 0, []
    for _ in range(sweeps):
        theta = rng.normal(0, 0.8, 20)
        if strategy == "incumbent":
            theta = theta[np.argsort(-(theta + rng.normal(0, 0.3, 20)))]     # hosted in a prior's order
        x = irt_sweep(rng, 20, 500, abilities=theta)
        r = run_sweep(Design(strategy=strategy, alpha=ALPHA), x)
        wrong += r.wrong
        used.append(r.used)
    return strategy, sweeps, wrong, used


def _naive(args: tuple[int, int]) -> tuple[int, int]:
    """Paired normal 95 % intervals checked after every task from 10 on, no correction: a
    configuration is dropped once another's interval of the difference is above 0."""
    sweeps, seed = args
    rng = np.random.default_rng(seed)
    wrong = 0
    for _ in range(sweeps):
        x = irt_sweep(rng, 20, 500)
        full = x.mean(axis=1)
        best = set(np.flatnonzero(full >= full.max() - 1e-12))
        alive = np.ones(20, bool)
        d = x[:, None, :] - x[None, :, :]
        t = np.arange(1, 501)
        m = np.cumsum(d, axis=-1) / t
        v = np.maximum(np.cumsum(d * d, axis=-1) / t - m * m, 1e-12) * t / np.maximum(t - 1, 1)
        lo = m - 1.96 * np.sqrt(v / t)
        for step in range(9, 500):
            beaten = (lo[:, :, step] > 0) & alive[:, None]
            alive &= ~beaten.any(axis=0)
            if alive.sum() == 1:
                break
        wrong += not any(alive[i] for i in best)
    return sweeps, wrong


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweeps", type=int, default=10_000)
    ap.add_argument("--headline", type=int, default=200)
    ap.add_argument("--workers", type=int, default=min(os.cpu_count() or 1, 8))
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    t0 = time.time()
    grid_total = int(a.sweeps * 0.9)
    shares = {(k, n): _cell_share(k, n) for k in KS for n in NS}
    scale = grid_total / sum(shares.values())
    cells = [(k, n, max(20, math.ceil(shares[(k, n)] * scale)), a.seed * 1000 + i)
             for i, (k, n) in enumerate(shares)]
    n_eps = max(a.sweeps - sum(c[2] for c in cells), 1000)
    with ProcessPoolExecutor(a.workers) as ex:
        grid = ex.map(_grid_cell, sorted(cells, key=lambda c: -c[0] * c[1]))
        eps = ex.map(_eps_cell, [(n_eps // 4, a.seed * 1000 + 500 + i) for i in range(4)])
        heads = ex.map(_headline, [(s, a.headline // 2, a.seed * 1000 + 600 + i)
                                   for s in ("race", "incumbent") for i in range(2)])
        naive = ex.map(_naive, [(a.headline // 4, a.seed * 1000 + 700 + i) for i in range(4)])
        grid, eps, heads, naive = list(grid), list(eps), list(heads), list(naive)

    print(f"cpu: {os.cpu_count()} cores; {a.workers} workers; alpha {ALPHA}\n")
    print("error-rate grid, goal best (wrong = every full-set best stopped)")
    print(f"{'K':>4} {'N':>5} {'sweeps':>7} {'wrong':>6} {'used mean':>10} {'used p90':>9}")
    total = wrong_total = 0
    for k, n, sweeps, wrong, used in sorted(grid):
        total += sweeps
        wrong_total += wrong
        print(f"{k:>4} {n:>5} {sweeps:>7} {wrong:>6} {np.mean(used):>10.3f} {np.quantile(used, 0.9):>9.3f}")
    e_sweeps, e_wrong = sum(e[0] for e in eps), sum(e[1] for e in eps)
    e_used = [u for e in eps for u in e[2]]
    print(f"eps_best slice (6 points, N 500, rho 0.7, epsilon 0.02): {e_sweeps} sweeps, {e_wrong} not eps-good, "
          f"used {np.mean(e_used):.3f} (p90 {np.quantile(e_used, 0.9):.3f})")
    all_sweeps, all_wrong = total + e_sweeps, wrong_total + e_wrong
    _, upper = clopper_pearson(all_wrong, all_sweeps, 0.05)
    print(f"\nall: {all_wrong} wrong of {all_sweeps} sweeps = {all_wrong / all_sweeps:.4f}; "
          f"Clopper-Pearson 95 % upper bound {upper:.4f} (alpha {ALPHA})")

    print("\nheadline: 20 models x 500 tasks")
    res = {}
    for s in ("race", "incumbent"):
        rows = [h for h in heads if h[0] == s]
        sw, wr = sum(h[1] for h in rows), sum(h[2] for h in rows)
        used = [u for h in rows for u in h[3]]
        res[s] = (np.mean(used), np.quantile(used, 0.9))
        print(f"  {s:>9}: {wr} wrong of {sw}; episodes used {res[s][0]:.3f} mean, {res[s][1]:.3f} p90")
    n_sw, n_wr = sum(x[0] for x in naive), sum(x[1] for x in naive)
    print(f"  naive peeking (fixed-n 95 % paired intervals, every task): {n_wr} wrong of {n_sw} = {n_wr / n_sw:.3f}")

    print("\nacceptance (issue 34):")
    checks = [
        (f"sweeps >= 10,000: {all_sweeps}", all_sweeps >= 10_000),
        (f"wrong rate <= alpha: {all_wrong / all_sweeps:.4f}", all_wrong / all_sweeps <= ALPHA),
        (f"Clopper-Pearson upper <= alpha + 0.5 pt: {upper:.4f}", upper <= ALPHA + 0.005),
        (f"race 20 x 500 mean <= 0.45: {res['race'][0]:.3f}", res["race"][0] <= 0.45),
        (f"race 20 x 500 p90 <= 0.60: {res['race'][1]:.3f}", res["race"][1] <= 0.60),
        (f"incumbent (prior order) mean <= 0.40: {res['incumbent'][0]:.3f}", res["incumbent"][0] <= 0.40),
    ]
    for what, ok in checks:
        print(f"  {'ok  ' if ok else 'FAIL'} {what}")
    print(f"\n{time.time() - t0:.0f} s")
    sys.exit(0 if all(ok for _, ok in checks) else 1)


if __name__ == "__main__":
    main()
