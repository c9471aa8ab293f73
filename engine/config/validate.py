"""The checks a type cannot express: ranges, enums and cross-field rules of a composed config
(:func:`validate`, :func:`validate_pairwise`), each failure a ConfigError naming the field."""

from __future__ import annotations

import os
from typing import Any

from engine.config.cutoffs import check_date, check_table
from engine.config.schema import (
    BUDGET_SCOPES,
    HOSTED_JUDGES,
    JUDGE_KINDS,
    SCORE_FAILURES,
    Config,
    JudgeConfig,
    ModelConfig,
    PairwiseConfig,
)
from engine.errors import ConfigError
from engine.inputs.order import ORDERS


def _check(cond: bool, where: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"{where}: {msg}")


def _check_resources(res: Any, where: str) -> None:
    """Custom Ray resources: names to non-negative numbers (CPUs and GPUs have fields of their own)."""
    _check(isinstance(res, dict), where, f"must be a mapping of resource name to amount, got {res!r}")
    for k, v in res.items():
        _check(isinstance(k, str) and bool(k), where, f"resource names must be non-empty strings, got {k!r}")
        _check(k not in ("CPU", "GPU"), f"{where}.{k}", "set CPUs and GPUs with the num_cpus/num_gpus fields")
        _check(isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and 0 <= v < float("inf"),
               f"{where}.{k}", f"must be a non-negative number, got {v!r}")


