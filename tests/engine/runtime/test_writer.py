"""The driver's background store writer (engine/runtime/writer.py), without Ray: one shard per table per
run dir per flush across points, in order, flushed by size or time, errors handed back."""

from __future__ import annotations

import errno
import threading
import time

import pyarrow.parquet as pq
import pytest

from engine.benchmarks.newsagent import BENCHMARK
from engine.errors import StoreWriteError
from engine.runtime.writer import StoreWriter, approx_bytes
from engine.storage import EpisodeStore
from tests.engine.storage.test_storage import ep, st


def shards(root, sub="episodes"):
    return sorted((root / sub).glob("part-*.parquet"))


def wait_for(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def call(eid, i):
    return {"episode_id": eid, "purpose": "episode", "call": i, "message_ids": ["m1"], "completion": "c"}


def test_one_shard_per_table_per_flush_across_points_in_order(tmp_path):
    a = EpisodeStore(tmp_path, BENCHMARK.episode_fields)        # two points of one run dir
    b = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    w = StoreWriter(flush_s=3600)
    order = []
    for i in range(6):
        store, h = (a, "ca") if i % 2 == 0 else (b, "cb")
        eid = f"e{i}"
        order.append(eid)
        w.put(store, [ep(eid, config_hash=h)], [st(eid, 0), st(eid, 1)], [call(eid, 0)],
              {"m1": {"message_id": "m1", "role": "user", "content": "hi"}})
    assert shards(tmp_path) == []                               # not due yet: nothing written
    w.close()
    for sub in ("episodes", "steps", "calls", "messages"):
        assert len(shards(tmp_path, sub)) == 1, sub
    raw = pq.read_table(shards(tmp_path)[0])
    # sorted by configuration (readers of one configuration skip the others' row groups), each in
    # the order they were handed over
    assert raw["episode_id"].to_pylist() == [e for e in order if e in ("e0", "e2", "e4")] + ["e1", "e3", "e5"]
    assert set(raw["config_hash"].to_pylist()) == {"ca", "cb"}
    assert len(set(raw["batch_id"].to_pylist())) == 1
    assert a.finished_ids(config_hash="ca") == {"e0", "e2", "e4"} and b.finished_ids(config_hash="cb") == {"e1", "e3", "e5"}
    assert a.steps().num_rows == 12 and len(a.calls(["e0"])) == 1 and a.messages(["m1"])["m1"]["content"] == "hi"
    assert w.stats.flushes == 1 and w.stats.shards == 1 and w.stats.episodes == 6


def test_one_shard_per_run_dir(tmp_path):
    a, b = EpisodeStore(tmp_path / "a"), EpisodeStore(tmp_path / "b")
    with StoreWriter(flush_s=3600) as w:
        for i in range(4):
            w.put(a if i % 2 else b, [ep(f"e{i}")], [st(f"e{i}", 0)])
    assert len(shards(tmp_path / "a")) == len(shards(tmp_path / "b")) == 1
    assert a.finished_ids() == {"e1", "e3"} and b.finished_ids() == {"e0", "e2"}


@pytest.mark.slow
def test_byte_size_trigger(tmp_path):
    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    row_bytes = approx_bytes(ep("x", output="y" * 1000))
    w = StoreWriter(flush_s=3600, flush_bytes=5 * row_bytes)
    try:
        for i in range(3):
            w.put(store, [ep(f"e{i}", output="y" * 1000)])
        time.sleep(0.3)
        assert shards(tmp_path) == []                             # under the size, before the time
        for i in range(3, 6):
            w.put(store, [ep(f"e{i}", output="y" * 1000)])
        wait_for(lambda: len(shards(tmp_path)) == 1)               # over the size: written without close
        assert store.finished_ids() == {f"e{i}" for i in range(6)}
        w.put(store, [ep("e6")])
        time.sleep(0.2)
        assert len(shards(tmp_path)) == 1
    finally:
        w.close()
    assert len(shards(tmp_path)) == 2 and len(store.finished_ids()) == 7


def test_time_trigger_and_flush_interval_zero(tmp_path):
    store = EpisodeStore(tmp_path)
    with StoreWriter(flush_s=0) as w:
        w.put(store, [ep("e0")])
        wait_for(lambda: len(shards(tmp_path)) == 1)               # at once
        w.put(store, [ep("e1")])
        wait_for(lambda: len(shards(tmp_path)) == 2)
    w2 = StoreWriter(flush_s=0.2)
    w2.put(store, [ep("e2")])
    wait_for(lambda: len(shards(tmp_path)) == 3, timeout=5)
    w2.close()
    assert store.finished_ids() == {"e0", "e1", "e2"}


def test_an_error_in_the_writer_surfaces_in_the_driver(tmp_path):
    store = EpisodeStore(tmp_path)
    boom = ValueError("a bug in the writer")

    def write(s, rows):
        raise boom

    w = StoreWriter(flush_s=0, write=write)
    w.put(store, [ep("e0")])
    wait_for(lambda: w._fatal is not None)
    with pytest.raises(ValueError) as e:
        w.put(store, [ep("e1")])                                  # the next hand-off raises it
    assert e.value is boom
    with pytest.raises(ValueError, match="a bug in the writer"):
        w.check()
    with pytest.raises(ValueError, match="a bug in the writer"):
        w.close()                                                  # and the final join
    assert not w._thread.is_alive()


def test_a_name_that_is_not_utf8_no_longer_loses_the_flush(tmp_path):
    """Issue 30: one 'chart\\udcff.png' (b'chart\\xff.png' as os.listdir decodes it) in a flush of
    4 episodes stored none of them, and every re-run crashed the same way."""
    name = b"chart\xff.png".decode("utf-8", "surrogateescape")
    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    judged = []
    for attempt in range(2):                                       # a re-run writes again
        with StoreWriter(flush_s=3600, on_written=lambda s, rows: judged.extend(r["episode_id"] for r in rows)) as w:
            w.put(store, [ep(f"e{i}", output=f"{attempt} {name}" if i == 1 else "x") for i in range(4)],
                  [st("e2", 0, f"wrote {name}")])
        assert w.stats.episodes == 4 and w.stats.set_aside == 0
    assert store.finished_ids() == {"e0", "e1", "e2", "e3"} and len(judged) == 8
    assert store.episodes(["output"], episode_ids=["e1"])["output"].to_pylist() == ["1 chart\\xff.png"]
    assert store.steps(["raw_output"])["raw_output"].to_pylist() == ["wrote chart\\xff.png"]


def test_a_row_arrow_cannot_encode_is_set_aside_and_never_judged(tmp_path):
    """A value of the wrong type is no longer the writer's end: that row goes to
    RUN_DIR/quarantine, the rest of the flush is stored, and only stored episodes reach the judges."""
    from engine.storage import set_aside_episodes

    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    judged = []
    with StoreWriter(flush_s=3600, on_written=lambda s, rows: judged.extend(r["episode_id"] for r in rows)) as w:
        w.put(store, [ep("e0"), ep("e1", n_search="three")])      # not an int32: refused by Arrow
    assert store.finished_ids() == {"e0"} and judged == ["e0"]
    assert (w.stats.episodes, w.stats.set_aside) == (1, 1)
    assert "field n_search cannot be stored" in set_aside_episodes(store)["e1"]


def test_os_errors_keep_the_rows_and_retry_then_the_final_join_names_what_was_lost(tmp_path):
    store = EpisodeStore(tmp_path)
    fail = {"left": 1}
    calls = []

    def write(s, rows):
        calls.append([r["episode_id"] for r in rows.episodes])
        if fail["left"]:
            fail["left"] -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return s.write_batch(rows.episodes, rows.steps, rows.calls, rows.messages.values())

    with StoreWriter(flush_s=0, write=write) as w:
        w.put(store, [ep("e0")], [st("e0", 0)])
        wait_for(lambda: calls)
        w.put(store, [ep("e1")])
    assert store.finished_ids() == {"e0", "e1"} and store.steps().num_rows == 1
    assert calls[-1][0] == "e0"                                    # the failed rows first, then the new ones

    fail["left"] = 10**6                                           # the disk stays full
    w = StoreWriter(flush_s=0, write=write)
    w.put(store, [ep("e2")])
    w.put(store, [ep("e3")])
    with pytest.raises(StoreWriteError, match=f"could not write 2 finished episodes to run dir {tmp_path}"):
        w.close()
    assert store.finished_ids() == {"e0", "e1"}


def test_back_pressure_waits_and_loses_nothing(tmp_path):
    store = EpisodeStore(tmp_path)
    gate = threading.Event()

    def slow(s, rows):
        gate.wait(5)
        return s.write_batch(rows.episodes, rows.steps)

    w = StoreWriter(flush_s=0, flush_bytes=1, max_pending_bytes=1, write=slow)
    w.put(store, [ep("e0")])
    w.max_pending_bytes = 2 * w.pending_bytes()                    # room for two more hand-overs
    for i in range(1, 3):
        w.put(store, [ep(f"e{i}")])
    done = threading.Event()
    t = threading.Thread(target=lambda: (w.put(store, [ep("e3")]), done.set()))
    t.start()
    time.sleep(0.3)
    assert not done.is_set()                                       # waits for the writer
    gate.set()
    t.join(5)
    assert done.is_set()
    w.close()
    assert store.finished_ids() == {"e0", "e1", "e2", "e3"} and w.stats.waits_s > 0


def test_points_with_other_columns_share_a_shard(tmp_path):
    from engine.benchmarks.analyst import BENCHMARK as ANALYST

    news = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    analyst = EpisodeStore(tmp_path, ANALYST.episode_fields)
    with StoreWriter(flush_s=3600) as w:
        w.put(news, [ep("n1", config_hash="n")])
        w.put(analyst, [dict(ep("a1", config_hash="a", benchmark="analyst"), mode="vanilla", report_tokens=5)])
    assert len(shards(tmp_path)) == 1
    assert news.episodes(["episode_id", "draft_ids"], config_hash="n").to_pylist() == [
        {"episode_id": "n1", "draft_ids": ["a"]}]
    assert analyst.episodes(["episode_id", "mode", "report_tokens"], config_hash="a").to_pylist() == [
        {"episode_id": "a1", "mode": "vanilla", "report_tokens": 5}]


def test_put_after_close_is_refused(tmp_path):
    w = StoreWriter(flush_s=0)
    w.close()
    w.close()                                                      # idempotent
    with pytest.raises(RuntimeError):
        w.put(EpisodeStore(tmp_path), [ep("e0")])
