"""The hosting stage of ``dateline run``: the models a sweep needs, hosted in waves that fit the
cluster (largest first), each wave sized (replicas, workers) and its points' generation prepared
(index, services, workers' setup) before the dispatch loop runs its episodes."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from engine.config import (
    ModelConfig,
    index_replica_count,
    replica_count,
    service_replica_count,
    stable_hash,
    to_plain,
)
from engine.runtime.actors import members
from engine.runtime.replicas import ready_info
from ray_jobs.budget.ledger import start_budget
from ray_jobs.budget.records import recorded_spend
from ray_jobs.budget.sweep import SweepLedger
from ray_jobs.cluster import signals as stopping
from ray_jobs.cluster.session import Session
from ray_jobs.cluster.sizing import size_by_work, size_replicas, sized, wave_work
from ray_jobs.run.dispatch_loop import dispatch
from ray_jobs.run.info import RunInfo
from ray_jobs.run.judging import add_judge, judge_stream
from ray_jobs.run.planning import Point, worker_setup

log = logging.getLogger("dateline.run")


def pool_demand(m: ModelConfig) -> dict[str, float]:
    """Ray resources all replicas of ``m`` ask for (nothing for an external endpoint); one replica
    for ``replicas: auto`` (what it runs with at least: the wave is sized when it starts)."""
    if m.kind != "vllm":
        return {}
    n = replica_count(m)
    out = {"CPU": n * m.num_cpus, "GPU": n * m.num_gpus}
    for k, v in m.resources.items():
        out[k] = out.get(k, 0.0) + n * float(v)
    return {k: v for k, v in out.items() if v}


def plan_waves(points: list[Point], models: dict[str, ModelConfig], capacity: dict[str, float]) -> list[list[Point]]:
    """Group the points into waves whose hosted models fit the cluster at once (``capacity``:
    resources left for models), largest models first. Points that need no hosted model go in the
    first wave; a point whose models alone do not fit gets a wave of its own (its replicas then
    fail to place with an error naming what is missing, never a hang)."""
    def size(keys: Any) -> tuple[float, float]:
        d = pool_demand_of(models, keys)
        return d.get("GPU", 0.0), d.get("CPU", 0.0)

    def fits(keys: set[str]) -> bool:
        return all(v <= capacity.get(r, 0.0) + 1e-9 for r, v in pool_demand_of(models, keys).items())

    todo = sorted(points, key=lambda p: size(p.pools), reverse=True)
    waves: list[list[Point]] = []
    while todo:
        keys: set[str] = set()
        wave: list[Point] = []
        for p in todo:
            if not wave or fits(keys | set(p.pools)):
                wave.append(p)
                keys |= set(p.pools)
        todo = [p for p in todo if p not in wave]
        waves.append(wave)
    free = [p for w in waves for p in w if not p.pools]
    if free and len(waves) > 1:          # nothing to host: run alongside the first wave
        waves = [[p for p in waves[0] if p.pools] + free] + [[p for p in w if p.pools] for w in waves[1:]]
    return [w for w in waves if w]


def run_waves(work: list[Point], models: dict[str, ModelConfig], session: Session,
               ledger: SweepLedger | None = None) -> None:
    import ray

    first = work[0].cfg
    fixed: dict[str, float] = {"CPU": 0.0}
    seen: set[str] = set()
    for p in work:
        c, i = p.cfg.cluster, p.cfg.index
        for key, cpus in ((f"workers:{p.pools[:1]}", c.num_workers * c.worker_num_cpus if p.generate else 0.0),
                          (f"index:{stable_hash(to_plain(i), p.bench.name)}",
                           index_replica_count(i) * i.num_cpus if p.generate else 0.0),
                          *((f"svc:{s.name}", service_replica_count(c) * s.num_cpus) for s in (p.bench.services(p.cfg) if p.generate else []))):
            if key not in seen:
                seen.add(key)
                fixed["CPU"] += cpus
    # Ray runs the episodes, the hosted pools and the judge actors: a point that only judges, with
    # judge.actors > 0, needs it too (else the first judge actor started Ray by itself, unsized, without
    # this run's runtime env, and no session stopped it)
    needs_ray = (any(p.generate for p in work) or any(pool_demand(models[k]) for p in work for k in p.pools)
                 or any(p.judge and p.cfg.judge.actors > 0 for p in work))
    capacity: dict[str, float] = {}
    if needs_ray:
        # a local cluster fits every point alone (models beyond that are hosted in waves)
        session.ensure_ray(first, fixed["CPU"] + max(pool_demand_of(models, p.pools).get("CPU", 0.0) for p in work))
        stopping.install()          # ours again: ray.init replaced the SIGTERM handler
        # what is available now (another job's replicas are not), plus what this session's own
        # pools hold (they are stopped or reused by the waves)
        avail = {k: float(v) for k, v in ray.available_resources().items()}
        for pool, _ in session.pools.values():
            for r, v in pool_demand(pool.cfg).items():
                avail[r] = avail.get(r, 0.0) + v
        capacity = {k: v - fixed.get(k, 0.0) for k, v in avail.items()}
    waves = plan_waves(work, models, capacity)
    if len(waves) > 1:
        log.info("%d models do not fit the cluster at once: %d waves (%s)", len(models), len(waves),
                 "; ".join(", ".join(sorted({models[k].name for p in w for k in p.pools})) or "-" for w in waves))
    # the sweep's one ledger lives across its waves: started before the first model, it counts
    # each pool this sweep starts from its start, one already up from now
    generating = [p.cfg for p in work if p.generate and p.ledger is not None]
    if ledger is not None and generating and needs_ray:
        ledger.start(session, {id(pool) for pool, _ in session.pools.values()}, generating)
    try:
        for n, wave in enumerate(waves):
            later = {k for w in waves[n + 1:] for p in w for k in p.pools}
            _run_wave(wave, models, session, fixed["CPU"], keep=later)
            session.stop_pools(keep=later)
    finally:
        if ledger is not None:
            ledger.stop()


def pool_demand_of(models: dict[str, ModelConfig], keys: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for k in keys:
        for r, v in pool_demand(models[k]).items():
            out[r] = out.get(r, 0.0) + v
    return out


def _size_wave(wave: list[Point], keys: list[str], models: dict[str, ModelConfig], session: Session,
               reserve_cpus: float) -> dict[str, ModelConfig]:
    """The wave's models as they start: ``replicas: auto`` resolved against what the cluster has
    available now (ray_jobs/cluster/sizing.py); pools already up keep theirs."""
    to_start = {k: models[k] for k in keys if k not in session.pools and models[k].kind == "vllm"}
    if not any(m.replicas == "auto" for m in to_start.values()):
        return {k: models[k] for k in keys}
    import ray._private.state as ray_state

    nodes = [{k: float(v) for k, v in res.items() if not k.startswith("node:")}
             for res in ray_state.available_resources_per_node().values()]
    ww = wave_work(wave, to_start)
    counts = None
    if ww.work_s is not None:           # every pool measured: replicas by replica-seconds of work
        counts = size_by_work(to_start, ww.work_s, ww.load_s, nodes, reserve_cpus, ww.upstream,
                              efficiency=wave[0].cfg.cluster.sizing_efficiency, budget_gpu_s=_headroom_gpu_s(wave))
    by = "work" if counts is not None else "tokens"
    if counts is None:                  # else by projected tokens (a hosted judge's its own)
        counts = size_replicas(to_start, ww.tokens, nodes, reserve_cpus)
    out = {k: sized(models[k], counts[k]) if k in counts and models[k].replicas == "auto" else models[k] for k in keys}
    for p in wave:
        auto = {models[k].name: {"replicas": counts[k], "projected_tokens": round(ww.tokens.get(k, 0.0)),
                                 "from": sorted(ww.sources.get(k, ())), "by": by,
                                 **({"work_replica_s": round(ww.work_s.get(k, 0.0)), "load_s": round(ww.load_s.get(k, 0.0))}
                                    if ww.work_s is not None else {})}
                for k in p.pools if k in counts and models[k].replicas == "auto"}
        if auto:
            p.info["replicas_auto"] = auto
    return out


def _headroom_gpu_s(wave: list[Point]) -> float | None:
    """GPU-seconds the wave's points may still spend under ``run.budget.max_gpu_hours`` (the least
    headroom of any capped point; None: no cap)."""
    left = [(p.cfg.run.budget.max_gpu_hours - recorded_spend(p.cfg, p.store, p.plan.config_hash).gpu_hours) * 3600.0
            for p in wave if p.cfg.run.budget.max_gpu_hours is not None]
    return max(0.0, min(left)) if left else None


def _run_wave(wave: list[Point], models: dict[str, ModelConfig], session: Session, reserve_cpus: float = 0.0,
              keep: set[str] | None = None) -> None:
    """Host the wave's models (at once), then run and judge every point of the wave together."""
    keys = list(dict.fromkeys(k for p in wave for k in p.pools))
    startup_s, uptime0, started0 = _host_wave(wave, keys, models, session, reserve_cpus)
    _run_points(wave, keys, started0, startup_s, session, keep or set())
    _share_uptime(wave, keys, models, uptime0, session)


