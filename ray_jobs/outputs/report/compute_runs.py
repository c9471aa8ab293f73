"""What the report says about a run directory, as data (no formatting, no plots): per benchmark,
its configurations, one block of metrics per judge (intervals, paired tests, paper tables, the
benchmark's curve and per-task values), and tokens and cost per configuration (``costs``). The
dataclasses are in ``sections``; several run dirs together are ``leaderboard``'s."""

from __future__ import annotations

import itertools
import json
import logging
import math
from collections import defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from engine.benchmarks import get_benchmark
from engine.budget.cost import Prices
from engine.hosting.events import causes, describe, read_events
from engine.protocol import Benchmark, Row
from engine.scoring import cutoff, judge_checks, outcomes, stats
from engine.scoring import views as sv
from engine.scoring.kinds import kind_of
from engine.scoring.race_view import UNTOUCHED, RaceView, split_stopped
from engine.storage import EpisodeStore
from ray_jobs.outputs.report.costs import cost_rows, run_costs, tokens_chart
from ray_jobs.outputs.report.sections import (
    BenchmarkSection,
    ConfigGroup,
    Curve,
    JudgedBlock,
    PairedRow,
    PerTask,
    label_groups,
)

log = logging.getLogger("dateline.report")


def run_sections(root: Path, n_boot: int, prices: Mapping[str, Prices], judge: str | None = None,
                 all_tasks: bool = False, score_failures: str | None = None) -> list[BenchmarkSection]:
    probe = EpisodeStore(root)
    names = sorted({r["benchmark"] for r in probe.episodes().select(["benchmark"]).to_pylist()})
    return [benchmark_section(root, name, n_boot, prices, judge, all_tasks, score_failures) for name in names]


def config_group(v: sv.ConfigView, label: str = "", race: RaceView | None = None) -> ConfigGroup:
    """A configuration as one judge's view shows it (its rows, plan, policy and counts; the mark
    of its run dir's race when it stopped it)."""
    return ConfigGroup(v.model, v.config_hash, json.loads(v.agent or "{}"), json.loads(v.data or "{}"), v.rows,
                       label, judge=v.judge, self_judged=v.self_judged, planned=v.planned, policy=v.policy,
                       counts=v.counts(), task_set=v.task_set, knowledge_cutoff=v.knowledge_cutoff,
                       race=race.mark if race is not None and race.stopped(v.config_hash) else "")


def benchmark_section(root: Path, name: str, n_boot: int, prices: Mapping[str, Prices], judge: str | None,
                      all_tasks: bool = False, score_failures: str | None = None) -> BenchmarkSection:
    """One benchmark of a run dir: its configurations (each over its own plan, with counts), one
    block per judge (engine/scoring/outcomes.py: configurations compared on the tasks all of them
    finished, unless ``all_tasks``), and tokens and cost."""
    bench = get_benchmark(name)
    store = EpisodeStore(root, bench.episode_fields)
    views = sv.config_views(store, bench, None, score_failures)
    race = RaceView.read(store)                 # an adaptive run's decisions (engine/scoring/race_view.py)
    groups_by: dict[str, ConfigGroup] = {}
    for v in views:                       # one entry per configuration, whichever judge
        groups_by.setdefault(v.config_hash, config_group(v, race=race))
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
        blocks.append(judged_block(bench, name, jid, judges.get(jid, {}), mine, labels, n_boot, all_tasks, race))
    costs = run_costs(store, groups, prices)
    events = read_events(store)
    return BenchmarkSection(name, root, n_boot, groups, judge, judges, blocks,
                            cost_rows(groups, costs, n_boot), tokens_chart(groups, costs), causes(events),
                            [ln.strip() for ln in describe(events) if ln.startswith("  ")])


