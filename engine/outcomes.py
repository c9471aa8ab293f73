"""What a number means: which episodes every metric is over, decided here for every benchmark.

A configuration's **plan** (what its newest run planned: ``storage.StoredPlan``; for a store
written before plans were recorded, its stored episodes) is the denominator. Each planned
episode has one outcome:

* ``scored``: it finished with a result of its own (status ``ok``);
* ``error``: it failed (retries exhausted, a bug, a lost worker);
* ``budget_stopped``: ``run.budget`` stopped it, or it never started because the budget was spent;
* ``not_run``: it has no row at all (a run cut short, stopped at ``run.max_failures``, or not
  run yet).

A benchmark supplies per-episode values (``episode_values``) for scored episodes, the value a
planned episode without a scored result counts as (``failure_values``: 0 accuracy, the
checklist's floor of 20 %, ...), and which metrics need a judge (``judge_metrics``). Then:

* **run.score_failures = as_wrong** (the default): every episode that was planned and has no
  scored result adds its benchmark's failure value to every metric that has one (accuracy-like
  means). Metrics without a failure value (usage means, precision of an empty selection, a
  hallucination rate over claims) stay means over the scored episodes that have them.
* **exclude**: failures are left out of every mean (the user chose that explicitly).
* Either way every metric row carries ``n_planned``, ``n_scored``, ``n_error``,
  ``n_budget_stopped``, ``n_not_run``, and a configuration with any planned episode unscored is
  ``incomplete``; every table says so.
* Judge-based metrics exist only where a judge ran: with no judge they are not produced at all
  (never a 0 from "nothing graded"), and the summary says to name one.
* **Comparisons** (paper tables, curves, cross-configuration tables) are made on the tasks every
  compared configuration finished (``scope = common``): the configurations of one benchmark and
  one dataset in a run dir, seen through one judge. A task counts as finished by a configuration
  when every planned episode of it (every seed) is scored. The tasks left out are counted.

``docs/design/what-a-number-means.md`` states these rules with a worked example per benchmark.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any, Iterable, Mapping, Sequence

from engine.protocol import MetricRow, Row

SCORED, ERROR, BUDGET_STOPPED, NOT_RUN = "scored", "error", "budget_stopped", "not_run"
OUTCOMES = (SCORED, ERROR, BUDGET_STOPPED, NOT_RUN)
POLICIES = ("as_wrong", "exclude")
ALL, COMMON = "all", "common"


def outcome(row: Row | None) -> str:
    """The outcome of a planned episode from its stored row (None: no row)."""
    if row is None:
        return NOT_RUN
    status = row.get("status")
    if status == "ok":
        return SCORED
    if status == "budget_exhausted":
        return BUDGET_STOPPED
    return ERROR


@dataclass(frozen=True)
class Planned:
    episode_id: str
    task_id: str
    seed: int = 0
    # what it counts as without a scored result, when its task differs from the benchmark's
    # ``failure_values`` (``task_failure_values``: e.g. no checklist score for a task without one)
    failure: str = ""                # JSON; "" = the benchmark's failure_values

    def failure_values(self, bench: Any) -> dict[str, float]:
        return json.loads(self.failure) if self.failure else dict(getattr(bench, "failure_values", {}))


@dataclass(frozen=True)
class Counts:
    """What a configuration's numbers are over."""
    n_planned: int
    n_scored: int
    n_error: int
    n_budget_stopped: int
    n_not_run: int

    @property
    def incomplete(self) -> bool:
        return self.n_scored < self.n_planned

    def columns(self) -> dict[str, Any]:
        return {"n_planned": self.n_planned, "n_scored": self.n_scored, "n_error": self.n_error,
                "n_budget_stopped": self.n_budget_stopped, "n_not_run": self.n_not_run,
                "incomplete": self.incomplete}

    def describe(self) -> str:
        """``"4 of 6 scored (1 error, 1 budget-stopped)"`` / ``"6 of 6 scored"``."""
        parts = [f"{n} {what}" for n, what in ((self.n_error, "error" if self.n_error == 1 else "errors"),
                                              (self.n_budget_stopped, "budget-stopped"),
                                              (self.n_not_run, "not run")) if n]
        return f"{self.n_scored} of {self.n_planned} scored" + (f" ({', '.join(parts)})" if parts else "")

    @staticmethod
    def of_row(r: Mapping[str, Any]) -> "Counts":
        """From a metrics table row (rows written before these columns: n for every count)."""
        n = int(r.get("n") or 0)

        def get(k: str, d: int) -> int:
            return int(r[k]) if r.get(k) is not None else d
        return Counts(get("n_planned", n), get("n_scored", n), get("n_error", 0), get("n_budget_stopped", 0),
                      get("n_not_run", 0))


