"""The run's budget ledger as a Ray actor: one ``BudgetActor`` per run (named, detached from
no driver state: a lost actor is rebuilt from the live ledger file it writes), ``remote_gate``
(the :class:`~engine.budget.BudgetGate` episode workers ask), and what a lost ledger raises.
The ledger's arithmetic is :mod:`engine.budget.ledger`; this module only puts it on Ray."""

from __future__ import annotations

import logging
import time
from typing import Any

from engine.budget import Budget, BudgetGate, Caps, LedgerLost, Reservation, Spend
from engine.budget.cost import Prices

log = logging.getLogger(__name__)


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


# the driver's ledger snapshots: RUN_DIR/budget-live-<run id>.json (ray_jobs/budget/ledger.py writes them)
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
