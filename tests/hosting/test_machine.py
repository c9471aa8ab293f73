"""Engine settings from the machine a CPU replica runs on (engine/hosting/machine.py): recorded
/proc/cpuinfo lines of six CPUs, cgroup v1 and v2 files in temporary folders, affinity slices, the
KV cache size; the dtype in the episode identity and a replica's refusal of another one. The
`real` tests read this machine's own cgroup v1 and run `dateline doctor` on the real model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from engine.config import ModelConfig
from engine.errors import ConfigError
from engine.hosting.machine import (
    GiB,
    MachineFacts,
    cgroup_cpu_quota,
    cgroup_memory_free,
    core_list,
    detect,
    identity_dtype,
    kv_bytes_per_token,
    kv_cache_gib,
    native_bf16,
    parse_cpu_max,
    resolve_cpu_engine,
    thread_cores,
)
from engine.hosting.vllm_server import (
    PLANNED_DTYPE_ENV,
    engine_settings,
    planned_dtype,
    resolved_engine,
    with_planned_dtype,
)
from ray_jobs.config.compose import compose
from tests.hosting.test_placement import fake_model, local_ray  # noqa: F401 - local_ray is a fixture

REPO = Path(__file__).resolve().parents[2]

# -- recorded CPUs ---------------------------------------------------------------------------

X86_BASE = ("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht "
            "syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl cpuid pni pclmulqdq ssse3 fma cx16 sse4_1 "
            "sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand hypervisor lahf_lm abm fsgsbase bmi1 avx2 smep "
            "bmi2 erms")
CPUS: dict[str, tuple[str, str]] = {
    # AMD EPYC 7B12 (Rome): AVX2, no AVX-512 at all
    "epyc-rome": ("x86_64", "AMD EPYC 7B12", X86_BASE + " mmxext fxsr_opt sse4a misalignsse 3dnowprefetch topoext "
                  "clzero xsaveerptr rdpid sha_ni clwb"),
    # Intel Xeon Platinum 8175M (Skylake-SP): AVX-512F, no VNNI, no BF16
    "skylake-sp": ("x86_64", "Intel(R) Xeon(R) Platinum 8175M CPU @ 2.50GHz",
                   X86_BASE + " avx512f avx512dq rdseed adx smap clflushopt clwb avx512cd avx512bw avx512vl"),
    # Intel Xeon Platinum 8380H (Cooper Lake): AVX512_BF16
    "cooper-lake": ("x86_64", "Intel(R) Xeon(R) Platinum 8380H CPU @ 2.90GHz",
                    X86_BASE + " avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni avx512_bf16"),
    # Intel Xeon Platinum 8488C (Sapphire Rapids): AMX
    "sapphire-rapids": ("x86_64", "Intel(R) Xeon(R) Platinum 8488C",
                        X86_BASE + " avx512f avx512dq avx512cd avx512bw avx512vl avx_vnni avx512_bf16 avx512vbmi "
                        "avx512_vnni avx512_bitalg avx512_vpopcntdq amx_bf16 avx512_fp16 amx_tile amx_int8"),
    # AWS Graviton3 (Neoverse V1: CPU part 0xd40): BF16, SVE
    "graviton3": ("aarch64", "0xd40", "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm "
                  "jscvt fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs paca "
                  "pacg dcpodp svei8mm svebf16 i8mm bf16 dgh rng"),
    # AWS Graviton2 (Neoverse N1: CPU part 0xd0c): no BF16
    "graviton2": ("aarch64", "0xd0c", "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm "
                  "lrcpc dcpop asimddp ssbs"),
}
EXPECTED_DTYPE = {"epyc-rome": "float32", "skylake-sp": "float32", "cooper-lake": "bfloat16",
                  "sapphire-rapids": "bfloat16", "graviton3": "bfloat16", "graviton2": "float32"}


def cpuinfo(name: str, processors: int = 4) -> str:
    arch, model, flags = CPUS[name]
    out = []
    for i in range(processors):
        if arch == "x86_64":
            out.append(f"processor\t: {i}\nvendor_id\t: x\nmodel name\t: {model}\nflags\t\t: {flags}\n")
        else:
            out.append(f"processor\t: {i}\nBogoMIPS\t: 2100.00\nFeatures\t: {flags}\nCPU implementer\t: 0x41\n"
                       f"CPU part\t: {model}\n")
    return "\n".join(out)


def machine(tmp_path: Path, name: str, processors: int = 4, mem_kb: int = 16 * 1024 * 1024) -> Path:
    """A root folder with the recorded CPU's /proc files (no cgroup files: no limits)."""
    root = tmp_path / name
    (root / "proc/self").mkdir(parents=True, exist_ok=True)
    (root / "proc/cpuinfo").write_text(cpuinfo(name, processors))
    (root / "proc/meminfo").write_text(f"MemTotal:       {2 * mem_kb} kB\nMemFree:        1000 kB\n"
                                       f"MemAvailable:   {mem_kb} kB\n")
    return root


