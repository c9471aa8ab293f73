"""Newsagent-shaped traffic against 1, 2 and 4 index replicas, and the cold start of a replica from
the run dir's embedding cache against a re-embed (issue 33).

    python perf/index_throughput.py [--run-dir runs/newsagent-sample] [--episodes 88]
                                    [--concurrency 32] [--replicas 1,2,4] [--clients 2]

**The traffic** is what the index saw in real episodes: the run dir's stored episodes (README
command 1 writes ``runs/newsagent-sample``) give, per episode, the search queries (each search
action parsed from the model's stored completions, dated as the environment dates it: the
asked date, never after the release date), the rephrase's evidence embed (the task's firsthand
objects plus its draft) and, per rephrase attempt, the embed of the rephrased sentences. Those
episodes are replayed (cycled to ``--episodes``) with no model time in between: the replay
measures the index's own rate, the ceiling of what it can serve. ``--clients`` Ray actors each
run their share of the episodes, ``--concurrency`` in flight in all, through the episode workers'
own client (:class:`indexes.service.RemoteIndex`: each call to the replica with the fewest calls
in flight from that client).

**The replicas** are the run's own (:func:`indexes.service.start_index_replicas`), one CPU and
one torch thread each, on one local Ray. Episodes/s per replica and the scaling over one replica
are printed; on a machine with P cores, replicas past P - (client share) cannot add throughput,
and the script says how many cores it had.

**Cold start**: a fresh process builds one replica over the corpus (model load included) twice,
once with the run dir's cache holding the corpus's vectors and once with an empty cache (a
re-embed); the ratio is printed, and the embed rate per document, from which
``docs/design/sizing.md`` scales it to a large corpus.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

Op = tuple[str, Any, Any]         # ("search", query, date) | ("embed", texts, None)


def traffic_from_run_dir(run_dir: Path) -> tuple[list[list[Op]], dict[str, Any], list[Any]]:
    """Per stored newsagent episode, the index calls it made, in order; a summary; the corpus."""
    import pyarrow.dataset as ds

    from engine.benchmarks.newsagent.data import load_dataset
    from engine.benchmarks.newsagent.environment import parse_action, split_sentences
    from engine.llm.actions import ParseError
    from indexes.corpus import Document

    cfg = json.loads((run_dir / "config.json").read_text())["config"]
    data = load_dataset(REPO / cfg["benchmark"]["data_dir"])
    tasks = {t.task_id: t for t in data.tasks}
    objects = {o.object_id: o for o in data.objects}
    eps = ds.dataset(run_dir / "episodes", format="parquet").to_table(
        columns=["episode_id", "task_id", "draft_ids", "n_search"]).to_pylist()
    calls = ds.dataset(run_dir / "calls", format="parquet").to_table(
        columns=["episode_id", "call", "params", "completion", "purpose"]).to_pylist()
    by_ep: dict[str, list[dict[str, Any]]] = {}
    for c in sorted(calls, key=lambda c: (c["episode_id"], c["call"])):
        if c["purpose"] == "episode":
            by_ep.setdefault(c["episode_id"], []).append(c)
    rephrase_tokens = cfg["agent"]["rephrase_max_tokens"]
    episodes: list[list[Op]] = []
    n_search = n_rephrase = n_sentences = 0
    for e in eps:
        task = tasks[e["task_id"]]
        ops: list[Op] = []
        rephrases = []
        for c in by_ep.get(e["episode_id"], []):
            if json.loads(c["params"]).get("max_tokens") == rephrase_tokens:
                rephrases.append(split_sentences(c["completion"] or ""))
                continue
            try:
                action = parse_action(c["completion"] or "")
            except ParseError:
                continue
            if action.kind == "search" and action.query:
                before = min(action.before or task.release_date, task.release_date)
                ops.append(("search", action.query, before))
        if rephrases:           # what _rephrase embeds: the evidence once, then each attempt's sentences
            evidence = list(task.firsthand) + [objects[i].text for i in (e["draft_ids"] or []) if i in objects]
            ops.append(("embed", evidence, None))
            ops += [("embed", s, None) for s in rephrases if s]
            n_rephrase += len(rephrases)
            n_sentences += sum(len(s) for s in rephrases)
        n_search += sum(1 for o in ops if o[0] == "search")
        if ops:
            episodes.append(ops)
    if not episodes:
        raise SystemExit(f"{run_dir}: no newsagent episode with index traffic (run README command 1 first)")
    docs = [Document(o.object_id, o.text, o.date) for o in data.objects]
    summary = {"run_dir": str(run_dir), "episodes": len(episodes), "searches_per_episode": n_search / len(episodes),
               "rephrase_attempts_per_episode": n_rephrase / len(episodes),
               "sentences_per_attempt": n_sentences / max(1, n_rephrase),
               "n_search_column_mean": sum(e["n_search"] or 0 for e in eps) / len(eps)}
    return episodes, summary, docs


def minilm_tokens(episodes: list[list[Op]], corpus_texts: set[str]) -> float:
    """MiniLM tokens the index encodes per episode (texts of the corpus reuse its vectors)."""
    from tokenizers import Tokenizer

    from indexes.embeddings import resolve_model_path

    tok = Tokenizer.from_file(str(Path(resolve_model_path("all-MiniLM-L6-v2")) / "tokenizer.json"))
    tok.enable_truncation(max_length=256)
    n = 0
    for ops in episodes:
        for kind, x, _ in ops:
            texts = [x] if kind == "search" else [t for t in x if t not in corpus_texts]
            n += sum(len(e.ids) for e in tok.encode_batch(texts)) if texts else 0
    return n / len(episodes)


class Client:
    """A Ray actor replaying episodes through the episode workers' index client."""

    def __init__(self, target: Any) -> None:
        from engine.runtime.actors import resolve
        from indexes.service import RemoteIndex

        self.index = RemoteIndex(resolve(target))

    async def replay(self, episodes: list[list[Op]], concurrency: int, start_at: float) -> dict[str, Any]:
        sem = asyncio.Semaphore(concurrency)

        async def one(ops: list[Op]) -> None:
            async with sem:
                for kind, x, before in ops:
                    if kind == "search":
                        await self.index.search([x], [before], 5, 0.7)
                    else:
                        await self.index.embed(x)

        await asyncio.sleep(max(0.0, start_at - time.time()))
        t0 = time.time()
        await asyncio.gather(*(one(o) for o in episodes))
        return {"wall_s": time.time() - t0, "sent": list(self.index.calls.sent)}


