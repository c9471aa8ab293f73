"""A 4-point livenews search-budget sweep (``agent.max_searches=1,3,5,7``) as one job vs the
largest point alone, against the same fake OpenAI-compatible server with a real model's latency
(``perf/_fake_server.py``: continuous batching, prefill and decode rates of the offline
0.5B model on this CPU, ``--scale`` divides them). Issue 11's goal: sweep wall ÷ largest-point
wall ≤ 1.3 — one queue per model keeps the engine's batch full across points, so the small points
ride along in the slots the largest one leaves idle.

Both runs share one Ray session (started by a one-episode warm-up, not timed) and write to fresh
run dirs; the judge is off (generation is what overlaps).

    python perf/sweep_overlap.py                # 12 questions per point, real latency
    python perf/sweep_overlap.py --scale 4      # quicker
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from perf._fake_server import FakeServer, add_latency_args, latency_from_args  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=12, help="livenews questions per point (12 bundled)")
    ap.add_argument("--budgets", default="1,3,5,7", help="agent.max_searches of the sweep's points")
    ap.add_argument("--inflight", type=int, default=8, help="model.max_inflight_per_replica (the engine's batch)")
    ap.add_argument("--concurrency", choices=("auto", "fixed"), default="auto",
                    help="cluster.concurrency: auto keeps batch / model_time_share episodes in flight, fixed = the batch")
    ap.add_argument("--each-alone", action=argparse.BooleanOptionalAction, default=True,
                    help="also run every point alone, for its batch occupancy (--no-each-alone: the largest only)")
    add_latency_args(ap)
    a = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    from ray_jobs.cluster.session import Session
    from ray_jobs.config.compose import compose
    from ray_jobs.run import run_sweep

    budgets = [int(b) for b in a.budgets.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="sweep-overlap-"))

    def cfg(url: str, run_dir: Path, budget: int, limit: int) -> object:
        return compose(["benchmark=livenews", "agent=livenews", f"benchmark.limit={limit}", "judge=none",
                        "model=openai_compatible", f"model.base_url={url}", "model.name=fake", "model.api_key_env=",
                        f"model.max_inflight_per_replica={a.inflight}", f"cluster.episodes_per_worker={a.inflight}",
                        f"agent.max_searches={budget}", f"run.dir={run_dir}", "run.progress=false",
                        f"cluster.concurrency={a.concurrency}",
                        "run.compact=false"])

    with FakeServer(latency_from_args(a)) as srv:
        session = Session()
        try:
            run_sweep([cfg(srv.base_url, tmp / "warmup", 1, 1)], session)
            srv.reset()
            t0 = time.perf_counter()
            alone = run_sweep([cfg(srv.base_url, tmp / "alone", max(budgets), a.questions)], session)
            wall_alone = time.perf_counter() - t0
            s_alone = srv.stats()
            srv.reset()
            t0 = time.perf_counter()
            sweep = run_sweep([cfg(srv.base_url, tmp / "sweep", b, a.questions) for b in budgets], session)
            wall_sweep = time.perf_counter() - t0
            s_sweep = srv.stats()
            each: dict[int, tuple[float, dict[str, object]]] = {max(budgets): (wall_alone, s_alone)}
            if a.each_alone:
                for b in budgets:
                    if b in each:
                        continue
                    srv.reset()
                    t0 = time.perf_counter()
                    run_sweep([cfg(srv.base_url, tmp / f"alone-{b}", b, a.questions)], session)
                    each[b] = (time.perf_counter() - t0, srv.stats())
        finally:
            session.close()
    ok_alone = sum(i.get("episodes_planned", 0) - (i.get("failures") or {}).get("errors", 0) for i in alone)
    ok_sweep = sum(i.get("episodes_planned", 0) - (i.get("failures") or {}).get("errors", 0) for i in sweep)
    steps_alone, steps_sweep = sum(i.get("steps", 0) for i in alone), sum(i.get("steps", 0) for i in sweep)
    print(f"\nsweep overlap: livenews, {a.questions} questions per point, budgets {budgets}, latency scale {a.scale}, "
          f"cluster.concurrency={a.concurrency} (episodes in flight: {sweep[0].get('concurrency', {}).get('episodes_in_flight')})")
    print(f"{'run':<22}{'wall s':>8}{'episodes':>10}{'steps':>8}{'requests':>10}")
    print(f"{'largest point alone':<22}{wall_alone:>8.1f}{ok_alone:>10}{steps_alone:>8}{s_alone.get('requests', 0):>10}")
    print(f"{f'{len(budgets)}-point sweep':<22}{wall_sweep:>8.1f}{ok_sweep:>10}{steps_sweep:>8}{s_sweep.get('requests', 0):>10}")
    print("\nengine batch occupancy (share of the batch's slots in use, from the fake server; body: without "
          "the first and last 10% of the time)")
    print(f"{'run':<22}{'wall s':>8}{'whole':>8}{'body':>8}")
    for b in sorted(each):
        w, s = each[b]
        print(f"{f'agent.max_searches={b} alone':<22}{w:>8.1f}{float(s.get('batch_occupancy', 0)):>8.2f}"
              f"{float(s.get('batch_occupancy_body', 0)):>8.2f}")
    body = float(s_sweep.get("batch_occupancy_body", 0))
    print(f"{f'{len(budgets)}-point sweep':<22}{wall_sweep:>8.1f}{float(s_sweep.get('batch_occupancy', 0)):>8.2f}"
          f"{body:>8.2f}   (goal: body >= 0.9: {'met' if body >= 0.9 else 'MISSED'})")
    ratio = wall_sweep / wall_alone
    print(f"wall ratio sweep / largest alone: {ratio:.2f} (goal <= 1.3: {'met' if ratio <= 1.3 else 'MISSED'}); "
          f"the sweep did {steps_sweep / max(1, steps_alone):.2f}x the steps")


if __name__ == "__main__":
    main()
