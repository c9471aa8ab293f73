"""A run dir's configurations seen through each judge, reduced to metric rows.

The rules of what a number is over (a plan, outcomes, failure values, the common tasks of a
comparison) are :mod:`engine.scoring.outcomes`; this module applies them to a store: it reads each
configuration's rows, plan and judgements (``config_views``), groups the configurations a
comparison is made across (``families``) and reduces them to the rows of ``metrics.parquet``
(``reduce``, ``reduce_store``) and of the paper tables (``table_rows``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.identity import dataset_key
from engine.protocol import MetricRow, Row
from engine.scoring import cutoff, judge_checks
from engine.scoring.outcomes import (
    ALL,
    COMMON,
    SCORED,
    UNGRADED,
    Counts,
    Planned,
    common_note,
    common_set,
    count,
    count_notes,
    finished_tasks,
    lacking,
    mark_unseen,
    metric_common,
    metric_note,
    metric_rows,
    outcome,
    plan_of,
    planned_tasks,
    restrict,
    task_set,
)
from engine.scoring.race_view import RaceView


# -- a run dir's configurations, seen through each judge ------------------------------------------
@dataclass
class ConfigView:
    """One configuration of a run dir seen through one judge ("" for none): its stored rows
    (``row["judgements"]``, ``row["judge"]``, ``row["evaluation"]``, ``row["unseen"]`` set), its plan (None: the
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
    judge_weights: str = ""          # the judge's weights id (engine/hosting/weights.py), "" when unknown
    # the model's knowledge cutoff its plan recorded ("" unknown) and each planned episode's question
    # date (dated benchmarks): the split of engine/scoring/cutoff.py
    knowledge_cutoff: str = ""
    dates: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def plan(self) -> list[Planned]:
        return plan_of(self.rows, self.planned)

    def who(self) -> tuple[str, str, frozenset[str], str, bool]:
        """What deciding self-judging over a family needs of this view (:func:`judges_a_member`)."""
        return (self.judge_weights, self.judge_model, frozenset(r.get("weights_id") or "" for r in self.rows) - {""},
                self.model, self.self_judged)

    def counts(self) -> Counts:
        return count(self.rows, self.planned)


def judges_a_member(members: Sequence[tuple[str, str, frozenset[str], str, bool]]) -> bool:
    """Whether the judge of a family (configurations compared through one judge; ``ConfigView.who``
    of each) is any of its models: then every number of the comparison is marked self-judged, not
    only the judge's own configuration's (a judge that is one of the compared models grades its
    rivals too)."""
    from engine.scoring.judges import same_model

    if any(m[4] for m in members):
        return True
    jw, jm = members[0][0], members[0][1]
    return bool(jm) and same_model(jw, [jm], {w for m in members for w in m[2]}, {m[3] for m in members})


def config_hashes(store: Any, bench: Any) -> list[str]:
    """The configurations of ``bench`` stored in ``store`` (one column read)."""
    import pyarrow.compute as pc

    t = store.episodes(["config_hash"], benchmark=bench.name)
    return sorted(pc.unique(t["config_hash"]).to_pylist()) if t.num_rows else []


def family_judges(store: Any, bench: Any) -> dict[str, dict[str, dict[str, str]]]:
    """Per dataset (:func:`dataset_key`), the judges that judged any of its configurations'
    episodes: ``{dataset key: {judge id: info}}``."""
    t = store.episodes(["episode_id", "config_hash", "data"], benchmark=bench.name)
    key_of: dict[str, str] = {}
    ep_key: dict[str, str] = {}
    for r in t.to_pylist():
        ep_key[r["episode_id"]] = key_of.setdefault(r["config_hash"], dataset_key(bench, r["data"]))
    info = store.judges()
    out: dict[str, dict[str, dict[str, str]]] = defaultdict(dict)
    for j, eids in store.judged_episodes().items():
        for k in {ep_key[e] for e in eids if e in ep_key}:
            out[k][j] = info.get(j, {})
    return dict(out)


def views_of(store: Any, bench: Any, config_hash: str, plans: Mapping[str, Any], judge: str | None = None,
             score_failures: str | None = None, evaluation: Mapping[str, dict[str, Any]] | None = None,
             family: Callable[[], Mapping[str, dict[str, dict[str, str]]]] | None = None) -> list[ConfigView]:
    """One configuration of ``store`` once per judge that judged it (or once with no judge), read
    on its own: its episodes and its judgements only (both tables are written sorted by
    configuration, so the other configurations' row groups are skipped, not read). A configuration
    with nothing scored (every episode failed or was stopped by the budget: no judge had anything
    to judge) is seen by the judges of its dataset (``family()``: :func:`family_judges`, read only
    when such a configuration is met), so it
    stays in their tables at its failure-policy value instead of leaving them."""
    from engine.scoring.judges import judged_views

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
    key = dataset_key(bench, first["data"])
    also = family().get(key) if family is not None and not any(outcome(r) == SCORED for r in eps) else None
    views = judged_views(eps, by_judge, judges, judge, ev, also)
    for jv in views:
        mark_unseen(bench, jv.rows)
    return [ConfigView(config_hash, first["model"], first["agent"] or "", first["data"] or "", v.judge,
                       v.judge_model, v.self_judged, v.rows, planned, policy, tset, json.dumps([v.judge, key]),
                       str(judges.get(v.judge, {}).get("weights") or "") if v.judge else "",
                       sp.knowledge_cutoff if sp is not None else "", sp.dates if sp is not None else {})
            for v in views]


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
        family = functools.cache(lambda: family_judges(store, bench))
        views = [v for c in config_hashes(store, bench)
                 for v in views_of(store, bench, c, plans, judge, score_failures, evaluation, family)]
    marked = {f for f, members in families(views).items() if judges_a_member([v.who() for v in members])}
    return [dataclasses.replace(v, self_judged=True) if v.family in marked else v for v in views]


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
                       note=" ".join(x for x in (text, "" if v.judge else note) if x),
                       knowledge_cutoff=v.knowledge_cutoff or None)


