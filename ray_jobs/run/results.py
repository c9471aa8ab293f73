"""The results stage of ``dateline run``: what failed and why (:func:`failures`), the exit code,
the metrics of a run dir (the default view every reader computes) and the summary printed."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow.compute as pc

from engine.benchmarks import get_benchmark
from engine.config import (
    Config,
)
from engine.hosting.events import causes, read_events
from engine.runtime.progress import table
from engine.scoring import outcomes, views
from engine.scoring.judges import SELF_JUDGED, self_judged_note
from engine.scoring.metric_table import split_notes
from engine.storage import EpisodeStore, set_aside_episodes
from ray_jobs.cluster.signals import Tally
from ray_jobs.run.planning import Point

log = logging.getLogger("dateline.run")


def failures(p: Point) -> dict[str, Any]:
    """The episodes of a point's plan without a scored result, by kind (engine.scoring.outcomes.error_kind):
    a count and one example each; and whether the run stopped at run.max_failures."""
    planned = {s.episode_id for s in p.plan.specs}
    rows = p.store.episodes(["episode_id", "status", "error", "task_id"], config_hash=p.plan.config_hash,
                            filter=pc.field("status") != "ok").to_pylist()
    kinds: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r["episode_id"] not in planned or r["status"] == "stopped_early":    # a decision, not a failure
            continue
        k = kinds.setdefault(outcomes.error_kind(r), {"count": 0, "status": r["status"], "example": "", "task": ""})
        k["count"] += 1
        if not k["example"]:
            k["example"] = (r["error"] or "").splitlines()[0][:300] if r["error"] else r["status"]
            k["task"] = r["task_id"]
    errors = sum(k["count"] for k in kinds.values() if k["status"] == "error")
    # episodes that ran but whose row the store writer could not encode (engine/storage/shards.py): in
    # RUN_DIR/quarantine only, unless a later run stored them
    aside = {e: why for e, why in set_aside_episodes(p.store).items() if e in planned}
    if aside:
        stored = set(p.store.episodes(["episode_id"], episode_ids=list(aside))["episode_id"].to_pylist())
        aside = {e: why for e, why in aside.items() if e not in stored}
    not_run = p.info.get("not_run", 0)
    return {"kinds": kinds, "errors": errors, "planned": len(planned),
            # planned episodes without a scored result, whatever the reason
            "total": sum(k["count"] for k in kinds.values()) + not_run + len(aside),
            "set_aside": len(aside), "set_aside_example": next(iter(aside.values()), ""),
            "stopped_at_max_failures": p.info.get("stopped_at_max_failures", 0),
            "not_run": not_run, "model_failing": p.info.get("model_failing", ""),
            # what the replicas went through (every run of this run dir), by cause
            "replicas": causes(read_events(p.store)) if p.uses_model else {}}


def failure_summary(f: dict[str, Any]) -> str:
    """The failures of a configuration: each kind with its count and one example, then how to
    run them again."""
    n = sum(k["count"] for k in f["kinds"].values()) + f.get("not_run", 0) + f.get("set_aside", 0)
    lines = [f"FAILURES: {n} of {f['planned']} planned episodes have no scored result:"]
    for kind, k in sorted(f["kinds"].items(), key=lambda kv: -kv[1]["count"]):
        lines.append(f"  {k['count']} x {kind}, e.g. task {k['task']}: {k['example']}")
    if f.get("set_aside"):
        lines.append(f"  {f['set_aside']} x not stored: the store writer could not encode the row, set aside in "
                     f"RUN_DIR/quarantine (the same command runs it again), e.g. {f['set_aside_example']}")
    if f.get("not_run"):
        lines.append(f"  {f['not_run']} x not run: {f.get('model_failing') or 'stopped'}")
    if f.get("replicas"):
        lines.append("  replicas: " + "; ".join(f"{k} x{n}" for k, n in f["replicas"].items()))
    if f.get("stopped_at_max_failures"):
        lines.append(f"  the run stopped at run.max_failures={f['stopped_at_max_failures']}")
    if f["errors"]:
        lines.append("  re-run the failed ones with the same command and run.retry_failed=true "
                     "(dateline show RUN_DIR EPISODE shows what one did)")
    if any(k["status"] == "budget_exhausted" for k in f["kinds"].values()):
        lines.append("  budget-stopped ones run again with a larger run.budget.*")
    return "\n".join(lines)


def exit_code(cfgs: list[Config], infos: Sequence[Mapping[str, Any]]) -> tuple[int, str]:
    """The run's exit status and its one-line reason: 1 when a configuration that must not have
    errors (run.fail_on_error) has some, or the run stopped at run.max_failures; else 0."""
    bad = []
    failed = False              # episodes stored as failed: the hint says how to run them again
    for cfg, info in zip(cfgs, infos):
        f = info.get("failures") or {}
        failed |= bool(f.get("errors")) and (bool(f.get("stopped_at_max_failures")) or cfg.run.fail_on_error)
        if info.get("budget_lost"):
            bad.append(f"the run budget's ledger was lost: {info.get('unstarted', 0)} episodes left unstarted "
                       "(the same command runs them)")
        if info.get("model_failing"):
            bad.append(f"{info['model_failing']} ({info.get('not_run', 0)} episodes not run; once it serves, the "
                       "same command runs them)")
        if f.get("stopped_at_max_failures"):
            bad.append(f"stopped at run.max_failures={f['stopped_at_max_failures']}")
        elif f.get("errors") and cfg.run.fail_on_error:
            kinds = "; ".join(f"{k['count']} x {kind}" for kind, k in f["kinds"].items() if k["status"] == "error")
            bad.append(f"{f['errors']} of {f['planned']} episodes failed ({kinds})")
    if not bad:
        return 0, ""
    return 1, ("dateline run: " + "; ".join(dict.fromkeys(bad))
               + (". Re-run them with run.retry_failed=true; run.fail_on_error=false keeps exit status 0 when failures "
                  "are expected" if failed else ""))


def reduce_metrics(store: EpisodeStore, benchmark: str, judge: str | None = None,
                   score_failures: str | None = None,
                   evaluation: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The metrics rows of ``benchmark`` in ``store``, computed (engine/scoring/outcomes.py), never stored: each
    configuration once per judge that judged it (never a blend of judges, nor of evaluation
    settings), or once with no judge; over its plan (scope all) and, where configurations are
    compared, over the tasks all of them finished (scope common); every row with the counts it
    is over. ``judge`` keeps one judge (id, id prefix or model name); ``score_failures``
    overrides the policy each plan recorded; ``evaluation`` (config hash -> settings) scores
    unjudged views under a run's own settings."""
    bench = get_benchmark(benchmark)
    return views.reduce_store(store, bench, judge, score_failures, evaluation)


