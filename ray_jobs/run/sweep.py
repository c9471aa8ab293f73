"""``run_sweep``: every configuration of a sweep as one job, its stages in the order they run:
plan every point (``planning.py``), host the models and run the episodes in waves
(``waves.py``, ``dispatch_loop.py``; judging streamed as rows are stored: ``judging.py``), then
record provenance, reduce metrics and report (``results.py``)."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence
from typing import Any

from engine import provenance
from engine.config import Config, to_plain
from engine.inputs.order import TaskOrder, task_order
from engine.scoring import metric_table
from engine.scoring.outcome_marks import warnings_of
from ray_jobs.budget.sweep import SweepLedger, sweep_ledger
from ray_jobs.cluster import signals
from ray_jobs.cluster.session import Session
from ray_jobs.config.point import PointSpec
from ray_jobs.run.adaptive import Racer
from ray_jobs.run.info import RunInfo
from ray_jobs.run.planning import Point, open_point, plan_point, preflight
from ray_jobs.run.results import failure_summary, failures, summary, tally
from ray_jobs.run.waves import run_waves

log = logging.getLogger("dateline.run")


def run_sweep(cfgs: list[Config], session: Session | None = None,
              command: Sequence[str] | None = None, *, print_summary: bool = True) -> list[RunInfo]:
    """Every configuration of a sweep as one job: all points planned up front, one queue of
    episodes per model feeding one set of workers, the models that fit hosted at once (waves,
    largest first, when they do not), judging streamed as episodes finish, metrics reduced once
    at the end. Returns each configuration's run info (in ``cfgs`` order). ``command``: the
    command line, for the provenance every run dir records (engine/provenance.py; default
    ``sys.argv``). ``print_summary=False``: no metric table on stdout (a pilot, whose caller prints
    its own)."""
    from contextlib import ExitStack

    from engine.runtime.runlock import RunDirLock

    specs = preflight(cfgs)     # a refused run creates nothing: every check before the first lock
    with ExitStack() as locks:
        # one writer per run dir: a second driver on any of them stops here, naming the holder
        for d in sorted({str(s.run_dir) for s in specs}):
            locks.enter_context(RunDirLock(d, "dateline run"))
        return _run_sweep(specs, session, command, print_summary)


def _run_sweep(specs: list[PointSpec], session: Session | None, command: Sequence[str] | None = None,
               print_summary: bool = True) -> list[RunInfo]:
    own = session is None
    session = session or Session()
    t0 = time.time()
    points, order, ledger = _plan_sweep(specs)                             # planning.py
    signals.track(lambda: tally(points.values()))                          # a stop's line counts these
    racer = Racer.start(list(points.values()))                             # adaptive.py (None: no rule)
    work = [p for p in points.values() if p.generate or p.judge]
    models = {k: m for p in points.values()
              for k, m in ((p.spec.model_key, p.cfg.model), (p.spec.judge_key, p.spec.judge_model))
              if m is not None and k is not None}
    try:
        if work:
            run_waves(work, models, session, ledger)                       # waves.py -> dispatch_loop.py
    finally:
        if own:
            session.close()
    _record_ledger(points, ledger)
    if racer is not None:
        racer.write()
    prov = _write_provenance(points, [s.cfg for s in specs], command, t0)
    reduced = _reduce(points)                                              # results.py
    for p in points.values():
        _report(p, reduced[str(p.plan.run_dir)], prov, t0, session, print_summary)
    return [points[k].info for k in order]


def _plan_sweep(specs: list[PointSpec]) -> tuple[dict[str, Point], list[str], SweepLedger | None]:
    """Every point planned up front (the same configuration twice runs once), and the sweep's
    ledger when its points share one (``run.budget.scope=sweep``)."""
    points: dict[str, Point] = {}
    order: list[str] = []
    for spec in specs:
        order.append(spec.key)
        if spec.key not in points:           # the same configuration twice runs (and is planned) once
            points[spec.key] = plan_point(spec)
    ledger = sweep_ledger([(p.spec, p.store) for p in points.values()])
    closed = ledger.exhausted_before_start() if ledger is not None else None
    for p in points.values():
        mine = ledger is not None and p.plan.config_hash in ledger.hashes
        p.ledger = ledger if mine else None
        open_point(p, closed if mine else None)
    return points, order, ledger


def _record_ledger(points: dict[str, Point], ledger: SweepLedger | None) -> None:
    if ledger is not None and ledger.final is not None:
        # every point of the sweep's ledger records it (its run_id supersedes the live snapshot)
        for p in points.values():
            if p.ledger is ledger:
                p.info["budget"] = ledger.record(ledger.final, p.plan.config_hash)


def _write_provenance(points: dict[str, Point], cfgs: list[Config], command: Sequence[str] | None,
                      t0: float) -> dict[str, Any]:
    """What made these numbers (versions, command, hardware, times): once, into every run dir."""
    prov = provenance.collect(cfgs, command, t0, time.time())
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for d, p in {str(p.plan.run_dir): p for p in points.values()}.items():
        p.store.write_json(f"provenance-{stamp}.json", prov | {"configs": [
            {"config_hash": q.plan.config_hash, "benchmark": q.bench.name, "model": q.cfg.model.name}
            for q in points.values() if str(q.plan.run_dir) == d]})
    return prov


def _reduce(points: dict[str, Point]) -> dict[str, list[dict[str, Any]]]:
    """Metrics once per run dir, of every benchmark in it (the default view, stored as the cache
    every reader checks against the store: engine/scoring/metric_table.py), and its tables."""
    reduced: dict[str, list[dict[str, Any]]] = {}
    for p in points.values():
        k = str(p.plan.run_dir)
        if k not in reduced:
            if p.cfg.run.compact:
                p.store.compact()
            reduced[k] = metric_table.refresh(p.store)
            names = sorted({r["benchmark"] for r in reduced[k]})
            p.store.write_text("metrics/tables.md", metric_table.tables_markdown(reduced[k], names))
    return reduced


def tasks_taken(cfg: Config) -> dict[str, Any]:
    """Which tasks this run took (issue 46): ``benchmark.limit`` (None: all), the order they were
    taken in and its seed; exports and the report say it, since the config hash leaves it out."""
    order = task_order(cfg) or TaskOrder("data")
    return {"limit": getattr(cfg.benchmark, "limit", None), "order": order.kind,
            "order_seed": order.seed if order.kind == "random" else None}


def _report(p: Point, reduced: list[dict[str, Any]], prov: dict[str, Any], t0: float, session: Session,
            print_summary: bool = True) -> None:
    """A point's run info written (``run-*.json``) and its summary printed (results on stdout)."""
    info = p.info
    info["wall_s"] = time.time() - t0
    info.setdefault("model_starts_in_session", session.model_starts)
    info["config_hash"] = p.plan.config_hash
    info["model"] = to_plain(p.cfg.model)
    info["judge_config"] = to_plain(p.cfg.judge)
    info["tasks"] = tasks_taken(p.cfg)
    info.setdefault("replica_seconds_run", 0.0)
    info["failures"] = failures(p)
    info["provenance"] = prov
    p.store.write_json(f"run-{time.strftime('%Y%m%d-%H%M%S')}-{p.plan.config_hash[:6]}.json", info)
    if not print_summary:
        return
    model = p.cfg.model.name if p.uses_model else "none"
    out = sys.stdout                     # results on stdout, logs on stderr
    out.write(f"\n{p.bench.name} | model {model} | config {p.plan.config_hash} | {p.plan.run_dir}\n")
    out.write(summary(reduced, p.plan.config_hash) + "\n")
    for w in warnings_of(p.bench, to_plain(p.cfg.agent), to_plain(p.cfg.benchmark)):
        out.write(f"**{w}**\n")
    if (ad := info.get("adaptive")) is not None:
        lo, hi = ad["interval"]
        out.write(f"adaptive: {ad['state'].replace('_', ' ')} after {ad['tasks_admitted']} tasks; "
                  f"{100 * ad['interval_level']:.0f}% anytime-valid interval of the full-set {info.get('adaptive_metric', '')}"
                  f"mean [{lo:.3f}, {hi:.3f}]{(': ' + ad['reason']) if ad['reason'] else ''}\n{ad['wording']}\n")
        c = ad["cost"]
        out.write(f"adaptive sweep: {c['episodes_run']} of {c['episodes_full']} episodes run "
                  f"({100 * c['share_run']:.0f}%); {c['tokens_out']} completion tokens, ${c['usd_tokens']:.2f} in tokens, "
                  f"{c['gpu_hours_this_run']:.2f} replica GPU-hours; every task for every configuration: about "
                  f"${c['full_run_projected']['usd_tokens']:.2f} in tokens (projected)\n")
    f = info["failures"]
    if f["kinds"] or f["not_run"] or f["set_aside"]:
        out.write(failure_summary(f) + "\n")
    elif f["replicas"]:                  # every episode scored, through replica restarts
        out.write("replicas: " + "; ".join(f"{k} x{n}" for k, n in f["replicas"].items()) + "\n")
    if info.get("budget_lost"):
        out.write(f"BUDGET LEDGER LOST ({info['budget_lost'][:200]}): {info.get('unstarted', 0)} planned episodes "
                  "left unstarted, none stored as a result; the same command runs them\n")
    out.write(f"wall time {info['wall_s']:.1f} s ({info['episodes_skipped']} episodes reused, "
              f"{info.get('episodes_planned', 0)} run; model starts this session: {session.model_starts})\n")
    out.flush()


def run(cfg: Config, session: Session | None = None, *, print_summary: bool = True) -> RunInfo:
    """One run: generate what is missing, judge what is missing, reduce metrics. Pass a
    ``session`` to share Ray, models, index and services with other runs."""
    return run_sweep([cfg], session, print_summary=print_summary)[0]
