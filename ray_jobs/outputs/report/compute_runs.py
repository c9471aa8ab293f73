"""What the report says about a run directory, as data (no formatting, no plots): per benchmark,
its configurations, one block of metrics per judge (intervals, paired tests, paper tables, the
benchmark's curve and per-task values), and tokens and cost per configuration."""

from __future__ import annotations

import itertools
import json
import logging
import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from engine.benchmarks import get_benchmark
from engine.budget.cost import Prices, episode_costs, judge_prices, model_prices, token_cost, uptime_cost
from engine.config import config_labels
from engine.hosting.events import causes, describe, read_events
from engine.protocol import Benchmark, Row
from engine.scoring import outcomes, stats
from engine.scoring import views as sv
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
    # per planned episode (in the block's scope), what its means count (engine/scoring/outcomes.py),
    # computed once: the metrics, intervals, paired tests and per-task values all use them
    values: list[dict[str, float]] = field(default_factory=list)
    value_tasks: list[str] = field(default_factory=list)           # the task of each entry of values
    judge: str = ""                 # the one judge whose judgements the rows carry ("" when none)
    self_judged: bool = False
    planned: list[outcomes.Planned] | None = None    # its plan (None: the stored rows)
    policy: str = "as_wrong"        # run.score_failures
    counts: outcomes.Counts | None = None             # over its whole plan
    task_set: str = ""

    @property
    def ok(self) -> list[Row]:
        return [r for r in self.rows if r["status"] == "ok"]

    def failures(self) -> dict[str, list[Row]]:
        """Its planned episodes without a scored result, by kind (``outcomes.error_kind``), the
        most frequent kind first."""
        planned = {p.episode_id for p in outcomes.plan_of(self.rows, self.planned)}
        kinds: dict[str, list[Row]] = {}
        for r in self.rows:
            if r["status"] != "ok" and r["episode_id"] in planned:
                kinds.setdefault(outcomes.error_kind(r), []).append(r)
        return dict(sorted(kinds.items(), key=lambda kv: -len(kv[1])))


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
    """One paired test. Its family, for the Holm correction, is every paired test of the same
    primary metric in the same judged block (one judge's view of one benchmark in one report):
    ``p_holm`` is ``test.p_value`` adjusted over the ``family_size`` tests of that family."""
    metric: str
    a: str                  # configuration labels
    b: str
    test: stats.PairedTest
    p_holm: float = float("nan")
    family_size: int = 0


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
    # what the comparisons of the block are over: the tasks every compared configuration finished
    # (engine/scoring/outcomes.py), or each configuration's own plan (--all-tasks)
    scope: str
    scope_note: str
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
    groups: list[ConfigGroup]           # each configuration over its whole plan (counts, incomplete)
    judge_filter: str | None
    judges: dict[str, dict[str, str]]   # every judge with rows here
    blocks: list[JudgedBlock]           # sorted by judge id
    costs: list[CostRow]
    tokens: TokensChart | None
    # what the model replicas went through (engine/hosting/events.py): cause -> count, diagnoses
    replicas: dict[str, int] = field(default_factory=dict)
    diagnoses: list[str] = field(default_factory=list)

    @property
    def no_match(self) -> bool:
        """A judge was asked for (``--judge``) and none here matches it."""
        return self.judge_filter is not None and not any(b.groups for b in self.blocks if b.judge)


# -- computing them ---------------------------------------------------------------------------------
def run_sections(root: Path, n_boot: int, prices: Mapping[str, Prices], judge: str | None = None,
                 all_tasks: bool = False, score_failures: str | None = None) -> list[BenchmarkSection]:
    probe = EpisodeStore(root)
    names = sorted({r["benchmark"] for r in probe.episodes().select(["benchmark"]).to_pylist()})
    return [benchmark_section(root, name, n_boot, prices, judge, all_tasks, score_failures) for name in names]


def _group(v: sv.ConfigView, label: str = "") -> ConfigGroup:
    return ConfigGroup(v.model, v.config_hash, json.loads(v.agent or "{}"), json.loads(v.data or "{}"), v.rows,
                       label, judge=v.judge, self_judged=v.self_judged, planned=v.planned, policy=v.policy,
                       counts=v.counts(), task_set=v.task_set)


