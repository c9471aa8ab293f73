"""The driver's reads of a 100k-episode run dir: projected pyarrow reads vs the old whole-shard reads.

    python perf/store_scale.py [--episodes 100000] [--shards 100] [--configs 10] [--output-chars 1500]

Writes synthetic newsagent episode rows (5% error rows, each later rewritten ok in another
shard) into ``--shards`` shards of a temporary run dir, then times side by side, checking that
both give the same answer:

* ``finished_ids()`` (what ``plan`` reads on every start) against the old reader, which read
  every shard whole and built the set from Python dicts;
* one config's judge-stage read (``episodes(columns=..., config_hash=...)``) against the old
  ``episodes().to_pylist()`` filtered in Python;
* the metrics read (``episodes(columns=...)`` of the columns metrics use) against the old one.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.benchmarks.newsagent import BENCHMARK  # noqa: E402
from engine.storage import EPISODE_FIELDS, EpisodeStore, conform  # noqa: E402


# -- the pre-issue-11 reader, verbatim in behaviour ----------------------------------------------
def old_read(root: Path, sub: str, schema: pa.Schema) -> pa.Table:
    files = sorted((root / sub).glob("part-*.parquet"))
    if not files:
        return schema.empty_table()
    return pa.concat_tables([conform(pq.read_table(f), schema) for f in files])


def old_episodes(root: Path, schema: pa.Schema) -> pa.Table:
    table = old_read(root, "episodes", schema)
    rows = table.select(["episode_id", "status", "batch_id"]).to_pylist()
    best: dict[str, tuple[tuple[int, str], int]] = {}
    for i, r in enumerate(rows):
        key = (1 if r["status"] == "ok" else 0, r["batch_id"])
        if r["episode_id"] not in best or key > best[r["episode_id"]][0]:
            best[r["episode_id"]] = (key, i)
    return table.take(pa.array(sorted(i for _, i in best.values()), pa.int64()))


def old_finished_ids(root: Path) -> set[str]:
    table = old_read(root, "episodes", pa.schema([f for f in EPISODE_FIELDS if f.name in ("episode_id", "status")]))
    return {r["episode_id"] for r in table.to_pylist() if r["status"] == "ok"}


# -- synthetic run dir -----------------------------------------------------------------------------
def write_store(root: Path, n: int, shards: int, configs: int, chars: int) -> EpisodeStore:
    rng = random.Random(0)
    store = EpisodeStore(root, BENCHMARK.episode_fields)
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    words = [f"w{i}" for i in range(5000)]
    agent = '{"max_operations": 10, "prompt_variant": "b1", "rephrase": true}'

    def row(i: int, status: str) -> dict:
        return dict(episode_id=f"{i:016x}", batch_id="", config_hash=f"cfg{i % configs}", benchmark="newsagent",
                    task_id=f"t{i // configs}", model="m", agent=agent, data='{"folder": "x"}', seed=0,
                    status=status, error="" if status == "ok" else "GenerationError: boom", finish_reason="terminate",
                    output=" ".join(rng.choices(words, k=chars // 6)), n_steps=12, tokens_in=4000, tokens_out=600,
                    wall_time_s=30.0, started_at=now, finished_at=now, worker="w", replica=0,
                    final_draft=[f"o{j}" for j in range(8)], draft_ids=[f"o{j}" for j in range(8)],
                    retrieved_ids=[f"o{j}" for j in range(20)], reference_ids=[f"o{j}" for j in range(10)])

    errors = set(rng.sample(range(n), n // 20))
    per = -(-n // shards)
    for s in range(shards):
        ids = range(s * per, min(n, (s + 1) * per))
        rows = [row(i, "error" if i in errors else "ok") for i in ids]
        retried = [row((i + per) % n, "ok") for i in ids if (i + per) % n in errors][: len(errors) // shards + 1]
        store.write_batch(rows + retried, [])
    return store


def timed(fn, repeat: int = 3):
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=100_000)
    ap.add_argument("--shards", type=int, default=100)
    ap.add_argument("--configs", type=int, default=10)
    ap.add_argument("--output-chars", type=int, default=1500)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "run"
        t0 = time.perf_counter()
        store = write_store(root, a.episodes, a.shards, a.configs, a.output_chars)
        size = sum(f.stat().st_size for f in (root / "episodes").glob("*.parquet"))
        print(f"wrote {a.episodes} episodes (+ retries) in {a.shards} shards, {size / 1e6:.0f} MB, "
              f"{time.perf_counter() - t0:.1f} s")
        judge_cols = ["episode_id", "config_hash", "status", "task_id", "output"]
        metric_cols = ["episode_id", "benchmark", "model", "config_hash", "agent", "data", "status", "n_steps",
                       "tokens_in", "tokens_out", "wall_time_s", "finish_reason"]
        cases = [
            ("finished_ids()", lambda: old_finished_ids(root), store.finished_ids, lambda x: x),
            ("finished_ids(config_hash)", lambda: {i for i in old_finished_ids(root)
                                                   if int(i, 16) % a.configs == 3},
             lambda: store.finished_ids(config_hash="cfg3"), lambda x: x),
            ("one config, judge columns, to_pylist",
             lambda: [{c: r[c] for c in judge_cols} for r in old_episodes(root, store.schema).to_pylist()
                      if r["config_hash"] == "cfg3"],
             lambda: store.episodes(judge_cols, config_hash="cfg3").to_pylist(), lambda x: x),
            ("metrics columns, to_pylist",
             lambda: [{c: r[c] for c in metric_cols} for r in old_episodes(root, store.schema).to_pylist()],
             lambda: store.episodes(metric_cols).to_pylist(), lambda x: x),
            ("all columns (episodes())", lambda: old_episodes(root, store.schema), store.episodes,
             lambda t: t.to_pylist()),
        ]
        print(f"{'read':40s} {'old s':>8s} {'new s':>8s} {'ratio':>7s}")
        for name, old, new, norm in cases:
            t_old, r_old = timed(old, a.repeat)
            t_new, r_new = timed(new, a.repeat)
            assert norm(r_old) == norm(r_new), f"{name}: results differ"
            print(f"{name:40s} {t_old:8.3f} {t_new:8.3f} {t_old / t_new:6.1f}x")


if __name__ == "__main__":
    main()
