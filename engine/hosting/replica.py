"""Model replicas as Ray actors: each starts a vLLM server on the resources Ray gave it.

Every replica has a placement group holding its resources, reserved before any actor starts:
one bundle with its CPUs, GPUs and custom resources, or, tensor parallel on GPUs, one bundle per
GPU (CPUs and custom resources on the first) packed on one node (STRICT_PACK). The replica actor
runs in bundle 0; small :class:`GpuShard` actors hold the other GPU bundles and report their GPU
ids, and the server (vLLM's ``mp`` executor spawns its tensor-parallel workers itself) gets all
of them in ``CUDA_VISIBLE_DEVICES``. Groups that cannot be reserved within
``model.placement_timeout_s`` are removed and startup fails with :class:`PlacementError`.
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from pathlib import Path
from typing import Any

import ray

from engine.config import ModelConfig
from engine.errors import PlacementError
from engine.hosting.vllm_server import VLLMServer, engine_settings
from engine.llm import Endpoint

log = logging.getLogger(__name__)


def replica_log_name(model: str, index: int) -> str:
    """The server log of one replica: several models may be hosted for one run dir (a judge next to
    the model under test), so the model name is part of it."""
    return f"vllm-{re.sub(r'[^A-Za-z0-9._-]+', '_', model)}-replica{index}.log"


# All of a replica on one node (tensor-parallel shards talk over the node's GPU interconnect).
PLACEMENT_STRATEGY = "STRICT_PACK"


def gpu_sharded(cfg: ModelConfig) -> bool:
    """Tensor parallel on GPUs: one placement group bundle per GPU."""
    return cfg.tensor_parallel_size > 1 and cfg.num_gpus >= 2 and float(cfg.num_gpus).is_integer()


def replica_bundles(cfg: ModelConfig) -> list[dict[str, float]]:
    """The placement group bundles of one replica (zero amounts left out); the replica actor asks
    for exactly the first one."""
    custom = {k: float(v) for k, v in cfg.resources.items()}
    if gpu_sharded(cfg):
        bundles = [{"CPU": float(cfg.num_cpus), "GPU": 1.0, **custom}]
        bundles += [{"GPU": 1.0} for _ in range(int(cfg.num_gpus) - 1)]
    else:
        bundles = [{"CPU": float(cfg.num_cpus), "GPU": float(cfg.num_gpus or 0.0), **custom}]
    return [{k: v for k, v in b.items() if v} for b in bundles]


def placement_message(cfg: ModelConfig, bundles: list[dict[str, float]], placed: int, total: dict[str, float],
                      available: dict[str, float], nodes: list[dict[str, float]]) -> str:
    """Why the replicas of ``cfg`` could not be placed: what each asked for, what the cluster has."""
    ask: dict[str, float] = {}
    for b in bundles:
        for k, v in b.items():
            ask[k] = ask.get(k, 0.0) + v

    def shown(res: dict[str, float]) -> str:
        keys = ["CPU", "GPU", *sorted(k for k in {*res, *ask} if k not in ("CPU", "GPU") and _user_resource(k))]
        return "{" + ", ".join(f"{k}: {res.get(k, 0.0):g}" for k in keys) + "}"

    short = []
    for k, v in ask.items():
        biggest = max((n.get(k, 0.0) for n in nodes), default=0.0)
        if cfg.replicas * v > total.get(k, 0.0) + 1e-9:
            short.append(f"{k} (the replicas need {cfg.replicas * v:g}, the cluster has {total.get(k, 0.0):g})")
        elif v > biggest + 1e-9:
            short.append(f"{k} (a replica needs {v:g} on one node, the largest node has {biggest:g})")
    return (f"model {cfg.name}: {cfg.replicas - placed} of {cfg.replicas} replica(s) could not be placed within "
            f"{cfg.placement_timeout_s:g} s (model.placement_timeout_s). Each replica asks for {shown(ask)} on one "
            f"node (bundles {bundles}, {PLACEMENT_STRATEGY}). The cluster has {shown(total)} in total, "
            f"{shown(available)} available"
            + (f"; short: {', '.join(short)}" if short else "; the resources exist but are taken or split over nodes")
            + ". Lower model.num_gpus / num_cpus / resources / replicas, or add nodes with those resources.")


def _user_resource(name: str) -> bool:
    """A resource a config can ask for (not Ray's per-node, per-group or memory bookkeeping)."""
    return not (name.startswith("node:") or "_group_" in name or name.startswith("accelerator_type:")
                or name in ("memory", "object_store_memory"))


@ray.remote(num_cpus=0)
class GpuShard:
    """Holds one GPU bundle of a tensor-parallel replica's placement group while its server runs,
    and says which GPU that is (the server's shards use it)."""

    def gpu_ids(self) -> list[str]:
        return [str(g) for g in ray.get_gpu_ids()]


@ray.remote
class ModelReplica:
    def __init__(self, cfg: dict[str, Any], index: int, log_dir: str, placement_group: Any = None,
                 api_key: str = "", bind: str = "loopback") -> None:
        self.cfg = ModelConfig(**cfg)
        self.index = index
        self.placement_group = placement_group
        self.shards: list[Any] = []
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        # loopback: only this node's clients (a one-node cluster); node: this node's IP, where the
        # other nodes' workers reach it; never every interface
        self.host = "127.0.0.1" if bind == "loopback" else ray.util.get_node_ip_address()
        engine_args, env = engine_settings(self.cfg)
        self.server = VLLMServer(self.cfg.path, self.cfg.served_name or self.cfg.name,
                                 tensor_parallel_size=self.cfg.tensor_parallel_size,
                                 engine_args=engine_args, env=env,
                                 log_path=Path(log_dir) / replica_log_name(self.cfg.name, index),
                                 module=self.cfg.server_module, host=self.host, api_key=api_key)
        self.started_at = time.time()
        self.healthy_after_s = -1.0

    def _claim_gpus(self) -> None:
        """Tensor parallel on GPUs: hold the group's other GPU bundles and give the server every GPU
        of the group (Ray's CUDA_VISIBLE_DEVICES for this actor names only bundle 0's)."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        for shard in self.shards:           # a restart: the bundles are re-claimed (same node, same GPUs)
            ray.kill(shard)
        # mypy ignores class decorators: GpuShard is the ray.remote actor class
        self.shards = [GpuShard.options(  # type: ignore[attr-defined]
            num_gpus=1, max_restarts=0, scheduling_strategy=PlacementGroupSchedulingStrategy(
                self.placement_group, placement_group_bundle_index=b)).remote()
            for b in range(1, len(replica_bundles(self.cfg)))]
        ids = [str(g) for g in ray.get_gpu_ids()]
        for got in ray.get([s.gpu_ids.remote() for s in self.shards], timeout=self.cfg.placement_timeout_s):
            ids += got
        self.server.env["CUDA_VISIBLE_DEVICES"] = ",".join(ids)

    def start(self) -> dict[str, Any]:
        if gpu_sharded(self.cfg) and self.placement_group is not None:
            self._claim_gpus()
        self.server.start()
        self.healthy_after_s = self.server.wait_healthy(self.cfg.startup_timeout_s)
        return {"base_url": f"http://{self.host}:{self.server.port}/v1", "healthy_after_s": self.healthy_after_s,
                "replica": self.index, "node_id": ray.get_runtime_context().get_node_id(),
                "gpus": self.server.env.get("CUDA_VISIBLE_DEVICES", "") if self.cfg.num_gpus else ""}

    def health(self) -> dict[str, Any]:
        """Whether the server process lives and answers ``/health``, and where it is: a replica
        the driver checks periodically (``ModelPool.check``)."""
        import urllib.request

        alive = self.server.proc is not None and self.server.proc.poll() is None
        ok = False
        if alive:
            try:
                with urllib.request.urlopen(self.server.local_url() + "/health", timeout=5) as r:
                    ok = r.status == 200
            except OSError:
                ok = False
        return {"alive": alive, "healthy": ok, "replica": self.index,
                "base_url": f"http://{self.host}:{self.server.port}/v1",
                "node_id": ray.get_runtime_context().get_node_id()}

    def restart(self) -> dict[str, Any]:
        """Stop whatever is left of the server and start it again on the same port."""
        self.server.stop()
        log.warning("restarting vLLM replica %d of %s", self.index, self.cfg.name)
        return self.start()

    def uptime_s(self) -> float:
        return time.time() - self.started_at

    def stop(self) -> None:
        self.server.stop()
        for shard in self.shards:
            ray.kill(shard)
        self.shards = []

    def __del__(self) -> None:
        try:
            self.server.stop()
        except Exception:
            pass


class ModelPool:
    """Starts the replicas of one model (or none, for an external endpoint) and hands out endpoints."""

    def __init__(self, cfg: ModelConfig, log_dir: str | Path) -> None:
        self.cfg = cfg
        self.log_dir = str(log_dir)
        self.replicas: list[Any] = []
        self.placement_groups: list[Any] = []      # one per replica, removed in stop()
        self.endpoints: list[Endpoint] = []
        self.startup: list[dict[str, Any]] = []
        self._restarting: dict[int, Any] = {}       # replica index -> ObjectRef of its restart()
        self._misses: dict[int, int] = {}           # consecutive failed health checks
        self.restarts = 0
        # every hosted replica requires this key (vLLM's VLLM_API_KEY): made per pool, kept in
        # memory, given to clients inside their endpoints; never on a command line or on disk
        self.api_key = secrets.token_urlsafe(32) if cfg.kind == "vllm" else ""
        self.bind = ""

    def start(self) -> list[Endpoint]:
        cfg = self.cfg
        served = cfg.served_name or cfg.name
        if cfg.kind == "openai_compatible":
            self.endpoints = [Endpoint(cfg.base_url.rstrip("/"), served, cfg.api_key_env)]
            return self.endpoints
        try:
            self._place()
            for i in range(cfg.replicas):
                self.replicas.append(self._replica(i))
            t0 = time.time()
            self.startup = ray.get([r.start.remote() for r in self.replicas])
        except BaseException:
            self.stop()                 # no actor or reserved group outlives a failed start
            raise
        log.info("%d replica(s) of %s healthy in %.0f s", len(self.replicas), cfg.name, time.time() - t0)
        self.endpoints = [Endpoint(s["base_url"], served, "", s["replica"], api_key=self.api_key)
                          for s in self.startup]
        return self.endpoints

    def _place(self) -> None:
        """Reserve a placement group per replica; raise :class:`PlacementError` (groups removed)
        when they are not all ready within ``placement_timeout_s``."""
        from ray.util.placement_group import placement_group

        cfg = self.cfg
        bundles = replica_bundles(cfg)
        if not bundles[0]:              # asks for nothing (num_cpus 0, no GPU): scheduled anywhere
            return
        self.placement_groups = [placement_group(bundles, strategy=PLACEMENT_STRATEGY) for _ in range(cfg.replicas)]
        t0 = time.time()
        refs = [pg.ready() for pg in self.placement_groups]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=cfg.placement_timeout_s)
        if len(ready) < len(refs):
            total = {k: float(v) for k, v in ray.cluster_resources().items()}
            available = {k: float(v) for k, v in ray.available_resources().items()}
            nodes = [{k: float(v) for k, v in n.get("Resources", {}).items()} for n in ray.nodes() if n.get("Alive")]
            self._remove_groups()
            raise PlacementError(placement_message(cfg, bundles, len(ready), total, available, nodes))
        log.info("placement groups of %d replica(s) of %s ready in %.1f s: %s each", cfg.replicas, cfg.name,
                 time.time() - t0, bundles)

    def _replica(self, i: int) -> Any:
        from dataclasses import asdict

        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        cfg = self.cfg
        first = replica_bundles(cfg)[0]
        options: dict[str, Any] = {}
        pg = self.placement_groups[i] if self.placement_groups else None
        if pg is not None:
            # bundle 0 is the actor's; a sharded replica's own Ray work stays in its group
            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=0, placement_group_capture_child_tasks=gpu_sharded(cfg))
        custom = {k: v for k, v in first.items() if k not in ("CPU", "GPU")}
        # a replica actor whose node is lost is re-created by Ray in its group, whose bundles Ray
        # reserves again on a live node (``check`` then starts its server)
        # mypy ignores class decorators: ModelReplica is the ray.remote actor class
        return ModelReplica.options(  # type: ignore[attr-defined]
            num_cpus=first.get("CPU", 0.0), num_gpus=first.get("GPU", 0.0), resources=custom or None, name=None,
            max_restarts=-1, max_task_retries=0, **options).remote(asdict(cfg), i, self.log_dir, pg, self.api_key,
                                                                   self._bind())

    def _bind(self) -> str:
        """Where replicas listen (``model.bind``): ``auto`` is loopback on a one-node cluster
        (every client is on this node) and the node's IP when the cluster has several nodes."""
        if not self.bind:
            b = self.cfg.bind
            if b == "auto":
                b = "node" if sum(1 for n in ray.nodes() if n.get("Alive")) > 1 else "loopback"
            self.bind = b
            log.info("replicas of %s listen on %s", self.cfg.name,
                     "loopback only" if b == "loopback" else "their node's IP")
        return self.bind

    def _remove_groups(self) -> None:
        from ray.util.placement_group import remove_placement_group

        for pg in self.placement_groups:
            try:
                remove_placement_group(pg)
            except Exception as e:  # noqa: BLE001 - best effort (already removed, Ray gone)
                log.warning("removing a placement group of %s: %s", self.cfg.name, e)
        self.placement_groups = []

    def check(self, timeout_s: float = 10.0) -> bool:
        """Health-check every replica; restart the server of one that died or stops answering
        ``/health`` for ``model.unhealthy_checks`` checks in a row, and re-create a replica actor
        that is gone (its node lost: Ray restarts it elsewhere, with a new address). Restarts run
        in the background (``pending_restarts``). Returns True when the endpoints changed (the
        driver then pushes them to the workers)."""
        if self.cfg.kind != "vllm" or not self.replicas:
            return False
        changed = False
        for i, r in enumerate(self.replicas):
            if i in self._restarting:
                ready, _ = ray.wait([self._restarting[i]], timeout=0)
                if not ready:
                    continue
                try:
                    info = ray.get(self._restarting.pop(i))
                except Exception as e:  # noqa: BLE001 - tried again at the next check
                    log.warning("replica %d of %s failed to restart: %s", i, self.cfg.name, e)
                    continue
                self.restarts += 1
                changed |= self._set_endpoint(i, info["base_url"])
                continue
            try:
                h = ray.get(r.health.remote(), timeout=timeout_s)
            except Exception as e:  # noqa: BLE001 - the actor is gone or hung
                log.warning("replica %d of %s does not answer (%s): restarting it", i, self.cfg.name, e)
                h = {"alive": False, "healthy": False, "base_url": ""}
            if h["healthy"]:
                self._misses[i] = 0
                changed |= self._set_endpoint(i, h["base_url"])
                continue
            self._misses[i] = self._misses.get(i, 0) + 1
            if not h["alive"] or self._misses[i] >= self.cfg.unhealthy_checks:
                self._misses[i] = 0
                self._restarting[i] = r.restart.remote()
        return changed

    @property
    def pending_restarts(self) -> int:
        return len(self._restarting)

    def _set_endpoint(self, i: int, base_url: str) -> bool:
        old = self.endpoints[i]
        if not base_url or old.base_url == base_url:
            return False
        self.endpoints[i] = Endpoint(base_url, old.model, old.api_key_env, old.replica, api_key=old.api_key)
        return True

    def replica_seconds(self) -> float:
        if not self.replicas:
            return 0.0
        return float(sum(ray.get([r.uptime_s.remote() for r in self.replicas])))

    def stop(self) -> None:
        for r in self.replicas:
            try:
                ray.get(r.stop.remote(), timeout=60)
            except Exception:  # best effort; the actor is killed next
                pass
            ray.kill(r)
        self.replicas = []
        self._remove_groups()