def facts_of(name: str, tmp_path: Path, **kw: Any) -> MachineFacts:
    return detect(machine(tmp_path, name), arch=CPUS[name][0], **kw)


QWEN_05B = {"num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2, "hidden_size": 896,
            "max_position_embeddings": 32768, "torch_dtype": "bfloat16"}


def weights(tmp_path: Path, cfg: dict[str, Any] = QWEN_05B) -> Path:
    d = tmp_path / "weights"
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


# -- dtype and threads per CPU -----------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(CPUS))
def test_each_recorded_cpu_chooses_its_dtype_and_binds_every_core(tmp_path, name):
    facts = facts_of(name, tmp_path)
    assert facts.arch == CPUS[name][0] and facts.affinity == (0, 1, 2, 3) and facts.usable_cpus == 4
    assert native_bf16(facts) == (EXPECTED_DTYPE[name] == "bfloat16")
    args, env, chosen = resolve_cpu_engine({"max_model_len": 8192, "max_num_seqs": 8}, {}, facts,
                                           model_path=weights(tmp_path))
    assert args["dtype"] == chosen["dtype"] == EXPECTED_DTYPE[name]
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0-3" and env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    # 8 x 8192 tokens x 12,288 bytes (bfloat16) = 0.75 GiB -> 1; float32 doubles it: 1.5 GiB -> 2
    assert env["VLLM_CPU_KVCACHE_SPACE"] == ("1" if EXPECTED_DTYPE[name] == "bfloat16" else "2")
    assert chosen["explicit"] == [] and set(chosen["why"]) == {"dtype", "VLLM_CPU_OMP_THREADS_BIND",
                                                                "VLLM_CPU_NUM_OF_RESERVED_CPU", "VLLM_CPU_KVCACHE_SPACE"}
    assert json.loads(json.dumps(chosen)) == chosen                 # goes into the run's records as is


def test_flags_kept_are_those_that_matter(tmp_path):
    assert facts_of("sapphire-rapids", tmp_path).flags == {"avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16",
                                                           "amx_tile"}
    assert facts_of("epyc-rome", tmp_path).flags == {"avx2"}
    assert facts_of("epyc-rome", tmp_path).cpu_model == "AMD EPYC 7B12"
    assert facts_of("graviton3", tmp_path).flags == {"asimd", "bf16", "i8mm", "sve", "svebf16"}
    assert facts_of("graviton2", tmp_path).flags == {"asimd"}
    assert facts_of("graviton2", tmp_path).cpu_model == "implementer 0x41 part 0xd0c"
    # the why names the flags, or their absence
    assert "avx512_bf16" in resolve_cpu_engine({}, {}, facts_of("cooper-lake", tmp_path))[2]["why"]["dtype"]
    assert "no avx512_bf16 or amx_bf16" in resolve_cpu_engine({}, {}, facts_of("skylake-sp", tmp_path))[2]["why"]["dtype"]
    assert "no bf16 feature" in resolve_cpu_engine({}, {}, facts_of("graviton2", tmp_path))[2]["why"]["dtype"]


