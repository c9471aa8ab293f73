"""Statistics for reports: pairwise win rates, Bradley-Terry ratings, bootstrap intervals that
resample tasks, paired tests and judge-human agreement. Plain NumPy, no cluster, no I/O.

Why tasks are the resampling unit: episodes of one task (several seeds, several systems) are
correlated; resampling episodes would treat them as independent and give intervals that are too
narrow. Intervals of means are :func:`interval`'s: exact (Clopper-Pearson) for a proportion with one
0/1 value per task, else a percentile interval of a cluster bootstrap over task ids, and none at
all below ``MIN_BOOT_TASKS`` tasks, where a bootstrap interval would look far surer than it is.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from statistics import fmean
from typing import TypeVar

import numpy as np

from engine.scoring.kinds import PROPORTION, MetricKind

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
DEFAULT_BOOT = 1000
# Below this many tasks no bootstrap interval is given. For roughly normal per-task values the
# percentile bootstrap of a mean is mean +- 1.96 * s * sqrt((n-1)/n) / sqrt(n), which covers the true
# mean with probability 2 * T_{n-1}(1.96 * sqrt((n-1)/n)) - 1: 75% at 3 tasks, 85% at 5, 90% at 10, 93%
# at 20 for a nominal 95%. At 10 the shortfall is modest and stated on the page; below, the interval
# mostly measures how few tasks there were (all-equal values give a zero-width one).
MIN_BOOT_TASKS = 10
_DRAW_CELLS = 1000 * 4096      # task draws per block of bootstrap resamples (cluster_mean)
# how an Estimate's interval was made (Estimate.method; the metrics table's ``interval`` column)
EXACT, BOOTSTRAP, TOO_FEW = "exact", "bootstrap", "too_few_tasks"


@dataclass(frozen=True)
class Outcome:
    """One pairwise judgement: ``winner`` is ``a``, ``b`` or None for a tie (a tie counts half)."""
    task_id: str
    a: str
    b: str
    winner: str | None


@dataclass(frozen=True)
class Estimate:
    value: float
    lo: float
    hi: float
    n: int                  # units the value is computed from (episodes, comparisons)
    n_tasks: int = 0        # resampling units behind the interval
    method: str = BOOTSTRAP  # exact | bootstrap | too_few_tasks (lo and hi are NaN): see interval()


# -- win rates ------------------------------------------------------------------------------------
def _score(o: Outcome) -> float:
    """1 when ``a`` won, 0 when ``b`` won, 0.5 for a tie."""
    return 0.5 if o.winner is None else float(o.winner == "a")


def win_counts(outcomes: Iterable[Outcome], systems: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(W, N): W[i, j] = wins of i over j (ties half), N[i, j] = comparisons of i and j."""
    idx = {s: i for i, s in enumerate(systems)}
    k = len(systems)
    W, N = np.zeros((k, k)), np.zeros((k, k))
    for o in outcomes:
        i, j = idx[o.a], idx[o.b]
        s = _score(o)
        W[i, j] += s
        W[j, i] += 1.0 - s
        N[i, j] += 1
        N[j, i] += 1
    return W, N


def win_rate_matrix(outcomes: Iterable[Outcome], systems: Sequence[str]) -> np.ndarray:
    """M[i, j] = share of i-vs-j comparisons that i won (ties half); NaN where they never met and
    on the diagonal. This is the paper's Figure 3."""
    W, N = win_counts(outcomes, systems)
    with np.errstate(invalid="ignore", divide="ignore"):
        M = np.where(N > 0, W / np.where(N > 0, N, 1), np.nan)
    np.fill_diagonal(M, np.nan)
    return M


