"""The Parquet store: explicit schemas, atomic shards, dedup on read, compaction."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.benchmarks.newsagent import BENCHMARK
from engine.storage import JUDGEMENT_SCHEMA, STEP_SCHEMA, EpisodeStore
from tests.factories import episode_row


def ep(eid, status="ok", **kw):
    return episode_row("newsagent", **{"episode_id": eid, "task_id": "t" + eid, "status": status, "output": "article",
                                       "tokens_in": 10, "tokens_out": 2, "wall_time_s": 1.0, "final_draft": ["x"],
                                       "draft_ids": ["a"], "retrieved_ids": ["a"], "reference_ids": ["a"], **kw})


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


# -- a flush never dies of one row (issue 30, "names are data") ------------------------------------

NAME = b"chart\xff.png".decode("utf-8", "surrogateescape")       # a non-UTF-8 file name, as os.listdir gives it


def test_text_no_utf8_file_can_hold_is_stored_escaped_and_every_episode_lands(tmp_path, caplog):
    """'chart\\udcff.png' in an episode's output, a step's result, a list column and a
    transcript: once a UnicodeEncodeError that lost the whole flush (and every re-run's)."""
    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    eps = [ep(f"e{i}") for i in range(4)]
    eps[1]["output"] = f"see {NAME}"
    eps[3]["final_draft"] = ["x", f"{NAME} and \ud800"]
    steps = [st(f"e{i}", 0) for i in range(4)]
    steps[2]["result"] = f"ls: {NAME}"
    calls = [{"episode_id": "e1", "purpose": "episode", "call": 0, "message_ids": ["m1"], "completion": NAME}]
    with caplog.at_level("WARNING", logger="dateline.storage"):
        flushed = store.write_batch(eps, steps, calls, [{"message_id": "m1", "role": "tool", "content": NAME}])
    assert flushed.set_aside == frozenset()
    assert store.finished_ids() == {"e0", "e1", "e2", "e3"}
    rows = {r["episode_id"]: r for r in store.episodes().to_pylist()}
    assert rows["e1"]["output"] == "see chart\\xff.png"                # the name's bytes, written out
    assert rows["e3"]["final_draft"] == ["x", "chart\\xff.png and \\ud800"]
    assert {s["episode_id"]: s["result"] for s in store.steps().to_pylist()}["e2"] == "ls: chart\\xff.png"
    assert store.calls(["e1"])[0]["completion"] == "chart\\xff.png"
    assert store.messages(["m1"])["m1"]["content"] == "chart\\xff.png"
    assert "episode e1 field output" in caplog.text and "episode e2 field result" in caplog.text
    assert not (tmp_path / "quarantine").exists()
    # a re-run of the same episodes writes again
    store.write_batch([ep("e1", output=f"again {NAME}")], [st("e1", 0, f"raw {NAME}")])
    assert store.episodes(["output"], episode_ids=["e1"])["output"].to_pylist() == ["again chart\\xff.png"]
    assert store.steps(["raw_output"], episode_ids=["e1"])["raw_output"].to_pylist() == ["raw chart\\xff.png"]


def test_a_row_arrow_cannot_encode_is_set_aside_with_its_reason_and_the_rest_lands(tmp_path, caplog):
    from engine.storage import read_quarantine, set_aside_episodes

    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    eps = [ep("e0"), ep("e1", n_search="three", output=NAME), ep("e2")]         # not an int32
    with caplog.at_level("WARNING", logger="dateline.storage"):
        flushed = store.write_batch(eps, [st("e0", 0), st("e1", 0), dict(st("e2", 0), tokens_in=2**40)])
    assert flushed.set_aside == {"e1"}
    assert store.finished_ids() == {"e0", "e2"}
    assert [s["episode_id"] for s in store.steps().to_pylist()] == ["e0"]      # e2's one step could not be stored
    q = {r["file"].rsplit("/", 1)[-1]: r for r in read_quarantine(store).to_pylist()}
    assert set(q) == {"episodes", "steps"}
    e1 = q["episodes"]
    assert (e1["kind"], e1["field"], e1["episode_id"], e1["row"]) == ("unencodable_row", "n_search", "e1", None)
    assert "episodes row of episode e1: field n_search cannot be stored" in e1["reason"]
    assert json.loads(e1["content"])["output"] == NAME and e1["content"].isascii()   # the row whole: nothing lost
    assert (q["steps"]["field"], q["steps"]["episode_id"]) == ("tokens_in", "e2")
    assert set_aside_episodes(store) == {"e1": e1["reason"]}
    assert "the row of episode e1 cannot be stored (field n_search" in caplog.text


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


def test_compacting_a_run_dir_of_two_benchmarks_keeps_each_ones_columns(tmp_path):
    """A run dir holds newsagent and livenews episodes; compacting it through the newsagent store
    (as ``dateline run`` of a newsagent point does) keeps the livenews columns it does not know."""
    from engine.benchmarks.livenews import BENCHMARK as LIVE

    news = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    live = EpisodeStore(tmp_path, LIVE.episode_fields)
    live.write_batch([ep("l1", benchmark="livenews", n_searches=3)], [st("l1", 0)])
    news.write_batch([ep("n1", n_insert=2)], [st("n1", 0)])
    news.compact()
    assert len(list((tmp_path / "episodes").glob("*.parquet"))) == 1
    (row,) = live.episodes(benchmark="livenews").to_pylist()
    assert row["n_searches"] == 3
    (row,) = news.episodes(benchmark="newsagent").to_pylist()
    assert row["n_insert"] == 2


def test_interrupted_compaction_leaves_no_duplicates(tmp_path):
    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    for i in range(3):
        store.write_batch([ep(f"e{i}")], [st(f"e{i}", 0)])
    # simulate: compacted shard written but the old shards not yet deleted
    pq.write_table(store.steps(), tmp_path / "steps" / "part-99999999999999999999-compact.parquet")
    pq.write_table(store.episodes(), tmp_path / "episodes" / "part-99999999999999999999-compact.parquet")
    assert store.episodes().num_rows == 3 and store.steps().num_rows == 3


# -- projection, filters, vectorised dedup (issue 11) ----------------------------------------------

def test_projection_returns_only_the_requested_columns(tmp_path):
    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    store.write_batch([ep("e1"), ep("e2", status="error")], [st("e1", 0)])
    t = store.episodes(columns=["status", "episode_id"])
    assert t.column_names == ["status", "episode_id"]
    assert t.schema == pa.schema([store.schema.field("status"), store.schema.field("episode_id")])
    assert sorted(t.to_pylist(), key=lambda r: r["episode_id"]) == [{"status": "ok", "episode_id": "e1"},
                                                                    {"status": "error", "episode_id": "e2"}]
    assert store.steps(columns=["step"]).column_names == ["step"]
    with pytest.raises(KeyError):
        store.episodes(columns=["no_such_column"])


def test_a_shard_without_or_with_an_unreadable_unrequested_column_still_reads(tmp_path):
    """Columns not asked for are never read: an old shard that lacks ``output`` and stores
    ``n_steps`` as a type the schema cannot take breaks a full read, not a projected one."""
    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    store.write_batch([ep("e1")], [])
    odd = pa.table({"episode_id": ["e2"], "batch_id": ["00000000000000000001-aaaaaaaa"], "config_hash": ["c"],
                    "status": ["ok"], "n_steps": pa.array([{"x": 1}])})
    pq.write_table(odd, tmp_path / "episodes" / "part-00000000000000000001-aaaaaaaa.parquet")
    t = store.episodes(columns=["episode_id", "config_hash", "output"])
    assert sorted(t.to_pylist(), key=lambda r: r["episode_id"]) == [
        {"episode_id": "e1", "config_hash": "c", "output": "article"},
        {"episode_id": "e2", "config_hash": "c", "output": None}]          # missing: null
    assert store.finished_ids() == {"e1", "e2"}
    with pytest.raises((pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)):
        store.episodes()                                                   # n_steps would have to be read


def _old_episodes(table):
    """The pre-issue-11 dedup, row by row in Python: the reference the vectorised one must match."""
    best = {}
    for i, r in enumerate(table.select(["episode_id", "status", "batch_id"]).to_pylist()):
        key = (1 if r["status"] == "ok" else 0, r["batch_id"])
        if r["episode_id"] not in best or key > best[r["episode_id"]][0]:
            best[r["episode_id"]] = (key, i)
    return table.take(pa.array(sorted(i for _, i in best.values()), pa.int64()))


def _old_steps(steps, episodes):
    wanted = {(r["episode_id"], r["batch_id"]) for r in episodes.select(["episode_id", "batch_id"]).to_pylist()}
    seen, keep = set(), []
    for i, r in enumerate(steps.select(["episode_id", "batch_id", "step"]).to_pylist()):
        k = (r["episode_id"], r["batch_id"], r["step"])
        if (k[0], k[1]) in wanted and k not in seen:
            seen.add(k)
            keep.append(i)
    return steps.take(pa.array(keep, pa.int64()))


def _random_store(path, seed):
    """Shards with repeated ids, error/ok/null statuses, tied batch ids, two configs and two
    benchmarks; written directly so that batch ids (and ties) are chosen here."""
    import random

    rng = random.Random(seed)
    store = EpisodeStore(path, BENCHMARK.episode_fields)
    ids = [f"e{i}" for i in range(25)]
    for shard in range(12):
        bid = f"{rng.randrange(6):020d}-{rng.randrange(3):08x}"
        rows, steps = [], []
        for eid in rng.sample(ids, rng.randrange(1, 10)):
            k = int(eid[1:])
            rows.append(dict(ep(eid, status=rng.choice(["ok", "error", None]), config_hash=f"c{k % 3}",
                                benchmark="newsagent" if k % 2 else "other", output=f"{shard}"), batch_id=bid))
            steps += [dict(st(eid, s, f"{shard}"), batch_id=bid) for s in range(rng.randrange(3))
                      for _ in range(rng.choice([1, 1, 2]))]                 # some steps written twice
        pq.write_table(pa.Table.from_pylist(rows, schema=store.schema), path / "episodes" / f"part-{shard:03d}.parquet")
        pq.write_table(pa.Table.from_pylist(steps, schema=STEP_SCHEMA), path / "steps" / f"part-{shard:03d}.parquet")
    return store


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(8))
def test_vectorised_dedup_and_pushdown_match_the_python_reference(tmp_path, seed):
    import pyarrow.compute as pc

    store = _random_store(tmp_path, seed)
    raw = store.read("episodes", store.schema)
    ref = _old_episodes(raw)
    assert store.episodes().equals(ref)
    rows = ref.to_pylist()
    assert store.finished_ids() == {r["episode_id"] for r in rows if r["status"] == "ok"}
    assert store.finished_ids(config_hash="c1") == {r["episode_id"] for r in rows
                                                    if r["status"] == "ok" and r["config_hash"] == "c1"}
    cols = ["episode_id", "output", "status"]
    assert store.episodes(cols, config_hash="c2").to_pylist() == [
        {c: r[c] for c in cols} for r in rows if r["config_hash"] == "c2"]
    assert store.episodes(cols, benchmark="newsagent", config_hash=["c0", "c1"], ok_only=True).to_pylist() == [
        {c: r[c] for c in cols} for r in rows if r["benchmark"] == "newsagent" and r["config_hash"] in ("c0", "c1")
        and r["status"] == "ok"]
    # an arbitrary filter applies to the deduplicated rows (an error row that lost to an ok row
    # is not resurrected by filtering on status)
    assert store.episodes(["episode_id"], filter=pc.field("status") == "error").to_pylist() == [
        {"episode_id": r["episode_id"]} for r in rows if r["status"] == "error"]
    assert store.episodes(["episode_id"], filter=pc.field("output") == "3").to_pylist() == [
        {"episode_id": r["episode_id"]} for r in rows if r["output"] == "3"]

    ref_steps = _old_steps(store.read("steps", STEP_SCHEMA), ref)
    assert store.steps().equals(ref_steps)
    some = [r["episode_id"] for r in rows[::3]]
    assert store.steps(episode_ids=some).to_pylist() == [s for s in ref_steps.to_pylist() if s["episode_id"] in some]
    assert store.steps(["episode_id", "step"], config_hash="c0").to_pylist() == [
        {"episode_id": s["episode_id"], "step": s["step"]} for s in ref_steps.to_pylist()
        if s["episode_id"] in {r["episode_id"] for r in rows if r["config_hash"] == "c0"}]

    store.compact()
    # compaction sorts episodes by configuration (ties in their old order): the same rows, each
    # configuration's contiguous, so a per-configuration read prunes the others' row groups
    by_config = sorted(rows, key=lambda r: r["config_hash"] or "")
    assert store.episodes().to_pylist() == by_config and store.steps().equals(ref_steps)
    (shard,) = store._files("episodes")
    meta = pq.ParquetFile(shard).metadata
    col = meta.schema.to_arrow_schema().get_field_index("config_hash")
    spans = [(meta.row_group(g).column(col).statistics.min, meta.row_group(g).column(col).statistics.max)
             for g in range(meta.num_row_groups)]
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans


