"""Adaptive evaluation in the driver (``sweep=race|incumbent|halving``, ``stop=anytime_valid``):
the decisions of ``engine/scoring/racing.py`` fed by the episodes as they are stored, acted on by
the dispatch loop, and written down so that a reader can audit them and a resumed run re-derives
them (``docs/design/adaptive.md``).

* **Values.** A task's value is the raced metric's mean over its seeds (a failed episode at the
  benchmark's failure value: adaptive runs need ``run.score_failures=as_wrong``), rescaled to
  [0, 1] by the metric's bounds and flipped where lower is better. It enters the race when every
  seed of the task is stored. Its position is the task's place in the run's shared random order
  (the plan's order: ``engine/inputs/order.py``).
* **Admission.** The race decides on dispatch-order prefixes only; on the completed results it
  only *pauses* a configuration (no new episode dispatched) until its prefix confirms or refuses.
  Episodes in flight are never cancelled.
* **Stops.** A stopped configuration's queued episodes are stored with status ``stopped_early``
  (in no mean, under either policy: engine/scoring/outcomes.py); the configuration is reported by
  its confidence sequence, never by a bare mean.
* **Record.** ``adaptive.json`` in each run dir: the design (strategy, goal, alpha and its split,
  the sequence's family and parameters, the metric, the order seed and hash, the task set), the
  decision log (time, t, configuration, by, bounds, action, reason) and, per configuration, its
  state, the tasks behind its interval and the interval. A resumed run replays the stored values
  through the same rule and must reach the logged decisions (else it stops, naming the first that
  differs); a resumed run under another design is refused.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from engine.budget.cost import Prices, token_cost, unit_hours
from engine.config import Config, stable_hash, to_plain
from engine.errors import ConfigError
from engine.inputs.order import TaskOrder, order_record, task_order
from engine.scoring.anytime import rescale
from engine.scoring.race_view import stop_counts
from engine.scoring.racing import SCREENING, Decision, Design, Race
from ray_jobs.run.planning import Point

log = logging.getLogger("dateline.adaptive")
ADAPTIVE_FILE = "adaptive.json"


def adaptive_on(cfg: Config) -> bool:
    return cfg.sweep.strategy != "none" or cfg.stop.rule != "none"


def design_of(cfg: Config) -> Design:
    sw, st = cfg.sweep, cfg.stop
    if sw.strategy != "none":
        return Design(strategy=sw.strategy, goal=sw.goal, epsilon=sw.epsilon, alpha=sw.alpha, split=sw.split,
                      min_tasks=sw.min_tasks,
                      check_every=sw.check_every, rungs=tuple(float(r) for r in sw.rungs), eta=sw.eta)
    return Design(strategy="anytime_valid", alpha=st.alpha, min_tasks=st.min_tasks, half_width=st.half_width)


def wording(design: Design, stopped: int, total: int, comparisons: int, n_tasks: int, after: int = 0) -> str:
    """What every output of an adaptive run says with its numbers; ``stopped``, ``after`` and
    ``total`` from :func:`engine.scoring.race_view.stop_counts` (the one count of them)."""
    return _wording(design, stopped, total, comparisons, n_tasks) + (
        f" {after} more {'was' if after == 1 else 'were'} decided against after every task ran (its mean is over "
        "the full set)." if after else "")


def _wording(design: Design, stopped: int, total: int, comparisons: int, n_tasks: int) -> str:
    if design.screening:
        return (f"SCREENING: {stopped} of {total} configurations were dropped by successive halving (rungs "
                f"{list(design.rungs)}, eta {design.eta:g}), a fixed budget with NO error guarantee; survivors are "
                f"evaluated on all {n_tasks} tasks; dropped configurations are shown as their means over the tasks "
                "they ran, which are not estimates of their full-set scores.")
    if design.strategy == "anytime_valid":
        return (f"{stopped} of {total} configurations stopped early at their precision target by an anytime-valid "
                f"rule (alpha = {design.alpha:g}); each is shown as its {100 * (1 - design.alpha):.0f}% confidence "
                f"sequence for the mean over all {n_tasks} tasks, valid wherever the run stopped.")
    return (f"{stopped} of {total} configurations were stopped early by an anytime-valid rule (alpha = "
            f"{design.alpha:g} over {comparisons} comparisons, Bonferroni); survivors are evaluated on all {n_tasks} "
            f"tasks; stopped configurations are shown as {100 * (1 - design.alpha):.0f}% confidence sequences, not "
            "means. Sample means after adaptive stopping are biased (Shin et al. 2019).")


@dataclass
class Racer:
    """One race over the points of a sweep (every point shares it: ``Point.racer``)."""
    points: dict[str, Point]
    design: Design
    metric: str
    bounds: tuple[float, float]
    flip: bool
    positions: dict[str, int]
    seeds: int
    race: Race
    record: dict[str, Any]
    logged: list[dict[str, Any]] = field(default_factory=list)
    _seen: dict[tuple[str, str], dict[int, float]] = field(default_factory=lambda: defaultdict(dict))
    _specs: dict[str, Any] = field(default_factory=dict)        # episode id -> its spec (the task, for failure values)

    # -- planning ---------------------------------------------------------------------------------
    @classmethod
    def start(cls, points: list[Point]) -> Racer | None:
        """The race of these points (None when no adaptive rule is on), its stored values fed and
        its decisions re-derived and checked against the log."""
        on = [p for p in points if adaptive_on(p.cfg)]
        if not on:
            return None
        if len(on) != len(points):
            raise ConfigError("sweep / stop: every configuration of an adaptive sweep must set the same rule "
                              f"({len(on)} of {len(points)} do)")
        first = on[0]
        same = {json.dumps([to_plain(p.cfg.sweep), to_plain(p.cfg.stop)], sort_keys=True) for p in on}
        if len(same) != 1:
            raise ConfigError("sweep / stop: the configurations of an adaptive sweep differ in their rule; one rule decides")
        names = {p.bench.name for p in on}
        if len(names) != 1:
            raise ConfigError(f"sweep: an adaptive sweep races configurations of one benchmark, got {sorted(names)}")
        bench = first.bench
        where = "sweep" if first.cfg.sweep.strategy != "none" else "stop"
        metric = (first.cfg.sweep.metric if where == "sweep" else first.cfg.stop.metric) or bench.primary_metrics[0]
        if metric in bench.judge_metrics:
            raise ConfigError(f"{where}.metric: {metric} needs a judge; adaptive rules race on metrics every episode "
                              "has when it is stored (judged metrics arrive later and are not raced on yet)")
        if metric not in bench.failure_values:
            raise ConfigError(f"{where}.metric: {metric} has no failure value in {bench.name} (a failed episode's "
                              f"task would have none); choose one of {sorted(bench.failure_values)}")
        orders = {tuple(dict.fromkeys(s.task_id for s in p.plan.specs)) for p in on}
        if len(orders) != 1:
            raise ConfigError("sweep: the configurations of an adaptive sweep must plan the same tasks in the same "
                              "order (one benchmark.limit / task_ids / run.order_seed for all)")
        seeds = {p.cfg.run.num_seeds for p in on}
        if len(seeds) != 1:
            raise ConfigError("sweep: the configurations of an adaptive sweep must have the same run.num_seeds")
        by_id = {s.task_id: s.task for s in first.plan.specs}

        def has_metric(t: str) -> bool:     # a task without the metric (no reference evidence) is not raced on
            own = bench.task_failure_values(by_id[t])
            return metric in (own if own is not None else bench.failure_values)
        tasks = [t for t in next(iter(orders)) if has_metric(t)]
        if not tasks:
            raise ConfigError(f"{where}.metric: no planned task of {bench.name} has {metric}")
        design = design_of(first.cfg)
        record = {"design": design.record(), "metric": metric, "metric_bounds": list(bench.metric_bounds.get(metric, (0.0, 1.0))),
                  "lower_is_better": metric in bench.lower_is_better, "benchmark": bench.name,
                  "order": order_record(tasks, task_order(first.cfg) or TaskOrder("data")), "n_tasks": len(tasks),
                  "num_seeds": next(iter(seeds)), "configs": sorted(p.plan.config_hash for p in on)}
        record["design_hash"] = stable_hash(record)
        racer = cls({p.key: p for p in on}, design, metric, bench.metric_bounds.get(metric, (0.0, 1.0)),
                    metric in bench.lower_is_better, {t: i for i, t in enumerate(tasks)}, next(iter(seeds)),
                    Race(design, [p.key for p in on], len(tasks)), record)
        racer._specs = {s.episode_id: s for p in on for s in p.plan.specs}
        racer._resume()
        for p in on:
            p.racer = racer
        return racer

    def _resume(self) -> None:
        """Feed what the run dirs hold, take every decision it allows, and check them against the
        decision log a previous run of this sweep wrote."""
        logged: list[dict[str, Any]] = []
        for p in self.points.values():
            have = p.store.read_json(ADAPTIVE_FILE)
            if have is None:
                continue
            if have.get("design_hash") != self.record["design_hash"]:
                raise ConfigError(f"{p.plan.run_dir}/{ADAPTIVE_FILE}: this run dir's adaptive decisions were made under "
                                  f"another design ({have.get('design')}, metric {have.get('metric')}); resume with "
                                  "the same sweep / stop settings and the same configurations, or use another run.dir")
            logged = have.get("decisions") or []
        for p in self.points.values():
            # the stored results this run keeps: not those it runs again (run.retry_failed re-runs
            # failed ones; a value is taken once, from the row that stays)
            kept = {s.episode_id for s in p.plan.specs} - {s.episode_id for s in p.plan.todo}
            for row in p.store.episodes(config_hash=p.plan.config_hash).to_pylist():
                if row["episode_id"] in kept:
                    self.take(p.key, row)
        self.race.settle()
        derived = [(d.t, self._hash(d.config), d.action) for d in self.race.decisions]
        for i, entry in enumerate(logged):
            want = (entry["t"], entry["config"], entry["action"])
            if i >= len(derived) or derived[i] != want:
                got = derived[i] if i < len(derived) else "nothing"
                raise ConfigError(f"{ADAPTIVE_FILE}: the stored results do not re-derive logged decision {i + 1} "
                                  f"({want}; the replay gives {got}): the run dir changed since it was decided")
        self.logged = list(logged)
        for d in self.race.decisions[len(logged):]:
            self.logged.append(self._entry(d))
        if self.race.decisions:
            log.info("adaptive: %d decisions re-derived from the stored results (%d logged before)",
                     len(self.race.decisions), len(logged))

    # -- values -----------------------------------------------------------------------------------
    def _hash(self, key: str) -> str:
        return self.points[key].plan.config_hash

    def value(self, p: Point, row: dict[str, Any]) -> float | None:
        """The raced metric of one stored episode (None: not a result, or the metric is undefined)."""
        status = row.get("status")
        if status == "ok":
            v = p.bench.episode_values([row])[0].get(self.metric)
        elif status == "error":
            spec = self._specs.get(row["episode_id"])
            own = p.bench.task_failure_values(spec.task) if spec is not None else None
            v = (own if own is not None else p.bench.failure_values).get(self.metric)
        else:
            return None
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return None
        x = float(rescale([float(v)], *self.bounds, f"{p.plan.run_dir}: episode {row['episode_id']} "
                                                   f"(task {row['task_id']}), metric {self.metric}")[0])
        return 1.0 - x if self.flip else x

    def take(self, key: str, row: dict[str, Any]) -> None:
        """A stored episode of point ``key``: its task enters the race once every seed is in."""
        pos = self.positions.get(row["task_id"])
        p = self.points[key]
        if pos is None:
            return
        v = self.value(p, row)
        if v is None:
            return
        seen = self._seen[(key, row["task_id"])]
        seen[int(row.get("seed") or 0)] = v
        if len(seen) == self.seeds and math.isnan(self.race.values[self.race.index[key], pos]):
            self.race.observe(key, pos, sum(seen.values()) / self.seeds)

    # -- decisions (the dispatch loop) ------------------------------------------------------------
    def step(self) -> tuple[list[Decision], list[str], list[str]]:
        """Decisions the prefixes allow now; the configurations to pause (the completed results
        say they would stop) and those to resume (their prefix refused)."""
        new = self.race.decide()
        for d in new:
            self.logged.append(self._entry(d))
            log.warning("adaptive: %s %s", self._hash(d.config)[:8], self.named(d.reason))
        pause = self.race.tentative()
        for c in pause:
            self.race.pause(c)
            log.info("adaptive: %s paused (its completed results say it would stop; its prefix decides)",
                     self._hash(c)[:8])
        return new, pause, self.race.resumable()

    def dispatched(self, key: str, task_id: str) -> None:
        pos = self.positions.get(task_id)
        if pos is not None:
            self.race.dispatched(key, pos)

    def named(self, text: str) -> str:
        """A decision's reason with configurations named by their config hash (points are keyed
        ``hash@run_dir``)."""
        for key, p in self.points.items():
            text = text.replace(key, p.plan.config_hash)
        return text

    def _entry(self, d: Decision) -> dict[str, Any]:
        return {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **d.record(),
                "config": self._hash(d.config), "by": self._hash(d.by) if d.by in self.points else d.by,
                "reason": self.named(d.reason)}

    # -- the record -------------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """What ``adaptive.json`` holds and each point's run info carries."""
        k = len(self.points)
        per: dict[str, Any] = {}
        for key, p in self.points.items():
            lo, hi, t = self.race.interval(key)
            lo_m, hi_m = self._metric_scale(lo, hi)
            stop = self.race.stopped.get(key)
            d = next((x for x in self.race.decisions if x.config == key), None)
            per[p.plan.config_hash] = {
                # every task ran (a decision came after the last was dispatched): the mean is exact
                "state": "complete" if t == self.race.n_tasks else ("stopped_early" if stop is not None else "running"),
                "tasks_admitted": t, "stopped_at": stop, "reason": self.named(d.reason) if d is not None else "",
                "interval": [lo_m, hi_m], "interval_level": 1 - self.design.alpha,
                "interval_kind": "anytime-valid confidence sequence for the mean over all "
                                 f"{self.race.n_tasks} tasks ({self.design.family})"}
        comparisons = k * (k - 1) // 2 if self.design.strategy == "race" else max(k - 1, 1)
        stopped, after, _ = stop_counts(per)
        return self.record | {
            "decisions": self.logged, "configurations": per, "cost": self.cost(),
            "wording": wording(self.design, stopped, k, comparisons, self.race.n_tasks, after),
            "screening": self.design.screening}

    def cost(self) -> dict[str, Any]:
        """What the run spent next to what running every configuration on every task would have:
        episodes run (stored with a result) and planned; tokens, dollars at the models' prices and
        replica GPU-hours of this run, and the full run's projected from this run's mean per
        episode (a projection, said so)."""
        planned = sum(len(p.plan.specs) for p in self.points.values())
        ran = tin = tout = 0
        usd = gpu_h = 0.0
        for p in self.points.values():
            rows = p.store.episodes(["status", "tokens_in", "tokens_out"], config_hash=p.plan.config_hash).to_pylist()
            done = [r for r in rows if r["status"] in ("ok", "error")]
            ran += len(done)
            a, b = sum(r["tokens_in"] for r in done), sum(r["tokens_out"] for r in done)
            tin, tout = tin + a, tout + b
            prices = Prices.of_model(to_plain(p.cfg.model))
            usd += token_cost(a, b, prices)
            gpu_h += unit_hours(float(p.info.get("replica_seconds_run") or 0.0), prices)
        scale = planned / ran if ran else float("nan")
        return {"episodes_run": ran, "episodes_full": planned, "share_run": ran / planned if planned else float("nan"),
                "tokens_in": tin, "tokens_out": tout, "usd_tokens": usd, "gpu_hours_this_run": gpu_h,
                "full_run_projected": {"tokens_in": tin * scale, "tokens_out": tout * scale, "usd_tokens": usd * scale,
                                       "how": "this run's totals x planned / run episodes (GPU-hours: this run's "
                                              "replica uptime only, which includes model loads)"}}

    def _metric_scale(self, lo: float, hi: float) -> tuple[float, float]:
        """An interval on the [0, 1] race scale back in the metric's units."""
        a, b = self.bounds
        if self.flip:
            lo, hi = 1.0 - hi, 1.0 - lo
        return a + lo * (b - a), a + hi * (b - a)

    def write(self) -> dict[str, Any]:
        out = self.summary()
        for d in {str(p.plan.run_dir): p for p in self.points.values()}.values():
            d.store.write_json(ADAPTIVE_FILE, out)
        for p in self.points.values():
            p.info["adaptive"] = {"wording": out["wording"], "design_hash": out["design_hash"], "metric": self.metric,
                                  "cost": out["cost"],
                                  **out["configurations"][p.plan.config_hash]}
            p.info["adaptive_metric"] = f"{self.metric} "
        return out




