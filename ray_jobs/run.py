"""Driver: ``dateline run [overrides]``. Validate the config, plan episodes, skip the finished
ones, start (or join) Ray, host the model, start the shared index and the episode workers,
write results to Parquet as they arrive, then reduce to the metrics table.

The store is the source of truth: a re-run with the same config plans only episodes that
have no ok row yet, and when nothing is left it exits without starting Ray.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engine.benchmarks import get_benchmark
from engine.config import Config, ModelConfig, stable_hash, to_plain, validate
from engine.dispatch import WORKER_LOST, EpisodeSpec, WorkerSetup, agent_json, unstarted_row
from engine.judges import SELF_JUDGED, judged_views, self_judged_note
from engine.llm import SamplingParams
from engine.progress import Progress, table
from engine.storage import EpisodeStore, metric_rows
from ray_jobs.budget import RunBudget, budget_exhausted_rows, exhausted_before_start, judge_budget_gate, start_budget
from ray_jobs.judge import run_judge_stage
from ray_jobs.session import Session

log = logging.getLogger("dateline.run")
REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Plan:
    specs: list[EpisodeSpec]
    todo: list[EpisodeSpec]
    config_hash: str
    run_dir: Path


def repo_path(p: str) -> Path:
    """A path from a config: absolute as given, relative to the repository root otherwise."""
    q = Path(p)
    return q if q.is_absolute() else REPO_ROOT / q


def run_dir(cfg: Config) -> Path:
    return repo_path(cfg.run.dir)


def model_identity(cfg: Config, uses_model: bool) -> dict[str, Any]:
    if not uses_model:
        return {"name": "none"}
    m = cfg.model
    return {"name": m.name, "served_name": m.served_name or m.name, "temperature": m.temperature, "top_p": m.top_p}


def episode_relevant(cfg: Config, bench: Any) -> dict[str, Any]:
    """The benchmark config as far as it decides an episode's result: not the task limit (it
    picks tasks) and not the fields the benchmark lists in ``evaluation_fields`` (they change
    only how finished episodes are judged), so changing those never re-runs episodes."""
    drop = {"limit", *getattr(bench, "evaluation_fields", ())}
    return {k: v for k, v in to_plain(cfg.benchmark).items() if k not in drop} | {"limit": None}


def plan(cfg: Config) -> Plan:
    bench = get_benchmark(cfg.benchmark.name)
    uses_model = bench.uses_model(cfg.agent)
    ident = {
        "benchmark": episode_relevant(cfg, bench),
        "model": model_identity(cfg, uses_model),
        "agent": to_plain(cfg.agent),
        "retrieval": {"embedding_model": cfg.index.embedding_model, "top_k": cfg.index.top_k,
                      "threshold": cfg.index.threshold},
    }
    config_hash = stable_hash(ident)
    specs = []
    for task in bench.load_tasks(cfg):
        for seed in range(cfg.run.seed, cfg.run.seed + cfg.run.num_seeds):
            eid = stable_hash(ident, task.task_id, seed)
            specs.append(EpisodeSpec(eid, config_hash, task, task.task_id, seed))
    rd = run_dir(cfg)
    store = EpisodeStore(rd, bench.episode_fields)
    done = store.finished_ids()
    todo = [s for s in specs if s.episode_id not in done]
    return Plan(specs, todo, config_hash, rd)


def data_identity(cfg: Config) -> str:
    from engine.protocol import dumps

    return dumps(to_plain(cfg.benchmark) | {"limit": None})


def needed_cpus(cfg: Config, bench: Any) -> float:
    """Logical CPUs a whole run asks Ray for: replicas, index, episode workers, services. A local
    cluster is sized by this whichever stage starts Ray first (the judge stage alone needs only the
    model, but the next point of a sweep will schedule workers on the same cluster)."""
    m, c, j = cfg.model, cfg.cluster, cfg.judge
    self_judge = j.kind == "hosted" and j.hosted_model is None
    hosted = m.kind == "vllm" and (bench.uses_model(cfg.agent) or self_judge)
    jm = j.hosted_model if j.kind == "hosted" else None
    judge_cpus = jm.replicas * jm.num_cpus if jm is not None and jm.kind == "vllm" and jm != m else 0
    return ((m.replicas * m.num_cpus if hosted else 0) + judge_cpus + cfg.index.num_cpus
            + c.num_workers * c.worker_num_cpus + sum(s.num_cpus for s in bench.services(cfg)))


def execute(cfg: Config, p: Plan, store: EpisodeStore, session: Session) -> dict[str, Any]:
    """Run the planned episodes on Ray; rows are flushed as they finish."""
    import ray

    from engine.dispatch import start_workers

    bench = get_benchmark(cfg.benchmark.name)
    uses_model = bench.uses_model(cfg.agent)
    m, c = cfg.model, cfg.cluster
    session.ensure_ray(cfg, needed_cpus(cfg, bench))
    info: dict[str, Any] = {"episodes_planned": len(p.todo)}
    t0 = time.time()
    starts_before = session.model_starts
    index = session.index(cfg, bench)
    services = session.benchmark_services(cfg, bench)
    endpoints = session.model(cfg, p.run_dir / "logs") if uses_model else []
    info["model_started"] = session.model_starts > starts_before
    info["model_startup"] = session.startup if info["model_started"] else "reused"
    info["index"] = ray.get(index.ready.remote()) if index is not None else None
    info["services"] = {k: ray.get(h.info.remote()) if hasattr(h, "info") else {} for k, h in services.items()}
    info["startup_s"] = time.time() - t0
    log.info("ready in %.0f s: %d endpoint(s), index %s, services %s", info["startup_s"], len(endpoints),
             info["index"], info["services"])
    workers: list[Any] = []
    budget: RunBudget | None = None
    try:
        budget = start_budget(cfg, p.config_hash, store, session, info["model_started"])
        setup = WorkerSetup(
            benchmark=bench.name, model_name=m.name, agent=cfg.agent, agent_json=agent_json(cfg.agent),
            endpoints=endpoints,
            sampling=SamplingParams(m.temperature, m.top_p, None, m.request_timeout_s, m.max_retries),
            inflight_per_replica=max(1, m.max_inflight_per_replica // c.num_workers),
            top_k=cfg.index.top_k, threshold=cfg.index.threshold, uses_model=uses_model,
            data_json=data_identity(cfg), artifacts_dir=str(p.run_dir / "artifacts"),
            model_path=m.path if m.kind == "vllm" else "",
            # a hosted replica that dies is restarted by the driver: calls wait for it that long
            reroute_wait_s=m.startup_timeout_s if m.kind == "vllm" else 0.0,
            budget=budget.actor if budget is not None else None)
        workers = start_workers(setup, index, c.num_workers, c.episodes_per_worker, c.worker_num_cpus, services)
        # Each worker gets at most episodes_per_worker episodes at a time and is refilled as they
        # finish: faster workers take more, and the actor keeps a free slot for progress polls.
        queue = list(reversed(p.todo))
        pending: dict[Any, tuple[int, EpisodeSpec]] = {}
        attempts: dict[str, int] = defaultdict(int)
        pool = session.pool_of(m) if uses_model else None

        def submit(w: int) -> None:
            if queue:
                spec = queue.pop()
                attempts[spec.episode_id] += 1
                pending[workers[w].run.remote(spec)] = (w, spec)

        for _ in range(c.episodes_per_worker):
            for w in range(len(workers)):
                submit(w)
        progress = Progress(len(p.todo), cfg.run.progress)
        buf_e: list[dict[str, Any]] = []
        buf_s: list[dict[str, Any]] = []
        last_flush = last_poll = last_health = time.monotonic()
        failures = requeued = 0
        totals = {"steps": 0, "tokens_in": 0, "tokens_out": 0}

        def poll_live() -> None:
            try:
                lives = ray.get([w.live.remote() for w in workers], timeout=10)
            except Exception:  # progress is best effort (a worker may be restarting)
                return
            for key in totals:
                totals[key] = sum(x[key] for x in lives)
            progress.set_live(totals["steps"], totals["tokens_in"], totals["tokens_out"])

        t_run = time.time()
        try:
            while pending:
                if budget is not None and queue and (why := budget.exhausted()):
                    log.warning("stopping: %s; in-flight episodes finish, %d never start", why, len(queue))
                    for row in budget_exhausted_rows(setup, queue, why):
                        buf_e.append(row)
                        progress.update(row)
                    queue.clear()
                ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0.5)
                for ref in ready:
                    worker, spec = pending.pop(ref)
                    try:
                        res = ray.get(ref)
                    except WORKER_LOST as e:
                        # the worker died with the episode in flight (process or node lost): Ray
                        # restarts the actor; the episode goes back to the front of the queue, and
                        # only a result ever reaches the store, so it is stored exactly once
                        if attempts[spec.episode_id] < c.max_episode_attempts:
                            log.warning("worker %d lost episode %s (%s): requeued (attempt %d of %d)", worker,
                                        spec.episode_id, type(e).__name__, attempts[spec.episode_id] + 1,
                                        c.max_episode_attempts)
                            queue.append(spec)
                            requeued += 1
                            submit(worker)
                            continue
                        res = {"episode": unstarted_row(setup, spec, "error", f"{type(e).__name__}: worker lost "
                                                        f"{attempts[spec.episode_id]} times: {e}"), "steps": []}
                    buf_e.append(res["episode"])
                    buf_s.extend(res["steps"])
                    progress.update(res["episode"])
                    failures += res["episode"]["status"] == "error"     # a budget stop is not a failure
                    if cfg.run.max_failures and failures >= cfg.run.max_failures and queue:
                        log.error("stopping: %d episodes failed (run.max_failures); in-flight ones finish",
                                  failures)
                        queue.clear()
                    submit(worker)
                if buf_e and (time.monotonic() - last_flush >= cfg.run.flush_interval_s or not pending):
                    store.write_batch(buf_e, buf_s)
                    buf_e, buf_s, last_flush = [], [], time.monotonic()
                if time.monotonic() - last_poll >= 5.0:
                    poll_live()
                    last_poll = time.monotonic()
                if pool is not None and time.monotonic() - last_health >= m.health_check_s:
                    if pool.check():            # a replica moved: workers route to its new address
                        ray.get([w.set_endpoints.remote(pool.endpoints) for w in workers], timeout=60)
                    last_health = time.monotonic()
                progress.render()
            poll_live()
        finally:
            if buf_e:
                store.write_batch(buf_e, buf_s)
        info.update(requeued=requeued, replica_restarts=pool.restarts if pool is not None else 0)
        info.update(run_s=time.time() - t_run, failures=failures, steps=progress.steps,
                    tokens_in=progress.tokens_in, tokens_out=progress.tokens_out,
                    index_stats=ray.get(index.get_stats.remote()) if index is not None else None,
                    service_stats={k: ray.get(h.get_stats.remote()) for k, h in services.items()},
                    replica_seconds=session.replica_seconds())
    finally:
        for w in workers:       # per run: the next sweep point has another agent config
            ray.kill(w)
        if budget is not None:
            info["budget"] = budget.stop()
    return info


def reduce_metrics(store: EpisodeStore, benchmark: str, judge: str | None = None) -> list[dict[str, Any]]:
    """Metrics per (model, config, judge) over everything in the store, rewritten whole: each
    configuration once per judge that judged it (never a blend of judges), or once with no
    judgements. Each episode row carries that judge's judgements as ``row["judgements"] = {key:
    value or None}`` (missing key: not judged), re-read through the benchmark's current parser.
    ``judge`` keeps one judge (id, id prefix or model name)."""
    bench = get_benchmark(benchmark)
    by_judge = store.judgements_by_judge(bench.parse_judgement)
    judges = store.judges()
    groups: dict[tuple[str, str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in store.episodes().to_pylist():
        if r["benchmark"] == benchmark:
            groups[(r["model"], r["config_hash"], r["agent"], r["data"] or "")].append(r)
    rows: list[dict[str, Any]] = []
    for (model, chash, agent, data), eps in sorted(groups.items()):
        for v in judged_views(eps, by_judge, judges, judge):
            rows += metric_rows(benchmark, model, chash, agent, data, bench.metrics(v.rows), v.judge, v.judge_model,
                                v.self_judged)
    store.write_metrics(rows)
    return rows


def summary(rows: list[dict[str, Any]], config_hash: str) -> str:
    """This config's metrics, one table per judge, each saying which judge (and, in bold, when the
    model judged itself)."""
    mine = [r for r in rows if r["config_hash"] == config_hash]
    out = []
    for j in sorted({r["judge"] for r in mine}):
        these = [r for r in mine if r["judge"] == j]
        if j:
            out.append(f"judge {j}" + (f"  **{SELF_JUDGED.upper()}**: {self_judged_note(these[0]['judge_model'])}"
                                       if these[0]["self_judged"] else ""))
        out.append(table(["metric", "value", "n"], [(r["metric"], r["value"], r["n"]) for r in these]))
    return "\n".join(out)


def run(cfg: Config, session: Session | None = None) -> dict[str, Any]:
    """One run: generate what is missing, judge what is missing, reduce metrics. Pass a
    ``session`` to share Ray, models, index and services with other runs (a sweep)."""
    validate(cfg)
    own = session is None
    session = session or Session()
    t0 = time.time()
    judge_model = cfg.judge.hosted_model if cfg.judge.kind == "hosted" else None
    uptime0 = session.replica_seconds(cfg.model)
    judge_uptime0 = session.replica_seconds(judge_model) if judge_model is not None else 0.0
    bench = get_benchmark(cfg.benchmark.name)
    p = plan(cfg)
    store = EpisodeStore(p.run_dir, bench.episode_fields)
    store.write_json("config.json", {"config": to_plain(asdict(cfg)), "config_hash": p.config_hash})
    log.info("%d episodes planned, %d already finished, %d to run -> %s", len(p.specs),
             len(p.specs) - len(p.todo), len(p.todo), p.run_dir)
    info: dict[str, Any] = {"episodes_total": len(p.specs), "episodes_skipped": len(p.specs) - len(p.todo)}
    try:
        if p.todo and (why := exhausted_before_start(cfg, store, p.config_hash)):
            log.warning("not starting %d episodes: %s (raise run.budget.* to resume)", len(p.todo), why)
            info["budget_exhausted_before_start"] = why
        elif p.todo:
            info.update(execute(cfg, p, store, session))

        def judge_endpoints(m: ModelConfig) -> list[Any]:
            session.ensure_ray(cfg, needed_cpus(cfg, bench))
            return session.pool(m, p.run_dir / "logs", keep=session.needed(cfg))

        info["judge"] = run_judge_stage(cfg, bench, store, p.config_hash, judge_endpoints,
                                        judge_budget_gate(cfg, store, p.config_hash))
        info["model_starts_in_session"] = session.model_starts
        # what cost accounting needs (engine/cost.py): whose uptime this run paid for, at what price
        info["config_hash"] = p.config_hash
        info["model"] = to_plain(cfg.model)
        info["judge_config"] = to_plain(cfg.judge)
        info["replica_seconds_run"] = session.replica_seconds(cfg.model) - uptime0
        if judge_model is not None and Session.key(judge_model) != Session.key(cfg.model):
            info["judge_replica_seconds_run"] = session.replica_seconds(judge_model) - judge_uptime0
    finally:
        if own:
            session.close()
    rows = reduce_metrics(store, bench.name)
    if cfg.run.compact:
        store.compact()
    info["wall_s"] = time.time() - t0
    store.write_json(f"run-{time.strftime('%Y%m%d-%H%M%S')}-{p.config_hash[:6]}.json", info)
    model = cfg.model.name if bench.uses_model(cfg.agent) else "none"
    sys.stderr.write(f"\n{bench.name} | model {model} | config {p.config_hash} | {p.run_dir}\n")
    sys.stderr.write(summary(rows, p.config_hash) + "\n")
    sys.stderr.write(f"wall time {info['wall_s']:.1f} s ({info['episodes_skipped']} episodes reused, "
                     f"{info.get('episodes_planned', 0)} run; model starts this session: {session.model_starts})\n")
    return info


def hydra_entry() -> None:
    from ray_jobs.configs import hydra_main

    hydra_main("config", lambda cfg, session: run(cfg, session))


if __name__ == "__main__":
    hydra_entry()