def test_compaction_writes_each_configuration_in_row_groups_of_its_own(tmp_path):
    """Shards of interleaved configurations (as a sweep's flushes are) compact into one shard sorted
    by configuration, in row groups of ``EPISODE_ROW_GROUP``: a read of one configuration's
    episodes touches only the row groups whose statistics can hold it."""
    import pyarrow.dataset as ds

    from engine.storage import EPISODE_ROW_GROUP

    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    n = 0
    for shard in range(4):
        rows = [dict(ep(f"e{n + i}", config_hash=f"c{(n + i) % 4}", output=f"{n + i}"), batch_id=f"{shard:020d}-0")
                for i in range(1500)]
        n += 1500
        pq.write_table(pa.Table.from_pylist(rows, schema=store.schema), tmp_path / "episodes" / f"part-{shard:03d}.parquet")
    before = {r["episode_id"]: r for r in store.episodes().to_pylist()}
    store.compact()
    after = store.episodes().to_pylist()
    assert len(after) == 6000 and {r["episode_id"]: r for r in after} == before
    assert [r["config_hash"] for r in after] == sorted(r["config_hash"] for r in after)
    (shard,) = store._files("episodes")
    frag = next(iter(ds.dataset(shard, format="parquet").get_fragments()))
    assert frag.metadata.num_row_groups == -(-6000 // EPISODE_ROW_GROUP)
    c2 = frag.subset(ds.field("config_hash") == "c2")
    assert 0 < c2.num_row_groups <= 3 and c2.count_rows() >= 1500         # of 6: only c2's (and a shared edge)
    assert store.episodes(["episode_id"], config_hash="c2").num_rows == 1500


# -- judgements compaction -----------------------------------------------------------------------

def _jrow(eid, judge, key="grade", ok=True, value="A", error="", kind="hosted", model="jm"):
    return dict(episode_id=eid, judge=judge, judge_model=model, judge_kind=kind, judge_prompt="p1", key=key,
                value=value if ok else None, ok=ok, attempts=1, raw_output=value or "", error=error,
                tokens_in=1, tokens_out=1, latency_s=0.1)


def _judged_store(path):
    from ray_jobs.judging.stream import MALFORMED

    store = EpisodeStore(path, BENCHMARK.episode_fields)
    down = dict(ok=False, error="GenerationError: endpoint down")
    bad = dict(ok=False, error=f"{MALFORMED}: 'x'")
    batches = [
        [_jrow("e1", "j:1"), _jrow("e2", "j:1", **down), _jrow("e3", "j:1", **bad), _jrow("e4", "j:1", **down),
         _jrow("e1", "j:2", kind=None, model=None), _jrow("e5", None), _jrow("e5", ""),
         _jrow("e2", "j:2", **down)],                   # j:2's only row with its identity: not a best row
        [_jrow("e1", "j:1", **down), _jrow("e2", "j:1", value="B"), _jrow("e3", "j:1", **down),
         _jrow("e4", "j:1", **bad), _jrow("e6", "j:1", ok=True, value=None),          # an ok row without a value
         _jrow("e1", "j:2", value="C", kind=None, model=None), _jrow("e5", None, **down)],
        [_jrow("e6", "j:1", **bad), _jrow("e7", "j:1", **down), _jrow("e1", "j:1", key="claims", value="3"),
         _jrow("e1", "j:3", kind=None, model=None), _jrow("e2", "j:2", kind=None, model=None)],
        [_jrow("e6", "j:1", **down), _jrow("e7", "j:1", **bad), _jrow("e2", "j:1", **down),
         _jrow("e1", "j:3", kind=None, model=None, value="Z")],
    ]
    for rows in batches:
        store.write_judgements(rows)
    # a shard holding two rows of one (judge, episode, key) with the same batch id (ties)
    tie = pa.Table.from_pylist([dict(_jrow("e8", "j:1", **down), batch_id="00000000000000000009-aaaaaaaa"),
                                dict(_jrow("e8", "j:1", **bad), batch_id="00000000000000000009-aaaaaaaa")],
                               schema=JUDGEMENT_SCHEMA)
    pq.write_table(tie, path / "judgements" / "part-00000000000000000009-aaaaaaaa.parquet")
    return store


def _judge_answers(store):
    from ray_jobs.judging.stream import settled

    parse = lambda key, text: text.lower() if text != "B" else None           # noqa: E731
    return {"settled": {j: (settled(store, j), settled(store, j, retry_failed_calls=False))
                        for j in ("j:1", "j:2", "j:3", "", None)},
            "judgements": {j: store.judgements(j) for j in ("j:1", "j:2", "j:3", "", None)},
            "by_judge": store.judgements_by_judge(), "by_judge_parsed": store.judgements_by_judge(parse),
            "judges": store.judges(), "judged": store.judged(parse)}


@pytest.mark.slow
def test_compacting_judgements_keeps_every_answer_the_judge_stage_and_metrics_read(tmp_path):
    store = _judged_store(tmp_path)
    before = _judge_answers(store)
    assert before["settled"]["j:1"][0] == {"e1": {"grade": "A", "claims": "3"}, "e2": {"grade": "B"},
                                           "e3": {}, "e4": {"grade": None}, "e6": {}, "e7": {"grade": None}, "e8": {}}
    n_before = len(store.judgement_rows())
    store.compact()
    store.compact()
    assert len(list((tmp_path / "judgements").glob("*.parquet"))) == 1
    after = _judge_answers(store)
    assert after == before
    assert after["judged"] == (after["by_judge_parsed"], after["judges"])     # one read, the same answers
    assert len(store.judgement_rows()) < n_before
    assert after["judges"]["j:2"] == {"model": "jm", "kind": "hosted", "prompt": "p1"}
    assert after["judges"]["j:3"] == {"model": "j", "kind": "", "prompt": "p1"}
    # the e6 group keeps its ok-without-value row and its newest failed row (settled reads its error)
    e6 = [(r["ok"], r["error"]) for r in store.judgement_rows(judge="j:1") if r["episode_id"] == "e6"]
    assert sorted(e6, key=str) == sorted([(True, ""), (False, "GenerationError: endpoint down")], key=str)


def test_judgement_rows_projection_and_filters(tmp_path):
    store = _judged_store(tmp_path)
    rows = store.judgement_rows()
    assert store.judgement_rows(["episode_id", "error"], judge="j:1", ok=False) == [
        {"episode_id": r["episode_id"], "error": r["error"]} for r in rows if r["judge"] == "j:1" and not r["ok"]]
    assert len(store.judgement_rows(ok=True)) == sum(1 for r in rows if r["ok"])


def test_interrupted_judgement_compaction_changes_no_answer(tmp_path):
    store = _judged_store(tmp_path)
    before = _judge_answers(store)
    compacted = store.read("judgements", JUDGEMENT_SCHEMA).take(store._judgements_keep(store._files("judgements")))
    pq.write_table(compacted, tmp_path / "judgements" / "part-99999999999999999999-compact.parquet")
    assert _judge_answers(store) == before


# -- run dirs as paths or URIs -------------------------------------------------------------------

def test_local_store_keeps_root_a_path_and_writes_json_and_text(tmp_path):
    from engine.storage import is_run_dir

    store = EpisodeStore(tmp_path / "run", BENCHMARK.episode_fields)
    assert store.root == tmp_path / "run" and store.local and store.uri == str(tmp_path / "run")
    store.write_json("run-1.json", {"a": 1})
    store.write_json("run-2.json", {"a": 2})
    store.write_json("config.json", {"c": 1})
    store.write_text("metrics/tables.md", "# t\n")
    assert store.run_infos() == [{"a": 1}, {"a": 2}] and store.read_json("config.json") == {"c": 1}
    assert store.read_json("nope.json") is None and (tmp_path / "run" / "metrics" / "tables.md").read_text() == "# t\n"
    assert is_run_dir(tmp_path / "run") and not is_run_dir(tmp_path / "elsewhere")
    assert not (tmp_path / "elsewhere").exists()
    assert not list((tmp_path / "run" / "_staging").iterdir())
    uri = EpisodeStore(f"file://{tmp_path / 'run'}", BENCHMARK.episode_fields)
    assert uri.local and uri.root == tmp_path / "run" and uri.run_infos() == store.run_infos()


def test_local_root_for_paths_and_uris(tmp_path, monkeypatch):
    from engine.storage import local_root

    assert local_root(tmp_path / "run") == tmp_path / "run" and local_root("runs/x") == Path("runs/x")
    assert local_root(f"file://{tmp_path}/run") == tmp_path / "run"
    uri = "s3://bucket/runs/a?endpoint_override=http://127.0.0.1:9&scheme=http"
    assert local_root(uri, tmp_path / "scratch") == tmp_path / "scratch"
    monkeypatch.setenv("DATELINE_LOCAL_DIR", str(tmp_path / "local"))
    assert local_root(uri) == tmp_path / "local" / "s3" / "bucket" / "runs" / "a"
    assert not (tmp_path / "local").exists()


@pytest.mark.parametrize("name", ["newsagent", "livenews", "analyst"])
def test_the_episode_row_factory_has_every_column_of_the_store(tmp_path, name):
    """tests/factories.py builds the rows of many tests: it must stay in step with the schemas."""
    from engine.benchmarks import get_benchmark

    store = EpisodeStore(tmp_path, get_benchmark(name).episode_fields)
    row = episode_row(name)
    assert set(row) == set(store.schema.names) - {"batch_id"} and row["benchmark"] == name
    store.write_batch([row], [])
    assert store.episodes().to_pylist()[0]["finish_reason"] == row["finish_reason"]
