"""What the report says about a run directory, as data (no formatting, no plots): per benchmark,
its configurations, one block of metrics per judge (intervals, paired tests, paper tables, the
benchmark's curve and per-task values), and tokens and cost per configuration."""

from __future__ import annotations

import itertools
import json
import logging
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from engine import stats
from engine.benchmarks import get_benchmark
from engine.config import config_labels
from engine.cost import Prices, episode_costs, judge_prices, model_prices, token_cost, uptime_cost
from engine.judges import judged_views
from engine.protocol import Benchmark, Row
from engine.storage import EpisodeStore

log = logging.getLogger("dateline.report")


@dataclass
class ConfigGroup:
    model: str
    config_hash: str
    agent: dict[str, Any]
    data: dict[str, Any]
    rows: list[Row]
    label: str = ""
    values: list[dict[str, float]] = field(default_factory=list)   # bench.episode_values(rows), computed once
    judge: str = ""                 # the one judge whose judgements the rows carry ("" when none)
    self_judged: bool = False

    @property
    def ok(self) -> list[Row]:
        return [r for r in self.rows if r["status"] == "ok"]


def label_groups(groups: list[ConfigGroup]) -> None:
    """Label each configuration by its model and the agent/benchmark settings that differ."""
    names = config_labels([(g.model, g.agent | {k: v for k, v in g.data.items() if k != "limit"}, g.config_hash)
                           for g in groups])
    for g, name in zip(groups, names):
        g.label = name


def episode_tokens(r: Row) -> float:
    return float((r["tokens_in"] or 0) + (r["tokens_out"] or 0))


# -- sections ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PairedRow:
    metric: str
    a: str                  # configuration labels
    b: str
    test: stats.PairedTest


@dataclass(frozen=True)
class Curve:
    """The benchmark's curve (``bench.curve``): one series per setting of everything but ``xfield``."""
    xfield: str
    metric: str
    series: list[tuple[str, list[tuple[float, stats.Estimate]]]]     # (key, points sorted by x), keys sorted


@dataclass(frozen=True)
class PerTask:
    """``metric`` task by task (mean over seeds), per configuration (in the block's order)."""
    metric: str
    tasks: list[str]
    values: list[dict[str, float]]


@dataclass
class JudgedBlock:
    """Configurations seen through one judge ("" for none)."""
    judge: str
    judge_info: dict[str, str]          # model, kind, prompt as the store records them
    groups: list[ConfigGroup]
    metrics: list[str]                  # row order of the metrics table
    estimates: dict[str, dict[str, stats.Estimate]]     # config hash -> metric -> per-episode mean, interval
    plain: dict[str, dict[str, tuple[float, int]]]      # config hash -> metric -> (value, n) from bench.metrics
    paired: list[PairedRow] | None      # None: no paired section (no shared tasks or primary metrics)
    paper_tables: dict[str, str]        # title -> Markdown, from bench.tables
    curve: Curve | None
    per_task: PerTask | None

    @property
    def self_judged(self) -> bool:
        return any(g.self_judged for g in self.groups)


@dataclass(frozen=True)
class ConfigCost:
    """Tokens and cost of one configuration's runs in a run directory."""
    prices: Prices
    uptime_s: float
    per_episode: list[float]            # aligned with the configuration's ok rows
    tasks: list[str]
    judge_token_cost: float
    judge_uptime_cost: float
    recorded: bool                      # a run of it recorded cost accounting (uptime, model config)

    @property
    def generation(self) -> float:
        return sum(self.per_episode)

    @property
    def total(self) -> float:
        return self.generation + self.judge_token_cost + self.judge_uptime_cost


@dataclass(frozen=True)
class CostRow:
    label: str
    tokens: stats.Estimate              # tokens per ok episode (in + out)
    cost: ConfigCost
    per_episode: stats.Estimate | None  # None: no prices configured


@dataclass(frozen=True)
class TokensChart:
    labels: list[str]
    tokens: list[list[float]]           # per configuration, per ok episode
    cost: list[tuple[int, stats.Estimate]]   # (index into labels, cost per episode) of priced configurations


