"""Judging off the dispatch path, without Ray: judgements go through the store writer (one shard
per run dir per flush, sorted by configuration), episodes reach the judges only once stored, and
the metrics are reduced one configuration at a time with the same rows as the whole-store reduce."""

from __future__ import annotations

import threading

import pyarrow.parquet as pq
import pytest

from engine.benchmarks.livenews import BENCHMARK as LIVE
from engine.llm import Endpoint
from engine.runtime.writer import StoreWriter
from engine.scoring import views
from engine.storage import JUDGEMENT_ROW_GROUP, EpisodeStore
from ray_jobs.config.compose import compose
from ray_jobs.judging.stream import JudgeStream, run_judge_identity
from tests.fake_openai import FakeOpenAI
from tests.helpers import judge_as_a_run_does
from tests.ray_jobs.test_judge import episode


def _judge_cfg(url: str, *extra: str):
    return compose(["benchmark=livenews", "agent=livenews", "judge=openai_compatible", f"judge.base_url={url}",
                    "judge.model=grader", "judge.api_key_env=", "judge.actors=0", *extra])


def _row(i: int, config_hash: str, answer: str = "") -> dict:
    return dict(episode(i, answer or f"gold {i}"), episode_id=f"{config_hash}-e{i}", config_hash=config_hash)


