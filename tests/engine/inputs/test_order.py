"""The run's task order (engine/inputs/order.py), issue 34: one seeded random order shared by every
configuration, a function of the seed and the set of ids only; benchmark.limit draws the first N
of it (a random subset, the same for every configuration); run.order=data keeps the file's order."""

from __future__ import annotations

import numpy as np
import pytest

from engine.inputs.order import TaskOrder, order_record, ordered, permutation


def test_the_order_is_seeded_and_ignores_the_files_order():
    ids = [f"t{i:03d}" for i in range(200)]
    a = [ids[i] for i in permutation(ids, 7)]
    shuffled = list(reversed(ids))
    b = [shuffled[i] for i in permutation(shuffled, 7)]
    assert a == b and sorted(a) == ids and a != ids
    assert [ids[i] for i in permutation(ids, 8)] != a
    assert order_record(a, TaskOrder("random", 7))["order_hash"] == order_record(b, TaskOrder("random", 7))["order_hash"]


def test_a_limit_is_a_uniform_random_subset():
    """Over many seeds, each of 50 tasks is among the first 10 about 10/50 of the time."""
    ids = [f"q{i}" for i in range(50)]
    hits = np.zeros(50)
    for seed in range(2000):
        for i in permutation(ids, seed)[:10]:
            hits[i] += 1
    assert np.all(np.abs(hits / 2000 - 0.2) < 0.05), hits / 2000


def test_every_configuration_of_a_run_gets_the_same_tasks_in_the_same_order(tmp_path):
    from engine.benchmarks import get_benchmark
    from ray_jobs.config.compose import compose

    bench = get_benchmark("livenews")
    first = compose(["benchmark=livenews", "agent=livenews", "benchmark.limit=4", "agent.max_searches=1"])
    second = compose(["benchmark=livenews", "agent=livenews", "benchmark.limit=4", "agent.max_searches=5"])
    a = [t.task_id for t in bench.load_tasks(first)]
    b = [t.task_id for t in bench.load_tasks(second)]
    every = [t.task_id for t in bench.load_tasks(compose(["benchmark=livenews", "agent=livenews", "run.order=data"]))]
    assert a == b and len(a) == 4 and set(a) <= set(every)
    assert a != every[:4] or len(every) <= 4                 # not the file's first four
    data = [t.task_id for t in bench.load_tasks(compose(["benchmark=livenews", "agent=livenews", "run.order=data",
                                                           "benchmark.limit=4"]))]
    assert data == every[:4]
    other = [t.task_id for t in bench.load_tasks(compose(["benchmark=livenews", "agent=livenews", "benchmark.limit=4",
                                                            "run.order_seed=99"]))]
    assert other != a


def test_a_bad_order_is_a_config_error():
    from engine.errors import ConfigError
    from ray_jobs.config.compose import compose

    with pytest.raises((ConfigError, ValueError), match="run.order"):
        from engine.config.validate import validate
        validate(compose(["run.order=paper"]))
    with pytest.raises(ValueError, match="run.order='x'"):
        ordered([1], ["a"], TaskOrder("x"))


def test_the_run_dir_records_the_order_beside_the_task_set(tmp_path):
    import json

    from ray_jobs.config.compose import compose
    from ray_jobs.run import plan_point, resolve

    cfg = compose(["agent=newsagent_rule_based", "benchmark.limit=3", f"run.dir={tmp_path}", "run.order_seed=5"])
    pt = plan_point(resolve(cfg))
    rec = json.loads((tmp_path / "order.json").read_text())
    [(tset, r)] = rec.items()
    assert r["order"] == "random" and r["seed"] == 5 and r["n_tasks"] == 3
    assert r["order_hash"] == order_record([s.task_id for s in pt.plan.specs], TaskOrder("random", 5))["order_hash"]
    assert [s.task_id for s in pt.plan.todo] == [s.task_id for s in pt.plan.specs]     # dispatched in that order