def test_explicit_values_always_win(tmp_path):
    facts = facts_of("epyc-rome", tmp_path)
    env = {"VLLM_CPU_OMP_THREADS_BIND": "2", "VLLM_CPU_NUM_OF_RESERVED_CPU": "1", "VLLM_CPU_KVCACHE_SPACE": "7"}
    args, out, chosen = resolve_cpu_engine({"dtype": "bfloat16", "max_model_len": 512}, env, facts)
    assert args == {"dtype": "bfloat16", "max_model_len": 512} and out == env
    assert chosen["explicit"] == ["dtype", "VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_NUM_OF_RESERVED_CPU",
                                  "VLLM_CPU_OMP_THREADS_BIND"]
    assert all(why == "set in the config" for why in chosen["why"].values())
    assert identity_dtype({"dtype": "bfloat16"}, facts) == "bfloat16" and identity_dtype({}, facts) == "float32"
    # other environment passes through
    assert resolve_cpu_engine({}, {"PYTHONPATH": "/x"}, facts)[1]["PYTHONPATH"] == "/x"


# -- cgroups -------------------------------------------------------------------------------------

def cgroup_v1(root: Path, quota: int, period: int = 100000, parent_quota: int = -1,
              mountinfo: bool = True) -> None:
    """A cgroup v1 cpu hierarchy (mounted as cpu,cpuacct) with this process in /batch/job."""
    mount = root / "sys/fs/cgroup/cpu,cpuacct"
    job = mount / "batch/job"
    job.mkdir(parents=True)
    for d, q in ((mount, -1), (mount / "batch", parent_quota), (job, quota)):
        (d / "cpu.cfs_quota_us").write_text(f"{q}\n")
        (d / "cpu.cfs_period_us").write_text(f"{period}\n")
    (root / "proc/self/cgroup").write_text("12:memory:/batch/job\n4:cpu,cpuacct:/batch/job\n1:name=systemd:/\n")
    if mountinfo:
        (root / "proc/self/mountinfo").write_text(
            "31 23 0:28 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n"
            "35 31 0:32 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:13 - cgroup cgroup rw,cpu,cpuacct\n")


