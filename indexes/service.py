"""The shared index: one Ray actor holding the embedder and the time-aware FAISS index.

Episode workers send small requests (often one query); the actor gathers whatever requests
arrive while the previous batch is being computed and serves them as one embedding call and one
FAISS call per distinct cutoff, because per-call overhead dominates single-query search
(~35 q/s at 1 query/call vs ~1000 q/s at 1000/call). Embedding and search run in a thread so the
actor's event loop keeps accepting requests meanwhile.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.protocol import DocHit
from engine.runtime.actors import Replicas, by_name, remember, resolve, unique_name
from engine.runtime.logs import configure as configure_logging
from engine.runtime.replicas import Balanced
from indexes.corpus import Document, content_hash
from indexes.embeddings import Embedder, EmbeddingCache, embed_with_cache
from indexes.time_index import TimeAwareIndex

log = logging.getLogger(__name__)


class LocalIndex:
    """Embedder + index + documents in this process (what the actor wraps; used directly in tests)."""

    def __init__(self, docs: Sequence[Document], embedder: Embedder, cache_dir: str | Path | None = None,
                 device: str = "auto", seed_dir: str | Path | None = None) -> None:
        t0 = time.perf_counter()
        self.embedder = embedder
        self.docs = list(docs)
        cache = EmbeddingCache(cache_dir, embedder.model_name, embedder.dim) if cache_dir else None
        seed = (EmbeddingCache(seed_dir, embedder.model_name, embedder.dim)
                if seed_dir and cache_dir and Path(seed_dir).is_dir() else None)
        before = getattr(embedder, "encoded", 0)
        vectors = embed_with_cache([d.text for d in self.docs], embedder, cache, seed)
        self.embedded_at_build = getattr(embedder, "encoded", 0) - before
        self.index = TimeAwareIndex(vectors, [d.date for d in self.docs], device=device)
        # a text that is already in the corpus (a rephrase's evidence: the objects it found) is
        # not embedded again: its corpus vector is the same MiniLM output
        self._vectors = vectors
        self._row_of = {content_hash(d.text): i for i, d in enumerate(self.docs)}
        self.reused = 0
        self.build_s = time.perf_counter() - t0
        log.info("index over %d documents ready in %.1f s (gpu=%s)", len(self.docs), self.build_s, self.index.on_gpu)

    def search(self, queries: Sequence[str], before: Sequence[dt.date], k: int,
               threshold: float | None) -> list[list[DocHit]]:
        if not queries:
            return []
        q = self.embedder.encode(list(queries))
        out = []
        for hits in self.index.search(q, before, k, threshold):
            out.append([DocHit(self.docs[h.row].doc_id, self.docs[h.row].text, self.docs[h.row].date, h.score)
                        for h in hits])
        return out

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        rows = [self._row_of.get(content_hash(t), -1) for t in texts]
        new = [i for i, r in enumerate(rows) if r < 0]
        out = np.zeros((len(texts), self.embedder.dim), dtype=np.float32)
        if new:
            out[new] = self.embedder.encode([texts[i] for i in new])
        known = [i for i, r in enumerate(rows) if r >= 0]
        if known:
            out[known] = self._vectors[[rows[i] for i in known]]
        self.reused += len(known)
        return out


class AsyncLocalIndex:
    """IndexClient over a LocalIndex in the same process (tests, single-process runs)."""

    def __init__(self, local: LocalIndex) -> None:
        self.local = local

    async def search(self, queries: Sequence[str], before: Sequence[dt.date], k: int,
                     threshold: float | None) -> list[list[DocHit]]:
        return self.local.search(queries, before, k, threshold)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.local.embed(texts)


class IndexService:
    """Body of the index actor (decorated with ray.remote by :func:`start_index_service`)."""

    def __init__(self, docs: Sequence[Document] | CorpusSource, model_name: str, device: str, batch_size: int,
                 cache_dir: str | None, threads: int = 0, after: Any = None, seed_dir: str | None = None) -> None:
        configure_logging()
        if after is not None:     # another replica embeds the corpus into the shared cache first
            import ray

            ray.get(resolve(after).ready.remote())
        self.threads = _torch_threads(threads)
        for name in ("faiss.loader", "sentence_transformers", "httpx"):
            logging.getLogger(name).setLevel(logging.WARNING)
        if isinstance(docs, CorpusSource):       # the actor loads its corpus itself (a restart too)
            docs = docs.load()
        embedder = Embedder(model_name, "cpu" if device == "cpu" else "auto", batch_size)
        self.local = LocalIndex(docs, embedder, cache_dir, device=device, seed_dir=seed_dir)
        self._queue: asyncio.Queue[tuple[str, Any, asyncio.Future[Any]]] | None = None
        self._worker: asyncio.Task[None] | None = None
        self.stats = {"search_calls": 0, "queries": 0, "batches": 0, "max_batch": 0, "embed_calls": 0}

    def ready(self) -> dict[str, Any]:
        import os

        import ray

        return {"documents": len(self.local.docs), "build_s": self.local.build_s, "gpu": self.local.index.on_gpu,
                "embedded_at_build": self.local.embedded_at_build, "threads": self.threads,
                "node_id": ray.get_runtime_context().get_node_id(),
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}

    def _ensure_worker(self) -> None:
        if self._worker is None:
            self._queue = asyncio.Queue()
            self._worker = asyncio.get_running_loop().create_task(self._serve())

    async def _serve(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            searches = [b for b in batch if b[0] == "search"]
            embeds = [b for b in batch if b[0] == "embed"]
            if searches:
                # Requests with the same (k, threshold) share one embedding + FAISS pass.
                groups: dict[tuple[int, float | None], list[Any]] = {}
                for item in searches:
                    groups.setdefault((item[1][2], item[1][3]), []).append(item)
                for (k, thr), items in groups.items():
                    queries = [q for it in items for q in it[1][0]]
                    before = [b for it in items for b in it[1][1]]
                    try:
                        res = await loop.run_in_executor(None, self.local.search, queries, before, k, thr)
                    except Exception as e:  # hand the error to every waiter
                        for it in items:
                            it[2].set_exception(e)
                        continue
                    self.stats["batches"] += 1
                    self.stats["max_batch"] = max(self.stats["max_batch"], len(queries))
                    pos = 0
                    for it in items:
                        n = len(it[1][0])
                        it[2].set_result(res[pos: pos + n])
                        pos += n
            if embeds:
                texts = [t for it in embeds for t in it[1]]
                try:
                    vecs = await loop.run_in_executor(None, self.local.embed, texts)
                except Exception as e:
                    for it in embeds:
                        it[2].set_exception(e)
                    continue
                pos = 0
                for it in embeds:
                    it[2].set_result(vecs[pos: pos + len(it[1])])
                    pos += len(it[1])

    async def search(self, queries: list[str], before: list[dt.date], k: int,
                     threshold: float | None) -> list[list[DocHit]]:
        self._ensure_worker()
        fut: asyncio.Future[list[list[DocHit]]] = asyncio.get_running_loop().create_future()
        self.stats["search_calls"] += 1
        self.stats["queries"] += len(queries)
        assert self._queue is not None
        await self._queue.put(("search", (queries, before, k, threshold), fut))
        return await fut

    async def embed(self, texts: list[str]) -> np.ndarray:
        self._ensure_worker()
        fut: asyncio.Future[np.ndarray] = asyncio.get_running_loop().create_future()
        self.stats["embed_calls"] += 1
        assert self._queue is not None
        await self._queue.put(("embed", list(texts), fut))
        return await fut

    def get_stats(self) -> dict[str, Any]:
        return dict(self.stats, reused_texts=self.local.reused)


def _torch_threads(threads: int) -> int:
    """Set torch's threads to the replica's CPUs (``threads`` > 0; Ray sets OMP_NUM_THREADS only
    for whole ones) and return what it uses."""
    import torch

    if threads > 0:
        torch.set_num_threads(threads)
    return int(torch.get_num_threads())


class RemoteIndex:
    """IndexClient over the index actor, or over its :class:`~engine.runtime.actors.Replicas`
    (what episode workers hold): each call goes to the replica this client has the fewest calls
    in flight on."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.calls = Balanced(handle)

    async def search(self, queries: Sequence[str], before: Sequence[dt.date], k: int,
                     threshold: float | None) -> list[list[DocHit]]:
        hits: list[list[DocHit]] = await self.calls.call("search", list(queries), list(before), k, threshold)
        return hits

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        vectors: np.ndarray = await self.calls.call("embed", list(texts))
        return vectors


