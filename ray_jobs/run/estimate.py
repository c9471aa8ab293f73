"""``dateline estimate [--tasks N] [hydra overrides]``: what a run would cost, from a small pilot.

For each configuration (each point of a ``-m`` sweep) the pilot runs the first N tasks of the run's
order (all seeds; under the default ``run.order=random`` a seeded random subset, the same for every
configuration: engine/inputs/order.py) as an ordinary run, judge stage included, into ``<run.dir>/_pilot`` (its own run dir: the
real run's budget and results are untouched; a repeated estimate reuses the pilot's episodes).
From the pilot's episodes and run records it projects, per episode and for the full run (and for
what is still missing in ``run.dir``):

* prompt and completion tokens of the episodes and of their judge calls (means per pilot episode),
* wall time at the pilot's throughput (generation and judging seconds per episode, plus the
  startup once), and, as the optimistic bound, if the full run keeps all worker slots as busy as
  the pilot kept its own (the pilot's waves of ``workers x episodes_per_worker`` episodes),
* replica hours of hosted models over that wall time, and the cost at the configured prices
  (engine/budget/cost.py): tokens x ``price_*_per_mtok`` plus uptime x ``price_gpu_hour`` per GPU.

The pilot's tasks stand in for all of them. Under ``run.order=random`` they are a uniform random
subset, so the projection is not biased by the file's order (under ``run.order=data`` they are the
file's first N, and a dataset whose first tasks are unlike the rest projects badly); a small pilot
is still noisy (a larger ``--tasks`` helps).
"""

from __future__ import annotations

import copy
import math
import sys
from dataclasses import dataclass, field
from typing import Any

from engine.budget.cost import Prices, judge_prices, token_cost, uptime_cost
from engine.config import Config, replica_count, to_plain, validate
from engine.runtime.progress import table
from engine.storage import EpisodeStore
from ray_jobs.cluster.sizing import Rate, measured_rate, size_by_work
from ray_jobs.config.point import resolve
from ray_jobs.run.planning import plan

PILOT_DIR = "_pilot"
DEFAULT_TASKS = 3