def reduce(bench: Any, views: Sequence[ConfigView]) -> list[dict[str, Any]]:
    """The metrics table: every view over its own plan (``scope`` all), and, in every family of two
    or more configurations, every view over the tasks all of them finished (``scope`` common)."""
    out: list[dict[str, Any]] = []
    for v in views:
        out += _emit(bench, v, v.planned, ALL, 0, "")
    for members in families(views).values():
        if len(members) < 2:
            continue
        done = [finished_tasks(v.rows, v.planned) for v in members]
        common = common_set(done)
        union = set().union(*(planned_tasks(v.rows, v.planned) for v in members))
        text = common_note(len(common), len(union - common), len(members), sum(not d for d in done))
        special = metric_common([lacking(bench, v.rows, v.planned, v.policy, bool(v.judge))
                                 for v, d in zip(members, done) if d], common) if common else {}
        for v in members:
            out += _emit_common(bench, v, common, special, text)
    return out


def _emit_common(bench: Any, v: ConfigView, common: set[str], special: Mapping[str, set[str]],
                 text: str) -> list[dict[str, Any]]:
    """``v``'s rows of scope common: over ``common`` (nothing to compare on: its own plan), and each
    metric of ``special`` over its own comparable tasks (:func:`metric_common`), with a note."""
    def over(tasks: set[str], note: str) -> list[dict[str, Any]]:
        if not tasks:           # nothing to compare on: each over its own plan, said so
            return _emit(bench, v, v.planned, COMMON, 0, note)
        return _emit(bench, v, restrict(v.rows, v.planned, tasks), COMMON,
                     len(planned_tasks(v.rows, v.planned) - tasks), note)

    rows = over(common, text)
    for tasks in {frozenset(s) for s in special.values()}:
        ms = {m for m, s in special.items() if s == tasks}
        alt = {r["metric"]: r for r in over(set(tasks), " ".join([text, *(metric_note(m, set(tasks), common)
                                                                          for m in sorted(ms))]))
               if r["metric"] in ms}
        rows = [alt.get(r["metric"], r) for r in rows]
    return rows


