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
"""

from __future__ import annotations

import json
import math
import os
import platform
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GiB = 1 << 30

# The x86 flags (/proc/cpuinfo "flags") and Arm features ("Features") that decide how fast vLLM's
# CPU kernels run: bfloat16 dot products are native with AVX512_BF16 or AMX on x86, with BF16 on Arm.
X86_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile")
ARM_FEATURES = ("asimd", "bf16", "i8mm", "sve", "sve2", "svebf16")
ARM_ARCHS = ("aarch64", "arm64")

# cgroup v1 says "no limit" with LONG_MAX rounded down to the page size (9223372036854771712);
# a value this large is no limit.
UNLIMITED = 1 << 60

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


@dataclass(frozen=True)
class MachineFacts:
    """What :func:`resolve_cpu_engine` decides from. Sizes in bytes; ``None``: not known / no limit."""

    arch: str                                   # platform.machine(): x86_64, aarch64...
    flags: frozenset[str] = frozenset()         # those of X86_FLAGS / ARM_FEATURES the CPU has
    cpu_model: str = ""
    affinity: tuple[int, ...] = (0,)            # the cores this process may run on (sched_getaffinity)
    cpu_quota: float | None = None              # the cgroup CPU quota in CPUs (None: no quota)
    cpu_quota_source: str = ""                  # the file(s) that said so
    mem_available: int | None = None            # /proc/meminfo MemAvailable
    cgroup_mem_free: int | None = None          # cgroup memory limit minus usage (None: no limit)
    cgroup_mem_source: str = ""

    @property
    def usable_cpus(self) -> int:
        """Cores a process here can keep busy: its affinity, at most the quota (floor, at least 1)."""
        n = len(self.affinity) or 1
        if self.cpu_quota is not None:
            n = min(n, max(1, math.floor(self.cpu_quota + 1e-9)))
        return n

    @property
    def memory_available(self) -> int | None:
        """The smaller of MemAvailable and the cgroup's free memory (None when neither is known)."""
        known = [x for x in (self.mem_available, self.cgroup_mem_free) if x is not None]
        return min(known) if known else None

    def summary(self) -> dict[str, Any]:
        """JSON-able, for logs, the run's records and ``dateline doctor``."""
        mem = self.memory_available
        return {"arch": self.arch, "cpu": self.cpu_model, "flags": sorted(self.flags),
                "affinity": core_list(self.affinity), "cpu_quota": self.cpu_quota,
                "cpu_quota_source": self.cpu_quota_source, "usable_cpus": self.usable_cpus,
                "mem_available_gib": _gib(self.mem_available), "cgroup_mem_free_gib": _gib(self.cgroup_mem_free),
                "cgroup_mem_source": self.cgroup_mem_source,
                "memory_available_gib": _gib(mem)}


def _gib(n: int | None) -> float | None:
    return None if n is None else round(n / GiB, 2)


# -- readers ---------------------------------------------------------------------------------

def cpu_flags(cpuinfo: str, arch: str) -> frozenset[str]:
    """The flags of :data:`X86_FLAGS` (x86: the first ``flags`` line) or :data:`ARM_FEATURES`
    (aarch64: the first ``Features`` line) that ``cpuinfo`` (/proc/cpuinfo's text) lists."""
    arm = arch.lower() in ARM_ARCHS
    key, wanted = ("features", ARM_FEATURES) if arm else ("flags", X86_FLAGS)
    for line in cpuinfo.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip().lower() == key:
            return frozenset(value.split()) & frozenset(wanted)
    return frozenset()


