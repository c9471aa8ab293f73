"""The store on ``s3://``: a moto S3 server on loopback, started by the test, no AWS account.

Every read, write, move and listing goes through the pyarrow filesystem; the same dedup,
projection, compaction and resume semantics as on a local disk."""

from __future__ import annotations

import os
import socket

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

pytest.importorskip("moto.server")

from engine.benchmarks.newsagent import BENCHMARK  # noqa: E402
from engine.storage import EpisodeStore, is_run_dir  # noqa: E402
from tests.engine.storage.test_storage import _judge_answers, _judged_store, ep, st  # noqa: E402

BUCKET = "dateline-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3_endpoint():
    from moto.server import ThreadedMotoServer

    with pytest.MonkeyPatch.context() as mp:
        for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                     "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                     "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}.items():
            mp.setenv(k, v)
        for k in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            mp.delenv(k, raising=False)
        port = _free_port()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        try:
            fs = pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{port}", scheme="http", allow_bucket_creation=True)
            fs.create_dir(BUCKET)
            yield f"http://127.0.0.1:{port}"
        finally:
            server.stop()


@pytest.fixture
def s3_env(s3_endpoint, monkeypatch):
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
                 "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    return s3_endpoint


_n = [0]


def _uri(endpoint: str) -> str:
    """A fresh prefix per test; the endpoint travels in the URI's query string."""
    _n[0] += 1
    return f"s3://{BUCKET}/runs/t{_n[0]}?endpoint_override={endpoint}&scheme=http"


def _keys(store: EpisodeStore, sub: str = "") -> list[str]:
    sel = pafs.FileSelector(store.path(sub) if sub else store.base, recursive=True, allow_not_found=True)
    return sorted(i.path[len(store.base) + 1:] for i in store.fs.get_file_info(sel) if i.type == pafs.FileType.File)


@pytest.mark.slow
def test_write_read_resume_compact_on_s3(s3_env, tmp_path):
    uri = _uri(s3_env)
    store = EpisodeStore(uri, BENCHMARK.episode_fields, local_dir=tmp_path / "local")
    assert not store.local and store.uri == uri and store.root == tmp_path / "local" and store.root.is_dir()
    assert store.episodes().num_rows == 0 and store.finished_ids() == set() and store.steps().num_rows == 0

    store.write_batch([ep("e1", status="error"), ep("e2")], [st("e1", 0, "first try"), st("e2", 0)])
    assert store.finished_ids() == {"e2"}                          # resume: e1 is planned again
    store.write_batch([ep("e1")], [st("e1", 0, "second try"), st("e1", 1, "second try")])
    store.write_batch([ep("e3", config_hash="other")], [st("e3", 0)])
    assert store.finished_ids() == {"e1", "e2", "e3"} and store.finished_ids(config_hash="c") == {"e1", "e2"}

    t = store.episodes(columns=["episode_id", "status"], config_hash="c")
    assert t.column_names == ["episode_id", "status"]
    assert sorted(t.to_pylist(), key=lambda r: r["episode_id"]) == [{"episode_id": "e1", "status": "ok"},
                                                                    {"episode_id": "e2", "status": "ok"}]
    assert store.episodes(filter=pc.field("status") == "error").num_rows == 0
    steps = store.steps(["episode_id", "raw_output"], episode_ids=["e1"]).to_pylist()
    assert [s["raw_output"] for s in steps] == ["second try", "second try"]

    store.write_metrics([{"benchmark": "newsagent", "metric": "m", "value": 1.0, "n": 3}], "k1")
    assert store.metrics().to_pylist()[0]["value"] == 1.0
    assert store.cached_metrics("k1")[0]["value"] == 1.0 and store.cached_metrics("k2") is None
    store.write_judgements([{"episode_id": "e1", "judge": "j:1", "key": "grade", "value": "A", "ok": True}])
    store.write_judgements([{"episode_id": "e1", "judge": "j:1", "key": "grade", "value": "B", "ok": True}])
    assert store.judgements("j:1") == {"e1": {"grade": "B"}}

    before = (store.episodes(), store.steps(), store.judgements_by_judge())
    store.compact()
    assert [k for k in _keys(store) if k.endswith(".parquet") and not k.startswith("metrics/")] == [
        k for k in _keys(store) if "-compact.parquet" in k]
    assert len([k for k in _keys(store, "episodes")]) == 1
    assert store.episodes().equals(before[0]) and store.steps().equals(before[1])
    assert store.judgements_by_judge() == before[2]
    assert len(store.judgement_rows()) == 1
    assert not [k for k in _keys(store) if k.startswith("_staging/")]       # moved, not left behind

    again = EpisodeStore(uri, BENCHMARK.episode_fields, local_dir=tmp_path / "local")   # a re-run's driver
    assert again.finished_ids() == {"e1", "e2", "e3"}
    assert is_run_dir(uri) and not is_run_dir(uri.replace("/runs/", "/nothing/"))


