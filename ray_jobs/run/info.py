"""What a run records about each configuration it ran: the ``run-*.json`` of its run dir (and what
``dateline.run()`` returns). A typed record: every key is declared here, with its type, so a stage
that writes one the readers do not know fails the type check instead of writing it unseen. On disk
it is the same JSON object, with the same keys, as before it was typed.

Who writes which keys: planning (the episode counts, a budget closed before start), the waves
(hosting, index, services, the judge, the budget, replica uptime), the dispatch loop (concurrency,
what stopped early and why, counters, statistics), adaptive evaluation, and the sweep's report
(the configuration, failures, provenance, wall time).
"""

from __future__ import annotations

from typing import Any, TypedDict


class RunInfo(TypedDict, total=False):
    # planning
    episodes_total: int                  # planned episodes (tasks x seeds)
    episodes_skipped: int                # of them, already stored by earlier runs
    episodes_planned: int                # of them, run by this run
    budget_exhausted_before_start: str   # why no episode of it started (a closed budget)
    # hosting and the waves
    replicas_auto: Any                   # model.replicas=auto: what sizing decided
    startup_s: float
    model_started: bool                  # this run started the model's replicas (else they were up)
    model_startup: Any
    index: Any                           # the index actors' ready info
    services: dict[str, Any]
    run_s: float
    judge: Any                           # the judge stream's summary of this configuration
    budget: Any                          # the budget ledger's summary (its point's part, for a sweep ledger)
    replica_seconds: Any
    replica_seconds_run: float           # replica uptime of the model under test during this run
    judge_replica_seconds_run: float     # and of a hosted judge model
    # the dispatch loop
    concurrency: dict[str, Any]
    model_failing: str
    budget_lost: str
    drained: str
    stopped_at_max_failures: int
    unstarted: int
    not_run: int
    replica_restart_causes: dict[str, Any]
    requeued: int
    replica_restarts: int
    failures: Any                        # the dispatch loop's count, then the sweep's failure summary
    steps: int
    tokens_in: int
    tokens_out: int
    index_stats: Any
    service_stats: dict[str, Any]
    dispatch_max_stall_s: float
    pool_moves: Any
    # adaptive evaluation
    adaptive: dict[str, Any]
    adaptive_metric: str
    # the sweep's report
    wall_s: float
    model_starts_in_session: int
    config_hash: str
    model: dict[str, Any]
    judge_config: dict[str, Any]
    tasks: dict[str, Any]                # which tasks: limit, order, order_seed (ray_jobs/run/sweep.py tasks_taken)
    provenance: dict[str, Any]
