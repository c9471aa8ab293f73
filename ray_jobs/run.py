"""Driver: ``dateline run [overrides]``. Validate the config, plan episodes, skip the finished
ones, start (or join) Ray, host the model, start the shared index and the episode workers,
write results to Parquet as they arrive, then reduce to the metrics table.

The store is the source of truth: a re-run with the same config plans only episodes that
have no ok row yet, and when nothing is left it exits without starting Ray.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
import time
from collections import defaultdict, deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from engine import metric_table, outcomes
from engine.benchmarks import get_benchmark
from engine.budget import Caps
from engine.config import (
    Config,
    ModelConfig,
    engine_batch,
    judge_model_config,
    replica_count,
    stable_hash,
    to_plain,
    validate,
)
from engine.dispatch import WORKER_LOST, EpisodeSpec, WorkerSetup, agent_json, remote_gate, start_workers, unstarted_row
from engine.errors import ConfigError, WorkerStartError
from engine.hosting.events import ReplicaEvents, causes, read_events
from engine.hosting.vllm_server import planned_dtype
from engine.hosting.weights import weights_id, weights_identity
from engine.judges import SELF_JUDGED, evaluation_settings, self_judged_note
from engine.llm import SamplingParams
from engine.outcomes import Planned, task_set
from engine.paths import repo_path
from engine.progress import Progress, table
from engine.protocol import Benchmark, BenchmarkBase, dumps
from engine.quarantine import set_aside_episodes
from engine.storage import EpisodeStore, is_uri
from engine.writer import StoreWriter
from ray_jobs import provenance, stopping
from ray_jobs.budget import (
    RunBudget,
    SweepLedger,
    budget_exhausted_rows,
    check_sweep_budgets,
    exhausted_before_start,
    judge_budget_gate,
    judge_prices_match,
    start_budget,
    sweep_ledger,
)
from ray_jobs.judge import JudgeFleet, JudgeStream, judge_endpoints, pending_requests, run_judge_identity
from ray_jobs.session import Session
from ray_jobs.sizing import derived_workers, projected_tokens, size_replicas, sized

log = logging.getLogger("dateline.run")


@dataclass
class Plan:
    specs: list[EpisodeSpec]
    todo: list[EpisodeSpec]
    config_hash: str
    run_dir: Path | str          # a local folder, or a pyarrow filesystem URI (s3://bucket/prefix)
    engine: dict[str, Any] = field(default_factory=dict)     # engine_identity: weights, engine args, prompt


def run_dir(cfg: Config) -> Path | str:
    """The run dir: a URI (``s3://``, ``gs://``) as given, else a local path (see :func:`repo_path`)."""
    return cfg.run.dir if is_uri(cfg.run.dir) else repo_path(cfg.run.dir)


def model_identity(cfg: Config, uses_model: bool) -> dict[str, Any]:
    if not uses_model:
        return {"name": "none"}
    m = cfg.model
    return {"name": m.name, "served_name": m.served_name or m.name, "temperature": m.temperature, "top_p": m.top_p}


def episode_relevant(cfg: Config, bench: Benchmark[Any]) -> dict[str, Any]:
    """The benchmark config as far as it decides an episode's result: not the task limit (it
    picks tasks) and not the fields the benchmark lists in ``evaluation_fields`` (they change
    only how finished episodes are judged), so changing those never re-runs episodes."""
    drop = {"limit", "task_ids", "dataset", *bench.evaluation_fields}
    return {k: v for k, v in to_plain(cfg.benchmark).items() if k not in drop} | {"limit": None}


def engine_identity(cfg: Config, bench: Benchmark[Any], uses_model: bool) -> dict[str, Any]:
    """What generates a configuration's outputs beyond its settings: the model's weights (path and
    content fingerprint; the served name of an external endpoint), the engine's arguments, the
    reproducible mode, and the version of the agent's prompt text. Part of every episode id; a
    configuration's stored episodes all have the same (:func:`check_engine`). A CPU model's
    engine arguments hold its dtype as this machine resolves it when the config leaves it out
    (bfloat16 where the CPU computes it natively, else float32: ``engine/hosting/machine.py``),
    so runs on the two kinds of CPU are two engines; the pool's replicas refuse to start on a node
    that resolves another (``Session.pool``)."""
    out: dict[str, Any] = {"prompt": bench.prompt_version}
    if uses_model:
        m = cfg.model
        out["weights"] = weights_identity(m)
        if m.kind == "vllm":
            dtype = planned_dtype(m)
            out["engine_args"] = to_plain(m.engine_args) | ({"dtype": dtype} if dtype is not None else {})
            out["reproducible"] = m.reproducible
    return out


# what each part of the engine identity is called in a refusal (the config field behind it)
_ENGINE_FIELDS = {"weights.path": "model.path", "weights.fingerprint": "model.path (the weights' content)",
                  "weights.served": "model.served_name",
                  "weights.server": "model.base_url (what the endpoint serves)", "engine_args": "model.engine_args",
                  "reproducible": "model.reproducible", "prompt": "agent prompt version"}


def _field_name(where: str) -> str:
    for k, name in _ENGINE_FIELDS.items():
        if where == k or where.startswith(k + "."):
            return name + where[len(k):]
    return where


def _diff(old: Any, new: Any, where: str) -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new)):
            out += _diff(old.get(k), new.get(k), f"{where}.{k}" if where else k)
        return out
    return [] if old == new else [f"{_field_name(where)}: {json.dumps(old, default=str)} -> "
                                  f"{json.dumps(new, default=str)}"]


def _server(engine: dict[str, Any]) -> Any:
    return (engine.get("weights") or {}).get("server")


def _without_server(engine: dict[str, Any]) -> dict[str, Any]:
    """The engine identity without what an external endpoint reported it serves (``weights.server``):
    what episode ids hash, and what two identities are compared by when one side lacks it."""
    w = engine.get("weights")
    if not isinstance(w, dict) or "server" not in w:
        return engine
    return {**engine, "weights": {k: v for k, v in w.items() if k != "server"}}