@dataclass
class Projection:
    label: str
    benchmark: str
    model: str
    config_hash: str
    pilot_dir: str
    pilot_episodes: int
    pilot_ok: int
    full_episodes: int
    remaining_episodes: int
    per_episode: dict[str, float] = field(default_factory=dict)     # tokens, judge tokens, seconds
    startup_s: float = 0.0
    slots: int = 1
    # replicas billed for the wall time (0: not hosted): the model's, a hosted judge model's
    model_replicas: int = 0
    judge_replicas: int = 0
    # "model", "judge" (token prices of the judge calls), "judge_model" (a hosted judge's uptime)
    prices: dict[str, Prices] = field(default_factory=dict)
    # replicas: auto, measured by the pilot: the plan's pools ("model", "judge_model"), each
    # {"replicas", "per_item_s" (replica-seconds per episode), "load_s"}; wall time and uptime
    # then follow the plan (the dispatch of its replicas), not the pilot's one replica
    planned: dict[str, dict[str, float]] = field(default_factory=dict)

    def tokens(self, n: int) -> dict[str, float]:
        return {k: self.per_episode[k] * n for k in ("tokens_in", "tokens_out", "judge_tokens_in", "judge_tokens_out")}

    def wall_s(self, n: int, optimistic: bool = False) -> float:
        """Startup plus generation and judging for ``n`` episodes: at the pilot's throughput, or
        (``optimistic``) with every wave of ``slots`` episodes as fast as the pilot's waves. With
        a plan (auto replicas): the slowest pool's load plus its work over its replicas."""
        if n <= 0:
            return 0.0
        if self.planned:
            return max(p["load_s"] + n * p["per_item_s"] / max(p["replicas"], 1) for p in self.planned.values())
        per = self.per_episode["gen_s"] + self.per_episode["judge_s"]
        if not optimistic:
            return self.startup_s + per * n
        pilot_waves = max(1, math.ceil(self.pilot_episodes / self.slots))
        wave_s = per * self.pilot_episodes / pilot_waves
        return self.startup_s + wave_s * math.ceil(n / self.slots)

    def pool_uptime_s(self, n: int, pool: str) -> float:
        """Replica-seconds a pool ("model" or "judge_model") holds for ``n`` episodes: its replicas
        over the wall time, or under a plan each replica's load plus the pool's work (a drained pool
        is released: ray_jobs/cluster/allocation.py)."""
        if n <= 0:
            return 0.0
        if pool in self.planned:
            p = self.planned[pool]
            return p["replicas"] * p["load_s"] + n * p["per_item_s"]
        return self.wall_s(n) * (self.model_replicas if pool == "model" else self.judge_replicas)

    def replica_hours(self, n: int) -> float:
        return (self.pool_uptime_s(n, "model") + self.pool_uptime_s(n, "judge_model")) / 3600.0

    def cost(self, n: int) -> float:
        """Tokens at their prices, plus every hosted replica's uptime."""
        t = self.tokens(n)
        return (token_cost(t["tokens_in"], t["tokens_out"], self.prices["model"])
                + token_cost(t["judge_tokens_in"], t["judge_tokens_out"], self.prices["judge"])
                + uptime_cost(self.pool_uptime_s(n, "model"), self.prices["model"])
                + (uptime_cost(self.pool_uptime_s(n, "judge_model"), self.prices["judge_model"])
                   if self.judge_replicas else 0.0))

    def render(self) -> str:
        """The table: the pilot as measured (through the same formulas), per episode, the full
        run and what is still missing in run.dir."""
        cols = [("pilot", self.pilot_episodes), (f"full run ({self.full_episodes})", self.full_episodes),
                (f"remaining ({self.remaining_episodes})", self.remaining_episodes)]
        per = self.per_episode
        rows: list[list[object]] = [
                ["prompt tokens", round(per["tokens_in"]), *(round(self.tokens(n)["tokens_in"]) for _, n in cols)],
                ["completion tokens", round(per["tokens_out"]),
                 *(round(self.tokens(n)["tokens_out"]) for _, n in cols)],
                ["judge prompt tokens", round(per["judge_tokens_in"]),
                 *(round(self.tokens(n)["judge_tokens_in"]) for _, n in cols)],
                ["judge completion tokens", round(per["judge_tokens_out"]),
                 *(round(self.tokens(n)["judge_tokens_out"]) for _, n in cols)],
                ["wall time, pilot throughput", _dur(per["gen_s"] + per["judge_s"]),
                 *(_dur(self.wall_s(n)) for _, n in cols)],
                ["wall time, all slots busy", "-", *(_dur(self.wall_s(n, optimistic=True)) for _, n in cols)],
                ["replica hours", "-", *(f"{self.replica_hours(n):.3f}" for _, n in cols)],
                ["cost (USD)", f"{self.token_cost_per_episode():.5f}" + (" + uptime" if self.model_replicas
                                                                          + self.judge_replicas else ""),
                 *(f"{self.cost(n):.4f}" for _, n in cols)]]
        head = (f"estimate {self.label}: {self.benchmark} | model {self.model} | config {self.config_hash}\n"
                f"pilot: {self.pilot_episodes} episodes ({self.pilot_ok} ok) in {self.pilot_dir}; full run: "
                f"{self.full_episodes} episodes, {self.full_episodes - self.remaining_episodes} already ok in run.dir; "
                f"startup {_dur(self.startup_s)}\n"
                + "".join(f"replicas of the {k.replace('_', ' ')}: {int(p['replicas'])} (model.replicas=auto, planned by "
                          f"work: {p['per_item_s']:.1f} replica-s per episode, load {_dur(p['load_s'])})\n"
                          for k, p in self.planned.items()))
        unpriced = [k for k in ("model", "judge") if not self.prices[k].configured]
        note = (f"(no prices for the {' and '.join(unpriced)}: counted as 0; set model.price_* / judge.price_*)\n"
                if unpriced else "")
        return head + table(["", "per episode", *(c for c, _ in cols)], rows) + "\n" + note

    def token_cost_per_episode(self) -> float:
        """Token cost of one episode and its judging (uptime is shared by all episodes)."""
        t = self.tokens(1)
        return (token_cost(t["tokens_in"], t["tokens_out"], self.prices["model"])
                + token_cost(t["judge_tokens_in"], t["judge_tokens_out"], self.prices["judge"]))


