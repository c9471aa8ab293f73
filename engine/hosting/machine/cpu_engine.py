"""The engine settings of a CPU replica, decided from :class:`MachineFacts`: the dtype (bfloat16
only where the CPU computes it natively), the cores its OpenMP threads are bound to (its slice of the
affinity, at most its share of the cgroup quota), the KV cache size (what the batch needs, capped
by the memory available) and :func:`resolve_cpu_engine`, which applies them to a model's engine
arguments and environment where the config leaves them out. :func:`describe` says what was chosen.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.hosting.machine.facts import ARM_ARCHS, GiB, MachineFacts, core_list

# The KV cache takes at most this share of the memory available on the node, shared by the CPU
# replicas placed there: the rest is the weights, the engine's activations and everything else.
KV_MEMORY_SHARE = 0.25
# vLLM 0.32's defaults for its OpenAI server on a CPU (EngineArgs.get_batch_defaults), used when
# engine_args leaves them out; max_model_len defaults to the model's own context length.
VLLM_CPU_MAX_NUM_SEQS = 128

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}

OMP_BIND = "VLLM_CPU_OMP_THREADS_BIND"
RESERVED = "VLLM_CPU_NUM_OF_RESERVED_CPU"
KV_SPACE = "VLLM_CPU_KVCACHE_SPACE"


def native_bf16(facts: MachineFacts) -> bool:
    """Whether the CPU computes bfloat16 natively: AVX512_BF16 or AMX-BF16 on x86, BF16 on Arm."""
    if facts.arch.lower() in ARM_ARCHS:
        return "bf16" in facts.flags
    return bool(facts.flags & {"avx512_bf16", "amx_bf16"})


def derived_dtype(facts: MachineFacts) -> tuple[str, str]:
    """The dtype a CPU replica runs with when the config does not say, and why."""
    if native_bf16(facts):
        have = sorted(facts.flags & {"avx512_bf16", "amx_bf16", "bf16"})
        return "bfloat16", f"the CPU computes bfloat16 natively ({', '.join(have)})"
    isa = "bf16 feature" if facts.arch.lower() in ARM_ARCHS else "avx512_bf16 or amx_bf16"
    return "float32", (f"no {isa}: bfloat16 would be emulated (an AVX2-only EPYC prefilled ~5x slower in "
                       "bfloat16 than in float32)")


def identity_dtype(engine_args: Mapping[str, Any], facts: MachineFacts) -> str:
    """The part of a CPU model's engine that decides its numerics beyond its config: the dtype, as
    set (explicit) or as ``facts`` resolve it. What an episode id records."""
    if "dtype" in engine_args:
        return str(engine_args["dtype"])
    return derived_dtype(facts)[0]


def thread_cores(facts: MachineFacts, replicas_on_node: int = 1, slot: int = 0) -> tuple[list[int], str]:
    """The cores replica ``slot`` of ``replicas_on_node`` binds its threads to, and why: its slice
    of the affinity (disjoint slices, as even as they go), as many as the cgroup quota's share
    (floor, at least 1)."""
    if replicas_on_node < 1 or not 0 <= slot < replicas_on_node:
        raise ValueError(f"slot {slot} of {replicas_on_node} replicas on this node")
    cores = sorted(facts.affinity) or [0]
    n = len(cores)
    if replicas_on_node <= n:
        part = cores[slot * n // replicas_on_node:(slot + 1) * n // replicas_on_node]
        why = f"affinity {core_list(cores)}" + (f", slice {slot + 1} of {replicas_on_node} replicas on this node"
                                                if replicas_on_node > 1 else "")
    else:
        part = [cores[slot % n]]
        why = f"affinity {core_list(cores)} shared by {replicas_on_node} replicas: more replicas than cores"
    if facts.cpu_quota is not None:
        share = max(1, math.floor(facts.cpu_quota / replicas_on_node + 1e-9))
        if share < len(part):
            part = part[:share]
            why += f"; cgroup CPU quota {facts.cpu_quota:g} CPUs" + (
                f" / {replicas_on_node} replicas" if replicas_on_node > 1 else "") + f" -> {share} thread(s)"
    return part, why


def model_config(model_path: str | Path | None) -> dict[str, Any] | None:
    """The model's ``config.json`` (a multimodal model's ``text_config``), None when there is none."""
    if not model_path:
        return None
    try:
        text = (Path(model_path) / "config.json").read_text()
    except OSError:
        return None
    try:
        cfg = json.loads(text)
    except ValueError:
        return None
    if not isinstance(cfg, dict):
        return None
    inner = cfg.get("text_config")
    if "num_hidden_layers" not in cfg and isinstance(inner, dict):
        return {**cfg, **inner}
    return cfg


def kv_bytes_per_token(cfg: Mapping[str, Any], dtype: str, kv_cache_dtype: str | None = None) -> int | None:
    """Bytes of KV cache per token: 2 (K and V) x layers x KV heads x head dim x bytes per element
    (the KV cache dtype when set, else the model's dtype; ``auto``: the checkpoint's). None when
    ``cfg`` does not say."""
    try:
        layers = int(cfg["num_hidden_layers"])
        heads = int(cfg["num_attention_heads"])
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    if kv_cache_dtype and kv_cache_dtype != "auto":
        size = 1 if kv_cache_dtype.startswith("fp8") else DTYPE_BYTES.get(kv_cache_dtype, 2)
    else:
        if dtype == "auto":
            dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
        size = DTYPE_BYTES.get(dtype, 2)
    return 2 * layers * kv_heads * head_dim * size


def kv_cache_gib(engine_args: Mapping[str, Any], dtype: str, facts: MachineFacts, model_path: str | Path | None = None,
                 replicas_on_node: int = 1) -> tuple[int, str]:
    """``VLLM_CPU_KVCACHE_SPACE`` (GiB, >= 1) and why: what the batch needs (``max_num_seqs`` x
    ``max_model_len`` tokens x :func:`kv_bytes_per_token`), at most :data:`KV_MEMORY_SHARE` of the
    memory available, shared by the replicas on the node. ValueError naming the numbers when even
    1 GiB does not fit, or one sequence of ``max_model_len`` does not."""
    cfg = model_config(model_path) or {}
    per_token = kv_bytes_per_token(cfg, dtype, engine_args.get("kv_cache_dtype"))
    seqs = int(engine_args.get("max_num_seqs") or VLLM_CPU_MAX_NUM_SEQS)
    max_len_given = engine_args.get("max_model_len")
    max_len = int(max_len_given or cfg.get("max_position_embeddings") or 0)
    need: int | None = None
    if per_token and max_len:
        need = seqs * max_len * per_token
        need_why = (f"{seqs} seqs (max_num_seqs) x {max_len} tokens (max_model_len) x {per_token} B/token "
                    f"({dtype}) = {need / GiB:.2f} GiB")
    else:
        need_why = "what the model needs is unknown (no config.json with its layers and heads)"
    avail = facts.memory_available
    if avail is None:
        if need is None:
            return 4, f"{need_why}; memory available unknown: 4 GiB"
        return max(1, math.ceil(need / GiB)), f"{need_why}; memory available unknown"
    cap = avail * KV_MEMORY_SHARE / replicas_on_node
    cap_gib = math.floor(cap / GiB + 1e-9)
    mem_why = (f"{avail / GiB:.1f} GiB available" + (" (cgroup limit)" if facts.cgroup_mem_free == avail else "")
               + f" x {KV_MEMORY_SHARE:g}" + (f" / {replicas_on_node} replicas" if replicas_on_node > 1 else "")
               + f" = {cap / GiB:.2f} GiB")
    if cap_gib < 1:
        raise ValueError(
            f"VLLM_CPU_KVCACHE_SPACE: a replica's KV cache may take at most {cap / GiB:.2f} GiB here ({mem_why}: "
            f"memory available {avail / GiB:.2f} GiB, from {facts.cgroup_mem_source or '/proc/meminfo MemAvailable'}), "
            f"less than the 1 GiB minimum ({need_why}). Set model.env.{KV_SPACE} explicitly (GiB, e.g. "
            f"++model.env.{KV_SPACE}=1), lower model.replicas, or free memory on this node")
    if need is None:
        return cap_gib, f"{need_why}; {mem_why}"
    gib = max(1, min(math.ceil(need / GiB), cap_gib))
    if per_token and max_len * per_token > gib * GiB:
        raise ValueError(
            f"VLLM_CPU_KVCACHE_SPACE: one sequence of max_model_len {max_len} tokens needs "
            f"{max_len * per_token / GiB:.2f} GiB of KV cache ({per_token} B/token, {dtype}), more than the "
            f"{gib} GiB this node allows a replica ({mem_why}). Set model.engine_args.max_model_len lower, or "
            f"model.env.{KV_SPACE} explicitly (GiB)")
    capped = " (capped)" if gib < math.ceil(need / GiB) else ""
    return gib, f"{need_why}; {mem_why}{capped}"


def resolve_cpu_engine(engine_args: Mapping[str, Any], env: Mapping[str, str], facts: MachineFacts, *,
                       model_path: str | Path | None = None, replicas_on_node: int = 1,
                       slot: int = 0) -> tuple[dict[str, Any], dict[str, str], dict[str, Any]]:
    """A CPU vLLM server's engine arguments and environment on the machine of ``facts``, and what
    was chosen: ``{"machine": ..., "dtype", "VLLM_CPU_*": the values, "explicit": keys the config
    set, "why": {key: reason}, "replicas_on_node", "slot"}``.

    * ``dtype``: bfloat16 where the CPU computes it natively (:func:`native_bf16`), else float32.
    * ``VLLM_CPU_OMP_THREADS_BIND``: the cores of :func:`thread_cores` (this replica's slice of the
      affinity, at most the cgroup quota's share).
    * ``VLLM_CPU_NUM_OF_RESERVED_CPU``: ``0`` (vLLM's default reserves a core: 2-3x slower on 2 cores).
    * ``VLLM_CPU_KVCACHE_SPACE``: :func:`kv_cache_gib`.

    Keys present in ``engine_args`` / ``env`` are kept as they are."""
    args, env_out = dict(engine_args), {k: str(v) for k, v in env.items()}
    explicit = sorted(k for k in ("dtype",) if k in engine_args) + sorted(
        k for k in (OMP_BIND, RESERVED, KV_SPACE) if k in env)
    why: dict[str, str] = {k: "set in the config" for k in explicit}
    if "dtype" not in args:
        args["dtype"], why["dtype"] = derived_dtype(facts)
    if OMP_BIND not in env_out:
        cores, why[OMP_BIND] = thread_cores(facts, replicas_on_node, slot)
        env_out[OMP_BIND] = core_list(cores)
    if RESERVED not in env_out:
        env_out[RESERVED], why[RESERVED] = "0", "every bound core computes (vLLM's default reserves one)"
    if KV_SPACE not in env_out:
        gib, why[KV_SPACE] = kv_cache_gib(args, str(args["dtype"]), facts, model_path, replicas_on_node)
        env_out[KV_SPACE] = str(gib)
    chosen: dict[str, Any] = {"machine": facts.summary(), "dtype": str(args["dtype"]),
                              **{k: env_out[k] for k in (OMP_BIND, RESERVED, KV_SPACE)},
                              "explicit": explicit, "why": why, "replicas_on_node": replicas_on_node, "slot": slot}
    return args, env_out, chosen


def describe(chosen: Mapping[str, Any]) -> list[str]:
    """``chosen`` (from :func:`resolve_cpu_engine`) as lines: each setting, its value and why."""
    why = chosen.get("why", {})
    return [f"{k}={chosen[k]}  ({why.get(k, '')})" for k in ("dtype", OMP_BIND, RESERVED, KV_SPACE) if k in chosen]
