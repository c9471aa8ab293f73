"""A sweep's one ledger (``run.budget.scope=sweep``): one cap over every point of a sweep that uses
a model, started once the sweep's Ray is up and stopped after its last wave; and the check that the
points of such a sweep ask for the same one."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from engine.budget import Budget, Caps, Spend
from engine.budget.cost import Prices
from engine.config import Config, to_plain
from engine.errors import ConfigError
from engine.runtime.budget_actor import LIVE_PREFIX
from engine.storage import EpisodeStore
from ray_jobs.budget.ledger import PoolUptime, RunBudget, ttl, warn_unpriced
from ray_jobs.budget.records import POINT, SWEEP, closure, recorded_spend
from ray_jobs.cluster.session import Session
from ray_jobs.config.point import PointSpec

log = logging.getLogger("dateline.budget")


def _label(cfg: Config, others: list[Config]) -> str:
    """A point of a sweep as a person tells it apart: the settings it does not share with every
    other point (at most three), e.g. ``agent.max_searches=3``."""
    def flat(d: Any, prefix: str = "") -> dict[str, Any]:
        if isinstance(d, dict):
            out: dict[str, Any] = {}
            for k, v in d.items():
                out.update(flat(v, f"{prefix}{k}."))
            return out
        return {prefix[:-1]: d}

    mine = flat(to_plain(asdict(cfg)))
    rest = [flat(to_plain(asdict(o))) for o in others if o is not cfg]
    own = [f"{k}={json.dumps(v, default=str)}" for k, v in mine.items()
           if not k.startswith("run.budget.") and any(r.get(k) != v for r in rest)]
    return ", ".join(own[:3]) or "(same settings)"


def check_sweep_budgets(specs: Sequence[PointSpec]) -> None:
    """All points of a sweep under one ledger (``run.budget.scope=sweep``) must ask for the same
    one: the same scope and the same caps. Raises ConfigError naming the points and the fields."""
    cfgs = [s.cfg for s in specs]
    if len(cfgs) < 2 or all(c.run.budget.scope == POINT for c in cfgs):
        return
    ref = cfgs[0]
    for c in cfgs[1:]:
        diff = [f for f in ("scope", "max_usd", "max_input_tokens", "max_output_tokens", "max_gpu_hours")
                if getattr(c.run.budget, f) != getattr(ref.run.budget, f)]
        if diff:
            fields = "; ".join(f"run.budget.{f}: {getattr(ref.run.budget, f)!r} vs {getattr(c.run.budget, f)!r}"
                               for f in diff)
            raise ConfigError(
                f"run.budget.{diff[0]}: the points of a sweep share one budget (run.budget.scope=sweep), but point "
                f"[{_label(ref, cfgs)}] and point [{_label(c, cfgs)}] differ ({fields}). Give every point the same "
                "run.budget, or run.budget.scope=point for a budget per point")


@dataclass
class SweepLedger:
    """One ledger for the points of a sweep that use a model (``run.budget.scope=sweep``): one cap
    over all of them. ``members`` are (config, store, config hash); the ledger is started once the
    sweep's Ray is up (:meth:`start`) and stopped when its last wave is done (:meth:`stop`).

    It starts from what all its points already spent (:meth:`recorded`, each at its own prices),
    and closed when an earlier run of the same sweep (the same set of configurations) closed under
    a cap still no larger. Its snapshots go to every member's run dir, with each point's part."""
    caps: Caps
    members: list[tuple[Config, EpisodeStore, str]]
    closed: tuple[str, str] | None = None
    initial: Spend = field(default_factory=Spend)
    budget: RunBudget | None = None
    final: dict[str, Any] | None = None          # its summary once stopped

    @property
    def hashes(self) -> list[str]:
        return [h for _, _, h in self.members]

    def recorded(self) -> Spend:
        s = Spend()
        for cfg, store, h in self.members:
            s = s + recorded_spend(cfg, store, h)
        return s

    def point_prices(self) -> dict[str, Prices]:
        return {h: Prices.of_model(to_plain(cfg.model)) for cfg, _, h in self.members}

    def exhausted_before_start(self) -> str:
        return Budget(self.caps, Prices.of_model(to_plain(self.members[0][0].model)), self.initial,
                      closed=self.closed, point_prices=self.point_prices()).exhausted()

    def start(self, session: Session, already_up: set[int], generating: list[Config]) -> RunBudget:
        """The ledger's actor, charged the uptime of the models of ``generating`` (the points that
        run episodes) from now on (from their start for a pool started after ``already_up``)."""
        from engine.runtime.budget_actor import start_budget_actor

        models = [cfg.model for cfg, _, _ in self.members]
        warn_unpriced(self.caps, list({Session.key(m): m for m in models}.values()))
        self.initial = self.recorded()
        run_id = uuid.uuid4().hex[:12]
        uptime_prices = {Session.key(m): Prices.of_model(to_plain(m)) for m in models}
        actor = start_budget_actor(self.caps, Prices.of_model(to_plain(models[0])), self.initial, ttl(models),
                                   self.closed, point_prices=self.point_prices(), uptime_prices=uptime_prices,
                                   run_id=run_id, snapshot_dirs=tuple(dict.fromkeys(st.uri for _, st, _ in self.members)))
        log.info("run budget %s for the %d points of the sweep (run.budget.scope=sweep); already spent by them: %s",
                 self.caps, len(self.members), self.initial)
        self.budget = RunBudget(actor, run_id, PoolUptime(session, [c.model for c in generating], already_up),
                                [st for _, st, _ in self.members], self.hashes, SWEEP)
        return self.budget

    def stop(self) -> dict[str, Any] | None:
        """Stop the ledger (after the sweep's last wave); its final summary (``final``)."""
        if self.budget is not None:
            self.final = self.budget.stop()
            self.budget = None
        return self.final

    def record(self, summary: dict[str, Any], config_hash: str) -> dict[str, Any]:
        """The ``budget`` section of a member's info JSON: the ledger's summary (caps, spend and
        closure over the sweep, ``points``: every member's part) and this point's part (``point``)."""
        return {**summary, "point": (summary.get("points") or {}).get(config_hash)}


def sweep_ledger(points: Sequence[tuple[PointSpec, EpisodeStore]]) -> SweepLedger | None:
    """The sweep's one ledger when its points ask for one (``run.budget.scope=sweep``, caps set,
    two or more points that use a model); None: each point has its own (or none). Call
    :func:`check_sweep_budgets` first: the points agree on the caps."""
    members = [(s.cfg, store, s.config_hash) for s, store in points if s.uses_model]
    if len(members) < 2 or members[0][0].run.budget.scope != SWEEP:
        return None
    caps = Caps.of(members[0][0].run.budget)
    if not caps.any:
        return None
    hashes = {h for _, _, h in members}
    records: list[dict[str, Any]] = []
    for st in {st.uri: st for _, st, _ in members}.values():
        records += [(i.get("budget") or {}) for i in st.run_infos() if i.get("config_hash") in hashes]
        records += [i for i in st.run_infos(LIVE_PREFIX) if i]
    # a closure of the same sweep (the same configurations): the same command starts nothing
    same = [b for b in records if b.get("scope") == SWEEP and set(b.get("points") or {}) == hashes]
    ledger = SweepLedger(caps, members, closure(caps, same))
    ledger.initial = ledger.recorded()
    return ledger