def _host_wave(wave: list[Point], keys: list[str], models: dict[str, ModelConfig], session: Session,
               reserve_cpus: float) -> tuple[float, dict[str, float], set[str]]:
    """The wave's models sized and started (their replicas all at once): the seconds it took, the
    uptime of each model's replicas before (sized, not yet started) and the pools running then."""
    session.stop_pools(keep=set(keys))
    for p in wave:              # the index embeds its corpus while the models load (an actor: not waited for)
        if p.generate:
            session.index(p.cfg, p.bench)
    resolved = _size_wave(wave, keys, models, session, reserve_cpus)
    log_dir = {k: next(p.store.root for p in wave if k in p.pools) / "logs" for k in keys}
    log_uri = {k: next(p.store.remote_dir("logs") for p in wave if k in p.pools) for k in keys}
    uptime0 = {k: session.replica_seconds(models[k]) for k in keys}
    started0 = set(session.pools)
    t0 = time.time()
    # placement groups one model after another, largest replica first (ModelPool.reserve)
    for k in sorted(keys, key=lambda k: (resolved[k].num_gpus, resolved[k].num_cpus), reverse=True):
        session.reserve(resolved[k], log_dir[k], log_uri[k], key=k)
    with ThreadPoolExecutor(max(1, len(keys))) as ex:       # replicas of all the wave's models start at once
        list(ex.map(lambda k: session.pool(resolved[k], log_dir[k], keep=set(keys), log_uri=log_uri[k], key=k), keys))
    return time.time() - t0, uptime0, started0


