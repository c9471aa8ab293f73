"""What the report says about a pairwise directory, as data (no formatting, no plots): the
systems, what judging cost, and per judge and protocol the verdicts' position statistics, win
rates, Bradley-Terry ratings, sign tests, dimension-wise shares and agreement with human labels.

Only the current plan's verdicts count (``current_plan``, ``engine.scoring.pairwise.CurrentPlan``): those
on comparisons the latest stage planned whose judged texts are still the systems' current outputs;
the rest are left out and counted per judge and protocol (stale / not in the plan)."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from engine.benchmarks import get_benchmark
from engine.budget.cost import Prices, judge_prices
from engine.scoring import stats
from engine.scoring.judges import same_model
from engine.scoring.kinds import PROPORTION
from engine.scoring.pairwise import (
    CURRENT,
    NOT_IN_PLAN,
    REFERENCE,
    STALE,
    CurrentPlan,
    current_texts,
    outcome,
    pair_outcomes,
    plan,
    position_bias,
    slot,
)
from engine.scoring.pairwise_plan import PLAN_FILE, collect, plan_config
from engine.storage import PairwiseStore

Matrix = npt.NDArray[np.float64]
SignTest = tuple[int, int, int, int, float, float, int]     # a, b, wins of a, wins of b, p, Holm p, ties


@dataclass
class Verdicts:
    judge: str
    protocol: str
    comparisons: list[dict[str, Any]]
    values: dict[str, str | None]      # comparison id -> verdict JSON (None: failed), current plan only
    left_out: dict[str, int] = field(default_factory=dict)     # STALE / NOT_IN_PLAN -> stored verdicts left out

    def systems(self) -> list[str]:
        return sorted({c["system_a"] for c in self.comparisons} | {c["system_b"] for c in self.comparisons})

    def outcomes(self) -> list[stats.Outcome]:
        """Overall outcomes of the verdicts that parsed."""
        return [o for c in self.comparisons if (o := outcome(c, self.values[c["comparison_id"]])) is not None]


def load_verdicts(store: PairwiseStore, current: CurrentPlan | None = None) -> list[Verdicts]:
    """Per judge and protocol, the stored verdicts the current plan counts (``current``, default
    ``current_plan(store)``) and how many it left out, stale or not in the plan."""
    comps = store.comparisons()
    current = current_plan(store, comps) if current is None else current
    status = {c["comparison_id"]: current.status(c) for c in comps}
    judges = sorted({(r["judge"], r["key"]) for r in store.judgement_rows()})
    out = []
    for judge, proto in judges:
        j = store.judgements(judge)
        stored = {cid: d[proto] for cid, d in j.items() if proto in d}
        left = Counter(status.get(cid, NOT_IN_PLAN) for cid in stored)
        vals = {cid: v for cid, v in stored.items() if status.get(cid) == CURRENT}
        out.append(Verdicts(judge, proto, [c for c in comps if c["comparison_id"] in vals], vals,
                            {STALE: left[STALE], NOT_IN_PLAN: left[NOT_IN_PLAN]}))
    return out


def current_plan(store: PairwiseStore, comps: list[dict[str, Any]] | None = None) -> CurrentPlan:
    """The plan a report counts verdicts of: the latest stage's (``plan.json``: its systems and
    comparisons), and its systems' current texts, re-read from the run dirs (as the stage reads
    them, ``engine.scoring.pairwise_plan.collect``) and re-hashed. A pairwise dir written before
    ``plan.json`` existed falls back to the latest ``pairwise-*.json``'s settings over the systems
    of ``systems.json`` (the plan re-made from the current texts), and with no stage record at all
    to ``systems.json``'s systems; run dirs that cannot be read leave the texts unchecked."""
    comps = store.comparisons() if comps is None else comps
    record = store.read_json(PLAN_FILE)
    infos = store.run_infos("pairwise-")
    listed: list[dict[str, Any]] = store.read_json("systems.json") or []
    benches = {c.get("benchmark") for c in comps} - {None}
    slots: frozenset[tuple[int, str, str, str]] | None = None
    if record:
        settings: dict[str, Any] = record.get("config") or {}
        systems: frozenset[str] | None = frozenset(record.get("systems") or [])
        ids = set(record.get("comparisons") or [])
        slots = frozenset(slot(c) for c in comps if c["comparison_id"] in ids)
        source = f"the plan of the latest `dateline pairwise` run ({len(ids)} comparisons)"
    elif infos and infos[-1].get("config"):
        settings = infos[-1]["config"]
        systems = frozenset(s["system_id"] for s in listed) or None
        source = ("the latest stage's settings over the systems of systems.json (no plan.json: the plan is re-made "
                  "from the current texts)")
    elif listed:
        settings = {"benchmark": benches.pop() if len(benches) == 1 else "newsagent",
                    "runs": sorted({s["run_dir"] for s in listed if s.get("run_dir")}),
                    "systems": sorted({s["config_hash"] for s in listed if s.get("config_hash")}),
                    "include_reference": any(s["system_id"] == REFERENCE for s in listed)}
        systems = frozenset(s["system_id"] for s in listed)
        source = "the systems of systems.json (no stage recorded: any task, seed and order)"
    else:
        return CurrentPlan(None, None, None, "No plan recorded: every stored verdict counts; texts not re-checked.")
    try:
        _, articles, _ = collect(plan_config(settings), get_benchmark(str(settings.get("benchmark") or "newsagent")))
    except (ValueError, OSError) as e:          # run dirs moved or gone (ConfigError, DataError, Arrow errors)
        return CurrentPlan(slots, systems, None, f"Counted: verdicts on comparisons of {source}. Texts not "
                                                 f"re-checked (the run dirs could not be read: {e}).")
    texts = current_texts(articles)
    if slots is None and "seed" in settings:
        arts = {sid: a for sid, a in articles.items() if systems is None or sid in systems}
        tasks = sorted({t for sid, a in arts.items() if sid != REFERENCE for t in a})
        if settings.get("limit") is not None:
            tasks = tasks[: int(settings["limit"])]
        fresh, _ = plan(arts, int(settings["seed"]), bool(settings.get("both_orders")), tasks)
        slots = frozenset((c.seed, c.task_id, c.first, c.second) for c in fresh)
    return CurrentPlan(slots, systems, texts, f"Counted: verdicts on comparisons of {source} whose two judged "
                                              f"texts are still the systems' current outputs (re-read from the "
                                              f"run dirs and re-hashed).")