INCOMPLETE = "incomplete"
# what a configuration of a benchmark with judge-based metrics says when no judge ran
UNGRADED = ("ungraded: name a judge (judge=openai_compatible judge.base_url=... judge.model=..., or "
            "judge=hosted_model judge.hosted_model.path=...; judge=self lets the model under test grade itself, "
            "marked SELF-JUDGED)")


def error_kind(row: Mapping[str, Any]) -> str:
    """What kind of failure an unscored episode is, for grouping: ``budget_exhausted``, or the
    error's exception types (``GenerationError: InternalServerError``)."""
    if row.get("status") == "budget_exhausted":
        return "budget_exhausted"
    first = str(row.get("error") or "").splitlines()[0] if row.get("error") else ""
    if "ReplicaUnavailable: " in first:           # the pool's cause: "ReplicaUnavailable: replica restarting: wedged"
        return "ReplicaUnavailable: " + first.split("ReplicaUnavailable: ", 1)[1].split(" | ", 1)[0][:120]
    parts = [p.strip() for p in first.split(":")[:2]]
    kinds = [p for p in parts if p and p.replace("_", "").isalnum() and p[0].isupper()]
    return ": ".join(kinds) or (first[:60] or "error")


def mark(counts: Counts) -> str:
    """The mark an incomplete configuration carries wherever it appears ("" when complete)."""
    return f"{INCOMPLETE}: {counts.describe()}" if counts.incomplete else ""


def n_cell(row: Mapping[str, Any]) -> str:
    """A table's "n" cell for a configuration (from any of its metric rows): the scored and
    planned episodes, marked when incomplete: ``"6/6"``, ``"4/6 INCOMPLETE (1 error, 1 budget-stopped)"``."""
    c = Counts.of_row(row)
    if not c.incomplete:
        return f"{c.n_scored}/{c.n_planned}"
    why = c.describe().partition(" scored")[2].strip()
    return f"{c.n_scored}/{c.n_planned} INCOMPLETE{(' ' + why) if why else ''}"


def interval_cell(row: Mapping[str, Any]) -> str:
    """A metrics row's interval as printed beside its value: ``"[0.000, 0.265] exact"``,
    ``"too few tasks for an interval"``, or "" for a value that is not a mean (and older tables)."""
    lo, hi, how = row.get("lo"), row.get("hi"), row.get("interval") or ""
    if lo is not None and hi is not None and not (math.isnan(lo) or math.isnan(hi)):
        return f"[{lo:.3f}, {hi:.3f}] {how}".strip()
    return "too few tasks for an interval" if how == "too_few_tasks" else ""


def plan_of(rows: Sequence[Row], planned: Sequence[Planned] | None) -> list[Planned]:
    """The plan, or (no plan recorded) the stored episodes as the plan."""
    if planned is not None:
        return list(planned)
    return [Planned(r["episode_id"], r["task_id"], int(r.get("seed") or 0)) for r in rows]


def count(rows: Sequence[Row], planned: Sequence[Planned] | None) -> Counts:
    by = {r["episode_id"]: r for r in rows}
    plan = plan_of(rows, planned)
    n: dict[str, int] = defaultdict(int)
    for p in plan:
        n[outcome(by.get(p.episode_id))] += 1
    return Counts(len(plan), n[SCORED], n[ERROR], n[BUDGET_STOPPED], n[NOT_RUN])


def task_set(planned: Iterable[Planned]) -> str:
    """A short hash of the planned (task, seed) pairs: what identifies a configuration's task set
    (``benchmark.limit`` and the task selection decide it)."""
    from engine.config import stable_hash

    return stable_hash(sorted((p.task_id, p.seed) for p in planned), n=12)