@dataclass
class BenchmarkSection:
    name: str
    root: Path
    n_boot: int
    groups: list[ConfigGroup]
    judge_filter: str | None
    judges: dict[str, dict[str, str]]   # every judge with rows here
    blocks: list[JudgedBlock]           # sorted by judge id
    costs: list[CostRow]
    tokens: TokensChart | None

    @property
    def no_match(self) -> bool:
        """A judge was asked for (``--judge``) and none here matches it."""
        return self.judge_filter is not None and not any(b.groups for b in self.blocks if b.judge)


# -- computing them ---------------------------------------------------------------------------------
def run_sections(root: Path, n_boot: int, prices: Mapping[str, Prices], judge: str | None = None
                 ) -> list[BenchmarkSection]:
    probe = EpisodeStore(root)
    names = sorted({r["benchmark"] for r in probe.episodes().select(["benchmark"]).to_pylist()})
    return [benchmark_section(root, name, n_boot, prices, judge) for name in names]


def benchmark_section(root: Path, name: str, n_boot: int, prices: Mapping[str, Prices], judge: str | None
                      ) -> BenchmarkSection:
    bench = get_benchmark(name)
    store = EpisodeStore(root, bench.episode_fields)
    by: dict[str, ConfigGroup] = {}
    for r in store.episodes().to_pylist():
        if r["benchmark"] != name:
            continue
        g = by.setdefault(r["config_hash"], ConfigGroup(r["model"], r["config_hash"], json.loads(r["agent"] or "{}"),
                                                         json.loads(r["data"] or "{}"), []))
        g.rows.append(r)
    groups = sorted(by.values(), key=lambda g: (g.model, json.dumps(g.agent, sort_keys=True), g.config_hash))
    label_groups(groups)
    # one block per judge: a configuration judged by two judges shows two sets of numbers
    by_judge = store.judgements_by_judge(bench.parse_judgement)
    judges = store.judges()
    views: dict[str, list[ConfigGroup]] = defaultdict(list)
    for g in groups:
        for v in judged_views(g.rows, by_judge, judges, judge):
            views[v.judge].append(ConfigGroup(g.model, g.config_hash, g.agent, g.data, v.rows, g.label,
                                              judge=v.judge, self_judged=v.self_judged))
    blocks = [judged_block(bench, name, jid, judges.get(jid, {}), views[jid], n_boot) for jid in sorted(views)]
    costs = run_costs(store, groups, prices)
    return BenchmarkSection(name, root, n_boot, groups, judge, judges, blocks,
                            cost_rows(groups, costs, n_boot), tokens_chart(groups, costs))


def judged_block(bench: Benchmark[Any], name: str, judge: str, info: dict[str, str], groups: list[ConfigGroup],
                 n_boot: int) -> JudgedBlock:
    """Metrics with intervals, paired tests, paper tables, curve and per-task values of
    configurations seen through one judge (or none)."""
    ests: dict[str, dict[str, stats.Estimate]] = {}
    plain: dict[str, dict[str, tuple[float, int]]] = {}
    order: list[str] = []
    metric_rows: list[Row] = []
    for g in groups:
        mrows = bench.metrics(g.rows)
        metric_rows += [{"benchmark": name, "model": g.model, "config_hash": g.config_hash,
                         "agent": json.dumps(g.agent), "data": json.dumps(g.data), "judge": g.judge,
                         "self_judged": g.self_judged, "metric": m.metric, "value": m.value, "n": m.n} for m in mrows]
        plain[g.config_hash] = {m.metric: (m.value, m.n) for m in mrows}
        order += [m.metric for m in mrows if m.metric not in order]
        vals = g.values = bench.episode_values(g.rows)
        tasks = [r["task_id"] for r in g.rows]
        ests[g.config_hash] = {}
        for m in {k for v in vals for k in v}:
            xs = [v.get(m, float("nan")) for v in vals]
            e = stats.cluster_mean(xs, tasks, n_boot, seed=0)
            ests[g.config_hash][m] = e
            want = plain[g.config_hash].get(m)
            if want is not None and not math.isnan(want[0]) and not math.isclose(e.value, want[0], rel_tol=1e-9,
                                                                                  abs_tol=1e-9):
                log.warning("%s %s: per-episode mean %.6g differs from the metric %.6g", name, m, e.value, want[0])
    return JudgedBlock(judge, info, groups, order, ests, plain, paired_rows(bench, groups, n_boot),
                       bench.tables(metric_rows), curve(bench, groups, ests), per_task(bench, groups))