def validate_model(m: ModelConfig, where: str) -> None:
    """A model config at ``where`` (``model``, ``judge.hosted_model``)."""
    _check(m.kind in ("vllm", "openai_compatible"), f"{where}.kind", f"must be vllm or openai_compatible, got {m.kind!r}")
    if m.kind == "vllm":
        _check(bool(m.path), f"{where}.path", "required for kind=vllm (a local model folder)")
        _check(m.replicas == "auto" or (isinstance(m.replicas, int) and not isinstance(m.replicas, bool)
                                        and m.replicas >= 1), f"{where}.replicas",
               f"must be an integer >= 1 or auto, got {m.replicas!r}")
        top = m.replicas if isinstance(m.replicas, int) else None
        _check(m.min_replicas is None or (isinstance(m.min_replicas, int) and 1 <= m.min_replicas <= (top or m.min_replicas)),
               f"{where}.min_replicas", f"must be between 1 and replicas ({m.replicas}), or null, got {m.min_replicas!r}")
        _check(isinstance(m.max_start_failures, int) and m.max_start_failures >= 1, f"{where}.max_start_failures",
               "must be an integer >= 1")
        _check(m.tensor_parallel_size >= 1, f"{where}.tensor_parallel_size", "must be >= 1")
        if m.tensor_parallel_size > 1:
            _check(m.num_gpus >= m.tensor_parallel_size, f"{where}.num_gpus",
                   f"tensor_parallel_size={m.tensor_parallel_size} needs num_gpus >= {m.tensor_parallel_size}")
        _check(m.num_cpus >= 0 and m.num_gpus >= 0, f"{where}.num_cpus", "num_cpus and num_gpus must be >= 0")
        _positive(m.placement_timeout_s, f"{where}.placement_timeout_s")
        _positive(m.startup_timeout_s, f"{where}.startup_timeout_s")
        _check(bool(m.server_module), f"{where}.server_module", "required (vllm.entrypoints.openai.api_server)")
        _check(m.bind in ("auto", "loopback", "node"), f"{where}.bind", "must be auto, loopback or node")
        _check_resources(m.resources, f"{where}.resources")
    else:
        _check(not (m.base_url and m.base_urls), f"{where}.base_urls",
               "give base_url (one endpoint) or base_urls (several), not both; with base_urls add "
               f"{where}.base_url= (the openai_compatible preset sets base_url from $DATELINE_BASE_URL)")
        if m.base_urls:
            for i, url in enumerate(m.base_urls):
                _check_url(url, f"{where}.base_urls[{i}]", "must not be empty")
            _check(len({u.rstrip("/") for u in m.base_urls}) == len(m.base_urls), f"{where}.base_urls",
                   "lists the same endpoint twice")
        else:
            _check_url(m.base_url, f"{where}.base_url", "required for kind=openai_compatible (or base_urls)")
        if m.api_key_env:
            _check(m.api_key_env in os.environ, f"{where}.api_key_env",
                   f"environment variable {m.api_key_env!r} is not set")
    _check(not (m.reproducible and m.kind != "vllm"), f"{where}.reproducible",
           "needs a hosted model (kind: vllm): dateline cannot set an external endpoint's engine")
    # what every kind uses: retries, timeouts, sampling, prices
    _check(isinstance(m.max_retries, int) and m.max_retries >= 0, f"{where}.max_retries", "must be an integer >= 0")
    _check(isinstance(m.max_retries_per_episode, int) and m.max_retries_per_episode >= 0,
           f"{where}.max_retries_per_episode", "must be an integer >= 0")
    _check(_finite(m.retry_backoff_s) and _finite(m.retry_backoff_max_s) and 0 <= m.retry_backoff_s <= m.retry_backoff_max_s,
           f"{where}.retry_backoff_s", "must be >= 0 and <= retry_backoff_max_s")
    _positive(m.request_timeout_s, f"{where}.request_timeout_s")
    _positive(m.connect_timeout_s, f"{where}.connect_timeout_s")
    _check(m.max_inflight_per_replica >= 1, f"{where}.max_inflight_per_replica", "must be >= 1")
    _check(_finite(m.health_check_s) and m.health_check_s > 0 and m.unhealthy_checks >= 1, f"{where}.health_check_s",
           "health_check_s must be > 0 and unhealthy_checks >= 1")
    _check(_finite(m.stall_timeout_s) and m.stall_timeout_s >= 0, f"{where}.stall_timeout_s", "must be a number >= 0")
    _check(isinstance(m.max_stall_restarts, int) and m.max_stall_restarts >= 0, f"{where}.max_stall_restarts",
           "must be an integer >= 0")
    _check(_finite(m.replica_wait_s) and m.replica_wait_s >= 0, f"{where}.replica_wait_s", "must be a number >= 0")
    _check(_finite(m.temperature) and 0.0 <= m.temperature <= 2.0, f"{where}.temperature", "must be in [0, 2]")
    _check(_finite(m.top_p) and 0.0 < m.top_p <= 1.0, f"{where}.top_p", f"must be in (0, 1], got {m.top_p!r}")
    for price in ("price_input_per_mtok", "price_output_per_mtok", "price_gpu_hour"):
        _non_negative(getattr(m, price), f"{where}.{price}")
    if m.knowledge_cutoff is not None:
        check_date(m.knowledge_cutoff, f"{where}.knowledge_cutoff")


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


def _positive(v: Any, where: str) -> None:
    _check(_finite(v) and v > 0, where, f"must be a number > 0, got {v!r}")


def _non_negative(v: Any, where: str) -> None:
    _check(_finite(v) and v >= 0, where, f"must be a number >= 0, got {v!r}")


def _check_url(url: str, where: str, missing: str) -> None:
    """An endpoint: required, http(s)://host[:port][/path], no credentials in it (they would be
    written into run files; keys go in the environment variable named by api_key_env)."""
    from urllib.parse import urlsplit

    _check(bool(url), where, missing)
    try:
        u = urlsplit(url)
        port = u.port
    except ValueError as e:
        raise ConfigError(f"{where}: not a URL ({e}): {url!r}") from e
    _check(u.scheme in ("http", "https") and bool(u.hostname), where,
           f"must be an http:// or https:// URL with a host, got scheme {u.scheme!r}")
    _check(u.username is None and u.password is None, where,
           "must not hold credentials (user:password@); name the key's environment variable in api_key_env")
    _check(port is None or 0 < port < 65536, where, f"port out of range: {port}")


