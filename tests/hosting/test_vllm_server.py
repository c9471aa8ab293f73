"""How a vLLM replica is launched (command, resources) without starting one; the real start is
covered by tests/e2e/test_real_model.py."""

from __future__ import annotations

import json
import sys

import pytest

from engine.config import ModelConfig, engine_batch
from engine.hosting.replica import ModelPool
from engine.hosting.vllm_server import VLLMServer, engine_settings, server_command
from ray_jobs.config.compose import compose


def test_cpu_command_uses_module_entry_point_and_engine_args():
    cfg = compose().model
    cmd = server_command(cfg.path, cfg.served_name, 8123, "0.0.0.0", cfg.tensor_parallel_size, cfg.engine_args)
    assert cmd[:3] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    assert "--enforce-eager" in cmd and cmd[cmd.index("--port") + 1] == "8123"
    assert cmd[cmd.index("--max-model-len") + 1] == "8192"
    assert "--tensor-parallel-size" not in cmd
    # config groups go as JSON: compact structured output, or small models pad JSON with spaces
    assert json.loads(cmd[cmd.index("--structured-outputs-config") + 1]) == {"backend": "xgrammar", "disable_any_whitespace": True}


def test_gpu_tp_command():
    cfg = compose(["model=gpu_32b_tp2"]).model
    cmd = server_command(cfg.path, cfg.served_name, 1, "0.0.0.0", cfg.tensor_parallel_size, cfg.engine_args)
    assert cmd[cmd.index("--tensor-parallel-size") + 1] == "2"
    assert cmd[cmd.index("--gpu-memory-utilization") + 1] == "0.92"
    assert cmd[cmd.index("--distributed-executor-backend") + 1] == "mp"
    assert "--enforce-eager" not in cmd


def test_false_flags_are_dropped():
    cmd = server_command("/m", "m", 1, engine_args={"enforce_eager": False, "max_num_seqs": 4})
    assert "--enforce-eager" not in cmd and cmd[-2:] == ["--max-num-seqs", "4"]


def test_missing_model_path_fails_loudly_without_downloading(tmp_path):
    with pytest.raises(FileNotFoundError, match="never downloaded"):
        VLLMServer(str(tmp_path / "nope"), "m")


def test_server_env_keeps_vllm_cpu_knobs_and_blocks_hubs(tmp_path):
    s = VLLMServer(str(tmp_path), "m", env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    assert s.env["VLLM_CPU_KVCACHE_SPACE"] == "1" and s.env["HF_HUB_OFFLINE"] == "1"


def test_external_endpoint_skips_hosting():
    pool = ModelPool(ModelConfig(name="x", kind="openai_compatible", base_url="https://h/v1/", api_key_env="K"), "/tmp")
    (ep,) = pool.start()
    assert ep.base_url == "https://h/v1" and ep.api_key_env == "K" and pool.replicas == []


def test_reproducible_mode_on_cpu_runs_one_sequence_without_prefix_cache():
    cfg = compose(["model.reproducible=true"]).model
    args, env = engine_settings(cfg)                 # what a replica of this config runs with
    cmd = server_command(cfg.path, cfg.served_name, 1, engine_args=args)
    assert cmd[cmd.index("--max-num-seqs") + 1] == "1"
    assert "--no-enable-prefix-caching" in cmd and "--enable-prefix-caching" not in cmd
    assert cmd[cmd.index("--seed") + 1] == "0"
    assert "VLLM_BATCH_INVARIANT" not in env and env["VLLM_CPU_KVCACHE_SPACE"] == engine_settings(compose().model)[1][
        "VLLM_CPU_KVCACHE_SPACE"]
    assert "--enforce-eager" in cmd            # everything else of the model's config stays
    assert engine_batch(cfg) == 1 and engine_batch(compose().model) == cfg.max_inflight_per_replica


def test_reproducible_mode_on_gpus_keeps_batching_with_batch_invariant_kernels():
    cfg = compose(["model=gpu_8b", "model.reproducible=true"]).model
    assert cfg.num_gpus > 0
    args, env = engine_settings(cfg)
    cmd = server_command(cfg.path, cfg.served_name, 1, engine_args=args)
    assert env["VLLM_BATCH_INVARIANT"] == "1"
    assert engine_batch(cfg) == cfg.max_inflight_per_replica        # GPUs keep batching
    assert "--no-enable-prefix-caching" in cmd
    assert cmd.count("--max-num-seqs") == (1 if "max_num_seqs" in cfg.engine_args else 0)
    if "max_num_seqs" in cfg.engine_args:
        assert cmd[cmd.index("--max-num-seqs") + 1] == str(cfg.engine_args["max_num_seqs"])


def test_reproducible_mode_needs_a_hosted_model():
    from engine.errors import ConfigError

    with pytest.raises(ConfigError, match="model.reproducible: needs a hosted model"):
        compose(["model=openai_compatible", "model.base_url=http://127.0.0.1:1/v1", "model.api_key_env=",
                 "model.reproducible=true"])


def test_without_reproducible_mode_the_engine_runs_as_configured():
    """The config's arguments and environment, plus what a CPU model derives from the machine
    (tests/hosting/test_machine.py): nothing the config set changes."""
    cfg = compose().model
    args, env = engine_settings(cfg)
    assert args == {**cfg.engine_args, "dtype": args["dtype"]} and env.items() >= cfg.env.items()
    assert {"VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_KVCACHE_SPACE"} <= env.keys()
