"""The index over the real sample data with the real MiniLM model: time-aware search through
the newsagent environment (property-based over tasks and queries), the Parquet embedding cache,
the batching actor, and refusing to fetch models from a hub."""

from __future__ import annotations

import asyncio
import datetime as dt

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.benchmarks.newsagent.environment import Action, NewsEnvironment, Retrieved
from engine.errors import ConfigError
from indexes.corpus import Document
from indexes.embeddings import EmbeddingCache, embed_with_cache, resolve_model_path
from indexes.service import IndexService

WORDS = ["council", "pool", "flood", "strike", "vote", "manager", "robotics", "jobs", "measles", "tram", "museum",
         "drought", "ferry", "trial", "appeal", "festival", "heatwave", "merger", "fiber", "stadium", "water"]


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(task_i=st.integers(0, 21), words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
       shift=st.integers(-400, 400))
def test_search_through_environment_is_time_aware(sample_index, sample_dataset, task_i, words, shift):
    task = sample_dataset.tasks[task_i]
    by_id = {o.object_id: o for o in sample_dataset.objects}

    async def search(query, before):
        hits = sample_index.search([query], [before], 5, 0.0)[0]
        return [Retrieved(h.doc_id, h.text, h.date, h.score) for h in hits]

    env = NewsEnvironment(task, search)
    asked = task.release_date + dt.timedelta(days=shift)
    asyncio.run(env.step(Action("search", query=" ".join(words), before=asked)))
    cutoff = min(asked, task.release_date)
    for oid in env.retrieved_ids():
        assert by_id[oid].date < cutoff <= task.release_date


def test_title_search_finds_reference_evidence(sample_index, sample_dataset):
    """Sanity of the real embeddings: searching each title retrieves some of its own storyline."""
    found = 0
    for t in sample_dataset.tasks:
        hits = sample_index.search([t.title], [t.release_date], 5, None)[0]
        found += bool({h.doc_id for h in hits} & set(t.reference_evidence))
    assert found >= len(sample_dataset.tasks) // 2


def test_embedding_cache_reuses_vectors(tmp_path, embedder):
    texts = ["The bridge reopened.", "Rain is expected on Friday.", "The bridge reopened."]
    cache = EmbeddingCache(tmp_path, embedder.model_name, embedder.dim)
    first = embed_with_cache(texts, embedder, cache)
    assert len(list(cache.dir.glob("part-*.parquet"))) == 1
    assert np.allclose(first[0], first[2]) and np.isclose(np.linalg.norm(first[1]), 1.0, atol=1e-5)

    class Exploding:
        model_name, dim = embedder.model_name, embedder.dim

        def encode(self, texts):
            raise AssertionError("cached texts must not be embedded again")

    again = embed_with_cache(texts, Exploding(), cache)  # type: ignore[arg-type]
    assert np.array_equal(first, again)


def test_models_are_never_fetched_from_a_hub():
    assert resolve_model_path("all-MiniLM-L6-v2").endswith("model")
    with pytest.raises(ConfigError, match="never downloaded"):
        resolve_model_path("BAAI/bge-small-en-v1.5")


@pytest.mark.slow
def test_service_batches_concurrent_requests(sample_dataset, sample_index, sample_embeddings):
    """The actor body gathers concurrent single-query calls into shared batches, same answers."""
    docs = [Document(o.object_id, o.text, o.date) for o in sample_dataset.objects]
    svc = IndexService(docs, "all-MiniLM-L6-v2", "cpu", 64, str(sample_embeddings))   # vectors: sample_index's
    tasks = sample_dataset.tasks

    async def go():
        return await asyncio.gather(*[svc.search([t.title], [t.release_date], 5, 0.3) for t in tasks])

    got = asyncio.run(go())
    want = svc.local.search([t.title for t in tasks], [t.release_date for t in tasks], 5, 0.3)
    assert [[h.doc_id for h in g[0]] for g in got] == [[h.doc_id for h in w] for w in want]
    stats = svc.get_stats()
    assert stats["search_calls"] == len(tasks) and stats["batches"] < len(tasks) and stats["max_batch"] > 1