# -- Bradley-Terry --------------------------------------------------------------------------------
def bradley_terry(outcomes: Iterable[Outcome], systems: Sequence[str], prior_games: float = 0.0,
                  tol: float = 1e-10, max_iter: int = 20_000) -> np.ndarray:
    """Log-strengths theta (mean zero) maximising the Bradley-Terry likelihood,
    P(i beats j) = 1 / (1 + exp(theta_j - theta_i)), by Hunter's (2004) MM iteration.

    ``prior_games`` adds that many virtual games, split evenly, to every pair that met: with 0 it
    is the maximum-likelihood estimate (a system that won or lost everything gets +-inf); the
    report uses 1 so every rating is finite. Systems that never met anyone get NaN."""
    W, N = win_counts(outcomes, systems)
    met = N > 0
    W = W + met * prior_games / 2.0
    N = N + met * prior_games
    k = len(systems)
    theta = np.full(k, np.nan)
    active = N.sum(axis=1) > 0
    if not active.any():
        return theta
    wins = W.sum(axis=1)
    p = np.where(active, 1.0, 0.0)
    for _ in range(max_iter):
        S = p[:, None] + p[None, :]
        denom = np.divide(N, S, out=np.zeros_like(N), where=(N > 0) & (S > 0)).sum(axis=1)
        new = np.divide(wins, denom, out=np.zeros(k), where=active & (denom > 0))
        pos = new[new > 0]
        if pos.size:
            new = new / np.exp(np.mean(np.log(pos)))     # fix the scale: geometric mean 1
        done = np.max(np.abs(new - p)) < tol * max(1.0, float(np.max(new)))
        p = new
        if done:
            break
    with np.errstate(divide="ignore"):
        logp = np.log(p[active])
    finite = np.isfinite(logp)
    if finite.any():
        logp = logp - logp[finite].mean()
    theta[active] = logp
    return theta


def elo(theta: np.ndarray) -> np.ndarray:
    """Log-strengths on the familiar Elo scale (400 points = 10:1 odds), centred on 1000."""
    return 1000.0 + 400.0 * theta / math.log(10.0)


# -- bootstrap ------------------------------------------------------------------------------------
def _percentile(samples: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    with warnings.catch_warnings():        # cells that are NaN in every resample (the diagonal) stay NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        return (np.nanpercentile(samples, 100 * alpha / 2, axis=0),
                np.nanpercentile(samples, 100 * (1 - alpha / 2), axis=0))


