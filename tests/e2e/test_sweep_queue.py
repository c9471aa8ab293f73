"""A sweep is one job (issue 11, part 1): every point planned up front and fed through one queue
per model, so the next point's episodes start while the last one's tail runs; judging streams as
episodes finish; the models of a sweep are hosted at once when they fit, in waves when not."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from engine.benchmarks.livenews import BENCHMARK
from engine.config import ModelConfig
from engine.storage import EpisodeStore
from ray_jobs.cluster.session import Session
from ray_jobs.config.compose import compose
from ray_jobs.run import Point, interleave, plan_waves, run_sweep
from tests.fake_openai import FakeOpenAI
from tests.helpers import livenews_script as responder


def cfg(url: str, tmp_path, *extra: str):
    return compose(["benchmark=livenews", "agent=livenews", "benchmark.limit=6", "model=openai_compatible",
                    f"model.base_url={url}", "model.name=fake", "model.api_key_env=", f"run.dir={tmp_path}",
                    "run.progress=false", "cluster.num_cpus=4", "cluster.episodes_per_worker=4", "judge=self", *extra])


@pytest.mark.ray
def test_points_share_one_queue_and_overlap(tmp_path):
    with FakeOpenAI(responder, delay_s=0.2) as srv:
        session = Session()
        try:
            infos = run_sweep([cfg(srv.base_url, tmp_path, f"agent.max_searches={b}") for b in (1, 3, 1)], session)
        finally:
            session.close()
    assert [i["episodes_planned"] for i in infos] == [6, 6, 6]          # the repeated point ran once
    assert infos[0] is infos[2]
    store = EpisodeStore(tmp_path, BENCHMARK.episode_fields)
    eps = store.episodes().to_pylist()
    assert len(eps) == 12 and all(e["status"] == "ok" for e in eps)
    by = {}
    for e in eps:
        by.setdefault(e["config_hash"], []).append(e)
    (a, b) = sorted(by.values(), key=lambda rows: min(r["started_at"] for r in rows))
    # the second point's first episode started before the first point's last one finished
    assert min(r["started_at"] for r in b) < max(r["finished_at"] for r in a)
    # judged while generating: every episode has its grade, one set per configuration
    assert len(store.judgements()) == 12
    assert all(i["judge"]["episodes"] == 6 and i["judge"]["ok"] >= 6 and not i["judge"]["failed"]
               and i["judge"]["judge_model"] == "fake" for i in infos[:2])
    assert [i["model_started"] for i in infos[:2]] == [False, False]     # an external endpoint: nothing started
    assert sorted(m["value"] for m in store.metrics().to_pylist()
                  if m["metric"] == "accuracy" and m["scope"] == "all") == [1.0, 1.0]


def _point(name: str, cpus: float, gpus: float = 0.0) -> tuple[Point, ModelConfig]:
    m = ModelConfig(name=name, path="/m", num_cpus=cpus, num_gpus=gpus)
    key = Session.key(m)
    spec = SimpleNamespace(key=name, uses_model=True)
    p = Point(spec, None, None, True, False, (key,), {})    # type: ignore[arg-type]
    return p, m


def test_waves_pack_models_that_fit_largest_first():
    (a, ma), (b, mb), (c, mc) = _point("a", 2), _point("b", 2, 2), _point("c", 2, 1)
    free = Point(SimpleNamespace(key="free", uses_model=False), None, None, True, False, (), {})  # type: ignore[arg-type]
    models = {Session.key(m): m for m in (ma, mb, mc)}
    # 3 GPUs: b (2 GPUs) and c (1) together, then a (no GPU, but CPUs are short)
    waves = plan_waves([a, b, c, free], models, {"CPU": 4.0, "GPU": 3.0})
    assert [[p.key for p in w] for w in waves] == [["b", "c", "free"], ["a"]]
    # room for everything: one wave
    assert len(plan_waves([a, b, c], models, {"CPU": 6.0, "GPU": 3.0})) == 1
    # a model that cannot fit alone still gets a wave (its placement then fails with a clear error)
    assert [[p.key for p in w] for w in plan_waves([b], models, {"CPU": 8.0})] == [["b"]]


def test_the_queue_takes_the_points_in_turn():
    a, b, c = ["a1", "a2", "a3"], ["b1"], ["c1", "c2"]
    assert interleave([a, b, c]) == ["a1", "b1", "c1", "a2", "c2", "a3"]     # type: ignore[list-item]
    assert interleave([]) == [] and interleave([[], a]) == a                  # type: ignore[list-item]
