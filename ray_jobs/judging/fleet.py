"""Judge actors: a :class:`~ray_jobs.judging.stream.JudgeStream` in each of ``judge.actors`` Ray actors
(``JudgeWorker``), and ``JudgeFleet``, which spreads a configuration's rows over them from the
driver. ``judge.actors=0`` runs the stream on a driver thread instead (``ray_jobs/run/judging.py``)."""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections import defaultdict
from typing import Any

from engine.budget import BudgetGate
from engine.config import Config
from engine.llm import Endpoint
from engine.protocol import Benchmark
from engine.storage import EpisodeStore
from ray_jobs.judging.stream import JudgeStream

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
    memory (a judge priced apart from the model, ``ray_jobs.budget.ledger.judge_budget_gate``) is judged
    by one actor, so its cap is counted in one place. ``submit`` returns at once (an actor call
    whose result is not awaited); ``finish`` waits for every actor that holds the configuration.

    **A judge actor that dies** (its process or its node) is restarted by Ray; the fleet notices
    at the next answer it waits for (a submit's, or ``finish``), adds every configuration the
    actor held to the new one, which reads what the store has settled for the judge, and hands
    it again the episodes it had been given (read back from the store by id): what the dead actor
    had stored is not asked again, what it had not is asked again, so no judgement is lost and none
    is stored twice. ``MAX_RECOVERIES`` restarts of one actor in a row, and the run fails naming it."""

    MAX_RECOVERIES = 5

    def __init__(self, n: int, flush_s: float, num_cpus: float = 0.0, resources: dict[str, float] | None = None,
                 start_timeout_s: float = 300.0) -> None:
        self.n, self.flush_s, self.num_cpus, self.resources = max(1, n), flush_s, num_cpus, resources or {}
        self.start_timeout_s = start_timeout_s
        self.actors: list[Any] = []
        self.of: dict[str, list[int]] = {}            # key -> the actors that judge it
        self.sent: dict[tuple[str, int], int] = {}    # rows handed to each actor per key
        self.ids: dict[tuple[str, int], list[str]] = {}   # their episode ids (what a restart gets again)
        self.added: dict[str, tuple[Any, ...]] = {}       # add()'s arguments per key (ditto)
        self.calls: list[tuple[Any, int]] = []         # submit refs and their actor (errors: recover)
        self.recoveries: dict[int, int] = defaultdict(int)
        self.restarts = 0
        # submit runs on the store writer's thread, finish on the driver's: one at a time
        self._lock = threading.RLock()

    def _start(self) -> None:
        import ray

        # restartable: a dead actor comes back empty and recover() refills it
        cls = ray.remote(JudgeWorker).options(num_cpus=self.num_cpus, resources=self.resources or None,
                                              max_concurrency=8, max_restarts=-1, max_task_retries=0)
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

        if not self.actors:
            self._start()
        local_gate = gate is not None and not gate.shared
        idx = [0] if local_gate else list(range(len(self.actors)))
        if local_gate and len(self.actors) > 1:
            idx = [zlib.crc32(key.encode()) % len(self.actors)]
        self.added[key] = (cfg, store, endpoints, gate, max_inflight, config_hash)
        self.of[key] = idx
        for i in idx:
            self.sent[(key, i)] = 0
            self.ids[(key, i)] = []
        self._each(idx, lambda i: self.actors[i].add.remote(key, cfg, store, endpoints, gate, max_inflight,
                                                            config_hash))

    def submit(self, key: str, rows: list[dict[str, Any]]) -> None:
        with self._lock:
            self._submit(key, rows)

    def _submit(self, key: str, rows: list[dict[str, Any]]) -> None:
        idx = self.of[key]
        parts: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for r in rows:
            parts[idx[zlib.crc32(str(r.get("task_id") or r["episode_id"]).encode()) % len(idx)]].append(r)
        for i, part in parts.items():
            self.sent[(key, i)] += len(part)
            self.ids[(key, i)] += [r["episode_id"] for r in part]
            self.calls.append((self.actors[i].submit.remote(key, part), i))
        if len(self.calls) > 256:               # keep the refs list short: drop those answered
            self._settle(timeout=0)

    def _settle(self, timeout: float | None) -> None:
        """Drop the answered submit refs; an actor that died meanwhile is recovered."""
        import ray

        refs = [r for r, _ in self.calls]
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        done_ids = {id(r) for r in done}
        dead: set[int] = set()
        for r, i in self.calls:
            if id(r) in done_ids:
                try:
                    ray.get(r)
                except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                    dead.add(i)
        self.calls = [(r, i) for r, i in self.calls if id(r) not in done_ids]
        for i in sorted(dead):
            self.recover(i)

    def _each(self, idx: list[int], call: Any) -> list[Any]:
        """``ray.get(call(i))`` for each actor, recovering (and calling again) one that died."""
        import ray

        out: dict[int, Any] = {}
        todo = list(idx)
        while todo:
            refs = {i: call(i) for i in todo}
            todo = []
            for i, ref in refs.items():
                try:
                    out[i] = ray.get(ref)
                    self.recoveries[i] = 0
                except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as e:
                    self.recover(i, e)
                    todo.append(i)
        return [out[i] for i in idx]

    def recover(self, i: int, why: BaseException | None = None) -> None:
        """Actor ``i`` died: wait for Ray to restart it, then give it back every configuration it
        held and the episodes it had been sent (it judges what the store has not settled)."""
        import ray

        self.recoveries[i] += 1
        if self.recoveries[i] > self.MAX_RECOVERIES:
            raise RuntimeError(f"judge actor {i} died {self.MAX_RECOVERIES} times in a row; last: {why}") from why
        log.warning("judge actor %d died (%s): restarting it and handing it its episodes again", i,
                    type(why).__name__ if why else "a submit failed")
        self.restarts += 1
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            try:
                ray.get(self.actors[i].ping.remote(), timeout=max(1.0, deadline - time.monotonic()))
                break
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
                    ray.exceptions.GetTimeoutError) as e:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"judge actor {i} did not come back within {self.start_timeout_s:g} s "
                                       "(judge.actor_start_timeout_s)") from e
                time.sleep(0.5)
        for key, idx in self.of.items():
            if i not in idx:
                continue
            cfg, store, endpoints, gate, max_inflight, config_hash = self.added[key]
            ray.get(self.actors[i].add.remote(key, cfg, store, endpoints, gate, max_inflight, config_hash))
            ids = self.ids[(key, i)]
            rows = store.episodes(episode_ids=ids).to_pylist() if ids else []
            self.sent[(key, i)] = len(rows)
            for s in range(0, len(rows), 256):
                self.calls.append((self.actors[i].submit.remote(key, rows[s:s + 256]), i))

    def finish(self, key: str) -> dict[str, Any]:
        with self._lock:
            return self._finish(key)

    def _finish(self, key: str) -> dict[str, Any]:
        idx = self.of[key]
        parts = self._each(idx, lambda i: self.actors[i].finish.remote(key, self.sent[(key, i)]))
        self.of.pop(key)
        for i in idx:
            self.sent.pop((key, i), None)
            self.ids.pop((key, i), None)
        self.added.pop(key, None)
        return dict(_sum_stats(parts), actors=len(idx), restarts=self.restarts)

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
