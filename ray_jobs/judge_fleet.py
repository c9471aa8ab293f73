"""Judge actors: a :class:`~ray_jobs.judge.JudgeStream` in each of ``judge.actors`` Ray actors
(``JudgeWorker``), and ``JudgeFleet``, which spreads a configuration's rows over them from the
driver. ``judge.actors=0`` runs the stream on a driver thread instead (``ray_jobs/run/judging.py``)."""

from __future__ import annotations

import logging
import zlib
from collections import defaultdict
from typing import Any

from engine.budget import BudgetGate
from engine.config import Config
from engine.llm import Endpoint
from engine.protocol import Benchmark
from engine.storage import EpisodeStore
from ray_jobs.judge import JudgeStream

log = logging.getLogger(__name__)


class JudgeWorker:
    """A judge actor (Ray): one :class:`JudgeStream` in a process of its own, so building judge
    prompts (an analyst report's claims, their MiniLM embeddings), the judge's HTTP traffic and
    parsing never take the driver's time. Methods are called from the driver through
    :class:`JudgeFleet`."""

    def __init__(self, flush_s: float) -> None:
        self.stream = JudgeStream(flush_s)

    def ping(self) -> bool:
        return True

    def add(self, key: str, cfg: Config, store: EpisodeStore, endpoints: list[Endpoint], gate: BudgetGate | None,
            max_inflight: int | None, config_hash: str) -> None:
        from engine.benchmarks import get_benchmark

        self.stream.add(key, cfg, get_benchmark(cfg.benchmark.name), store, endpoints, gate, max_inflight,
                        config_hash)

    def submit(self, key: str, rows: list[dict[str, Any]]) -> None:
        self.stream.submit(key, rows)

    def finish(self, key: str, expect: int) -> dict[str, Any]:
        return self.stream.finish(key, expect)

    def close(self) -> None:
        self.stream.close()


def _sum_stats(parts: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in parts:
        for k, v in part.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[k] = max(out.get(k, 0), v) if k == "wall_s" else out.get(k, 0) + v
            else:
                out.setdefault(k, v)
    return out


class JudgeFleet:
    """``judge.actors`` judge actors behind :class:`JudgeStream`'s interface (``add``, ``submit``,
    ``finish``, ``close``), started on the first ``add``. A configuration's rows are spread over
    the actors by task (every row of one task goes to one actor, so a task-level judgement its
    seeds share is still asked once); a configuration whose budget gate lives in the driver's
    memory (a judge priced apart from the model, ``ray_jobs.budget.judge_budget_gate``) is judged
    by one actor, so its cap is counted in one place. ``submit`` returns at once (an actor call
    whose result is not awaited); ``finish`` waits for every actor that holds the configuration."""

    def __init__(self, n: int, flush_s: float, num_cpus: float = 0.0, resources: dict[str, float] | None = None,
                 start_timeout_s: float = 300.0) -> None:
        self.n, self.flush_s, self.num_cpus, self.resources = max(1, n), flush_s, num_cpus, resources or {}
        self.start_timeout_s = start_timeout_s
        self.actors: list[Any] = []
        self.of: dict[str, list[int]] = {}            # key -> the actors that judge it
        self.sent: dict[tuple[str, int], int] = {}    # rows handed to each actor per key
        self.calls: list[Any] = []                     # submit refs (errors surface at finish)

    def _start(self) -> None:
        import ray

        cls = ray.remote(JudgeWorker).options(num_cpus=self.num_cpus, resources=self.resources or None,
                                              max_concurrency=8, max_restarts=0)
        self.actors = [cls.remote(self.flush_s) for _ in range(self.n)]
        try:
            ray.get([a.ping.remote() for a in self.actors], timeout=self.start_timeout_s)
        except ray.exceptions.GetTimeoutError:
            for a in self.actors:
                ray.kill(a)
            self.actors = []
            raise RuntimeError(
                f"{self.n} judge actor(s) could not be placed in {self.start_timeout_s:g} s "
                f"(judge.actor_start_timeout_s): each asks for {self.num_cpus:g} CPU(s) and resources "
                f"{self.resources or {}}; the cluster has {ray.available_resources()} available. Lower "
                "judge.actor_cpus or judge.actor_resources, add nodes, or judge on the driver with judge.actors=0"
            ) from None

    def add(self, key: str, cfg: Config, bench: Benchmark[Any], store: EpisodeStore, endpoints: list[Endpoint],
            gate: BudgetGate | None = None, max_inflight: int | None = None, config_hash: str = "") -> None:
        import ray

        if not self.actors:
            self._start()
        local_gate = gate is not None and not gate.shared
        idx = [0] if local_gate else list(range(len(self.actors)))
        if local_gate and len(self.actors) > 1:
            idx = [zlib.crc32(key.encode()) % len(self.actors)]
        ray.get([self.actors[i].add.remote(key, cfg, store, endpoints, gate, max_inflight, config_hash) for i in idx])
        self.of[key] = idx
        for i in idx:
            self.sent[(key, i)] = 0

    def submit(self, key: str, rows: list[dict[str, Any]]) -> None:
        idx = self.of[key]
        parts: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for r in rows:
            parts[idx[zlib.crc32(str(r.get("task_id") or r["episode_id"]).encode()) % len(idx)]].append(r)
        for i, part in parts.items():
            self.sent[(key, i)] += len(part)
            self.calls.append(self.actors[i].submit.remote(key, part))
        if len(self.calls) > 256:               # keep the refs list short: drop those answered
            import ray

            done, self.calls = ray.wait(self.calls, num_returns=len(self.calls), timeout=0)
            ray.get(done)

    def finish(self, key: str) -> dict[str, Any]:
        import ray

        idx = self.of.pop(key)
        parts = ray.get([self.actors[i].finish.remote(key, self.sent.pop((key, i))) for i in idx])
        return dict(_sum_stats(parts), actors=len(idx))

    def close(self) -> None:
        import ray

        try:
            for key in list(self.of):
                try:
                    self.finish(key)
                except Exception as e:  # noqa: BLE001 - teardown goes on
                    log.warning("judge fleet %s: %s", key, e)
            if self.actors:
                ray.get([a.close.remote() for a in self.actors], timeout=120)
        finally:
            for a in self.actors:
                ray.kill(a)
            self.actors = []
