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
from engine.budget import Budget, BudgetExhausted, BudgetGate, Caps, LedgerLost, Reservation, Spend, current_gate
from engine.budget.cost import Prices
from engine.llm import Endpoint, Router, SamplingParams, transcripts
from engine.protocol import EpisodeContext, IndexClient, dumps
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
        if s.artifacts_uri and ctx.workdir is not None and ctx.workdir.is_dir():
            try:
                n = await asyncio.to_thread(upload_tree, ctx.workdir, sub_uri(s.artifacts_uri, spec.episode_id))
                log.debug("episode %s: %d artifact file(s) copied to the run dir", spec.episode_id, n)
            except Exception as e:  # noqa: BLE001 - the result stands; say what is missing
                log.error("episode %s: its artifacts stay on %s only (copying them to %s failed: %s)",
                          spec.episode_id, ctx.workdir, s.artifacts_uri.partition("?")[0], e)
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


class EpisodeWorker:
    """Body of the worker actor (made remote in :func:`start_workers`). One worker runs the
    episodes of every sweep point that uses its model (``add_point``): one queue per model feeds
    it, and points that share a model pool share one router, so in-flight bounds and sticky
    load-aware routing hold across points."""

    def __init__(self, name: str, points: dict[str, tuple[WorkerSetup, Any, dict[str, Any] | None]]) -> None:
        logging.basicConfig(level=logging.WARNING)
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


class BudgetActor:
    """Body of the run's budget actor (made remote in :func:`start_budget_actor`): one
    :class:`~engine.budget.Budget` every worker's calls reserve from, so concurrent episodes on
    all workers see one ledger. Async: a call waiting for room never blocks a settle.

    Restartable: Ray builds it again from the same arguments when its process dies, and it then
    goes on from the newest snapshot of its state the driver saved (``budget-live-<run_id>.json``
    in ``snapshot_dirs``, every ``UPTIME_REPORT_S``): a restarted ledger does not forget what was
    spent. The first start finds no snapshot of its (new) run id; a restart that finds none
    although the driver writes one at once fails to start, so the ledger counts as lost (calls
    are not let through by a ledger that forgot)."""

    def __init__(self, caps: Caps, prices: Prices, initial: Spend, ttl_s: float,
                 closed: tuple[str, str] | None = None, *, point_prices: dict[str, Prices] | None = None,
                 uptime_prices: dict[str, Prices] | None = None, run_id: str = "",
                 snapshot_dirs: tuple[str, ...] = ()) -> None:
        self.budget = Budget(caps, prices, initial, ttl_s, closed, point_prices, uptime_prices)
        if run_id and snapshot_dirs:
            state = load_ledger_state(snapshot_dirs, run_id)
            if state is not None:
                self.budget.restore(state)
                log.warning("budget ledger %s restarted: restored from its snapshot of %s (%s)", run_id,
                            time.strftime("%H:%M:%S", time.localtime(float(state.get("_at") or 0))),
                            self.budget.summary()["run"])
            elif _reconstructed():
                raise RuntimeError(f"budget ledger {run_id} restarted but found no snapshot "
                                   f"{LIVE_PREFIX}{run_id}.json in {list(snapshot_dirs)}: it would forget what was spent")

    async def acquire(self, est_in: int, est_out: int, point: str = "") -> tuple[Reservation | None, str]:
        r = await self.budget.acquire(est_in, est_out, point=point)
        return r, self.budget.reason

    async def settle(self, r: Reservation, tokens_in: int, tokens_out: int) -> None:
        self.budget.settle(r, tokens_in, tokens_out)

    async def set_uptime(self, seconds: float, key: str = "") -> None:
        self.budget.set_uptime(seconds, key)

    async def exhausted(self) -> str:
        return self.budget.exhausted()

    async def summary(self) -> dict[str, Any]:
        return self.budget.summary()

    async def snapshot(self) -> dict[str, Any]:
        """The summary and the state, taken together (what the driver saves)."""
        return {"summary": self.budget.summary(), "state": self.budget.state()}