@dataclass
class EpisodeValue:
    """One planned episode's contribution to the means."""
    planned: Planned
    outcome: str
    values: dict[str, float] = field(default_factory=dict)


def episode_values(bench: Any, rows: Sequence[Row], planned: Sequence[Planned] | None, policy: str,
                   judged: bool) -> list[EpisodeValue]:
    """Per planned episode (in plan order), the values its means count: a scored episode's own
    (``bench.episode_values``; judge-based ones only when ``judged``), an unscored one's
    ``bench.failure_values`` under ``as_wrong`` (none under ``exclude``). Stored rows outside the
    plan are not counted."""
    if policy not in POLICIES:
        raise ValueError(f"score_failures must be one of {POLICIES}, got {policy!r}")
    by = {r["episode_id"]: r for r in rows}
    plan = plan_of(rows, planned)
    judge_only = set(getattr(bench, "judge_metrics", ()))
    scored = [by[p.episode_id] for p in plan if outcome(by.get(p.episode_id)) == SCORED]
    own = iter(bench.episode_values(scored)) if scored else iter(())
    out = []
    for p in plan:
        o = outcome(by.get(p.episode_id))
        if o == SCORED:
            vals = {k: float(v) for k, v in next(own).items() if judged or k not in judge_only}
        elif policy == "exclude":
            vals = {}
        else:
            vals = {m: float(v) for m, v in p.failure_values(bench).items() if judged or m not in judge_only}
        out.append(EpisodeValue(p, o, vals))
    return out


def means(values: Sequence[EpisodeValue]) -> list[MetricRow]:
    """The mean of each metric over the episodes that have it (NaN values are absent values), with
    its interval (``stats.interval``: the one the report, leaderboard and export print)."""
    from engine import stats

    acc: dict[str, list[float]] = {}
    tasks: dict[str, list[str]] = {}
    for ev in values:
        for k, v in ev.values.items():
            if not math.isnan(v):
                acc.setdefault(k, []).append(v)
                tasks.setdefault(k, []).append(ev.planned.task_id)
    out = []
    for k, xs in acc.items():
        e = stats.interval(xs, tasks[k], seed=0)
        known = not math.isnan(e.lo)
        out.append(MetricRow(k, fmean(xs), len(xs), e.lo if known else None, e.hi if known else None, e.method))
    return out


def metric_rows(bench: Any, rows: Sequence[Row], planned: Sequence[Planned] | None, policy: str,
                judged: bool) -> tuple[list[MetricRow], Counts]:
    """A configuration's metrics seen through one judge (or none: ``judged`` False): the means of
    :func:`episode_values` under ``policy``, in the benchmark's order, then the benchmark's own
    other metrics (``bench.metrics`` over the scored rows: spreads, counts) that are not means;
    and the counts every row carries."""
    vals = episode_values(bench, rows, planned, policy, judged)
    by = {r["episode_id"]: r for r in rows}
    scored = [by[v.planned.episode_id] for v in vals if v.outcome == SCORED]
    mean_rows = {m.metric: m for m in means(vals)}
    judge_only = set(getattr(bench, "judge_metrics", ()))
    extras = [m for m in (bench.metrics(scored) if scored else [])
              if m.metric not in mean_rows and (judged or m.metric not in judge_only)]
    order = list(getattr(bench, "metric_order", ()))
    ordered = [mean_rows.pop(k) for k in order if k in mean_rows] + sorted(mean_rows.values(), key=lambda m: m.metric)
    return ordered + extras, count(rows, planned)


# -- comparisons on common tasks -----------------------------------------------------------------
def finished_tasks(rows: Sequence[Row], planned: Sequence[Planned] | None) -> set[str]:
    """Tasks every planned episode of which (every seed) is scored."""
    by = {r["episode_id"]: r for r in rows}
    ok: dict[str, bool] = {}
    for p in plan_of(rows, planned):
        ok[p.task_id] = ok.get(p.task_id, True) and outcome(by.get(p.episode_id)) == SCORED
    return {t for t, v in ok.items() if v}


