"""Model replicas as Ray actors: each starts a vLLM server on the resources Ray gave it."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from typing import Any

import ray

from engine.config import ModelConfig
from engine.hosting.vllm_server import VLLMServer
from engine.llm import Endpoint

log = logging.getLogger(__name__)


def replica_log_name(model: str, index: int) -> str:
    """The server log of one replica: several models may be hosted for one run dir (a judge next to
    the model under test), so the model name is part of it."""
    return f"vllm-{re.sub(r'[^A-Za-z0-9._-]+', '_', model)}-replica{index}.log"


@ray.remote
class ModelReplica:
    def __init__(self, cfg: dict[str, Any], index: int, log_dir: str) -> None:
        self.cfg = ModelConfig(**cfg)
        self.index = index
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        self.server = VLLMServer(self.cfg.path, self.cfg.served_name or self.cfg.name,
                                 tensor_parallel_size=self.cfg.tensor_parallel_size,
                                 engine_args=self.cfg.engine_args, env=self.cfg.env,
                                 log_path=Path(log_dir) / replica_log_name(self.cfg.name, index))
        self.started_at = time.time()
        self.healthy_after_s = -1.0

    def start(self) -> dict[str, Any]:
        self.server.start()
        self.healthy_after_s = self.server.wait_healthy(self.cfg.startup_timeout_s)
        ip = ray.util.get_node_ip_address()
        return {"base_url": f"http://{ip}:{self.server.port}/v1", "healthy_after_s": self.healthy_after_s,
                "replica": self.index}

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
                "base_url": f"http://{ray.util.get_node_ip_address()}:{self.server.port}/v1"}

    def restart(self) -> dict[str, Any]:
        """Stop whatever is left of the server and start it again on the same port."""
        self.server.stop()
        log.warning("restarting vLLM replica %d of %s", self.index, self.cfg.name)
        return self.start()

    def uptime_s(self) -> float:
        return time.time() - self.started_at

    def stop(self) -> None:
        self.server.stop()

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
        self.endpoints: list[Endpoint] = []
        self.startup: list[dict[str, Any]] = []
        self._restarting: dict[int, Any] = {}       # replica index -> ObjectRef of its restart()
        self._misses: dict[int, int] = {}           # consecutive failed health checks
        self.restarts = 0

    def start(self) -> list[Endpoint]:
        from dataclasses import asdict

        cfg = self.cfg
        served = cfg.served_name or cfg.name
        if cfg.kind == "openai_compatible":
            self.endpoints = [Endpoint(cfg.base_url.rstrip("/"), served, cfg.api_key_env)]
            return self.endpoints
        gpus = cfg.num_gpus if cfg.num_gpus else 0.0
        for i in range(cfg.replicas):
            # a replica actor whose node is lost is re-created by Ray (``check`` starts its server)
            actor = ModelReplica.options(num_cpus=cfg.num_cpus, num_gpus=gpus, name=None, max_restarts=-1,
                                         max_task_retries=0).remote(asdict(cfg), i, self.log_dir)
            self.replicas.append(actor)
        t0 = time.time()
        self.startup = ray.get([r.start.remote() for r in self.replicas])
        log.info("%d replica(s) of %s healthy in %.0f s", len(self.replicas), cfg.name, time.time() - t0)
        self.endpoints = [Endpoint(s["base_url"], served, "", s["replica"]) for s in self.startup]
        return self.endpoints

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
        self.endpoints[i] = Endpoint(base_url, old.model, old.api_key_env, old.replica)
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
