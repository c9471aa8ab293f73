"""Hydra composition over the dataclass schemas: bad input fails before any actor starts."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from engine.config import ModelConfig
from engine.errors import ConfigError
from engine.hosting.prepare_model import default_model_dir
from ray_jobs.config.compose import compose
from ray_jobs.run import plan, resolve
from tests.helpers import REPO, run_module


def _model_file(name: str) -> dict:
    return OmegaConf.to_container(OmegaConf.load(REPO / "conf" / "model" / f"{name}.yaml"), resolve=False)


def test_default_is_the_cpu_vllm_newsagent_run():
    cfg = compose()
    assert cfg.benchmark.name == "newsagent" and cfg.model.kind == "vllm" and cfg.model.num_gpus == 0
    # it serves the model scripts/setup.sh prepares, from wherever DATELINE_CACHE puts it
    assert cfg.model.path == str(default_model_dir())
    local_cpu = _model_file("local_cpu")
    assert cfg.model.engine_args == local_cpu["engine_args"] and cfg.model.env == local_cpu["env"]
    # the paper's retrieval and operation budget: top-5 objects with cosine > 0.7, 20 operations
    assert (cfg.index.top_k, cfg.index.threshold, cfg.agent.max_operations) == (5, 0.7, 20)


@pytest.mark.parametrize("override,kind,message", [
    ("agent.max_operationz=3", ConfigCompositionException, "agent.max_operationz"),
    ("model.replicas=two", ConfigError, "model.replicas"),      # an integer or auto: checked by validate
    ("index.bogus=1", ConfigCompositionException, "index.bogus"),
    ("agent.mode=3-step", ConfigError, "agent.mode"),
    ("index.device=tpu", ConfigError, "index.device"),
    ("index.top_k=0", ConfigError, "index.top_k"),
    ("model.kind=grpc", ConfigError, "model.kind"),
    ("judge.actors=-1", ConfigError, "judge.actors"),
    ("judge.actor_cpus=-0.5", ConfigError, "judge.actor_cpus"),
    ("run.flush_bytes=100", ConfigError, "run.flush_bytes"),
    ("model.tensor_parallel_size=2", ConfigError, "model.num_gpus"),
    ("benchmark.data_dir=/nonexistent", ConfigError, "benchmark.data_dir"),
    ("benchmark.name=nosuchbench", ConfigError, "no benchmark folder"),
])
def test_bad_overrides_fail_at_composition(override, kind, message):
    with pytest.raises(kind) as e:
        compose([override])
    assert message in str(e.value) or message in str(e.value.__cause__)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(p.stem for p in (REPO / "conf" / "model").glob("*.yaml")))
def test_every_model_config_composes_to_what_its_file_says(name, monkeypatch):
    """Each conf/model file composes; every key it sets arrives as written, every other key
    keeps the schema's default; its interpolations resolve to what they stand for."""
    monkeypatch.setenv("DATELINE_API_KEY", "x")
    monkeypatch.setenv("DATELINE_BASE_URL", "http://models.test:9/v1")
    raw = _model_file(name)
    model = compose([f"model={name}"]).model
    assert set(raw) <= {f.name for f in dataclasses.fields(ModelConfig)}
    for f in dataclasses.fields(ModelConfig):
        want = raw.get(f.name, getattr(ModelConfig(), f.name))
        if isinstance(want, str) and "${" in want:
            continue                                   # below
        assert getattr(model, f.name) == want, f.name
    if "${dateline_cache:" in str(raw.get("path")):
        assert model.path == str(default_model_dir())
    if "DATELINE_BASE_URL" in str(raw.get("base_url")):
        assert model.base_url == "http://models.test:9/v1"
    # Ray gives a replica the GPUs its tensor-parallel workers need
    assert model.num_gpus == (model.tensor_parallel_size if model.num_gpus else 0)


def test_model_names_tell_the_model_configs_apart(monkeypatch):
    """The name labels episodes, tables and reports: every model file has its own."""
    monkeypatch.setenv("DATELINE_API_KEY", "x")
    names = [compose([f"model={p.stem}"]).model.name for p in (REPO / "conf" / "model").glob("*.yaml")]
    assert len(names) == len(set(names)) and all(names)


