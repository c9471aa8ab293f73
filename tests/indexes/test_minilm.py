"""The plain-torch BERT encoder (indexes/minilm.py) gives sentence-transformers' vectors, and a
folder of another shape falls back to sentence-transformers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from indexes.embeddings import Embedder, resolve_model_path
from indexes.minilm import shape_of

MINILM = Path(resolve_model_path("all-MiniLM-L6-v2"))
EDGE = ["", "   ", "  leading and trailing spaces  ", "UPPER and lower", "a\tb\nc", "Ünïcödé — 東京 résumé 🙂",
        "word " * 400,                                   # past the 256-token limit: truncated the same way
        "The Federal Reserve raised its benchmark rate by a quarter point on Wednesday."]


def test_minilm_runs_without_sentence_transformers():
    e = Embedder()
    assert e.backend == "torch" and e.dim == 384
    v = e.encode(["a sentence", "another"])
    assert v.dtype == np.float32 and v.shape == (2, 384) and np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
    assert e.encode([]).shape == (0, 384)


def _copy_config(dst: Path) -> Path:
    for f in ("modules.json", "config.json", "sentence_bert_config.json", "tokenizer.json"):
        shutil.copy(MINILM / f, dst / f)
    (dst / "1_Pooling").mkdir()
    shutil.copy(MINILM / "1_Pooling" / "config.json", dst / "1_Pooling" / "config.json")
    (dst / "model.safetensors").write_bytes(b"")          # only its presence is checked here
    return dst


@pytest.mark.parametrize("change", ["cls pooling", "roberta", "lowercase flag", "extra module", "no weights"])
def test_another_shape_is_left_to_sentence_transformers(tmp_path, change):
    d = _copy_config(tmp_path)
    assert shape_of(d) is not None and shape_of(d).max_len == 256      # type: ignore[union-attr]

    def edit(name: str, **kv: object) -> None:
        p = d / name
        p.write_text(json.dumps({**json.loads(p.read_text()), **kv}))
    if change == "cls pooling":
        edit("1_Pooling/config.json", pooling_mode_cls_token=True, pooling_mode_mean_tokens=False)
    elif change == "roberta":
        edit("config.json", model_type="roberta")
    elif change == "lowercase flag":
        edit("sentence_bert_config.json", do_lower_case=True)
    elif change == "extra module":
        mods = json.loads((d / "modules.json").read_text())
        (d / "modules.json").write_text(json.dumps(mods + [{"idx": 3, "name": "3", "path": "3_Dense",
                                                            "type": "sentence_transformers.models.Dense"}]))
    else:
        (d / "model.safetensors").unlink()
    assert shape_of(d) is None


@pytest.mark.real(model=False)           # imports sentence-transformers (~7 s) for the reference
def test_vectors_equal_sentence_transformers_on_the_news_slice(sample_dataset):
    from sentence_transformers import SentenceTransformer

    texts = EDGE + [o.text for o in sample_dataset.objects]
    ours = Embedder(batch_size=16)
    assert ours.backend == "torch"
    ref = SentenceTransformer(str(MINILM), device="cpu").encode(
        texts, batch_size=16, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
    for got in (ours.encode(texts), Embedder(batch_size=3).encode(texts)):   # other batches, other padding
        assert np.abs(got - ref).max() < 1e-5
        assert (got * ref).sum(1).min() > 0.99999