@pytest.mark.slow
def test_json_run_infos_and_text_on_s3(s3_env, tmp_path):
    store = EpisodeStore(_uri(s3_env), BENCHMARK.episode_fields, local_dir=tmp_path)
    assert store.read_json("config.json") is None and store.run_infos() == []
    store.write_json("config.json", {"config": {"a": 1}})
    store.write_json("run-20260101-000001-abc.json", {"n": 1})
    store.write_json("run-20260101-000002-abc.json", {"n": 2})
    store.write_json("pairwise-20260101.json", {"p": 1})
    store.write_text("metrics/tables.md", "# tables\n")
    assert store.read_json("config.json") == {"config": {"a": 1}}
    assert store.run_infos() == [{"n": 1}, {"n": 2}] and store.run_infos("pairwise-") == [{"p": 1}]
    assert store.read_text("metrics/tables.md") == "# tables\n" and store.exists("metrics/tables.md")
    assert not [k for k in _keys(store) if k.startswith("_staging/")]


@pytest.mark.slow
def test_judgement_compaction_on_s3_changes_no_answer(s3_env, tmp_path):
    """The local judgement fixture, copied shard by shard to S3, compacted there."""
    local = _judged_store(tmp_path / "src")
    before = _judge_answers(local)
    store = EpisodeStore(_uri(s3_env), BENCHMARK.episode_fields, local_dir=tmp_path / "scratch")
    for f in sorted((tmp_path / "src" / "judgements").glob("part-*.parquet")):
        pq.write_table(pq.read_table(f), store.path("judgements", f.name), filesystem=store.fs)
    assert _judge_answers(store) == before
    store.compact()
    assert len(_keys(store, "judgements")) == 1 and _judge_answers(store) == before