def check_engine(store: EpisodeStore, config_hash: str, engine: dict[str, Any], run_dir: Path | str) -> None:
    """Refuse a run that would mix two engine identities in one configuration: stored results
    (ok or error) of ``config_hash`` generated by another engine than ``engine``. The message
    names the field that changed."""
    t = store.episodes(["engine"], config_hash=config_hash, filter=pc.field("status").isin(["ok", "error"]))
    stored = set(t["engine"].to_pylist())
    mine = dumps(engine)
    others = sorted((x for x in stored if x != mine), key=lambda x: x or "")
    if not others:
        return
    if any(not x for x in others):
        raise ConfigError(
            f"run.dir: {run_dir} holds episodes of this configuration ({config_hash}) stored before dateline recorded "
            "what generated them (weights, engine args, prompt version), so this run could mix two engines in one "
            "configuration; use a new run.dir")
    changes = []
    for x in others:
        old = json.loads(x or "{}")
        if _server(old) is None or _server(engine) is None:
            # what the endpoint serves is compared only when both sides know it (rows stored before
            # endpoints were asked, or an endpoint that cannot say: compared by the served name)
            if _server(old) != _server(engine):
                log.warning("config %s: cannot verify that the endpoint serves what it served for the stored "
                            "episodes (%s); comparing the served name only", config_hash[:8],
                            "not recorded then" if _server(old) is None else "it does not say now")
            old, new = _without_server(old), _without_server(engine)
        else:
            new = engine
        if changes := _diff(old, new, ""):
            break
    if not changes:
        return
    first = changes[0].split(":", 1)[0] if changes else "engine"
    raise ConfigError(
        f"{first}: changed since episodes of this configuration ({config_hash}) were stored in {run_dir} "
        f"({'; '.join(changes)}). One configuration never mixes two engines: use another run.dir, or another "
        "model.name for the new weights or engine")


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
    engine = engine_identity(cfg, bench, uses_model)
    for_id = _without_server(engine)        # ids stay what they were before endpoints were asked
    specs = []
    for task in bench.load_tasks(cfg):
        for seed in range(cfg.run.seed, cfg.run.seed + cfg.run.num_seeds):
            eid = stable_hash(ident, for_id, task.task_id, seed)
            specs.append(EpisodeSpec(eid, config_hash, task, task.task_id, seed))
    rd = run_dir(cfg)
    store = EpisodeStore(rd, bench.episode_fields)
    check_engine(store, config_hash, engine, rd)
    # failed episodes are results too: re-run only when asked (run.retry_failed)
    done = store.finished_ids(config_hash=config_hash, statuses=("ok",) if cfg.run.retry_failed else ("ok", "error"))
    todo = [s for s in specs if s.episode_id not in done]
    return Plan(specs, todo, config_hash, rd, engine)


def data_identity(cfg: Config) -> str:
    from engine.protocol import dumps

    return dumps(to_plain(cfg.benchmark) | {"limit": None})


def judges_episodes(bench: Benchmark[Any]) -> bool:
    """Whether the benchmark asks for judgements of its episodes at all (newsagent's judge is the
    pairwise stage). mypy sees two unrelated method types; they are one function when inherited."""
    return type(bench).judge_requests is not BenchmarkBase.judge_requests  # type: ignore[comparison-overlap]


def needed_cpus(cfg: Config, bench: Benchmark[Any]) -> float:
    """Logical CPUs a whole run asks Ray for: replicas, index, episode workers, services. A local
    cluster is sized by this whichever stage starts Ray first (the judge stage alone needs only the
    model, but the next point of a sweep will schedule workers on the same cluster)."""
    m, c, j = cfg.model, cfg.cluster, cfg.judge
    self_judge = j.kind == "self"
    hosted = m.kind == "vllm" and (bench.uses_model(cfg.agent) or self_judge)
    jm = j.hosted_model if j.kind == "hosted" else None
    judge_cpus = replica_count(jm) * jm.num_cpus if jm is not None and jm.kind == "vllm" and jm != m else 0
    judge_cpus += j.actors * j.actor_cpus if j.kind != "none" and judges_episodes(bench) else 0   # judge actors
    return ((replica_count(m) * m.num_cpus if hosted else 0) + judge_cpus + cfg.index.num_cpus
            + c.num_workers * c.worker_num_cpus + sum(s.num_cpus for s in bench.services(cfg)))


@dataclass
class Point:
    """One configuration of a sweep in its run dir, and what the sweep does for it."""
    key: str                     # config hash @ run dir
    cfg: Config
    bench: Benchmark[Any]
    plan: Plan
    store: EpisodeStore
    uses_model: bool
    generate: bool               # episodes to run
    judge: bool                  # a judge to run (over new and earlier episodes)
    pools: tuple[str, ...]       # hosted model pools it needs (model under test, judge model)
    info: dict[str, Any]
    budget: RunBudget | None = None
    ledger: SweepLedger | None = None     # the sweep's one ledger (run.budget.scope=sweep), if it has one
    setup: WorkerSetup | None = None
    index: Any = None            # its index actor and service actors (while generating)
    services: dict[str, Any] = field(default_factory=dict)


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


def _failure_json(bench: Benchmark[Any], task: Any) -> str:
    """What an episode of ``task`` counts as without a scored result, when the benchmark says it
    differs from its ``failure_values`` ("" otherwise)."""
    own = bench.task_failure_values(task)
    return "" if own is None or own == dict(bench.failure_values) else dumps(own)


def make_point(cfg: Config, closed: str | None = None) -> Point:
    """A point planned (its config and plan written to its run dir) and ready to run: ``closed``
    is why its budget allows no call ("" none; None: ask its own ledger's records, a point ledger)."""
    return open_point(plan_point(cfg), closed)