def benchmark_section(root: Path, name: str, n_boot: int, prices: Mapping[str, Prices], judge: str | None,
                      all_tasks: bool = False, score_failures: str | None = None) -> BenchmarkSection:
    """One benchmark of a run dir: its configurations (each over its own plan, with counts), one
    block per judge (engine/scoring/outcomes.py: configurations compared on the tasks all of them
    finished, unless ``all_tasks``), and tokens and cost."""
    bench = get_benchmark(name)
    store = EpisodeStore(root, bench.episode_fields)
    views = sv.config_views(store, bench, None, score_failures)
    groups_by: dict[str, ConfigGroup] = {}
    for v in views:                       # one entry per configuration, whichever judge
        groups_by.setdefault(v.config_hash, _group(v))
    groups = sorted(groups_by.values(), key=lambda g: (g.model, json.dumps(g.agent, sort_keys=True), g.config_hash))
    label_groups(groups)
    labels = {g.config_hash: g.label for g in groups}
    judges = store.judges()
    # one block per judge: a configuration judged by two judges shows two sets of numbers
    chosen = sv.config_views(store, bench, judge, score_failures) if judge is not None else views
    blocks = []
    for jid in sorted({v.judge for v in chosen}):
        mine = [v for v in chosen if v.judge == jid]
        mine.sort(key=lambda v: [g.config_hash for g in groups].index(v.config_hash))
        blocks.append(judged_block(bench, name, jid, judges.get(jid, {}), mine, labels, n_boot, all_tasks))
    costs = run_costs(store, groups, prices)
    events = read_events(store)
    return BenchmarkSection(name, root, n_boot, groups, judge, judges, blocks,
                            cost_rows(groups, costs, n_boot), tokens_chart(groups, costs), causes(events),
                            [ln.strip() for ln in describe(events) if ln.startswith("  ")])


@dataclass(frozen=True)
class Entry:
    """One configuration on a leaderboard."""
    rank: str                   # "1", or "1=" when tied (competition ranking: 1=, 1=, 3)
    label: str
    root: str                   # its run dir
    estimate: stats.Estimate
    counts: outcomes.Counts
    marks: tuple[str, ...]      # INCOMPLETE, SELF-JUDGED, the benchmark's config warnings (AUDIT_UNSAFE)
    vs_leader: str              # "leader" | "interval overlaps the leader's" | "below the leader's interval"


@dataclass(frozen=True)
class Leaderboard:
    """One judge's configurations ranked by one primary metric (never across judges)."""
    judge: str
    metric: str
    lower_is_better: bool
    self_judged: bool
    scope_note: str             # what the values are over (the judge's block's note)
    entries: list[Entry]


@dataclass
class CrossRunSection:
    """One benchmark over several run dirs: every configuration of every dir in one table (a
    configuration run in two dirs appears twice, labelled by dir), compared on the tasks all of
    them finished, and a leaderboard per judge and primary metric."""
    name: str
    roots: list[Path]
    n_boot: int
    blocks: list[JudgedBlock]
    leaderboards: list[Leaderboard]


def cross_run_section(roots: list[Path], name: str, n_boot: int, judge: str | None = None, all_tasks: bool = False,
                      score_failures: str | None = None) -> CrossRunSection:
    bench = get_benchmark(name)
    views: list[sv.ConfigView] = []
    judges: dict[str, dict[str, str]] = {}
    where: dict[str, Path] = {}
    for i, root in enumerate(roots):
        store = EpisodeStore(root, bench.episode_fields)
        judges |= store.judges()
        for v in sv.config_views(store, bench, judge, score_failures):
            key = f"{v.config_hash}@{i}"       # one entry per configuration and run dir
            where[key] = root
            views.append(replace(v, config_hash=key))
    groups: dict[str, ConfigGroup] = {}
    for v in views:
        groups.setdefault(v.config_hash, _group(v))
    ordered = sorted(groups.values(), key=lambda g: (g.model, json.dumps(g.agent, sort_keys=True), g.config_hash))
    label_groups(ordered)
    labels = {g.config_hash: f"{g.label} ({where[g.config_hash].name})" for g in ordered}
    blocks = [judged_block(bench, name, jid, judges.get(jid, {}), [v for v in views if v.judge == jid], labels,
                           n_boot, all_tasks) for jid in sorted({v.judge for v in views})]
    boards = [board for b in blocks for m in bench.primary_metrics
              if (board := leaderboard(bench, b, m, {h: str(r) for h, r in where.items()})) is not None]
    return CrossRunSection(name, roots, n_boot, blocks, boards)


