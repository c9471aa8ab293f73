"""The judging stage of ``dateline run``: one stream of judgements per run, fed by the dispatch
loop as rows are stored (``ray_jobs/judging/stream.py`` does the judging, on actors or a driver thread)."""

from __future__ import annotations

import logging

from engine.budget import Caps
from engine.config import (
    engine_batch,
)
from engine.runtime.budget_actor import remote_gate
from ray_jobs.budget.gates import judge_budget_gate, judge_prices_match
from ray_jobs.cluster.session import Session
from ray_jobs.judging.fleet import JudgeFleet
from ray_jobs.judging.stream import JudgeStream, judge_endpoints
from ray_jobs.run.planning import Point

log = logging.getLogger("dateline.run")


def judge_stream(points: list[Point]) -> JudgeStream | JudgeFleet:
    """Where a wave's judging runs: judge actors (``judge.actors``, the most any point asks for),
    or a thread of the driver when every judged point says ``judge.actors=0``."""
    flush_s = min((p.cfg.run.flush_interval_s for p in points), default=2.0)
    j = max((p.cfg.judge for p in points), key=lambda j: j.actors, default=None)
    if j is None or j.actors <= 0:
        return JudgeStream(flush_s)
    return JudgeFleet(j.actors, flush_s, j.actor_cpus, dict(j.actor_resources) or None, j.actor_start_timeout_s)


def add_judge(stream: JudgeStream | JudgeFleet, p: Point, session: Session) -> None:
    """The point's judge on the stream: its endpoints, and its calls' budget (the point's own
    ledger when the judge's calls are priced like the model's, else a gate from the recorded spend)."""
    cfg = p.cfg
    hosted = p.spec.judge_model
    eps = judge_endpoints(cfg, lambda m: session.pool(m, p.store.root / "logs", keep=set(session.pools),
                                                      log_uri=p.store.remote_dir("logs")))
    gate = None
    ledger = p.budget if p.budget is not None else (p.ledger.budget if p.ledger is not None else None)
    if ledger is not None and judge_prices_match(cfg):
        gate = remote_gate(ledger.actor, p.plan.config_hash)
    elif Caps.of(cfg.run.budget).any:
        gate = judge_budget_gate(p.spec, p.store, p.ledger)
    # in flight per endpoint: a hosted judge's engine batch, an external one's judge.max_inflight
    batch = engine_batch(hosted) if hosted is not None and hosted.kind == "vllm" else None
    stream.add(p.key, cfg, p.bench, p.store, eps, gate, max(batch or 0, cfg.judge.max_inflight), p.plan.config_hash)
