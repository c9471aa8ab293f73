"""Confidence sequences (engine/scoring/anytime.py), issue 34: coverage measured by simulation (the
ever-miss rate is at most alpha within binomial error), exact at t = N, deterministic.

Each case draws a finite population of N task values, shuffles it R times (the shared random
order of a run) and counts the sequences that miss the population mean at any time. "Within
binomial error": the miss count is at most the 99.9 % upper quantile of Binomial(R, alpha), so a
correct sequence fails this test about once in a thousand runs and a sequence that is not
anytime-valid (a fixed-n interval checked at every t) fails it every time (the last test)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from engine.scoring.anytime import fixed_n_half_width, mean_cs, paired_cs, rescale

ALPHA = 0.05
R = 400


def _ever_miss(cs, mu: np.ndarray) -> np.ndarray:
    return ((cs.lo > mu[:, None] + 1e-12) | (cs.hi < mu[:, None] - 1e-12)).any(axis=-1)


def _limit(r: int = R, alpha: float = ALPHA) -> int:
    return int(binom.ppf(0.999, r, alpha))


def _orders(pop: np.ndarray, r: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.permuted(np.broadcast_to(pop, (r, pop.size)).copy(), axis=1)


@pytest.mark.parametrize("n", [50, 300, 1000])
@pytest.mark.parametrize("p", [0.02, 0.5, 0.98])
def test_bernoulli_coverage_and_exact_at_n(p, n):
    rng = np.random.default_rng(int(p * 1000) + n)
    pop = (rng.random(n) < p).astype(float)
    x = _orders(pop, R, seed=n)
    cs = mean_cs(x, n, ALPHA)
    mu = np.full(R, pop.mean())
    misses = int(_ever_miss(cs, mu).sum())
    assert misses <= _limit(), (p, n, misses)
    assert np.all(cs.lo[:, -1] == pop.mean()) and np.all(cs.hi[:, -1] == pop.mean())   # exact at t = N
    assert np.all(cs.hi - cs.lo >= 0) and np.all(np.diff(cs.hi - cs.lo, axis=-1) <= 1e-12)   # nested


@pytest.mark.parametrize("n", [50, 300, 1000])
def test_paired_three_valued_differences(n):
    """Two configurations' 0/1 scores on the same tasks: the difference takes -1, 0, +1."""
    rng = np.random.default_rng(n)
    a = (rng.random(n) < 0.6).astype(float)
    b = np.where(rng.random(n) < 0.7, a, 1 - a)                  # correlated, as two models on one task
    idx = np.array([np.random.default_rng(s).permutation(n) for s in range(R)])
    cs = paired_cs(a[idx], b[idx], n, ALPHA)
    mu = np.full(R, a.mean() - b.mean())
    assert set(np.unique(a - b)) <= {-1.0, 0.0, 1.0}
    assert int(_ever_miss(cs, mu).sum()) <= _limit()
    assert np.allclose(cs.lo[:, -1], mu) and np.allclose(cs.hi[:, -1], mu)


@pytest.mark.parametrize("n", [50, 300, 1000])
def test_judge_scale_one_to_ten(n):
    """A 1-10 judge score, rescaled to [0, 1] by its bounds."""
    rng = np.random.default_rng(7 + n)
    scores = rng.choice(np.arange(1, 11), size=n, p=np.r_[[0.02] * 4, [0.08] * 2, [0.2, 0.3, 0.2, 0.06]])
    pop = rescale(scores, 1, 10, "judge score")
    cs = mean_cs(_orders(pop, R, seed=n), n, ALPHA)
    assert int(_ever_miss(cs, np.full(R, pop.mean())).sum()) <= _limit()
    assert math.isclose(cs.lo[0, -1] * 9 + 1, scores.mean())


