"""Planning records what the knowledge-cutoff split reads (engine/scoring/cutoff.py): each planned
episode's question date and the model's cutoff, in the plan. A changed cutoff is a new plan of
the same configuration: no episode runs again, and every reader splits at the new date."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dateline import compose
from engine.benchmarks.livenews import BENCHMARK as LIVE
from engine.protocol import dumps
from engine.scoring import cutoff
from engine.scoring.metric_table import metric_table
from engine.storage import EpisodeStore
from ray_jobs.run import plan_point, resolve
from tests.factories import episode_row

SAMPLE = Path(__file__).resolve().parents[2] / "engine/benchmarks/livenews/sample_data/questions.jsonl"


def event_dates() -> dict[str, str]:
    """The sample questions' event dates, read from the file by hand (question id -> date)."""
    rows = [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]
    return {r["id"]: r["event_date"] for r in rows}


@pytest.mark.slow
def test_a_changed_cutoff_is_a_new_plan_that_reruns_nothing(tmp_path):
    base = ["benchmark=livenews", "agent=livenews", "benchmark.limit=5", f"run.dir={tmp_path}"]
    pt = plan_point(resolve(compose([*base, "model.knowledge_cutoff=2023-01-15"])))
    h = pt.plan.config_hash
    store = EpisodeStore(tmp_path, LIVE.episode_fields)
    plan = store.plans()[h]
    dates = {s.episode_id: event_dates()[s.task_id] for s in pt.plan.specs}
    assert plan.knowledge_cutoff == "2023-01-15" and plan.dates == dates and len(dates) == 5
    # its episodes finish (as a worker stores them)
    store.write_batch([episode_row("livenews", episode_id=s.episode_id, task_id=s.task_id, config_hash=h,
                                   model=pt.cfg.model.name, engine=dumps(pt.plan.engine), cutoff=dates[s.episode_id])
                       for s in pt.plan.specs], [])

    def side() -> tuple[float, float]:
        rows = {r["metric"]: r for r in metric_table(store) if r["scope"] == "all"}
        return rows[cutoff.AFTER]["value"], rows[cutoff.BEFORE]["value"]

    assert side() == (sum(d > "2023-01-15" for d in dates.values()), sum(d <= "2023-01-15" for d in dates.values()))
    assert 0 < side()[0] < 5                # the run's questions straddle the cutoff
    later = max(dates.values())             # the last question's day: every question on or before it
    again = plan_point(resolve(compose([*base, f"model.knowledge_cutoff={later}"])))
    assert again.plan.config_hash == h and not again.plan.todo and not again.generate     # nothing runs again
    assert store.plans()[h].knowledge_cutoff == later
    assert side() == (0, 5)
    unknown = plan_point(resolve(compose(base)))          # the bundled model: no published cutoff
    assert not unknown.generate and store.plans()[h].knowledge_cutoff == ""
    assert {r["knowledge_cutoff"] for r in metric_table(store)} == {None}
