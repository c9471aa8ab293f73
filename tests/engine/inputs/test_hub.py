"""Hugging Face hub ids for model.path and benchmark data paths, resolved through a local hub cache
laid out on disk exactly as huggingface_hub writes it (``models--ORG--NAME/refs/main`` holding a
commit hash, ``snapshots/<hash>/...``). Nothing is downloaded: HF_HUB_OFFLINE=1 here, and a repo
missing from the cache is a one-line ConfigError naming the field."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine.errors import ConfigError
from engine.inputs.hub import parse, resolve
from tests.helpers import REPO

COMMIT = "0123456789abcdef0123456789abcdef01234567"
OLD = "89abcdef0123456789abcdef0123456789abcdef"


def lay_out(cache: Path, kind: str, repo: str, files: dict[str, bytes | Path], commit: str = COMMIT,
            ref: str = "main") -> Path:
    """One repo in a hub cache: refs/<ref> -> commit, snapshots/<commit>/<files>."""
    root = cache / f"{kind}s--{repo.replace('/', '--')}"
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / ref).write_text(commit)
    snap = root / "snapshots" / commit
    for name, content in files.items():
        dst = snap / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copy(content, dst)
        else:
            dst.write_bytes(content)
    return snap


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    c = tmp_path / "hub"
    c.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(c))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("DATELINE_HUB_DOWNLOAD", raising=False)
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(c))       # read at import time by huggingface_hub
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    return c


def test_what_counts_as_a_hub_id(tmp_path):
    assert parse("hf://Qwen/Qwen2.5-0.5B").repo_id == "Qwen/Qwen2.5-0.5B"
    ref = parse("hf://datasets/acme/news@v2/sample/tasks.jsonl")
    assert (ref.repo_type, ref.repo_id, ref.revision, ref.subpath) == ("dataset", "acme/news", "v2", "sample/tasks.jsonl")
    assert parse("Qwen/Qwen2.5-0.5B", bare_model=True).repo_type == "model"
    assert parse("Qwen/Qwen2.5-0.5B") is None                    # bare ids only where a model is expected
    assert parse("engine/benchmarks", bare_model=True) is None    # an existing local folder stays a path
    assert parse("./a/b", bare_model=True) is None and parse("/models/x", bare_model=True) is None


def test_model_and_dataset_ids_resolve_to_cached_snapshots(cache):
    snap = lay_out(cache, "model", "acme/tiny-lm", {"config.json": b"{}", "model.gguf": b"GGUF"})
    assert resolve("hf://acme/tiny-lm", "model.path") == str(snap)
    assert resolve("acme/tiny-lm", "model.path", bare_model=True) == str(snap)
    old = lay_out(cache, "model", "acme/tiny-lm", {"config.json": b"{\"v\": 1}"}, commit=OLD, ref="v1")
    assert resolve("hf://acme/tiny-lm@v1", "model.path") == str(old)          # a tag in refs/
    assert resolve(f"hf://acme/tiny-lm@{OLD}", "model.path") == str(old)      # a commit hash
    d = lay_out(cache, "dataset", "acme/news", {"sample/tasks.jsonl": b"{}\n"})
    assert resolve("hf://datasets/acme/news/sample", "benchmark.data_dir") == str(d / "sample")
    assert resolve("engine/benchmarks", "benchmark.data_dir") == "engine/benchmarks"   # plain paths untouched


def test_a_repo_missing_from_the_cache_is_one_line_naming_the_field(cache):
    with pytest.raises(ConfigError) as e:
        resolve("hf://acme/not-here", "model.path")
    msg = str(e.value)
    assert msg.startswith("model.path: 'hf://acme/not-here' is a Hugging Face model id that is not in the local hub cache")
    assert "nothing is downloaded" in msg and "\n" not in msg
    lay_out(cache, "dataset", "acme/news", {"tasks.jsonl": b"{}\n"})
    with pytest.raises(ConfigError, match=r"benchmark.data_dir: 'missing/x' is not in acme/news"):
        resolve("hf://datasets/acme/news/missing/x", "benchmark.data_dir")


def test_compose_resolves_the_models_and_the_benchmarks_paths(cache):
    """Through the same compose ``dateline run`` and the Python API use: the converted model's
    folder and the bundled newsagent sample, published in the cache as a model and a dataset."""
    from dateline import compose

    model = lay_out(cache, "model", "acme/qwen-mini", {"config.json": b"{}"})
    sample = REPO / "engine/benchmarks/newsagent/sample_data"
    data = lay_out(cache, "dataset", "acme/newsagent-sample",
                   {f"sample_data/{p.name}": p for p in sample.iterdir()})
    cfg = compose(["model.path=hf://acme/qwen-mini", "benchmark.data_dir=hf://datasets/acme/newsagent-sample/sample_data"])
    assert cfg.model.path == str(model)
    assert cfg.benchmark.data_dir == str(data / "sample_data")
    cfg = compose(["benchmark=livenews", "agent=livenews",
                   "benchmark.questions=hf://datasets/acme/newsagent-sample/sample_data/tasks.jsonl"])
    assert cfg.benchmark.questions == str(data / "sample_data/tasks.jsonl")
    with pytest.raises(ConfigError, match=r"^benchmark.pages: 'hf://datasets/acme/gone' is a Hugging Face dataset id"):
        compose(["benchmark=livenews", "agent=livenews", "benchmark.pages=hf://datasets/acme/gone"])