def validate_judge(j: JudgeConfig, pairwise: bool = False) -> None:
    _check(j.kind in JUDGE_KINDS, "judge.kind", f"must be one of {JUDGE_KINDS}, got {j.kind!r}")
    if j.kind == "hosted" and j.hosted_model is None and not pairwise:
        raise ConfigError("judge.kind: hosted needs judge.hosted_model (judge=hosted_model judge.hosted_model.name=... "
                          ".path=...); to let the model under test grade its own outputs ask for it explicitly with "
                          "judge=self (every judge-based number is then marked SELF-JUDGED)")
    if j.kind == "openai_compatible":
        _check_url(j.base_url, "judge.base_url", "required for judge.kind=openai_compatible")
        _check(bool(j.model), "judge.model", "required for judge.kind=openai_compatible")
        if j.api_key_env:
            _check(j.api_key_env in os.environ, "judge.api_key_env",
                   f"environment variable {j.api_key_env!r} is not set")
    if j.kind in HOSTED_JUDGES and j.model and j.hosted_model is None:
        raise ConfigError("judge.model: a hosted judge is the model under test unless judge.hosted_model is set; "
                          "to host another model as judge use judge=hosted_model (judge.hosted_model.name=..., "
                          ".path=...), or judge=openai_compatible for an endpoint")
    if j.hosted_model is not None:
        _check(j.kind == "hosted", "judge.hosted_model", f"only for judge.kind=hosted, got kind={j.kind!r}")
        validate_model(j.hosted_model, "judge.hosted_model")
    _check(j.max_attempts >= 1, "judge.max_attempts", "must be >= 1")
    _check(j.max_inflight >= 1, "judge.max_inflight", "must be >= 1")
    _check(j.actors >= 0, "judge.actors", f"must be >= 0 (0: judge on a thread of the driver), got {j.actors}")
    _non_negative(j.actor_cpus, "judge.actor_cpus")
    _check(j.actor_start_timeout_s > 0, "judge.actor_start_timeout_s", "must be > 0")
    _check_resources(j.actor_resources, "judge.actor_resources")
    _check(_finite(j.temperature) and 0.0 <= j.temperature <= 2.0, "judge.temperature", "must be in [0, 2]")
    _positive(j.request_timeout_s, "judge.request_timeout_s")
    _positive(j.connect_timeout_s, "judge.connect_timeout_s")
    _non_negative(j.price_input_per_mtok, "judge.price_input_per_mtok")
    _non_negative(j.price_output_per_mtok, "judge.price_output_per_mtok")