def common_tasks(configs: Sequence[tuple[Sequence[Row], Sequence[Planned] | None]]) -> set[str]:
    """The tasks every configuration finished."""
    sets = [finished_tasks(rows, planned) for rows, planned in configs]
    return set.intersection(*sets) if sets else set()


def restrict(rows: Sequence[Row], planned: Sequence[Planned] | None, tasks: set[str]) -> list[Planned]:
    """The plan cut to ``tasks``."""
    return [p for p in plan_of(rows, planned) if p.task_id in tasks]


def planned_tasks(rows: Sequence[Row], planned: Sequence[Planned] | None) -> set[str]:
    return {p.task_id for p in plan_of(rows, planned)}


def dataset_key(bench: Any, data_json: str | None) -> str:
    """Which configurations are compared with each other: those of one dataset, i.e. the benchmark
    config (``data``) without what picks tasks (``limit``, ``task_ids``) or only changes judging
    (the benchmark's ``evaluation_fields``)."""
    try:
        d = json.loads(data_json or "{}")
    except ValueError:
        return data_json or ""
    drop = {"limit", "task_ids", "on_bad_rows", "dataset", *getattr(bench, "evaluation_fields", ())}
    return json.dumps({k: v for k, v in d.items() if k not in drop}, sort_keys=True, default=str)


def common_note(n_common: int, dropped: int, n_configs: int) -> str:
    """The sentence under a table computed on common tasks."""
    if dropped == 0:
        return (f"All {n_configs} configurations are compared on the same {n_common} task(s); none was "
                "dropped.")
    return (f"Computed on the {n_common} task(s) every one of the {n_configs} compared configurations finished; "
            f"{dropped} task(s) dropped (not finished by every configuration). Show each configuration over "
            "its own plan with --all-tasks.")


# -- a run dir's configurations, seen through each judge ------------------------------------------
@dataclass
class ConfigView:
    """One configuration of a run dir seen through one judge ("" for none): its stored rows
    (``row["judgements"]``, ``row["judge"]``, ``row["evaluation"]`` set), its plan (None: the
    stored rows are the plan), the scoring policy, and what identifies its task set."""
    config_hash: str
    model: str
    agent: str                       # agent config JSON
    data: str                        # benchmark config JSON (without limit)
    judge: str
    judge_model: str
    self_judged: bool
    rows: list[Row]
    planned: list[Planned] | None
    policy: str
    task_set: str
    family: str = ""                 # configurations compared with each other share it

    @property
    def plan(self) -> list[Planned]:
        return plan_of(self.rows, self.planned)

    def counts(self) -> Counts:
        return count(self.rows, self.planned)


def config_hashes(store: Any, bench: Any) -> list[str]:
    """The configurations of ``bench`` stored in ``store`` (one column read)."""
    import pyarrow.compute as pc

    t = store.episodes(["config_hash"], benchmark=bench.name)
    return sorted(pc.unique(t["config_hash"]).to_pylist()) if t.num_rows else []


def views_of(store: Any, bench: Any, config_hash: str, plans: Mapping[str, Any], judge: str | None = None,
             score_failures: str | None = None, evaluation: Mapping[str, dict[str, Any]] | None = None
             ) -> list[ConfigView]:
    """One configuration of ``store`` once per judge that judged it (or once with no judge), read
    on its own: its episodes and its judgements only (both tables are written sorted by
    configuration, so the other configurations' row groups are skipped, not read)."""
    from engine.judges import judged_views

    eps = store.episodes(benchmark=bench.name, config_hash=config_hash).to_pylist()
    if not eps:
        return []
    ids = [r["episode_id"] for r in eps]
    by_judge, judges = store.judged(bench.parse_judgement, config_hash=config_hash, episode_ids=ids)
    sp = plans.get(config_hash)
    planned = [Planned(e, t, s, f) for e, t, s, f in sp.episodes] if sp is not None else None
    policy = score_failures or (sp.score_failures if sp is not None and sp.score_failures else "as_wrong")
    ev = (evaluation or {}).get(config_hash)
    if ev is None and sp is not None and sp.evaluation:
        ev = json.loads(sp.evaluation)
    tset = sp.task_set if sp is not None and sp.task_set else task_set(plan_of(eps, None))
    first = eps[0]
    return [ConfigView(config_hash, first["model"], first["agent"] or "", first["data"] or "", v.judge,
                       v.judge_model, v.self_judged, v.rows, planned, policy, tset,
                       json.dumps([v.judge, dataset_key(bench, first["data"])]))
            for v in judged_views(eps, by_judge, judges, judge, ev)]