def plan_point(cfg: Config) -> Point:
    """A point planned, before its budget is asked (:func:`open_point`): ``generate`` says only
    whether episodes are left, ``judge`` and ``pools`` are not decided yet."""
    validate(cfg)
    bench = get_benchmark(cfg.benchmark.name)
    # bad data (docs/design/data.md): the rows benchmark.on_bad_rows=skip dropped while plan()
    # loaded the tasks go to RUN_DIR/quarantine/part-*.parquet, and their count is logged
    from engine.quarantine import collecting, write_quarantine

    with collecting() as bad_rows:
        p = plan(cfg)
    store = EpisodeStore(p.run_dir, bench.episode_fields)
    write_quarantine(store, bad_rows.rows)
    store.write_json("config.json", {"config": to_plain(asdict(cfg)), "config_hash": p.config_hash})
    # the denominator of this configuration's metrics (engine/outcomes.py): what this run planned
    planned = [Planned(s.episode_id, s.task_id, s.seed, _failure_json(bench, s.task)) for s in p.specs]
    store.write_plan(p.config_hash, [(x.episode_id, x.task_id, x.seed, x.failure) for x in planned], task_set(planned),
                     cfg.run.score_failures, dumps(evaluation_settings(cfg.benchmark, bench.evaluation_fields)))
    uses_model = bench.uses_model(cfg.agent)
    info: dict[str, Any] = {"episodes_total": len(p.specs), "episodes_skipped": len(p.specs) - len(p.todo)}
    log.info("%d episodes planned, %d already finished, %d to run -> %s", len(p.specs),
             len(p.specs) - len(p.todo), len(p.todo), p.run_dir)
    return Point(f"{p.config_hash}@{p.run_dir}", cfg, bench, p, store, uses_model, bool(p.todo), False, (), info)


def open_point(pt: Point, closed: str | None = None) -> Point:
    """Decide what a planned point does: nothing new when its budget is closed (``closed``, or
    for None what its own records say: every episode left is stored as budget_exhausted), else
    its episodes, its judge and the model pools they need."""
    cfg, bench, p, store, info = pt.cfg, pt.bench, pt.plan, pt.store, pt.info
    generate = pt.generate
    if closed is None:
        closed = exhausted_before_start(cfg, store, p.config_hash)     # no call of this point may start
    if generate and closed:
        log.warning("not starting %d episodes: %s (raise run.budget.* to resume)", len(p.todo), closed)
        info["budget_exhausted_before_start"] = closed
        # stored as budget-stopped (counted so in every metric's n_budget_stopped), run by a larger budget
        stopped = store.finished_ids(p.config_hash, statuses=("budget_exhausted",))
        rows = budget_exhausted_rows(worker_setup(cfg, bench, p, store, []), [x for x in p.todo
                                                                               if x.episode_id not in stopped], closed)
        if rows:
            store.write_batch(rows, [])
        generate = False
    judge = cfg.judge.kind != "none" and judges_episodes(bench) and not closed and (
        generate or bool(pending_requests(cfg, bench, store, p.config_hash, run_judge_identity(cfg, bench).id)))
    pools: list[str] = []
    if generate and pt.uses_model:
        pools.append(Session.key(cfg.model))
    if judge and (jm := judge_model_config(cfg.model, cfg.judge)) is not None:
        pools.append(Session.key(jm))
    pt.generate, pt.judge, pt.pools = generate, judge, tuple(dict.fromkeys(pools))
    return pt