def cpu_model_name(cpuinfo: str) -> str:
    """x86 ``model name``; on Arm, which has none, ``CPU implementer``/``CPU part`` (e.g. 0x41/0xd40
    is a Neoverse V1)."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        name, sep, value = line.partition(":")
        if sep:
            fields.setdefault(name.strip().lower(), value.strip())
    if fields.get("model name"):
        return fields["model name"]
    if "cpu part" in fields:
        return f"implementer {fields.get('cpu implementer', '?')} part {fields['cpu part']}"
    return ""


def meminfo_available(meminfo: str) -> int | None:
    """``MemAvailable`` of /proc/meminfo in bytes (``MemFree`` on kernels without it)."""
    values: dict[str, int] = {}
    for line in meminfo.splitlines():
        name, sep, value = line.partition(":")
        parts = value.split()
        if sep and parts and parts[0].isdigit():
            values[name.strip()] = int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    return values.get("MemAvailable", values.get("MemFree"))


def parse_cpu_max(text: str) -> float | None:
    """cgroup v2 ``cpu.max`` (``"max 100000"``: no quota; ``"200000 100000"``: 2 CPUs)."""
    parts = text.split()
    if not parts or parts[0] == "max":
        return None
    period = float(parts[1]) if len(parts) > 1 else 100000.0
    return float(parts[0]) / period if period > 0 else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _int(text: str | None) -> int | None:
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


@dataclass(frozen=True)
class _Mount:
    root: str           # the mount's root inside the cgroup hierarchy
    point: Path         # where it is mounted (under the reader's root)
    version: int        # 1 or 2
    controllers: frozenset[str]


def _mounts(root: Path) -> list[_Mount]:
    """cgroup mounts from /proc/self/mountinfo; the usual places when it cannot be read."""
    text = _read(root / "proc/self/mountinfo")
    found: list[_Mount] = []
    for line in (text or "").splitlines():
        parts = line.split()
        if "-" not in parts:
            continue
        sep = parts.index("-")
        fstype = parts[sep + 1] if len(parts) > sep + 1 else ""
        if fstype not in ("cgroup", "cgroup2") or len(parts) < 5:
            continue
        supers = frozenset(parts[sep + 3].split(",")) if len(parts) > sep + 3 else frozenset()
        found.append(_Mount(parts[3], root / parts[4].lstrip("/"), 2 if fstype == "cgroup2" else 1, supers))
    if text is not None:
        return found
    fs = root / "sys/fs/cgroup"
    guesses = [_Mount("/", fs / "cpu,cpuacct", 1, frozenset({"cpu", "cpuacct"})),
               _Mount("/", fs / "cpu", 1, frozenset({"cpu"})),
               _Mount("/", fs / "memory", 1, frozenset({"memory"})),
               _Mount("/", fs / "unified", 2, frozenset()),
               _Mount("/", fs, 2, frozenset())]
    return [m for m in guesses if m.point.is_dir() and (m.version == 1 or (m.point / "cgroup.controllers").exists())]


def _memberships(root: Path) -> list[tuple[int, frozenset[str], str]]:
    """/proc/self/cgroup: (version, controllers, path) per hierarchy; ``/`` everywhere when unreadable."""
    text = _read(root / "proc/self/cgroup")
    if text is None:
        return [(1, frozenset({"cpu", "cpuacct", "memory"}), "/"), (2, frozenset(), "/")]
    out: list[tuple[int, frozenset[str], str]] = []
    for line in text.splitlines():
        hid, _, rest = line.partition(":")
        ctrls, _, path = rest.partition(":")
        if hid == "0" and not ctrls:
            out.append((2, frozenset(), path or "/"))
        elif ctrls:
            out.append((1, frozenset(ctrls.split(",")), path or "/"))
    return out


def cgroup_dirs(root: Path, controller: str) -> list[tuple[int, list[Path]]]:
    """The folders of this process's cgroups that hold ``controller``'s files: per hierarchy (v1
    with that controller, and v2), ``(version, [its own cgroup, then each ancestor up to the
    mount])``; a parent's limit applies to its children too."""
    out: list[tuple[int, list[Path]]] = []
    members = _memberships(root)
    for mount in _mounts(root):
        if mount.version == 1 and controller not in mount.controllers:
            continue
        paths = [p for v, c, p in members if v == mount.version and (v == 2 or controller in c)]
        path = paths[0] if paths else "/"
        # cgroup paths are relative to the hierarchy's root; the mount may show a sub-tree of it
        rel = path[len(mount.root):] if mount.root != "/" and path.startswith(mount.root) else path
        here = mount.point / rel.lstrip("/")
        if not here.is_dir():
            here = mount.point
        chain = [here]
        while chain[-1] != mount.point and mount.point in chain[-1].parents:
            chain.append(chain[-1].parent)
        out.append((mount.version, chain))
    return out