def test_api_key_env_must_exist_and_key_is_not_in_config(monkeypatch):
    monkeypatch.delenv("DATELINE_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="DATELINE_API_KEY"):
        compose(["model=openai_compatible"])
    monkeypatch.setenv("DATELINE_API_KEY", "sk-secret")
    cfg = compose(["model=openai_compatible"])
    assert "sk-secret" not in repr(cfg)


def test_episode_ids_depend_on_what_determines_results(tmp_path):
    base = ["benchmark.limit=3", f"run.dir={tmp_path}"]
    a = plan(resolve(compose(base)))
    assert len({s.episode_id for s in a.specs}) == 3
    same = plan(resolve(compose(base + ["cluster.num_workers=4", "run.progress=false", "benchmark.limit=2"])))
    assert [s.episode_id for s in same.specs] == [s.episode_id for s in a.specs[:2]]
    for change in ("agent.max_operations=5", "model.temperature=0.5", "index.top_k=3", "run.seed=1",
                   "agent.guided_json=true"):
        other = plan(resolve(compose(base + [change])))
        assert not {s.episode_id for s in other.specs} & {s.episode_id for s in a.specs}, change
    seeds = plan(resolve(compose(base + ["run.num_seeds=2"])))
    assert len(seeds.specs) == 6


@pytest.mark.ray
@pytest.mark.timeout(600)
def test_multirun_sweep(tmp_path):
    """`-m` runs one job per point into the same run dir; ids keep the points apart."""
    out = run_module("ray_jobs.run", "-m", "agent=newsagent_rule_based", "index.top_k=3,5", "benchmark.limit=2",
                     f"run.dir={tmp_path}", "run.progress=false", timeout=600)
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


@pytest.mark.slow
def test_local_cluster_is_sized_for_the_whole_run_whichever_stage_starts_it():
    """A sweep whose first point only judges (all episodes reused) starts Ray from the judge
    stage; the cluster must still fit the next point's episode workers (a 2-CPU cluster held by
    the replica left them pending forever)."""
    from engine.benchmarks import get_benchmark
    from ray_jobs.run import needed_cpus

    def cpus(cfg, *, replica: bool, web: bool = False) -> float:
        """What the run's actors ask for, from the config's own numbers."""
        m, c = cfg.model, cfg.cluster
        web_cpus = [s.num_cpus for s in get_benchmark("livenews").services(cfg)] if web else []
        assert len(web_cpus) == web                                  # livenews: one offline web actor
        return (m.replicas * m.num_cpus if replica else 0) + cfg.index.num_cpus + c.num_workers * c.worker_num_cpus \
            + sum(web_cpus)

    cfg = compose(["benchmark=analyst", "agent=analyst"])
    assert needed_cpus(cfg, get_benchmark("analyst")) == cpus(cfg, replica=True)        # replica + index + workers
    live = compose(["benchmark=livenews", "agent=livenews"])
    assert needed_cpus(live, get_benchmark("livenews")) == cpus(live, replica=True, web=True)
    base = compose(["agent=newsagent_rule_based", "judge=none"])
    assert needed_cpus(base, get_benchmark("newsagent")) == cpus(base, replica=False)   # no model to host
    judged = compose(["agent=newsagent_rule_based", "judge=self"])
    assert needed_cpus(judged, get_benchmark("newsagent")) == cpus(judged, replica=True)  # the hosted self-judge
    # an episode-judging benchmark's judge actors are counted too
    graded = compose(["benchmark=livenews", "agent=livenews", "judge=self", "judge.actors=2", "judge.actor_cpus=0.5"])
    assert needed_cpus(graded, get_benchmark("livenews")) == cpus(graded, replica=True, web=True) + 2 * 0.5
    assert needed_cpus(compose(["benchmark=livenews", "agent=livenews", "judge=self", "judge.actors=0"]),
                       get_benchmark("livenews")) == cpus(graded, replica=True, web=True)
    # the workers are counted even when the first stage to start Ray is the judge's
    assert needed_cpus(judged, get_benchmark("newsagent")) > judged.model.num_cpus + judged.index.num_cpus


# Override sets the suite composes (group choices, values, `+` additions, lists, pairwise), and
# ones Hydra refuses. The cached compose must give exactly what a plain Hydra compose gives.
SAME_AS_HYDRA = [
    ("config", []),
    ("config", ["benchmark=analyst", "agent=analyst_agentic", "agent.preview_rows=7"]),
    ("config", ["benchmark=livenews", "agent=livenews", "agent.max_searches=7", "run.dir=/tmp/x"]),
    ("config", ["model=openai_compatible", "model.base_url=http://127.0.0.1:1/v1", "model.api_key_env=",
                "model.reproducible=true"]),
    ("config", ["model.reproducible=true", "model=gpu_8b"]),            # a value before its group choice
    ("config", ["cluster=existing", "+cluster.runtime_env.working_dir=/wd",
                "+cluster.runtime_env.env_vars={HF_HUB_OFFLINE:'0',EXTRA:x}"]),
    ("config", ["benchmark=livenews", "agent=livenews", "judge=hosted_model", "judge.hosted_model.name=judge-b",
                "judge.hosted_model.served_name=judge-b"]),
    ("config", ["agent.mode=rule-based", "judge=none", "run.dir=/tmp/a", "run.dir=/tmp/b"]),   # last one wins
    ("config", ["run.budget.max_usd=1.5", "+cluster.worker_resources={accel:1}", "cluster.num_workers=3"]),
    ("pairwise", ["runs=[/tmp/a,/tmp/b]", "out=/tmp/o", "judge=none", "seed=5"]),
    ("pairwise", ["runs=[x]", "protocol=holistic", "judge.max_attempts=2"]),
]
REFUSED_BY_HYDRA = [
    ["model.no_such_field=1"], ["no_such_group=x"], ["model=no_such_model"], ["agent.max_operations=1,2"],
    ["~model.name"], ["run.dir"], ["cluster.worker_resources={accel:1}"],
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "overrides"), SAME_AS_HYDRA)
def test_cached_compose_equals_hydra(name, overrides):
    from ray_jobs.config.compose import _compose_uncached, compose_node

    assert compose_node(name, overrides) == _compose_uncached(name, overrides)
    assert compose_node(name, overrides) == _compose_uncached(name, overrides)          # from the cache