def validate_adaptive(cfg: Config) -> None:
    """``sweep`` and ``stop`` (engine/scoring/racing.py): one at a time, a known strategy, an error
    level in (0, 1), and the random task order they need."""
    sw, st = cfg.sweep, cfg.stop
    _check(sw.strategy in ("none", "race", "incumbent", "halving"), "sweep.strategy",
           f"must be none, race, incumbent or halving, got {sw.strategy!r}")
    _check(st.rule in ("none", "anytime_valid"), "stop.rule", f"must be none or anytime_valid, got {st.rule!r}")
    if sw.strategy == "none" and st.rule == "none":
        return
    _check(sw.strategy == "none" or st.rule == "none", "stop.rule",
           "a sweep strategy and a precision stop cannot be combined: choose sweep=... or stop=anytime_valid")
    _check(cfg.run.order == "random", "run.order", "an adaptive rule needs the random task order (run.order=random): "
           "stopping on the file's first tasks is the bias it exists to avoid")
    _check(cfg.run.score_failures == "as_wrong", "run.score_failures",
           "an adaptive rule needs run.score_failures=as_wrong (a task's value must exist when its episode failed)")
    where = "sweep" if sw.strategy != "none" else "stop"
    a = sw.alpha if where == "sweep" else st.alpha
    _check(_finite(a) and 0 < a < 1, f"{where}.alpha", f"must be in (0, 1), got {a!r}")
    _check((sw.min_tasks if where == "sweep" else st.min_tasks) >= 1, f"{where}.min_tasks", "must be >= 1")
    if where == "sweep":
        _check(sw.check_every >= 1, "sweep.check_every", "must be >= 1")
        _check(sw.split == "bonferroni", "sweep.split", f"must be bonferroni (the only split built), got {sw.split!r}")
        _check(sw.goal in ("best", "eps_best") or (sw.goal.startswith("top:") and sw.goal[4:].isdigit()
                                                   and int(sw.goal[4:]) >= 1),
               "sweep.goal", f"must be best, eps_best or top:<k> (k >= 1), got {sw.goal!r}")
        _check(sw.goal != "eps_best" or (_finite(sw.epsilon) and sw.epsilon > 0), "sweep.epsilon",
               "sweep.goal=eps_best needs sweep.epsilon > 0 (in the metric's [0, 1] scale)")
        _check(sw.strategy != "halving" or (bool(sw.rungs) and list(sw.rungs) == sorted(sw.rungs)
                                            and sw.rungs[-1] == 1.0 and sw.rungs[0] > 0 and sw.eta > 1),
               "sweep.rungs", "halving needs rungs increasing in (0, 1] ending at 1.0, and sweep.eta > 1")
    else:
        _check(st.half_width is None or (_finite(st.half_width) and st.half_width > 0), "stop.half_width",
               f"must be > 0 or null, got {st.half_width!r}")


