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
import secrets
import time
from collections.abc import Callable
from dataclasses import replace as dc_replace
from pathlib import Path
from typing import Any

import ray
from ray.util.placement_group import placement_group, remove_placement_group

from engine.config import ModelConfig, replica_count
from engine.errors import PlacementError
from engine.hosting.liveness import DOWN, OK, verdict_line, verdict_record
from engine.hosting.pool_health import GIVE_UP, RESTART, SERVE, ReplicaHealth
from engine.hosting.replica_actor import (
    PLACEMENT_STRATEGY,
    ModelReplica,
    batched_tokens,
    gpu_sharded,
    placement_message,
    replica_bundles,
)
from engine.llm import Endpoint

log = logging.getLogger(__name__)


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
        self.health = ReplicaHealth(cfg, batched_tokens(cfg.engine_args))   # the restart policy's counters
        self.last_health: dict[int, dict[str, Any]] = {}
        self.restarts = 0
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
                    self.health.start_failed(i)
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

    def grow(self, n: int) -> int:
        """Add ``n`` replicas mid-run (GPUs another pool gave back, ``ray_jobs/cluster/allocation.py``):
        their placement groups are reserved now (those placed within ``model.placement_timeout_s``;
        the others are removed) and their servers start in the background: they join rotation at
        a later :meth:`check`, as a replica still starting does. Returns how many were added."""
        cfg = self.cfg
        if cfg.kind != "vllm" or n <= 0 or not self.replicas:
            return 0
        bundles = replica_bundles(cfg)
        groups: list[Any] = []
        if bundles[0]:
            pgs = [placement_group(bundles, strategy=PLACEMENT_STRATEGY) for _ in range(n)]
            refs = [pg.ready() for pg in pgs]
            ready, _ = ray.wait(refs, num_returns=n, timeout=cfg.placement_timeout_s)
            placed = {id(r) for r in ready}
            groups = [pg for pg, r in zip(pgs, refs) if id(r) in placed]
            for pg, r in zip(pgs, refs):
                if id(r) not in placed:
                    remove_placement_group(pg)
            if not groups:
                return 0
        added = len(groups) if bundles[0] else n
        served = cfg.served_name or cfg.name
        for k in range(added):
            i = len(self.replicas)
            if groups:
                self.placement_groups.append(groups[k])
            self.replicas.append(self._replica(i))
            self.endpoints.append(Endpoint("", served, "", i, api_key=self.api_key, in_rotation=False))
            self.startup.append({})
            self._restarting[i] = self.replicas[i].start.remote()
            self._event(i, "added", reason="GPUs given back by a drained pool")
        log.info("model %s: %d replica(s) added mid-run (%d in all)", cfg.name, added, len(self.replicas))
        return added

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
        for pg in self.placement_groups:
            try:
                remove_placement_group(pg)
            except Exception as e:  # noqa: BLE001 - best effort (already removed, Ray gone)
                log.warning("removing a placement group of %s: %s", self.cfg.name, e)
        self.placement_groups = []

    def check(self, timeout_s: float | None = None,
              push: Callable[[list[Endpoint]], None] | None = None) -> bool:
        """Check every replica (:meth:`ModelReplica.health`, all at once) and act on its verdict
        (:mod:`engine.hosting.liveness`) as :class:`~engine.hosting.pool_health.ReplicaHealth`
        decides: in rotation, out of it, restarted or given up (:attr:`failing` once no replica is
        left). A replica still starting, or restarting, joins rotation when it is healthy.

        Restarts run in the background (``pending_restarts``). With ``push`` (the driver's: it
        hands the endpoints to the workers and waits), changed endpoints are pushed *before* any
        restart is sent, so a call cut off by the restart finds its replica out of rotation and
        is the pool's failure, not the episode's (engine/llm/client.py). Returns True when the
        endpoints changed and were not pushed. ``timeout_s``: the ``/health`` deadline (default:
        ``model.health_check_s``, at most 5 s: a busy vLLM on few cores answers late, and a
        deadline of a fraction of a second restarted healthy servers in
        the real killed-replica test, now in tests/e2e/test_real_model.py)."""
        if self.cfg.kind != "vllm" or not self.replicas:
            return False
        t = timeout_s if timeout_s is not None else min(5.0, self.cfg.health_check_s)
        changed = False
        asked: dict[int, Any] = {}
        restart: list[tuple[int, float | None]] = []     # decided here, sent after the push
        for i, r in enumerate(self.replicas):
            if i in self._restarting:
                changed |= self._started(i)
                continue
            if i in self.health.given_up:
                continue
            if exhausted := self.health.starts_exhausted(i):
                self._give_up(i, exhausted)
                changed |= self._set_endpoint(i, "", False, "failed to start")
                continue
            asked[i] = r.health.remote(t)
        for i, ref in asked.items():
            try:
                h = ray.get(ref, timeout=max(10.0, 5 * t))
            except Exception as e:  # noqa: BLE001 - the actor is gone or hung
                log.warning("replica %d of %s does not answer (%s)", i, self.cfg.name, e)
                h = {"alive": False, "healthy": False, "verdict": DOWN, "base_url": ""}
            changed |= self._act_on(i, h, restart)
        if changed and push is not None:
            push(list(self.endpoints))
            changed = False
        for i, factor in restart:
            log.warning("restarting replica %d of %s (%s)", i, self.cfg.name, self.endpoints[i].state)
            self._restarting[i] = self.replicas[i].restart.remote(factor)
        return changed

    def _started(self, i: int) -> bool:
        """Replica ``i`` was (re)starting: into rotation once its start finished; a failed start is
        counted and tried again at the next check. True when its endpoint changed."""
        ready, _ = ray.wait([self._restarting[i]], timeout=0)
        if not ready:
            return False
        try:
            info = ray.get(self._restarting.pop(i))
        except Exception as e:  # noqa: BLE001 - tried again at the next check
            n = self.health.start_failed(i)
            log.warning("replica %d of %s failed to (re)start (%d of %d): %s", i, self.cfg.name,
                        n, self.cfg.max_start_failures, e)
            self._event(i, "start_failed", error=f"{type(e).__name__}: {e}"[:500], attempt=n)
            return False
        self.health.started(i)
        if self.startup and not self.startup[i]:
            self.startup[i] = info
            self._event(i, "started", healthy_after_s=round(float(info.get("healthy_after_s", 0.0)), 1))
        else:
            self.restarts += 1
            self._event(i, "restarted", healthy_after_s=round(float(info.get("healthy_after_s", 0.0)), 1))
        return self._set_endpoint(i, info["base_url"], True)

    def _act_on(self, i: int, h: dict[str, Any], restart: list[tuple[int, float | None]]) -> bool:
        """Carry out :meth:`ReplicaHealth.act_on` for replica ``i``'s verdict ``h`` (a restart is appended
        to ``restart``: sent after the endpoints are pushed). True when its endpoint changed."""
        prev = self.last_health.get(i, {}).get("verdict")
        self.last_health[i] = h
        if h["verdict"] != prev and (h["verdict"] != OK or prev not in (None, OK)):
            self._event(i, "verdict", **verdict_record(h))
        action = self.health.act_on(i, h)
        if action.kind == SERVE:
            return self._set_endpoint(i, h["base_url"], True)
        if self.endpoints[i].in_rotation:
            log.warning("replica %d of %s is %s: out of rotation", i, self.cfg.name, verdict_line(h))
        if action.kind == GIVE_UP:
            self._give_up(i, action.reason)
        changed = self._set_endpoint(i, "", False, action.state)
        if action.kind == RESTART:
            self._event(i, "restart", cause=action.cause, window_factor=action.factor, **verdict_record(h))
            restart.append((i, action.factor))
        return changed

    def _give_up(self, i: int, why: str) -> None:
        """Replica ``i`` is out for the rest of the run and its engine stops; none left: :attr:`failing`."""
        was_failing = self.failing
        if not self.health.give_up(i, why, len(self.replicas)):
            return
        log.error("model %s: %s; replica %d left out of rotation for this run", self.cfg.name, why, i)
        self._event(i, "given_up", reason=why)
        try:
            self.replicas[i].stop.remote()       # its engine holds a node's cores or GPUs for nothing
        except Exception as e:  # noqa: BLE001 - the actor may be gone already
            log.warning("stopping given-up replica %d of %s: %s", i, self.cfg.name, e)
        if self.failing and not was_failing:
            self._event(i, "model_failing", reason=self.failing)

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

    @property
    def failing(self) -> str:                   # why the model is failing once no replica can serve
        return self.health.failing

    @property
    def restart_causes(self) -> dict[str, int]:  # "wedged" / "down" / "dead" -> restarts for it
        return self.health.restart_causes

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
