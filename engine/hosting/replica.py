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
from collections.abc import Callable
from dataclasses import replace as dc_replace
from pathlib import Path
from typing import Any

import ray

from engine.config import ModelConfig, replica_count
from engine.errors import PlacementError
from engine.hosting.liveness import (
    DOWN,
    OK,
    SATURATED,
    WEDGED,
    Liveness,
    canary,
    gpus_busy,
    health_ok,
    scrape,
    tree_cpu_s,
)
from engine.hosting.machine import describe
from engine.hosting.vllm_server import VLLMServer, resolved_engine
from engine.llm import Endpoint

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
                                 module=self.cfg.server_module, host=self.host, api_key=api_key)
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


def _verdict_line(h: dict[str, Any]) -> str:
    """A verdict with the numbers behind it, for logs and diagnoses."""
    if h.get("verdict") == WEDGED:
        return (f"wedged ({h.get('running') or 0:g} running, {h.get('waiting') or 0:g} waiting"
                f"{', canary unanswered' if h.get('canary_overdue') else ''}; no token, no canary answer, no engine "
                f"CPU or GPU activity for {float(h.get('stalled_for_s') or 0):.0f} s, "
                f"window {float(h.get('window_s') or 0):.0f} s)")
    if not h.get("alive"):
        return "down (its server process or actor is gone)"
    return "down (no /health and no progress)" if h.get("verdict") == DOWN else str(h.get("verdict"))


def _verdict_record(h: dict[str, Any]) -> dict[str, Any]:
    """The metrics behind a verdict, as an event stores them."""
    keys = ("verdict", "alive", "healthy", "running", "waiting", "tokens_per_s", "prompt_tokens_per_s",
            "longest_step_s", "window_s", "stalled_for_s", "canary_overdue", "progress")
    return {k: (round(v, 2) if isinstance(v, float) else v) for k, v in h.items() if k in keys}