@dataclass(frozen=True)
class CorpusSource:
    """Where an index actor gets its documents: ``loader(*args)`` (e.g. a benchmark's
    ``corpus`` and its config), run in the actor, so the documents never go through the object
    store (Ray warns about restartable actors whose arguments live there) and a restarted actor
    loads them again. The data must be readable where the actor runs, as it is for services."""
    loader: Any
    args: tuple[Any, ...] = ()

    def load(self) -> list[Document]:
        return list(self.loader(*self.args))


def start_index_service(docs: Sequence[Document] | CorpusSource, model_name: str, device: str, batch_size: int,
                        cache_dir: str | None, num_cpus: float, num_gpus: float,
                        resources: dict[str, float] | None = None, spread: bool = False, after: Any = None,
                        seed_dir: str | None = None) -> Any:
    """The index actor, with ``num_cpus``/``num_gpus`` and custom ``resources`` (index.resources).
    Without GPUs of its own it sees none: Ray leaves CUDA_VISIBLE_DEVICES alone for an actor that
    asks for no GPU, so on a GPU node FAISS/torch would take one the replicas were given; with GPUs,
    Ray sets it to the ones it assigned. It embeds with ``max(1, int(num_cpus))`` threads.
    ``spread``: Ray's SPREAD scheduling (replicas on different nodes where they fit). ``after``: an
    index actor (by name) this one waits for before it builds (so it reads the vectors that one cached).
    ``seed_dir``: a node-local cache whose vectors are copied into ``cache_dir`` instead of embedded."""
    import ray

    actor_cls = ray.remote(IndexService)
    # an index whose process or node dies is rebuilt by Ray from the same documents (embeddings
    # come back from the cache) and searches in flight are retried there: they only read
    options: dict[str, Any] = {"num_cpus": num_cpus, "num_gpus": num_gpus, "max_concurrency": 1000,
                               "resources": dict(resources) if resources else None,
                               "max_restarts": -1, "max_task_retries": -1}
    if spread:
        options["scheduling_strategy"] = "SPREAD"
    if not num_gpus:
        options["runtime_env"] = {"env_vars": {"CUDA_VISIBLE_DEVICES": ""}}   # merged into the job's env_vars
    options["name"] = unique_name("index")      # workers find it by name (engine.runtime.actors)
    threads = max(1, int(num_cpus))
    if isinstance(docs, CorpusSource):
        return remember(actor_cls.options(**options).remote(docs, model_name, device, batch_size, cache_dir, threads, after, seed_dir),
                        options["name"])
    docs_ref = ray.put(list(docs))         # held by the driver: a restart rebuilds from it
    _CONSTRUCTOR_ARGS.append(docs_ref)
    return remember(actor_cls.options(**options).remote(docs_ref, model_name, device, batch_size, cache_dir, threads, after, seed_dir),
                    options["name"])


def start_index_replicas(replicas: int, docs: Sequence[Document] | CorpusSource, model_name: str, device: str,
                         batch_size: int, cache_dir: str | None, num_cpus: float, num_gpus: float,
                         resources: dict[str, float] | None = None, seed_dir: str | None = None) -> Replicas:
    """``replicas`` index actors over the same corpus, spread over the nodes. With a cache, the
    others wait (in their constructors: the driver goes on) for the first one, which embeds what
    ``cache_dir`` (the run dir's, shared by the nodes) lacks, then load the vectors from it."""
    first = start_index_service(docs, model_name, device, batch_size, cache_dir, num_cpus, num_gpus, resources,
                                spread=replicas > 1, seed_dir=seed_dir)
    if replicas == 1:
        return Replicas((first,))
    after = by_name(first) if cache_dir else None     # none of them blocks the driver
    rest = [start_index_service(docs, model_name, device, batch_size, cache_dir, num_cpus, num_gpus, resources,
                                spread=True, after=after, seed_dir=seed_dir) for _ in range(replicas - 1)]
    return Replicas((first, *rest))


_CONSTRUCTOR_ARGS: list[Any] = []
