"""Size the cluster for the user: replicas per model (``model.replicas: auto``) and episodes in
flight per model (``cluster.concurrency: auto``).

**Replicas.** A wave's hosted models share what the cluster has *available* when the wave starts
(``ray.available_resources`` per node: another job's replicas are not counted as free, so a second
job plans around the first). Models with a fixed ``replicas`` take theirs first; the ``auto`` ones
then get one replica each (largest first), and further replicas one at a time, each to the model
whose share of the resource is furthest below its share of the *work*: its projected tokens times
what one replica occupies (a 70B on 4 GPUs needs about 4x the GPU time per token of an 8B on one).
A replica is added only where it fits on one node (tensor parallel shards are packed on one node),
so the loop stops when no replica of any auto model fits anywhere: every GPU that can hold one is
used. GPU models are sized on GPUs, CPU-only models (vLLM-CPU) on CPUs.

**Projected tokens** come from this configuration's finished episodes in its run dir, else from
the pilot of ``dateline estimate`` (``<run.dir>/_pilot``), else every episode counts the same;
the source is logged and recorded in the run's info.

**Concurrency.** A model's episodes in flight are ``replicas x engine batch / share``: the engine
batch (``model.max_inflight_per_replica``; 1 for a reproducible CPU replica) is what a replica
computes at once, and an episode spends only ``cluster.model_time_share`` of its time in model
calls (the rest in search, tools and the sandbox), so that many more episodes keep the batch full.
Workers: that divided by ``cluster.episodes_per_worker``, rounded up.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine.benchmarks import get_benchmark
from engine.config import ClusterConfig, ModelConfig, engine_batch, stable_hash, to_plain
from engine.storage import EpisodeStore, is_run_dir
from ray_jobs.cluster.allocation import EFFICIENCY, PoolWork, plan

log = logging.getLogger("dateline.sizing")


def unit(m: ModelConfig) -> tuple[str, float]:
    """The resource one replica of ``m`` is sized on, and how much of it a replica takes."""
    return ("GPU", float(m.num_gpus)) if m.num_gpus > 0 else ("CPU", float(m.num_cpus))


def replica_ask(m: ModelConfig) -> dict[str, float]:
    ask = {"CPU": float(m.num_cpus), "GPU": float(m.num_gpus), **{k: float(v) for k, v in m.resources.items()}}
    return {k: v for k, v in ask.items() if v}


def _fits(node: dict[str, float], ask: dict[str, float]) -> bool:
    return all(node.get(k, 0.0) + 1e-9 >= v for k, v in ask.items())


def _take(nodes: list[dict[str, float]], ask: dict[str, float]) -> bool:
    """Place one replica on the fullest node it fits on (best fit: keeps whole nodes for the big ones)."""
    fitting = [n for n in nodes if _fits(n, ask)]
    if not fitting:
        return False
    node = min(fitting, key=lambda n: sum(n.get(k, 0.0) - v for k, v in ask.items()))
    for k, v in ask.items():
        node[k] = node.get(k, 0.0) - v
    return True


def _place_fixed(models: dict[str, ModelConfig], nodes: list[dict[str, float]]
                 ) -> tuple[list[dict[str, float]], dict[str, int], dict[str, ModelConfig]]:
    """Models with a fixed ``replicas`` placed first, as they will be: what the nodes have left,
    their counts, and the ``auto`` models still to size."""
    free = [dict(n) for n in nodes]
    out: dict[str, int] = {}
    for k, m in models.items():
        if m.replicas != "auto":
            out[k] = int(m.replicas)
            for _ in range(out[k]):
                _take(free, replica_ask(m))
    return free, out, {k: m for k, m in models.items() if m.replicas == "auto"}


def size_replicas(models: dict[str, ModelConfig], work: dict[str, float], nodes: list[dict[str, float]],
                  reserve_cpus: float = 0.0) -> dict[str, int]:
    """Replicas per model of one wave. ``models``: the wave's hosted models by pool key (``auto``
    ones are sized, the others keep theirs); ``work``: projected tokens per pool key; ``nodes``:
    resources available on each node; ``reserve_cpus``: CPUs the wave's workers, index and
    services need besides (kept free in total)."""
    free, out, auto = _place_fixed(models, nodes)
    if not auto:
        return out
    cpu_left = sum(n.get("CPU", 0.0) for n in free) - reserve_cpus
    weight = {k: max(work.get(k, 0.0), 1e-9) * unit(m)[1] for k, m in auto.items()}
    for k in sorted(auto, key=lambda k: unit(auto[k])[1], reverse=True):     # one each, largest first
        ask = replica_ask(auto[k])
        out[k] = 1
        if _take(free, ask):
            cpu_left -= ask.get("CPU", 0.0)
        else:
            log.warning("model %s: not even one replica fits what is available now %s; it will wait for "
                        "resources (model.placement_timeout_s)", auto[k].name, _sum(free))
    while True:
        # the model furthest below its share of the work, among those with a replica that fits
        by_resource: dict[str, list[str]] = {}
        for k, m in auto.items():
            by_resource.setdefault(unit(m)[0], []).append(k)
        best, best_gap = None, 0.0
        for keys in by_resource.values():
            total_w = sum(weight[k] for k in keys)
            used = sum(out[k] * unit(auto[k])[1] for k in keys)
            for k in keys:
                ask = replica_ask(auto[k])
                if ask.get("CPU", 0.0) > cpu_left + 1e-9 or not any(_fits(n, ask) for n in free):
                    continue
                # its share of the work minus its share of the resource after one more replica
                gap = weight[k] / total_w - (out[k] + 1) * unit(auto[k])[1] / max(used + unit(auto[k])[1], 1e-9)
                if best is None or gap > best_gap:
                    best, best_gap = k, gap
        if best is None:
            break
        ask = replica_ask(auto[best])
        _take(free, ask)
        cpu_left -= ask.get("CPU", 0.0)
        out[best] += 1
    for k, m in auto.items():
        log.info("model.replicas=auto: %d replica(s) of %s (%s per replica; %.3g projected tokens)", out[k], m.name,
                 replica_ask(m), work.get(k, 0.0))
    return out


def _sum(nodes: list[dict[str, float]]) -> dict[str, float]:
    total: dict[str, float] = {}
    for n in nodes:
        for k, v in n.items():
            if k in ("CPU", "GPU") or not (k.startswith("node:") or k in ("memory", "object_store_memory")):
                total[k] = total.get(k, 0.0) + v
    return {k: round(v, 3) for k, v in total.items() if k in ("CPU", "GPU")}


def sized(m: ModelConfig, replicas: int) -> ModelConfig:
    """``m`` with a resolved replica count (and ``min_replicas`` no larger)."""
    mr = m.min_replicas if m.min_replicas is None else min(int(m.min_replicas), replicas)
    return replace(m, replicas=replicas, min_replicas=mr)


def projected_tokens(store: Any, config_hash: str, run_dir: str | Path, model_name: str, benchmark: str,
                     episodes: int) -> tuple[float, str]:
    """Projected tokens of ``episodes`` episodes of a configuration, and where the per-episode
    figure came from: its own finished episodes, the pilot of ``dateline estimate``, or none
    (each episode counts 1)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def mean_tokens(s: Any, **kw: Any) -> float | None:
        try:
            t = s.episodes(columns=["tokens_in", "tokens_out", "model", "status"], **kw)
        except Exception:  # noqa: BLE001 - no store, no such columns: no figure
            return None
        if t.num_rows == 0:
            return None
        ok = t.filter(pc.equal(t["status"], pa.scalar("ok")))
        if ok.num_rows == 0:
            return None
        if "model" in ok.column_names:
            ok = ok.filter(pc.equal(ok["model"], pa.scalar(model_name)))
            if ok.num_rows == 0:
                return None
        tok = pc.add(pc.fill_null(ok["tokens_in"], 0), pc.fill_null(ok["tokens_out"], 0))
        return float(pc.mean(tok).as_py() or 0.0) or None

    own = mean_tokens(store, config_hash=config_hash)
    if own:
        return own * episodes, "finished episodes"
    pilot = f"{str(run_dir).rstrip('/')}/_pilot"
    try:
        if is_run_dir(pilot):
            figure = mean_tokens(EpisodeStore(pilot, get_benchmark(benchmark).episode_fields))
            if figure:
                return figure * episodes, "pilot"
    except Exception:  # noqa: BLE001 - an unreadable pilot is no pilot
        pass
    return float(episodes), "episode count"


