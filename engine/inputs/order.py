"""The order a run takes its tasks in, and the subset ``benchmark.limit`` draws.

``run.order``:

* ``random`` (the default): one seeded permutation of the task set, shared by every
  configuration of the run, so that configurations are compared on the same tasks at every point
  of the run (paired), and a run cut short (a budget, ``benchmark.limit``, an adaptive stop) has
  seen a uniformly random subset of the tasks, not the first ones in the file. Taking the first N
  in data order is the bias users of other harnesses report (lm-evaluation-harness #2598, HELM
  #220, inspect_ai #2118).
* ``data``: the order of the data file (the paper's), named for when it is wanted.

The permutation depends on the seed (``run.order_seed``, else ``run.seed``) and on the set of
task ids only, never on the order of the file: the same seed over the same tasks is the same order
on any machine, and a reordered file changes nothing. ``benchmark.limit=N`` takes the first N of
the run's order: under ``random`` a seeded random subset, the same for every configuration.
:func:`order_record` is what the run dir stores beside the task set (``order.json``) so a reader
can re-derive the order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

ORDERS = ("random", "data")
T = TypeVar("T")


@dataclass(frozen=True)
class TaskOrder:
    kind: str = "random"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ORDERS:
            raise ValueError(f"run.order={self.kind!r}: one of {', '.join(ORDERS)}")


def task_order(cfg: Any) -> TaskOrder | None:
    """The order of a run from its config (``run.order``, ``run.order_seed`` or ``run.seed``);
    None for a config without a ``run`` part (a benchmark config alone: the data's order)."""
    run = getattr(cfg, "run", None)
    if run is None:
        return None
    seed = run.order_seed if getattr(run, "order_seed", None) is not None else run.seed
    return TaskOrder(getattr(run, "order", "random"), int(seed))


def _seed_words(ids: Sequence[str], seed: int) -> list[int]:
    digest = hashlib.sha256("\n".join(sorted(ids)).encode()).digest()
    return [seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF] + [int.from_bytes(digest[i:i + 4], "big") for i in range(0, 16, 4)]


def permutation(ids: Sequence[str], seed: int) -> list[int]:
    """Indices of ``ids`` in the seeded random order: a function of the seed and the *set* of ids."""
    if len(set(ids)) != len(ids):
        raise ValueError("task ids are not unique")
    rank = sorted(range(len(ids)), key=lambda i: ids[i])           # the file's order does not matter
    perm = np.random.default_rng(_seed_words(ids, seed)).permutation(len(ids))
    return [rank[int(j)] for j in perm]


def ordered(items: Sequence[T], ids: Sequence[str], order: TaskOrder) -> list[T]:
    """``items`` (one per id) in the run's order."""
    if order.kind == "data":
        return list(items)
    return [items[i] for i in permutation(ids, order.seed)]


def order_record(ids_in_order: Sequence[str], order: TaskOrder) -> dict[str, Any]:
    """What the run dir stores beside the task set: how the order was made and a hash of it."""
    return {"order": order.kind, "seed": order.seed, "n_tasks": len(ids_in_order),
            "order_hash": hashlib.sha256("\n".join(ids_in_order).encode()).hexdigest()[:16]}
