from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "engine" / "benchmarks" / "newsagent" / "sample_data"


@pytest.fixture(scope="session")
def embedder():
    from indexes.embeddings import Embedder

    return Embedder()


@pytest.fixture(scope="session")
def sample_dataset():
    from engine.benchmarks.newsagent.data import load_dataset

    return load_dataset(SAMPLE)


@pytest.fixture(scope="session")
def sample_index(embedder, sample_dataset, tmp_path_factory):
    from indexes.corpus import Document
    from indexes.service import LocalIndex

    docs = [Document(o.object_id, o.text, o.date) for o in sample_dataset.objects]
    return LocalIndex(docs, embedder, tmp_path_factory.mktemp("emb"))


def d(s: str) -> dt.date:
    return dt.date.fromisoformat(s)