def run_sweep(cfgs: list[Config], session: Session | None = None,
              command: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Every configuration of a sweep as one job: all points planned up front, one queue of
    episodes per model feeding one set of workers, the models that fit hosted at once (waves,
    largest first, when they do not), judging streamed as episodes finish, metrics reduced once
    at the end. Returns each configuration's run info (in ``cfgs`` order). ``command``: the
    command line, for the provenance every run dir records (ray_jobs/provenance.py; default
    ``sys.argv``)."""
    from contextlib import ExitStack

    from engine.runlock import RunDirLock

    with ExitStack() as locks:
        # one writer per run dir: a second driver on any of them stops here, naming the holder
        for d in sorted({str(run_dir(c)) for c in cfgs}):
            locks.enter_context(RunDirLock(d, "dateline run"))
        return _run_sweep(cfgs, session, command)


def _run_sweep(cfgs: list[Config], session: Session | None, command: Sequence[str] | None = None
               ) -> list[dict[str, Any]]:
    own = session is None
    session = session or Session()
    t0 = time.time()
    check_sweep_budgets(cfgs)          # one ledger for the sweep: its points agree on it, before anything starts
    points: dict[str, Point] = {}
    order: list[str] = []
    for cfg in cfgs:
        pt = plan_point(cfg)
        order.append(pt.key)
        points.setdefault(pt.key, pt)        # the same configuration twice runs once
    ledger = sweep_ledger([(p.cfg, p.store, p.plan.config_hash) for p in points.values()])
    closed = ledger.exhausted_before_start() if ledger is not None else None
    for p in points.values():
        mine = ledger is not None and p.plan.config_hash in ledger.hashes
        p.ledger = ledger if mine else None
        open_point(p, closed if mine else None)
    work = [p for p in points.values() if p.generate or p.judge]
    models = {Session.key(m): m for p in points.values()
              for m in (p.cfg.model, p.cfg.judge.hosted_model) if m is not None}
    try:
        if work:
            _run_waves(work, models, session, ledger)
    finally:
        if own:
            session.close()
    if ledger is not None and ledger.final is not None:
        # every point of the sweep's ledger records it (its run_id supersedes the live snapshot)
        for p in points.values():
            if p.ledger is ledger:
                p.info["budget"] = ledger.record(ledger.final, p.plan.config_hash)
    # what made these numbers (versions, command, hardware, times): once, into every run dir
    prov = provenance.collect(cfgs, command, t0, time.time())
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for d, p in {str(p.plan.run_dir): p for p in points.values()}.items():
        p.store.write_json(f"provenance-{stamp}.json", prov | {"configs": [
            {"config_hash": q.plan.config_hash, "benchmark": q.bench.name, "model": q.cfg.model.name}
            for q in points.values() if str(q.plan.run_dir) == d]})
    # metrics once per run dir, of every benchmark in it (the default view, stored as the cache
    # every reader checks against the store: engine/metric_table.py), and its tables
    reduced: dict[str, list[dict[str, Any]]] = {}
    for p in points.values():
        k = str(p.plan.run_dir)
        if k not in reduced:
            if p.cfg.run.compact:
                p.store.compact()
            reduced[k] = metric_table.refresh(p.store)
            names = sorted({r["benchmark"] for r in reduced[k]})
            p.store.write_text("metrics/tables.md", metric_table.tables_markdown(reduced[k], names))
    for p in points.values():
        info = p.info
        info["wall_s"] = time.time() - t0
        info.setdefault("model_starts_in_session", session.model_starts)
        info["config_hash"] = p.plan.config_hash
        info["model"] = to_plain(p.cfg.model)
        info["judge_config"] = to_plain(p.cfg.judge)
        info.setdefault("replica_seconds_run", 0.0)
        info["failures"] = failures(p)
        info["provenance"] = prov
        p.store.write_json(f"run-{time.strftime('%Y%m%d-%H%M%S')}-{p.plan.config_hash[:6]}.json", info)
        model = p.cfg.model.name if p.uses_model else "none"
        out = sys.stdout                     # results on stdout, logs on stderr
        out.write(f"\n{p.bench.name} | model {model} | config {p.plan.config_hash} | {p.plan.run_dir}\n")
        out.write(summary(reduced[str(p.plan.run_dir)], p.plan.config_hash) + "\n")
        for w in p.bench.config_warnings(to_plain(p.cfg.agent)):
            out.write(f"**{w}**\n")
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
    return [points[k].info for k in order]


def failures(p: Point) -> dict[str, Any]:
    """The episodes of a point's plan without a scored result, by kind (engine.outcomes.error_kind):
    a count and one example each; and whether the run stopped at run.max_failures."""
    planned = {s.episode_id for s in p.plan.specs}
    rows = p.store.episodes(["episode_id", "status", "error", "task_id"], config_hash=p.plan.config_hash,
                            filter=pc.field("status") != "ok").to_pylist()
    kinds: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r["episode_id"] not in planned:
            continue
        k = kinds.setdefault(outcomes.error_kind(r), {"count": 0, "status": r["status"], "example": "", "task": ""})
        k["count"] += 1
        if not k["example"]:
            k["example"] = (r["error"] or "").splitlines()[0][:300] if r["error"] else r["status"]
            k["task"] = r["task_id"]
    errors = sum(k["count"] for k in kinds.values() if k["status"] == "error")
    # episodes that ran but whose row the store writer could not encode (engine/storage.py): in
    # RUN_DIR/quarantine only, unless a later run stored them
    aside = {e: why for e, why in set_aside_episodes(p.store).items() if e in planned}
    if aside:
        stored = set(p.store.episodes(["episode_id"], episode_ids=list(aside))["episode_id"].to_pylist())
        aside = {e: why for e, why in aside.items() if e not in stored}
    return {"kinds": kinds, "errors": errors, "planned": len(planned),
            "set_aside": len(aside), "set_aside_example": next(iter(aside.values()), ""),
            "stopped_at_max_failures": p.info.get("stopped_at_max_failures", 0),
            "not_run": p.info.get("not_run", 0), "model_failing": p.info.get("model_failing", ""),
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


def exit_code(cfgs: list[Config], infos: list[dict[str, Any]]) -> tuple[int, str]:
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


def _run_waves(work: list[Point], models: dict[str, ModelConfig], session: Session,
               ledger: SweepLedger | None = None) -> None:
    import ray

    first = work[0].cfg
    fixed: dict[str, float] = {"CPU": 0.0}
    seen: set[str] = set()
    for p in work:
        c, i = p.cfg.cluster, p.cfg.index
        for key, cpus in ((f"workers:{p.pools[:1]}", c.num_workers * c.worker_num_cpus if p.generate else 0.0),
                          (f"index:{stable_hash(to_plain(i), p.bench.name)}", i.num_cpus if p.generate else 0.0),
                          *((f"svc:{s.name}", s.num_cpus) for s in (p.bench.services(p.cfg) if p.generate else []))):
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
            _run_wave(wave, models, session, fixed["CPU"])
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
    available now (ray_jobs/sizing.py); pools already up keep theirs."""
    to_start = {k: models[k] for k in keys if k not in session.pools and models[k].kind == "vllm"}
    if not any(m.replicas == "auto" for m in to_start.values()):
        return {k: models[k] for k in keys}
    import ray._private.state as ray_state

    nodes = [{k: float(v) for k, v in res.items() if not k.startswith("node:")}
             for res in ray_state.available_resources_per_node().values()]
    work: dict[str, float] = {}
    sources: dict[str, set[str]] = defaultdict(set)
    for p in wave:
        for k in p.pools:
            if k in to_start:
                n = len(p.plan.todo) if p.generate else len(p.plan.specs)      # episodes to run, or to judge
                tokens, source = projected_tokens(p.store, p.plan.config_hash, p.plan.run_dir, to_start[k].name,
                                                  p.bench.name, n)
                work[k] = work.get(k, 0.0) + tokens
                sources[k].add(source)
    counts = size_replicas(to_start, work, nodes, reserve_cpus)
    out = {k: sized(models[k], counts[k]) if k in counts and models[k].replicas == "auto" else models[k] for k in keys}
    for p in wave:
        auto = {models[k].name: {"replicas": counts[k], "projected_tokens": round(work.get(k, 0.0)),
                                 "from": sorted(sources[k])} for k in p.pools if k in counts and models[k].replicas == "auto"}
        if auto:
            p.info["replicas_auto"] = auto
    return out


def _run_wave(wave: list[Point], models: dict[str, ModelConfig], session: Session, reserve_cpus: float = 0.0) -> None:
    """Host the wave's models (at once), then run and judge every point of the wave together."""
    keys = list(dict.fromkeys(k for p in wave for k in p.pools))
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
    startup_s = time.time() - t0
    stream = judge_stream([p for p in wave if p.judge])
    groups: dict[str, list[Point]] = defaultdict(list)
    claimed: set[str] = set()
    try:
        for p in wave:       # every point's workers and ledger first: a judge may use another point's ledger
            p.info["startup_s"] = startup_s
            model_key = Session.key(p.cfg.model)
            # the first point of the wave that uses a model it started pays for the start
            p.info["model_started"] = p.uses_model and p.cfg.model.kind == "vllm" and model_key in keys \
                and model_key not in started0 and model_key not in claimed
            if p.info["model_started"]:
                claimed.add(model_key)
            p.info["model_startup"] = session.startups.get(model_key, "reused") if p.info["model_started"] else "reused"
            if p.generate:
                _prepare_generation(p, session)
                groups[model_key if p.uses_model else "none"].append(p)
        for p in wave:
            if p.judge:
                _add_judge(stream, p, session)
                if p.info["episodes_skipped"]:      # episodes of earlier runs may still miss judgements
                    stream.submit(p.key, p.store.episodes(config_hash=p.plan.config_hash, ok_only=True).to_pylist())
        t_run = time.time()
        _dispatch(groups, session, stream)
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
    # replica uptime of the wave, shared among its points by their tokens (startup included)
    for k in keys:
        used = [p for p in wave if k in p.pools]
        up = session.replica_seconds(models[k]) - uptime0[k]
        weight = {p.key: _tokens(p.info) for p in used}
        total = sum(weight.values())
        for p in used:
            share = up * (weight[p.key] / total if total else 1.0 / len(used))
            field_name = "replica_seconds_run" if k == Session.key(p.cfg.model) else "judge_replica_seconds_run"
            p.info[field_name] = p.info.get(field_name, 0.0) + share
    for p in wave:
        p.info["replica_seconds"] = session.replica_seconds()


def _tokens(info: dict[str, Any]) -> int:
    j = info.get("judge") or {}
    return int(info.get("tokens_in", 0) + info.get("tokens_out", 0) + j.get("tokens_in", 0) + j.get("tokens_out", 0))


def worker_setup(cfg: Config, bench: Benchmark[Any], plan_: Plan, store: EpisodeStore, endpoints: list[Any],
                 budget: Any = None) -> WorkerSetup:
    """What the episode workers of a configuration run with (and the identity columns of its rows)."""
    m, c = cfg.model, cfg.cluster
    uses_model = bench.uses_model(cfg.agent)
    return WorkerSetup(
        benchmark=bench.name, model_name=m.name, agent=cfg.agent, agent_json=agent_json(cfg.agent),
        endpoints=endpoints,
        sampling=SamplingParams.for_model(m),
        max_retries_per_episode=m.max_retries_per_episode,
        inflight_per_replica=max(1, engine_batch(m) // c.num_workers),
        top_k=cfg.index.top_k, threshold=cfg.index.threshold, uses_model=uses_model,
        data_json=data_identity(cfg), artifacts_dir=str(store.root / "artifacts"),
        artifacts_uri=store.remote_dir("artifacts"),
        model_path=m.path if m.kind == "vllm" else "",
        # a hosted replica that dies or is restarted by its pool: calls wait for one that long
        reroute_wait_s=m.replica_wait_s if m.kind == "vllm" else 0.0,
        budget=budget, budget_point=plan_.config_hash,
        pool_key=Session.key(m) if uses_model else "",
        engine_json=dumps(plan_.engine), weights_id=weights_id(m) if uses_model else "")


def _prepare_generation(p: Point, session: Session) -> None:
    import ray

    cfg, bench, m = p.cfg, p.bench, p.cfg.model
    p.index = index = session.index(cfg, bench)
    p.services = services = session.benchmark_services(cfg, bench)
    endpoints = session.pool(m, p.store.root / "logs", keep=set(session.pools),
                             log_uri=p.store.remote_dir("logs")) if p.uses_model else []
    p.info["index"] = ray.get(index.ready.remote()) if index is not None else None
    p.info["services"] = {k: ray.get(h.info.remote()) if hasattr(h, "info") else {} for k, h in services.items()}
    if p.ledger is not None:
        p.budget = p.ledger.budget          # the sweep's (started by _run_waves)
    else:
        p.budget = start_budget(cfg, p.plan.config_hash, p.store, session, bool(p.info.get("model_started")))
    p.setup = worker_setup(cfg, bench, p.plan, p.store, endpoints, p.budget.actor if p.budget is not None else None)
    p.info["episodes_planned"] = len(p.plan.todo)


def judge_stream(points: list[Point]) -> JudgeStream | JudgeFleet:
    """Where a wave's judging runs: judge actors (``judge.actors``, the most any point asks for),
    or a thread of the driver when every judged point says ``judge.actors=0``."""
    flush_s = min((p.cfg.run.flush_interval_s for p in points), default=2.0)
    j = max((p.cfg.judge for p in points), key=lambda j: j.actors, default=None)
    if j is None or j.actors <= 0:
        return JudgeStream(flush_s)
    return JudgeFleet(j.actors, flush_s, j.actor_cpus, dict(j.actor_resources) or None, j.actor_start_timeout_s)


def _add_judge(stream: JudgeStream | JudgeFleet, p: Point, session: Session) -> None:
    """The point's judge on the stream: its endpoints, and its calls' budget (the point's own
    ledger when the judge's calls are priced like the model's, else a gate from the recorded spend)."""
    cfg = p.cfg
    hosted = judge_model_config(cfg.model, cfg.judge)
    eps = judge_endpoints(cfg, lambda m: session.pool(m, p.store.root / "logs", keep=set(session.pools),
                                                      log_uri=p.store.remote_dir("logs")))
    gate = None
    ledger = p.budget if p.budget is not None else (p.ledger.budget if p.ledger is not None else None)
    if ledger is not None and judge_prices_match(cfg):
        gate = remote_gate(ledger.actor, p.plan.config_hash)
    elif Caps.of(cfg.run.budget).any:
        gate = judge_budget_gate(cfg, p.store, p.plan.config_hash, p.ledger)
    # in flight per endpoint: a hosted judge's engine batch, an external one's judge.max_inflight
    batch = engine_batch(hosted) if hosted is not None and hosted.kind == "vllm" else None
    stream.add(p.key, cfg, p.bench, p.store, eps, gate, max(batch or 0, cfg.judge.max_inflight), p.plan.config_hash)


def interleave(lists: list[list[EpisodeSpec]]) -> list[EpisodeSpec]:
    """One queue from the points' episodes, taken in turn (a1 b1 c1 a2 b2 ...): every point moves
    at the same pace, so no point's episodes all wait at the end of the queue. Point after point,
    the last point (in a budget sweep the costliest: Hydra lists 1,3,5,7) would start only when the
    others were done and run its whole length as the sweep's tail; and under a GPU-hour or dollar
    cap, whose ledger is charged the pool's uptime while its point runs (docs/design/budget.md),
    it would pay for its wait at the end of the queue before its first episode started."""
    out: list[EpisodeSpec] = []
    for i in range(max((len(x) for x in lists), default=0)):
        out += [x[i] for x in lists if i < len(x)]
    return out


@stopping.deferring        # a signal stops the loop between iterations (ray_jobs/stopping.py)
def _dispatch(groups: dict[str, list[Point]], session: Session, stream: JudgeStream | JudgeFleet) -> None:
    """One queue per model, feeding one set of worker actors that run every point of that model:
    points overlap (the next point's episodes fill the slots of the last one's tail). Rows go to
    the store writer as they finish, and to the judges once they are stored."""
    import ray

    if not groups:
        return
    queues: dict[str, deque[EpisodeSpec]] = {}
    workers: dict[str, list[Any]] = {}
    by_key: dict[str, Point] = {}
    for g, pts in groups.items():
        c, m = pts[0].cfg.cluster, pts[0].cfg.model
        pool = session.pool_of(m) if g != "none" else None
        nw, inflight = derived_workers(m, len(pool.endpoints) if pool is not None else 1, c) if g != "none" \
            else (c.num_workers, c.num_workers * c.episodes_per_worker)
        handles: dict[str, tuple[WorkerSetup, Any, dict[str, Any] | None]] = {}
        for p in pts:
            assert p.setup is not None      # set by _prepare_generation
            if c.concurrency == "auto":
                # every worker may fill a replica's whole batch: the engine admits its batch and
                # queues the rest, and the episodes in flight (batch / model_time_share) bound that
                # queue. A bound split per worker (batch / workers) left slots idle whenever one
                # worker's episodes were all in tool calls while another's waited for a slot.
                p.setup = replace(p.setup, inflight_per_replica=engine_batch(m))
            p.info["concurrency"] = {"mode": c.concurrency, "workers": nw, "episodes_in_flight": inflight,
                                     "replicas": len(pool.endpoints) if pool is not None else 0}
            handles[p.key] = (p.setup, p.index, p.services)
        workers[g] = start_workers(None, None, nw, c.episodes_per_worker, c.worker_num_cpus,
                                   points=handles, resources=c.worker_resources or None,
                                   prefix=f"worker-{g[:6]}")
        queues[g] = deque(interleave([[replace(s, point=p.key) for s in p.plan.todo] for p in pts]))
        by_key.update({p.key: p for p in pts})
    pending: dict[Any, tuple[str, int, EpisodeSpec]] = {}
    attempts: dict[str, int] = defaultdict(int)
    # per point: finished episodes, their steps, their model calls and the messages those refer to
    Buf = tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], dict[str, dict[str, Any]]]
    bufs: dict[str, Buf] = defaultdict(lambda: ([], [], [], {}))
    stores = {p.key: p.store for p in by_key.values()}
    stats = {k: {"failures": 0, "requeued": 0, "steps": 0, "tokens_in": 0, "tokens_out": 0} for k in by_key}
    progress = Progress(sum(len(q) for q in queues.values()), all(p.cfg.run.progress for p in by_key.values()))
    pools = {g: session.pool_of(by_key[pts[0].key].cfg.model) for g, pts in groups.items() if g != "none"}
    progress.model_total = sum(len(q) for g, q in queues.items() if g != "none")
    events = ReplicaEvents({g: [p.store for p in pts] for g, pts in groups.items()}, pools)
    events.record_all()                     # the replicas' starts
    failing: dict[str, str] = {}            # model group -> why it was stopped

    def push_endpoints(g: str, eps: list[Any]) -> None:
        try:
            ray.get([w.set_endpoints.remote(g, eps) for w in workers[g]], timeout=60)
        except Exception as e:  # noqa: BLE001 - a worker that missed it re-routes on its own failures
            log.warning("pushing endpoints of %s to its workers: %s", g[:6], e)

    def stop_model(g: str, why: str) -> None:
        """The model of group ``g`` cannot serve (every replica given up): its queued and in-flight
        episodes are left not run (no row: the same command runs them once it serves), its
        workers stop, and the run will exit non-zero with ``why``."""
        failing[g] = why
        log.error("%s; its remaining episodes are left not run", why)
        for p in groups[g]:
            drop(g, p.key, "", None)
            p.info["model_failing"] = why
        for ref in [ref for ref, (gg, _, _) in pending.items() if gg == g]:
            pending.pop(ref)
        for ref in [ref for ref, (gg, _) in reviving.items() if gg == g]:
            reviving.pop(ref)
        for w in workers[g]:
            ray.kill(w)

    stored: set[str] = set()                                     # episodes with a row from this run
    busy: dict[tuple[str, int], int] = defaultdict(int)        # episodes in flight per worker
    reviving: dict[Any, tuple[str, int]] = {}                    # ping of a worker Ray is restarting

    def submit(g: str, w: int) -> None:
        if queues[g] and (g, w) not in reviving.values() and not stopping.requested():
            spec = queues[g].popleft()
            attempts[spec.episode_id] += 1
            busy[(g, w)] += 1
            pending[workers[g][w].run.remote(spec)] = (g, w, spec)

    def drop(g: str, point: str, why: str, status: str | None) -> None:
        """Take a point's episodes off its queue (budget or failure cap): stored as never started."""
        q = queues[g]
        gone = [s for s in q if s.point == point]
        queues[g] = deque(s for s in q if s.point != point)
        if gone and status is not None:
            p = by_key[point]
            assert p.setup is not None
            for row in budget_exhausted_rows(p.setup, gone, why):
                bufs[point][0].append(row)
                stored.add(row["episode_id"])
                progress.update(row, model=g != "none")

    def ledger_lost(g: str, w: int, p: Point, spec: EpisodeSpec, res: dict[str, Any]) -> None:
        """An episode whose call could not ask the budget ledger (engine.budget.LedgerLost): not a
        result, so never stored as one. While the ledger answers again (Ray restarted it), the
        episode goes back to the front of its queue (up to cluster.max_episode_attempts); once the
        ledger is gone for good, it and every queued episode of the points that share the ledger
        are left unstarted (no row: the same command runs them)."""
        st = stats[p.key]
        st["tokens_in"] += res.get("tokens_in", 0)        # what its attempt spent still counts
        st["tokens_out"] += res.get("tokens_out", 0)
        budget = p.budget
        gone = budget is not None and (budget.run_id in lost_ledgers or not budget.alive())
        if not gone and attempts[spec.episode_id] < p.cfg.cluster.max_episode_attempts:
            log.warning("episode %s: %s; requeued (attempt %d of %d)", spec.episode_id, res["ledger_lost"],
                        attempts[spec.episode_id] + 1, p.cfg.cluster.max_episode_attempts)
            queues[g].appendleft(spec)
            st["requeued"] += 1
        elif not gone:
            log.error("episode %s left unstarted: %s on each of its %d attempts", spec.episode_id,
                      res["ledger_lost"], attempts[spec.episode_id])
            p.info["budget_lost"] = res["ledger_lost"]
        else:
            assert budget is not None
            if budget.run_id not in lost_ledgers:
                lost_ledgers.add(budget.run_id)
                log.error("the budget ledger is lost (%s): the queued episodes of its points are left unstarted; "
                          "the same command runs them", res["ledger_lost"])
            for q in by_key.values():
                if q.budget is budget:
                    q.info["budget_lost"] = res["ledger_lost"]
                    gq = Session.key(q.cfg.model) if q.uses_model else "none"
                    if gq in queues:
                        drop(gq, q.key, "", None)
        submit(g, w)

    lost_ledgers: set[str] = set()
    # the rows go to a background writer (engine/writer.py): one shard per table per run dir per
    # flush, across points; handing them over never waits on storage, its errors come back here
    judged = {(p.store.uri, p.plan.config_hash): p.key for p in by_key.values() if p.judge}

    def written(store: EpisodeStore, rows: list[dict[str, Any]]) -> None:
        """Stored rows go to their point's judges (on the writer's thread; a hand-off)."""
        if stopping.requested():        # a signal: judging them waits for the next run (it judges what is missing)
            return
        per: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in rows:
            if row["status"] == "ok" and (k := judged.get((store.uri, row["config_hash"]))) is not None:
                per[k].append(row)
        for k, rs in per.items():
            stream.submit(k, rs)

    writer = StoreWriter(min(p.cfg.run.flush_interval_s for p in by_key.values()),
                         flush_bytes=min(p.cfg.run.flush_bytes for p in by_key.values()),
                         on_written=written if judged else None)

    def flush(final: bool = False) -> None:
        try:
            writer.check()
            for k, (eps, steps, calls, messages) in list(bufs.items()):
                if eps:
                    writer.put(stores[k], eps, steps, calls, messages)
                    bufs[k] = ([], [], [], {})
        finally:
            if final:                # everything written, in order, before reduce / judge read the store
                writer.close()

    for g, ws in workers.items():
        for _ in range(groups[g][0].cfg.cluster.episodes_per_worker):
            for w in range(len(ws)):
                submit(g, w)
    last_poll = time.monotonic()
    last_health = {g: time.monotonic() for g in pools}
    try:
        # on a signal: no new episode; those in flight stop with their workers below and are no
        # result (no row: the same command runs them); the rows that finished are flushed
        while (pending or reviving) and not stopping.requested():
            if reviving:
                answered, _ = ray.wait(list(reviving), num_returns=len(reviving), timeout=0)
                for ref in answered:
                    g, w = reviving.pop(ref)
                    try:
                        ray.get(ref)
                    except Exception as e:  # noqa: BLE001 - still restarting: ask again
                        if "error raised in its creation task" in str(e):
                            raise WorkerStartError(f"episode worker {w} cannot start (its constructor failed; "
                                                   f"a restart would fail the same way): {e}") from e
                        reviving[workers[g][w].ping.remote()] = (g, w)
                        continue
                    if (pool := pools.get(g)) is not None:          # the restarted actor's routes
                        workers[g][w].set_endpoints.remote(g, pool.endpoints)
                    for _ in range(groups[g][0].cfg.cluster.episodes_per_worker - busy[(g, w)]):
                        submit(g, w)
            if not pending:
                time.sleep(0.2)
                continue
            for p in by_key.values():
                g = Session.key(p.cfg.model) if p.uses_model else "none"
                if p.budget is not None and any(s.point == p.key for s in queues[g]) and (why := p.budget.exhausted()):
                    log.warning("stopping %s: %s; in-flight episodes finish, the rest never start", p.key[:6], why)
                    drop(g, p.key, why, "budget")
            ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0.5)
            for ref in ready:
                g, w, spec = pending.pop(ref)
                busy[(g, w)] -= 1
                p = by_key[spec.point]
                c = p.cfg.cluster
                assert p.setup is not None
                try:
                    res = ray.get(ref)
                except WORKER_LOST as e:
                    # the worker died with the episode in flight (process or node lost): Ray restarts
                    # the actor; the episode goes back to the front of its queue, and only a result
                    # ever reaches the store, so it is stored exactly once
                    if (g, w) not in reviving.values():  # no new episode for it until it answers again
                        reviving[workers[g][w].ping.remote()] = (g, w)
                    if attempts[spec.episode_id] < c.max_episode_attempts:
                        log.warning("worker %d lost episode %s (%s): requeued (attempt %d of %d)", w,
                                    spec.episode_id, type(e).__name__, attempts[spec.episode_id] + 1,
                                    c.max_episode_attempts)
                        queues[g].appendleft(spec)
                        stats[p.key]["requeued"] += 1
                        for other in range(len(workers[g])):     # a live worker with room takes it now
                            if busy[(g, other)] < c.episodes_per_worker:
                                submit(g, other)
                        continue
                    res = {"episode": unstarted_row(p.setup, spec, "error", f"{type(e).__name__}: worker lost "
                                                    f"{attempts[spec.episode_id]} times: {e}"), "steps": []}
                if "ledger_lost" in res:
                    ledger_lost(g, w, p, spec, res)
                    continue
                row = res["episode"]
                stored.add(row["episode_id"])
                bufs[p.key][0].append(row)
                bufs[p.key][1].extend(res["steps"])
                bufs[p.key][2].extend(res.get("calls", ()))
                bufs[p.key][3].update(res.get("messages", {}))
                progress.update(row, model=g != "none")
                st = stats[p.key]
                st["steps"] += row["n_steps"]
                st["tokens_in"] += row["tokens_in"]
                st["tokens_out"] += row["tokens_out"]
                st["failures"] += row["status"] == "error"          # a budget stop is not a failure
                mf = p.cfg.run.max_failures
                if mf and st["failures"] >= mf and any(s.point == p.key for s in queues[g]):
                    log.error("stopping: %d episodes failed (run.max_failures) in %s; in-flight ones finish",
                              st["failures"], p.key[:6])
                    p.info["stopped_at_max_failures"] = mf
                    drop(g, p.key, "", None)
                submit(g, w)
            flush()              # a hand-off: the writer flushes by size or run.flush_interval_s
            if time.monotonic() - last_poll >= 5.0:
                _poll_live(workers, progress)
                last_poll = time.monotonic()
            for g, pool in pools.items():
                m = by_key[groups[g][0].key].cfg.model
                if pool is not None and g not in failing and time.monotonic() - last_health[g] >= m.health_check_s:
                    # a replica moved or left rotation: workers route by the new endpoints, pushed
                    # before any restart is sent (a call the restart cuts off is then the pool's)
                    pool.check(push=functools.partial(push_endpoints, g))
                    events.record(pool)
                    last_health[g] = time.monotonic()
                    if pool.failing:
                        stop_model(g, pool.failing)
            progress.note = "; ".join(n for pool in pools.values() if pool is not None and (n := pool.rotation_note()))
            progress.render()
        if not stopping.requested():
            _poll_live(workers, progress)
    finally:
        try:
            flush(final=True)
        finally:
            for ws in workers.values():        # per sweep: the next wave hosts other models
                for w in ws:
                    ray.kill(w)
    stopping.check()
    for k, st in stats.items():
        p = by_key[k]
        pool = pools.get(Session.key(p.cfg.model)) if p.uses_model else None
        if p.info.get("budget_lost"):       # planned, but neither run nor stored: the same command runs them
            p.info["unstarted"] = sum(1 for s in p.plan.todo if s.episode_id not in stored)
        if p.info.get("model_failing"):     # left not run: the same command runs them
            p.info["not_run"] = sum(1 for s in p.plan.todo if s.episode_id not in stored)
        if pool is not None:
            events.record(pool)
            p.info["replica_restart_causes"] = dict(pool.restart_causes)
        p.info.update(requeued=st["requeued"], replica_restarts=pool.restarts if pool is not None else 0,
                      failures=st["failures"], steps=st["steps"], tokens_in=st["tokens_in"],
                      tokens_out=st["tokens_out"])
        p.info["index_stats"] = ray.get(p.index.get_stats.remote()) if p.index is not None else None
        p.info["service_stats"] = {k: ray.get(h.get_stats.remote()) for k, h in p.services.items()}


