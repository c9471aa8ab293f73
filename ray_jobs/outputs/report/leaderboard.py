"""One benchmark over several run directories (``dateline report DIR DIR...``): every
configuration of every dir in one table, compared on the tasks all of them finished, and a
leaderboard per judge and primary metric, ranked at the precision the report prints."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine.benchmarks import get_benchmark
from engine.protocol import Benchmark
from engine.scoring import cutoff, outcomes, stats
from engine.scoring import views as sv
from engine.scoring.judges import SELF_JUDGED
from engine.scoring.outcome_marks import warnings_of
from engine.scoring.race_view import RACED, RaceView
from engine.storage import EpisodeStore
from ray_jobs.outputs.report.compute_runs import config_group, judged_block
from ray_jobs.outputs.report.sections import ConfigGroup, JudgedBlock, label_groups, num


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
    also: stats.Estimate | None = None      # the board's other number (Leaderboard.also), None: none
    also_missing: str = ""                  # why it has none ("cutoff unknown", ...)
    race: str = ""                          # STOPPED EARLY or SCREENING (engine/scoring/race_view.py)


@dataclass(frozen=True)
class Leaderboard:
    """One judge's configurations ranked by one primary metric (never across judges)."""
    judge: str
    metric: str
    lower_is_better: bool
    self_judged: bool
    scope_note: str             # what the values are over (the judge's block's note)
    entries: list[Entry]
    # a dated benchmark (engine/scoring/cutoff.py): the number shown beside the ranked one (the
    # metric over all questions, or after each model's knowledge cutoff), and what it ranks on and why
    also: str = ""
    ranking_note: str = ""
    judge_check: str = ""       # its judge failed its own checks: why (engine/scoring/judge_checks.py)


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
    races: dict[str, RaceView] = {}             # view key -> the race of its run dir (race_view.py)
    for i, root in enumerate(roots):
        store = EpisodeStore(root, bench.episode_fields)
        judges |= store.judges()
        race = RaceView.read(store)
        for v in sv.config_views(store, bench, judge, score_failures):
            key = f"{v.config_hash}@{i}"       # one entry per configuration and run dir
            where[key] = root
            views.append(replace(v, config_hash=key))
            if race is not None:
                races[key] = race
    groups: dict[str, ConfigGroup] = {}
    for v in views:
        groups.setdefault(v.config_hash, config_group(v))
    ordered = sorted(groups.values(), key=lambda g: (g.model, json.dumps(g.agent, sort_keys=True), g.config_hash))
    label_groups(ordered)
    labels = {g.config_hash: f"{g.label} ({where[g.config_hash].name})" for g in ordered}
    blocks = [judged_block(bench, name, jid, judges.get(jid, {}), [v for v in views if v.judge == jid], labels,
                           n_boot, all_tasks, races) for jid in sorted({v.judge for v in views})]
    boards = [board for b in blocks for m in bench.primary_metrics
              if (board := ranked(bench, b, m, {h: str(r) for h, r in where.items()})) is not None]
    return CrossRunSection(name, roots, n_boot, blocks, boards)


def ranked(bench: Benchmark[Any], b: JudgedBlock, metric: str, where: Mapping[str, str]) -> Leaderboard | None:
    """The leaderboard of ``metric``. For dated questions (engine/scoring/cutoff.py) it ranks on the
    questions after each model's knowledge cutoff when every configuration on it has a cutoff and
    a question after it, with the metric over all questions beside it; else over all questions,
    saying which configuration keeps it from ranking after the cutoff."""
    if not cutoff.splits(bench):
        return leaderboard(bench, b, metric, where)
    post = metric + cutoff.SUFFIX
    lacking = [f"{g.label} ({_missing(g, post)})" for g in b.groups if post not in b.estimates.get(g.config_hash, {})]
    if b.groups and not lacking:
        lb = leaderboard(bench, b, post, where, also=metric)
        cuts = ", ".join(sorted({f"{g.label} {g.knowledge_cutoff}" for g in b.groups}))
        note = (f"Ranked on {metric} over the questions after each model's knowledge cutoff (every model here has "
                f"one: {cuts}); {metric} over all questions beside it.")
    else:
        lb = leaderboard(bench, b, metric, where, also=post)
        note = (f"Ranked on {metric} over all questions, not over those after each model's knowledge cutoff: "
                f"{'; '.join(lacking) or 'no configuration'}.")
    return replace(lb, ranking_note=note) if lb is not None else None


