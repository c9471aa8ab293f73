"""perf/index_device.py's two halves on this machine: what it prepares to travel (the traffic's
shape, the int8 model under the 64 MiB a GPU machine takes) and the model it rebuilds there,
whose vectors must be MiniLM's up to int8 rounding, through the same ``indexes`` code."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("index_device", REPO / "perf" / "index_device.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_shaped_traffic_is_the_measured_shape_and_never_searches_after_release():
    from engine.benchmarks.newsagent.data import load_dataset

    mod = _script()
    episodes, docs = mod.shaped_traffic()
    tasks = load_dataset(mod.SAMPLE).tasks
    assert len(episodes) == len(tasks) and len(docs) > 500
    searches = [sum(k == "search" for k, _, _ in ops) for ops in episodes]
    assert sum(searches) / len(episodes) == pytest.approx(19.5, abs=0.05)
    attempts = [sum(k == "embed" for k, _, _ in ops) - 1 for ops in episodes]     # the first embed is the evidence
    assert sum(attempts) / len(episodes) == pytest.approx(1.3, abs=0.05)
    release = {t.task_id: t.release_date for t in tasks}
    for t, ops in zip(tasks, episodes):
        assert all(before <= release[t.task_id] for k, _, before in ops if k == "search")
    # it survives the trip through JSON
    assert mod._decode_ops(json.loads(json.dumps(mod._encode_ops(episodes)))) == episodes


def test_the_rebuilt_int8_model_runs_through_indexes_and_stays_minilm(tmp_path, embedder):
    from indexes.embeddings import Embedder, resolve_model_path

    mod = _script()
    mod.quantize(Path(resolve_model_path("all-MiniLM-L6-v2")), tmp_path)
    size = sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file())
    assert size < 32 * 2**20, f"{size / 2**20:.1f} MiB: with faiss-cpu's wheel it must stay under 64"
    folder = mod.rebuild(tmp_path, tmp_path / "fp32")
    rebuilt = Embedder(str(folder), device="cpu")
    assert rebuilt.backend == "torch"             # the same fast path as MiniLM's own folder
    texts = ["The council approved the budget on Monday.", "Floods closed the bridge north of town.",
             "Shares of the firm fell 4% after the report."]
    got, want = rebuilt.encode(texts), embedder.encode(texts)
    cos = (got * want).sum(axis=1)
    assert np.all(cos > 0.99), cos                # int8 rounding moves a vector, never far
    assert not np.allclose(got, want, atol=1e-6)  # and it is not MiniLM's own file that was loaded
