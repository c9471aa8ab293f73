"""A model replica as a Ray actor (:class:`ModelReplica`): it starts a vLLM server on the
resources Ray gave it (its placement group's bundle 0; :class:`GpuShard` actors hold the other GPU
bundles of a tensor-parallel replica and say which GPUs they are), answers health checks with a
liveness verdict (:mod:`engine.hosting.liveness`), restarts its server and copies its log.
:class:`~engine.hosting.replica.ModelPool` places, starts and supervises the replicas of a model."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from typing import Any

import ray

from engine.config import ModelConfig, replica_count
from engine.hosting.liveness import (
    Liveness,
    canary,
    gpus_busy,
    health_ok,
    scrape,
    tree_cpu_s,
)
from engine.hosting.machine import describe
from engine.hosting.vllm_server import VLLMServer, resolved_engine

log = logging.getLogger(__name__)


def batched_tokens(engine_args: dict[str, Any] | None) -> int:
    """The most prompt tokens one engine step may take (vLLM's ``max_num_batched_tokens``; without
    it, with chunked prefill off, a whole ``max_model_len`` prompt; else vLLM's 2048)."""
    a = engine_args or {}
    for k in ("max_num_batched_tokens", "max_model_len"):
        if a.get(k):
            try:
                return int(a[k])
            except (TypeError, ValueError):
                continue
    return 2048


def replica_log_name(model: str, index: int) -> str:
    """The server log of one replica: several models may be hosted for one run dir (a judge next to
    the model under test), so the model name is part of it."""
    return f"vllm-{re.sub(r'[^A-Za-z0-9._-]+', '_', model)}-replica{index}.log"


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


def _replica_metrics() -> tuple[Any, Any, Any] | None:
    """Requests in the engine, tokens/s and restarts of every replica, as Ray metrics (exported
    with Ray's Prometheus metrics as ``ray_dateline_replica_*``); None where Ray's metrics are off."""
    try:
        from ray.util.metrics import Counter, Gauge

        keys = ("model", "replica")
        return (Gauge("dateline_replica_requests_in_flight", "requests running or waiting in the engine", keys),
                Gauge("dateline_replica_tokens_per_s", "prompt + generation tokens per second over the last check",
                      keys),
                Counter("dateline_replica_restarts", "server restarts (dead, wedged or not answering)", keys))
    except Exception as e:  # noqa: BLE001 - metrics are never worth a replica
        log.warning("replica metrics unavailable: %s", e)
        return None


@ray.remote(num_cpus=0)
class GpuShard:
    """Holds one GPU bundle of a tensor-parallel replica's placement group while its server runs,
    and says which GPU that is (the server's shards use it)."""

    def gpu_ids(self) -> list[str]:
        return [str(g) for g in ray.get_gpu_ids()]


@ray.remote
class ModelReplica:
    def __init__(self, cfg: dict[str, Any], index: int, log_dir: str, placement_group: Any = None,
                 api_key: str = "", bind: str = "loopback", log_uri: str = "") -> None:
        self.cfg = ModelConfig(**cfg)
        self.index = index
        self.log_uri = log_uri
        self.placement_group = placement_group
        self.shards: list[Any] = []
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        # loopback: only this node's clients (a one-node cluster); node: this node's IP, where the
        # other nodes' workers reach it; never every interface
        self.host = "127.0.0.1" if bind == "loopback" else ray.util.get_node_ip_address()
        # on this replica's node: a CPU model's dtype, threads and KV cache from the machine
        # (engine/hosting/machine.py), its slice of the cores shared with the CPU replicas placed here
        on_node, slot = self._node_share()
        engine_args, env, self.engine = resolved_engine(self.cfg, replicas_on_node=on_node, slot=slot)
        if self.engine:
            log.info("replica %d of %s engine settings: %s", index, self.cfg.name, "; ".join(describe(self.engine)))
        self.server = VLLMServer(self.cfg.path, self.cfg.served_name or self.cfg.name,
                                 tensor_parallel_size=self.cfg.tensor_parallel_size,
                                 engine_args=engine_args, env=env,
                                 log_path=Path(log_dir) / replica_log_name(self.cfg.name, index),
                                 module=self.cfg.server_module, host=self.host, api_key=api_key,
                                 niceness=self.cfg.niceness)
        self.started_at = time.time()
        self.healthy_after_s = -1.0
        self.liveness = Liveness(self.cfg.stall_timeout_s, batched_tokens(self.server.engine_args))
        self.metrics = _replica_metrics()
        self._checks = 0
        self._canary: tuple[Any, int, list[bool]] | None = None     # (thread, the check that sent it, its answer)

    def _node_share(self) -> tuple[int, int]:
        """(CPU replicas placed on this node, this one's slot among them): the placement groups of
        CPU-only replicas (any model's; only model pools make placement groups) whose first bundle
        is on this node, in id order, when this replica starts. ``(1, 0)`` for a GPU model or a
        replica without a group."""
        if self.placement_group is None or self.cfg.num_gpus or self.cfg.kind != "vllm":
            return 1, 0
        try:
            from ray.util.placement_group import placement_group_table

            node, mine = ray.get_runtime_context().get_node_id(), self.placement_group.id.hex()
            here = sorted(pid for pid, t in placement_group_table().items()
                          if t.get("state") == "CREATED" and t.get("bundles_to_node_id", {}).get(0) == node
                          and t.get("bundles", {}).get(0, {}).get("CPU") and not t["bundles"][0].get("GPU"))
            return (len(here), here.index(mine)) if mine in here else (1, 0)
        except Exception as e:  # noqa: BLE001 - the whole node is a safe default
            log.warning("replica %d of %s: could not count the CPU replicas on its node (%s): binds every core",
                        self.index, self.cfg.name, e)
            return 1, 0

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
                "gpus": self.server.env.get("CUDA_VISIBLE_DEVICES", "") if self.cfg.num_gpus else "",
                "engine": self.engine}          # what a CPU model's settings resolved to here, and why

    def health(self, timeout_s: float = 5.0) -> dict[str, Any]:
        """Whether the server process lives, answers ``/health`` within ``timeout_s`` and makes
        progress, and where it is: the pool checks every replica each ``model.health_check_s``
        (:mod:`engine.hosting.liveness` has the verdicts). Progress is read from ``/metrics``
        (tokens advancing while requests are in the engine), the canary, the CPU time of the
        server's processes and, on GPUs, their utilization. ``/metrics`` gets the whole check
        period (``4 x timeout_s``): a saturated server answers late, and its counters are what
        clear it."""
        from concurrent.futures import ThreadPoolExecutor

        proc = self.server.proc
        alive = proc is not None and proc.poll() is None
        ok, sample, overdue, done, cpu, gpu = False, None, False, False, None, None
        if alive:
            assert proc is not None
            base = self.server.local_url()
            with ThreadPoolExecutor(2) as ex:
                h = ex.submit(health_ok, base, timeout_s)
                m = ex.submit(scrape, base, 4 * timeout_s)
                ok, sample = h.result(), m.result()
            overdue, done = self._canary_state(base)
            cpu = tree_cpu_s(proc.pid)
            if self.cfg.num_gpus:
                gpu = gpus_busy(self.server.env.get("CUDA_VISIBLE_DEVICES", ""))
        lv = self.liveness
        verdict = lv.observe(alive, ok, sample, overdue, done, cpu, gpu)
        self._report(sample)
        now = sample.t if sample is not None else time.monotonic()
        return {"alive": alive, "healthy": ok, "verdict": verdict, "replica": self.index,
                "running": sample.running if sample else None, "waiting": sample.waiting if sample else None,
                "tokens_per_s": lv.tokens_per_s, "advanced": bool(lv.seen.get("tokens")),
                "progress": {k: v for k, v in lv.seen.items() if v}, "canary_overdue": overdue,
                "window_s": lv.window_s, "stalled_for_s": lv.stalled_for(now), "prompt_tokens_per_s": lv.prompt_rate,
                "longest_step_s": lv.longest_step_s,
                "base_url": f"http://{self.host}:{self.server.port}/v1",
                "node_id": ray.get_runtime_context().get_node_id()}

    def _canary_state(self, base: str) -> tuple[bool, bool]:
        """Whether the canary (one-token completion) sent at an earlier check is still unanswered,
        and whether one was answered since the last check; a new one goes out when the last one
        finished."""
        import threading

        self._checks += 1
        if self._canary is not None and self._canary[0].is_alive():
            return self._canary[1] < self._checks, False
        done = self._canary is not None and bool(self._canary[2]) and self._canary[2][0]
        key = self.server.env.get("VLLM_API_KEY", "")
        answer: list[bool] = []
        served = self.cfg.served_name or self.cfg.name
        timeout = self.cfg.request_timeout_s

        def send() -> None:
            answer.append(canary(base, served, key, timeout))

        # a daemon thread: a canary stuck in a wedged server never holds the actor's exit
        t = threading.Thread(target=send, daemon=True, name="canary")
        t.start()
        self._canary = (t, self._checks, answer)
        return False, done

    def _report(self, sample: Any) -> None:
        """The replica's Prometheus metrics, through Ray's metrics agent (``ray.util.metrics``:
        scraped with every Ray node's metrics, tagged with the model and replica)."""
        if self.metrics is None:
            return
        tags = {"model": self.cfg.name, "replica": str(self.index)}
        inflight, tps, _ = self.metrics
        inflight.set(float(sample.running + sample.waiting) if sample else 0.0, tags=tags)
        tps.set(self.liveness.tokens_per_s, tags=tags)

    def pids(self) -> dict[str, int]:
        """This actor's process and its server's (the reaper's) process group: for tests and
        for an operator hunting a stuck replica."""
        import os

        return {"actor": os.getpid(), "server_group": self.server.proc.pid if self.server.proc else 0}

    def copy_log(self) -> str:
        """Copy the server log (every start of this replica, appended) to ``log_uri`` (the run
        dir's ``logs/`` when it is remote, ``s3://``...): the node's disk may be gone when someone
        reads why a replica failed. Returns where it went ("" for a local run dir)."""
        log_path = self.server.log_path
        if not (self.log_uri and log_path and log_path.exists()):
            return ""
        from engine.storage import open_root

        try:
            fs, base = open_root(self.log_uri)
            dest = f"{base}/{log_path.name}"
            with fs.open_output_stream(dest) as out:
                out.write(log_path.read_bytes())
            return dest
        except Exception as e:  # noqa: BLE001 - a log copy never stops a replica
            log.warning("copying %s to %s: %s", log_path, self.log_uri.partition("?")[0], e)
            return ""

    def restart(self, window_factor: float | None = None) -> dict[str, Any]:
        """Stop whatever is left of the server (its whole process group, through the reaper) and
        start it again on the same port (another one if that is taken meanwhile).
        ``window_factor``: the stall window's multiplier from now on (the pool doubles it after
        each restart for a stall)."""
        self.server.stop()
        self.copy_log()
        log.warning("restarting vLLM replica %d of %s", self.index, self.cfg.name)
        if self.metrics is not None:
            self.metrics[2].inc(1.0, tags={"model": self.cfg.name, "replica": str(self.index)})
        self.liveness.reset(window_factor)
        self._canary = None             # answered (with an error) once the old server is gone
        return self.start()

    def uptime_s(self) -> float:
        return time.time() - self.started_at

    def stop(self) -> None:
        self.server.stop()
        self.copy_log()
        for shard in self.shards:
            ray.kill(shard)
        self.shards = []

    def __del__(self) -> None:
        try:
            self.server.stop()
        except Exception:
            pass


