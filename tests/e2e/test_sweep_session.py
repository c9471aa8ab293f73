"""A sweep shares one Session: Ray, the model endpoints and the web service actor are set up once
and reused by every point; each point writes its own episodes, judgements and metrics. The model
is a scripted OpenAI-compatible server here (the real-model sweep is in test_livenews_real.py)."""

from __future__ import annotations

import pytest

from engine.benchmarks.livenews import BENCHMARK
from engine.storage import EpisodeStore
from ray_jobs.cluster.session import Session
from ray_jobs.config.compose import compose
from ray_jobs.run import run
from tests.fake_openai import FakeOpenAI
from tests.helpers import livenews_script as responder

pytestmark = pytest.mark.ray


def test_two_point_sweep_shares_one_session(tmp_path):
    with FakeOpenAI(responder) as srv:
        session = Session()
        try:
            infos = []
            for budget in (1, 3):
                cfg = compose(["benchmark=livenews", "agent=livenews", f"agent.max_searches={budget}",
                               "benchmark.limit=3", "model=openai_compatible", f"model.base_url={srv.base_url}",
                               "model.name=fake", "model.api_key_env=", f"run.dir={tmp_path}", "run.progress=false",
                               "cluster.num_cpus=4", "judge=self"])
                infos.append(run(cfg, session))
                if budget == 1:
                    web = {k: a._actor_id for k, a in session.services.items()}
            # one web actor for both points: the second point reused the first one's
            assert {k: a._actor_id for k, a in session.services.items()} == web and len(web) == 1
            assert all(i["episodes_planned"] == 3 for i in infos)
        finally:
            session.close()

    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    eps = store.episodes().to_pylist()
    assert len(eps) == 6 and all(e["status"] == "ok" and e["finish_reason"] == "finish" for e in eps)
    judged = store.judgements()
    assert len(judged) == 6 and {v["grade"] for v in judged.values()} == {"CORRECT"}
    metrics = [m for m in store.metrics().to_pylist() if m["metric"] == "accuracy" and m["scope"] == "all"]
    assert sorted(m["value"] for m in metrics) == [1.0, 1.0]
    assert "Search Budget = 1" in BENCHMARK.tables(store.metrics().to_pylist())["table3"]
