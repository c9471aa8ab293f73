"""``benchmark.task_ids`` for every benchmark, on its bundled sample: only those tasks, in the
data's order under ``run.order=data`` (the default random order is tests/engine/inputs/test_order.py's),
then ``benchmark.limit``; an unknown id is a ConfigError naming it; neither changes
the configuration's identity (its config hash), only its task set."""

from __future__ import annotations

import pytest

from engine.benchmarks import get_benchmark
from engine.errors import ConfigError

BENCHES = {"newsagent": ["agent=newsagent_rule_based", "run.order=data"],
           "livenews": ["benchmark=livenews", "agent=livenews", "run.order=data"],
           "analyst": ["benchmark=analyst", "agent=analyst", "run.order=data"]}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BENCHES))
def test_task_ids_pick_tasks_for_every_benchmark(name, tmp_path):
    from dateline import compose
    from ray_jobs.run import plan, resolve

    bench = get_benchmark(name)
    every = [t.task_id for t in bench.load_tasks(compose(BENCHES[name]))]
    assert len(every) >= 2
    pick = [every[-1], every[0]]                     # asked out of order: kept in the data's order
    quoted = ",".join(f'"{t}"' for t in pick)        # quoted: Hydra would read 20230106_0 as a number
    cfg = compose(BENCHES[name] + [f"benchmark.task_ids=[{quoted}]"])
    assert [t.task_id for t in bench.load_tasks(cfg)] == [every[0], every[-1]]
    cfg_limited = compose(BENCHES[name] + [f"benchmark.task_ids=[{quoted}]", "benchmark.limit=1"])
    assert [t.task_id for t in bench.load_tasks(cfg_limited)] == [every[0]]
    where = [f"run.dir={tmp_path}"]
    whole = plan(resolve(compose(BENCHES[name] + where)))
    part = plan(resolve(compose(BENCHES[name] + where + [f"benchmark.task_ids=[{quoted}]"])))
    assert part.config_hash == whole.config_hash and len(part.specs) == 2 * cfg.run.num_seeds
    with pytest.raises(ConfigError, match=r"benchmark.task_ids: no such tasks in .*\['no-such-task'\]"):
        bench.load_tasks(compose(BENCHES[name] + ["benchmark.task_ids=[no-such-task]"]))


def test_an_id_hydra_read_as_a_number_gets_a_hint():
    from dateline import compose

    with pytest.raises(ConfigError, match=r"Hydra read 20230106_0 as the number 202301060: quote the ids"):
        get_benchmark("livenews").load_tasks(compose(BENCHES["livenews"] + ["benchmark.task_ids=[20230106_0]"]))
