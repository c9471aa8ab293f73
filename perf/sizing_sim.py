"""GPU-hours of work over GPU-hours held, on a simulated clock, for three cluster-scale runs, with
the sizing and reallocation code the driver runs (issue 33); no Ray, no GPUs.

    python perf/sizing_sim.py [--gpus-per-node 8] [--nodes 8] [--tick 5]

Each scenario runs twice, side by side, on the same simulated cluster:

* **before**: the sizing the driver had (``ray_jobs.cluster.sizing.size_replicas``, the real function):
  a wave's auto models share the GPUs by projected *tokens* x GPUs per replica, a hosted judge's
  work counts one token per episode, and pools are released only when the wave ends;
* **by work**: ``ray_jobs.cluster.allocation.plan`` at the start and ``Reallocator.step`` every tick:
  replicas by replica-seconds of work (the judge's included), capped where loading would exceed a
  tenth of what a pool holds, drained pools released mid-wave and their GPUs given to the pools
  that would finish last.

The clock: a replica holds its GPUs from placement; it serves after ``load_s``, then does one
replica-second of work per second while its pool has work queued. A hosted judge's queue fills as
the models it judges finish episodes. Work = GPU-seconds of serving; held = GPU-seconds placed.

The scenarios (the constants are stated, not measured; ``docs/design/sizing.md`` gives the why):

* **20-model mix** on 8 x 8 GPUs: models of 1B to 72B (1 GPU per replica up to 14B, 2 for 27-34B,
  4 for 70B+), 3,000 episodes each, an episode taking ``0.37 x B^0.75`` replica-seconds, load
  ``120 s + 6 s per GB`` of bf16 weights; about 160 GPU-hours of work in all.
* **analyst with a hosted 70B judge**: an 8B model (1 GPU) with 11 GPU-hours of generation, a 70B
  judge (4 GPUs) with 72 GPU-hours of judging.
* **10-point livenews ablation**: one 8B model, ten configurations in one pool, 1.3 GPU-hours.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.config import ModelConfig  # noqa: E402
from ray_jobs.cluster.allocation import PoolWork, Reallocator, plan  # noqa: E402
from ray_jobs.cluster.sizing import size_replicas  # noqa: E402


@dataclass
class Pool:
    key: str
    gpus: float
    load_s: float
    total_s: float                       # replica-seconds of work in all
    tokens: float                        # what the old sizing projected (tokens)
    upstream: tuple[str, ...] = ()
    done_s: float = 0.0
    replicas: list[float] = field(default_factory=list)      # start time of each live replica

    def arrived(self, pools: dict[str, Pool]) -> float:
        """Work that can be served now: all of it, or for a judge the share its upstream finished."""
        if not self.upstream:
            return self.total_s
        up = [pools[u] for u in self.upstream]
        share = sum(u.done_s for u in up) / max(sum(u.total_s for u in up), 1e-9)
        return self.total_s * min(1.0, share)


def load_s(params_b: float) -> float:
    return 120.0 + 6.0 * 2.0 * params_b


def gpus_of(params_b: float) -> float:
    return 1.0 if params_b <= 14 else 2.0 if params_b <= 34 else 4.0


def scenario(name: str) -> list[Pool]:
    if name == "20-model mix":
        sizes = [1, 1.5, 3, 3, 7, 7, 8, 8, 8, 9, 12, 14, 14, 27, 32, 32, 70, 70, 70, 72]
        return [Pool(f"m{i}-{b}B", gpus_of(b), load_s(b), 3000 * 0.37 * b ** 0.75, 3000 * 20_000.0)
                for i, b in enumerate(sizes)]
    if name == "analyst + hosted 70B judge":
        return [Pool("analyst-8B", 1.0, load_s(8), 11 * 3600.0, 300 * 40_000.0),
                Pool("judge-70B", 4.0, load_s(70), 72 * 3600.0 / 4.0, 300.0, upstream=("analyst-8B",))]
    if name == "10-point livenews ablation":
        return [Pool("livenews-8B", 1.0, load_s(8), 1.3 * 3600.0, 10 * 500 * 8_000.0)]
    raise KeyError(name)


SCENARIOS = ("20-model mix", "analyst + hosted 70B judge", "10-point livenews ablation")


def _model(p: Pool) -> ModelConfig:
    return ModelConfig(name=p.key, replicas="auto", num_gpus=p.gpus, num_cpus=1.0)


def simulate(pools: list[Pool], policy: str, nodes: int, per_node: float, tick: float) -> dict[str, float]:
    by = {p.key: p for p in pools}
    free = [per_node] * nodes
    node_of: dict[tuple[str, int], int] = {}
    held = work = 0.0
    t = 0.0
    realloc = Reallocator()

    def place(p: Pool) -> bool:
        ok = [i for i, f in enumerate(free) if f + 1e-9 >= p.gpus]
        if not ok:
            return False
        i = min(ok, key=lambda i: free[i] - p.gpus)
        free[i] -= p.gpus
        p.replicas.append(t)
        node_of[(p.key, len(p.replicas) - 1)] = i
        return True

    def release(p: Pool, n: int) -> None:
        for _ in range(n):
            i = node_of.pop((p.key, len(p.replicas) - 1))
            free[i] += p.gpus
            p.replicas.pop()

    def serving(p: Pool) -> int:
        return sum(1 for s in p.replicas if t - s >= p.load_s)

    if policy == "before":
        counts = size_replicas({p.key: _model(p) for p in pools}, {p.key: p.tokens for p in pools},
                               [{"GPU": per_node, "CPU": 64.0}] * nodes)
        for p in pools:
            for _ in range(counts[p.key]):
                place(p)
    else:
        want = plan([PoolWork(p.key, p.gpus, p.load_s, p.total_s, p.upstream) for p in pools], free)
        for p in pools:
            for _ in range(want[p.key]):
                place(p)
    while any(p.done_s < p.total_s - 1e-6 for p in pools):
        if t > 30 * 24 * 3600:
            raise RuntimeError(f"{policy}: no progress after 30 simulated days")
        busy: dict[str, int] = {}
        for p in pools:                          # serve one tick
            can = max(0.0, p.arrived(by) - p.done_s)
            n = serving(p)
            did = min(can, n * tick)
            busy[p.key] = min(n, int(-(-did // tick))) if did > 0 else 0
            p.done_s += did
            work += did * p.gpus
        for p in pools:
            held += len(p.replicas) * p.gpus * tick
        t += tick
        if policy == "before":
            if all(p.done_s >= p.total_s - 1e-6 for p in pools):
                break                            # the wave ends: every pool is released together
            continue
        state = [PoolWork(p.key, p.gpus, p.load_s, max(0.0, p.total_s - p.done_s), p.upstream,
                          replicas=len(p.replicas), busy=busy[p.key],
                          queued_s=max(0.0, p.arrived(by) - p.done_s)) for p in pools]
        d = realloc.step(state, free)
        for k, n in d.changes.items():
            if n < 0:
                release(by[k], -n)
        for k, n in d.changes.items():
            for _ in range(max(0, n)):
                if not place(by[k]):
                    break
    for p in pools:
        release(p, len(p.replicas))
    return {"work_gpu_h": work / 3600, "held_gpu_h": held / 3600, "ratio": work / held if held else 0.0,
            "hours": t / 3600}


def run_all(nodes: int = 8, per_node: float = 8.0, tick: float = 5.0) -> dict[str, dict[str, dict[str, float]]]:
    return {s: {pol: simulate(scenario(s), pol, nodes, per_node, tick) for pol in ("before", "by work")}
            for s in SCENARIOS}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--gpus-per-node", type=float, default=8.0)
    ap.add_argument("--tick", type=float, default=5.0)
    a = ap.parse_args()
    res = run_all(a.nodes, a.gpus_per_node, a.tick)
    print(f"{a.nodes} nodes x {a.gpus_per_node:g} GPUs; tick {a.tick:g} s (simulated)\n")
    print(f"{'scenario':<30} {'policy':<9} {'work GPU-h':>10} {'held GPU-h':>10} {'work/held':>9} {'hours':>7}")
    for s, pols in res.items():
        for pol, r in pols.items():
            print(f"{s:<30} {pol:<9} {r['work_gpu_h']:>10.1f} {r['held_gpu_h']:>10.1f} {r['ratio']:>9.2f} "
                  f"{r['hours']:>7.2f}")
    worst = min(r["by work"]["ratio"] for r in res.values())
    print(f"\nby work, lowest work/held: {worst:.2f} (goal >= 0.9)")


if __name__ == "__main__":
    main()