def judged_block(bench: Benchmark[Any], name: str, judge: str, info: dict[str, str],
                 views: list[sv.ConfigView], labels: dict[str, str], n_boot: int,
                 all_tasks: bool = False, race: RaceView | Mapping[str, RaceView] | None = None) -> JudgedBlock:
    """Metrics with intervals, paired tests, paper tables, curve and per-task values of
    configurations seen through one judge (or none), compared on the tasks every configuration of
    a dataset finished (``all_tasks``: each over its own plan). ``race``: the run dir's race, or
    per view key the race of its run dir (several run dirs): a configuration it stopped early is
    shown by its decision interval (or SCREENING), left out of the common tasks and the paired tests."""
    race_of = _race_of(race)
    stopped = {v.config_hash for v in views if (r := race_of(v.config_hash)) is not None and r.stopped(v.config_hash)}
    scoped, special, notes = _scopes(bench, views, all_tasks, stopped)
    ests: dict[str, dict[str, stats.Estimate]] = {}
    plain: dict[str, dict[str, tuple[float, int]]] = {}
    order: list[str] = []
    metric_rows: list[Row] = []
    groups: list[ConfigGroup] = []
    for v, planned in scoped:
        rc = race_of(v.config_hash)
        g = config_group(v, labels.get(v.config_hash, v.config_hash), rc)
        mrows, counts = sv.metric_rows_of(bench, v, planned)
        c_all = g.counts or counts
        mine = [{"benchmark": name, "model": g.model, "config_hash": g.config_hash,
                 "agent": json.dumps(g.agent), "data": json.dumps(g.data), "judge": g.judge,
                 "self_judged": g.self_judged, "metric": m.metric, "value": m.value, "n": m.n,
                 "lo": m.lo, "hi": m.hi, "interval": m.interval, "knowledge_cutoff": v.knowledge_cutoff or None,
                 **c_all.columns()} for m in mrows]
        metric_rows += [rc.row(r) for r in mine] if rc is not None else mine
        own = {m: outcomes.restrict(v.rows, v.planned, s) if s else v.planned
               for m, s in special.get(v.config_hash, {}).items()}     # metrics compared on fewer tasks
        for m, planned_m in own.items():
            alt = {r.metric: r for r in sv.metric_rows_of(bench, v, planned_m)[0]}
            mrows = [alt.get(m, r) if r.metric == m else r for r in mrows]
        plain[g.config_hash] = {m.metric: (m.value, m.n) for m in mrows}
        if g.config_hash in stopped and rc is not None and not rc.screening:       # no bare mean of it anywhere
            plain[g.config_hash] = {k: (math.nan if k not in UNTOUCHED else x, n)
                                    for k, (x, n) in plain[g.config_hash].items()}
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
            e = stats.interval(xs, tasks, kind_of(bench, m), n_boot, seed=0, what=f"{name} {m}")
            want = plain[g.config_hash].get(m)
            if rc is not None:
                e = rc.estimate(g.config_hash, m, e)
            ests[g.config_hash][m] = e
            if want is not None and not math.isnan(want[0]) and not math.isclose(e.value, want[0], rel_tol=1e-9,
                                                                                  abs_tol=1e-9):
                log.warning("%s %s: per-episode mean %.6g differs from the metric %.6g", name, m, e.value, want[0])
        # the means over the questions after the model's knowledge cutoff (engine/scoring/cutoff.py)
        after = cutoff.after_estimates(bench, v.rows, planned, evs, v.knowledge_cutoff, v.dates, n_boot)
        ests[g.config_hash] |= {k: rc.estimate(g.config_hash, k, e) for k, e in after.items()} if rc is not None else after
        groups.append(g)
    scope = outcomes.ALL if all_tasks or not notes else outcomes.COMMON
    return JudgedBlock(judge, info, groups, scope, " ".join(notes), order, ests, plain,
                       paired_rows(bench, [g for g in groups if g.config_hash not in stopped], n_boot),
                       _paper_tables(bench, metric_rows), curve(bench, groups, ests),
                       per_task(bench, groups), judge_checks.failures(bench, metric_rows).get(judge, ""))


def _paper_tables(bench: Benchmark[Any], rows: list[Row]) -> dict[str, str]:
    """The benchmark's tables of the configurations a race kept, and one table of those it stopped."""
    kept, stopped = split_stopped(rows, bench.primary_metrics)
    return bench.tables([dict(r) for r in kept]) | stopped


def _race_of(race: RaceView | Mapping[str, RaceView] | None) -> Callable[[str], RaceView | None]:
    if race is None or isinstance(race, RaceView):
        return lambda _key: race
    return race.get


def _scopes(bench: Benchmark[Any], views: list[sv.ConfigView], all_tasks: bool = False,
            stopped: frozenset[str] | set[str] = frozenset()) -> tuple[list[tuple[sv.ConfigView, list[outcomes.Planned] | None]], dict[str, dict[str, set[str]]],
                      list[str]]:
    """What each configuration of a judged block is compared on: (view, its plan restricted to the
    tasks every configuration of its dataset finished, or its own plan with ``all_tasks``); per
    config hash, the metrics compared on fewer tasks (those some finished episodes have no value
    of) and their tasks; and the notes that say so."""
    scoped: list[tuple[sv.ConfigView, list[outcomes.Planned] | None]] = []
    special: dict[str, dict[str, set[str]]] = {}        # config hash -> metric -> its comparable tasks
    notes = []
    for fam in sv.families(views).values():
        if all_tasks or len(fam) < 2:
            scoped += [(v, v.planned) for v in fam]
            continue
        # members that finished nothing, or that a race stopped early, are left out (issue 46)
        done = [set() if v.config_hash in stopped else outcomes.finished_tasks(v.rows, v.planned) for v in fam]
        common = outcomes.common_set(done)
        union = set().union(*(outcomes.planned_tasks(v.rows, v.planned) for v in fam))
        n_stopped = sum(v.config_hash in stopped for v in fam)
        notes.append(outcomes.common_note(len(common), len(union - common), len(fam), sum(not d for d in done) - n_stopped,
                                          n_stopped))
        # no task every configuration finished: each over its own plan (the note says so); a stopped
        # configuration is shown by its decision interval, over its own plan
        scoped += [(v, outcomes.restrict(v.rows, v.planned, common) if common and v.config_hash not in stopped
                    else v.planned) for v in fam]
        # a metric some finished episodes have no value of is compared on the tasks that have it
        per_metric = outcomes.metric_common([outcomes.lacking(bench, v.rows, v.planned, v.policy, bool(v.judge))
                                             for v, d in zip(fam, done) if d], common) if common else {}
        special |= {v.config_hash: per_metric for v in fam}
        notes += [outcomes.metric_note(m, s, common) for m, s in sorted(per_metric.items())]
    if all_tasks and len(views) > 1:
        notes.append("Each configuration over its own plan (--all-tasks): configurations may cover different "
                     "tasks; failures count as the policy of each says.")
    return scoped, special, notes


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

