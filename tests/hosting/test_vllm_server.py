"""How a vLLM replica is launched (command, resources) without starting one; the real start is
covered by tests/e2e/test_real_model.py."""

from __future__ import annotations

import json
import sys

import pytest

from engine.config import ModelConfig
from engine.hosting.replica import ModelPool
from engine.hosting.vllm_server import VLLMServer, server_command
from ray_jobs.configs import compose


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