def read_human(path: Path, systems: set[str], tasks: set[str] | None = None
               ) -> dict[tuple[str, str, str], str | None]:
    """Human preferences, JSON Lines: ``{"task_id", "system_a", "system_b", "winner"}`` with winner
    one of the two system ids or "tie"; one label per task and pair; systems among ``systems``,
    tasks among ``tasks`` when given. Errors (``BadDataError``) name the file, line and field."""
    from engine.errors import BadDataError
    from engine.inputs.jsonl import field_str, read_jsonl

    out: dict[tuple[str, str, str], str | None] = {}
    first: dict[tuple[str, str, str], int] = {}
    for row, rec in read_jsonl(path):
        task, a, b, winner = (field_str(path, row, rec, f) for f in ("task_id", "system_a", "system_b", "winner"))
        if tasks is not None and task not in tasks:
            raise BadDataError("unknown_reference", path, row, "task_id",
                               f"unknown task {task!r} (not among the {len(tasks)} compared tasks)")
        for f, sid in (("system_a", a), ("system_b", b)):
            if sid not in systems:
                raise BadDataError("unknown_reference", path, row, f, f"unknown system {sid!r} (known: {sorted(systems)})")
        if a == b:
            raise BadDataError("inconsistent", path, row, "system_b", f"the same system {a!r} as system_a")
        if winner not in (a, b, "tie"):
            raise BadDataError("unknown_value", path, row, "winner",
                               f"must be system_a, system_b or \"tie\", got {winner!r}")
        lo, hi = sorted((a, b))
        if (task, lo, hi) in first:
            raise BadDataError("duplicate_id", path, row, "task_id", f"task {task!r} and pair {lo!r} / {hi!r} "
                               f"labelled again (first at row {first[(task, lo, hi)]}); one label per task and pair")
        first[(task, lo, hi)] = row
        out[(task, lo, hi)] = None if winner == "tie" else winner
    return out