def throughput(ray: Any, n: int, episodes: list[list[Op]], docs: list[Any], cache: str, a: argparse.Namespace) -> dict[str, Any]:
    from engine.runtime.actors import by_name, members
    from engine.runtime.replicas import gather_stats
    from indexes.service import start_index_replicas

    reps = start_index_replicas(n, _source(docs), "all-MiniLM-L6-v2", "cpu", 256, cache, 1.0, 0.0)
    infos = ray.get([m.ready.remote() for m in members(reps)])
    clients = [ray.remote(Client).options(num_cpus=0, max_concurrency=1000).remote(by_name(reps))
               for _ in range(a.clients)]
    ray.get([c.__ray_ready__.remote() for c in clients])
    # a short warm-up (torch's first batches, the clients' connections), then the measured replay
    ray.get([c.replay.remote(episodes[:4], 4, 0.0) for c in clients])
    work = [episodes[i % len(episodes)] for i in range(a.episodes)]
    shares = [work[i::a.clients] for i in range(a.clients)]
    start_at = time.time() + 1.0
    out = ray.get([c.replay.remote(s, max(1, a.concurrency // a.clients), start_at) for c, s in zip(clients, shares)])
    wall = max(o["wall_s"] for o in out)        # the clients start together (start_at) and wait for the last
    stats = gather_stats(reps)
    for h in [*clients, *members(reps)]:
        ray.kill(h)
    return {"replicas": n, "wall_s": wall, "episodes_per_s": a.episodes / wall,
            "per_replica_eps": a.episodes / wall / n, "max_batch": stats.get("max_batch"),
            "calls_per_replica": [p["search_calls"] + p["embed_calls"] for p in stats.get("per_replica", [stats])],
            "embedded_at_build": [i["embedded_at_build"] for i in infos]}


def _rows(rows: list[tuple[str, str, str]]) -> list[Any]:
    import datetime as dt

    from indexes.corpus import Document

    return [Document(i, t, dt.date.fromisoformat(d)) for i, t, d in rows]


def _source(docs: list[Any]) -> Any:
    """The corpus as the run passes it (a loader the actor runs: no object-store arguments)."""
    from indexes.service import CorpusSource

    return CorpusSource(_rows, ([(d.doc_id, d.text, d.date.isoformat()) for d in docs],))


COLD = """
import json, sys, time
t0 = time.perf_counter()
sys.path.insert(0, {repo!r})
from indexes.embeddings import Embedder
from indexes.service import LocalIndex
from indexes.corpus import Document
import datetime as dt, torch
torch.set_num_threads(1)
rows = json.load(open({docs!r}))
docs = [Document(r[0], r[1], dt.date.fromisoformat(r[2])) for r in rows]
e = Embedder("all-MiniLM-L6-v2", "cpu", 256)
t1 = time.perf_counter()
idx = LocalIndex(docs, e, {cache!r}, device="cpu")
print(json.dumps({{"total_s": time.perf_counter() - t0, "model_load_s": t1 - t0, "build_s": idx.build_s,
                  "embedded": idx.embedded_at_build}}))
"""


def cold_start(docs: list[Any], cache: str, tmp: Path) -> dict[str, Any]:
    docs_file = tmp / "docs.json"
    docs_file.write_text(json.dumps([[d.doc_id, d.text, d.date.isoformat()] for d in docs]))
    out = {}
    for name, where in (("from the run dir's cache", cache), ("re-embed (empty cache)", str(tmp / "empty-cache"))):
        code = COLD.format(repo=str(REPO), docs=str(docs_file), cache=where)
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, "OMP_NUM_THREADS": "1"})
        out[name] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run-dir", default=str(REPO / "runs" / "newsagent-sample"))
    ap.add_argument("--episodes", type=int, default=88)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--replicas", default="1,2,4")
    ap.add_argument("--clients", type=int, default=2)
    a = ap.parse_args()
    run_dir = Path(a.run_dir)
    if not (run_dir / "episodes").is_dir():
        raise SystemExit(f"{run_dir}: not a run dir (run README command 1 first, or pass --run-dir)")
    episodes, summary, docs = traffic_from_run_dir(run_dir)
    summary["minilm_tokens_per_episode"] = minilm_tokens(episodes, {d.text for d in docs})
    cores = os.cpu_count() or 1
    flags = {f for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")
             for f in line.split(":", 1)[1].split()} if Path("/proc/cpuinfo").exists() else set()
    print(f"machine: {cores} CPUs; flags avx2={'avx2' in flags} avx512f={'avx512f' in flags} "
          f"avx512_bf16={'avx512_bf16' in flags} amx_bf16={'amx_bf16' in flags}")
    print("traffic from", json.dumps(summary, indent=1))

    import ray

    counts = [int(x) for x in a.replicas.split(",")]
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        from engine.hosting.prepare_model import cache_dir
        from indexes.embeddings import embedding_cache_dir

        cache = embedding_cache_dir(str(tmp / "run"))
        ray.init(num_cpus=max(counts) + 1, include_dashboard=False, log_to_driver=False)
        try:
            # fill the run dir's cache once (seeded from the machine's), as a run's first replica does
            from indexes.service import start_index_replicas

            first = start_index_replicas(1, _source(docs), "all-MiniLM-L6-v2", "cpu", 256, cache, 1.0, 0.0,
                                         seed_dir=str(cache_dir() / "embeddings"))
            ray.get(first.members[0].ready.remote())
            ray.kill(first.members[0])
            results = [throughput(ray, n, episodes, docs, cache, a) for n in counts]
        finally:
            ray.shutdown()
        cold = cold_start(docs, cache, tmp)

    base = results[0]["episodes_per_s"]
    print(f"\n{a.episodes} episodes, {a.concurrency} in flight, {a.clients} client actors; one CPU/thread per replica")
    print(f"{'replicas':>8} {'wall s':>8} {'episodes/s':>11} {'per replica':>12} {'scaling':>8}  calls per replica")
    for r in results:
        print(f"{r['replicas']:>8} {r['wall_s']:>8.1f} {r['episodes_per_s']:>11.2f} {r['per_replica_eps']:>12.2f} "
              f"{r['episodes_per_s'] / base:>7.2f}x  {r['calls_per_replica']}")
    c, e = cold["from the run dir's cache"], cold["re-embed (empty cache)"]
    print(f"\ncold start over {len(docs)} documents (fresh process, one thread): from the run dir's cache "
          f"{c['total_s']:.1f} s (index build {c['build_s']:.2f} s, {c['embedded']} embedded); re-embed "
          f"{e['total_s']:.1f} s (index build {e['build_s']:.2f} s, {e['embedded']} embedded); "
          f"build {e['build_s'] / max(c['build_s'], 1e-9):.0f}x faster from the cache; "
          f"embedding {e['embedded'] / max(e['build_s'], 1e-9):.0f} documents/s/thread")
    print(json.dumps({"summary": summary, "throughput": results, "cold_start": cold}))


if __name__ == "__main__":
    main()
