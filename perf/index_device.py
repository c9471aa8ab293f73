"""The index replica on a GPU against the same replica on one CPU thread, side by side in one
process: MiniLM through ``indexes/`` (``IndexService``, the body of the index actor, with its
batching loop) on CUDA and on CPU, the time-aware FAISS search beside it.

    python perf/index_device.py --prepare DIR [--run-dir RUN]   # here: what travels (< 64 MiB)
    python perf/index_device.py DIR [--concurrency 32]           # there: the measurement

Why two steps: a GPU machine lent to a session has PyTorch, CUDA and sentence-transformers but no
Ray, no FAISS and no network, and at most 64 MiB travel to it. MiniLM's fp32 weights are 91 MB,
so ``--prepare`` stores them as int8 with a scale per row (23 MB) and the measurement rebuilds an
fp32 model folder from them. That model computes exactly what MiniLM computes (same shapes, same
tokenizer, fp32 arithmetic), with weights off by int8 rounding: its vectors are not MiniLM's, its
cost is. The check of correctness is therefore against reference vectors of the *same*
dequantized model computed here on CPU (``reference.npy``): the CUDA vectors must match them.
FAISS is ``faiss-cpu`` carried as a wheel (``faiss-gpu`` wheels are far over the limit), so the
exact search runs on the GPU machine's CPU, which is what ``index.device: auto`` does on a node
without faiss-gpu.

**Traffic.** With ``--run-dir`` (a newsagent run dir of the real model, README command 1), the
episodes' own index calls (``perf/index_throughput.py``'s replay). Without it, episodes shaped as
``docs/design/sizing.md`` measured them (19.5 searches, 1.3 rephrase attempts of 6.9 sentences:
about 4,600 MiniLM tokens): each bundled task's searches are sentences of its own firsthand
objects and reference article, dated strictly before its release; its evidence embed is its
firsthand objects; its rephrase attempts are sentences of its reference article. The tokens per
episode are printed so the shape can be compared. The same episodes, at the same concurrency,
go to every replica measured, so the ratio between them is the result.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SAMPLE = REPO / "engine" / "benchmarks" / "newsagent" / "sample_data"
SMALL_FILES = ("config.json", "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json",
               "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt",
               "1_Pooling/config.json")


def _sentences(text: str) -> list[str]:
    from engine.benchmarks.newsagent.environment import split_sentences

    return [s for s in split_sentences(text) if len(s.split()) >= 4]


def shaped_traffic(searches: float = 19.5, attempts: float = 1.3, sentences: float = 6.9) -> tuple[list[Any], list[Any]]:
    """Episodes of index calls shaped as the measured ones (module docstring); the corpus."""
    from engine.benchmarks.newsagent.data import load_dataset
    from indexes.corpus import Document

    data = load_dataset(SAMPLE)
    def share(rate: float, n: int) -> int:        # rate per episode, spread evenly over the episodes
        return round((n + 1) * rate) - round(n * rate)

    episodes = []
    for n, t in enumerate(data.tasks):
        pool = [s for f in t.firsthand for s in _sentences(f)] + _sentences(t.reference_article)
        if not pool:
            continue
        ops: list[Any] = [("search", pool[i % len(pool)], t.release_date) for i in range(share(searches, n))]
        ops.append(("embed", list(t.firsthand), None))
        ref = _sentences(t.reference_article) or pool
        m = 0
        for _ in range(share(attempts, n)):
            k = share(sentences, m)
            ops.append(("embed", [ref[(m + j) % len(ref)] for j in range(k)], None))
            m += 1
        episodes.append(ops)
    docs = [Document(o.object_id, o.text, o.date) for o in data.objects]
    return episodes, docs


def _encode_ops(episodes: list[Any]) -> list[Any]:
    return [[[kind, what, before.isoformat() if before else None] for kind, what, before in ops] for ops in episodes]


def _decode_ops(rows: list[Any]) -> list[Any]:
    return [[(k, w, dt.date.fromisoformat(b) if b else None) for k, w, b in ops] for ops in rows]


def quantize(src: Path, dst: Path) -> None:
    """MiniLM's folder ``src`` as int8 rows + scales (``weights.npz``) and its small files."""
    from safetensors.numpy import load_file

    tensors = load_file(str(src / "model.safetensors"))
    out: dict[str, np.ndarray] = {}
    for name, w in tensors.items():
        w = w.astype(np.float32)
        if w.ndim == 2:
            scale = np.maximum(np.abs(w).max(axis=1, keepdims=True), 1e-12) / 127.0
            out[name + "::q"] = np.round(w / scale).astype(np.int8)
            out[name + "::s"] = scale.astype(np.float32)
        else:
            out[name] = w.astype(np.float16) if w.size > 4096 else w
    np.savez_compressed(dst / "weights.npz", **out)  # type: ignore[arg-type]
    for f in SMALL_FILES:
        if (src / f).is_file():
            (dst / "model" / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / f, dst / "model" / f)