class ModelPool:
    """Starts the replicas of one model (or none, for an external endpoint) and hands out endpoints."""

    def __init__(self, cfg: ModelConfig, log_dir: str | Path, log_uri: str = "") -> None:
        self.cfg = cfg
        self.log_dir = str(log_dir)
        self.log_uri = log_uri          # a remote run dir's logs/: replicas copy their logs there
        self.replicas: list[Any] = []
        self.placement_groups: list[Any] = []      # one per replica, removed in stop()
        self.endpoints: list[Endpoint] = []
        self.startup: list[dict[str, Any]] = []
        self._restarting: dict[int, Any] = {}       # replica index -> ObjectRef of its restart()
        self._misses: dict[int, int] = {}           # consecutive failed health checks
        self._start_failures: dict[int, int] = {}   # consecutive failed starts
        self._given_up: set[int] = set()
        self.last_health: dict[int, dict[str, Any]] = {}
        self.restarts = 0
        self._stall_restarts: dict[int, int] = {}   # restarts for a stall in a row (no token since)
        self.restart_causes: dict[str, int] = {}    # "wedged" / "down" / "dead" -> restarts for it
        self.failing = ""                           # the diagnosis once no replica can serve
        # what happened to the replicas (starts, verdicts with the metrics behind them, restarts,
        # declared failures): the driver stores them in the run dir (drain_events)
        self.events: list[dict[str, Any]] = []
        self._placed: int | None = None             # replicas whose groups are reserved (reserve())
        # every hosted replica requires this key (vLLM's VLLM_API_KEY): made per pool, kept in
        # memory, given to clients inside their endpoints; never on a command line or on disk
        self.api_key = secrets.token_urlsafe(32) if cfg.kind == "vllm" else ""
        self.bind = ""

    def start(self) -> list[Endpoint]:
        """Place and start the replicas; return once ``model.min_replicas`` of them are healthy.
        The others join when they come up (:meth:`check` puts them into rotation and the driver
        pushes the endpoints to the workers); one that fails to start is retried by the health
        checks, up to ``model.max_start_failures`` times, and never fails the pool while
        ``min_replicas`` serve. Fewer than ``min_replicas`` up: the pool stops and raises."""
        cfg = self.cfg
        served = cfg.served_name or cfg.name
        if cfg.kind == "openai_compatible":     # one endpoint, or a fleet routed like replicas
            urls = list(cfg.base_urls) or [cfg.base_url]
            self.endpoints = [Endpoint(u.rstrip("/"), served, cfg.api_key_env, i) for i, u in enumerate(urls)]
            return self.endpoints
        need = min(cfg.min_replicas or replica_count(cfg), replica_count(cfg))
        try:
            n = self.reserve()
            for i in range(n):
                self.replicas.append(self._replica(i))
            t0 = time.time()
            self.endpoints = [Endpoint("", served, "", i, api_key=self.api_key, in_rotation=False) for i in range(n)]
            self.startup = [{} for _ in range(n)]
            pending = {r.start.remote(): i for i, r in enumerate(self.replicas)}
            up, errors = 0, []
            while pending and up < need:
                ready, _ = ray.wait(list(pending), num_returns=1)
                i = pending.pop(ready[0])
                try:
                    info = ray.get(ready[0])
                except Exception as e:  # noqa: BLE001 - its start failed; the others may serve
                    errors.append((i, e))
                    self._start_failures[i] = 1
                    self._event(i, "start_failed", error=f"{type(e).__name__}: {e}"[:500])
                    log.error("replica %d of %s failed to start: %s", i, cfg.name, e)
                    if n - len(errors) < need:
                        raise RuntimeError(
                            f"model {cfg.name}: {len(errors)} of {n} replica(s) failed to start, fewer than "
                            f"model.min_replicas={need} can serve; first failure (replica {errors[0][0]}): "
                            f"{errors[0][1]}") from errors[0][1]
                    continue
                up += 1
                self.startup[i] = info
                self._event(i, "started", healthy_after_s=round(float(info.get("healthy_after_s", 0.0)), 1))
                self.endpoints[i] = dc_replace(self.endpoints[i], base_url=info["base_url"], in_rotation=True)
            for ref, i in pending.items():          # still loading: they join at a later check
                self._restarting[i] = ref
        except BaseException:
            self.stop()                 # no actor or reserved group outlives a failed start
            raise
        log.info("%d of %d replica(s) of %s healthy in %.0f s%s", up, n, cfg.name, time.time() - t0,
                 f"; {len(pending)} still starting" if pending else "")
        return self.endpoints

    def reserve(self) -> int:
        """Reserve the replicas' placement groups (once; :meth:`start` does it when nobody did):
        returns how many replicas were placed. A wave reserves its models' groups one model after
        another, largest replica first, before any starts: placed at the same time, small groups
        could take one GPU on every node and leave no node for a tensor-parallel replica."""
        if self._placed is None:
            need = min(self.cfg.min_replicas or replica_count(self.cfg), replica_count(self.cfg))
            try:
                self._placed = self._place(need)
            except BaseException:
                self.stop()
                raise
        return self._placed

    def _place(self, need: int) -> int:
        """Reserve a placement group per replica; returns how many replicas to start. Groups not
        ready within ``placement_timeout_s`` are removed; fewer than ``need`` ready raises
        :class:`PlacementError` (every group removed)."""
        from ray.util.placement_group import placement_group

        cfg = self.cfg
        bundles = replica_bundles(cfg)
        if not bundles[0]:              # asks for nothing (num_cpus 0, no GPU): scheduled anywhere
            return replica_count(cfg)
        self.placement_groups = [placement_group(bundles, strategy=PLACEMENT_STRATEGY)
                                 for _ in range(replica_count(cfg))]
        t0 = time.time()
        refs = [pg.ready() for pg in self.placement_groups]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=cfg.placement_timeout_s)
        if len(ready) < len(refs):
            total = {k: float(v) for k, v in ray.cluster_resources().items()}
            available = {k: float(v) for k, v in ray.available_resources().items()}
            nodes = [{k: float(v) for k, v in n.get("Resources", {}).items()} for n in ray.nodes() if n.get("Alive")]
            msg = placement_message(cfg, bundles, len(ready), total, available, nodes)
            if len(ready) < need:
                self._remove_groups()
                raise PlacementError(msg)
            placed = {id(r) for r in ready}
            keep = [pg for pg, r in zip(self.placement_groups, refs) if id(r) in placed]
            self.placement_groups = [pg for pg, r in zip(self.placement_groups, refs) if id(r) not in placed]
            self._remove_groups()
            self.placement_groups = keep
            log.warning("%s Going on with the %d placed (model.min_replicas=%d).", msg, len(keep), need)
        log.info("placement groups of %d replica(s) of %s ready in %.1f s: %s each", len(self.placement_groups),
                 cfg.name, time.time() - t0, bundles)
        return len(self.placement_groups)

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
                                                                   self._bind(), self.log_uri)

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

    def check(self, timeout_s: float | None = None,
              push: Callable[[list[Endpoint]], None] | None = None) -> bool:
        """Check every replica (:meth:`ModelReplica.health`, all at once) and act on the verdict
        (:mod:`engine.hosting.liveness`):

        * ok, or saturated (``/health`` late but tokens advancing): in rotation; never restarted;
        * wedged (work in the engine and no sign of progress for the replica's stall window) or
          down (no answer, no progress): out of rotation at once, so no new episode goes there
          and pinned ones move; restarted after ``model.unhealthy_checks`` such checks in a row,
          at once when its process is dead or its actor gone (Ray re-creates a lost actor
          elsewhere, with a new address). After a restart for a stall the replica's window
          doubles; after ``model.max_stall_restarts`` of them in a row (no token in between) the
          replica is given up with a diagnosis (:attr:`failing` once no replica is left);
        * a replica still starting, or restarting, joins rotation when it is healthy; one that
          failed to start ``model.max_start_failures`` times is left out.

        Restarts run in the background (``pending_restarts``). With ``push`` (the driver's: it
        hands the endpoints to the workers and waits), changed endpoints are pushed *before* any
        restart is sent, so a call cut off by the restart finds its replica out of rotation and
        is the pool's failure, not the episode's (engine/llm/client.py). Returns True when the
        endpoints changed and were not pushed. ``timeout_s``: the ``/health`` deadline (default:
        ``model.health_check_s``, at most 5 s: a busy vLLM on few cores answers late, and a
        deadline of a fraction of a second restarted healthy servers in
        tests/e2e/test_fault_real.py)."""
        if self.cfg.kind != "vllm" or not self.replicas:
            return False
        t = timeout_s if timeout_s is not None else min(5.0, self.cfg.health_check_s)
        changed = False
        asked: dict[int, Any] = {}
        restart: list[tuple[int, float | None]] = []     # decided here, sent after the push
        for i, r in enumerate(self.replicas):
            if i in self._restarting:
                ready, _ = ray.wait([self._restarting[i]], timeout=0)
                if not ready:
                    continue
                try:
                    info = ray.get(self._restarting.pop(i))
                except Exception as e:  # noqa: BLE001 - tried again at the next check
                    self._start_failures[i] = self._start_failures.get(i, 0) + 1
                    log.warning("replica %d of %s failed to (re)start (%d of %d): %s", i, self.cfg.name,
                                self._start_failures[i], self.cfg.max_start_failures, e)
                    self._event(i, "start_failed", error=f"{type(e).__name__}: {e}"[:500],
                                attempt=self._start_failures[i])
                    continue
                self._start_failures[i] = 0
                if self.startup and not self.startup[i]:
                    self.startup[i] = info
                    self._event(i, "started", healthy_after_s=round(float(info.get("healthy_after_s", 0.0)), 1))
                else:
                    self.restarts += 1
                    self._event(i, "restarted", healthy_after_s=round(float(info.get("healthy_after_s", 0.0)), 1))
                changed |= self._set_endpoint(i, info["base_url"], True)
                continue
            if i in self._given_up:
                continue
            if self._start_failures.get(i, 0) >= self.cfg.max_start_failures:
                self._give_up(i, f"replica {i} failed to start {self._start_failures[i]} times "
                                 f"(model.max_start_failures={self.cfg.max_start_failures})")
                changed |= self._set_endpoint(i, "", False, "failed to start")
                continue
            asked[i] = r.health.remote(t)
        for i, ref in asked.items():
            try:
                h = ray.get(ref, timeout=max(10.0, 5 * t))
            except Exception as e:  # noqa: BLE001 - the actor is gone or hung
                log.warning("replica %d of %s does not answer (%s)", i, self.cfg.name, e)
                h = {"alive": False, "healthy": False, "verdict": DOWN, "base_url": ""}
            prev = self.last_health.get(i, {}).get("verdict")
            self.last_health[i] = h
            if h["verdict"] != prev and (h["verdict"] != OK or prev not in (None, OK)):
                self._event(i, "verdict", **_verdict_record(h))
            if h.get("advanced"):
                self._stall_restarts[i] = 0          # it served a token: the stall restarts are not in a row
            if h["verdict"] in (OK, SATURATED):
                self._misses[i] = 0
                changed |= self._set_endpoint(i, h["base_url"], True)
                continue
            self._misses[i] = self._misses.get(i, 0) + 1
            wedged = h["verdict"] == WEDGED
            if self.endpoints[i].in_rotation:
                log.warning("replica %d of %s is %s: out of rotation", i, self.cfg.name, _verdict_line(h))
            if not h["alive"] or self._misses[i] >= self.cfg.unhealthy_checks:
                self._misses[i] = 0
                cause = "wedged" if wedged else ("dead" if not h["alive"] else "down")
                factor: float | None = None
                if wedged:
                    n = self._stall_restarts.get(i, 0)
                    if n >= self.cfg.max_stall_restarts:
                        self._give_up(i, self._diagnosis(i, h, n))
                        changed |= self._set_endpoint(i, "", False, f"given up: wedged after {n} restarts")
                        continue
                    self._stall_restarts[i] = n + 1
                    factor = 2.0 ** (n + 1)
                self.restart_causes[cause] = self.restart_causes.get(cause, 0) + 1
                why = f"restarting: {cause}" + (f" (stall restart {self._stall_restarts[i]} of "
                                                  f"{self.cfg.max_stall_restarts})" if wedged else "")
                changed |= self._set_endpoint(i, "", False, why)
                self._event(i, "restart", cause=cause, window_factor=factor, **_verdict_record(h))
                restart.append((i, factor))
            else:
                changed |= self._set_endpoint(i, "", False, _verdict_line(h))
        if changed and push is not None:
            push(list(self.endpoints))
            changed = False
        for i, factor in restart:
            log.warning("restarting replica %d of %s (%s)", i, self.cfg.name, self.endpoints[i].state)
            self._restarting[i] = self.replicas[i].restart.remote(factor)
        return changed

    def _give_up(self, i: int, why: str) -> None:
        """Replica ``i`` is out for the rest of the run; with none left the model is failing."""
        if i in self._given_up:
            return
        self._given_up.add(i)
        log.error("model %s: %s; replica %d left out of rotation for this run", self.cfg.name, why, i)
        self._event(i, "given_up", reason=why)
        try:
            self.replicas[i].stop.remote()       # its engine holds a node's cores or GPUs for nothing
        except Exception as e:  # noqa: BLE001 - the actor may be gone already
            log.warning("stopping given-up replica %d of %s: %s", i, self.cfg.name, e)
        if len(self._given_up) >= len(self.replicas) and not self.failing:
            self.failing = f"model {self.cfg.name} is failing: no replica can serve. {why}"
            self._event(i, "model_failing", reason=self.failing)

    def _diagnosis(self, i: int, h: dict[str, Any], restarts: int) -> str:
        """One line: what was seen, the rates measured, and what to change."""
        m = self.cfg
        rate = float(h.get("prompt_tokens_per_s") or 0.0)
        measured = (f"measured before: prompt {rate:.1f} tok/s, longest engine step "
                    f"{float(h.get('longest_step_s') or 0.0):.0f} s" if rate or h.get("longest_step_s")
                    else "no token was ever counted by this replica")
        dtype = m.engine_args.get("dtype", "") if m.num_gpus == 0 else ""
        hints = ["raise model.stall_timeout_s", f"model.max_stall_restarts (now {m.max_stall_restarts})"]
        if m.num_gpus == 0:
            hints.insert(0, "run `dateline doctor` for this machine's engine settings and speed"
                            + (f"; model.engine_args.dtype={dtype} is set explicitly" if dtype else ""))
        if rate and rate * float(h.get("window_s") or 0.0) < batched_tokens(m.engine_args):
            hints.append("lower model.engine_args.max_num_batched_tokens / max_model_len")
        return (f"replica {i} wedged after {restarts} restart(s) in a row: {_verdict_line(h)}; {measured}. "
                f"Change: {'; '.join(hints)}")

    def _event(self, replica: int, event: str, **fields: Any) -> None:
        self.events.append({"t": time.time(), "model": self.cfg.name, "replica": replica, "event": event,
                            **{k: v for k, v in fields.items() if v is not None}})

    def drain_events(self) -> list[dict[str, Any]]:
        """The events since the last call (the driver stores them)."""
        out, self.events = self.events, []
        return out

    def rotation_note(self) -> str:
        """Why no replica is in rotation ("" while one is): for the progress line."""
        if any(e.in_rotation for e in self.endpoints):
            return ""
        why = sorted({e.state for e in self.endpoints if e.state}) or ["starting"]
        return f"{self.cfg.name}: no replica in rotation ({'; '.join(why)})"

    @property
    def pending_restarts(self) -> int:
        return len(self._restarting)

    def _set_endpoint(self, i: int, base_url: str, in_rotation: bool, state: str = "") -> bool:
        """Replica ``i``'s address (kept when ``base_url`` is empty), whether it is in rotation and
        why not (``state``); True when the address or the rotation changed."""
        old = self.endpoints[i]
        new = dc_replace(old, base_url=base_url or old.base_url, in_rotation=in_rotation,
                         state="" if in_rotation else state)
        if new.state != old.state:
            self.endpoints[i] = new
            return old.in_rotation != in_rotation or new.base_url != old.base_url
        if new == old:
            return False
        self.endpoints[i] = new
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
        self._placed = None