def sign_tests(outcomes: list[stats.Outcome], ids: list[str]) -> list[SignTest]:
    """Per pair of systems (indices a < b) that met: (a, b, wins of a, wins of b, sign-test p, Holm p, ties),
    from one outcome per (task, pair) (``engine.scoring.pairwise.pair_outcomes``)."""
    rows = []
    for a, b in itertools.combinations(range(len(ids)), 2):
        mine = [o for o in outcomes if {o.a, o.b} == {ids[a], ids[b]}]
        if not mine:
            continue
        wins = sum(1 for o in mine if o.winner is not None and (o.a if o.winner == "a" else o.b) == ids[a])
        losses = sum(1 for o in mine if o.winner is not None) - wins
        rows.append((a, b, wins, losses, stats.sign_test(wins, losses), sum(o.winner is None for o in mine)))
    adjusted = stats.holm([r[4] for r in rows])
    return [(a, b, w, lo, p, ph, t) for (a, b, w, lo, p, t), ph in zip(rows, adjusted)]


# -- sections ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class JudgingCost:
    """The pairwise stage runs (``pairwise-*.json``): tokens, uptime and their cost."""
    stage_runs: int
    tokens_in: float
    tokens_out: float
    replica_s: float
    usd: float
    latest: dict[str, Any]              # the latest stage run's info


@dataclass(frozen=True)
class Position:
    first_wins: stats.Estimate          # share of verdicts the first article won
    pairs_both_orders: float
    consistent_share: float             # same winner with the order swapped (of pairs_both_orders)


@dataclass(frozen=True)
class Ratings:
    """Win rates (row over column) and Bradley-Terry ratings, with 95% intervals."""
    win: Matrix
    win_lo: Matrix
    win_hi: Matrix
    comparisons: Matrix                 # verdicts behind each win rate
    theta: Matrix
    theta_lo: Matrix
    theta_hi: Matrix
    elo: tuple[Matrix, Matrix, Matrix]  # theta, lo, hi on the Elo scale
    wins: Matrix                        # win counts (ties half)
    games: Matrix
    rank: list[int]                     # system indices, strongest first


@dataclass(frozen=True)
class Dimensions:
    """Per pair of systems (indices a < b): (A wins, ties, B wins shares, n) per dimension then overall."""
    dims: list[str]                     # in the benchmark's order
    shares: dict[tuple[int, int], list[tuple[float, float, float, int]]]


@dataclass(frozen=True)
class Agreement:
    file: str
    estimate: stats.Estimate
    ties: int                           # human ties (excluded)
    without_verdict: int                # labelled pairs the judge has no verdict for (excluded)


@dataclass
class ProtocolSection:
    verdicts: Verdicts
    names: list[str]                    # labels of verdicts.systems()
    self_judged_model: str              # the judge's model when it is one of the systems, else ""
    failed: int
    outcomes: int
    position: Position | None = None    # the rest: only when some verdict parsed
    ratings: Ratings | None = None
    sign_tests: list[SignTest] | None = None
    dimensions: Dimensions | None = None
    agreement: Agreement | None = None