def derived_workers(m: ModelConfig, replicas: int, c: ClusterConfig) -> tuple[int, int]:
    """Episode workers for a model's queue and episodes in flight in all (``cluster.concurrency``):
    ``fixed``: ``num_workers x episodes_per_worker``; ``auto``: ``replicas x engine batch /
    cluster.model_time_share``, at least ``episodes_per_worker``."""
    if c.concurrency != "auto":
        return c.num_workers, c.num_workers * c.episodes_per_worker
    inflight = max(c.episodes_per_worker, math.ceil(replicas * engine_batch(m) / c.model_time_share - 1e-9))
    return max(1, math.ceil(inflight / c.episodes_per_worker)), inflight


# -- sizing by work (issue 33): replica-seconds from the run dir's records --------------------
@dataclass(frozen=True)
class Rate:
    """What one item (an episode to generate, or an episode to judge) takes on one replica."""
    per_item_s: float        # replica-seconds per item, the replicas' load time left out
    load_s: float            # seconds from placement to serving, as measured (0: unknown)
    items: int               # how many items the measurement covers


def measured_rate(infos: list[dict[str, Any]], model_name: str, as_judge: bool) -> Rate | None:
    """Replica-seconds per item of ``model_name`` from run records (``run-*.json``) of runs that
    hosted it: as the model under test (``replica_seconds_run`` over ``episodes_planned``, less
    each started replica's load) or as a hosted judge (``judge_replica_seconds_run`` over the
    episodes it judged). None when no run measured it."""
    secs = 0.0
    items = 0
    loads: list[float] = []
    for i in infos:
        if as_judge:
            jc = i.get("judge_config") or {}
            if jc.get("kind") != "hosted" or (jc.get("hosted_model") or {}).get("name") != model_name:
                continue
            sec, n = float(i.get("judge_replica_seconds_run") or 0.0), int((i.get("judge") or {}).get("episodes") or 0)
        else:
            if (i.get("model") or {}).get("name") != model_name:
                continue
            sec, n = float(i.get("replica_seconds_run") or 0.0), int(i.get("episodes_planned") or 0)
        if i.get("model_started") and i.get("startup_s"):
            load = float(i["startup_s"])
            loads.append(load)
            if not as_judge:
                sec -= load * int((i.get("concurrency") or {}).get("replicas") or 1)
        if sec > 0 and n > 0:
            secs += sec
            items += n
    if items == 0:
        return None
    return Rate(secs / items, max(loads or [0.0]), items)