def summary(rows: list[dict[str, Any]], config_hash: str) -> str:
    """This config's metrics over its plan, one table per judge, each saying which judge (and,
    in bold, when the model judged itself), what the numbers are over, and whether the
    configuration is incomplete; with no judge on a judged benchmark, how to name one."""
    mine = [r for r in rows if r["config_hash"] == config_hash and (r.get("scope") or "all") == outcomes.ALL]
    out = []
    for j in sorted({r["judge"] for r in mine}):
        these = [r for r in mine if r["judge"] == j]
        if j:
            out.append(f"judge {j}" + (f"  **{SELF_JUDGED.upper()}**: {self_judged_note(these[0]['judge_model'])}"
                                       if these[0]["self_judged"] else ""))
        out += sorted({str(r["judge_check"]) for r in these if r.get("judge_check")})   # judge_checks.py
        c = outcomes.Counts.of_row(these[0])
        policy = these[0].get("score_failures") or "as_wrong"
        out.append(("INCOMPLETE: " if c.incomplete else "") + c.describe()
                   + (f"; failures count as {'wrong' if policy == 'as_wrong' else 'excluded'} "
                      f"(run.score_failures={policy})" if c.incomplete else ""))
        if not j and these[0].get("note"):
            out.append(str(these[0]["note"]))
        out += outcomes.count_notes(these[0])
        if these[0].get("race") == outcomes.SCREENING_MARK:     # halving's drop: its means marked, no interval
            out.append(f"{outcomes.SCREENING_MARK}: dropped by successive halving; the means below are over the tasks "
                       "it ran, not estimates of its full-set scores (no error guarantee)")
        elif c.n_stopped_early:         # never a bare mean after adaptive stopping: its interval is printed below
            out.append(f"{outcomes.STOPPED_EARLY_MARK}: {outcomes.STOPPED_EARLY_NOTE}")
            continue
        out.append(table(["metric", "value", "n"], [(r["metric"], r["value"], r["n"]) for r in these]))
        out += split_notes(get_benchmark(str(these[0]["benchmark"])), these)    # dated questions: the cutoff split
    return "\n".join(out)


def tally(points: Iterable[Point]) -> Tally:
    """What the stores hold for the planned episodes of ``points`` (each configuration of a run dir
    once): the count a stopped run's line gives (``cluster.signals.track``). Read from the points the
    sweep planned, never by planning again."""
    out = Tally()
    seen: set[str] = set()
    for p in points:
        key = f"{p.plan.config_hash}@{p.plan.run_dir}"
        if key in seen:
            continue
        seen.add(key)
        rows = p.store.episodes(["episode_id", "status"], config_hash=p.plan.config_hash).to_pylist()
        out.add([s.episode_id for s in p.plan.specs], {r["episode_id"]: r["status"] for r in rows})
    return out