PLACEMENT_STRATEGY = "STRICT_PACK"


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
        if replica_count(cfg) * v > total.get(k, 0.0) + 1e-9:
            short.append(f"{k} (the replicas need {replica_count(cfg) * v:g}, the cluster has {total.get(k, 0.0):g})")
        elif v > biggest + 1e-9:
            short.append(f"{k} (a replica needs {v:g} on one node, the largest node has {biggest:g})")
    return (f"model {cfg.name}: {replica_count(cfg) - placed} of {replica_count(cfg)} replica(s) could not be placed within "
            f"{cfg.placement_timeout_s:g} s (model.placement_timeout_s). Each replica asks for {shown(ask)} on one "
            f"node (bundles {bundles}, {PLACEMENT_STRATEGY}). The cluster has {shown(total)} in total, "
            f"{shown(available)} available"
            + (f"; short: {', '.join(short)}" if short else "; the resources exist but are taken or split over nodes")
            + ". Lower model.num_gpus / num_cpus / resources / replicas, or add nodes with those resources.")


def _user_resource(name: str) -> bool:
    """A resource a config can ask for (not Ray's per-node, per-group or memory bookkeeping)."""
    return not (name.startswith("node:") or "_group_" in name or name.startswith("accelerator_type:")
                or name in ("memory", "object_store_memory"))