def run_infos_with_pilot(store: Any, run_dir: str | Path, benchmark: str) -> list[dict[str, Any]]:
    """The run records of a run dir and of its pilot (``dateline estimate``), when it has one."""
    infos = list(store.run_infos())
    pilot = f"{str(run_dir).rstrip('/')}/_pilot"
    try:
        if is_run_dir(pilot):
            infos += EpisodeStore(pilot, get_benchmark(benchmark).episode_fields).run_infos()
    except Exception:  # noqa: BLE001 - an unreadable pilot is no pilot
        pass
    return infos


def judge_tokens_per_episode(infos: list[dict[str, Any]], model_name: str) -> float | None:
    """Judge tokens per judged episode of a hosted judge ``model_name``, from run records."""
    tokens = n = 0
    for i in infos:
        jc, j = i.get("judge_config") or {}, i.get("judge") or {}
        if jc.get("kind") == "hosted" and (jc.get("hosted_model") or {}).get("name") == model_name:
            tokens += int(j.get("tokens_in") or 0) + int(j.get("tokens_out") or 0)
            n += int(j.get("episodes") or 0)
    return tokens / n if n and tokens else None


def size_by_work(models: dict[str, ModelConfig], work_s: dict[str, float], load_s: dict[str, float],
                 nodes: list[dict[str, float]], reserve_cpus: float = 0.0,
                 upstream: dict[str, tuple[str, ...]] | None = None, efficiency: float | None = None,
                 budget_gpu_s: float | None = None) -> dict[str, int] | None:
    """Replicas per model from replica-seconds of work (:func:`ray_jobs.cluster.allocation.plan`): fixed
    counts placed first, then the auto models sized on their one resource (GPU, or CPU for
    CPU-only models less ``reserve_cpus``). None when the auto models are sized on different
    resources (the token split of :func:`size_replicas` then decides)."""
    free, out, auto = _place_fixed(models, nodes)
    if not auto:
        return out
    units = {unit(m)[0] for m in auto.values()}
    if len(units) != 1:
        return None
    res = units.pop()
    per_node = [n.get(res, 0.0) for n in free]
    if res == "CPU":            # the wave's workers, index and services keep theirs: off the largest nodes
        left = reserve_cpus
        for i in sorted(range(len(per_node)), key=lambda i: -per_node[i]):
            cut = min(left, per_node[i])
            per_node[i] -= cut
            left -= cut
    pools = [PoolWork(k, unit(m)[1], load_s.get(k, 0.0), work_s.get(k, 0.0), (upstream or {}).get(k, ()))
             for k, m in auto.items()]
    want = plan(pools, per_node, efficiency if efficiency is not None else EFFICIENCY, budget_gpu_s)
    for k, m in auto.items():
        out[k] = max(1, want.get(k, 0))
        log.info("model.replicas=auto (by work): %d replica(s) of %s (%.0f replica-seconds of work, load %.0f s)",
                 out[k], m.name, work_s.get(k, 0.0), load_s.get(k, 0.0))
    return out


