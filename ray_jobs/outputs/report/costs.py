"""Tokens and cost of each configuration of a run directory: what each run recorded (uptime paid,
model and judge settings) priced by ``engine.budget.cost``, per episode and per configuration, and
the figure's data."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from engine.budget.cost import Prices, episode_costs, judge_prices, model_prices, token_cost, uptime_cost
from engine.protocol import Row
from engine.scoring import stats
from engine.scoring.kinds import COST, TOKENS
from engine.storage import EpisodeStore
from ray_jobs.outputs.report.sections import ConfigCost, ConfigGroup, CostRow, TokensChart


def episode_tokens(r: Row) -> float:
    return float((r["tokens_in"] or 0) + (r["tokens_out"] or 0))


def run_costs(store: EpisodeStore, groups: list[ConfigGroup], prices: Mapping[str, Prices]) -> dict[str, ConfigCost]:
    """Per config hash: uptime paid, prices, per-episode costs (aligned with the group's ok rows),
    and the judge's cost (tokens, and the uptime of a judge with replicas of its own), all at the
    prices each run recorded unless ``prices`` overrides a model's (``engine.budget.cost``)."""
    uptime: dict[str, float] = defaultdict(float)
    model_cfg: dict[str, dict[str, Any]] = {}
    judge_cost: dict[str, float] = defaultdict(float)
    judge_uptime: dict[str, float] = defaultdict(float)
    for info in store.run_infos():
        h = info.get("config_hash")
        if not h:
            continue            # runs recorded before cost accounting
        uptime[h] += float(info.get("replica_seconds_run") or 0.0)
        model_cfg[h] = info.get("model") or {}
        j = info.get("judge") or {}
        jp = judge_prices(info.get("judge_config") or {}, model_cfg[h], prices)
        judge_cost[h] += token_cost(float(j.get("tokens_in") or 0), float(j.get("tokens_out") or 0), jp.tokens)
        if info.get("judge_replica_seconds_run"):
            judge_uptime[h] += uptime_cost(float(info["judge_replica_seconds_run"]), jp.uptime)
    out = {}
    for g in groups:
        p = model_prices(model_cfg.get(g.config_hash, {}), prices, name=g.model)
        ok = g.ok
        per_ep = episode_costs([(float(r["tokens_in"] or 0), float(r["tokens_out"] or 0)) for r in ok], p,
                               uptime[g.config_hash])
        out[g.config_hash] = ConfigCost(p, uptime[g.config_hash], per_ep, [r["task_id"] for r in ok],
                                        judge_cost[g.config_hash], judge_uptime[g.config_hash],
                                        g.config_hash in model_cfg)
    return out


def cost_rows(groups: list[ConfigGroup], costs: dict[str, ConfigCost], n_boot: int) -> list[CostRow]:
    rows = []
    for g in groups:
        c, ok = costs[g.config_hash], g.ok
        tok = stats.interval([episode_tokens(r) for r in ok], [r["task_id"] for r in ok], TOKENS, n_boot,
                             what="tokens per episode")
        ce = stats.interval(c.per_episode, c.tasks, COST, n_boot, what="cost per episode") if c.prices.configured else None
        rows.append(CostRow(g.label, tok, c, ce))
    return rows


def tokens_chart(groups: list[ConfigGroup], costs: dict[str, ConfigCost]) -> TokensChart | None:
    """The tokens (and, where priced, cost) per episode figure's data; None when no episode used a
    token (a rule-based run), so no empty figure is drawn. A configuration costing nothing has no
    cost bar."""
    data = [[episode_tokens(r) for r in g.ok] for g in groups]
    if not any(x > 0 for xs in data for x in xs):
        return None
    priced = [i for i, g in enumerate(groups) if costs[g.config_hash].prices.configured
              and any(x > 0 for x in costs[g.config_hash].per_episode)]
    cost = [(i, stats.interval(costs[groups[i].config_hash].per_episode, costs[groups[i].config_hash].tasks, COST,
                               what="cost per episode"))
            for i in priced]
    return TokensChart([g.label for g in groups], data, cost)
