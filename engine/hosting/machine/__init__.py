"""Engine settings from the machine a CPU replica runs on.

A CPU vLLM server's speed depends on settings that only the machine can decide: the dtype
(bfloat16 is fast only where the CPU computes it natively: AVX512_BF16 or AMX on x86, the BF16
extension on Arm; an AVX2-only AMD EPYC prefilled at ~20 tokens/s in bfloat16 against ~95 in
float32), the cores its OpenMP threads are bound to (the process's CPU affinity, limited by a
cgroup CPU quota, split between the replicas on one node) and the KV cache size (what the model
and the batch need, capped by the memory available, cgroup limit included).

:func:`detect` reads the facts (:class:`MachineFacts`) and :func:`resolve_cpu_engine` turns a
model's engine arguments and environment into the ones its server runs with, plus a record of
what was detected and decided, and why. Values set explicitly in the config always win: a key
present in ``engine_args`` / ``env`` is explicit, an absent one is derived here.

Plain Python (no Ray): every reader takes the file text or a root folder, so tests feed recorded
``/proc`` and cgroup files. ``engine/hosting/vllm_server.py: engine_settings`` applies it on the
replica's node; ``dateline doctor`` prints it.

Two parts: ``facts`` (:class:`MachineFacts`, the ``/proc`` and cgroup readers, :func:`detect`) and
``cpu_engine`` (what is decided from the facts). ``engine.hosting.machine`` re-exports the public
names of both, the import path of ``vllm_server``, ``replica_actor``, ``dateline doctor`` and the tests.
"""

from engine.hosting.machine.cpu_engine import (
    DTYPE_BYTES,
    KV_MEMORY_SHARE,
    KV_SPACE,
    OMP_BIND,
    RESERVED,
    VLLM_CPU_MAX_NUM_SEQS,
    derived_dtype,
    describe,
    identity_dtype,
    kv_bytes_per_token,
    kv_cache_gib,
    model_config,
    native_bf16,
    resolve_cpu_engine,
    thread_cores,
)
from engine.hosting.machine.facts import (
    ARM_ARCHS,
    ARM_FEATURES,
    UNLIMITED,
    X86_FLAGS,
    GiB,
    MachineFacts,
    cgroup_cpu_quota,
    cgroup_dirs,
    cgroup_memory_free,
    core_list,
    cpu_flags,
    cpu_model_name,
    detect,
    meminfo_available,
    parse_cpu_max,
)

__all__ = [
    "ARM_ARCHS",
    "ARM_FEATURES",
    "DTYPE_BYTES",
    "GiB",
    "KV_MEMORY_SHARE",
    "KV_SPACE",
    "MachineFacts",
    "OMP_BIND",
    "RESERVED",
    "UNLIMITED",
    "VLLM_CPU_MAX_NUM_SEQS",
    "X86_FLAGS",
    "cgroup_cpu_quota",
    "cgroup_dirs",
    "cgroup_memory_free",
    "core_list",
    "cpu_flags",
    "cpu_model_name",
    "derived_dtype",
    "describe",
    "detect",
    "identity_dtype",
    "kv_bytes_per_token",
    "kv_cache_gib",
    "meminfo_available",
    "model_config",
    "native_bf16",
    "parse_cpu_max",
    "resolve_cpu_engine",
    "thread_cores",
]
