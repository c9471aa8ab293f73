"""Network exposure and secrets (issue 12 part 6), through the real driver under Hydra.

A livenews run whose model is hosted (a replica running tests/fake_vllm_server.py in place of
vLLM, on the same code path: placement, ModelReplica, VLLMServer) and whose grader is an
external endpoint with a planted API key (``judge.api_key_env``). Then:

* the replica required the pool's per-run key (the fake server answers 401 without it, as vLLM
  does) and every episode is ok, so the key reached the workers inside their endpoints;
* the replica listened on loopback (a one-node cluster) and the local cluster has no dashboard;
* neither the planted key nor the per-run key appears in any file the run wrote: the run dir
  (Parquet decoded, JSON, logs, the replica's log, Hydra's output dir under it) and the Ray
  session's logs of this run.
"""

from __future__ import annotations

import json
import secrets
import sys
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

from tests.fake_openai import FakeOpenAI
from tests.helpers import ray_temp_dir

REPO = Path(__file__).resolve().parents[2]
RAY_TMP = ray_temp_dir()          # this test run's (tests/conftest.py)


def grader(messages, req):
    return "A"


def files_containing(root: Path, needles: list[str]) -> list[str]:
    hits = []
    for f in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        try:
            data = f.read_bytes()
        except OSError:
            continue
        texts = [data]
        if f.suffix == ".parquet":          # compressed pages: decode them
            texts.append(json.dumps(pq.read_table(f).to_pylist(), default=str).encode())
        for n in needles:
            if any(n.encode() in t for t in texts):
                hits.append(f"{f}: {n[:6]}...")
    return hits


@pytest.mark.ray
@pytest.mark.timeout(600)
def test_hosted_key_required_loopback_only_and_no_key_on_disk(tmp_path, monkeypatch):
    import ray
    from hydra.core.global_hydra import GlobalHydra

    import engine.hosting.replica as replica
    from engine.benchmarks import get_benchmark
    from engine.storage import EpisodeStore
    from ray_jobs.cli.main import main

    run_key = secrets.token_urlsafe(32)
    planted = "sk-planted-" + secrets.token_hex(16)
    monkeypatch.setattr(replica, "secrets", SimpleNamespace(token_urlsafe=lambda n: run_key))
    monkeypatch.setenv("DATELINE_PLANTED_KEY", planted)
    seen: dict[str, object] = {}
    real_start = replica.ModelPool.start

    def start(self):
        eps = real_start(self)
        seen["endpoints"] = list(eps)
        seen["dashboard"] = ray._private.worker.global_worker.node.address_info.get("webui_url")
        return eps

    monkeypatch.setattr(replica.ModelPool, "start", start)
    sessions_before = set(RAY_TMP.glob("session_2*")) if RAY_TMP.exists() else set()
    (tmp_path / "model").mkdir()
    run_dir = tmp_path / "run"
    with FakeOpenAI(grader) as judge:
        GlobalHydra.instance().clear()
        try:
            assert main(["run", "benchmark=livenews", "agent=livenews", "benchmark.limit=2", "model=local_cpu",
                         "model.name=fake", "model.served_name=fake", f"model.path={tmp_path / 'model'}",
                         "model.server_module=tests.fake_vllm_server", f"+model.env.PYTHONPATH={REPO}",
                         "+model.env.FAKE_VLLM_RESPONDER=tests.helpers:livenews_script",
                         "model.startup_timeout_s=120", "judge=openai_compatible", f"judge.base_url={judge.base_url}",
                         "judge.model=judge-model", "judge.api_key_env=DATELINE_PLANTED_KEY", f"run.dir={run_dir}",
                         "run.progress=false"]) == 0
        finally:
            GlobalHydra.instance().clear()
            sys.argv = sys.argv[:1]
        assert judge.auth and set(judge.auth) == {f"Bearer {planted}"}      # the planted key was used

    (ep,) = seen["endpoints"]
    assert ep.api_key == run_key and ep.base_url.startswith("http://127.0.0.1:")
    assert not seen["dashboard"]
    eps = EpisodeStore(run_dir, get_benchmark("livenews").episode_fields).episodes().to_pylist()
    assert len(eps) == 2 and all(e["status"] == "ok" for e in eps), [e["error"] for e in eps]
    log = next((run_dir / "logs").rglob("*.log")).read_text()
    assert "POST /v1/chat/completions 200" in log and " 401" not in log     # every call carried the key
    assert not (run_dir / "hydra").exists()                                 # Hydra writes nothing into the run dir

    roots = [run_dir] + sorted((set(RAY_TMP.glob("session_2*")) - sessions_before) if RAY_TMP.exists() else [])
    assert len(roots) >= 2                                                  # this run's Ray session logs
    leaks = [h for r in roots for h in files_containing(r, [planted, run_key])]
    assert not leaks, leaks


@pytest.mark.parametrize("over,env,job,want", [
    ([], None, False, "disabled"),                                   # the local cluster this driver starts
    ([], "token", False, "token"),
    (["cluster=existing"], None, False, "token"),                   # never disabled by default elsewhere
    (["cluster=existing"], "disabled", False, "disabled"),          # the environment says so
    ([], None, True, "token"),                                       # inside a submitted job
    (["cluster=existing", "cluster.ray_auth_mode=disabled"], "token", False, "disabled"),   # explicit wins
    (["cluster.ray_auth_mode=token"], None, False, "token"),
])
def test_ray_auth_mode_is_disabled_only_for_the_local_cluster(monkeypatch, over, env, job, want):
    from ray_jobs.cluster.session import ray_auth_mode
    from ray_jobs.config.compose import compose

    if env is None:
        monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    else:
        monkeypatch.setenv("RAY_AUTH_MODE", env)
    c = compose(over).cluster
    assert ray_auth_mode(c, job=job) == want
    assert c.dashboard is False


def test_bind_is_validated():
    from engine.errors import ConfigError
    from ray_jobs.config.compose import compose

    assert compose([]).model.bind == "auto"
    with pytest.raises(ConfigError, match="model.bind"):
        compose(["model.bind=0.0.0.0"])