def rebuild(prepared: Path, folder: Path) -> Path:
    """An fp32 model folder from ``prepared`` (what :func:`quantize` wrote)."""
    from safetensors.numpy import save_file

    shutil.copytree(prepared / "model", folder, dirs_exist_ok=True)
    z = np.load(prepared / "weights.npz")
    tensors: dict[str, np.ndarray] = {}
    for key in z.files:
        if key.endswith("::s"):
            continue
        if key.endswith("::q"):
            name = key[:-3]
            tensors[name] = (z[key].astype(np.float32) * z[name + "::s"]).astype(np.float32)
        else:
            tensors[key] = z[key].astype(np.float32)
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


def prepare(dst: Path, run_dir: Path | None) -> None:
    from indexes.embeddings import Embedder, resolve_model_path

    dst.mkdir(parents=True, exist_ok=True)
    if run_dir is not None:
        sys.path.insert(0, str(REPO / "perf"))
        from index_throughput import traffic_from_run_dir

        episodes, summary, docs = traffic_from_run_dir(run_dir)
        source = f"the index calls of {summary['episodes']} stored episodes of {run_dir}"
    else:
        episodes, docs = shaped_traffic()
        source = f"{len(episodes)} episodes shaped as docs/design/sizing.md measured (bundled newsagent tasks)"
    quantize(Path(resolve_model_path("all-MiniLM-L6-v2")), dst)
    model = rebuild(dst, Path(tempfile.mkdtemp(prefix="minilm-q8-")))
    texts = [d.text for d in docs[:64]] + [w for ops in episodes[:4] for k, w, _ in ops if k == "search"]
    ref = Embedder(str(model), device="cpu").encode(texts)
    np.save(dst / "reference.npy", ref)
    (dst / "traffic.json").write_text(json.dumps({
        "source": source, "episodes": _encode_ops(episodes), "reference_texts": texts,
        "docs": [[d.doc_id, d.text, d.date.isoformat()] for d in docs]}))
    size = sum(p.stat().st_size for p in dst.rglob("*") if p.is_file())
    print(f"prepared {dst}: {size / 2**20:.1f} MiB; traffic: {source}")


async def replay(service: Any, episodes: list[Any], concurrency: int) -> float:
    """Every episode's calls in order, ``concurrency`` episodes at once; wall seconds."""
    queue = list(episodes)
    t0 = time.perf_counter()

    async def worker() -> None:
        while queue:
            ops = queue.pop()
            for kind, what, before in ops:
                if kind == "search":
                    await service.search([what], [before], 5, 0.7)
                else:
                    await service.embed(list(what))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - t0