def _missing(g: ConfigGroup, metric: str) -> str:
    """Why ``g`` has no value of a metric after the cutoff (or, over all questions, none at all)."""
    if not cutoff.is_split(metric):
        return "no value"
    return cutoff.UNKNOWN if not g.knowledge_cutoff else "no question after its cutoff"


def leaderboard(bench: Benchmark[Any], b: JudgedBlock, metric: str, where: Mapping[str, str],
                also: str = "") -> Leaderboard | None:
    """``b``'s configurations ranked by ``metric``: equal values (to the printed precision) share a
    rank; each says whether its interval overlaps the leader's. Configurations without a value
    (nothing the metric is defined on) are listed last, unranked. ``also``: a metric shown beside."""
    lower = metric in getattr(bench, "lower_is_better", ())
    have = [(g, e) for g in b.groups if (e := b.estimates.get(g.config_hash, {}).get(metric)) is not None]
    if not have:
        return None
    # a raced sweep ranks by the race's outcome: the configurations it stopped come after every one it
    # kept, latest stop first, with their decision interval (or SCREENING) and no rank
    raced = [(g, e) for g, e in have if e.method in RACED]
    have = [ge for ge in have if ge[1].method not in RACED]
    valued = sorted([ge for ge in have if not math.isnan(ge[1].value)], key=lambda ge: ge[1].value, reverse=not lower)
    lead = valued[0][1] if valued else None
    entries = []
    for g, e in valued:
        first = next(j for j, (_, x) in enumerate(valued) if num(x.value) == num(e.value))
        tied = sum(num(x.value) == num(e.value) for _, x in valued) > 1
        entries.append(Entry(f"{first + 1}{'=' * tied}", g.label, where.get(g.config_hash, ""), e, _counts(g),
                             _marks(bench, g), _vs(e, lead, lower), *_also(b, g, also)))
    entries += [Entry("-", g.label, where.get(g.config_hash, ""), e, _counts(g), _marks(bench, g), "no value",
                      *_also(b, g, also)) for g, e in have if math.isnan(e.value)]
    raced.sort(key=lambda ge: -_counts(ge[0]).n_scored)
    entries += [Entry("-", g.label, where.get(g.config_hash, ""), e, _counts(g),
                      (*_marks(bench, g), g.race),
                      "stopped by its run dir's race (not ranked)", *_also(b, g, also), race=g.race) for g, e in raced]
    return Leaderboard(b.judge, metric, lower, any(g.self_judged for g in b.groups), b.scope_note, entries, also,
                       judge_check=b.judge_check)


def _also(b: JudgedBlock, g: ConfigGroup, also: str) -> tuple[stats.Estimate | None, str]:
    if not also:
        return None, ""
    e = b.estimates.get(g.config_hash, {}).get(also)
    return e, "" if e is not None else _missing(g, also)


def _counts(g: ConfigGroup) -> outcomes.Counts:
    return g.counts or outcomes.count(g.rows, g.planned)


def _marks(bench: Benchmark[Any], g: ConfigGroup) -> tuple[str, ...]:
    return (("INCOMPLETE",) * _counts(g).incomplete + (outcomes.PARTIALLY_JUDGED,) * _counts(g).partially_judged
            + (SELF_JUDGED.upper(),) * g.self_judged
            + tuple(w.split(":")[0].strip() for w in warnings_of(bench, g.agent, g.data)))


def _vs(e: stats.Estimate, lead: stats.Estimate | None, lower: bool) -> str:
    """Where ``e`` stands against the leader: the same value, an interval overlapping the
    leader's, or clearly behind it (no interval: only the value is compared)."""
    if lead is None or num(e.value) == num(lead.value):
        return "leader"
    if math.isnan(e.lo) or math.isnan(lead.lo):
        return "behind (no interval)"
    overlap = e.hi >= lead.lo if not lower else e.lo <= lead.hi
    return "interval overlaps the leader's" if overlap else "behind, intervals apart"