def paired_rows(bench: Benchmark[Any], groups: list[ConfigGroup], n_boot: int) -> list[PairedRow] | None:
    """Paired tests on the benchmark's primary metrics between configurations sharing tasks."""
    pairs = [(a, b) for a, b in itertools.combinations(groups, 2)
             if {r["task_id"] for r in a.rows} & {r["task_id"] for r in b.rows}]
    if not (pairs and bench.primary_metrics):
        return None
    rows = []
    for m in bench.primary_metrics:
        for a, b in pairs:
            t = stats.paired_test(per_task_values(a, m), per_task_values(b, m), n_boot)
            if t.n_tasks:
                rows.append(PairedRow(m, a.label, b.label, t))
    return rows


def per_task_values(g: ConfigGroup, metric: str) -> dict[str, float]:
    """``metric`` per task, averaged over the task's episodes (seeds) that have a value."""
    acc: dict[str, list[float]] = defaultdict(list)
    for r, v in zip(g.rows, g.values):
        if metric in v and not math.isnan(v[metric]):
            acc[r["task_id"]].append(v[metric])
    return {t: float(np.mean(x)) for t, x in acc.items()}


def curve(bench: Benchmark[Any], groups: list[ConfigGroup], ests: dict[str, dict[str, stats.Estimate]]
          ) -> Curve | None:
    if not bench.curve:
        return None
    xfield, metric = bench.curve
    lines: dict[str, list[tuple[float, stats.Estimate]]] = defaultdict(list)
    for g in groups:
        if xfield not in g.agent or metric not in ests[g.config_hash]:
            continue
        rest = {k: v for k, v in g.agent.items() if k != xfield}
        key = f"{g.model} {json.dumps(rest, sort_keys=True)} {json.dumps(g.data, sort_keys=True)}"
        lines[key].append((float(g.agent[xfield]), ests[g.config_hash][metric]))
    series = [(k, sorted(v, key=lambda p: p[0])) for k, v in sorted(lines.items()) if len(v) >= 2]
    return Curve(xfield, metric, series) if series else None


def per_task(bench: Benchmark[Any], groups: list[ConfigGroup]) -> PerTask | None:
    metric = bench.per_task_metric
    if not metric:
        return None
    values = [per_task_values(g, metric) for g in groups]
    tasks = sorted({t for v in values for t in v})
    return PerTask(metric, tasks, values) if tasks else None


# -- tokens and cost --------------------------------------------------------------------------------
def run_costs(store: EpisodeStore, groups: list[ConfigGroup], prices: Mapping[str, Prices]) -> dict[str, ConfigCost]:
    """Per config hash: uptime paid, prices, per-episode costs (aligned with the group's ok rows),
    and the judge's cost (tokens, and the uptime of a judge with replicas of its own), all at the
    prices each run recorded unless ``prices`` overrides a model's (``engine.cost``)."""
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
        tok = stats.cluster_mean([episode_tokens(r) for r in ok], [r["task_id"] for r in ok], n_boot)
        ce = stats.cluster_mean(c.per_episode, c.tasks, n_boot) if c.prices.configured else None
        rows.append(CostRow(g.label, tok, c, ce))
    return rows


def tokens_chart(groups: list[ConfigGroup], costs: dict[str, ConfigCost]) -> TokensChart | None:
    data = [[episode_tokens(r) for r in g.ok] for g in groups]
    if not any(data):
        return None
    priced = [i for i, g in enumerate(groups) if costs[g.config_hash].prices.configured
              and costs[g.config_hash].per_episode]
    cost = [(i, stats.cluster_mean(costs[groups[i].config_hash].per_episode, costs[groups[i].config_hash].tasks))
            for i in priced]
    return TokensChart([g.label for g in groups], data, cost)
