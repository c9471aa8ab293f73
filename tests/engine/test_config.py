"""Hydra composition over the dataclass schemas: bad input fails before any actor starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException

from engine.errors import ConfigError
from ray_jobs.configs import compose
from ray_jobs.run import plan

REPO = Path(__file__).resolve().parents[2]


def test_default_is_the_cpu_vllm_newsagent_run():
    cfg = compose()
    assert cfg.benchmark.name == "newsagent" and cfg.model.kind == "vllm"
    assert cfg.model.path.endswith(".cache/models/qwen2.5-coder-0.5b-instruct") or "DATELINE_CACHE" in os.environ
    assert cfg.model.engine_args["enforce_eager"] is True
    assert cfg.model.env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    assert (cfg.index.top_k, cfg.index.threshold, cfg.agent.max_operations) == (5, 0.7, 20)


@pytest.mark.parametrize("override,kind,message", [
    ("agent.max_operationz=3", ConfigCompositionException, "agent.max_operationz"),
    ("model.replicas=two", ConfigCompositionException, "model.replicas"),
    ("index.bogus=1", ConfigCompositionException, "index.bogus"),
    ("agent.mode=3-step", ConfigError, "agent.mode"),
    ("index.device=tpu", ConfigError, "index.device"),
    ("index.top_k=0", ConfigError, "index.top_k"),
    ("model.kind=grpc", ConfigError, "model.kind"),
    ("model.tensor_parallel_size=2", ConfigError, "model.num_gpus"),
    ("benchmark.data_dir=/nonexistent", ConfigError, "benchmark.data_dir"),
    ("benchmark.name=nosuchbench", ConfigError, "no benchmark folder"),
])
def test_bad_overrides_fail_at_composition(override, kind, message):
    with pytest.raises(kind) as e:
        compose([override])
    assert message in str(e.value) or message in str(e.value.__cause__)


def test_every_model_config_composes(monkeypatch):
    monkeypatch.setenv("DATELINE_API_KEY", "x")
    for name in ("local_cpu", "gpu_8b", "gpu_32b_tp2", "openai_compatible"):
        cfg = compose([f"model={name}"])
        assert cfg.model.name
    tp = compose(["model=gpu_32b_tp2"]).model
    assert tp.tensor_parallel_size == 2 and tp.num_gpus == 2


def test_api_key_env_must_exist_and_key_is_not_in_config(monkeypatch):
    monkeypatch.delenv("DATELINE_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="DATELINE_API_KEY"):
        compose(["model=openai_compatible"])
    monkeypatch.setenv("DATELINE_API_KEY", "sk-secret")
    cfg = compose(["model=openai_compatible"])
    assert "sk-secret" not in repr(cfg)


def test_episode_ids_depend_on_what_determines_results(tmp_path):
    base = ["benchmark.limit=3", f"run.dir={tmp_path}"]
    a = plan(compose(base))
    assert len({s.episode_id for s in a.specs}) == 3
    same = plan(compose(base + ["cluster.num_workers=4", "run.progress=false", "benchmark.limit=2"]))
    assert [s.episode_id for s in same.specs] == [s.episode_id for s in a.specs[:2]]
    for change in ("agent.max_operations=5", "model.temperature=0.5", "index.top_k=3", "run.seed=1",
                   "agent.guided_json=true"):
        other = plan(compose(base + [change]))
        assert not {s.episode_id for s in other.specs} & {s.episode_id for s in a.specs}, change
    seeds = plan(compose(base + ["run.num_seeds=2"]))
    assert len(seeds.specs) == 6


@pytest.mark.timeout(600)
def test_multirun_sweep(tmp_path):
    """`-m` runs one job per point into the same run dir; ids keep the points apart."""
    cmd = [sys.executable, "-m", "ray_jobs.run", "-m", "agent=newsagent_rule_based", "index.top_k=3,5",
           "benchmark.limit=2", f"run.dir={tmp_path}", "run.progress=false"]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    from engine.benchmarks.newsagent import BENCHMARK
    from engine.storage import EpisodeStore

    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    eps = store.episodes().to_pylist()
    assert len(eps) == 4 and len({e["config_hash"] for e in eps}) == 2
    metrics = store.metrics().to_pylist()
    assert {m["config_hash"] for m in metrics} == {e["config_hash"] for e in eps}
    by_config: dict[str, int] = {}
    for e in eps:  # the baseline keeps what one search returned: at most top_k objects
        by_config[e["config_hash"]] = max(by_config.get(e["config_hash"], 0), len(e["retrieved_ids"]))
    assert min(by_config.values()) <= 3 and max(by_config.values()) <= 5


def test_local_cluster_is_sized_for_the_whole_run_whichever_stage_starts_it():
    """A sweep whose first point only judges (all episodes reused) starts Ray from the judge
    stage; the cluster must still fit the next point's episode workers (a 2-CPU cluster held by
    the replica left them pending forever)."""
    from engine.benchmarks import get_benchmark
    from ray_jobs.run import needed_cpus

    cfg = compose(["benchmark=analyst", "agent=analyst"])
    assert needed_cpus(cfg, get_benchmark("analyst")) == 2 + 1 + 0.25          # replica + index + worker
    live = compose(["benchmark=livenews", "agent=livenews"])
    assert needed_cpus(live, get_benchmark("livenews")) == 2 + 1 + 0.25 + 0.5  # + the offline web actor
    base = compose(["agent=newsagent_rule_based", "judge=none"])
    assert needed_cpus(base, get_benchmark("newsagent")) == 1 + 0.25           # no model to host
    judged = compose(["agent=newsagent_rule_based"])
    assert needed_cpus(judged, get_benchmark("newsagent")) == 2 + 1 + 0.25     # the hosted judge