def validate(cfg: Config) -> None:
    """Checks a type cannot express. Raises ConfigError naming the field."""
    validate_model(cfg.model, "model")
    check_table(cfg.knowledge_cutoffs)
    validate_adaptive(cfg)
    i = cfg.index
    _check(i.top_k >= 1, "index.top_k", "must be >= 1")
    _check(i.embed_batch_size >= 1, "index.embed_batch_size", "must be >= 1")
    _check(0.0 < cfg.cluster.sizing_efficiency < 1.0, "cluster.sizing_efficiency",
           f"must be between 0 and 1 (exclusive), got {cfg.cluster.sizing_efficiency!r}")
    for value, where in ((i.replicas, "index.replicas"), (cfg.cluster.service_replicas, "cluster.service_replicas")):
        _check(value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1), where,
               f"must be an integer >= 1 or auto, got {value!r}")
    _non_negative(i.num_cpus, "index.num_cpus")
    _non_negative(i.num_gpus, "index.num_gpus")
    _check(-1.0 <= i.threshold <= 1.0, "index.threshold", "cosine threshold must be in [-1, 1]")
    _check(i.device in ("auto", "cpu", "gpu"), "index.device", f"must be auto, cpu or gpu, got {i.device!r}")
    _check_resources(i.resources, "index.resources")
    c = cfg.cluster
    _check(c.num_workers >= 1, "cluster.num_workers", "must be >= 1")
    _check(c.episodes_per_worker >= 1, "cluster.episodes_per_worker", "must be >= 1")
    _check(c.max_episode_attempts >= 1, "cluster.max_episode_attempts", "must be >= 1")
    _check(c.concurrency in ("fixed", "auto"), "cluster.concurrency", f"must be fixed or auto, got {c.concurrency!r}")
    _check(_finite(c.model_time_share) and 0 < c.model_time_share <= 1, "cluster.model_time_share",
           f"must be in (0, 1], got {c.model_time_share!r}")
    _non_negative(c.worker_num_cpus, "cluster.worker_num_cpus")
    _check(c.num_cpus is None or c.num_cpus >= 1, "cluster.num_cpus", "must be >= 1 or null (all)")
    _check_resources(c.worker_resources, "cluster.worker_resources")
    _check(c.ray_auth_mode in ("auto", "disabled", "token"), "cluster.ray_auth_mode", "must be auto, disabled or token")
    r = cfg.run
    _check(r.num_seeds >= 1, "run.num_seeds", "must be >= 1")
    _check(r.seed >= 0, "run.seed", "must be >= 0")
    _check(r.max_failures >= 0, "run.max_failures", f"must be >= 0 (0: never stop), got {r.max_failures}")
    _non_negative(r.flush_interval_s, "run.flush_interval_s")
    _check(r.flush_bytes >= 1 << 16, "run.flush_bytes", f"must be >= 65536, got {r.flush_bytes}")
    _check(r.score_failures in SCORE_FAILURES, "run.score_failures",
           f"must be one of {SCORE_FAILURES}, got {r.score_failures!r}")
    _check(r.order in ORDERS, "run.order", f"must be one of {ORDERS} (random: one seeded order shared by every "
           f"configuration; data: the data file's), got {r.order!r}")
    _check(bool(r.dir), "run.dir", "required")
    for cap in ("max_usd", "max_input_tokens", "max_output_tokens", "max_gpu_hours"):
        v = getattr(r.budget, cap)
        _check(v is None or (_finite(v) and v >= 0), f"run.budget.{cap}", f"must be >= 0 or null, got {v!r}")
    _check(r.budget.scope in BUDGET_SCOPES, "run.budget.scope",
           f"must be one of {BUDGET_SCOPES} (one ledger per configuration, or one for the whole sweep), "
           f"got {r.budget.scope!r}")
    validate_judge(cfg.judge)
    from engine.benchmarks import get_benchmark

    bench = get_benchmark(cfg.benchmark.name)
    _check(isinstance(cfg.benchmark, bench.benchmark_schema), "benchmark",
           f"expected a {bench.benchmark_schema.__name__}, got {type(cfg.benchmark).__name__}")
    limit = getattr(cfg.benchmark, "limit", None)
    _check(limit is None or (isinstance(limit, int) and limit >= 1), "benchmark.limit",
           f"must be >= 1 or null (all tasks), got {limit!r}")
    from engine.inputs.quarantine import ON_BAD_ROWS

    on_bad_rows = getattr(cfg.benchmark, "on_bad_rows", "error")
    _check(on_bad_rows in ON_BAD_ROWS, "benchmark.on_bad_rows", f"must be error or skip, got {on_bad_rows!r}")
    _check(isinstance(cfg.agent, bench.agent_schema), "agent",
           f"benchmark {bench.name} needs an agent config of its own (agent={bench.name} or a variant), "
           f"got {type(cfg.agent).__name__}")
    bench.validate(cfg)


def validate_pairwise(cfg: PairwiseConfig) -> None:
    from engine.benchmarks import get_benchmark

    _check(bool(cfg.runs), "runs", "give at least one run directory, e.g. runs=[runs/a,runs/b]")
    bench = get_benchmark(cfg.benchmark)
    if bench.pairwise is None:
        raise ConfigError(f"benchmark: {cfg.benchmark} defines no pairwise judging")
    allowed = (*bench.pairwise.protocols, "both")
    _check(cfg.protocol in allowed, "protocol", f"must be one of {allowed}, got {cfg.protocol!r}")
    _check(cfg.max_tokens >= 16, "max_tokens", "must be >= 16")
    _check(cfg.limit is None or cfg.limit >= 1, "limit", "must be >= 1 or null")
    _check(cfg.judge.kind in ("hosted", "openai_compatible"), "judge.kind",
           f"pairwise judging needs a judge: hosted or openai_compatible, got {cfg.judge.kind!r}")
    validate_judge(cfg.judge, pairwise=True)
    if cfg.judge.kind == "hosted" and cfg.judge.hosted_model is None:
        validate_model(cfg.model, "model")