@dataclass
class PairwiseSection:
    root: Path
    systems: list[dict[str, Any]]
    cost: JudgingCost | None
    protocols: list[ProtocolSection]
    plan: CurrentPlan | None = None     # what the verdicts were filtered by


# -- computing them ---------------------------------------------------------------------------------
def pairwise_section(root: Path, n_boot: int, human: Path | None,
                     prices: Mapping[str, Prices] | None = None) -> PairwiseSection:
    store = PairwiseStore(root)
    systems: list[dict[str, Any]] = store.read_json("systems.json") or []
    label = {s["system_id"]: s["label"] for s in systems}
    judges = store.judges()
    current = current_plan(store)
    protos = []
    for v in load_verdicts(store, current):
        protos.append(protocol_section(v, [label.get(i, i) for i in v.systems()], self_judged_model(judges, systems,
                                                                                                    v.judge),
                                       n_boot, human))
    return PairwiseSection(root, systems, judging_cost(store.run_infos("pairwise-"), prices), protos, current)


def self_judged_model(judges: Mapping[str, dict[str, str]], systems: list[dict[str, Any]], judge: str) -> str:
    """The judge's model when it is one of the compared systems (engine/scoring/judges.py
    ``same_model``: the same weights, or the same served name where either side cannot tell), else ""."""
    jmodel = judges.get(judge, {}).get("model", "")
    same = bool(jmodel) and same_model(judges.get(judge, {}).get("weights"), [jmodel],
                                       [s.get("weights_id") for s in systems], [s["model"] for s in systems])
    return jmodel if same else ""


def judging_cost(infos: list[dict[str, Any]], prices: Mapping[str, Prices] | None = None) -> JudgingCost | None:
    """What the stage runs cost, each at its recorded judge and model prices unless ``prices``
    overrides them (``engine.budget.cost.judge_prices``: the same rules as a run's judge)."""
    if not infos:
        return None
    usd = 0.0
    for i in infos:
        c, js = i.get("config") or {}, i.get("judge_stats") or {}
        jp = judge_prices(c.get("judge") or {}, c.get("model") or {}, prices)
        usd += jp.cost(float(js.get("tokens_in") or 0), float(js.get("tokens_out") or 0),
                       float(i.get("replica_seconds") or 0))
    return JudgingCost(len(infos), sum(float((i.get("judge_stats") or {}).get("tokens_in") or 0) for i in infos),
                       sum(float((i.get("judge_stats") or {}).get("tokens_out") or 0) for i in infos),
                       sum(float(i.get("replica_seconds") or 0) for i in infos), usd, infos[-1])


def protocol_section(v: Verdicts, names: list[str], self_judged_model: str, n_boot: int, human: Path | None
                     ) -> ProtocolSection:
    ids, outs = v.systems(), v.outcomes()
    sec = ProtocolSection(v, names, self_judged_model, sum(val is None for val in v.values.values()), len(outs))
    if not outs:
        return sec
    pb = position_bias(v.comparisons, v.values)
    judged = [c for c in v.comparisons if v.values[c["comparison_id"]] is not None]
    firsts = [float(json.loads(v.values[c["comparison_id"]] or "{}")["overall"] == "first") for c in judged]
    sec.position = Position(stats.interval(firsts, [c["task_id"] for c in judged], PROPORTION, n_boot,
                                           what="first-shown wins"),
                            pb["pairs_both_orders"], pb["consistent_share"])
    sec.ratings = ratings(outs, ids, n_boot)
    sec.sign_tests = sign_tests(pair_outcomes(v.comparisons, v.values), ids)
    sec.dimensions = dimensions(v, ids)
    if human is not None:
        sec.agreement = agreement(v, human, set(ids), n_boot)
    return sec


