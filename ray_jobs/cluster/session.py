"""What one driver process keeps alive across the runs it makes: the Ray connection, hosted model
pools, the shared index and benchmark services.

A sweep (``-m agent.max_searches=1,3,5,7``) runs as one job (``ray_jobs/run/sweep.py: run_sweep``)
with one :class:`Session`: each model is started once and every point reuses it (and the
index/services when their inputs are equal). Resources are keyed by what they are built from.
Several pools live at once when the cluster holds them (the driver decides, in waves); a pool is
stopped only when a caller says it is no longer needed (``keep`` / ``stop_pools``).
``close()`` stops everything; drivers call it when the sweep ends.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.config import (
    ClusterConfig,
    Config,
    ModelConfig,
    PairwiseConfig,
    index_replica_count,
    service_replica_count,
    stable_hash,
    to_plain,
)
from engine.hosting.prepare_model import cache_dir as machine_cache_dir
from engine.inputs.paths import workdir
from engine.llm import Endpoint
from engine.protocol import Benchmark
from engine.runtime.actors import members
from indexes.embeddings import embedding_cache_dir
from indexes.service import CorpusSource, start_index_replicas
from ray_jobs.config.point import pool_key

if TYPE_CHECKING:
    from engine.hosting.replica import ModelPool

log = logging.getLogger("dateline.session")


def ray_auth_mode(c: ClusterConfig, job: bool = False) -> str:
    """``RAY_AUTH_MODE`` for ``cluster`` config ``c``: an explicit ``disabled``/``token`` as set;
    ``auto`` takes the environment's, else ``disabled`` for a local cluster this driver starts
    and ``token`` for an existing one (an address, or the cluster of a submitted job)."""
    local = not c.address and not job
    if c.ray_auth_mode != "auto":
        if c.ray_auth_mode == "disabled" and not local:
            log.warning("cluster.ray_auth_mode=disabled on an existing cluster: anyone who reaches its ports "
                        "can run code on it")
        return str(c.ray_auth_mode)
    return os.environ.get("RAY_AUTH_MODE") or ("disabled" if local else "token")


def _alive_nodes() -> int:
    """Alive nodes of the connected cluster (what ``replicas: auto`` of the index and services counts)."""
    import ray

    return sum(1 for n in ray.nodes() if n.get("Alive"))


def _corpus(benchmark: str, cfg: Config) -> list[Any]:
    from engine.benchmarks import get_benchmark

    return get_benchmark(benchmark).corpus(cfg)


class Session:
    def __init__(self) -> None:
        self.pools: dict[str, tuple[ModelPool, list[Endpoint]]] = {}
        self.reserved: dict[str, ModelPool] = {}      # placement groups reserved, replicas not started
        self.indexes: dict[str, Any] = {}
        self.services: dict[str, Any] = {}
        self.model_starts = 0
        self.startup: Any = {}
        self.startups: dict[str, Any] = {}      # pool key -> its replicas' startup records
        self.released_seconds: dict[str, float] = {}   # uptime of pools released mid-wave (release())
        self._ray_started_here = False
        atexit.register(self.close)

    # -- ray ---------------------------------------------------------------------------------
    def ensure_ray(self, cfg: Config | PairwiseConfig, needed_cpus: float) -> None:
        import json

        import ray

        if ray.is_initialized():
            return
        os.environ["RAY_AUTH_MODE"] = ray_auth_mode(cfg.cluster, job=os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR") is not None)
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        runtime_env = dict(cfg.cluster.runtime_env)
        env_vars = {"RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                    **runtime_env.pop("env_vars", {})}
        # where models live; how snippets are isolated; benchmarks from outside the repository; the log
        # level; the folder relative paths in the config mean (the driver's: engine/inputs/paths.py); own
        # build prompts (engine/benchmarks/livenews/build/stages.py)
        for k in ("DATELINE_CACHE", "DATELINE_BWRAP", "DATELINE_BENCHMARKS", "DATELINE_LOG_LEVEL", "DATELINE_BUILD_PROMPTS"):
            if k in os.environ:
                env_vars[k] = os.environ[k]
        env_vars.setdefault("DATELINE_WORKDIR", str(workdir()))
        address = cfg.cluster.address
        # Inside a submitted job (`ray job submit`, a KubeRay RayJob) the job supervisor passes the
        # job's runtime_env here; ray.init merges ours into it and raises ValueError ("Failed to merge
        # the Job's runtime env ...") on any field or env var key both set, even to equal values. The
        # job's own settings win (its env vars are already in this driver's environment): ours only
        # add what the job leaves unset.
        job_json = os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR")
        if job_json is not None:
            job_env = (json.loads(job_json) or {}).get("runtime_env") or {}
            job_vars = job_env.get("env_vars") or {}
            for k in [k for k in env_vars if k in job_vars]:
                if str(env_vars[k]) != str(job_vars[k]):
                    log.warning("env var %s: the Ray job's runtime_env sets %r, keeping it over %r", k,
                                job_vars[k], env_vars[k])
                del env_vars[k]
            for k in [k for k in runtime_env if k in job_env]:
                if runtime_env[k] != job_env[k]:
                    log.warning("runtime_env %s: the Ray job's %r is kept over cluster.runtime_env's %r", k,
                                job_env[k], runtime_env[k])
                del runtime_env[k]
            if not address:     # a job's driver cannot start a cluster of its own: join the job's
                log.warning("running inside a Ray job: joining its cluster (cluster.address=auto)")
                address = "auto"
        if env_vars:
            runtime_env["env_vars"] = env_vars
        if not sys.stderr.isatty():      # no colour codes in workers' log lines when redirected (CLI or API)
            os.environ.setdefault("RAY_COLOR_PREFIX", "0")
        if address:
            ray.init(address=address, runtime_env=runtime_env or None, log_to_driver=True)
        else:
            # A local cluster: logical CPUs are a scheduling budget; vLLM's threads are pinned by its env.
            num_cpus = cfg.cluster.num_cpus or max(os.cpu_count() or 1, int(needed_cpus + 0.999))
            nice = cfg.cluster.worker_niceness
            before = os.environ.get("RAY_worker_niceness")
            if nice is not None:                # read by the raylet ray.init starts
                os.environ["RAY_worker_niceness"] = str(nice)
            try:
                ray.init(num_cpus=num_cpus, include_dashboard=bool(cfg.cluster.dashboard),
                         runtime_env=runtime_env, log_to_driver=True,
                         logging_level=logging.WARNING)
            finally:
                if nice is not None and before is None:
                    os.environ.pop("RAY_worker_niceness", None)
                elif nice is not None and before is not None:
                    os.environ["RAY_worker_niceness"] = before
        self._ray_started_here = True

    # -- models ------------------------------------------------------------------------------
    def model(self, cfg: Config, log_dir: Path) -> list[Endpoint]:
        """Endpoints of the model under test (``cfg.model``)."""
        return self.pool(cfg.model, log_dir, keep=self.needed(cfg))

    def pool(self, m: ModelConfig, log_dir: Path, keep: set[str] | None = None, log_uri: str = "",
             key: str | None = None) -> list[Endpoint]:
        """Endpoints of ``m``: a hosted pool started once per session, or the external one. Pools
        not in ``keep`` (keys from :meth:`needed`) are stopped first, to free their resources. A
        CPU model's replicas get the dtype this machine resolves, the one its episode ids record
        (``with_planned_dtype``): a replica on a node that resolves another refuses to start."""
        from engine.hosting.replica import ModelPool
        from engine.hosting.vllm_server import with_planned_dtype

        key = key or self.key(m)       # a model with replicas: auto is kept under its config's key, sized
        if key in self.pools:
            return self.pools[key][1]
        self.stop_pools(keep or set())            # free the accelerators
        pool = self.reserved.pop(key, None) or ModelPool(with_planned_dtype(m), log_dir, log_uri)
        t0 = time.time()
        endpoints = pool.start()
        if m.kind == "vllm":
            self.model_starts += 1
            log.info("model %s: %d replica(s) healthy in %.0f s (model starts this session: %d)",
                     m.name, len(endpoints), time.time() - t0, self.model_starts)
        self.startup = self.startups[key] = pool.startup
        self.pools[key] = (pool, endpoints)
        return endpoints

    def reserve(self, m: ModelConfig, log_dir: Path, log_uri: str = "", key: str | None = None) -> None:
        """Reserve the placement groups of ``m``'s replicas now (:meth:`pool` starts them): a wave
        reserves its models largest replica first (``ModelPool.reserve``)."""
        from engine.hosting.replica import ModelPool
        from engine.hosting.vllm_server import with_planned_dtype

        key = key or self.key(m)
        if key in self.pools or key in self.reserved or m.kind != "vllm":
            return
        pool = ModelPool(with_planned_dtype(m), log_dir, log_uri)
        pool.reserve()
        self.reserved[key] = pool

    def stop_pools(self, keep: set[str]) -> None:
        """Stop every pool whose key is not in ``keep`` (and release reservations not started)."""
        for other in [k for k in list(self.pools) if k not in keep]:
            self.pools.pop(other)[0].stop()
        for other in [k for k in list(self.reserved) if k not in keep]:
            self.reserved.pop(other).stop()

    def release(self, key: str) -> float:
        """Stop the pool ``key`` mid-wave (its queue drained: ray_jobs/cluster/supervisor.py), keeping
        its replica uptime for the wave's accounting; returns that uptime."""
        entry = self.pools.pop(key, None)
        if entry is None:
            return 0.0
        pool = entry[0]
        try:
            up = pool.replica_seconds()
        except Exception:  # noqa: BLE001 - a replica gone: what the others say
            up = 0.0
        self.released_seconds[key] = self.released_seconds.get(key, 0.0) + up
        pool.stop()
        return up

    def pool_of(self, m: ModelConfig) -> ModelPool | None:
        """The running pool of ``m`` (None when it is not hosted in this session)."""
        entry = self.pools.get(self.key(m))
        return entry[0] if entry is not None else None

    @staticmethod
    def key(m: ModelConfig) -> str:
        return pool_key(m)

    def needed(self, cfg: Config) -> set[str]:
        """Pools a run needs at once: its model, and a hosted judge model of its own (two hosted
        models in one job: the judge is not restarted between the points of a sweep)."""
        keys = {self.key(cfg.model)}
        if cfg.judge.kind == "hosted" and cfg.judge.hosted_model is not None:
            keys.add(self.key(cfg.judge.hosted_model))
        return keys

    def replica_seconds(self, m: ModelConfig | None = None) -> float:
        """Replica uptime of every pool, or of ``m``'s pool only."""
        if m is not None:
            k = self.key(m)
            return (self.pools[k][0].replica_seconds() if k in self.pools else 0.0) + self.released_seconds.get(k, 0.0)
        return sum(p.replica_seconds() for p, _ in self.pools.values()) + sum(self.released_seconds.values())

    # -- index and services ------------------------------------------------------------------
    def index(self, cfg: Config, bench: Benchmark[Any]) -> Any | None:
        """The shared FAISS index actor over the benchmark's corpus (None when it has none)."""

        key = stable_hash(to_plain(cfg.benchmark) | {"limit": None}, to_plain(cfg.index), bench.name)
        if key in self.indexes:
            return self.indexes[key]
        if not bench.corpus(cfg):
            return None
        docs = CorpusSource(_corpus, (bench.name, cfg))          # the actor loads it (no object-store args)
        i = cfg.index
        cache = i.cache_dir or embedding_cache_dir(cfg.run.dir)
        nodes = _alive_nodes() if i.replicas == "auto" else None
        handle = start_index_replicas(index_replica_count(i, nodes), docs, i.embedding_model, i.device,
                                      i.embed_batch_size, cache, i.num_cpus, i.num_gpus, resources=i.resources,
                                      seed_dir=str(machine_cache_dir() / "embeddings"))
        self.indexes[key] = handle
        return handle

    def benchmark_services(self, cfg: Config, bench: Benchmark[Any]) -> dict[str, Any]:
        from engine.runtime.services import start_actor

        out = {}
        for spec in bench.services(cfg):
            key = spec.identity or stable_hash(spec.name, str(spec.factory), spec.kwargs)
            if key not in self.services:
                t0 = time.time()
                nodes = _alive_nodes() if cfg.cluster.service_replicas == "auto" else None
                self.services[key] = start_actor(spec, service_replica_count(cfg.cluster, nodes))
                log.info("service %s ready in %.1f s", spec.name, time.time() - t0)
            out[spec.name] = self.services[key]
        return out

    # -- teardown ----------------------------------------------------------------------------
    def close(self) -> None:
        pools = [*(p for p, _ in self.pools.values()), *self.reserved.values()]
        # every replica's server is told to stop at once (ModelPool.stop then waits for each in turn,
        # and its own stop call finds the server gone): a stopped run (ray_jobs/cluster/signals.py) has
        # seconds, not a vLLM shutdown per replica one after another
        for pool in pools:
            for r in list(getattr(pool, "replicas", ())):
                try:
                    r.stop.remote()
                except Exception:  # noqa: BLE001 - ModelPool.stop tries again
                    pass
        for pool in pools:
            try:
                pool.stop()
            except Exception as e:  # noqa: BLE001 - teardown goes on
                log.warning("stopping a model pool: %s", e)
        self.pools.clear()
        self.reserved.clear()
        try:
            import ray

            if ray.is_initialized():     # the index and service actors it started, on a cluster that outlives it
                for h in [m for x in [*self.indexes.values(), *self.services.values()] for m in members(x)]:
                    try:
                        ray.kill(h)
                    except Exception as e:  # noqa: BLE001 - teardown goes on
                        log.warning("stopping an actor: %s", e)
            self.indexes.clear()
            self.services.clear()
            if self._ray_started_here and ray.is_initialized():
                ray.shutdown()      # stops a local cluster; only disconnects from an existing one
        except ImportError:  # pragma: no cover
            pass
        self._ray_started_here = False
