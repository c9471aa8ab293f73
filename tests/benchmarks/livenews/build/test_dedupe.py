"""Near-duplicate questions (engine.benchmarks.livenews.build.dedupe): the earliest kept, each dropped
one mapped to the kept one it duplicates, the same answer in blocks as one by one."""

from __future__ import annotations

import numpy as np
import pytest

from engine.benchmarks.livenews.build import dedupe
from engine.benchmarks.livenews.build.dedupe import near_duplicates


def test_keeps_the_earliest() -> None:
    v = np.array([[1.0, 0.0, 0.0], [0.99, 0.1, 0.0], [0.0, 0.0, 2.0]])
    assert near_duplicates(["a", "b", "c"], v, 0.9) == {"b": "a"}
    assert near_duplicates(["b", "a", "c"], v[[1, 0, 2]], 0.9) == {"a": "b"}
    assert near_duplicates(["a", "b", "c"], v, 0.999) == {}


def test_threshold_is_inclusive() -> None:
    v = np.array([[5.0, 0.0], [3.0, 4.0]])           # cosine exactly 0.6
    assert near_duplicates(["a", "b"], v, 0.6) == {"b": "a"}
    assert near_duplicates(["a", "b"], v, 0.6000001) == {}


def test_a_dropped_item_keeps_nothing_out() -> None:
    a = np.array([1.0, 0.0])
    b = np.array([np.cos(0.3), np.sin(0.3)])           # a-b and b-c: 0.955; a-c: 0.825
    c = np.array([np.cos(0.6), np.sin(0.6)])
    assert near_duplicates(["a", "b", "c"], np.stack([a, b, c]), 0.9) == {"b": "a"}


def test_maps_to_the_most_similar_kept_and_ties_to_the_earlier() -> None:
    a, x = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    near_x = np.array([0.6, 0.8])                       # 0.6 with a, 0.8 with x
    assert near_duplicates(["a", "x", "q"], np.stack([a, x, near_x]), 0.5) == {"q": "x"}
    middle = np.array([1.0, 1.0])                       # equally like a and x
    assert near_duplicates(["a", "x", "m"], np.stack([a, x, middle]), 0.5) == {"m": "a"}


def test_zero_vectors_duplicate_nothing() -> None:
    v = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    assert near_duplicates(["z1", "a", "z2"], v, -1.0) == {}


def naive(ids: list[str], v: np.ndarray, threshold: float) -> dict[str, str]:
    u = v / np.linalg.norm(v, axis=1, keepdims=True)
    kept: list[int] = []
    out = {}
    for i in range(len(ids)):
        sims = [(float(u[i] @ u[j]), -j) for j in kept]
        best = max(sims, default=(-2.0, 0))
        if best[0] >= threshold:
            out[ids[i]] = ids[-best[1]]
        else:
            kept.append(i)
    return out


def test_blocks_give_the_one_by_one_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    base = rng.normal(size=(40, 16))
    v = np.concatenate([base, base[rng.integers(0, 40, 30)] + rng.normal(scale=0.15, size=(30, 16))])
    order = rng.permutation(len(v))
    v, ids = v[order], [f"q{i}" for i in order]
    expected = naive(ids, v, 0.9)
    assert 15 <= len(expected) <= 30
    monkeypatch.setattr(dedupe, "BLOCK", 7)
    assert near_duplicates(ids, v, 0.9) == expected
    monkeypatch.setattr(dedupe, "BLOCK", 512)
    assert near_duplicates(ids, v.astype(np.float32), 0.9) == expected


def test_two_thousand_questions() -> None:
    rng = np.random.default_rng(5)
    base = rng.normal(size=(1500, 384)).astype(np.float32)
    copies = base[:500] + rng.normal(scale=0.01, size=(500, 384)).astype(np.float32)
    ids = [f"q{i}" for i in range(2000)]
    got = near_duplicates(ids, np.concatenate([base, copies]), 0.9)
    assert got == {f"q{1500 + i}": f"q{i}" for i in range(500)}


@pytest.mark.parametrize("ids,vectors,threshold,match", [
    (["a", "a"], np.eye(2), 0.9, "unique"),
    (["a", "b"], np.eye(3), 0.9, "shape"),
    (["a", "b"], np.ones(2), 0.9, "shape"),
    (["a", "b"], np.array([[1.0, np.nan], [1.0, 0.0]]), 0.9, "not finite"),
    (["a", "b"], np.eye(2), 1.5, "threshold"),
])
def test_bad_arguments(ids: list[str], vectors: np.ndarray, threshold: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        near_duplicates(ids, vectors, threshold)
