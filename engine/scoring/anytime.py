"""Anytime-valid confidence sequences for the mean of a finite test set, seen in a random order.

A confidence sequence (CS) is a sequence of intervals ``C_1, C_2, ...`` that cover the quantity
*at every time at once* with probability at least 1 - alpha: it may be looked at after every task
and a run may stop whenever it likes (a decision reached, a budget spent), and the interval at the
stop is still valid. A fixed-n interval checked after every task is not (checking a 95 % interval
after every task picked the wrong model in 10 % of simulated sweeps:
``../shared/design/adaptive-evaluation.md``).

What is estimated is the mean over the N tasks of the test set (a finite population), with the
tasks taken in a uniformly random order (``engine/inputs/order.py``): the sequence narrows faster
than one for an infinite population and is exact, a single point, when all N are seen.

The family is the predictable plug-in empirical-Bernstein CS of Waudby-Smith & Ramdas
(*Confidence sequences for sampling without replacement*, NeurIPS 2020; *Estimating means of
bounded random variables by betting*, JRSS-B 2024), two-sided, with the running intersection and
the logical bounds ``[S_t / N, (S_t + N - t) / N]``. For ``x_i`` in [0, 1] in random order::

    mu_{i-1}  = (1/2 + sum_{j<i} x_j) / i
    var_{i-1} = (1/4 + sum_{j<i} (x_j - mu_j)^2) / i
    lam_i     = min(sqrt(2 log(2/alpha) / (var_{i-1} i log(1 + i))), c)       c = 1/2
    v_i       = 4 (x_i - mu_{i-1})^2,     psi(l) = (-log(1 - l) - l) / 4
    A_t = sum lam_i (x_i + S_{i-1} / (N - i + 1)),   W_t = sum lam_i N / (N - i + 1)
    B_t = log(2/alpha) + sum v_i psi(lam_i)
    C_t = [(A_t - B_t) / W_t, (A_t + B_t) / W_t]

(``A_t - mu W_t`` is the sum of ``lam_i`` times each draw minus the mean of what was left to draw,
a martingale; B_t bounds it by the empirical-Bernstein supermartingale.) Paired differences of
two configurations on the same tasks, ``d = a - b`` in [-1, 1], enter as ``(d + 1) / 2``.

Everything here is NumPy over arrays whose last axis is time, so one call gives the whole
sequence of many runs at once (``perf/adaptive_sim.py`` runs 10,000 sweeps through it). The
tests check coverage (the ever-miss rate at most alpha), exactness at t = N and determinism
(``tests/engine/scoring/test_anytime.py``), and agree with an independent implementation of the
same family (``confseq``'s, dev-only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]
FAMILY = "wor-predictable-plugin-empirical-bernstein"
TRUNCATION = 0.5          # c: the largest bet; 1/2 is the papers' default for [0, 1] data


@dataclass(frozen=True)
class Sequence:
    """Lower and upper bounds after each of the first ``t`` observations (last axis: time)."""
    lo: Array
    hi: Array

    def at(self, t: int) -> tuple[float, float]:
        """The interval after ``t`` observations (t = 0: the whole range is not known here, so it
        is the caller's ``[0, 1]``)."""
        if t <= 0:
            return 0.0, 1.0
        return float(self.lo[..., t - 1]), float(self.hi[..., t - 1])


def mean_cs(x: npt.ArrayLike, n_total: int, alpha: float) -> Sequence:
    """The CS for the mean of ``n_total`` values in [0, 1], of which ``x`` (last axis) are the first
    ones in a uniformly random order. Any leading axes are independent sequences. ``x`` may be
    shorter than ``n_total``; it may not be longer."""
    xs = np.asarray(x, dtype=np.float64)                          # checked by extend
    return RunningCS(xs.shape[:-1], n_total, alpha).extend(xs)


class RunningCS:
    """The same sequences, extended as values arrive: ``extend(x)`` takes the next values (last
    axis) of each sequence and returns the bounds after each of them, in time proportional to the
    new values only (the driver's race extends its pairs each time the admitted prefix grows).
    ``mean_cs`` is one ``extend`` from the start."""

    def __init__(self, shape: tuple[int, ...], n_total: int, alpha: float) -> None:
        if not 0 < alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {alpha}")
        self.n_total, self.alpha, self.t = n_total, alpha, 0
        self._low, self._up = _Side.zero(shape), _Side.zero(shape)
        self.lo, self.hi = np.zeros(shape), np.ones(shape)          # the running intersection so far

    def extend(self, x: npt.ArrayLike) -> Sequence:
        xs = _checked(x, self.n_total - self.t, self.alpha)
        t_len = xs.shape[-1]
        if t_len == 0:
            empty = np.zeros(xs.shape, dtype=np.float64)
            return Sequence(empty, empty.copy())
        t0, n = self.t, self.n_total
        low, low_sums = _lower(xs, n, self.alpha / 2, state=self._low, t0=t0)
        up, up_sums = _lower(1.0 - xs, n, self.alpha / 2, state=self._up, t0=t0)
        lo = np.maximum(np.maximum.accumulate(np.maximum(low, 0.0), axis=-1), self.lo[..., None])
        hi = np.minimum(1.0 - np.maximum.accumulate(np.maximum(up, 0.0), axis=-1), self.hi[..., None])
        s = self._low.s[..., None] + np.cumsum(xs, axis=-1)          # S_i for the new steps
        i = np.arange(t0 + 1, t0 + t_len + 1, dtype=np.float64)
        lo = np.maximum(lo, s / n)                                   # what is seen is in the mean
        hi = np.minimum(hi, (s + n - i) / n)                         # the unseen are at most 1 each
        self.lo, self.hi = lo[..., -1].copy(), hi[..., -1].copy()
        hi = np.maximum(hi, lo)
        if t0 + t_len == n:                                          # all seen: the mean itself
            lo[..., -1] = hi[..., -1] = s[..., -1] / n
        self._low, self._up = _Side(*low_sums), _Side(*up_sums)
        self.t += t_len
        return Sequence(lo, hi)


@dataclass
class _Side:
    """The sums behind one side's bound after the values seen so far (per sequence)."""
    s: Array            # S: sum of the values
    sq: Array           # sum of squared deviations from the regularized running mean
    a: Array            # sum of lam_i (x_i + S_{i-1} / (N - i + 1))
    w: Array            # sum of lam_i N / (N - i + 1)
    vpsi: Array         # sum of v_i psi(lam_i)

    @staticmethod
    def zero(shape: tuple[int, ...]) -> _Side:
        return _Side(*(np.zeros(shape) for _ in range(5)))


def _checked(x: npt.ArrayLike, n_total: int, alpha: float) -> Array:
    xs = np.asarray(x, dtype=np.float64)
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if xs.shape[-1] > n_total:
        raise ValueError(f"{xs.shape[-1]} observations of a population of {n_total}")
    if xs.size and (np.isnan(xs).any() or xs.min() < 0.0 or xs.max() > 1.0):
        raise ValueError("values must be in [0, 1] (rescale a bounded score first: engine.scoring.anytime.rescale)")
    return xs


def _lower(xs: Array, n_total: int, alpha: float, plain_center: bool = False, state: _Side | None = None,
           t0: int = 0) -> tuple[Array, tuple[Array, Array, Array, Array, Array]]:
    """The one-sided lower bound ``(A_t - B_t) / W_t`` at level ``alpha`` for every new t (before
    the running intersection), continuing from ``state`` after ``t0`` values, and the sums after
    the new values. ``plain_center``: the variance increments are taken around the plain running
    mean (0 before the first value), as ``confseq.predmix`` computes them, instead of the paper's
    regularized one; both are valid (any predictable center is), and the test that compares with
    confseq uses it (from the start only)."""
    st = state or _Side.zero(xs.shape[:-1])
    t_len = xs.shape[-1]
    i = np.arange(t0 + 1, t0 + t_len + 1, dtype=np.float64)       # t0+1 .. t0+t
    s = st.s[..., None] + np.cumsum(xs, axis=-1)                  # S_i
    s_prev = s - xs                                               # S_{i-1}
    mu_after = (0.5 + s) / (i + 1)                                # mu_i (after x_i), regularized
    dev = (xs - mu_after) ** 2
    sq = st.sq[..., None] + np.cumsum(dev, axis=-1)
    var_prev = (0.25 + (sq - dev)) / i                            # var_{i-1}: sums over j < i
    log_term = math.log(1.0 / alpha)
    lam = np.minimum(np.sqrt(2.0 * log_term / (var_prev * i * np.log1p(i))), TRUNCATION)
    center = np.where(i > 1, s_prev / np.maximum(i - 1, 1), 0.0) if plain_center else (0.5 + s_prev) / i
    v = (xs - center) ** 2
    psi = -np.log1p(-lam) - lam
    remaining = n_total - i + 1.0                                 # N - i + 1
    a = st.a[..., None] + np.cumsum(lam * (xs + s_prev / remaining), axis=-1)
    w = st.w[..., None] + np.cumsum(lam * n_total / remaining, axis=-1)
    vpsi = st.vpsi[..., None] + np.cumsum(v * psi, axis=-1)
    out: Array = (a - (log_term + vpsi)) / w
    return out, (s[..., -1], sq[..., -1], a[..., -1], w[..., -1], vpsi[..., -1])


def paired_cs(a: npt.ArrayLike, b: npt.ArrayLike, n_total: int, alpha: float) -> Sequence:
    """The CS for the mean difference ``mean(a) - mean(b)`` over ``n_total`` tasks, from the first
    tasks of one shared random order (values in [0, 1]; the bounds are in [-1, 1])."""
    d = (np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64) + 1.0) / 2.0
    cs = mean_cs(d, n_total, alpha)
    return Sequence(2.0 * cs.lo - 1.0, 2.0 * cs.hi - 1.0)