def test_deterministic_and_batched_as_one_by_one():
    rng = np.random.default_rng(3)
    x = rng.random((5, 120))
    whole = mean_cs(x, 200, 0.1)
    again = mean_cs(x, 200, 0.1)
    assert np.array_equal(whole.lo, again.lo) and np.array_equal(whole.hi, again.hi)
    for r in range(5):
        one = mean_cs(x[r], 200, 0.1)
        assert np.array_equal(one.lo, whole.lo[r]) and np.array_equal(one.hi, whole.hi[r])
    # the interval after t observations depends on those t only
    part = mean_cs(x[0, :40], 200, 0.1)
    assert np.array_equal(part.lo, whole.lo[0, :40])


def test_bad_values_are_errors_naming_them():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        mean_cs([0.5, 1.5], 10, 0.05)
    with pytest.raises(ValueError, match="3 observations of a population of 2"):
        mean_cs([0, 1, 0], 2, 0.05)
    with pytest.raises(ValueError, match=r"checklist: value 6.0 at position 1 is outside its bounds \[1, 5\]"):
        rescale([3, 6], 1, 5, "checklist")


def test_a_fixed_n_interval_checked_every_task_is_caught():
    """The same harness fails an interval that is not anytime-valid: the normal interval with the
    finite-population correction, recomputed after every task, misses far more than alpha."""
    n, r = 300, 400
    pop = (np.random.default_rng(11).random(n) < 0.5).astype(float)
    x = _orders(pop, r, seed=5)
    t = np.arange(1, n + 1)
    mean = np.cumsum(x, axis=1) / t
    sd = np.sqrt(np.maximum(np.cumsum(x * x, axis=1) / t - mean ** 2, 0) * t / np.maximum(t - 1, 1))
    hw = 1.959964 * sd / np.sqrt(t) * np.sqrt(np.maximum(n - t, 0) / (n - 1))   # fixed_n_half_width, every t
    assert math.isclose(hw[0, 99], fixed_n_half_width(x[0, :100], n, ALPHA), rel_tol=1e-5)
    misses = ((mean - hw > pop.mean() + 1e-12) | (mean + hw < pop.mean() - 1e-12))[:, 9:].any(axis=1).sum()
    assert misses > _limit(r), misses


def test_the_same_family_as_confseq_computes_it():
    """An independent implementation: confseq's predictable-mixture empirical-Bernstein CS for
    sampling without replacement (``predmix_empbern_twosided_cs``, running intersection, N set),
    recorded on fixed inputs by scripts/confseq_vectors.py. With confseq's variance center the
    bounds agree to rounding; the default (the paper's regularized center) is no wider on average
    than confseq's, and the logical bounds only narrow it."""
    import json
    from pathlib import Path

    from engine.scoring.anytime import _lower

    data = json.loads((Path(__file__).parent / "data/confseq_predmix_vectors.json").read_text())
    assert len(data["cases"]) == 4
    for case in data["cases"]:
        x, n, a = np.array(case["x"]), case["n_total"], case["alpha"]
        lo = np.maximum.accumulate(np.maximum(_lower(x, n, a / 2, plain_center=True)[0], 0.0))
        hi = 1.0 - np.maximum.accumulate(np.maximum(_lower(1.0 - x, n, a / 2, plain_center=True)[0], 0.0))
        assert np.allclose(lo, case["lo"], atol=1e-12) and np.allclose(hi, case["hi"], atol=1e-12)
        ours = mean_cs(x, n, a)
        assert np.mean(ours.hi - ours.lo) <= np.mean(np.array(case["hi"]) - np.array(case["lo"])) + 1e-3


def test_extending_a_running_sequence_gives_the_sequence_of_the_whole():
    from engine.scoring.anytime import RunningCS

    rng = np.random.default_rng(12)
    x = (rng.random((6, 300)) < 0.4).astype(float)
    whole = mean_cs(x, 300, 0.05)
    run = RunningCS((6,), 300, 0.05)
    parts = [run.extend(x[:, a:b]) for a, b in ((0, 1), (1, 40), (40, 41), (41, 299), (299, 300))]
    assert np.allclose(np.concatenate([p.lo for p in parts], axis=1), whole.lo, atol=1e-12)
    assert np.allclose(np.concatenate([p.hi for p in parts], axis=1), whole.hi, atol=1e-12)
    with pytest.raises(ValueError, match="1 observations of a population of 0"):
        run.extend(x[:, :1])