@pytest.mark.slow
@pytest.mark.parametrize("overrides", REFUSED_BY_HYDRA)
def test_cached_compose_refuses_what_hydra_refuses(overrides):
    from ray_jobs.config.compose import _compose_uncached, compose_node

    with pytest.raises(Exception) as plain:
        _compose_uncached("config", overrides)
    with pytest.raises(Exception) as cached:
        compose_node("config", overrides)
    assert (type(cached.value), str(cached.value)) == (type(plain.value), str(plain.value))


def test_cached_compose_sees_an_edited_yaml_file(tmp_path, monkeypatch):
    import shutil

    import ray_jobs.config.compose as configs

    conf = tmp_path / "conf"
    shutil.copytree(configs.CONF_DIR, conf)
    monkeypatch.setattr(configs, "CONF_DIR", str(conf))
    first = configs.compose_node("config", ["model=openai_compatible"])
    f = conf / "model" / "openai_compatible.yaml"
    f.write_text(f.read_text() + "\nrequest_timeout_s: 4321\n")
    import os
    os.utime(f, ns=(f.stat().st_mtime_ns + 10**9,) * 2)          # a new mtime even on a coarse clock
    again = configs.compose_node("config", ["model=openai_compatible"])
    assert first.model.request_timeout_s != 4321 and again.model.request_timeout_s == 4321


def test_an_external_fleet_takes_base_urls_not_both(monkeypatch):
    from engine.config import redact, validate_model

    fleet = compose(["model=openai_compatible", "model.base_url=", "model.api_key_env=",
                     "model.base_urls=[http://a.test:8000/v1,'https://b.test/v1?token=s3cret']"]).model
    validate_model(fleet, "model")
    assert redact({"base_urls": list(fleet.base_urls)})["base_urls"][1].startswith("https://b.test/v1?")
    assert "s3cret" not in str(redact({"base_urls": list(fleet.base_urls)}))
    for overrides, field in ((["model.base_urls=[http://a.test/v1]"], "model.base_urls"),
                             (["model.base_url=", "model.base_urls=[http://a.test/v1,http://a.test/v1/]"], "model.base_urls"),
                             (["model.base_url=", "model.base_urls=[http://a.test/v1,'']"], "model.base_urls[1]")):
        with pytest.raises(ConfigError, match=re.escape(field) + ": "):
            compose(["model=openai_compatible", "model.api_key_env=", *overrides])
