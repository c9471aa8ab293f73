"""The model under test (``model=...``, conf/model/): :class:`ModelConfig`, how dateline hosts a
model in vLLM replicas or reaches an existing endpoint, how it routes, retries, checks and prices
it. A hosted judge (``judge.hosted_model``) and ``dateline pairwise`` use the same class."""

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
    # The last date (YYYY-MM-DD) the model's training data reaches. Outputs of dated questions
    # (livenews) also show every number over the questions dated after it. Null: looked up in
    # knowledge_cutoffs (conf/knowledge_cutoffs.yaml) by served name, then name; else "cutoff
    # unknown". A reading setting: changing it re-runs no episode.
    knowledge_cutoff: str | None = None
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
    # The server's CPU priority (its niceness). Ray starts every worker, a replica's actor included,
    # at 15 (RAY_worker_niceness): a server computing on the CPU then got about 3% of a core beside
    # any busy process on the node at 0. 0 runs it as any process (lowering it needs CAP_SYS_NICE:
    # without, the replica's log says it kept Ray's); null keeps the actor's.
    niceness: int | None = 0
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