def _shown(path: Path, root: Path) -> str:
    return "/" + str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def cgroup_cpu_quota(root: Path = Path("/")) -> tuple[float | None, str]:
    """The tightest CPU quota of this process's cgroups, in CPUs (v1 ``cpu.cfs_quota_us`` /
    ``cpu.cfs_period_us``, -1: none; v2 ``cpu.max``), and which file said so; ``(None, "")``
    when there is none."""
    best: tuple[float | None, str] = (None, "")
    for version, chain in cgroup_dirs(root, "cpu"):
        for d in chain:
            quota: float | None = None
            where = ""
            if version == 1:
                q, p = _int(_read(d / "cpu.cfs_quota_us")), _int(_read(d / "cpu.cfs_period_us"))
                if q is not None and p is not None and q > 0 and p > 0:
                    quota = q / p
                    where = f"cgroup v1 {_shown(d, root)}: cpu.cfs_quota_us {q} / cpu.cfs_period_us {p}"
            else:
                text = _read(d / "cpu.max")
                if text is not None:
                    quota = parse_cpu_max(text)
                    where = f"cgroup v2 {_shown(d, root)}: cpu.max {text.strip()!r}"
            if quota is not None and (best[0] is None or quota < best[0]):
                best = (quota, where)
    return best


def cgroup_memory_free(root: Path = Path("/")) -> tuple[int | None, str]:
    """The least memory left under this process's cgroup limits (limit minus usage: v1
    ``memory.limit_in_bytes`` / ``memory.usage_in_bytes``, v2 ``memory.max`` / ``memory.current``),
    and which files said so; ``(None, "")`` when no cgroup limits memory."""
    best: tuple[int | None, str] = (None, "")
    names = {1: ("memory.limit_in_bytes", "memory.usage_in_bytes"), 2: ("memory.max", "memory.current")}
    for version, chain in cgroup_dirs(root, "memory"):
        limit_name, usage_name = names[version]
        for d in chain:
            limit, used = _int(_read(d / limit_name)), _int(_read(d / usage_name)) or 0
            if limit is None or limit >= UNLIMITED:       # "max" (v2) or LONG_MAX (v1): no limit
                continue
            free = max(0, limit - used)
            if best[0] is None or free < best[0]:
                best = (free, f"cgroup v{version} {_shown(d, root)}: {limit_name} {limit} - {usage_name} {used}")
    return best


def detect(root: str | Path = "/", *, arch: str | None = None, affinity: Iterable[int] | None = None) -> MachineFacts:
    """The facts of this machine (``root``: another folder holding ``proc/`` and ``sys/fs/cgroup``,
    for tests; ``affinity`` then defaults to all of its cpuinfo's processors)."""
    root = Path(root)
    arch = arch or platform.machine()
    cpuinfo = _read(root / "proc/cpuinfo") or ""
    if affinity is None:
        if root == Path("/") and hasattr(os, "sched_getaffinity"):
            affinity = os.sched_getaffinity(0)
        else:
            n = sum(1 for line in cpuinfo.splitlines() if line.split(":")[0].strip() == "processor")
            affinity = range(n or os.cpu_count() or 1)
    quota, quota_source = cgroup_cpu_quota(root)
    mem_free, mem_source = cgroup_memory_free(root)
    return MachineFacts(arch=arch, flags=cpu_flags(cpuinfo, arch), cpu_model=cpu_model_name(cpuinfo),
                        affinity=tuple(sorted(affinity)) or (0,), cpu_quota=quota, cpu_quota_source=quota_source,
                        mem_available=meminfo_available(_read(root / "proc/meminfo") or ""),
                        cgroup_mem_free=mem_free, cgroup_mem_source=mem_source)


# -- decisions -------------------------------------------------------------------------------

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


def core_list(cores: Iterable[int]) -> str:
    """Cores as vLLM's ``VLLM_CPU_OMP_THREADS_BIND`` takes them: ``0-3``, ``0,2,5``, ``0-3,8-11``."""
    out: list[str] = []
    run: list[int] = []
    for c in sorted(set(cores)):
        if run and c != run[-1] + 1:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(c)
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


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
    text = _read(Path(model_path) / "config.json")
    if text is None:
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
