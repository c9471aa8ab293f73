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
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine.config import ClusterConfig, ModelConfig, engine_batch

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


def size_replicas(models: dict[str, ModelConfig], work: dict[str, float], nodes: list[dict[str, float]],
                  reserve_cpus: float = 0.0) -> dict[str, int]:
    """Replicas per model of one wave. ``models``: the wave's hosted models by pool key (``auto``
    ones are sized, the others keep theirs); ``work``: projected tokens per pool key; ``nodes``:
    resources available on each node; ``reserve_cpus``: CPUs the wave's workers, index and
    services need besides (kept free in total)."""
    free = [dict(n) for n in nodes]
    out: dict[str, int] = {}
    for k, m in models.items():                     # fixed counts first, as placed
        if m.replicas != "auto":
            out[k] = int(m.replicas)
            for _ in range(out[k]):
                _take(free, replica_ask(m))
    auto = {k: m for k, m in models.items() if m.replicas == "auto"}
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

    from engine.benchmarks import get_benchmark
    from engine.storage import EpisodeStore, is_run_dir

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
