"""The benchmark contract on what a metric is (issue 46): every metric a benchmark produces declares
its kind (``metric_kinds``, engine/scoring/kinds.py), and the interval printed beside its mean follows
from the kind, never from the values. Hand values: a proportion of 4 in 4 is [0.398, 1] (exact,
Clopper-Pearson: 0.025 ** (1/4)); a count, a percentage or a score whose values happen to be all 0
or 1 gets the task bootstrap, or no interval below ``MIN_BOOT_TASKS`` tasks, never a binomial one."""

from __future__ import annotations

import json
import math

import pytest

from engine.benchmarks import get_benchmark
from engine.scoring import kinds, stats
from engine.scoring.kinds import MetricKind, kind_of
from tests.factories import episode_row


def _rows(name: str) -> list[dict]:
    """Rows that make a benchmark produce every value it can: judged, referenced, rephrased."""
    if name == "newsagent":
        return [episode_row("newsagent", retrieved_ids=["a", "b"], draft_ids=["a"], reference_ids=["a", "c"],
                            rephrase_attempts=1, traceable=True, n_search=2, operations=3)]
    if name == "livenews":
        return [episode_row("livenews", judgements={"grade": g, "probe_gold": "CORRECT", "probe_decoy": "INCORRECT"},
                            finish_reason=f, output="gold")
                for g, f in (("CORRECT", "finish"), ("INCORRECT", "finish"), ("NOT ATTEMPTED", "max_turns"))]
    raise AssertionError(name)


@pytest.mark.parametrize("name", ["newsagent", "livenews"])
def test_every_metric_a_benchmark_produces_declares_its_kind_and_its_values_fit_it(name):
    bench = get_benchmark(name)
    rows = _rows(name)
    produced = {k for vals in bench.episode_values(rows) for k in vals} | {m.metric for m in bench.metrics(rows)}
    named = {*bench.metric_order, *bench.primary_metrics, *bench.failure_values, *bench.judge_metrics,
             *bench.lower_is_better, *bench.metric_bounds}
    assert produced and named
    for m in sorted(produced | named):
        assert isinstance(kind_of(bench, m), MetricKind), m
    for vals in bench.episode_values(rows):
        for m, v in vals.items():
            kind_of(bench, m).check(v, f"{name} {m}")
    for m, (lo, hi) in bench.metric_bounds.items():          # the racing bounds agree with the kinds
        assert (kind_of(bench, m).lo, kind_of(bench, m).hi) == (lo, hi), m


def test_analyst_and_the_build_declare_every_metric_they_name():
    for name in ("analyst", "livenews:qa"):
        bench = get_benchmark(name)
        named = {*bench.metric_order, *bench.primary_metrics, *bench.failure_values, *bench.judge_metrics,
                 *bench.lower_is_better, *bench.metric_bounds, "finish_finish", "checklist_by:qwen"} - (
            {"finish_finish", "checklist_by:qwen"} if name != "analyst" else set())
        for m in sorted(named):
            assert isinstance(kind_of(bench, m), MetricKind), (name, m)
    assert kind_of(get_benchmark("analyst"), "hallucination_pct") == kinds.PERCENT


def test_a_metric_without_a_kind_fails_naming_the_benchmark_and_the_metric():
    with pytest.raises(KeyError, match="benchmark 'livenews': metric 'brand_new_metric' declares no kind"):
        kind_of(get_benchmark("livenews"), "brand_new_metric")
    # a derived row keeps its metric's kind
    assert kind_of(get_benchmark("livenews"), "accuracy.after_cutoff") == kinds.PROPORTION


TASKS = [f"t{i}" for i in range(12)]


@pytest.mark.parametrize("kind, values, want", [
    # a proportion: 4 of 4 is [0.398, 1], exact (one episode per task)
    (kinds.PROPORTION, [1, 1, 1, 1], ("exact", 0.025 ** 0.25, 1.0)),
    # a count whose values happen to be 0 or 1 (1 search each, up to 5 allowed): no exact interval;
    # four tasks are too few for a bootstrap
    (kinds.COUNT, [1, 1, 1, 1], ("too_few_tasks", math.nan, math.nan)),
    # a percentage of 0 on each report is not "under 1 %": the bootstrap over 12 tasks is [0, 0]
    (kinds.PERCENT, [0.0] * 12, ("bootstrap", 0.0, 0.0)),
    # tokens: never a proportion, even at 0
    (kinds.TOKENS, [0.0] * 12, ("bootstrap", 0.0, 0.0)),
    # an F1 of 1 on each of 12 tasks: a bounded score, bootstrap, never above 1
    (kinds.SCORE01, [1.0] * 12, ("bootstrap", 1.0, 1.0)),
])
def test_the_interval_follows_the_kind_not_the_values(kind, values, want):
    e = stats.interval(values, TASKS[:len(values)], kind)
    method, lo, hi = want
    assert e.method == method
    for got, w in ((e.lo, lo), (e.hi, hi)):
        assert (math.isnan(got) and math.isnan(w)) or math.isclose(got, w, rel_tol=1e-6, abs_tol=1e-9), (e, want)


def test_a_proportion_with_several_episodes_a_task_is_bootstrapped_and_a_value_outside_its_kind_is_refused():
    e = stats.interval([1, 0] * 12, [t for t in TASKS for _ in range(2)], kinds.PROPORTION)
    assert e.method == "bootstrap" and 0.0 <= e.lo <= 0.5 <= e.hi <= 1.0
    with pytest.raises(ValueError, match=r"accuracy \(task t1\): 0.5 is not 0 or 1"):
        stats.interval([1.0, 0.5], TASKS[:2], kinds.PROPORTION, what="accuracy")
    with pytest.raises(ValueError, match=r"outside the declared range \[0, 100\]"):
        stats.interval([101.0], TASKS[:1], kinds.PERCENT)
    assert json.dumps(kinds.PERCENT.shown(12.345)) == '"12.3 %"' and kinds.TOKENS.shown(12.6) == "13 tokens"
