"""Win rates and Bradley-Terry on hand-computed cases; bootstrap intervals that shrink with more
tasks and cover the truth at about the nominal rate; paired tests; agreement."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.scoring import kinds, stats
from engine.scoring.stats import Outcome


def outs(spec: list[tuple[str, str, str, str | None]]) -> list[Outcome]:
    return [Outcome(t, a, b, w) for t, a, b, w in spec]


def test_win_rate_matrix_hand_computed():
    # A-B: A wins 2 of 3; A-C: one tie (half each); B-C never met
    o = outs([("t1", "A", "B", "a"), ("t2", "A", "B", "a"), ("t3", "A", "B", "b"), ("t1", "A", "C", None)])
    M = stats.win_rate_matrix(o, ["A", "B", "C"])
    assert M[0, 1] == pytest.approx(2 / 3) and M[1, 0] == pytest.approx(1 / 3)
    assert M[0, 2] == 0.5 and M[2, 0] == 0.5
    assert math.isnan(M[1, 2]) and math.isnan(M[0, 0])
    # outcomes are stated for a vs b whatever the order systems are listed in
    M2 = stats.win_rate_matrix(outs([("t", "B", "A", "b")]), ["A", "B"])
    assert M2[0, 1] == 1.0 and M2[1, 0] == 0.0


def test_bradley_terry_two_players_closed_form():
    o = outs([("t1", "A", "B", "a")] * 3 + [("t2", "A", "B", "b")])
    th = stats.bradley_terry(o, ["A", "B"])
    assert th[0] - th[1] == pytest.approx(math.log(3), abs=1e-8)       # p = 3/4 -> odds 3
    assert th.sum() == pytest.approx(0, abs=1e-12)
    th1 = stats.bradley_terry(o, ["A", "B"], prior_games=1.0)          # 3.5 of 5 -> odds 7/3
    assert th1[0] - th1[1] == pytest.approx(math.log(7 / 3), abs=1e-8)
    assert stats.elo(np.array([0.0]))[0] == 1000
    assert stats.elo(np.array([math.log(10)]))[0] == pytest.approx(1400)


def test_bradley_terry_three_players_satisfies_likelihood_equations():
    # A>B 3-1, B>C 3-1, A>C 2-2: the MLE makes expected wins equal observed wins for each player
    spec = ([("t", "A", "B", "a")] * 3 + [("t", "A", "B", "b")] + [("t", "B", "C", "a")] * 3
            + [("t", "B", "C", "b")] + [("t", "A", "C", "a")] * 2 + [("t", "A", "C", "b")] * 2)
    o = outs(spec)
    names = ["A", "B", "C"]
    th = stats.bradley_terry(o, names)
    W, N = stats.win_counts(o, names)
    p = 1 / (1 + np.exp(th[None, :] - th[:, None]))
    expected = (N * p).sum(axis=1)
    assert np.allclose(expected, W.sum(axis=1), atol=1e-6)
    assert th[0] > th[1] > th[2]                             # wins: A 5/8, B 4/8, C 3/8
    # a balanced cycle gives equal ratings
    cyc = outs([("t", "A", "B", "a"), ("t", "B", "C", "a"), ("t", "A", "C", "b")])
    assert np.allclose(stats.bradley_terry(cyc, names), 0, atol=1e-8)


def test_bradley_terry_separation_and_absent():
    o = outs([("t", "A", "B", "a")] * 4)
    th = stats.bradley_terry(o, ["A", "B", "C"], prior_games=1.0)
    assert np.isfinite(th[:2]).all() and th[0] - th[1] == pytest.approx(math.log(4.5 / 0.5), abs=1e-8)
    assert math.isnan(th[2])                                   # never played
    th0 = stats.bradley_terry(o, ["A", "B"])
    assert th0[1] == -np.inf                                   # no MLE: the loser goes to -inf


def test_cluster_mean_interval_shrinks_with_tasks():
    rng = np.random.default_rng(1)
    widths = []
    for n in (25, 100, 400):
        x = rng.binomial(1, 0.3, size=n).astype(float)
        e = stats.cluster_mean(x, [f"t{i}" for i in range(n)], n_boot=2000, seed=0)
        assert e.lo <= e.value <= e.hi and e.n == n and e.n_tasks == n
        widths.append(e.hi - e.lo)
    assert widths[0] > widths[1] > widths[2]
    assert 1.5 < widths[0] / widths[1] < 2.7 and 1.5 < widths[1] / widths[2] < 2.7    # ~ 1/sqrt(n)


@pytest.mark.slow
def test_cluster_mean_covers_truth_at_nominal_rate():
    """Simulated tasks with 3 seeds each sharing a task effect: the task bootstrap covers the true
    mean ~95% of the time; an episode bootstrap (ignoring clustering) would under-cover."""
    rng = np.random.default_rng(7)
    true, n_tasks, seeds, sims = 0.5, 60, 3, 300
    hits = naive_hits = 0
    for s in range(sims):
        effect = rng.normal(0, 1.0, size=n_tasks)
        x = (true + effect[:, None] + rng.normal(0, 0.3, size=(n_tasks, seeds))).ravel()
        tasks = np.repeat(np.arange(n_tasks), seeds)
        e = stats.cluster_mean(x, tasks.tolist(), n_boot=1000, seed=s)
        hits += e.lo <= true <= e.hi
        naive = stats.cluster_mean(x, list(range(x.size)), n_boot=1000, seed=s)
        naive_hits += naive.lo <= true <= naive.hi
    coverage = hits / sims
    assert 0.90 <= coverage <= 0.98, coverage
    assert naive_hits / sims < 0.85          # the point of resampling tasks


def test_bootstrap_generic_and_win_rate_intervals():
    o = outs([(f"t{i}", "A", "B", "a" if i % 4 else "b") for i in range(40)])
    M, lo, hi, N = stats.win_rate_intervals(o, ["A", "B"], n_boot=500)
    assert M[0, 1] == pytest.approx(0.75) and N[0, 1] == 40
    assert lo[0, 1] < 0.75 < hi[0, 1] and hi[0, 1] - lo[0, 1] < 0.35
    th, tlo, thi = stats.bradley_terry_intervals(o, ["A", "B"], n_boot=300)
    assert tlo[0] < th[0] < thi[0]
    # one verdict per task, no tie: exact, 4 of 4 is [0.398, 1] (issue 46: bootstrap gave [1, 1])
    four = outs([(f"t{i}", "A", "B", "a") for i in range(4)])
    M, lo, hi, N = stats.win_rate_intervals(four, ["A", "B"], n_boot=200)
    assert M[0, 1] == 1.0 and lo[0, 1] == pytest.approx(0.025 ** 0.25, abs=1e-6) and hi[0, 1] == 1.0
    assert lo[1, 0] == 0.0 and hi[1, 0] == pytest.approx(1 - 0.025 ** 0.25, abs=1e-6)
    th, tlo, thi = stats.bradley_terry_intervals(four, ["A", "B"], n_boot=200)
    assert th[0] > 0 and np.isnan(tlo).all() and np.isnan(thi).all()         # 4 tasks: too few
    # both orders (two verdicts a task) or a tie: no longer trials; the bootstrap from 10 tasks
    both = outs([(f"t{i % 5}", "A", "B", "a") for i in range(10)])
    assert np.isnan(stats.win_rate_intervals(both, ["A", "B"], n_boot=200)[1][0, 1])
    tied = outs([(f"t{i}", "A", "B", None if i == 0 else "a") for i in range(12)])
    M, lo, hi, _ = stats.win_rate_intervals(tied, ["A", "B"], n_boot=500)
    assert lo[0, 1] < M[0, 1] <= hi[0, 1] <= 1.0 and lo[0, 1] > 0.5
    p, l_, h_ = stats.bootstrap([1.0], lambda g: float(np.mean(g)))
    assert p == 1.0 and math.isnan(l_) and math.isnan(h_)      # one task: no interval, not a fake one


def test_paired_test():
    a = {f"t{i}": 0.6 + 0.01 * i for i in range(10)}
    b = {f"t{i}": 0.4 + 0.01 * i for i in range(10)}
    t = stats.paired_test(a, b, n_boot=500)
    assert t.mean_diff == pytest.approx(0.2) and t.n_tasks == 10
    assert t.p_value == pytest.approx(2 / 2 ** 10)           # exact: only all-positive / all-negative signs
    same = stats.paired_test(a, a)
    assert same.mean_diff == 0 and same.p_value == 1.0
    mixed = stats.paired_test({"x": 1.0, "y": 0.0, "z": 1.0}, {"x": 0.0, "y": 1.0, "w": 5.0})
    assert mixed.n_tasks == 2 and mixed.mean_diff == 0.0
    assert stats.paired_test({}, {}).n_tasks == 0


def test_paired_test_monte_carlo_p_is_never_zero():
    """Above 16 tasks the sign-flip p-value is Monte Carlo: (b + 1) / (m + 1), never 0. 30 tasks
    all one way: no random sign pattern reaches |sum| (chance 2 / 2**30), so b = 0 and p is the
    floor 1 / (m + 1); the plain share b / m was exactly 0."""
    a = {f"t{i}": 0.6 + 0.01 * i for i in range(30)}
    b = {f"t{i}": 0.4 + 0.01 * i for i in range(30)}
    for m in (10_000, 999):
        t = stats.paired_test(a, b, n_boot=200, n_perm=m)
        assert t.n_tasks == 30 and not t.exact
        assert t.p_value > 0
        assert t.p_value == pytest.approx(1 / (m + 1))
    # a null-ish case: p is still (b + 1) / (m + 1), so it is a multiple of 1 / (m + 1) and <= 1
    noise = {f"t{i}": (0.1 if i % 2 else -0.1) + 0.001 * i for i in range(20)}
    zero = {f"t{i}": 0.0 for i in range(20)}
    t = stats.paired_test(noise, zero, n_perm=999)
    assert not t.exact and 0.0 < t.p_value <= 1.0
    assert (t.p_value * 1000) == pytest.approx(round(t.p_value * 1000))
    # 16 tasks and fewer stay exact: the share of all 2**n patterns, here 2 / 2**16
    a16 = {k: v for k, v in a.items() if int(k[1:]) < 16}
    t16 = stats.paired_test(a16, b, n_boot=200)
    assert t16.exact and t16.n_tasks == 16 and t16.p_value == pytest.approx(2 / 2 ** 16)


def test_sign_test_exact():
    assert stats.sign_test(10, 0) == pytest.approx(2 / 1024)
    assert stats.sign_test(5, 5) == 1.0
    assert stats.sign_test(8, 2) == pytest.approx(2 * (1 + 10 + 45) / 1024)
    assert math.isnan(stats.sign_test(0, 0))


def test_agreement_excludes_human_ties_and_undecided():
    human = {("t1", "A", "B"): "A", ("t2", "A", "B"): "B", ("t3", "A", "B"): None, ("t4", "A", "B"): "A"}
    judge = {("t1", "A", "B"): "A", ("t2", "A", "B"): "A", ("t3", "A", "B"): "A"}
    e = stats.agreement(judge, human, task_of=lambda k: k[0], n_boot=200)
    assert e.value == 0.5 and e.n == 2                       # t3 human tie, t4 no verdict


def test_clopper_pearson_hand_computed():
    """The exact interval at its closed forms: 0 of n has hi = 1 - (alpha/2)^(1/n), n of n has
    lo = (alpha/2)^(1/n); 1 of 3 against the Beta quantiles."""
    lo, hi = stats.clopper_pearson(0, 20)
    assert lo == 0 and hi == pytest.approx(1 - 0.025 ** (1 / 20), abs=1e-9) and round(hi, 4) == 0.1684
    lo, hi = stats.clopper_pearson(2, 2)
    assert lo == pytest.approx(0.025 ** 0.5, abs=1e-9) and round(lo, 4) == 0.1581 and hi == 1
    lo, hi = stats.clopper_pearson(1, 3)
    assert (round(lo, 4), round(hi, 4)) == (0.0084, 0.9057)
    lo, hi = stats.clopper_pearson(5000, 10_000)          # large n: log-space tail, no overflow
    assert lo == pytest.approx(0.49015, abs=1e-5) and hi == pytest.approx(1 - lo, abs=1e-9)
    with pytest.raises(ValueError, match="k=3, n=2"):
        stats.clopper_pearson(3, 2)


def test_interval_is_exact_bootstrap_or_none():
    """0 of 20 is not [0, 0]; two right answers are not [1, 1]; below MIN_BOOT_TASKS tasks no
    bootstrap interval is given; several seeds of a task make it a task bootstrap."""
    P = kinds.PROPORTION
    e = stats.interval([0.0] * 20, [f"t{i}" for i in range(20)], P)
    assert (e.value, e.lo, e.method, e.n, e.n_tasks) == (0.0, 0.0, stats.EXACT, 20, 20)
    assert e.hi == pytest.approx(0.1684, abs=1e-4)
    e = stats.interval([1.0, 1.0, float("nan")], ["a", "b", "c"], P)           # NaN: an absent value
    assert (e.value, e.hi, e.n, e.method) == (1.0, 1.0, 2, stats.EXACT) and e.lo == pytest.approx(0.1581, abs=1e-4)
    few = stats.interval([0.5, 0.7, 0.6], ["a", "b", "c"], kinds.SCORE01)       # a score, 3 tasks
    assert few.method == stats.TOO_FEW and few.value == pytest.approx(0.6) and math.isnan(few.lo)
    seeds = stats.interval([1.0, 0.0] * 3, ["a", "a", "b", "b", "c", "c"], P)    # 0/1 but 2 seeds a task
    assert seeds.method == stats.TOO_FEW and seeds.n == 6 and seeds.n_tasks == 3
    many = stats.interval([1.0, 0.0] * 12, [f"t{i // 2}" for i in range(24)], P, n_boot=300)
    assert many.method == stats.BOOTSTRAP and many.n_tasks == 12 and many.lo <= 0.5 <= many.hi
    assert stats.interval([], [], P).n == 0 and math.isnan(stats.interval([], [], P).value)
    # the kind decides, not the values: the same 0/1 values as a count get no exact interval
    count = stats.interval([0.0] * 20, [f"t{i}" for i in range(20)], kinds.COUNT)
    assert count.method == stats.BOOTSTRAP and (count.lo, count.hi) == (0.0, 0.0)


def test_paired_test_gives_no_interval_below_min_boot_tasks():
    """Two tasks both 1 apart: the difference is 1, p = 0.5 (2 of 4 sign patterns reach |2|), and
    no interval, where the bootstrap said [1, 1]."""
    t = stats.paired_test({"a": 1.0, "b": 1.0}, {"a": 0.0, "b": 0.0})
    assert (t.mean_diff, t.p_value, t.n_tasks, t.method) == (1.0, 0.5, 2, stats.TOO_FEW)
    assert math.isnan(t.lo) and math.isnan(t.hi)
    ten = stats.paired_test({f"t{i}": 1.0 + 0.1 * i for i in range(10)}, {f"t{i}": 0.0 for i in range(10)})
    assert ten.method == stats.BOOTSTRAP and ten.lo < ten.mean_diff < ten.hi