def rescale(values: npt.ArrayLike, lo: float, hi: float, what: str = "value") -> Array:
    """Values of a score bounded in ``[lo, hi]`` (a 1-5 checklist, a percentage) mapped to [0, 1];
    a value outside the bounds is an error naming them, never clipped."""
    v = np.asarray(values, dtype=np.float64)
    if hi <= lo:
        raise ValueError(f"{what}: bounds [{lo}, {hi}] are empty")
    bad = np.flatnonzero(np.isnan(v) | (v < lo) | (v > hi))
    if bad.size:
        raise ValueError(f"{what}: value {float(v.flat[bad[0]])!r} at position {int(bad[0])} is outside its bounds [{lo}, {hi}]")
    return (v - lo) / (hi - lo)


def fixed_n_half_width(x: npt.ArrayLike, n_total: int, alpha: float) -> float:
    """The half-width of the usual fixed-n normal interval with the finite-population correction,
    for comparison only (``perf/adaptive_sim.py``): it is valid for one n fixed in advance, never
    for an n chosen by looking."""
    xs = np.asarray(x, dtype=np.float64)
    n = xs.size
    if n < 2:
        return float("inf")
    z = NormalDist().inv_cdf(1 - alpha / 2)
    fpc = math.sqrt(max(n_total - n, 0) / max(n_total - 1, 1))
    return float(z * xs.std(ddof=1) / math.sqrt(n) * fpc)