def bootstrap(groups: Sequence[T], statistic: Callable[[list[T]], np.ndarray | float],
              n_boot: int = DEFAULT_BOOT, seed: int = 0, alpha: float = 0.05
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(point, lo, hi) of ``statistic`` over resamples (with replacement) of ``groups``, one group
    per task. ``statistic`` gets a list of groups and returns a float or an array."""
    point = np.asarray(statistic(list(groups)), dtype=float)
    if len(groups) < 2:
        nan = np.full_like(point, np.nan)
        return point, nan, nan
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(groups), size=(n_boot, len(groups)))
    samples = np.stack([np.asarray(statistic([groups[i] for i in d]), dtype=float) for d in draws])
    lo, hi = _percentile(samples, alpha)
    return point, lo, hi


def cluster_mean(values: Sequence[float], clusters: Sequence[Hashable], n_boot: int = DEFAULT_BOOT,
                 seed: int = 0, alpha: float = 0.05) -> Estimate:
    """Mean of per-episode ``values`` with a bootstrap interval that resamples clusters (tasks):
    each resample draws tasks with replacement and averages all of their episodes. Vectorised,
    so it is cheap for every metric of every report."""
    x = np.asarray(values, dtype=float)
    keep = ~np.isnan(x)
    x = x[keep]
    cl = [c for c, k in zip(clusters, keep) if k]
    if x.size == 0:
        return Estimate(float("nan"), float("nan"), float("nan"), 0, 0, TOO_FEW)
    ids = {c: i for i, c in enumerate(dict.fromkeys(cl))}
    g = np.array([ids[c] for c in cl])
    sums = np.bincount(g, weights=x, minlength=len(ids))
    counts = np.bincount(g, minlength=len(ids)).astype(float)
    value = float(x.mean())
    if len(ids) < 2:
        return Estimate(value, float("nan"), float("nan"), int(x.size), len(ids), TOO_FEW)
    rng = np.random.default_rng(seed)
    # resamples drawn in blocks of at most _DRAW_CELLS task draws: the metrics table computes this
    # for every mean of every configuration, so memory must not grow as n_boot x tasks (a single
    # block, as before, while n_boot x tasks fits)
    means = np.empty(n_boot)
    step = max(1, _DRAW_CELLS // len(ids))
    for start in range(0, n_boot, step):
        draws = rng.integers(0, len(ids), size=(min(step, n_boot - start), len(ids)))
        means[start:start + len(draws)] = sums[draws].sum(axis=1) / counts[draws].sum(axis=1)
    lo, hi = _percentile(means[:, None], alpha)
    return Estimate(value, float(lo[0]), float(hi[0]), int(x.size), len(ids))


def interval(values: Sequence[float], tasks: Sequence[Hashable], kind: MetricKind, n_boot: int = DEFAULT_BOOT,
             seed: int = 0, alpha: float = 0.05, what: str = "") -> Estimate:
    """The mean of per-episode ``values`` (NaN: absent) with the interval its ``kind`` calls for
    (engine/scoring/kinds.py; never chosen from the values):

    * a proportion (each value 0 or 1, checked) with one episode per task: a share of independent
      trials, so the exact Clopper-Pearson interval (0 of 20 is [0, 0.168], never [0, 0]);
    * else, with at least ``MIN_BOOT_TASKS`` tasks, the task bootstrap of :func:`cluster_mean`
      (several seeds of a task are correlated, so a binomial interval would be too narrow; a score,
      a count or tokens are not trials at all), clipped to the kind's range;
    * else no interval (``method`` too_few_tasks, lo and hi NaN).
    Every output that prints an interval of a mean gets it from here, so they print the same one.
    ``what`` names the metric in the error a value outside its kind raises."""
    pairs = [(float(v), t) for v, t in zip(values, tasks) if not math.isnan(float(v))]
    n, n_tasks = len(pairs), len({t for _, t in pairs})
    if n == 0:
        return Estimate(float("nan"), float("nan"), float("nan"), 0, 0, TOO_FEW)
    for v, t in pairs:
        kind.check(v, f"{what or 'a metric'} (task {t})")
    if kind.kind == "proportion" and n_tasks == n:
        k = int(sum(v for v, _ in pairs))
        lo, hi = clopper_pearson(k, n, alpha)
        return Estimate(k / n, lo, hi, n, n_tasks, EXACT)
    if n_tasks < MIN_BOOT_TASKS:
        return Estimate(fmean(v for v, _ in pairs), float("nan"), float("nan"), n, n_tasks, TOO_FEW)
    e = cluster_mean([v for v, _ in pairs], [t for _, t in pairs], n_boot, seed, alpha)
    return replace(e, lo=max(e.lo, kind.lo), hi=min(e.hi, kind.hi))


def clopper_pearson(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """The exact (Clopper-Pearson) 1 - ``alpha`` interval of a proportion, ``k`` successes of
    ``n``: lo is the p at which P(X >= k) = alpha/2, hi the p at which P(X <= k) = alpha/2 (X
    binomial(n, p)); 0 and 1 at the ends. Found by bisection on the binomial tail (no SciPy)."""
    if not 0 <= k <= n or n < 1:
        raise ValueError(f"clopper_pearson: need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    i = np.arange(n + 1)
    log_fact = np.concatenate(([0.0], np.cumsum(np.log(np.arange(1, n + 1)))))
    log_comb = log_fact[n] - log_fact - log_fact[::-1]

    def at_most(j: int, p: float) -> float:      # P(X <= j) under p, summed in log space (no overflow)
        if p >= 1.0:
            return float(j >= n)
        log_pmf = log_comb[: j + 1] + i[: j + 1] * math.log(p) + (n - i[: j + 1]) * math.log1p(-p)
        top = float(log_pmf.max())
        return min(1.0, math.exp(top) * float(np.exp(log_pmf - top).sum()))

    def solve(j: int, target: float) -> float:   # the p in (0, 1) where P(X <= j), decreasing in p, is target
        a, b = 0.0, 1.0
        for _ in range(100):
            mid = (a + b) / 2
            a, b = (mid, b) if at_most(j, mid) > target else (a, mid)
        return (a + b) / 2

    lo = 0.0 if k == 0 else solve(k - 1, 1.0 - alpha / 2)      # P(X >= k) = alpha/2
    hi = 1.0 if k == n else solve(k, alpha / 2)                # P(X <= k) = alpha/2
    return lo, hi


def _by_task(outcomes: Iterable[Outcome]) -> list[list[Outcome]]:
    groups: dict[str, list[Outcome]] = {}
    for o in outcomes:
        groups.setdefault(o.task_id, []).append(o)
    return list(groups.values())


def win_rate_intervals(outcomes: Sequence[Outcome], systems: Sequence[str], n_boot: int = DEFAULT_BOOT,
                       seed: int = 0, alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(M, lo, hi, N): the win-rate matrix, each cell's interval and counts. A cell's interval is
    chosen by what the cell is, as :func:`interval` chooses (never by its values):

    * one verdict per task for the pair and no tie: a share of independent trials, so the exact
      Clopper-Pearson interval (4 wins of 4 is [0.398, 1], never [1, 1]);
    * else (both orders of a pair are two verdicts of one task, a tie counts half), the task
      bootstrap, with at least ``MIN_BOOT_TASKS`` tasks behind the pair;
    * else NaN: too few tasks for an interval."""
    groups = _by_task(outcomes)
    point, lo, hi = bootstrap(groups, lambda gs: win_rate_matrix(itertools.chain(*gs), systems),
                              n_boot, seed, alpha)
    W, N = win_counts(outcomes, systems)
    idx = {s: i for i, s in enumerate(systems)}
    per_pair: dict[tuple[int, int], list[Outcome]] = {}
    for o in outcomes:
        per_pair.setdefault((min(idx[o.a], idx[o.b]), max(idx[o.a], idx[o.b])), []).append(o)
    for (i, j), outs in per_pair.items():
        tasks = [o.task_id for o in outs]
        if len(set(tasks)) == len(tasks) and all(o.winner is not None for o in outs):
            k = int(round(W[i, j]))
            lo[i, j], hi[i, j] = clopper_pearson(k, len(outs), alpha)
            lo[j, i], hi[j, i] = 1.0 - hi[i, j], 1.0 - lo[i, j]
        elif len(set(tasks)) < MIN_BOOT_TASKS:
            lo[i, j] = hi[i, j] = lo[j, i] = hi[j, i] = float("nan")
    return point, lo, hi, N


def bradley_terry_intervals(outcomes: Sequence[Outcome], systems: Sequence[str], prior_games: float = 1.0,
                            n_boot: int = DEFAULT_BOOT, seed: int = 0, alpha: float = 0.05
                            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ratings and their task-bootstrap intervals; NaN intervals below ``MIN_BOOT_TASKS`` tasks
    (four tasks of one result resample to one rating: [1.10, 1.10] says nothing)."""
    groups = _by_task(outcomes)
    if len(groups) < MIN_BOOT_TASKS:            # no interval: no resamples to fit
        theta = bradley_terry(outcomes, systems, prior_games)
        return theta, np.full_like(theta, np.nan), np.full_like(theta, np.nan)
    return bootstrap(groups, lambda gs: bradley_terry(itertools.chain(*gs), systems, prior_games),
                     n_boot, seed, alpha)


# -- paired tests ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class PairedTest:
    mean_diff: float        # mean over shared tasks of (a - b)
    lo: float
    hi: float
    p_value: float          # two-sided, sign-flip permutation test on per-task differences
    n_tasks: int
    exact: bool = True      # p_value enumerates every sign pattern (False: Monte Carlo, (b+1)/(m+1))
    method: str = BOOTSTRAP  # how lo/hi were made: bootstrap, or too_few_tasks (NaN; MIN_BOOT_TASKS)


def paired_test(a: Mapping[str, float], b: Mapping[str, float], n_boot: int = DEFAULT_BOOT,
                n_perm: int = 10_000, seed: int = 0, alpha: float = 0.05) -> PairedTest:
    """Two systems on the same tasks: per-task values (already averaged over seeds) are paired;
    the interval resamples tasks (none below ``MIN_BOOT_TASKS`` shared tasks: two tasks that both
    differ by 1 would give [1, 1] beside p = 0.5), the p-value flips the sign of each task's difference.

    Up to 16 tasks the p-value is exact: the share of all 2**n sign patterns (the observed one
    among them) whose |sum| is at least the observed one. Above, ``n_perm`` random patterns are
    drawn and the p-value is (b + 1) / (m + 1), b the draws with |sum| >= observed, m = ``n_perm``
    (Phipson & Smyth 2010): the observed pattern counts as one of the draws, so the estimate is
    never 0 (its floor is 1 / (n_perm + 1)) and a test at level alpha stays valid. The plain share
    b / m is 0 whenever no draw reaches the observed sum, e.g. 30 tasks all in one direction."""
    shared = sorted(set(a) & set(b))
    d = np.array([a[t] - b[t] for t in shared], dtype=float)
    d = d[~np.isnan(d)]
    n = int(d.size)
    if n == 0:
        return PairedTest(float("nan"), float("nan"), float("nan"), float("nan"), 0, method=TOO_FEW)
    mean = float(d.mean())
    rng = np.random.default_rng(seed)
    method = BOOTSTRAP if n >= MIN_BOOT_TASKS else TOO_FEW
    if method == BOOTSTRAP:
        boots = d[rng.integers(0, n, size=(n_boot, n))].mean(axis=1)
        lo, hi = (float(v[0]) for v in _percentile(boots[:, None], alpha))
    else:
        lo = hi = float("nan")
    obs = abs(d.sum())
    tol = 1e-12 * max(1.0, float(np.abs(d).sum()))
    if n <= 16:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
        p = float(np.mean(np.abs(signs @ d) >= obs - tol))
        return PairedTest(mean, lo, hi, p, n, exact=True, method=method)
    signs = rng.choice((1.0, -1.0), size=(n_perm, n))
    hits = int(np.count_nonzero(np.abs(signs @ d) >= obs - tol))        # b: draws at least as extreme
    p = (hits + 1) / (n_perm + 1)
    return PairedTest(mean, lo, hi, p, n, exact=False, method=method)


def sign_test(wins: int, losses: int) -> float:
    """Exact two-sided binomial test of wins vs losses (ties dropped) against 50/50."""
    n = wins + losses
    if n == 0:
        return float("nan")
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2.0 ** n
    return min(1.0, 2.0 * tail)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (family-wise error control over the whole family, e.g.
    every pair's sign test in one table). NaN entries (no test) stay NaN and do not count."""
    idx = [i for i, p in enumerate(p_values) if not math.isnan(p)]
    m = len(idx)
    out = [float("nan")] * len(p_values)
    running = 0.0
    for rank, i in enumerate(sorted(idx, key=lambda i: p_values[i])):
        running = max(running, min(1.0, (m - rank) * p_values[i]))     # step-down, kept monotone
        out[i] = running
    return out


# -- agreement with humans ------------------------------------------------------------------------
def agreement(judge: Mapping[K, str], human: Mapping[K, str | None],
              task_of: Callable[[K], str] | None = None, n_boot: int = DEFAULT_BOOT,
              seed: int = 0) -> Estimate:
    """Share of comparisons where the judge picked the human's winner (appendix C.3): human ties
    (None) are excluded, and so are comparisons the judge did not decide. Keys are comparison
    keys; ``task_of`` maps a key to its task for the interval (default: the key itself)."""
    keys = [k for k, h in human.items() if h is not None and judge.get(k) is not None]
    vals = [float(judge[k] == human[k]) for k in keys]
    return interval(vals, [task_of(k) if task_of else k for k in keys], PROPORTION, n_boot, seed, what="agreement")