def test_endpoint_from_aws_endpoint_url(s3_env, tmp_path, monkeypatch):
    """pyarrow's S3 filesystem honours ``AWS_ENDPOINT_URL``: a plain ``s3://bucket/prefix`` works."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_env)
    _n[0] += 1
    uri = f"s3://{BUCKET}/runs/env{_n[0]}"
    store = EpisodeStore(uri, BENCHMARK.episode_fields, local_dir=tmp_path)
    store.write_batch([ep("e1")], [st("e1", 0)])
    assert EpisodeStore(uri, BENCHMARK.episode_fields, local_dir=tmp_path).finished_ids() == {"e1"}
    assert store.episodes(["episode_id"]).schema == pa.schema([store.schema.field("episode_id")])


@pytest.mark.ray
def test_a_run_writes_its_store_to_s3_and_resumes_from_it(s3_env, monkeypatch, tmp_path):
    """``dateline run run.dir=s3://...``: the driver plans against, writes to and reduces from the
    bucket (rule-based newsagent: no model); logs and artifacts go to a local folder."""
    from ray_jobs.config.compose import compose
    from ray_jobs.run import run

    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_env)          # pyarrow's S3 client honours it
    monkeypatch.setenv("DATELINE_LOCAL_DIR", str(tmp_path / "local"))
    uri = f"s3://{BUCKET}/runs/rule-based"
    cfg = compose(["agent=newsagent_rule_based", "benchmark.limit=3", f"run.dir={uri}", "run.progress=false",
                   "cluster.num_cpus=4"])
    first = run(cfg)
    assert first["episodes_total"] == 3 and first.get("episodes_planned") == 3
    store = EpisodeStore(uri, BENCHMARK.episode_fields)
    eps = store.episodes(["episode_id", "status"]).to_pylist()
    assert len(eps) == 3 and {e["status"] for e in eps} == {"ok"}
    assert {r["metric"] for r in store.metrics().to_pylist()} >= {"search_f1", "edit_f1"}
    again = run(cfg)                                          # resume: everything is in the bucket
    assert again["episodes_skipped"] == 3 and "episodes_planned" not in again


def test_run_dir_lock_on_s3(s3_env):
    """One writer per run dir on an object store: written, read back, refused to a second driver
    while live, released at the end."""
    from engine.runtime.runlock import LOCK_NAME, RunDirLock, RunDirLocked

    uri = _uri(s3_env)
    with RunDirLock(uri, "dateline run") as lock:
        assert lock.read()["pid"] == os.getpid() and lock.path.endswith(LOCK_NAME)
        other = RunDirLock(uri)
        other.token = "someone-else"
        RunDirLock._held.clear()                 # as another process would see it
        try:
            with pytest.raises(RunDirLocked, match="in use by another driver"):
                other.acquire()
        finally:
            RunDirLock._held[lock.path] = lock
    assert RunDirLock(uri).read() is None


@pytest.mark.slow
def test_the_driver_writer_and_a_many_shard_compaction_on_s3(s3_env, tmp_path):
    """The background writer puts the points of one run dir in one shard per table; compaction
    of many shards reads and deletes them from a pool of threads and changes no answer."""
    from engine.runtime.writer import StoreWriter

    uri = _uri(s3_env)
    a = EpisodeStore(uri, BENCHMARK.episode_fields, local_dir=tmp_path)
    b = EpisodeStore(uri, BENCHMARK.episode_fields, local_dir=tmp_path)
    with StoreWriter(flush_s=3600) as w:
        for i in range(6):
            w.put(a if i % 2 else b, [ep(f"w{i}", config_hash="a" if i % 2 else "b")], [st(f"w{i}", 0)])
    assert len(_keys(a, "episodes")) == len(_keys(a, "steps")) == 1
    assert a.finished_ids(config_hash="a") == {"w1", "w3", "w5"} and a.finished_ids(config_hash="b") == {"w0", "w2", "w4"}
    for i in range(24):
        a.write_batch([ep(f"e{i}", status="error" if i % 5 == 0 else "ok")], [st(f"e{i}", 0)])
    a.write_batch([ep("e0")], [st("e0", 0, "retried")])
    before = (a.episodes(), a.steps())
    a.compact()
    assert len(_keys(a, "episodes")) == len(_keys(a, "steps")) == 1
    assert a.episodes().equals(before[0]) and a.steps().equals(before[1])


def test_an_episodes_artifacts_reach_a_remote_run_dir(s3_env, tmp_path):
    """What an episode leaves in its working folder on a worker (figures, code) is copied under
    the run dir's artifacts/<episode id>/ when the run dir is on an object store."""
    from engine.storage import sub_uri, upload_tree

    uri = _uri(s3_env)
    store = EpisodeStore(uri, BENCHMARK.episode_fields, local_dir=tmp_path / "local")
    work = tmp_path / "worker" / "e1"
    (work / "figures").mkdir(parents=True)
    (work / "figures" / "fig1.png").write_bytes(b"\x89PNG fake")
    (work / "analysis.py").write_text("print(1)\n")
    assert store.remote_dir("artifacts").startswith(f"s3://{BUCKET}/runs/") and "?endpoint_override=" in uri
    assert upload_tree(work, sub_uri(store.remote_dir("artifacts"), "e1")) == 2
    assert [k for k in _keys(store) if k.startswith("artifacts/")] == ["artifacts/e1/analysis.py",
                                                                      "artifacts/e1/figures/fig1.png"]
    with store.fs.open_input_stream(f"{store.base}/artifacts/e1/figures/fig1.png") as f:
        assert f.read() == b"\x89PNG fake"
    assert upload_tree(tmp_path / "none", sub_uri(store.remote_dir("artifacts"), "e2")) == 0


@pytest.mark.slow
def test_a_remote_read_fetches_many_shards_at_once(s3_env, tmp_path, monkeypatch):
    """On S3 a read asks Arrow for ``REMOTE_READAHEAD`` shards ahead with an I/O pool at least that
    large (Arrow's defaults, 4 and 8, left a reduce of many small shards waiting on one GET
    after another: perf/driver_scale.py measures it); the rows are the same either way."""
    store = EpisodeStore(_uri(s3_env), BENCHMARK.episode_fields, local_dir=tmp_path)
    for i in range(12):
        store.write_batch([ep(f"e{i:02d}")], [st(f"e{i:02d}", 0)])
    asked: list[int] = []
    dataset = EpisodeStore._dataset

    class Spy:
        def __init__(self, d):
            self.d = d

        def to_table(self, **kw):
            asked.append(kw["fragment_readahead"])
            return self.d.to_table(**kw)

    monkeypatch.setattr(EpisodeStore, "_dataset", lambda self, *a, **kw: Spy(dataset(self, *a, **kw)))
    ids = store.episodes(["episode_id"])["episode_id"].to_pylist()
    assert sorted(ids) == [f"e{i:02d}" for i in range(12)]
    assert asked == [EpisodeStore.REMOTE_READAHEAD] and pa.io_thread_count() >= EpisodeStore.REMOTE_READAHEAD
    local = EpisodeStore(tmp_path / "run", BENCHMARK.episode_fields)
    local.write_batch([ep("e00")], [st("e00", 0)])
    asked.clear()
    local.episodes(["episode_id"])
    assert asked == [4]                         # a local disk reads as Arrow does by default