def config_views(store: Any, bench: Any, judge: str | None = None, score_failures: str | None = None,
                 evaluation: Mapping[str, dict[str, Any]] | None = None) -> list[ConfigView]:
    """Every configuration of ``bench`` in ``store`` once per judge that judged it (or once with
    no judge), sorted by config hash then judge. ``judge`` keeps one judge (id, prefix or model
    name); ``score_failures`` overrides the policy each plan recorded (default as_wrong);
    ``evaluation`` (config hash -> settings) gives unjudged views the settings to score under
    (else the plan's). Every configuration's rows at once (the report); :func:`reduce_store`
    holds one configuration at a time."""
    with store.snapshot():      # listings and footers read once for every configuration's reads
        plans = store.plans()
        return [v for c in config_hashes(store, bench)
                for v in views_of(store, bench, c, plans, judge, score_failures, evaluation)]


def families(views: Sequence[ConfigView]) -> dict[str, list[ConfigView]]:
    """The views compared with each other (same judge, same dataset), by family key."""
    out: dict[str, list[ConfigView]] = defaultdict(list)
    for v in views:
        out[v.family].append(v)
    return dict(out)


def _emit(bench: Any, v: ConfigView, planned: Sequence[Planned] | None, scope: str, dropped: int,
          text: str) -> list[dict[str, Any]]:
    from engine.storage import metric_rows

    note = UNGRADED if getattr(bench, "judge_metrics", ()) else ""
    rows, _ = metric_rows_of(bench, v, planned)
    counts = v.counts()          # the counts say what the configuration's plan holds, in either scope
    return metric_rows(bench.name, v.model, v.config_hash, v.agent, v.data, rows, v.judge, v.judge_model,
                       v.self_judged, **counts.columns(), score_failures=v.policy, scope=scope,
                       task_set=v.task_set, tasks_dropped=dropped,
                       note=" ".join(x for x in (text, "" if v.judge else note) if x))


def reduce(bench: Any, views: Sequence[ConfigView]) -> list[dict[str, Any]]:
    """The metrics table: every view over its own plan (``scope`` all), and, in every family of two
    or more configurations, every view over the tasks all of them finished (``scope`` common)."""
    out: list[dict[str, Any]] = []
    for v in views:
        out += _emit(bench, v, v.planned, ALL, 0, "")
    for members in families(views).values():
        if len(members) < 2:
            continue
        common = common_tasks([(v.rows, v.planned) for v in members])
        union = set().union(*(planned_tasks(v.rows, v.planned) for v in members))
        text = common_note(len(common), len(union - common), len(members))
        for v in members:
            out += _emit(bench, v, restrict(v.rows, v.planned, common), COMMON,
                         len(planned_tasks(v.rows, v.planned) - common), text)
    return out


