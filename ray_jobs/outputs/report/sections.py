"""The report's sections about run directories, as data: a configuration's rows and values
(``ConfigGroup``), one judge's block of metrics, paired tests, curve and per-task values, tokens and
cost rows, and a benchmark's section. ``compute_runs``, ``leaderboard`` and ``costs`` fill them; the
render modules put them on the page. Also ``num``, the precision the report prints numbers at: the
leaderboard ranks by it, and here compute code needs no render code to do so."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.budget.cost import Prices
from engine.config import config_labels
from engine.protocol import Row
from engine.scoring import outcomes, stats


def num(v: float | None) -> str:
    """A number as the report prints it: ``n/a`` for none, integers with thousands separators,
    else three decimals below 1, two below 10, one below 1000, and none above."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    a = abs(v)
    if a >= 1 and float(v).is_integer():
        return f"{int(v):,}"
    return f"{v:.3f}" if a < 1 else f"{v:.2f}" if a < 10 else f"{v:.1f}" if a < 1000 else f"{v:,.0f}"


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
    knowledge_cutoff: str = ""      # its model's, as its plan recorded it ("" unknown: engine/scoring/cutoff.py)
    race: str = ""                  # STOPPED EARLY or SCREENING: its run dir's race stopped it (race_view.py)

    def n_cell(self) -> str:
        """Its "scored/planned" cell, marked as every output marks it (outcomes.n_cell)."""
        return outcomes.n_cell((self.counts or outcomes.count(self.rows, self.planned)).columns() | {"race": self.race})

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
    judge_check: str = ""               # the judge failed its own checks: why (engine/scoring/judge_checks.py)

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