@pytest.mark.slow
def test_an_agentic_analyst_episode_leaves_its_figure_and_code_on_s3(s3_env, tmp_path):
    """The episode runner end to end: a scripted model drives the real agentic analyst loop (its
    sandboxed snippet writes a figure), and what the episode left in its working folder is copied
    under the remote run dir's artifacts/<episode id>/ when it ends."""
    import asyncio
    import json

    from engine.benchmarks.analyst.config import AnalystAgentConfig, AnalystBenchmarkConfig
    from engine.config import to_plain
    from engine.llm import Endpoint, SamplingParams
    from engine.protocol import dumps
    from engine.runtime.dispatch import EpisodeRunner, EpisodeSpec, WorkerSetup
    from tests.benchmarks.analyst.test_analyst_episode import REPORT, TASKS
    from tests.fake_openai import FakeOpenAI

    store = EpisodeStore(_uri(s3_env), BENCHMARK.episode_fields, local_dir=tmp_path / "local")
    script = [{"tool": "python", "code": "open('figures/monthly.png', 'wb').write(b'\\x89PNG\\r\\n')"},
              {"tool": "write_report", "content": REPORT}, {"tool": "finish"}]

    def responder(messages, req):
        return json.dumps(script[sum(m["role"] == "assistant" for m in messages)])

    agent = AnalystAgentConfig(mode="agentic")

    async def go():
        with FakeOpenAI(responder) as srv:
            setup = WorkerSetup("analyst", "fake", agent, dumps(to_plain(agent)), [Endpoint(srv.base_url, "fake")],
                                SamplingParams(max_retries=0, timeout_s=20), 8, 5, None,
                                data_json=dumps(to_plain(AnalystBenchmarkConfig())),
                                artifacts_dir=str(tmp_path / "worker"), artifacts_uri=store.remote_dir("artifacts"))
            return await EpisodeRunner(setup, None).run(EpisodeSpec("00000000000000e1", "h", TASKS["crashes-2023"],
                                                                    "crashes-2023", 0))

    ep = asyncio.run(go())["episode"]
    assert ep["status"] == "ok", ep["error"]
    assert ep["figures_written"] == ["figures/monthly.png"]
    keys = [k for k in _keys(store) if k.startswith("artifacts/")]
    assert "artifacts/00000000000000e1/figures/monthly.png" in keys
    assert "artifacts/00000000000000e1/report.md" in keys
    with store.fs.open_input_stream(f"{store.base}/artifacts/00000000000000e1/report.md") as f:
        assert f.read().decode() == REPORT


def test_embedding_cache_in_an_s3_run_dir(s3_env):
    """The index's embedding cache in the run dir on S3 (issue 33): a fresh replica elsewhere
    loads the vectors instead of embedding the corpus again."""
    import numpy as np

    from indexes.corpus import content_hash
    from indexes.embeddings import EmbeddingCache, embed_with_cache, embedding_cache_dir

    root = embedding_cache_dir(_uri(s3_env))
    texts = ["one", "two", "three"]
    vecs = np.arange(12, dtype=np.float32).reshape(3, 4)
    cache = EmbeddingCache(root, "org/m", 4)
    cache.add([content_hash(t) for t in texts[:2]], vecs[:2])
    cache.add([content_hash(texts[2])], vecs[2:])
    assert len(cache.shards()) == 2 and all("/_embeddings/org__m/part-" in s for s in cache.shards())

    class Exploding:
        model_name, dim = "org/m", 4

        def encode(self, batch):
            raise AssertionError("vectors in the S3 cache must not be embedded again")

    got = embed_with_cache(texts, Exploding(), EmbeddingCache(root, "org/m", 4))  # type: ignore[arg-type]
    assert np.array_equal(got, vecs)
