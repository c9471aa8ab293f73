"""Episode workers: Ray actors that each run many episodes concurrently with asyncio.

The driver hands a worker one episode per call; the actor's ``max_concurrency`` bounds how
many run at once, and each replica's client bounds in-flight requests (the per-replica budget
is split evenly across workers). A worker turns whatever happens in an episode into a row:
environment-level failures are results (status ok), infrastructure failures (the endpoint
down after retries, a bug) are status error with the message, so the run goes on and a
re-run retries them.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import socket
import time
import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine.benchmarks import get_benchmark
from engine.budget import BudgetExhausted, LedgerLost, current_gate
from engine.llm import Endpoint, Router, SamplingParams, transcripts
from engine.protocol import EpisodeContext, IndexClient, dumps
from engine.runtime.budget_actor import remote_gate
from engine.runtime.logs import configure as configure_logging
from engine.storage import step_rows, sub_uri, upload_tree

log = logging.getLogger(__name__)


@dataclass
class EpisodeSpec:
    episode_id: str
    config_hash: str
    task: Any
    task_id: str
    seed: int
    # which sweep point (a configuration in a run dir) it belongs to: the worker's runner for it
    point: str = ""


@dataclass
class WorkerSetup:
    benchmark: str
    model_name: str
    agent: Any                 # typed agent config
    agent_json: str
    endpoints: list[Endpoint]
    sampling: SamplingParams
    inflight_per_replica: int
    top_k: int
    threshold: float | None
    uses_model: bool = True
    data_json: str = ""        # benchmark config as JSON (without the task limit)
    artifacts_dir: str = ""    # RUN_DIR/artifacts: per-episode folders (shared storage on a cluster)
    # the remote run dir's artifacts/ (s3://...; "" for a local run dir): each episode's folder is
    # copied there when it ends, since the worker's disk is not the run dir
    artifacts_uri: str = ""
    model_path: str = ""       # the served model's local folder, for tokenizers ("" if external)
    # how long a call waits for a restarted replica when none answers (0: fail at once, for
    # external endpoints nobody restarts)
    reroute_wait_s: float = 0.0
    max_retries_per_episode: int | None = None     # over all of an episode's calls (model.max_retries_per_episode)
    # the run's BudgetActor (run.budget caps), shared by all workers; None: no caps
    budget: Any = None
    # what this point's calls are booked under in that ledger (its config hash; a sweep-scope
    # ledger prices and records each point's calls apart)
    budget_point: str = ""
    # identity of the model pool the endpoints belong to: the points of a sweep that use the same
    # pool share one router (and its in-flight bounds) in a worker
    pool_key: str = ""
    engine_json: str = ""      # engine.identity.engine_identity as JSON: every row's ``engine`` column
    weights_id: str = ""       # engine.hosting.weights.weights_id of the model ("" without one)


# status of an episode stopped by run.budget (its own calls refused, or never started)
BUDGET_EXHAUSTED = "budget_exhausted"
# status of an episode an adaptive rule never started (its configuration was stopped: engine/scoring/racing.py)
STOPPED_EARLY = "stopped_early"


def _utc(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC)


class EpisodeRunner:
    """Runs episodes in this process (the worker actor wraps it; tests use it directly)."""

    def __init__(self, setup: WorkerSetup, index: IndexClient | None, name: str = "",
                 services: dict[str, Any] | None = None, router: Router | None = None) -> None:
        self.setup = setup
        self.benchmark = get_benchmark(setup.benchmark)
        self.index = index
        self.services = services or {}
        self.router = router or (Router(setup.endpoints, setup.sampling, setup.inflight_per_replica,
                                        reroute_wait_s=setup.reroute_wait_s,
                                        max_retries_per_episode=setup.max_retries_per_episode)
                                 if setup.endpoints else None)
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.gate = remote_gate(setup.budget, setup.budget_point) if setup.budget is not None else None
        # Live counters over every step taken so far (finished and in-flight episodes).
        self.live = {"steps": 0, "tokens_in": 0, "tokens_out": 0}

    def _count(self, step: Any) -> None:
        self.live["steps"] += 1
        self.live["tokens_in"] += step.tokens_in
        self.live["tokens_out"] += step.tokens_out

    async def run(self, spec: EpisodeSpec) -> dict[str, Any]:
        """The episode's row, steps and transcript; or, when the budget ledger could not be asked
        (:class:`~engine.budget.LedgerLost`), ``{"ledger_lost": why, "tokens_in", "tokens_out"}``
        and no row: the episode never started as far as the store is concerned, and the driver
        requeues it or leaves it for a re-run (the tokens are what its attempt spent)."""
        s = self.setup
        # the episode's seed goes to the engine with every call that sets none of its own (seeds
        # seed..seed+num_seeds-1 sample differently; at temperature 0 it changes nothing)
        llm = self.router.client_for(spec.episode_id, spec.seed) if (self.router and s.uses_model) else None
        ctx = EpisodeContext(episode_id=spec.episode_id, seed=spec.seed, agent=s.agent, llm=llm,
                             index=self.index, top_k=s.top_k, threshold=s.threshold, on_step=self._count,
                             services=self.services, model_path=s.model_path,
                             workdir=Path(s.artifacts_dir) / spec.episode_id if s.artifacts_dir else None)
        started = time.time()
        row: dict[str, Any] = {
            "episode_id": spec.episode_id, "config_hash": spec.config_hash, "benchmark": s.benchmark,
            "task_id": spec.task_id, "model": s.model_name if s.uses_model else "none", "agent": s.agent_json,
            "data": s.data_json, "seed": spec.seed, "worker": self.name, "replica": llm.endpoint.replica if llm else -1,
            "engine": s.engine_json, "weights_id": s.weights_id,
        }
        gated = current_gate.set(self.gate) if self.gate is not None else None   # this episode's task only
        lost = ""
        try:
            outcome = await self.benchmark.run_episode(spec.task, ctx)
            row.update(status="ok", error="", finish_reason=outcome.finish_reason, output=outcome.output,
                       **outcome.extras)
        except LedgerLost as e:
            # not a result: whether its calls could start is unknown, so it counts as not started
            log.warning("episode %s (%s) not started: %s", spec.episode_id, spec.task_id, e)
            lost = f"LedgerLost: {e}"
        except BudgetExhausted as e:
            # not a result and not a failure: a re-run with a larger budget runs it again
            log.info("episode %s (%s) stopped: %s", spec.episode_id, spec.task_id, e)
            row.update(status=BUDGET_EXHAUSTED, error=f"BudgetExhausted: {e}", finish_reason=BUDGET_EXHAUSTED,
                       output="")
        except Exception as e:  # noqa: BLE001 - recorded, the run goes on
            log.warning("episode %s (%s) failed: %s", spec.episode_id, spec.task_id, e)
            row.update(status="error", error=f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=5)}",
                       finish_reason="error", output="")
        finally:
            if gated is not None:
                current_gate.reset(gated)
        finished = time.time()
        await self._copy_artifacts(spec, ctx)
        calls: list[dict[str, Any]] = []
        messages: dict[str, dict[str, Any]] = {}
        if lost:
            if llm is not None:
                llm.close()
            return {"ledger_lost": lost, "tokens_in": sum(x.tokens_in for x in ctx.steps),
                    "tokens_out": sum(x.tokens_out for x in ctx.steps)}
        if llm is not None:
            row["replica"] = llm.endpoint.replica       # where it ended (a re-routed episode moved)
            llm.close()
            calls, messages = transcripts.rows(llm.calls, spec.episode_id)
        row.update(n_steps=len(ctx.steps), tokens_in=sum(x.tokens_in for x in ctx.steps),
                   tokens_out=sum(x.tokens_out for x in ctx.steps), wall_time_s=finished - started,
                   started_at=_utc(started), finished_at=_utc(finished))
        return {"episode": row, "steps": step_rows(spec.episode_id, ctx.steps), "calls": calls,
                "messages": messages}


    async def _copy_artifacts(self, spec: EpisodeSpec, ctx: EpisodeContext) -> None:
        """A remote run dir: the episode's folder goes there (the worker's disk is not the run dir)."""
        uri = self.setup.artifacts_uri
        if not uri or ctx.workdir is None or not ctx.workdir.is_dir():
            return
        try:
            n = await asyncio.to_thread(upload_tree, ctx.workdir, sub_uri(uri, spec.episode_id))
            log.debug("episode %s: %d artifact file(s) copied to the run dir", spec.episode_id, n)
        except Exception as e:  # noqa: BLE001 - the result stands; say what is missing
            log.error("episode %s: its artifacts stay on %s only (copying them to %s failed: %s)",
                      spec.episode_id, ctx.workdir, uri.partition("?")[0], e)


class EpisodeWorker:
    """Body of the worker actor (made remote in :func:`start_workers`). One worker runs the
    episodes of every sweep point that uses its model (``add_point``): one queue per model feeds
    it, and points that share a model pool share one router, so in-flight bounds and sticky
    load-aware routing hold across points."""

    def __init__(self, name: str, points: dict[str, tuple[WorkerSetup, Any, dict[str, Any] | None]]) -> None:
        configure_logging(quiet=True)
        for logger in ("httpx", "httpx2", "openai"):
            logging.getLogger(logger).setLevel(logging.WARNING)
        self.name = name
        self.runners: dict[str, EpisodeRunner] = {}
        self.routers: dict[str, Router] = {}
        for point, (setup, index_handle, service_handles) in points.items():
            self.add_point(point, setup, index_handle, service_handles)

    def add_point(self, point: str, setup: WorkerSetup, index_handle: Any,
                  service_handles: dict[str, Any] | None = None) -> None:
        from engine.runtime.actors import resolve
        from engine.runtime.services import RemoteService
        from indexes.service import RemoteIndex

        services = {k: RemoteService(resolve(h)) for k, h in (service_handles or {}).items()}
        index = RemoteIndex(resolve(index_handle)) if index_handle is not None else None
        if setup.budget is not None:
            setup = replace(setup, budget=resolve(setup.budget))
        router = None
        if setup.endpoints:
            key = setup.pool_key or point
            if key not in self.routers:
                self.routers[key] = Router(setup.endpoints, setup.sampling, setup.inflight_per_replica,
                                           reroute_wait_s=setup.reroute_wait_s,
                                           max_retries_per_episode=setup.max_retries_per_episode)
            router = self.routers[key]
        self.runners[point] = EpisodeRunner(setup, index, self.name, services, router)

    async def run(self, spec: EpisodeSpec) -> dict[str, Any]:
        return await self.runners[spec.point].run(spec)

    async def live(self) -> dict[str, int]:
        return {k: sum(r.live[k] for r in self.runners.values()) for k in ("steps", "tokens_in", "tokens_out")}

    async def set_endpoints(self, pool_key: str, endpoints: list[Endpoint]) -> None:
        """A replica of ``pool_key`` moved (re-created on another node): route to the new addresses."""
        if pool_key in self.routers:
            self.routers[pool_key].update(endpoints)

    async def ping(self) -> str:
        await asyncio.sleep(0)
        return self.name


def start_workers(setup: WorkerSetup | None, index_handle: Any, num_workers: int, episodes_per_worker: int,
                  num_cpus: float, service_handles: dict[str, Any] | None = None, *,
                  points: dict[str, tuple[WorkerSetup, Any, dict[str, Any] | None]] | None = None,
                  resources: dict[str, float] | None = None, prefix: str = "worker") -> list[Any]:
    """``num_workers`` episode worker actors running the episodes of ``points`` (point id ->
    (setup, index handle, service handles)), or of the one point "" given by ``setup``."""
    import ray

    if points is None:
        assert setup is not None, "start_workers needs a setup or points"
        points = {"": (setup, index_handle, service_handles)}
    from engine.runtime.actors import by_name

    # the constructor arguments go inline with the actor's creation task (they are small: setups
    # and actor names, no handles: engine.runtime.actors), so a restarted actor is built from them again
    args = {k: (replace(s, budget=by_name(s.budget)), by_name(i), {n: by_name(h) for n, h in (sv or {}).items()})
            for k, (s, i, sv) in points.items()}
    actor_cls = ray.remote(EpisodeWorker)
    # One slot more than the episodes the driver gives a worker at once: progress polls never wait.
    # A worker that dies (its process or node) is restarted by Ray with the same constructor
    # arguments (so with every point); the driver requeues the episodes it had in flight (Ray does
    # not retry them: max_task_retries=0) and pushes it the current replica addresses.
    return [actor_cls.options(num_cpus=num_cpus, resources=resources or None,
                              max_concurrency=episodes_per_worker + 1, max_restarts=-1,
                              max_task_retries=0).remote(f"{prefix}-{i}", args)
            for i in range(num_workers)]


def unstarted_row(setup: WorkerSetup, spec: EpisodeSpec, status: str, error: str) -> dict[str, Any]:
    """The row of an episode that produced no result of its own (its worker was lost on every
    attempt, or the run stopped before it started): stored so that nothing is lost silently;
    a re-run plans it again (only ok rows count as finished)."""
    now = _utc(time.time())
    return {"episode_id": spec.episode_id, "config_hash": spec.config_hash, "benchmark": setup.benchmark,
            "task_id": spec.task_id, "model": setup.model_name if setup.uses_model else "none",
            "agent": setup.agent_json, "data": setup.data_json, "seed": spec.seed, "worker": "", "replica": -1,
            "engine": setup.engine_json, "weights_id": setup.weights_id,
            "status": status, "error": error, "finish_reason": status, "output": "", "n_steps": 0, "tokens_in": 0,
            "tokens_out": 0, "wall_time_s": 0.0, "started_at": now, "finished_at": now}


def _worker_lost() -> tuple[type[BaseException], ...]:
    try:
        from ray.exceptions import ObjectLostError, RayActorError, WorkerCrashedError
    except ImportError:  # pragma: no cover - Ray is a dependency
        return ()
    return (RayActorError, ObjectLostError, WorkerCrashedError)


# What ray.get raises when a worker died with an episode in flight (the driver requeues it).
WORKER_LOST = _worker_lost()


def agent_json(agent_cfg: Any) -> str:
    from engine.config import to_plain

    return dumps(to_plain(agent_cfg))