def _dur(s: float) -> str:
    return f"{s:.1f} s" if s < 120 else (f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h")


def pilot_config(cfg: Config, tasks: int) -> Config:
    """The pilot's config: the first ``tasks`` tasks of the run's order, in ``<run.dir>/_pilot``.
    Everything that decides an episode is unchanged (the order too), so pilot episodes are the full
    run's first episodes."""
    p = copy.deepcopy(cfg)
    if not hasattr(p.benchmark, "limit"):
        raise SystemExit(f"estimate: benchmark {p.benchmark.name} has no task limit to run a pilot with")
    limit = p.benchmark.limit
    p.benchmark.limit = tasks if limit is None else min(tasks, limit)
    p.run.dir = f"{cfg.run.dir.rstrip('/')}/{PILOT_DIR}"
    return p


def project(cfg: Config, pilot_cfg: Config, label: str = "",
            nodes: list[dict[str, float]] | None = None) -> Projection:
    """The projection from the pilot run dir (the pilot must have run). ``nodes``: what each node
    of the cluster has (``model.replicas: auto`` is priced as the replicas the plan would start
    there, from the pilot's replica-seconds per episode)."""

    full_spec = resolve(cfg)
    bench = full_spec.bench
    full, pilot = plan(full_spec), plan(resolve(pilot_cfg))
    ids = {s.episode_id for s in pilot.specs}
    store = EpisodeStore(pilot.run_dir, bench.episode_fields)
    rows = [r for r in store.episodes().select(["episode_id", "status", "tokens_in", "tokens_out"]).to_pylist()
            if r["episode_id"] in ids]
    n = len(rows)
    if n == 0:
        raise SystemExit(f"estimate: the pilot in {pilot.run_dir} stored no episodes of config {full.config_hash}")
    infos = [i for i in store.run_infos() if i.get("config_hash") == full.config_hash]
    run_eps = sum(int(i.get("episodes_planned") or 0) for i in infos)
    gen_s = sum(float(i.get("run_s") or 0.0) for i in infos)
    judge = [i.get("judge") or {} for i in infos]
    judge_s = sum(float(j.get("wall_s") or 0.0) for j in judge)
    # the pilot's judge stage judged its ok episodes (rounds included); per pilot episode
    per = {"tokens_in": sum(r["tokens_in"] or 0 for r in rows) / n,
           "tokens_out": sum(r["tokens_out"] or 0 for r in rows) / n,
           "judge_tokens_in": sum(float(j.get("tokens_in") or 0) for j in judge) / n,
           "judge_tokens_out": sum(float(j.get("tokens_out") or 0) for j in judge) / n,
           "gen_s": gen_s / max(run_eps, 1), "judge_s": judge_s / n}
    startup = max([float(i.get("startup_s") or 0.0) for i in infos] or [0.0])
    m, j = cfg.model, cfg.judge
    uses_model = bench.uses_model(cfg.agent)
    jm = j.hosted_model if j.kind == "hosted" else None
    model_plain = to_plain(m)
    jp = judge_prices(to_plain(j), model_plain)
    prices: dict[str, Prices] = {"model": Prices.of_model(model_plain), "judge": jp.tokens}
    self_judge = j.kind == "self"
    model_replicas = replica_count(m) if m.kind == "vllm" and (uses_model or self_judge) else 0
    judge_replicas = 0
    if jm is not None and jm.kind == "vllm" and jm != m:
        prices["judge_model"] = jp.uptime
        judge_replicas = replica_count(jm)
    planned = plan_auto(cfg, infos, len(full.specs), nodes or [], model_replicas > 0, judge_replicas > 0)
    model_replicas = int(planned["model"]["replicas"]) if "model" in planned else model_replicas
    judge_replicas = int(planned["judge_model"]["replicas"]) if "judge_model" in planned else judge_replicas
    return Projection(label=label or full.config_hash[:8], benchmark=bench.name,
                      model=m.name if uses_model else "none", config_hash=full.config_hash,
                      pilot_dir=str(pilot.run_dir),
                      pilot_episodes=n, pilot_ok=sum(r["status"] == "ok" for r in rows),
                      full_episodes=len(full.specs), remaining_episodes=len(full.todo), per_episode=per,
                      startup_s=startup, slots=cfg.cluster.num_workers * cfg.cluster.episodes_per_worker,
                      model_replicas=model_replicas, judge_replicas=judge_replicas, prices=prices, planned=planned)


def plan_auto(cfg: Config, infos: list[dict[str, Any]], episodes: int, nodes: list[dict[str, float]],
              model_hosted: bool, judge_hosted: bool) -> dict[str, dict[str, float]]:
    """The replicas ``model.replicas: auto`` (and a hosted judge's) would get for ``episodes``
    episodes on ``nodes``, by the sizing the run uses (:func:`ray_jobs.cluster.sizing.size_by_work`), from
    the pilot's measured rates; empty when nothing is auto, no node is known, or a rate is missing."""
    m, j = cfg.model, cfg.judge
    jm = j.hosted_model if j.kind == "hosted" and judge_hosted else None
    pools = {k: mc for k, mc in (("model", m if model_hosted else None), ("judge_model", jm)) if mc is not None}
    if not nodes or not any(mc.replicas == "auto" for mc in pools.values()):
        return {}
    rates: dict[str, Rate] = {}
    for k, mc in pools.items():
        r = measured_rate(infos, mc.name, as_judge=k == "judge_model")
        if r is None:
            return {}
        rates[k] = r
    work = {k: episodes * r.per_item_s for k, r in rates.items()}
    load = {k: r.load_s for k, r in rates.items()}
    upstream: dict[str, tuple[str, ...]] = {"judge_model": ("model",)} if len(pools) == 2 else {}
    counts = size_by_work(pools, work, load, nodes, 0.0, upstream, efficiency=cfg.cluster.sizing_efficiency)
    if counts is None:
        return {}
    return {k: {"replicas": float(counts[k]), "per_item_s": rates[k].per_item_s, "load_s": load[k]}
            for k in pools if pools[k].replicas == "auto"}


def cluster_nodes() -> list[dict[str, float]]:
    """What each alive node of the connected Ray cluster has (empty when Ray is not up)."""
    try:
        import ray

        if not ray.is_initialized():
            return []
        return [{k: float(v) for k, v in n.get("Resources", {}).items() if not k.startswith("node:")}
                for n in ray.nodes() if n.get("Alive")]
    except ImportError:  # pragma: no cover
        return []


def estimate_point(cfg: Config, session: Any, tasks: int = DEFAULT_TASKS, label: str = "") -> Projection:
    """Run (or reuse) the pilot of one configuration, then project it; prints the table."""
    from ray_jobs.run.sweep import run

    validate(cfg)
    pc = pilot_config(cfg, tasks)
    run(pc, session, print_summary=False)      # the projection is this command's output, not the pilot's metrics
    proj = project(cfg, pc, label, cluster_nodes())
    sys.stdout.write(proj.render() + "\n")
    sys.stdout.flush()
    return proj


def totals(points: list[Projection]) -> str:
    """One line per point and the sum (a sweep runs its points one after another)."""
    rows: list[tuple[str, int, int, int, str, str]] = [
        (p.label, p.full_episodes, round(p.tokens(p.full_episodes)["tokens_in"]),
         round(p.tokens(p.full_episodes)["tokens_out"]), _dur(p.wall_s(p.full_episodes)),
         f"{p.cost(p.full_episodes):.4f}") for p in points]
    rows.append(("total", sum(p.full_episodes for p in points), sum(r[2] for r in rows), sum(r[3] for r in rows),
                 _dur(sum(p.wall_s(p.full_episodes) for p in points)),
                 f"{sum(p.cost(p.full_episodes) for p in points):.4f}"))
    return table(["point", "episodes", "prompt tokens", "completion tokens", "wall time", "cost (USD)"], rows)


def main(argv: list[str]) -> int:
    """``dateline estimate [--tasks N] [hydra overrides ...]`` (``-m`` sweeps: one pilot per point)."""
    from ray_jobs.config.harness import hydra_main

    tasks, rest = DEFAULT_TASKS, []
    it = iter(argv)
    for a in it:
        if a == "--tasks" or a.startswith("--tasks="):
            v = a.split("=", 1)[1] if "=" in a else next(it, "")
            if not v.isdigit() or int(v) < 1:
                sys.stderr.write(f"estimate: --tasks needs a positive integer, got {v!r}\n")
                return 2
            tasks = int(v)
        else:
            rest.append(a)
    points: list[Projection] = []
    # a point is named by the overrides a sweep varies (``a=1,2``, ``range(..)``, ``choice(..)``)
    swept = {a.split("=", 1)[0] for a in rest if "=" in a and any(c in a.split("=", 1)[1] for c in ",(")}

    def body(cfg: Config, session: Any) -> None:
        try:
            from hydra.core.hydra_config import HydraConfig

            label = " ".join(o for o in HydraConfig.get().overrides.task if o.split("=", 1)[0] in swept)
        except Exception:  # noqa: BLE001 - outside Hydra
            label = ""
        points.append(estimate_point(cfg, session, tasks, label))

    sys.argv = [sys.argv[0], *rest]
    hydra_main("config", body)
    if len(points) > 1:
        sys.stdout.write("estimate, all points (run one after another in one job):\n" + totals(points) + "\n")
    return 0
