"""A BERT sentence encoder in plain torch: all-MiniLM-L6-v2 (and any sentence-transformers folder
of the same shape: a ``BertModel``, mean pooling, normalization) without importing
sentence-transformers or transformers.

Why: importing ``sentence_transformers`` costs about 7 s of CPU (transformers, scikit-learn...),
paid by every process that embeds (index actors, web services, test workers); ``torch`` +
``tokenizers`` + ``safetensors`` cost about 2 s. The arithmetic is BERT's, layer for layer, and
``tests/indexes/test_minilm.py`` checks the vectors against sentence-transformers' own (the real
model, texts past the 256-token limit, padding in mixed batches).

:func:`load` returns ``None`` for a folder of another shape; :class:`indexes.embeddings.Embedder`
then uses sentence-transformers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class BertShape:
    hidden: int
    heads: int
    layers: int
    eps: float
    max_len: int            # sentence-transformers' max_seq_length (tokens, [CLS] and [SEP] included)


def _read(path: Path) -> Any:
    return json.loads(path.read_text())


def shape_of(folder: Path) -> BertShape | None:
    """The encoder's shape when ``folder`` is a BERT + mean pooling + normalize model, else None."""
    try:
        modules = [m["type"].rsplit(".", 1)[-1] for m in _read(folder / "modules.json")]
        cfg = _read(folder / "config.json")
        pool_dir = next(m["path"] for m in _read(folder / "modules.json") if m["type"].endswith("Pooling"))
        pool = _read(folder / pool_dir / "config.json")
        st = _read(folder / "sentence_bert_config.json")
    except (OSError, KeyError, StopIteration, ValueError):
        return None
    mean_only = pool.get("pooling_mode_mean_tokens") and not any(
        pool.get(k) for k in ("pooling_mode_cls_token", "pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
                              "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"))
    if (modules != ["Transformer", "Pooling", "Normalize"] or cfg.get("model_type") != "bert" or not mean_only
            or cfg.get("hidden_act") != "gelu" or cfg.get("position_embedding_type", "absolute") != "absolute"
            or st.get("do_lower_case") or not (folder / "model.safetensors").is_file()
            or not (folder / "tokenizer.json").is_file()):
        return None
    return BertShape(int(cfg["hidden_size"]), int(cfg["num_attention_heads"]), int(cfg["num_hidden_layers"]),
                     float(cfg["layer_norm_eps"]),
                     min(int(st.get("max_seq_length") or cfg["max_position_embeddings"]),
                         int(cfg["max_position_embeddings"])))


class MiniLM:
    """Normalized mean-pooled BERT embeddings; ``encode`` matches sentence-transformers'."""

    def __init__(self, folder: Path, shape: BertShape, device: str = "cpu") -> None:
        import torch
        from safetensors.torch import load_file
        from tokenizers import Tokenizer

        self.shape = shape
        self.device = device
        self.dim = shape.hidden
        w = load_file(str(folder / "model.safetensors"), device=device)
        self.w = {k.removeprefix("bert."): v.float() for k, v in w.items()}
        self.tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tok.enable_truncation(max_length=shape.max_len)      # the file says 128; ST uses max_seq_length
        self.tok.no_padding()
        self.torch = torch

    def _layer(self, x: Any, mask: Any, i: int) -> Any:
        F = self.torch.nn.functional
        w, p = self.w, f"encoder.layer.{i}."
        b, t, h = x.shape
        heads = self.shape.heads

        def lin(name: str, v: Any) -> Any:
            return F.linear(v, w[p + name + ".weight"], w[p + name + ".bias"])

        def split(v: Any) -> Any:
            return v.view(b, t, heads, h // heads).transpose(1, 2)
        q, k, v = (split(lin(f"attention.self.{n}", x)) for n in ("query", "key", "value"))
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0 / math.sqrt(h // heads))
        ctx = ctx.transpose(1, 2).reshape(b, t, h)
        x = F.layer_norm(x + lin("attention.output.dense", ctx), (h,), w[p + "attention.output.LayerNorm.weight"],
                         w[p + "attention.output.LayerNorm.bias"], self.shape.eps)
        inter = F.gelu(lin("intermediate.dense", x))
        return F.layer_norm(x + lin("output.dense", inter), (h,), w[p + "output.LayerNorm.weight"],
                            w[p + "output.LayerNorm.bias"], self.shape.eps)

    def _batch(self, texts: Sequence[str]) -> np.ndarray:
        torch, F, w = self.torch, self.torch.nn.functional, self.w
        enc = self.tok.encode_batch(list(texts))
        t = max(len(e.ids) for e in enc)
        ids = torch.zeros((len(enc), t), dtype=torch.long)
        keep = torch.zeros((len(enc), t), dtype=torch.bool)
        types = torch.zeros((len(enc), t), dtype=torch.long)
        for r, e in enumerate(enc):
            ids[r, :len(e.ids)] = torch.tensor(e.ids)
            types[r, :len(e.ids)] = torch.tensor(e.type_ids)
            keep[r, :len(e.ids)] = True
        ids, keep, types = ids.to(self.device), keep.to(self.device), types.to(self.device)
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][:t].unsqueeze(0)
             + w["embeddings.token_type_embeddings.weight"][types])
        x = F.layer_norm(x, (self.shape.hidden,), w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"],
                         self.shape.eps)
        mask = keep[:, None, None, :]                     # keys that are tokens, for every query
        for i in range(self.shape.layers):
            x = self._layer(x, mask, i)
        m = keep.unsqueeze(-1).to(x.dtype)
        pooled = (x * m).sum(1) / m.sum(1).clamp(min=1e-9)
        out: np.ndarray = F.normalize(pooled, p=2, dim=1).cpu().numpy()
        return out

    def encode(self, texts: Sequence[str], batch_size: int) -> np.ndarray:
        """Longest first, as sentence-transformers batches, so a batch pads little."""
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        with self.torch.inference_mode():
            for s in range(0, len(order), batch_size):
                idx = order[s:s + batch_size]
                out[idx] = self._batch([texts[i] for i in idx])
        return out


def load(folder: str | Path, device: str = "cpu") -> MiniLM | None:
    shape = shape_of(Path(folder))
    return MiniLM(Path(folder), shape, device) if shape is not None else None
