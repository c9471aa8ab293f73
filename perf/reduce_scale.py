"""The reduce at scale: the whole-store reduce (every episode and judgement of the run dir in
Python at once, as ``reduce_metrics`` did) vs the per-configuration reduce
(``engine.scoring.views.reduce_store``), side by side on one run dir, each in a child process of its
own (so each peak RSS is its own).

    python perf/reduce_scale.py                         # 20,000 analyst episodes, 32 configurations
    python perf/reduce_scale.py --episodes 100000 --only new

The run dir (a local folder) holds ``--episodes`` analyst-shaped episodes (``perf/driver_scale.py``'s
generator: a 9 KB report, the analyst columns) over ``--points`` configurations of 16 tasks with
15-criterion checklists, and per episode the judgements the analyst judge asks for: 15 criterion
ratings, 3 claim extractions (24 claims each) and 40 claim verdicts (58), each with the judge's
raw output as stored. Episodes go through the real ``StoreWriter`` (one shard per flush) and the
judgements through its ``put_judgements``, as the judge actors write them. The judgements are
synthesized, not asked of a server: ``perf/driver_scale.py`` measures the judge stage itself.

Printed per side: wall time, peak RSS, metric rows; both sides must produce the same rows.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def build(run_dir: Path, episodes: int, points: int) -> dict[str, Any]:
    from engine.benchmarks.analyst import BENCHMARK
    from engine.runtime.writer import StoreWriter
    from engine.storage import EpisodeStore
    from perf.driver_scale import Episodes, judge_tasks

    tasks = judge_tasks(run_dir.parent / "tasks", 16, 15)
    data = json.dumps({"name": "analyst", "tasks_dir": str(tasks), "checklists_dir": "", "max_claims": 40,
                       "claims_chunk_tokens": 1000, "evidence_k": 4})
    from engine.benchmarks.analyst import _task

    cid = {f"brief-{t:03d}": _task(str(tasks), "", f"brief-{t:03d}").checklist_id for t in range(16)}
    store = EpisodeStore(run_dir, BENCHMARK.episode_fields)
    gen = Episodes(points, seed=3)
    t0 = time.monotonic()
    with StoreWriter(flush_s=3600, flush_bytes=32 << 20) as w:
        for i in range(episodes):
            p, row, _, _, _ = gen.make(i)
            task = f"brief-{(i // points) % 16:03d}"         # every configuration plans every task
            row.update(data=data, task_id=task, output="# Brief\n\n" + "\n\n".join(gen.cut(1300) + "." for _ in range(6)))
            eid = row["episode_id"]
            base = dict(episode_id=eid, judge="grader:perf0001", judge_model="grader", judge_kind="openai_compatible",
                        judge_prompt=BENCHMARK.judge_prompt_version, ok=True, attempts=1, error="", tokens_in=900,
                        tokens_out=40, latency_s=0.4, truncated=False, config_hash=row["config_hash"])
            js = [dict(base, key=f"criterion:{cid[task]}:{c:02d}", value=str(1 + (i + c) % 5),
                       raw_output=f"Step 1: {gen.cut(300)} therefore, the rating is: {1 + (i + c) % 5}")
                  for c in range(15)]
            for k in range(3):
                claims = {f"The report states {gen.cut(60)} ({k}.{j})": gen.cut(40) for j in range(24)}
                text = json.dumps(claims)
                js.append(dict(base, key=f"claims:{k}", value=text, raw_output=text))
                quota = 14 if k < 2 else 12
                js += [dict(base, key=f"claim:{k}:{j:02d}", value="SUPPORTED" if (i + j) % 7 else "UNSUPPORTED",
                            raw_output="SUPPORTED" if (i + j) % 7 else "UNSUPPORTED") for j in range(quota)]
            w.put(store, [row])
            w.put_judgements(store, js)
    return {"build_s": time.monotonic() - t0, "judgements": episodes * 58}


def side(run_dir: Path, how: str) -> dict[str, Any]:
    from engine.benchmarks import get_benchmark
    from engine.scoring import views
    from engine.storage import EpisodeStore
    from perf.driver_scale import peak_rss_mb

    bench = get_benchmark("analyst")
    store = EpisodeStore(run_dir, bench.episode_fields)
    rss0 = peak_rss_mb()
    t0 = time.monotonic()
    rows = (views.reduce(bench, views.config_views(store, bench)) if how == "old"
            else views.reduce_store(store, bench))
    wall = time.monotonic() - t0
    out = run_dir.parent / f"rows-{how}.json"
    out.write_text(json.dumps(rows, default=str, sort_keys=True))
    return {"how": how, "wall_s": wall, "rss_mb": peak_rss_mb(),
            "rss0_mb": rss0, "rows": len(rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=20_000)
    ap.add_argument("--points", type=int, default=32)
    ap.add_argument("--only", choices=["old", "new"], help="run one side only")
    ap.add_argument("--dir", help="a run dir built before (skips building)")
    ap.add_argument("--side", choices=["old", "new"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.side:
        print(json.dumps(side(Path(a.dir), a.side)))
        return
    if a.dir:
        run_dir = Path(a.dir)
        built = {"build_s": 0.0, "judgements": "?"}
    else:
        run_dir = Path(tempfile.mkdtemp(prefix="dateline-reduce-scale-")) / "run"
        built = build(run_dir, a.episodes, a.points)
    print(f"reduce of {a.episodes} analyst episodes, {built['judgements']} judgements, {a.points} configurations "
          f"(run dir {run_dir}, built in {built['build_s']:.0f} s)", flush=True)
    res = {}
    for how in ("old", "new"):
        if a.only and how != a.only:
            continue
        out = subprocess.run([sys.executable, __file__, "--side", how, "--dir", str(run_dir)], capture_output=True,
                             text=True, cwd=REPO)
        if out.returncode:
            sys.exit(f"{how} side failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
        res[how] = json.loads(out.stdout.strip().splitlines()[-1])
        r = res[how]
        label = "whole store at once (before)" if how == "old" else "one configuration at a time"
        print(f"  {label:32s} {r['wall_s']:8.1f} s  peak RSS {r['rss_mb']:7.0f} MB (imports {r['rss0_mb']:.0f} MB)  "
              f"{r['rows']} metric rows", flush=True)
    if len(res) == 2:
        print(f"  new / old: wall {res['new']['wall_s'] / res['old']['wall_s']:.3f}, peak RSS "
              f"{res['new']['rss_mb'] / res['old']['rss_mb']:.3f}")
    old_rows, new_rows = run_dir.parent / "rows-old.json", run_dir.parent / "rows-new.json"
    if old_rows.exists() and new_rows.exists():      # (with --dir, the old side's rows of an earlier call)
        same = old_rows.read_text() == new_rows.read_text()
        print(f"  the same metric rows: {same}")
        if not same:
            sys.exit("the two reduces differ")


if __name__ == "__main__":
    main()
