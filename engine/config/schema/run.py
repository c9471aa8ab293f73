"""One run of a configuration (``run=...``, :class:`RunConfig`): its directory, seeds, task order,
flushing, failure policy, and its spending caps (``run.budget``, :class:`BudgetConfig`, with the
scopes a budget may cover, :data:`BUDGET_SCOPES`)."""

from __future__ import annotations

from dataclasses import dataclass, field

BUDGET_SCOPES = ("point", "sweep")


@dataclass
class BudgetConfig:
    """Caps on what one configuration (``scope: point``) or all configurations of a sweep
    (``scope: sweep``) may spend in their run directories, counted over every run of them there
    (docs/design/budget.md). Null: no cap. At a cap no new model call starts, in-flight calls
    finish, unfinished episodes are stored as ``budget_exhausted``; the same command with a larger
    budget resumes them."""
    # US dollars: tokens at model.price_*_per_mtok plus replica uptime at model.price_gpu_hour.
    max_usd: float | None = None
    # Prompt tokens, as the server reports them (a call reserves its estimate until it settles).
    max_input_tokens: int | None = None
    # Completion tokens (a call reserves its max_tokens until it settles).
    max_output_tokens: int | None = None
    # Replica uptime in GPU hours (GPUs per replica; a CPU-only replica counts one per hour).
    max_gpu_hours: float | None = None
    # What the caps cover when several configurations run as one sweep (dateline run -m ...):
    # "sweep", one ledger and one cap for all its points (at the cap every point stops; all points
    # must set the same caps); "point", a ledger per configuration. A single configuration is its
    # own sweep either way.
    scope: str = "sweep"


@dataclass
class RunConfig:
    # Run directory: the Parquet dataset lives here. Re-running with the same dir resumes.
    dir: str = "runs/default"
    # Seed: part of the episode id, also seeds any sampling.
    seed: int = 0
    # Number of seeds (episodes per task per config): seeds seed..seed+num_seeds-1.
    num_seeds: int = 1
    # The order tasks are taken in (engine/inputs/order.py): "random", one seeded permutation shared
    # by every configuration (benchmark.limit then draws a random subset, the same for all), or
    # "data", the data file's (the paper's) order. Seeded by order_seed, else by seed.
    order: str = "random"
    order_seed: int | None = None
    # Finished episodes are flushed as a Parquet shard at least this often (seconds), or once a
    # run dir's buffered rows reach flush_bytes (one shard per table per run dir per flush).
    flush_interval_s: float = 2.0
    flush_bytes: int = 32 << 20
    # A resumed run re-runs the episodes that failed (status error) only when this is true; by
    # default it runs what never finished (new, budget-stopped) and keeps failures as results.
    retry_failed: bool = False
    # Merge shards into one file per table at the end of the run.
    compact: bool = True
    # Live progress line on stderr.
    progress: bool = True
    # Stop the run (in-flight episodes finish) once this many episodes fail; 0 = never. A run that
    # stops there exits with status 1.
    max_failures: int = 0
    # Exit with status 1 when an episode of the run ended in error (the summary lists them by kind);
    # false for sweeps where failures are expected (they are still counted and marked).
    fail_on_error: bool = True
    # What a planned episode without a scored result (an error, a budget stop, one that never ran)
    # counts as in accuracy-like means (docs/design/what-a-number-means.md): "as_wrong" (the
    # benchmark's failure value: 0 accuracy, the checklist floor...) or "exclude" (left out; the
    # counts beside every number still show it). Either way the configuration is marked incomplete.
    score_failures: str = "as_wrong"
    # Spending caps (run.budget.max_usd=20 ...); all null by default.
    budget: BudgetConfig = field(default_factory=BudgetConfig)
