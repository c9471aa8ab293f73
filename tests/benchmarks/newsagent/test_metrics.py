"""Function-wise precision/recall/F1 on hand-computed cases; macro averaging (Table 2)."""

from __future__ import annotations

import math

import pytest

from engine.benchmarks.newsagent import BENCHMARK
from engine.benchmarks.newsagent.metrics import episode_scores, prf
from tests.factories import episode_row
from tests.helpers import metrics_of


def test_prf_hand_computed():
    # selected {a,b,c,d}, reference {b,d,e}: hits 2 -> P=2/4, R=2/3, F1=2*.5*.6667/(1.1667)=0.5714
    p, r, f = prf(["a", "b", "c", "d"], ["b", "d", "e"])
    assert p == 0.5 and r == pytest.approx(2 / 3) and f == pytest.approx(4 / 7)


def test_prf_empty_and_disjoint():
    assert prf([], ["a"]) == (0.0, 0.0, 0.0)
    assert prf(["x"], ["a"]) == (0.0, 0.0, 0.0)
    assert prf(["a", "a"], ["a"]) == (1.0, 1.0, 1.0)   # sets: duplicates do not count twice


def test_episode_scores_search_vs_edit():
    s = episode_scores(retrieved=["a", "b", "c", "e"], draft=["b"], reference=["b", "e", "z"])
    assert s["search_precision"] == 0.5 and s["search_recall"] == pytest.approx(2 / 3)
    assert s["edit_precision"] == 1.0 and s["edit_recall"] == pytest.approx(1 / 3)
    assert s["edit_f1"] == pytest.approx(0.5)
    assert s["edit_recall_observed"] == 0.5     # kept 1 of the 2 reference objects it saw


_ids = iter(range(10**6))


def row(retrieved, draft, reference, **kw):
    kw.setdefault("episode_id", f"e{next(_ids)}")
    return episode_row("newsagent", **{"retrieved_ids": retrieved, "draft_ids": draft, "reference_ids": reference,
                                       "tokens_in": 100, "tokens_out": 10, "n_search": 1, "n_insert": 1,
                                       "operations": 2, "rephrase_attempts": 1, "traceable": True, **kw})


def test_macro_average_is_not_f1_of_means():
    rows = [row(["a"], ["a"], ["a"]),                 # P=R=F=1
            row(["a", "b", "c", "d"], [], ["a", "x"])]  # search P=.25 R=.5 F=1/3; edit all 0
    m = metrics_of(BENCHMARK, rows)
    assert m["search_precision"].value == pytest.approx((1 + 0.25) / 2)
    assert m["search_recall"].value == pytest.approx((1 + 0.5) / 2)
    assert m["search_f1"].value == pytest.approx((1 + 1 / 3) / 2)
    f1_of_means = 2 * 0.625 * 0.75 / (0.625 + 0.75)
    assert not math.isclose(m["search_f1"].value, f1_of_means)
    assert m["edit_f1"].value == 0.5 and m["search_f1"].n == 2


def test_failures_count_as_wrong_and_unreferenced_tasks_are_left_out():
    rows = [row(["a"], ["a"], ["a"], episode_id="e1"), row(["a"], ["a"], [], episode_id="e2"),
            row(["b"], [], ["b"], status="error", episode_id="e3")]
    m = metrics_of(BENCHMARK, rows)                  # as_wrong (the default): the error is an F1 of 0
    assert m["episodes"].value == 2
    assert m["search_f1"].n == 2 and m["search_f1"].value == 0.5
    assert m["search_precision"].n == 1             # precision of nothing selected stays undefined
    assert m["mean_tokens_in"].value == 100 and m["mean_tokens_in"].n == 2    # usage: over the episodes that ran
    ex = metrics_of(BENCHMARK, rows, policy="exclude")
    assert ex["search_f1"].n == 1 and ex["search_f1"].value == 1.0