def test_judgements_go_through_the_writer_one_shard_per_flush_sorted_by_configuration(tmp_path):
    store = EpisodeStore(tmp_path, LIVE.episode_fields)
    rows = [{"episode_id": f"{c}-e{i}", "judge": "j", "key": "grade", "value": "A", "ok": True, "attempts": 1,
             "raw_output": "A", "error": "", "config_hash": c, "_calls": [], "_messages": {}}
            for i in range(JUDGEMENT_ROW_GROUP) for c in ("cb", "ca")]
    with StoreWriter(flush_s=3600) as w:
        w.put_judgements(store, rows[: len(rows) // 2])
        w.put_judgements(store, rows[len(rows) // 2:])
        assert not list((tmp_path / "judgements").glob("*.parquet"))    # not due: nothing written yet
        w.drain()                                                        # written when it returns
        shards = list((tmp_path / "judgements").glob("*.parquet"))
        assert len(shards) == 1 and w.stats.judgements == len(rows)
    meta = pq.ParquetFile(shards[0]).metadata
    assert meta.num_row_groups == 2          # sorted by configuration: one row group each
    col = meta.schema.to_arrow_schema().get_field_index("config_hash")
    assert [(meta.row_group(g).column(col).statistics.min, meta.row_group(g).column(col).statistics.max)
            for g in range(2)] == [("ca", "ca"), ("cb", "cb")]
    assert set(store.judgements_by_judge(config_hash="ca")["j"]) == {f"ca-e{i}" for i in range(JUDGEMENT_ROW_GROUP)}


def test_episodes_reach_the_judges_only_once_stored(tmp_path):
    store = EpisodeStore(tmp_path, LIVE.episode_fields)
    seen: list[tuple[list[str], set[str]]] = []

    def written(s, eps):          # what is stored when the judges are handed the rows
        seen.append(([e["episode_id"] for e in eps], s.finished_ids()))

    with StoreWriter(flush_s=3600, on_written=written) as w:
        w.put(store, [_row(0, "ca"), _row(1, "cb")])
        assert seen == []
        w.drain()
        w.put(store, [_row(2, "ca")])
    assert [ids for ids, _ in seen] == [["ca-e0", "cb-e1"], ["ca-e2"]]
    assert all(set(ids) <= stored for ids, stored in seen)


def test_a_failing_hand_off_to_the_judges_is_the_drivers_error(tmp_path):
    store = EpisodeStore(tmp_path, LIVE.episode_fields)

    def broken(s, eps):
        raise RuntimeError("judge fleet gone")

    w = StoreWriter(flush_s=0, on_written=broken)
    w.put(store, [_row(0, "ca")])
    try:
        w.drain(timeout=10)
        raise AssertionError("drain should raise the hand-off's error")
    except RuntimeError as e:
        assert "judge fleet gone" in str(e)
    assert store.finished_ids() == {"ca-e0"}              # the episode itself was stored


@pytest.mark.slow
def test_the_thread_stream_waits_for_rows_still_being_handed_over(tmp_path):
    """finish(key, expect) returns only once ``expect`` rows arrived (a judge actor's submits may
    run after its finish call starts), then every judgement is stored."""
    store = EpisodeStore(tmp_path, LIVE.episode_fields)
    rows = [_row(i, "ca") for i in range(6)]
    store.write_batch([dict(r) for r in rows], [])
    with FakeOpenAI(lambda m, r: "A") as srv:
        cfg = _judge_cfg(srv.base_url)
        stream = JudgeStream(flush_s=3600)
        try:
            stream.add("k", cfg, LIVE, store, [Endpoint(srv.base_url, "grader", "")], None, None, "ca")
            stream.submit("k", rows[:3])
            late = threading.Timer(0.5, stream.submit, ("k", rows[3:]))
            late.start()
            stats = stream.finish("k", expect=6)
        finally:
            stream.close()
    judged = next(iter(store.judgements_by_judge(config_hash="ca").values()))
    assert set(judged) == {r["episode_id"] for r in rows}
    assert stats["episodes"] == 6 and stats["failed"] == 0 and stats["ok"] == sum(len(v) for v in judged.values())
    assert len(list((tmp_path / "judgements").glob("*.parquet"))) == 1    # one shard at finish (flush_s 1 h)


def test_the_stream_reads_answers_while_a_rows_requests_are_built(tmp_path):
    """``judge_requests`` (an analyst round embeds its claims) runs on the stream's builder thread,
    not its loop: while one row's requests take long to build, another row's answer is read and
    settled. Built on the loop, the slow build would wait for an answer the loop never reads."""
    import time

    class SlowBuild:
        def __init__(self):
            self.threads: set[str] = set()
            self.saw_answer = False

        def __getattr__(self, name):
            return getattr(LIVE, name)

        def judge_requests(self, row, judged):
            self.threads.add(threading.current_thread().name)
            if row["episode_id"] == "ca-e0" and not self.saw_answer:
                deadline = time.monotonic() + 10
                while "ca-e1" not in judged and time.monotonic() < deadline:     # read by key, as allowed
                    time.sleep(0.01)
                self.saw_answer = "ca-e1" in judged
            return LIVE.judge_requests(row, judged)

    bench = SlowBuild()
    store = EpisodeStore(tmp_path, LIVE.episode_fields)
    rows = [_row(1, "ca"), _row(0, "ca")]
    store.write_batch([dict(r) for r in rows], [])
    with FakeOpenAI(lambda m, r: "A") as srv:
        stream = JudgeStream(flush_s=3600)
        try:
            stream.add("k", _judge_cfg(srv.base_url), bench, store, [Endpoint(srv.base_url, "grader", "")], None,
                       None, "ca")
            stream.submit("k", rows)
            stats = stream.finish("k", expect=2)
        finally:
            stream.close()
    assert bench.saw_answer and stats["episodes"] == 2 and stats["failed"] == 0
    assert bench.threads == {"judge-requests_0"}


def _store_of_three_configs(tmp_path, unfinished: bool = True):
    """Three livenews configurations of one dataset (one family) judged by one grader; one task
    unfinished in config cc; config ca's judgements written before rows carried config_hash."""
    store = EpisodeStore(tmp_path, LIVE.episode_fields)
    for c, wrong in (("ca", {1}), ("cb", {2, 3}), ("cc", set())):
        eps = [_row(i, c, "nope" if i in wrong else "") for i in range(4)]
        if c == "cc" and unfinished:
            eps[3] = dict(eps[3], status="error", error="boom")
        store.write_batch(eps, [])

    def grade(messages, req):
        text = messages[0]["content"]
        return "B" if "nope" in text else "A"

    with FakeOpenAI(grade) as srv:
        cfg = _judge_cfg(srv.base_url)
        for c in ("ca", "cb", "cc"):             # the judge stage judges one configuration at a time
            judge_as_a_run_does(cfg, LIVE, store, c)
    # config ca's rows as written before the column: no config_hash
    import pyarrow as pa
    import pyarrow.compute as pc

    for f in (tmp_path / "judgements").glob("*.parquet"):
        t = pq.read_table(f)
        ch = t["config_hash"]
        t = t.set_column(t.schema.get_field_index("config_hash"), "config_hash",
                         pc.if_else(pc.equal(ch, "ca"), pa.scalar(None, pa.string()), ch))
        pq.write_table(t, f)
    return store, cfg


@pytest.mark.slow
def test_the_per_configuration_reduce_gives_the_rows_of_the_whole_store_reduce(tmp_path):
    store, cfg = _store_of_three_configs(tmp_path)
    whole = views.reduce(LIVE, views.config_views(store, LIVE))
    streamed = views.reduce_store(store, LIVE)
    assert streamed == whole
    acc = {(r["config_hash"], r["scope"]): (r["value"], r["n"]) for r in streamed if r["metric"] == "accuracy"}
    assert acc[("ca", "all")] == (0.75, 4)           # its judgements found by episode id (no config_hash)
    assert acc[("cb", "all")] == (0.5, 4)
    assert acc[("cc", "all")] == (0.75, 4)           # the error counts as wrong
    assert acc[("ca", "common")] == (2 / 3, 3) and acc[("cc", "common")] == (1.0, 3)   # task t3 dropped
    assert {r["judge"] for r in streamed} == {run_judge_identity(cfg, LIVE).id}


@pytest.mark.slow
def test_a_family_that_finished_every_task_is_not_read_twice(tmp_path):
    """Nothing to cut: the common-task rows are the plan's rows in another scope, and no
    configuration is read again; the rows are still those of the whole-store reduce."""
    store, _ = _store_of_three_configs(tmp_path, unfinished=False)
    whole = views.reduce(LIVE, views.config_views(store, LIVE))
    reads: list[str] = []
    tables: list[str] = []
    judged, read = store.judged, store.read

    def spy(*a, **kw):
        reads.append(kw["config_hash"])
        return judged(*a, **kw)

    def spy_read(table, *a, **kw):
        tables.append(table)
        return read(table, *a, **kw)

    store.judged, store.read = spy, spy_read
    assert views.reduce_store(store, LIVE) == whole
    assert sorted(reads) == ["ca", "cb", "cc"]                 # once each
    assert tables.count("judgements") == 3                     # one read of the table per configuration
    assert {r["scope"] for r in whole} == {"all", "common"}


@pytest.mark.slow
def test_the_per_configuration_reduce_reads_one_configuration_at_a_time(tmp_path):
    store, _ = _store_of_three_configs(tmp_path)
    asked: list[object] = []
    episodes, judged = store.episodes, store.judged

    def spy_episodes(*a, **kw):
        if kw.get("config_hash") is None and list(a[0] if a else kw.get("columns") or []) != ["config_hash"]:
            asked.append("ALL EPISODES")
        return episodes(*a, **kw)

    def spy_judgements(*a, **kw):
        asked.append(kw.get("config_hash", "ALL JUDGEMENTS"))
        return judged(*a, **kw)

    store.episodes, store.judged = spy_episodes, spy_judgements
    views.reduce_store(store, LIVE)
    assert "ALL EPISODES" not in asked and "ALL JUDGEMENTS" not in asked and None not in asked
    assert set(asked) == {"ca", "cb", "cc"}