@dataclass
class WaveWork:
    """What a wave's pools have to do: projected tokens (always), replica-seconds and load times
    (``work_s`` None unless every pool to size has a measured rate), and which pools feed a
    hosted judge (its ``upstream``)."""
    tokens: dict[str, float]
    sources: dict[str, set[str]]
    work_s: dict[str, float] | None
    load_s: dict[str, float]
    upstream: dict[str, tuple[str, ...]]


def wave_work(wave: list[Any], to_start: dict[str, ModelConfig]) -> WaveWork:
    """The work of each pool in ``to_start`` over the wave's points (``ray_jobs.run.planning.Point``):
    episodes to generate on the model under test, episodes to judge on a hosted judge. Tokens come
    from :func:`projected_tokens` (a judge's from its recorded tokens per judged episode, else one
    per episode); replica-seconds from :func:`measured_rate` over the run dirs' records and pilots."""
    tokens: dict[str, float] = {}
    sources: dict[str, set[str]] = {}
    work_s: dict[str, float] = {}
    load_s: dict[str, float] = {}
    upstream: dict[str, set[str]] = {}
    measured = True
    for p in wave:
        n = len(p.plan.todo) if p.generate else len(p.plan.specs)      # episodes to run, or to judge
        infos = run_infos_with_pilot(p.store, p.plan.run_dir, p.bench.name)
        jm = p.cfg.judge.hosted_model if p.cfg.judge.kind == "hosted" else None
        for k in p.pools:
            if k not in to_start:
                continue
            as_judge = jm is not None and k == stable_hash(to_plain(jm)) and k != stable_hash(to_plain(p.cfg.model))
            m = to_start[k]
            if as_judge:
                per = judge_tokens_per_episode(infos, m.name)
                tokens[k] = tokens.get(k, 0.0) + n * (per or 1.0)
                sources.setdefault(k, set()).add("judge records" if per else "episode count")
                upstream.setdefault(k, set()).add(stable_hash(to_plain(p.cfg.model)))
            else:
                t, source = projected_tokens(p.store, p.plan.config_hash, p.plan.run_dir, m.name, p.bench.name, n)
                tokens[k] = tokens.get(k, 0.0) + t
                sources.setdefault(k, set()).add(source)
            rate = measured_rate(infos, m.name, as_judge)
            if rate is None:
                measured = False
                continue
            work_s[k] = work_s.get(k, 0.0) + n * rate.per_item_s
            load_s[k] = max(load_s.get(k, 0.0), rate.load_s)
    return WaveWork(tokens, sources, work_s if measured and work_s else None, load_s,
                    {k: tuple(sorted(v & set(to_start))) for k, v in upstream.items()})
