"""The budget's gates outside the ledger actor: the rows of episodes a budget stopped before they
started, and the judge stage's gate (its calls priced at the judge's prices)."""

from __future__ import annotations

from typing import Any

from engine.budget import Budget, BudgetGate, Caps
from engine.budget.cost import Prices, judge_prices
from engine.config import Config, to_plain
from engine.runtime.dispatch import BUDGET_EXHAUSTED, EpisodeSpec, WorkerSetup, unstarted_row
from engine.storage import EpisodeStore
from ray_jobs.budget.records import recorded_closure, recorded_spend
from ray_jobs.budget.sweep import SweepLedger
from ray_jobs.config.point import PointSpec


def budget_exhausted_rows(setup: WorkerSetup, specs: list[EpisodeSpec], reason: str) -> list[dict[str, Any]]:
    """Rows of planned episodes that never started because the budget ran out: stored (nothing
    is lost silently) as ``budget_exhausted``; a re-run with a larger budget plans them again."""
    return [unstarted_row(setup, s, BUDGET_EXHAUSTED, f"BudgetExhausted: {reason} (never started)") for s in specs]


def judge_prices_match(cfg: Config) -> bool:
    """Whether the judge's calls cost what the model's do (a self-judge, a hosted judge at the same
    token prices): then they can reserve from the generation's own ledger."""
    return (judge_prices(to_plain(cfg.judge), to_plain(cfg.model)).tokens.tokens_only
            == Prices.of_model(to_plain(cfg.model)).tokens_only)


def judge_budget_gate(spec: PointSpec, store: EpisodeStore, ledger: SweepLedger | None = None) -> BudgetGate | None:
    """A gate for the judge stage's calls (in the driver; None without caps): the same caps,
    starting from what the run dir records (this run's generation included, from its ledger
    snapshot; of all the sweep's points for a sweep ``ledger``), priced at the judge's prices.
    Replica uptime during judging is not checked as it accrues; the run's info JSON records it for
    the next run."""
    cfg, config_hash = spec.cfg, spec.config_hash
    caps = Caps.of(cfg.run.budget)
    if not caps.any:
        return None
    jp = judge_prices(to_plain(cfg.judge), to_plain(cfg.model)).tokens
    if ledger is not None:
        return BudgetGate.local(Budget(caps, jp, ledger.recorded(), closed=ledger.closed))
    return BudgetGate.local(Budget(caps, jp, recorded_spend(cfg, store, config_hash),
                                   closed=recorded_closure(cfg, store, config_hash)))
