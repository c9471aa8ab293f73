"""Transcript storage per episode, measured on run dirs, next to what storing every call's whole
prompt would cost (a logger that keeps each request as sent, as ``--log_samples``-style logs do).

For each run dir: the bytes on disk of its ``calls/`` and ``messages/`` Parquet (as dateline wrote
them), per episode that called a model (its own calls and its judges'; a rule-based baseline
makes none), beside the same calls written with their full
message lists inline (one JSON string per call, same Parquet writer, same compression); then the
projection to 100,000 episodes and what that holds on S3 Standard at $0.023 per GB-month.

    python perf/transcript_storage.py runs/newsagent-sample runs/livenews-sample runs/analyst-sample
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

S3_USD_PER_GB_MONTH = 0.023


def folder_bytes(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*.parquet")) if p.is_dir() else 0


def measure(run_dir: Path) -> dict[str, float]:
    from engine.storage import EpisodeStore

    store = EpisodeStore(run_dir)
    eps = store.episodes(["episode_id", "benchmark"]).to_pylist()
    ids = [e["episode_id"] for e in eps]
    calls = store.calls(ids)
    msgs = store.messages(m for c in calls for m in c["message_ids"] or [])
    stored = folder_bytes(run_dir / "calls") + folder_bytes(run_dir / "messages")
    # the same calls with their prompts inline (nothing shared between calls or episodes)
    inline = [{k: v for k, v in c.items() if k != "message_ids"}
              | {"messages": json.dumps([{"role": msgs[m]["role"], "content": msgs[m]["content"]}
                                         for m in c["message_ids"] or []], ensure_ascii=False)} for c in calls]
    with tempfile.TemporaryDirectory() as tmp:
        naive = Path(tmp) / "inline.parquet"
        pq.write_table(pa.Table.from_pylist(inline), naive)
        naive_bytes = naive.stat().st_size
        zstd = Path(tmp) / "zstd"
        zstd.mkdir()
        # what the stored tables would take as one file each (no per-flush files), snappy and zstd
        ct = pa.Table.from_pylist(calls)
        mt = pa.Table.from_pylist(list(msgs.values()))
        pq.write_table(ct, zstd / "c.parquet", compression="zstd")
        pq.write_table(mt, zstd / "m.parquet", compression="zstd")
        zstd_bytes = (zstd / "c.parquet").stat().st_size + (zstd / "m.parquet").stat().st_size
    raw_prompt_chars = sum(len(r["messages"]) for r in inline)      # the prompts as JSON text
    n = max(len({c["episode_id"] for c in calls}), 1)     # per episode that called a model (not the baselines)
    return {"episodes": n, "calls": len(calls), "messages": len(msgs),
            "benchmark": eps[0]["benchmark"] if eps else "-", "stored": stored, "per_episode": stored / n,
            "inline_per_episode": naive_bytes / n, "zstd_per_episode": zstd_bytes / n,
            "prompt_chars_per_episode": raw_prompt_chars / n}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dirs", nargs="+")
    ap.add_argument("--episodes", type=int, default=100_000, help="projection size (default 100,000)")
    a = ap.parse_args(argv)
    print(f"{'run dir':34} {'bench':9} {'eps':>4} {'calls':>6} {'msgs':>6} {'prompt JSON/ep':>15} "
          f"{'stored/ep':>10} {'inline/ep':>10} {'inline/stored':>13} {'zstd/ep':>9} "
          f"{'at ' + format(a.episodes, ','):>12} {'S3 $/month':>10}")
    for d in a.run_dirs:
        m = measure(Path(d))
        total_gb = m["per_episode"] * a.episodes / 1e9
        print(f"{d[-34:]:34} {m['benchmark']:9} {m['episodes']:>4} {m['calls']:>6} {m['messages']:>6} "
              f"{m['prompt_chars_per_episode']:>15,.0f} {m['per_episode'] / 1e3:>8.1f}KB "
              f"{m['inline_per_episode'] / 1e3:>8.1f}KB {m['inline_per_episode'] / max(m['per_episode'], 1):>12.1f}x "
              f"{m['zstd_per_episode'] / 1e3:>7.1f}KB {total_gb:>10.2f}GB {total_gb * S3_USD_PER_GB_MONTH:>10.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