def cgroup_v2(root: Path, cpu_max: str, memory: tuple[str, str] | None = None) -> None:
    """A cgroup v2 unified hierarchy with this process in /user.slice/job.scope."""
    mount = root / "sys/fs/cgroup"
    job = mount / "user.slice/job.scope"
    job.mkdir(parents=True)
    (mount / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (mount / "user.slice/cpu.max").write_text("max 100000\n")
    (job / "cpu.max").write_text(cpu_max + "\n")
    if memory:
        (job / "memory.max").write_text(memory[0] + "\n")
        (job / "memory.current").write_text(memory[1] + "\n")
    (root / "proc/self/cgroup").write_text("0::/user.slice/job.scope\n")
    (root / "proc/self/mountinfo").write_text(
        "25 30 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n")


def test_cgroup_v1_quota_limits_threads(tmp_path):
    root = machine(tmp_path, "sapphire-rapids", processors=8)
    cgroup_v1(root, quota=150000)
    assert cgroup_cpu_quota(root)[0] == 1.5
    facts = detect(root, arch="x86_64")
    assert facts.usable_cpus == 1 and "cpu.cfs_quota_us 150000" in facts.cpu_quota_source
    args, env, chosen = resolve_cpu_engine({}, {}, facts)
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0"                # floor(1.5), at least 1
    assert "quota 1.5 CPUs" in chosen["why"]["VLLM_CPU_OMP_THREADS_BIND"]


def test_cgroup_v1_quota_of_a_parent_applies_and_no_mountinfo_falls_back(tmp_path):
    root = machine(tmp_path, "epyc-rome", processors=8)
    cgroup_v1(root, quota=-1, parent_quota=300000, mountinfo=False)
    quota, source = cgroup_cpu_quota(root)
    assert quota == 3.0 and "/sys/fs/cgroup/cpu,cpuacct/batch:" in source
    assert resolve_cpu_engine({}, {}, detect(root, arch="x86_64"))[1]["VLLM_CPU_OMP_THREADS_BIND"] == "0-2"


def test_cgroup_v2_quota_limits_threads_and_max_is_none(tmp_path):
    root = machine(tmp_path, "graviton3", processors=8)
    cgroup_v2(root, "200000 100000")
    facts = detect(root, arch="aarch64")
    assert facts.cpu_quota == 2.0 and "cpu.max '200000 100000'" in facts.cpu_quota_source
    assert resolve_cpu_engine({}, {}, facts)[1]["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"
    assert parse_cpu_max("max 100000") is None and parse_cpu_max("50000 100000") == 0.5
    other = machine(tmp_path / "b", "graviton3", processors=8)
    cgroup_v2(other, "max 100000")
    assert cgroup_cpu_quota(other) == (None, "") and detect(other, arch="aarch64").usable_cpus == 8


def test_cgroup_memory_limits_count_and_unlimited_ones_do_not(tmp_path):
    root = machine(tmp_path, "sapphire-rapids", mem_kb=64 * 1024 * 1024)
    cgroup_v2(root, "max 100000", memory=(str(6 * GiB), str(2 * GiB)))
    facts = detect(root, arch="x86_64")
    assert facts.mem_available == 64 * GiB and facts.cgroup_mem_free == 4 * GiB and facts.memory_available == 4 * GiB
    assert "memory.max" in facts.cgroup_mem_source
    v1 = machine(tmp_path / "v1", "epyc-rome", mem_kb=8 * 1024 * 1024)
    cgroup_v1(v1, quota=-1)
    mem = v1 / "sys/fs/cgroup/memory"
    (mem / "batch/job").mkdir(parents=True)
    (mem / "batch/job/memory.limit_in_bytes").write_text("9223372036854771712\n")       # v1's "no limit"
    (mem / "batch/job/memory.usage_in_bytes").write_text(str(GiB))
    with (v1 / "proc/self/mountinfo").open("a") as f:
        f.write("36 31 0:33 / /sys/fs/cgroup/memory rw,nosuid shared:14 - cgroup cgroup rw,memory\n")
    assert cgroup_memory_free(v1) == (None, "")
    (mem / "batch/memory.limit_in_bytes").write_text(str(3 * GiB))
    (mem / "batch/memory.usage_in_bytes").write_text(str(GiB))
    assert cgroup_memory_free(v1)[0] == 2 * GiB and detect(v1, arch="x86_64").memory_available == 2 * GiB


# -- replicas sharing a node -------------------------------------------------------------------

def test_two_replicas_on_a_node_get_disjoint_slices(tmp_path):
    facts = facts_of("sapphire-rapids", tmp_path, affinity=range(8))
    binds = [resolve_cpu_engine({}, {}, facts, replicas_on_node=2, slot=s)[1]["VLLM_CPU_OMP_THREADS_BIND"]
             for s in (0, 1)]
    assert binds == ["0-3", "4-7"]
    # a quota of 4 CPUs shared by the two: 2 threads each, still disjoint
    quota = MachineFacts("x86_64", affinity=tuple(range(8)), cpu_quota=4.0, mem_available=16 * GiB)
    assert [core_list(thread_cores(quota, 2, s)[0]) for s in (0, 1)] == ["0-1", "4-5"]
    # uneven and scattered affinities; more replicas than cores share them
    odd = MachineFacts("x86_64", affinity=(0, 2, 5), mem_available=16 * GiB)
    assert core_list(odd.affinity) == "0,2,5" and [thread_cores(odd, 2, s)[0] for s in (0, 1)] == [[0], [2, 5]]
    assert [thread_cores(MachineFacts("x86_64", affinity=(0, 1)), 3, s)[0] for s in range(3)] == [[0], [1], [0]]
    with pytest.raises(ValueError, match="slot 2 of 2"):
        thread_cores(odd, 2, 2)
    # each replica's KV cache has its share of the memory cap
    small = MachineFacts("x86_64", affinity=(0, 1), mem_available=10 * GiB)
    assert kv_cache_gib({"max_num_seqs": 256, "max_model_len": 32768}, "bfloat16", small, weights(tmp_path),
                        replicas_on_node=2)[0] == 1          # 10 GiB x 1/4 / 2 = 1.25 -> 1


# -- the KV cache ----------------------------------------------------------------------------------

def test_kv_cache_from_the_model_and_the_batch_capped_by_memory(tmp_path):
    w = weights(tmp_path)
    assert kv_bytes_per_token(QWEN_05B, "bfloat16") == 2 * 24 * 2 * 64 * 2
    assert kv_bytes_per_token(QWEN_05B, "float32") == 2 * 24 * 2 * 64 * 4
    assert kv_bytes_per_token(QWEN_05B, "auto") == 2 * 24 * 2 * 64 * 2          # the checkpoint's dtype
    assert kv_bytes_per_token(QWEN_05B, "bfloat16", "fp8_e4m3") == 2 * 24 * 2 * 64
    no_kv_heads = {k: v for k, v in QWEN_05B.items() if k != "num_key_value_heads"} | {"head_dim": 128}
    assert kv_bytes_per_token(no_kv_heads, "bfloat16") == 2 * 24 * 14 * 128 * 2
    assert kv_bytes_per_token({"hidden_size": 8}, "bfloat16") is None
    big = MachineFacts("x86_64", affinity=(0, 1), mem_available=64 * GiB)
    # vLLM's CPU defaults (128 sequences x the model's 32,768 tokens = 48 GiB): capped at 64 / 4
    gib, why = kv_cache_gib({}, "bfloat16", big, w)
    assert gib == 16 and "128 seqs" in why and "32768 tokens" in why and "(capped)" in why
    assert kv_cache_gib({"max_num_seqs": 16, "max_model_len": 16384}, "bfloat16", big, w)[0] == 3   # 2.25 GiB
    # a multimodal config keeps the text model's numbers under text_config
    mm = weights(tmp_path / "mm", {"architectures": ["X"], "text_config": QWEN_05B})
    assert kv_cache_gib({"max_num_seqs": 8, "max_model_len": 8192}, "bfloat16", big, mm)[0] == 1
    # no config.json: the cap
    assert kv_cache_gib({}, "bfloat16", big, tmp_path / "nothing")[0] == 16


def test_kv_cache_that_does_not_fit_is_a_clear_error(tmp_path):
    tiny = MachineFacts("x86_64", affinity=(0, 1), mem_available=3 * GiB)
    with pytest.raises(ValueError) as e:
        resolve_cpu_engine({"max_num_seqs": 8, "max_model_len": 8192}, {}, tiny, model_path=weights(tmp_path))
    msg = str(e.value)
    assert "VLLM_CPU_KVCACHE_SPACE" in msg and "0.75 GiB" in msg and "3.00 GiB" in msg
    assert "model.env.VLLM_CPU_KVCACHE_SPACE" in msg and "1 GiB minimum" in msg
    # explicit: no derivation, no error
    assert resolve_cpu_engine({}, {"VLLM_CPU_KVCACHE_SPACE": "1"}, tiny)[1]["VLLM_CPU_KVCACHE_SPACE"] == "1"
    # one sequence longer than the cache allows names max_model_len
    huge = {**QWEN_05B, "num_hidden_layers": 2400}
    with pytest.raises(ValueError, match="max_model_len 32768 tokens needs"):
        kv_cache_gib({"max_num_seqs": 1}, "bfloat16", MachineFacts("x86_64", mem_available=8 * GiB),
                     weights(tmp_path / "huge", huge))


# -- what a replica runs with; identity; refusal -------------------------------------------------

def amx(tmp_path: Path) -> MachineFacts:
    return facts_of("sapphire-rapids", tmp_path / "amx")


def avx2(tmp_path: Path) -> MachineFacts:
    return facts_of("epyc-rome", tmp_path / "avx2")


def test_engine_settings_resolve_cpu_models_only(tmp_path):
    cpu = compose().model
    args, env = engine_settings(cpu, avx2(tmp_path))
    assert args["dtype"] == "float32" and env["VLLM_CPU_OMP_THREADS_BIND"] == "0-3"
    assert {k: v for k, v in args.items() if k != "dtype"} == cpu.engine_args
    gpu = compose(["model=gpu_8b"]).model
    assert engine_settings(gpu, avx2(tmp_path)) == (gpu.engine_args, gpu.env)        # GPU models: untouched
    assert planned_dtype(gpu, avx2(tmp_path)) is None and with_planned_dtype(gpu, avx2(tmp_path)) is gpu
    ext = compose(["model=openai_compatible", "model.base_url=http://127.0.0.1:1/v1", "model.api_key_env="]).model
    assert planned_dtype(ext) is None and resolved_engine(ext)[2] == {}
    # a fake server module is a CPU vLLM model too (tests.fake_vllm_server ignores the flags)
    fake = ModelConfig(path=str(tmp_path), server_module="tests.fake_vllm_server", num_cpus=1)
    assert engine_settings(fake, amx(tmp_path))[0]["dtype"] == "bfloat16"


def test_reproducible_mode_applies_on_top(tmp_path):
    m = compose(["model.reproducible=true"]).model
    args, env, chosen = resolved_engine(m, avx2(tmp_path))
    assert args["max_num_seqs"] == 1 and args["no_enable_prefix_caching"] is True and args["seed"] == 0
    assert args["dtype"] == "float32" == chosen["dtype"] and env["VLLM_CPU_KVCACHE_SPACE"]


def test_episode_identity_records_the_resolved_dtype(tmp_path, monkeypatch):
    """On an AVX512_BF16/AMX machine the default config's identity is byte for byte what it was when
    local_cpu.yaml said dtype: bfloat16; on an AVX2 one it is another configuration."""
    import engine.hosting.vllm_server as vs
    from engine.benchmarks import get_benchmark
    from engine.identity import engine_identity

    bench = get_benchmark("newsagent")
    cfg = compose()
    assert "dtype" not in cfg.model.engine_args
    pinned = compose(["++model.engine_args.dtype=bfloat16"])
    monkeypatch.setattr(vs, "detect", lambda: amx(tmp_path))
    on_amx = engine_identity(cfg, bench, True)
    assert on_amx == engine_identity(pinned, bench, True) and on_amx["engine_args"]["dtype"] == "bfloat16"
    assert "dtype" not in cfg.model.engine_args                     # the config itself is not modified
    monkeypatch.setattr(vs, "detect", lambda: avx2(tmp_path))
    on_avx2 = engine_identity(cfg, bench, True)
    assert on_avx2["engine_args"]["dtype"] == "float32" and on_avx2 != on_amx
    assert engine_identity(pinned, bench, True) == on_amx           # explicit: the same everywhere
    gpu = compose(["model=gpu_8b"])                                  # GPU models: the config's arguments
    assert engine_identity(gpu, bench, True)["engine_args"] == dict(gpu.model.engine_args)


def test_a_replica_refuses_a_dtype_other_than_the_planned_one(tmp_path):
    from ray_jobs.cluster.session import Session

    m = compose().model
    planned = with_planned_dtype(m, amx(tmp_path))              # what the driver hands the pool
    assert planned.env[PLANNED_DTYPE_ENV] == "bfloat16" and PLANNED_DTYPE_ENV not in m.env
    assert Session.key(m) != Session.key(planned)               # the pool is keyed by m, not by this copy
    # the same kind of node: runs, and the marker never reaches the server
    args, env, _ = resolved_engine(planned, amx(tmp_path))
    assert args["dtype"] == "bfloat16" and PLANNED_DTYPE_ENV not in env
    # an AVX2 node refuses, naming its flags, both dtypes and the setting
    with pytest.raises(ConfigError) as e:
        resolved_engine(planned, avx2(tmp_path))
    msg = str(e.value)
    assert "flags: avx2" in msg and "AMD EPYC 7B12" in msg and "would run it in float32" in msg
    assert "recorded bfloat16" in msg and "set model.engine_args.dtype explicitly" in msg
    # an explicit dtype is the user's: no marker, no refusal
    explicit = compose(["++model.engine_args.dtype=bfloat16"]).model
    assert with_planned_dtype(explicit, amx(tmp_path)) is explicit
    assert resolved_engine(explicit, avx2(tmp_path))[0]["dtype"] == "bfloat16"


# -- dateline doctor without the server ------------------------------------------------------------

def test_doctor_without_probe_prints_the_machine_and_the_choice(capsys):
    from ray_jobs.cli.main import main

    assert main(["doctor", "--no-probe", "model.engine_args.max_num_seqs=4"]) == 0
    out = capsys.readouterr().out
    facts = detect()
    assert f"usable cores    {facts.usable_cpus}" in out and "dtype=" in out and "VLLM_CPU_KVCACHE_SPACE=" in out
    assert all(f in out for f in sorted(facts.flags)) and "probe" not in out
    assert main(["doctor", "--no-probe", "model.path=/no/such/model"]) == 2
    assert "model missing: /no/such/model" in capsys.readouterr().err


# -- this machine ------------------------------------------------------------------------------------

CHILD = """
import json, sys
sys.path.insert(0, {repo!r})
from engine.hosting.machine import detect, resolve_cpu_engine
f = detect()
print(json.dumps({{"usable": f.usable_cpus, "quota": f.cpu_quota, "source": f.cpu_quota_source,
                  "bind": resolve_cpu_engine({{}}, {{}}, f)[1]["VLLM_CPU_OMP_THREADS_BIND"]}}))
"""


@pytest.mark.real(model=False)
def test_this_machines_cgroup_v1_quota_is_read(tmp_path):
    """A child cgroup under this machine's cgroup v1 cpu hierarchy with a quota of 1 CPU; a process
    moved into it detects 1 usable core. Fails (never skips) when that cannot be done here."""
    base = Path("/sys/fs/cgroup/cpu")
    assert (base / "cpu.cfs_quota_us").exists(), f"no cgroup v1 cpu controller at {base}"
    group = base / f"dateline-test-{os.getpid()}"
    group.mkdir()
    try:
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text("100000")

        def enter() -> None:                # in the child, before it runs Python
            (group / "cgroup.procs").write_text(str(os.getpid()))

        out = subprocess.run([sys.executable, "-c", CHILD.format(repo=str(REPO))], preexec_fn=enter,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        got = json.loads(out.stdout)
        assert got["quota"] == 1.0 and got["usable"] == 1 and len(got["bind"].split(",")) == 1, got
        assert f"/sys/fs/cgroup/cpu/{group.name}" in got["source"]
    finally:
        group.rmdir()


@pytest.mark.real
@pytest.mark.timeout(900)
def test_doctor_probes_the_real_model():
    out = subprocess.run([str(Path(sys.executable).parent / "dateline"), "doctor"], capture_output=True, text=True,
                         timeout=900, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    facts = detect()
    assert f"CPU flags       {', '.join(sorted(facts.flags))}" in out.stdout, out.stdout
    line = next(x for x in out.stdout.splitlines() if "prompt (prefill)" in x)
    assert float(line.split()[2]) > 0, line
    assert "decode" in out.stdout and "command 1:" in out.stdout


# -- replicas under Ray (fake server) ----------------------------------------------------------------

@pytest.mark.ray
@pytest.mark.timeout(300)
def test_replicas_on_one_node_bind_disjoint_cores_and_refuse_another_dtype(local_ray, tmp_path):
    from engine.hosting.replica import ModelPool

    local_ray(num_cpus=2)
    here = detect()
    pool = ModelPool(with_planned_dtype(fake_model(tmp_path, replicas=2, min_replicas=None)), tmp_path / "logs")
    try:
        pool.start()
        engines = sorted((s["engine"] for s in pool.startup), key=lambda e: e["slot"])
        assert [e["replicas_on_node"] for e in engines] == [2, 2] and [e["slot"] for e in engines] == [0, 1]
        assert [e["VLLM_CPU_OMP_THREADS_BIND"] for e in engines] == [
            core_list(thread_cores(here, 2, s)[0]) for s in (0, 1)]
        assert {e["dtype"] for e in engines} == {identity_dtype({}, here)}
    finally:
        pool.stop()
    # a plan recorded on another kind of CPU: every replica refuses, saying why
    other = "float32" if native_bf16(here) else "bfloat16"
    cfg = fake_model(tmp_path, name="elsewhere", max_start_failures=1)
    bad = ModelPool(replace(cfg, env={**cfg.env, PLANNED_DTYPE_ENV: other}), tmp_path / "logs")
    try:
        with pytest.raises(Exception) as e:
            bad.start()
        msg = str(e.value)
        assert f"recorded {other}" in msg and "set model.engine_args.dtype explicitly" in msg, msg
        assert f"would run it in {identity_dtype({}, here)}" in msg
    finally:
        bad.stop()