def _run_points(wave: list[Point], keys: list[str], started0: set[str], startup_s: float, session: Session,
                keep: set[str]) -> None:
    """Every point's workers and ledger, its judges, then the dispatch loop over all of them."""
    stream = judge_stream([p for p in wave if p.judge])
    groups: dict[str, list[Point]] = defaultdict(list)
    claimed: set[str] = set()
    try:
        for p in wave:       # every point's workers and ledger first: a judge may use another point's ledger
            p.info["startup_s"] = startup_s
            model_key = p.spec.model_key
            # the first point of the wave that uses a model it started pays for the start
            p.info["model_started"] = p.uses_model and p.cfg.model.kind == "vllm" and model_key in keys \
                and model_key not in started0 and model_key not in claimed
            if p.info["model_started"]:
                claimed.add(model_key)
            p.info["model_startup"] = session.startups.get(model_key, "reused") if p.info["model_started"] else "reused"
            if p.generate:
                prepare_generation(p, session)
                groups[model_key if p.uses_model else "none"].append(p)
        for p in wave:
            if p.judge:
                add_judge(stream, p, session)
                if p.info["episodes_skipped"]:      # episodes of earlier runs may still miss judgements
                    stream.submit(p.key, p.store.episodes(config_hash=p.plan.config_hash, ok_only=True).to_pylist())
        t_run = time.time()
        # pools a drained model may not give back mid-wave: a later wave's, and any that judges
        judging = {k for p in wave if p.judge for k in p.pools if k != p.spec.model_key}
        judging |= {p.spec.model_key for p in wave if p.judge and p.cfg.judge.kind == "self"}
        dispatch(groups, session, stream, keep=keep | judging)
        for p in wave:
            if p.generate:
                p.info["run_s"] = time.time() - t_run
        for p in wave:
            if p.judge:
                p.info["judge"] = stream.finish(p.key)
    finally:
        stream.close()
        for p in wave:
            if p.budget is not None and p.ledger is None:      # a sweep's ledger outlives the wave
                p.info["budget"] = p.budget.stop()
            p.budget = None


def _share_uptime(wave: list[Point], keys: list[str], models: dict[str, ModelConfig], uptime0: dict[str, float],
                  session: Session) -> None:
    """The replica uptime of the wave, shared among its points by their tokens (startup included)."""
    for k in keys:
        used = [p for p in wave if k in p.pools]
        up = session.replica_seconds(models[k]) - uptime0[k]
        weight = {p.key: _tokens(p.info) for p in used}
        total = sum(weight.values())
        for p in used:
            share = up * (weight[p.key] / total if total else 1.0 / len(used))
            if k == p.spec.model_key:
                p.info["replica_seconds_run"] = p.info.get("replica_seconds_run", 0.0) + share
            else:
                p.info["judge_replica_seconds_run"] = p.info.get("judge_replica_seconds_run", 0.0) + share
    for p in wave:
        p.info["replica_seconds"] = session.replica_seconds()


def _tokens(info: RunInfo) -> int:
    j = info.get("judge") or {}
    return int(info.get("tokens_in", 0) + info.get("tokens_out", 0) + j.get("tokens_in", 0) + j.get("tokens_out", 0))


def prepare_generation(p: Point, session: Session) -> None:
    cfg, bench, m = p.cfg, p.bench, p.cfg.model
    p.index = index = session.index(cfg, bench)
    p.services = services = session.benchmark_services(cfg, bench)
    endpoints = session.pool(m, p.store.root / "logs", keep=set(session.pools),
                             log_uri=p.store.remote_dir("logs")) if p.uses_model else []
    p.info["index"] = ready_info(index, "ready") if index is not None else None
    p.info["services"] = {k: ready_info(h, "info") if hasattr(members(h)[0], "info") else {}
                          for k, h in services.items()}
    if p.ledger is not None:
        p.budget = p.ledger.budget          # the sweep's (started by run_waves)
    else:
        p.budget = start_budget(p.spec, p.store, session, bool(p.info.get("model_started")))
    p.setup = worker_setup(p, endpoints, p.budget.actor if p.budget is not None else None)
    p.info["episodes_planned"] = len(p.plan.todo)