def leaderboard(bench: Benchmark[Any], b: JudgedBlock, metric: str, where: Mapping[str, str]) -> Leaderboard | None:
    """``b``'s configurations ranked by ``metric``: equal values (to the printed precision) share a
    rank; each says whether its interval overlaps the leader's. Configurations without a value
    (nothing the metric is defined on) are listed last, unranked."""
    from ray_jobs.outputs.report.page import num

    lower = metric in getattr(bench, "lower_is_better", ())
    have = [(g, e) for g in b.groups if (e := b.estimates.get(g.config_hash, {}).get(metric)) is not None]
    if not have:
        return None
    valued = sorted([ge for ge in have if not math.isnan(ge[1].value)], key=lambda ge: ge[1].value, reverse=not lower)
    lead = valued[0][1] if valued else None
    entries = []
    for g, e in valued:
        first = next(j for j, (_, x) in enumerate(valued) if num(x.value) == num(e.value))
        tied = sum(num(x.value) == num(e.value) for _, x in valued) > 1
        entries.append(Entry(f"{first + 1}{'=' * tied}", g.label, where.get(g.config_hash, ""), e, _counts(g),
                             _marks(bench, g), _vs(e, lead, lower)))
    entries += [Entry("-", g.label, where.get(g.config_hash, ""), e, _counts(g), _marks(bench, g), "no value")
                for g, e in have if math.isnan(e.value)]
    return Leaderboard(b.judge, metric, lower, any(g.self_judged for g in b.groups), b.scope_note, entries)


def _counts(g: ConfigGroup) -> outcomes.Counts:
    return g.counts or outcomes.count(g.rows, g.planned)


def _marks(bench: Benchmark[Any], g: ConfigGroup) -> tuple[str, ...]:
    from engine.scoring.judges import SELF_JUDGED

    return (("INCOMPLETE",) * _counts(g).incomplete + (outcomes.PARTIALLY_JUDGED,) * _counts(g).partially_judged
            + (SELF_JUDGED.upper(),) * g.self_judged
            + tuple(w.split(":")[0].strip() for w in bench.config_warnings(g.agent)))


def _vs(e: stats.Estimate, lead: stats.Estimate | None, lower: bool) -> str:
    """Where ``e`` stands against the leader: the same value, an interval overlapping the
    leader's, or clearly behind it (no interval: only the value is compared)."""
    from ray_jobs.outputs.report.page import num

    if lead is None or num(e.value) == num(lead.value):
        return "leader"
    if math.isnan(e.lo) or math.isnan(lead.lo):
        return "behind (no interval)"
    overlap = e.hi >= lead.lo if not lower else e.lo <= lead.hi
    return "interval overlaps the leader's" if overlap else "behind, intervals apart"