def reduce_store(store: Any, bench: Any, judge: str | None = None, score_failures: str | None = None,
                 evaluation: Mapping[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """:func:`reduce` over a whole run dir, one configuration in memory at a time: a first pass
    emits every view over its own plan and keeps only its task sets (finished, planned) and its
    metric rows; in families of two or more, a view none of whose planned tasks is cut has the
    same numbers over the common tasks, and only the other configurations are read again. The
    same rows, in the same order, as ``reduce(bench, config_views(...))``; memory is one
    configuration's episodes and judgements, not the store's."""
    with store.snapshot():      # listings and footers read once for every configuration's reads
        return _reduce_store(store, bench, judge, score_failures, evaluation)


def _reduce_store(store: Any, bench: Any, judge: str | None, score_failures: str | None,
                  evaluation: Mapping[str, dict[str, Any]] | None) -> list[dict[str, Any]]:
    plans = store.plans()
    hashes = config_hashes(store, bench)
    out: list[dict[str, Any]] = []
    # per view: its rows over its own plan (kept: a view whose planned tasks every member of its
    # family finished has the same numbers over the common tasks) and its task sets
    fam: dict[str, list[tuple[str, str, set[str], set[str], list[dict[str, Any]]]]] = defaultdict(list)
    for c in hashes:
        for v in views_of(store, bench, c, plans, judge, score_failures, evaluation):
            rows = _emit(bench, v, v.planned, ALL, 0, "")
            out += rows
            fam[v.family].append((c, v.judge, finished_tasks(v.rows, v.planned), planned_tasks(v.rows, v.planned),
                                  rows))
    multi = {f: m for f, m in fam.items() if len(m) >= 2}
    if not multi:
        return out
    common = {f: set.intersection(*(x[2] for x in m)) for f, m in multi.items()}
    texts = {f: common_note(len(common[f]), len(set().union(*(x[3] for x in m)) - common[f]), len(m))
             for f, m in multi.items()}
    by_family: dict[str, dict[tuple[str, str], list[dict[str, Any]]]] = {f: {} for f in multi}
    again: set[str] = set()
    for f, m in multi.items():
        for c, j, _, planned, rows in m:
            if planned <= common[f]:        # nothing of its plan is cut: the same numbers, another scope
                by_family[f][(c, j)] = [dict(r, scope=COMMON, tasks_dropped=0,
                                             note=" ".join(x for x in (texts[f], r["note"]) if x)) for r in rows]
            else:
                again.add(c)
    for c in (h for h in hashes if h in again):     # re-read: only configurations with tasks to cut
        for v in views_of(store, bench, c, plans, judge, score_failures, evaluation):
            if v.family in multi and (c, v.judge) not in by_family[v.family]:
                by_family[v.family][(c, v.judge)] = _emit(
                    bench, v, restrict(v.rows, v.planned, common[v.family]), COMMON,
                    len(planned_tasks(v.rows, v.planned) - common[v.family]), texts[v.family])
    for f, m in multi.items():
        for c, j, *_ in m:
            out += by_family[f][(c, j)]
    return out


def metric_rows_of(bench: Any, v: ConfigView, planned: Sequence[Planned] | None) -> tuple[list[MetricRow], Counts]:
    """:func:`metric_rows` of a view, led by ``scored_share`` (scored / planned), which every
    configuration has in every scope."""
    rows, counts = metric_rows(bench, v.rows, planned, v.policy, bool(v.judge))
    share = counts.n_scored / counts.n_planned if counts.n_planned else float("nan")
    return [MetricRow("scored_share", share, counts.n_planned), *rows], counts


def table_rows(rows: Sequence[Mapping[str, Any]], all_tasks: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
    """The metrics rows a table of compared configurations shows (one judge's, one benchmark's):
    per configuration its ``common`` rows where it has them (it is compared with others), else
    its plan's; with ``all_tasks``, every configuration over its own plan. Also the lines to
    print with the table: how the comparison was made, and every incomplete configuration."""
    has_common = {r["config_hash"] for r in rows if r.get("scope") == COMMON}
    keep = [dict(r) for r in rows if (r.get("scope") or ALL) == (COMMON if not all_tasks and r["config_hash"] in
                                                                 has_common else ALL)]
    notes = sorted({str(r.get("note") or "") for r in keep if r.get("scope") == COMMON and r.get("note")})
    notes = [n.replace(" " + UNGRADED, "") for n in notes]
    if all_tasks and len({r["config_hash"] for r in keep}) > 1:
        notes.append("Each configuration over its own plan (--all-tasks): configurations may cover different tasks.")
    seen: set[str] = set()
    for r in keep:
        c = Counts.of_row(r)
        if c.incomplete and r["config_hash"] not in seen:
            seen.add(r["config_hash"])
            policy = r.get("score_failures") or "as_wrong"
            notes.append(f"INCOMPLETE: {r['model']} [{r['config_hash'][:8]}]: {c.describe()}; failures "
                         f"{'count as wrong' if policy == 'as_wrong' else 'are excluded'} (run.score_failures={policy}).")
    if any(not r.get("judge") and UNGRADED in str(r.get("note") or "") for r in keep):
        notes.append(UNGRADED[0].upper() + UNGRADED[1:] + ".")
    return keep, notes