def _reconstructed() -> bool:
    """Whether Ray is restarting this actor (not its first start)."""
    import warnings

    import ray

    with warnings.catch_warnings():     # the property reads a deprecated attribute inside Ray
        warnings.simplefilter("ignore")
        return bool(ray.get_runtime_context().was_current_actor_reconstructed)


# the driver's ledger snapshots: RUN_DIR/budget-live-<run id>.json (ray_jobs/budget.py writes them)
LIVE_PREFIX = "budget-live-"


def load_ledger_state(dirs: tuple[str, ...] | list[str], run_id: str) -> dict[str, Any] | None:
    """The newest saved state of ledger ``run_id`` among the run dirs ``dirs`` (None: none saved).
    A snapshot that exists but cannot be read raises: better a lost ledger than one that forgot."""
    import json

    import pyarrow.fs as pafs

    from engine.storage import open_root

    best: dict[str, Any] | None = None
    for d in dirs:
        fs, base = open_root(d)
        path = f"{base}/{LIVE_PREFIX}{run_id}.json"
        if fs.get_file_info(path).type != pafs.FileType.File:
            continue
        with fs.open_input_stream(path) as f:
            live = json.loads(f.read().decode())
        state = live.get("state")
        if state is not None and (best is None or float(live.get("at") or 0) > float(best["_at"])):
            best = {**state, "_at": float(live.get("at") or 0)}
    return best


def start_budget_actor(caps: Caps, prices: Prices, initial: Spend, ttl_s: float,
                       closed: tuple[str, str] | None = None, *, point_prices: dict[str, Prices] | None = None,
                       uptime_prices: dict[str, Prices] | None = None, run_id: str = "",
                       snapshot_dirs: tuple[str, ...] = ()) -> Any:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from engine.runtime.actors import remember, unique_name

    # No CPU of its own (it only does arithmetic); enough concurrency for every waiting call.
    # Restarted whenever its process dies (max_restarts=-1), and a call to it that was under way
    # (or is made while it restarts) is retried on the restarted actor (max_task_retries=-1): the
    # workers' calls wait for it instead of failing. It runs on the driver's node (soft: elsewhere
    # if that node is gone), where a local run dir with its snapshots is.
    name = unique_name("budget")
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
    actor = ray.remote(BudgetActor).options(num_cpus=0, max_concurrency=10_000, max_restarts=-1, max_task_retries=-1,
                                            name=name, scheduling_strategy=here)
    return remember(actor.remote(caps, prices, initial, ttl_s, closed, point_prices=point_prices,
                                 uptime_prices=uptime_prices, run_id=run_id, snapshot_dirs=tuple(snapshot_dirs)), name)


def _ledger_lost() -> tuple[type[BaseException], ...]:
    try:
        from ray.exceptions import ObjectLostError, RayActorError
    except ImportError:  # pragma: no cover - Ray is a dependency
        return ()
    # RayActorError covers ActorDiedError (dead for good: killed without restart, its constructor
    # failed on a restart) and ActorUnavailableError; ObjectLostError covers an owner that died
    return (RayActorError, ObjectLostError)


# What a call to the budget actor raises when the ledger is gone (remote_gate: LedgerLost).
LEDGER_LOST = _ledger_lost()


def remote_gate(actor: Any, point: str = "") -> BudgetGate:
    """The gate a worker's calls go through: the budget actor's methods (Ray refs are awaitable),
    booked under ``point``. A ledger that cannot be reached raises
    :class:`~engine.budget.LedgerLost`, never a Ray error the runner would store as ``error``."""
    async def acquire(a: int, b: int) -> tuple[Reservation | None, str]:
        try:
            got: tuple[Reservation | None, str] = await actor.acquire.remote(a, b, point)
            return got
        except LEDGER_LOST as e:
            raise LedgerLost(f"the run's budget ledger is gone ({type(e).__name__}: {str(e)[:300]})") from e

    async def settle(r: Reservation, a: int, b: int) -> None:
        try:
            await actor.settle.remote(r, a, b)
        except LEDGER_LOST as e:
            raise LedgerLost(f"the run's budget ledger is gone ({type(e).__name__}: {str(e)[:300]})") from e

    return BudgetGate(acquire, settle, shared=True)


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