def _poll_live(workers: dict[str, list[Any]], progress: Progress) -> None:
    import ray

    try:
        lives = ray.get([w.live.remote() for ws in workers.values() for w in ws], timeout=10)
    except Exception:  # progress is best effort (a worker may be restarting)
        return
    progress.set_live(*(sum(x[k] for x in lives) for k in ("steps", "tokens_in", "tokens_out")))


def reduce_metrics(store: EpisodeStore, benchmark: str, judge: str | None = None,
                   score_failures: str | None = None,
                   evaluation: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The metrics rows of ``benchmark`` in ``store``, computed (engine/outcomes.py), never stored: each
    configuration once per judge that judged it (never a blend of judges, nor of evaluation
    settings), or once with no judge; over its plan (scope all) and, where configurations are
    compared, over the tasks all of them finished (scope common); every row with the counts it
    is over. ``judge`` keeps one judge (id, id prefix or model name); ``score_failures``
    overrides the policy each plan recorded; ``evaluation`` (config hash -> settings) scores
    unjudged views under a run's own settings."""
    bench = get_benchmark(benchmark)
    return outcomes.reduce_store(store, bench, judge, score_failures, evaluation)


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
        c = outcomes.Counts.of_row(these[0])
        policy = these[0].get("score_failures") or "as_wrong"
        out.append(("INCOMPLETE: " if c.incomplete else "") + c.describe()
                   + (f"; failures count as {'wrong' if policy == 'as_wrong' else 'excluded'} "
                      f"(run.score_failures={policy})" if c.incomplete else ""))
        if not j and these[0].get("note"):
            out.append(str(these[0]["note"]))
        out += outcomes.count_notes(these[0])
        out.append(table(["metric", "value", "n"], [(r["metric"], r["value"], r["n"]) for r in these]))
    return "\n".join(out)


def run(cfg: Config, session: Session | None = None) -> dict[str, Any]:
    """One run: generate what is missing, judge what is missing, reduce metrics. Pass a
    ``session`` to share Ray, models, index and services with other runs."""
    return run_sweep([cfg], session)[0]

def hydra_entry() -> None:
    """``dateline run``: Hydra composes every point of a sweep (``-m``) first, then the sweep runs
    as one job (:func:`run_sweep`), so a typo in any point fails before anything starts."""
    from ray_jobs.configs import config_help, hydra_main

    if any(a in ("-h", "--help") for a in sys.argv[1:]):        # dateline's help, not Hydra's
        sys.stdout.write(config_help("config", [a for a in sys.argv[1:] if a not in ("-h", "--help")], "dateline run"))
        return
    cfgs: list[Config] = []
    infos: list[dict[str, Any]] = []
    command = ["dateline", "run", *sys.argv[1:]]      # before Hydra adds its search paths to argv
    # SIGINT / SIGTERM stop the run cleanly: one line, status 130 / 143 (ray_jobs/stopping.py)
    stopping.arm(cfgs)
    signum = 0
    try:
        hydra_main("config", lambda cfg, session: cfgs.append(cfg),
                   after=lambda session: infos.extend(run_sweep(cfgs, session, command)))
        stopping.over()
    except BaseException as e:
        if not (signum := stopping.stopped_by(e)):
            raise
        if isinstance(e, Exception):        # what the stop tore down under a call
            log.info("while stopping: %s: %s", type(e).__name__, str(e).strip().split("\n")[0][:300])
    if signum:                  # outside the except: the run's frames (and what they hold) are released
        raise SystemExit(stopping.report(signum))
    stopping.disarm()           # the caller's handlers again (a signal after the results changes nothing)
    code, why = exit_code(cfgs, infos)
    if code:
        sys.stderr.write(why + "\n")
        raise SystemExit(code)


if __name__ == "__main__":
    hydra_entry()
