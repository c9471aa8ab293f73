"""The index as replicas (issue 33): calls spread over them by the client's calls in flight, the
run dir's embedding cache (seeded from a machine's own), corpus vectors reused for texts already
in the corpus, and, on a ``cluster_utils`` cluster of two nodes, two real MiniLM + FAISS replicas
placed on different nodes, the second loading the vectors the first embedded, both answering
exactly what one in-process index answers."""

from __future__ import annotations

import asyncio
import random

import numpy as np
import pytest

from engine.config import index_replica_count, service_replica_count, validate
from engine.errors import ConfigError
from engine.runtime.actors import ActorByName, Replicas, by_name, members, resolve
from engine.runtime.replicas import Balanced
from indexes.corpus import Document, content_hash
from indexes.embeddings import EmbeddingCache, embed_with_cache, embedding_cache_dir
from indexes.service import RemoteIndex


class _Gate:
    """A fake actor method: each ``.remote()`` call waits until the test releases it."""

    def __init__(self, log: list[tuple[str, int]], name: str) -> None:
        self.log, self.name, self.waiting = log, name, []

    def remote(self, *args):
        fut = asyncio.get_running_loop().create_future()
        self.waiting.append(fut)
        self.log.append((self.name, len(self.waiting)))
        return fut


class _Actor:
    def __init__(self, log, name):
        self.search = _Gate(log, name)


def test_calls_go_to_the_replica_with_the_fewest_in_flight():
    log: list[tuple[str, int]] = []
    a, b, c = _Actor(log, "a"), _Actor(log, "b"), _Actor(log, "c")
    bal = Balanced(Replicas((a, b, c)), rng=random.Random(0))

    async def go():
        calls = [asyncio.ensure_future(bal.call("search", i)) for i in range(6)]
        await asyncio.sleep(0)
        assert sorted(bal.inflight) == [2, 2, 2]          # 6 calls, 3 replicas: two each
        for f in a.search.waiting:                          # a answers both of its calls
            f.set_result("a")
        await asyncio.sleep(0)
        assert bal.inflight[0] == 0
        more = [asyncio.ensure_future(bal.call("search", i)) for i in range(2)]
        await asyncio.sleep(0)
        assert bal.inflight[0] == 2                          # both went to the idle replica
        for x in (b, c, a):
            for f in x.search.waiting:
                if not f.done():
                    f.set_result(x.search.name)
        return await asyncio.gather(*calls, *more)

    got = asyncio.run(go())
    assert sorted(got) == ["a"] * 4 + ["b"] * 2 + ["c"] * 2 and bal.inflight == [0, 0, 0] and sum(bal.sent) == 8


def test_replicas_travel_by_name_and_a_single_handle_is_one_member():
    named = Replicas((ActorByName("x", "ns"), "plain"))
    assert by_name(named) == named and members(named) == [ActorByName("x", "ns"), "plain"]
    assert members("h") == ["h"] and resolve(Replicas(("h",))) == Replicas(("h",))
    assert Balanced("h").members == ["h"]
    with pytest.raises(ValueError, match="at least one"):
        Replicas(())


def test_replica_counts_and_their_validation():
    from ray_jobs.config.compose import compose

    cfg = compose(["index.replicas=auto", "cluster.service_replicas=3"])
    assert index_replica_count(cfg.index) == 1 and index_replica_count(cfg.index, nodes=8) == 8
    assert service_replica_count(cfg.cluster, nodes=8) == 3
    for bad in (["index.replicas=0"], ["cluster.service_replicas=many"]):
        with pytest.raises(ConfigError, match="replicas"):
            validate(compose(bad))       # compose validates too