def ratings(outs: list[stats.Outcome], ids: list[str], n_boot: int) -> Ratings:
    M, lo, hi, N = stats.win_rate_intervals(outs, ids, n_boot)
    theta, tlo, thi = stats.bradley_terry_intervals(outs, ids, prior_games=1.0, n_boot=n_boot)
    W, Nn = stats.win_counts(outs, ids)
    rank = [int(i) for i in np.argsort(-np.nan_to_num(theta, nan=-np.inf))]
    return Ratings(M, lo, hi, N, theta, tlo, thi, (stats.elo(theta), stats.elo(tlo), stats.elo(thi)), W, Nn, rank)


def dimensions(v: Verdicts, ids: list[str]) -> Dimensions | None:
    present = {d for val in v.values.values() if val for d in json.loads(val).get("dimensions", {})}
    bench: set[str] = {b for c in v.comparisons if (b := c.get("benchmark")) is not None}
    spec = get_benchmark(bench.pop()).pairwise if len(bench) == 1 else None
    order = list(spec.dimensions) if spec else []
    dims = [d for d in order if d in present] + sorted(present - set(order))      # the paper's order
    if not dims:
        return None
    shares: dict[tuple[int, int], list[tuple[float, float, float, int]]] = {}
    for a, b in itertools.combinations(range(len(ids)), 2):
        shares[(a, b)] = []
        for d in [*dims, None]:
            os_ = [o for c in v.comparisons if {c["system_a"], c["system_b"]} == {ids[a], ids[b]}
                   and (o := outcome(c, v.values[c["comparison_id"]], d)) is not None]
            n = len(os_)
            win = sum(1 for o in os_ if o.winner is not None and (o.a if o.winner == "a" else o.b) == ids[a])
            tie = sum(1 for o in os_ if o.winner is None)
            shares[(a, b)].append((win / n, tie / n, (n - win - tie) / n, n) if n else (np.nan, np.nan, np.nan, 0))
    return Dimensions(dims, shares)


def agreement(v: Verdicts, human_path: Path, systems: set[str], n_boot: int) -> Agreement:
    """Appendix C.3: exact match with human labels on the pairs the humans did not tie."""
    # keyed (task, system, system); ``stats.agreement`` takes any hashable key
    human: dict[Hashable, str | None] = dict(read_human(human_path, systems | {"reference"},
                                                        {c["task_id"] for c in v.comparisons}).items())
    judge: dict[Hashable, str] = {}
    for c in v.comparisons:
        if c["order"] != "random":
            continue
        o = outcome(c, v.values[c["comparison_id"]])
        if o is not None and o.winner is not None:
            judge[(c["task_id"], c["system_a"], c["system_b"])] = o.a if o.winner == "a" else o.b
    e = stats.agreement(judge, human, task_of=_task_of, n_boot=n_boot)
    return Agreement(human_path.name, e, sum(h is None for h in human.values()),
                     sum(1 for k, h in human.items() if h is not None and k not in judge))


def _task_of(key: Hashable) -> str:
    """The task of a (task, system, system) key."""
    return str(key[0] if isinstance(key, tuple) else key)


@dataclass(frozen=True)
class StageSummary:
    """Win rates and Bradley-Terry of one judge and protocol, for the end of a pairwise stage."""
    protocol: str
    judge: str
    verdicts: int
    names: list[str]
    win: Matrix
    theta: Matrix
    self_judged_model: str = ""         # the judge is this compared system's model (issue 46: said here too)


def stage_summaries(root: Path) -> list[StageSummary]:
    store = PairwiseStore(root)
    systems: list[dict[str, Any]] = store.read_json("systems.json") or []
    label = {s["system_id"]: s["label"] for s in systems}
    judges = store.judges()
    out = []
    for v in load_verdicts(store):
        ids, outs = v.systems(), v.outcomes()
        if outs:
            out.append(StageSummary(v.protocol, v.judge, len(outs), [label.get(i, i) for i in ids],
                                    stats.win_rate_matrix(outs, ids), stats.bradley_terry(outs, ids, prior_games=1.0),
                                    self_judged_model(judges, systems, v.judge)))
    return out