def measure(prepared: Path, concurrency: int, repeat: int, devices: list[str]) -> None:
    import torch

    from indexes.corpus import Document
    from indexes.embeddings import Embedder
    from indexes.service import IndexService

    t = json.loads((prepared / "traffic.json").read_text())
    episodes = _decode_ops(t["episodes"]) * repeat
    docs = [Document(i, x, dt.date.fromisoformat(d)) for i, x, d in t["docs"]]
    model = rebuild(prepared, Path(tempfile.mkdtemp(prefix="minilm-q8-")))
    cuda = torch.cuda.is_available()
    print(f"torch {torch.__version__}; CUDA: {torch.cuda.get_device_name(0) if cuda else 'none'}; "
          f"CPU cores {os.cpu_count()}; traffic: {t['source']}, x{repeat} = {len(episodes)} episodes, "
          f"{concurrency} at once")
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model / "tokenizer.json"))
    texts = [w for ops in episodes[: len(episodes) // repeat] for k, w, _ in ops if k == "search"] + \
            [x for ops in episodes[: len(episodes) // repeat] for k, w, _ in ops if k == "embed" for x in w]
    tokens = sum(min(256, len(e.ids)) for e in tok.encode_batch(texts)) / max(1, len(episodes) // repeat)
    print(f"MiniLM tokens per episode (at most, corpus texts not reused): {tokens:.0f}")

    ref = np.load(prepared / "reference.npy")
    rows = []
    for device, threads in [(d, 1 if d == "cpu" else 0) for d in devices]:
        if device == "auto" and not cuda:
            print("no CUDA device: the GPU replica is not measured")
            break
        torch.set_num_threads(threads or torch.get_num_threads())
        t0 = time.perf_counter()
        svc = IndexService(docs, str(model), device, 256, None, threads=threads)
        build = time.perf_counter() - t0
        emb: Embedder = svc.local.embedder
        got = emb.encode(t["reference_texts"])
        err = float(np.abs(got - ref).max())
        asyncio.run(replay(svc, episodes[:8], min(8, concurrency)))               # warm-up
        svc = IndexService(docs, str(model), device, 256, None, threads=threads)  # fresh loop and stats
        wall = asyncio.run(replay(svc, episodes, concurrency))
        # the embed rate of a corpus re-embed (cold start of a replica with no cache)
        corpus = [d.text for d in docs] * 4
        t1 = time.perf_counter()
        emb.encode(corpus)
        if emb.device == "cuda":
            torch.cuda.synchronize()
        docs_s = len(corpus) / (time.perf_counter() - t1)
        # the search alone: the episodes' queries, embedded once, searched in one call per 32
        qs = [w for ops in episodes for k, w, _ in ops if k == "search"]
        befores = [b for ops in episodes for k, _, b in ops if k == "search"]
        qv = emb.encode(qs)
        t2 = time.perf_counter()
        for i in range(0, len(qs), 32):
            svc.local.index.search(qv[i:i + 32], befores[i:i + 32], 5, 0.7)
        search_qs = len(qs) / (time.perf_counter() - t2)
        rows.append((f"{emb.device}" + (f" ({threads} thread)" if threads else ""), len(episodes) / wall, wall, build,
                     docs_s, search_qs, err, svc.stats["max_batch"], svc.local.index.on_gpu))
    print(f"{'replica':<16} {'episodes/s':>10} {'wall s':>7} {'build s':>8} {'re-embed docs/s':>16} "
          f"{'search q/s':>11} {'max |v-ref|':>12} {'max batch':>9}  faiss on gpu")
    for r in rows:
        print(f"{r[0]:<16} {r[1]:>10.2f} {r[2]:>7.1f} {r[3]:>8.1f} {r[4]:>16.0f} {r[5]:>11.0f} {r[6]:>12.2e} {r[7]:>9}  {r[8]}")
    if len(rows) == 2:
        print(f"GPU / one CPU thread: {rows[1][1] / rows[0][1]:.1f}x episodes/s, {rows[1][4] / rows[0][4]:.1f}x "
              "re-embed docs/s (same episodes, same concurrency, one process)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--prepare", action="store_true")
    ap.add_argument("--run-dir", type=Path)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--devices", default="cpu,auto", help="replicas to measure: cpu (one thread), auto (CUDA if any)")
    a = ap.parse_args()
    if a.prepare:
        prepare(a.dir, a.run_dir)
    else:
        measure(a.dir, a.concurrency, a.repeat, a.devices.split(","))


if __name__ == "__main__":
    main()