def reduce_store(store: Any, bench: Any, judge: str | None = None, score_failures: str | None = None,
                 evaluation: Mapping[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """:func:`reduce` over a whole run dir, one configuration in memory at a time: a first pass
    emits every view over its own plan and keeps only its task sets (finished, planned) and its
    metric rows; in families of two or more, a view none of whose planned tasks is cut has the
    same numbers over the common tasks, and only the other configurations are read again. The
    same rows, in the same order, as ``reduce(bench, config_views(...))``; memory is one
    configuration's episodes and judgements, not the store's."""
    with store.snapshot():      # listings and footers read once for every configuration's reads
        race = RaceView.read(store)
        rows = _reduce_store(store, bench, judge, score_failures, evaluation, race)
    # a judge that failed its own checks marks its rows (judge_checks.py); a race's stops shown once
    return judge_checks.mark_rows(bench, [race.row(r) for r in rows] if race is not None else rows)


def _reduce_store(store: Any, bench: Any, judge: str | None, score_failures: str | None,
                  evaluation: Mapping[str, dict[str, Any]] | None, race: RaceView | None) -> list[dict[str, Any]]:
    plans = store.plans()
    hashes = config_hashes(store, bench)
    family = functools.cache(lambda: family_judges(store, bench))
    out: list[dict[str, Any]] = []
    # per view: its rows over its own plan (kept: a view whose planned tasks every member of its
    # family finished has the same numbers over the common tasks) and its task sets
    fam: dict[str, list[tuple[str, str, set[str], set[str], list[dict[str, Any]]]]] = defaultdict(list)
    lacks: dict[str, list[dict[str, set[str]]]] = defaultdict(list)
    who: dict[str, list[tuple[str, str, frozenset[str], str, bool]]] = defaultdict(list)
    for c in hashes:
        for v in views_of(store, bench, c, plans, judge, score_failures, evaluation, family):
            rows = _emit(bench, v, v.planned, ALL, 0, "")
            out += rows
            # a configuration the race stopped early is left out of the common tasks (race_view.py)
            done = set() if race is not None and race.stopped(c) else finished_tasks(v.rows, v.planned)
            fam[v.family].append((c, v.judge, done, planned_tasks(v.rows, v.planned), rows))
            who[v.family].append(v.who())
            # only a family of two or more compares per metric, among the members that finished a task
            if len(hashes) > 1 and done:
                lacks[v.family].append(lacking(bench, v.rows, v.planned, v.policy, bool(v.judge)))
    marked = {f for f, members in who.items() if judges_a_member(members)}
    for f in marked:            # the judge is one of the family's models: every row of it says so
        for *_, rows in fam[f]:
            for r in rows:
                r["self_judged"] = True
    multi = {f: m for f, m in fam.items() if len(m) >= 2}
    if not multi:
        return out
    common = {f: common_set([x[2] for x in m]) for f, m in multi.items()}
    n_stopped = {f: sum(race is not None and race.stopped(x[0]) for x in m) for f, m in multi.items()}
    texts = {f: common_note(len(common[f]), len(set().union(*(x[3] for x in m)) - common[f]), len(m),
                            sum(not x[2] for x in m) - n_stopped[f], n_stopped[f]) for f, m in multi.items()}
    special = {f: metric_common(lacks[f], common[f]) if common[f] else {} for f in multi}
    by_family: dict[str, dict[tuple[str, str], list[dict[str, Any]]]] = {f: {} for f in multi}
    again: set[str] = set()
    for f, m in multi.items():
        for c, j, _, planned, rows in m:
            # nothing of its plan is cut (or nothing to compare on: each over its own plan), and no
            # metric is compared on fewer tasks: the same numbers, another scope; a configuration the
            # race stopped early is shown by its decision interval whatever the scope
            if (not special[f] and (planned <= common[f] or not common[f])) or (race is not None and race.stopped(c)):
                by_family[f][(c, j)] = [dict(r, scope=COMMON, tasks_dropped=0,
                                             note=" ".join(x for x in (texts[f], r["note"]) if x)) for r in rows]
            else:
                again.add(c)
    for c in (h for h in hashes if h in again):     # re-read: only configurations with tasks to cut
        for v in views_of(store, bench, c, plans, judge, score_failures, evaluation, family):
            if v.family in multi and (c, v.judge) not in by_family[v.family]:
                by_family[v.family][(c, v.judge)] = _emit_common(
                    bench, dataclasses.replace(v, self_judged=v.self_judged or v.family in marked),
                    common[v.family], special[v.family], texts[v.family])
    for f, m in multi.items():
        for c, j, *_ in m:
            out += by_family[f][(c, j)]
    return out


def metric_rows_of(bench: Any, v: ConfigView, planned: Sequence[Planned] | None) -> tuple[list[MetricRow], Counts]:
    """:func:`metric_rows` of a view, led by ``scored_share`` (scored / planned), which every
    configuration has in every scope, and followed by the rows of its knowledge-cutoff split
    (engine/scoring/cutoff.py: a dated benchmark and a known cutoff only)."""
    rows, counts = metric_rows(bench, v.rows, planned, v.policy, bool(v.judge))
    share = counts.n_scored / counts.n_planned if counts.n_planned else float("nan")
    split = cutoff.split_rows(bench, v.rows, planned, v.policy, bool(v.judge), v.knowledge_cutoff, v.dates)
    return [MetricRow("scored_share", share, counts.n_planned), *rows, *split], counts


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
    notes += [f"{r['model']} [{r['config_hash'][:8]}]: {n}" for r in first_per_config(keep) for n in count_notes(r)]
    if any(not r.get("judge") and UNGRADED in str(r.get("note") or "") for r in keep):
        notes.append(UNGRADED[0].upper() + UNGRADED[1:] + ".")
    return keep, notes


def first_per_config(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """One row per (configuration, judge), in order: the counts are the same on all of its rows."""
    firsts: dict[tuple[str, str], Mapping[str, Any]] = {}
    for r in rows:
        firsts.setdefault((r["config_hash"], str(r.get("judge") or "")), r)
    return list(firsts.values())
