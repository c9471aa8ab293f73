"""``dateline race-replay`` (ray_jobs/outputs/race_replay.py), issue 34: racing replayed over completed run
dirs under random task orders. A synthetic matrix checks the counting; a real sweep (the
rule-based newsagent agent at two retrieval depths, on the real index and the bundled sample,
through the real driver) checks the reading of run dirs end to end, on search F1."""

from __future__ import annotations

import numpy as np
import pytest

from ray_jobs.outputs.race_replay import replay_orders, task_matrix


def test_a_clear_winner_is_found_early_and_a_tie_is_never_split():
    rng = np.random.default_rng(0)
    n = 400
    strong = (rng.random(n) < 0.8).astype(float)
    values = np.stack([strong, (rng.random(n) < 0.3).astype(float), (rng.random(n) < 0.2).astype(float),
                       (rng.random(n) < 0.25).astype(float)])
    r = replay_orders(values, orders=40, seed=1)
    assert r.top1_agree == 1.0 and r.used_best < 0.5, r
    tied = np.stack([strong, strong, 1 - strong])
    t = replay_orders(tied, orders=20, seed=2)
    assert t.top1_agree == 1.0 and t.used_best > 0.6        # the two tied run to the end


def test_too_few_tasks_save_nothing_and_say_so():
    values = np.array([[1.0, 0.0, 1.0, 1.0, 0.0], [0.0, 0.0, 1.0, 0.0, 0.0]])
    r = replay_orders(values, orders=10)
    assert r.used_best == 1.0 and r.top1_agree == 1.0


@pytest.mark.ray
def test_replay_over_a_real_sweep_through_the_driver(tmp_path, capsys):
    from engine.storage import EpisodeStore
    from ray_jobs.cli.main import main
    from ray_jobs.config.compose import compose
    from tests.e2e.test_what_a_number_means import sweep

    run = tmp_path / "run"
    sweep([compose(["agent=newsagent_rule_based", f"index.top_k={k}", f"run.dir={run}", "run.progress=false",
                    "cluster.num_cpus=4"]) for k in (1, 5)])
    [m] = task_matrix([str(run)])
    eps = EpisodeStore(run).episodes(["config_hash", "task_id", "status"]).to_pylist()
    assert m.benchmark == "newsagent" and m.metric == "search_f1" and len(m.labels) == 2
    assert len(m.tasks) == len({e["task_id"] for e in eps}) and m.values.shape == (2, len(m.tasks))
    assert np.all((m.values >= 0) & (m.values <= 1))
    assert m.values.mean(axis=1)[0] != m.values.mean(axis=1)[1]      # top-1 and top-5 retrieve differently
    assert main(["race-replay", str(run), "--orders", "20"]) == 0
    out = capsys.readouterr().out
    assert "newsagent: 2 configurations x" in out and "20 random orders" in out and "top-1 agreement" in out