def test_run_dir_cache_is_seeded_from_the_machine_cache(tmp_path):
    """Vectors the machine's cache holds are copied into the run dir's, not embedded again; the
    run dir's cache then serves a cold start by itself."""
    rng = np.random.default_rng(0)
    texts = [f"text {i}" for i in range(5)]
    vecs = rng.standard_normal((5, 4)).astype(np.float32)
    seed = EmbeddingCache(tmp_path / "machine", "m", 4)
    seed.add([content_hash(t) for t in texts[:3]], vecs[:3])

    class Counting:
        model_name, dim, encoded = "m", 4, 0

        def encode(self, batch):
            self.encoded += len(batch)
            return np.stack([vecs[texts.index(t)] for t in batch])

    run_cache = EmbeddingCache(embedding_cache_dir(str(tmp_path / "run")), "m", 4)
    enc = Counting()
    out = embed_with_cache(texts, enc, run_cache, seed)  # type: ignore[arg-type]
    assert enc.encoded == 2 and np.array_equal(out, vecs)           # 3 copied, 2 embedded
    assert run_cache.dir == tmp_path / "run" / "_embeddings" / "m"

    class Exploding(Counting):
        def encode(self, batch):
            raise AssertionError("a cold start from the run dir's cache must not embed")

    again = embed_with_cache(texts, Exploding(), EmbeddingCache(tmp_path / "run" / "_embeddings", "m", 4))  # type: ignore[arg-type]
    assert np.array_equal(again, vecs)


def test_uri_run_dirs_keep_their_options():
    assert (embedding_cache_dir("s3://b/runs/x?endpoint_override=http://h:9&scheme=http")
            == "s3://b/runs/x/_embeddings?endpoint_override=http://h:9&scheme=http")


def test_corpus_texts_are_not_embedded_again(embedder, sample_dataset, sample_index):
    """The real MiniLM: a rephrase's evidence (texts of the corpus) gets the corpus's vectors,
    equal to embedding them; only the new text is encoded."""
    objs = sample_dataset.objects[:3]
    texts = [o.text for o in objs] + ["A sentence the corpus does not hold."]
    before_enc, before_reused = embedder.encoded, sample_index.reused
    got = sample_index.embed(texts)
    assert embedder.encoded - before_enc == 1 and sample_index.reused - before_reused == 3
    assert np.allclose(got, embedder.encode(texts), atol=1e-5)


@pytest.mark.ray
@pytest.mark.timeout(600)
def test_two_replicas_on_two_nodes_share_the_run_dir_cache(tmp_path, sample_dataset, sample_index):
    """Two real index replicas on a two-node ``cluster_utils`` cluster: SPREAD puts them on
    different nodes; the second one waits for the first and loads the vectors it cached in the
    run dir (it embeds nothing); the episodes' client spreads concurrent searches over both; the
    answers are the in-process index's."""
    import ray

    from indexes.service import start_index_replicas
    from tests.e2e.test_multinode import own_cluster

    docs = [Document(o.object_id, o.text, o.date) for o in sample_dataset.objects]
    cache = embedding_cache_dir(str(tmp_path / "run"))
    with own_cluster() as c:
        for _ in range(2):
            c.add_node(num_cpus=1)
        c.wait_for_nodes()
        ray.init(address=c.address)
        reps = start_index_replicas(2, docs, "all-MiniLM-L6-v2", "cpu", 64, cache, 1.0, 0.0)
        infos = ray.get([m.ready.remote() for m in reps.members], timeout=400)
        assert len({i["node_id"] for i in infos}) == 2
        assert infos[0]["embedded_at_build"] == len(docs) and infos[1]["embedded_at_build"] == 0
        assert [i["threads"] for i in infos] == [1, 1]

        @ray.remote(num_cpus=0)
        def client(target, queries, dates):
            async def go():
                idx = RemoteIndex(resolve(target))
                got = await asyncio.gather(*[idx.search([q], [d], 5, 0.3) for q, d in zip(queries, dates)])
                return [[h.doc_id for h in g[0]] for g in got], idx.calls.sent
            return asyncio.run(go())

        tasks = sample_dataset.tasks
        queries, dates = [t.title for t in tasks], [t.release_date for t in tasks]
        got, sent = ray.get(client.remote(by_name(reps), queries, dates), timeout=300)
        want = sample_index.search(queries, dates, 5, 0.3)
        assert got == [[h.doc_id for h in w] for w in want]
        assert all(n > 0 for n in sent), sent
        from engine.runtime.replicas import gather_stats

        stats = gather_stats(reps)
        assert stats["replicas"] == 2 and stats["search_calls"] == len(tasks)
        assert all(p["search_calls"] > 0 for p in stats["per_replica"])