DRAIN_MARGIN = 1.25      # the reserve's margin over the mean episode: episodes differ


def drain_reason(caps: dict[str, Any], spent: dict[str, Any], in_flight: int, mean: dict[str, float],
                 gpu_units: float, max_ask: dict[str, Any] | None = None) -> str:
    """Why an adaptive run under a budget stops dispatching now ("" while it may go on): what is
    left under a cap would not cover the episodes in flight and one more episode at the mean cost
    of those finished (times ``DRAIN_MARGIN``), plus the largest worst case one call asked the
    ledger for (``max_ask``: the ledger admits a call only while its worst case fits); for
    ``max_gpu_hours``, the replicas' uptime for one more mean episode. Stopping *dispatch* there
    lets the episodes in flight finish, so the admitted prefix is not cut by the budget (a budget
    cut censors by outcome: the slow episodes are the failure-prone ones). ``mean``:
    ``tokens_in``, ``tokens_out``, ``usd``, ``wall_s`` per episode."""
    if not mean:
        return ""
    ask = max_ask or {}
    n = in_flight + 1
    need = {"max_input_tokens": DRAIN_MARGIN * n * mean["tokens_in"] + float(ask.get("tokens_in") or 0),
            "max_output_tokens": DRAIN_MARGIN * n * mean["tokens_out"] + float(ask.get("tokens_out") or 0),
            "max_usd": DRAIN_MARGIN * n * mean["usd"] + float(ask.get("usd") or 0.0),
            "max_gpu_hours": DRAIN_MARGIN * mean["wall_s"] * gpu_units / 3600.0}
    have = {"max_input_tokens": spent.get("tokens_in", 0), "max_output_tokens": spent.get("tokens_out", 0),
            "max_usd": spent.get("usd", 0.0), "max_gpu_hours": spent.get("gpu_hours", 0.0)}
    for cap, reserve in need.items():
        limit = caps.get(cap)
        if limit is None or reserve <= 0:
            continue
        left = float(limit) - float(have[cap])
        if left < reserve:
            return (f"drain reserve: {left:.4g} left under run.budget.{cap}, {in_flight} episodes in flight need "
                    f"about {reserve:.4g}; dispatch stops so they finish")
    return ""


__all__ = ["ADAPTIVE_FILE", "SCREENING", "Racer", "adaptive_on", "design_of", "drain_reason", "wording"]