def judged_block(bench: Benchmark[Any], name: str, judge: str, info: dict[str, str],
                 views: list[sv.ConfigView], labels: dict[str, str], n_boot: int,
                 all_tasks: bool = False) -> JudgedBlock:
    """Metrics with intervals, paired tests, paper tables, curve and per-task values of
    configurations seen through one judge (or none), compared on the tasks every configuration of
    a dataset finished (``all_tasks``: each over its own plan)."""
    scoped: list[tuple[sv.ConfigView, list[outcomes.Planned] | None]] = []
    special: dict[str, dict[str, set[str]]] = {}        # config hash -> metric -> its comparable tasks
    notes = []
    for fam in sv.families(views).values():
        if all_tasks or len(fam) < 2:
            scoped += [(v, v.planned) for v in fam]
            continue
        done = [outcomes.finished_tasks(v.rows, v.planned) for v in fam]
        common = set.intersection(*done)
        union = set().union(*(outcomes.planned_tasks(v.rows, v.planned) for v in fam))
        notes.append(outcomes.common_note(len(common), len(union - common), len(fam), sum(not d for d in done)))
        # no task every configuration finished: each over its own plan (the note says so)
        scoped += [(v, outcomes.restrict(v.rows, v.planned, common) if common else v.planned) for v in fam]
        # a metric some finished episodes have no value of is compared on the tasks that have it
        per_metric = outcomes.metric_common([outcomes.lacking(bench, v.rows, v.planned, v.policy, bool(v.judge))
                                             for v in fam], common) if common else {}
        special |= {v.config_hash: per_metric for v in fam}
        notes += [outcomes.metric_note(m, s, common) for m, s in sorted(per_metric.items())]
    if all_tasks and len(views) > 1:
        notes.append("Each configuration over its own plan (--all-tasks): configurations may cover different "
                     "tasks; failures count as the policy of each says.")
    ests: dict[str, dict[str, stats.Estimate]] = {}
    plain: dict[str, dict[str, tuple[float, int]]] = {}
    order: list[str] = []
    metric_rows: list[Row] = []
    groups: list[ConfigGroup] = []
    for v, planned in scoped:
        g = _group(v, labels.get(v.config_hash, v.config_hash))
        mrows, counts = sv.metric_rows_of(bench, v, planned)
        c_all = g.counts or counts
        metric_rows += [{"benchmark": name, "model": g.model, "config_hash": g.config_hash,
                         "agent": json.dumps(g.agent), "data": json.dumps(g.data), "judge": g.judge,
                         "self_judged": g.self_judged, "metric": m.metric, "value": m.value, "n": m.n,
                         "lo": m.lo, "hi": m.hi, "interval": m.interval,
                         **c_all.columns()} for m in mrows]
        own = {m: outcomes.restrict(v.rows, v.planned, s) if s else v.planned
               for m, s in special.get(v.config_hash, {}).items()}     # metrics compared on fewer tasks
        for m, planned_m in own.items():
            alt = {r.metric: r for r in sv.metric_rows_of(bench, v, planned_m)[0]}
            mrows = [alt.get(m, r) if r.metric == m else r for r in mrows]
        plain[g.config_hash] = {m.metric: (m.value, m.n) for m in mrows}
        order += [m.metric for m in mrows if m.metric not in order]
        evs = outcomes.episode_values(bench, v.rows, planned, v.policy, bool(v.judge))
        g.values = [e.values for e in evs]
        g.value_tasks = [e.planned.task_id for e in evs]
        ests[g.config_hash] = {}
        for m in {k for vals in g.values for k in vals}:
            if m in own:
                evm = outcomes.episode_values(bench, v.rows, own[m], v.policy, bool(v.judge))
                xs, tasks = [e.values.get(m, float("nan")) for e in evm], [e.planned.task_id for e in evm]
            else:
                xs, tasks = [vals.get(m, float("nan")) for vals in g.values], g.value_tasks
            e = stats.interval(xs, tasks, n_boot, seed=0)
            ests[g.config_hash][m] = e
            want = plain[g.config_hash].get(m)
            if want is not None and not math.isnan(want[0]) and not math.isclose(e.value, want[0], rel_tol=1e-9,
                                                                                  abs_tol=1e-9):
                log.warning("%s %s: per-episode mean %.6g differs from the metric %.6g", name, m, e.value, want[0])
        groups.append(g)
    scope = outcomes.ALL if all_tasks or not notes else outcomes.COMMON
    return JudgedBlock(judge, info, groups, scope, " ".join(notes), order, ests, plain,
                       paired_rows(bench, groups, n_boot), bench.tables(metric_rows), curve(bench, groups, ests),
                       per_task(bench, groups))


def paired_rows(bench: Benchmark[Any], groups: list[ConfigGroup], n_boot: int) -> list[PairedRow] | None:
    """Paired tests on the benchmark's primary metrics between configurations sharing tasks
    (``groups``: one judged block). Each metric's tests are one family: their p-values are
    Holm-adjusted together (``stats.holm``), so a block with k configurations reports at most
    k(k-1)/2 tests per metric at a family-wise error rate of alpha, not one per pair."""
    pairs = [(a, b) for a, b in itertools.combinations(groups, 2) if set(a.value_tasks) & set(b.value_tasks)]
    if not (pairs and bench.primary_metrics):
        return None
    rows = []
    for m in bench.primary_metrics:
        tests = [(a, b, stats.paired_test(per_task_values(a, m), per_task_values(b, m), n_boot)) for a, b in pairs]
        tests = [(a, b, t) for a, b, t in tests if t.n_tasks]
        adjusted = stats.holm([t.p_value for _, _, t in tests])
        family = sum(not math.isnan(t.p_value) for _, _, t in tests)
        rows += [PairedRow(m, a.label, b.label, t, p, family) for (a, b, t), p in zip(tests, adjusted)]
    return rows


def per_task_values(g: ConfigGroup, metric: str) -> dict[str, float]:
    """``metric`` per task, averaged over the task's episodes (seeds) that have a value."""
    acc: dict[str, list[float]] = defaultdict(list)
    for t, v in zip(g.value_tasks, g.values):
        if metric in v and not math.isnan(v[metric]):
            acc[t].append(v[metric])
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
        tok = stats.interval([episode_tokens(r) for r in ok], [r["task_id"] for r in ok], n_boot)
        ce = stats.interval(c.per_episode, c.tasks, n_boot) if c.prices.configured else None
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
    cost = [(i, stats.interval(costs[groups[i].config_hash].per_episode, costs[groups[i].config_hash].tasks))
            for i in priced]
    return TokensChart([g.label for g in groups], data, cost)
