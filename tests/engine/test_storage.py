"""The Parquet store: explicit schemas, atomic shards, dedup on read, compaction."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.benchmarks.newsagent import BENCHMARK
from engine.storage import EpisodeStore, STEP_SCHEMA

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def ep(eid, status="ok", **kw):
    r = dict(episode_id=eid, config_hash="c", benchmark="newsagent", task_id="t" + eid, model="m", agent="{}",
             seed=0, status=status, error="", finish_reason="terminate", output="article", n_steps=1,
             tokens_in=10, tokens_out=2, wall_time_s=1.0, started_at=NOW, finished_at=NOW, worker="w",
             replica=0, final_draft=["x"], draft_ids=["a"], retrieved_ids=["a"], reference_ids=["a"])
    r.update(kw)
    return r


def st(eid, step, text="out"):
    return dict(episode_id=eid, step=step, turn="action", observation_chars=5, raw_output=text, parsed_action="{}",
                result="ok", ok=True, tokens_in=10, tokens_out=2, latency_s=0.1)


def test_roundtrip_and_explicit_schema(tmp_path):
    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    store.write_batch([ep("e1")], [st("e1", 0), st("e1", 1)])
    t = store.episodes()
    assert t.schema == store.schema and t.num_rows == 1
    assert t.column("draft_ids").type == pa.list_(pa.string())
    assert store.steps().num_rows == 2 and store.steps().schema == STEP_SCHEMA
    assert store.finished_ids() == {"e1"}
    assert not list((tmp_path / "_staging").iterdir())


def test_wrong_type_is_rejected_before_anything_is_written(tmp_path):
    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError, TypeError)):
        store.write_batch([ep("e1", n_search="three")], [])
    assert store.episodes().num_rows == 0


def test_error_rows_rerun_and_ok_wins(tmp_path):
    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    store.write_batch([ep("e1", status="error"), ep("e2")], [st("e1", 0, "first try"), st("e2", 0)])
    assert store.finished_ids() == {"e2"}
    store.write_batch([ep("e1")], [st("e1", 0, "second try"), st("e1", 1, "second try")])
    eps = {r["episode_id"]: r for r in store.episodes().to_pylist()}
    assert len(eps) == 2 and eps["e1"]["status"] == "ok"
    steps = [s for s in store.steps().to_pylist() if s["episode_id"] == "e1"]
    assert [s["raw_output"] for s in steps] == ["second try", "second try"]


def test_steps_without_their_episode_row_are_invisible(tmp_path):
    """A kill between the steps rename and the episodes rename leaves orphan steps: hidden."""
    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    store.write_batch([ep("e1")], [st("e1", 0)])
    orphan = pa.Table.from_pylist([dict(st("e2", 0), batch_id="zzz")], schema=STEP_SCHEMA)
    pq.write_table(orphan, tmp_path / "steps" / "part-99999999999999999999-orphan.parquet")
    assert {s["episode_id"] for s in store.steps().to_pylist()} == {"e1"}


def test_compact_keeps_rows_and_is_idempotent(tmp_path):
    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    for i in range(5):
        store.write_batch([ep(f"e{i}")], [st(f"e{i}", 0), st(f"e{i}", 1)])
    store.write_batch([ep("e0")], [st("e0", 0)])                 # a duplicate ok row
    before_e = sorted(r["episode_id"] for r in store.episodes().to_pylist())
    n_steps = store.steps().num_rows
    store.compact()
    store.compact()
    assert len(list((tmp_path / "episodes").glob("*.parquet"))) == 1
    assert sorted(r["episode_id"] for r in store.episodes().to_pylist()) == before_e == [f"e{i}" for i in range(5)]
    assert store.steps().num_rows == n_steps


def test_interrupted_compaction_leaves_no_duplicates(tmp_path):
    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    for i in range(3):
        store.write_batch([ep(f"e{i}")], [st(f"e{i}", 0)])
    # simulate: compacted shard written but the old shards not yet deleted
    pq.write_table(store.steps(), tmp_path / "steps" / "part-99999999999999999999-compact.parquet")
    pq.write_table(store.episodes(), tmp_path / "episodes" / "part-99999999999999999999-compact.parquet")
    assert store.episodes().num_rows == 3 and store.steps().num_rows == 3
