"""Harness headroom: steps/s and concurrent episodes dateline's episode harness sustains when the
model answers instantly, search included, and the driver's peak memory at 100k planned episodes.

    python perf/harness_headroom.py [--benchmarks newsagent,livenews] [--modes inprocess,ray]
        [--concurrency 100,500,2000] [--episodes-factor 2] [--workers 2] [--plan-episodes 100000]
    python perf/harness_headroom.py --concurrency 30 --min-episodes 60 --plan-episodes 5000   # quick

The defaults are the full measurement; newsagent's C=2000 level alone takes 6-11 min per mode on
2 cores (its MiniLM embeddings bound it), so pick benchmarks, modes and levels with the flags.

Goals (issue): >= 300 steps/s and >= 2,000 concurrent episodes on 2 cores with 0 errors; driver
peak memory <= 2 GB at 100k planned episodes.

What runs: an instant OpenAI-compatible server (``perf/_fake_server.py``, aiohttp on
loopback, its own process) answers every turn at once with a valid action: newsagent searches
(a firsthand sentence; after an empty result the title, ...), inserts the first retrieved object,
terminates and rephrases (~4.3 model steps, ~1.4 searches and 2 embedding calls per episode);
livenews searches the question, clicks the first result and finishes (3 model steps, 1 search
and 1 visit on the offline web). Episodes are the bundled sample tasks repeated (seed = episode
number). The same episodes run

* ``inprocess``: one :class:`engine.runtime.dispatch.EpisodeRunner` in this process (no Ray) with C
  asyncio lanes; the index is the index actor's own class (:class:`indexes.service.IndexService`:
  request batching, MiniLM + FAISS in a thread) built in-process, the web a ``LocalService``;
* ``ray``: ``start_workers`` worker actors (``--workers``, episodes_per_worker = C / workers),
  the real index actor (``start_index_service``: MiniLM embeddings of the sample corpus) and the
  livenews offline-web actor, driven like ``ray_jobs/run/dispatch_loop.py`` (refill on completion, ``ray.wait``);
* diagnostics, not the goal: ``inprocess-embcache`` / ``ray-embcache`` put the index's embedder
  behind a text cache (newsagent only), which shows what a step costs without MiniLM compute;
  ``--server-delay-ms`` makes the server wait per request, which shows how many episodes stay in
  flight when the CPU is not saturated; ``--index-cpus`` is ``index.num_cpus``.

Both write every result to a Parquet ``EpisodeStore`` (temporary folder) every 2 s, as the
driver does. A level runs ``episodes-factor x C`` episodes (at least ``--min-episodes``) after
a short warm-up. Reported per level: steps/s (model turns = StepRecords), episodes/s, max and
mean episodes in flight (from the rows' start/finish times: max overlap, and total episode time
/ wall), the mean delay from submission to start (Ray's queue), errors (status != ok), episodes
that did not end the scripted way, and CPU milliseconds per step by component (this process,
episode workers, index actor, web actor, server, the rest of Ray, and other work on the machine).

Driver memory: ``ray_jobs.run.plan()`` on a config with 22 tasks x ``run.num_seeds`` seeds (and,
separately, on a generated dataset of that many distinct tasks), then the driver's queue and a
Ray connection (``ray.init`` of a local cluster: the driver's core worker), in a fresh
subprocess that imports what the driver imports; peak RSS is the process's ``VmHWM``.
``--profile`` prints a cProfile of the in-process run at the highest concurrency.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import logging
import math
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _fake_server import FakeServer  # noqa: E402

log = logging.getLogger("harness_headroom")

STEPS_GOAL = 300.0
CONCURRENCY_GOAL = 2000
MEMORY_GOAL_MB = 2048.0
INTENDED = {"newsagent": "terminate", "livenews": "finish"}


@dataclass
class Bench:
    name: str
    cfg: Any                      # namespace with .benchmark and .agent, as the benchmark reads it
    impl: Any
    tasks: list[Any]
    docs: list[Any] = field(default_factory=list)
    services: list[Any] = field(default_factory=list)


@dataclass
class Result:
    bench: str
    mode: str
    concurrency: int
    episodes: int
    wall_s: float
    steps: int
    errors: int
    not_intended: int
    max_inflight: int
    mean_inflight: float
    cpu: dict[str, float]         # CPU seconds by component over the level (see CpuMeter)
    start_delay_s: float          # mean time from submission to the episode's start (Ray queueing)
    requests: int
    tools: str = ""               # mean tool calls per ok episode (what the scripted model did)
    first_error: str = ""

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.wall_s

    @property
    def episodes_per_s(self) -> float:
        return self.episodes / self.wall_s


def load_bench(name: str) -> Bench:
    from engine.benchmarks import get_benchmark

    impl = get_benchmark(name)
    cfg = SimpleNamespace(benchmark=impl.benchmark_schema(), agent=impl.agent_schema())
    return Bench(name, cfg, impl, impl.load_tasks(cfg), impl.corpus(cfg), impl.services(cfg))


def make_setup(b: Bench, base_url: str, inflight: int) -> Any:
    from engine.config import IndexConfig, to_plain
    from engine.llm import Endpoint, SamplingParams
    from engine.protocol import dumps
    from engine.runtime.dispatch import WorkerSetup, agent_json

    ic = IndexConfig()
    return WorkerSetup(benchmark=b.name, model_name="fake", agent=b.cfg.agent, agent_json=agent_json(b.cfg.agent),
                       endpoints=[Endpoint(base_url, "fake")], sampling=SamplingParams(0.0, 1.0, None, 600.0, 2),
                       inflight_per_replica=inflight, top_k=ic.top_k, threshold=ic.threshold, uses_model=True,
                       data_json=dumps(to_plain(b.cfg.benchmark)))


def make_specs(b: Bench, prefix: str, n: int) -> list[Any]:
    from engine.runtime.dispatch import EpisodeSpec

    return [EpisodeSpec(f"{prefix}-{i:08d}", "headroom", b.tasks[i % len(b.tasks)],
                        b.tasks[i % len(b.tasks)].task_id, i) for i in range(n)]


def inflight_stats(rows: list[dict[str, Any]], wall_s: float) -> tuple[int, float]:
    """Max overlap of the episodes' [started, finished] intervals, and mean episodes in flight."""
    events = []
    total = 0.0
    for r in rows:
        s, f = r["started_at"].timestamp(), r["finished_at"].timestamp()
        events += [(s, 1), (f, -1)]
        total += f - s
    cur = peak = 0
    for _, d in sorted(events, key=lambda e: (e[0], e[1])):
        cur += d
        peak = max(peak, cur)
    return peak, total / wall_s if wall_s > 0 else 0.0


class CpuMeter:
    """CPU seconds by component: this process (``driver``; in-process runs: the whole harness and
    the index), the fake ``server``, each Ray actor class (``EpisodeWorker``, ``IndexService``,
    ``WebService``), the rest of Ray (``ray other``: raylet, GCS, idle workers), and ``others``:
    everything else on the machine (other users' work competing for the 2 cores)."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid

    def _group(self, p: Any) -> str:
        if p.pid == os.getpid():
            return "driver"
        if p.pid == self.server_pid:
            return "server"
        try:
            name = (p.cmdline() or [p.name()])[0]
        except Exception:  # noqa: BLE001 - the process ended
            return "ray other"
        if name.startswith("ray::") and not name.startswith("ray::IDLE"):
            cls = name[5:].split(".")[0].split(" ")[0]
            if cls in ("EpisodeWorker", "IndexService", "WebService", "CachedIndexService"):
                return cls.replace("Cached", "")
        return "ray other"

    def snapshot(self) -> dict[str, float]:
        import psutil

        me = psutil.Process()
        out: dict[str, float] = {}
        for p in [me] + me.children(recursive=True):
            try:
                t = p.cpu_times()
                g = self._group(p)
            except psutil.Error:
                continue
            out[g] = out.get(g, 0.0) + t.user + t.system
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
        ticks = [int(x) for x in fields]
        busy = sum(ticks[:8]) - ticks[3] - ticks[4]            # not idle, not iowait
        out["machine"] = busy / os.sysconf("SC_CLK_TCK")
        return out

    @staticmethod
    def delta(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
        d = {k: b.get(k, 0.0) - a.get(k, 0.0) for k in set(a) | set(b)}
        d = {k: max(0.0, v) for k, v in d.items()}
        ours = sum(v for k, v in d.items() if k != "machine")
        d["others"] = max(0.0, d.pop("machine", 0.0) - ours)
        return d


def summarize(b: Bench, mode: str, c: int, rows: list[dict[str, Any]], wall: float, cpu: dict[str, float],
              server: FakeServer, delays: list[float] | None = None) -> Result:
    errors = [r for r in rows if r["status"] != "ok"]
    not_intended = sum(r["status"] == "ok" and r["finish_reason"] != INTENDED[b.name] for r in rows)
    peak, mean = inflight_stats(rows, wall)
    st = server.stats()
    ok = [r for r in rows if r["status"] == "ok"] or [{}]
    keys = {"newsagent": ("n_search", "n_insert"), "livenews": ("n_searches", "n_visits")}[b.name]
    tools = "/".join(f"{sum(r.get(k) or 0 for r in ok) / len(ok):.2f}" for k in keys)
    return Result(b.name, mode, c, len(rows), wall, sum(r["n_steps"] for r in rows), len(errors), not_intended,
                  peak, mean, cpu, sum(delays) / len(delays) if delays else 0.0, st["requests"], tools,
                  errors[0]["error"].splitlines()[0][:200] if errors else "")


class Flusher:
    """Buffers finished rows and writes them to the store at most every ``interval_s`` (run.py)."""

    def __init__(self, store: Any, interval_s: float = 2.0) -> None:
        self.store, self.interval_s = store, interval_s
        self.buf_e: list[dict[str, Any]] = []
        self.buf_s: list[dict[str, Any]] = []
        self.last = time.monotonic()

    def add(self, res: dict[str, Any]) -> None:
        self.buf_e.append(res["episode"])
        self.buf_s.extend(res["steps"])

    def maybe_flush(self, force: bool = False) -> None:
        if self.buf_e and (force or time.monotonic() - self.last >= self.interval_s):
            # write_batch stamps batch ids into the rows; the caller keeps its own copies
            self.store.write_batch([dict(r) for r in self.buf_e], self.buf_s)
            self.buf_e, self.buf_s, self.last = [], [], time.monotonic()


# -- in-process -----------------------------------------------------------------------------------
async def _lanes(runner: Any, specs: list[Any], concurrency: int, flusher: Flusher | None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    it = iter(specs)

    async def lane() -> None:
        for spec in it:
            res = await runner.run(spec)
            rows.append(res["episode"])
            if flusher is not None:
                flusher.add(res)
                flusher.maybe_flush()

    await asyncio.gather(*(lane() for _ in range(concurrency)))
    if flusher is not None:
        flusher.maybe_flush(force=True)
    return rows


class CachingEmbedder:
    """Diagnostic only (modes ``*-embcache``): the index's embedder with a text -> vector cache, to
    show how much of a newsagent step is MiniLM compute. In this benchmark every text repeats (the
    scripted model's queries and article are firsthand sentences), so it removes nearly all of it;
    a real model's rephrased sentences would still be embedded."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model_name, self.dim = inner.model_name, inner.dim
        self.cache: dict[str, Any] = {}

    def encode(self, texts: Any) -> Any:
        import numpy as np

        missing = list(dict.fromkeys(t for t in texts if t not in self.cache))
        if missing:
            for t, v in zip(missing, self.inner.encode(missing)):
                self.cache[t] = v
        return np.stack([self.cache[t] for t in texts]) if texts else self.inner.encode([])


def cached_index_service() -> type:
    """The index actor's class with :class:`CachingEmbedder` (diagnostic ``ray-embcache`` mode);
    made on demand so that importing this module stays light (the memory probe imports it)."""
    from indexes.service import IndexService

    class CachedIndexService(IndexService):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.local.embedder = CachingEmbedder(self.local.embedder)

    return CachedIndexService


def run_inprocess(b: Bench, server: FakeServer, levels: list[int], a: argparse.Namespace,
                  store_dir: Path, embcache: bool = False) -> list[Result]:
    from engine.runtime.dispatch import EpisodeRunner
    from engine.runtime.services import build_local
    from engine.storage import EpisodeStore
    from indexes.service import IndexService

    out: list[Result] = []
    meter = CpuMeter(server.proc.pid if server.proc else -1)
    mode = "inprocess" + ("-embcache" if embcache else "")

    async def go() -> None:
        index = None
        if b.docs:
            index = IndexService(b.docs, "all-MiniLM-L6-v2", "cpu", 256, embedding_cache())
            logging.getLogger().setLevel(logging.WARNING)     # IndexService sets INFO
            if embcache:
                index.local.embedder = CachingEmbedder(index.local.embedder)
        services = {s.name: build_local(s) for s in b.services}
        for c in levels:
            setup = make_setup(b, server.base_url, a.inflight)
            runner = EpisodeRunner(setup, index, "inprocess", services)
            await _lanes(runner, make_specs(b, f"warm{c}", min(c, 50)), min(c, 50), None)
            n = max(a.min_episodes, a.episodes_factor * c)
            specs = make_specs(b, f"in{c}", n)
            store = EpisodeStore(store_dir / f"{b.name}-in-{c}", b.impl.episode_fields)
            server.reset()
            cpu0, t0 = meter.snapshot(), time.perf_counter()
            prof = cProfile.Profile() if a.profile and c == levels[-1] and not embcache else None
            if prof:
                prof.enable()
            rows = await _lanes(runner, specs, c, Flusher(store))
            if prof:
                prof.disable()
            wall = time.perf_counter() - t0
            r = summarize(b, mode, c, rows, wall, meter.delta(cpu0, meter.snapshot()), server)
            log.info("%s inprocess C=%d: %.0f steps/s, %d errors", b.name, c, r.steps_per_s, r.errors)
            out.append(r)
            if prof:
                print_profile(prof, f"{b.name} in-process, C={c}")
            if runner.router is not None:
                await runner.router.close()

    asyncio.run(go())
    return out


def print_profile(prof: cProfile.Profile, title: str, n: int = 25) -> None:
    s = io.StringIO()
    ps = pstats.Stats(prof, stream=s)
    ps.sort_stats("tottime").print_stats(n)
    print(f"\n--- cProfile ({title}), top {n} by own time ---")
    print("\n".join(s.getvalue().splitlines()[:n + 12]))


def embedding_cache() -> str:
    from engine.hosting.prepare_model import cache_dir

    return str(cache_dir() / "embeddings")


# -- Ray --------------------------------------------------------------------------------------------
def run_ray(b: Bench, server: FakeServer, levels: list[int], a: argparse.Namespace, store_dir: Path,
            embcache: bool = False) -> list[Result]:
    import ray

    from engine.runtime.dispatch import start_workers
    from engine.runtime.services import start_actor
    from engine.storage import EpisodeStore
    from indexes.service import start_index_service

    if not ray.is_initialized():
        env = {"RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        ray.init(num_cpus=max(os.cpu_count() or 1, 4), include_dashboard=False, logging_level=logging.WARNING,
                 runtime_env={"env_vars": env}, log_to_driver=True)
    index = None
    if b.docs:
        if embcache:     # start_index_service's options, with the caching subclass
            index = ray.remote(cached_index_service()).options(num_cpus=a.index_cpus, num_gpus=0.0,
                                                               max_concurrency=1000).remote(
                b.docs, "all-MiniLM-L6-v2", "cpu", 256, embedding_cache())
        else:
            index = start_index_service(b.docs, "all-MiniLM-L6-v2", "cpu", 256, embedding_cache(), a.index_cpus, 0.0)
        log.info("index actor: %s", ray.get(index.ready.remote()))
    services = {s.name: start_actor(s) for s in b.services}
    out: list[Result] = []
    meter = CpuMeter(server.proc.pid if server.proc else -1)
    mode = "ray" + ("-embcache" if embcache else "")
    try:
        for c in levels:
            setup = make_setup(b, server.base_url, max(1, a.inflight // a.workers))
            per = math.ceil(c / a.workers)
            workers = start_workers(setup, index, a.workers, per, a.worker_cpus, services)
            ray.get([w.ping.remote() for w in workers])
            warm = make_specs(b, f"rwarm{c}", min(c, 50))
            ray.get([workers[i % len(workers)].run.remote(s) for i, s in enumerate(warm)])
            n = max(a.min_episodes, a.episodes_factor * c)
            specs = make_specs(b, f"ray{c}", n)
            flusher = Flusher(EpisodeStore(store_dir / f"{b.name}-ray-{c}", b.impl.episode_fields))
            server.reset()
            cpu0, t0 = meter.snapshot(), time.perf_counter()
            queue = list(reversed(specs))
            pending: dict[Any, tuple[int, float]] = {}
            rows: list[dict[str, Any]] = []
            delays: list[float] = []

            def submit(w: int) -> None:        # called in this iteration only
                if queue:  # noqa: B023
                    pending[workers[w].run.remote(queue.pop())] = (w, time.time())  # noqa: B023

            for _ in range(per):
                for w in range(len(workers)):
                    submit(w)
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0.5)
                for ref in ready:
                    w, t_sub = pending.pop(ref)
                    res = ray.get(ref)
                    rows.append(res["episode"])
                    delays.append(res["episode"]["started_at"].timestamp() - t_sub)
                    flusher.add(res)
                    submit(w)
                flusher.maybe_flush()
            flusher.maybe_flush(force=True)
            wall = time.perf_counter() - t0
            r = summarize(b, mode, c, rows, wall, meter.delta(cpu0, meter.snapshot()), server, delays)
            log.info("%s ray C=%d: %.0f steps/s, %d errors", b.name, c, r.steps_per_s, r.errors)
            out.append(r)
            for w in workers:
                ray.kill(w)
    finally:
        if index is not None:
            ray.kill(index)
        for h in services.values():
            ray.kill(h)
    return out


# -- driver memory ----------------------------------------------------------------------------------
def rss_mb(key: str = "VmRSS") -> float:
    """This process's resident set (``VmHWM``: its peak) in MB. Not ``getrusage().ru_maxrss``:
    Linux carries that over from the parent across fork + exec."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def memory_probe(kind: str, n: int) -> dict[str, Any]:
    """Runs in a fresh process: plan ``n`` episodes as the driver does and hold its queue."""
    import ray

    from engine.benchmarks.newsagent.config import NewsagentAgentConfig, NewsagentBenchmarkConfig
    from engine.config import Config, RunConfig
    from ray_jobs import run as driver

    tmp = Path(tempfile.mkdtemp(prefix="dateline-plan-"))
    try:
        sample = REPO / "engine/benchmarks/newsagent/sample_data"
        if kind == "seeds":
            n_tasks = sum(1 for _ in open(sample / "tasks.jsonl"))
            bench = NewsagentBenchmarkConfig(data_dir=str(sample))
            seeds = math.ceil(n / n_tasks)
        else:       # n distinct tasks: the sample's rows under new ids, one seed each
            data = tmp / "data"
            data.mkdir()
            shutil.copy(sample / "objects.jsonl", data / "objects.jsonl")
            rows = [json.loads(line) for line in open(sample / "tasks.jsonl")]
            with open(data / "tasks.jsonl", "w") as f:
                for i in range(n):
                    row = dict(rows[i % len(rows)], task_id=f"t{i:07d}")
                    f.write(json.dumps(row) + "\n")
            bench = NewsagentBenchmarkConfig(data_dir=str(data))
            seeds = 1
        cfg = Config(benchmark=bench, agent=NewsagentAgentConfig(), run=RunConfig(dir=str(tmp / "run"), num_seeds=seeds))
        base = rss_mb()
        t0 = time.perf_counter()
        p = driver.plan(cfg)
        queue = list(reversed(p.todo))          # what execute() holds
        plan_s = time.perf_counter() - t0
        after = rss_mb()
        # the driver then holds a Ray connection (its core worker lives in this process)
        ray.init(num_cpus=1, include_dashboard=False, logging_level=logging.WARNING)
        ray.get(ray.put(b"x" * 1024))
        connected = rss_mb()
        peak = rss_mb("VmHWM")
        ray.shutdown()
        return {"kind": kind, "episodes": len(queue), "tasks": len({s.task_id for s in p.specs}),
                "base_mb": base, "after_mb": after, "ray_mb": connected, "peak_mb": peak, "plan_s": plan_s}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def measure_memory(n: int) -> list[dict[str, Any]]:
    out = []
    for kind in ("seeds", "distinct"):
        env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
        p = subprocess.run([sys.executable, __file__, "--memory-probe", kind, "--plan-episodes", str(n)],
                           capture_output=True, text=True, env=env, cwd=str(REPO))
        if p.returncode != 0:
            raise RuntimeError(f"memory probe failed:\n{p.stderr[-3000:]}")
        out.append(json.loads(p.stdout.strip().splitlines()[-1]))
    return out


# -- report -----------------------------------------------------------------------------------------
COMPONENTS = ("driver", "EpisodeWorker", "IndexService", "WebService", "server", "ray other", "others")


def report(results: list[Result], mem: list[dict[str, Any]], n_plan: int, load: tuple[float, float]) -> None:
    print()
    hdr = (f"{'benchmark':<10}{'mode':<19}{'C':>6}{'episodes':>9}{'wall s':>8}{'steps':>8}{'steps/s':>9}"
           f"{'eps/s':>8}{'tools/ep':>10}{'max infl':>9}{'mean infl':>10}{'start dly':>10}{'errors':>7}{'other end':>10}")
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        print(f"{r.bench:<10}{r.mode:<19}{r.concurrency:>6}{r.episodes:>9}{r.wall_s:>8.1f}{r.steps:>8}"
              f"{r.steps_per_s:>9.0f}{r.episodes_per_s:>8.1f}{r.tools:>10}{r.max_inflight:>9}{r.mean_inflight:>10.0f}"
              f"{r.start_delay_s:>10.2f}{r.errors:>7}{r.not_intended:>10}")
    for r in results:
        if r.first_error:
            print(f"  first error ({r.bench} {r.mode} C={r.concurrency}): {r.first_error}")
    print("(steps: model turns; tools/ep: mean searches/inserts (newsagent) or searches/visits (livenews) per ok "
          "episode; max/mean infl: episodes in flight (max overlap of their run times; total run time / wall); "
          "start dly: mean s from submission to start (Ray's queue); other end: ok episodes that did not end "
          "as scripted)")
    if results:
        print()
        print("CPU ms per step by component (cores busy = CPU s / wall s); 'others' is work outside this benchmark:")
        hdr2 = f"{'benchmark':<10}{'mode':<19}{'C':>6}" + "".join(f"{c:>14}" for c in COMPONENTS) + f"{'cores busy':>12}"
        print(hdr2)
        for r in results:
            ms = [1000 * r.cpu.get(c, 0.0) / max(1, r.steps) for c in COMPONENTS]
            busy = sum(r.cpu.get(c, 0.0) for c in COMPONENTS if c != "others") / r.wall_s
            print(f"{r.bench:<10}{r.mode:<19}{r.concurrency:>6}" + "".join(f"{v:>14.2f}" for v in ms)
                  + f"{busy:>8.2f}+{r.cpu.get('others', 0.0) / r.wall_s:.2f}")
        print()
        print("against the goals (>= 300 steps/s and >= 2,000 concurrent episodes, 0 errors):")
        for key in sorted({(r.bench, r.mode) for r in results}):
            rs = [r for r in results if (r.bench, r.mode) == key]
            best = max(rs, key=lambda r: r.steps_per_s)
            top = max(rs, key=lambda r: r.concurrency)
            errs = sum(r.errors for r in rs)
            ok_steps = best.steps_per_s >= STEPS_GOAL
            ok_conc = top.max_inflight >= CONCURRENCY_GOAL and top.errors == 0
            print(f"  {key[0]:<10}{key[1]:<19} steps/s {best.steps_per_s:5.0f} (C={best.concurrency}) = "
                  f"{best.steps_per_s / STEPS_GOAL:4.2f}x goal [{'met' if ok_steps else 'MISSED'}]; "
                  f"concurrent {top.max_inflight:5d} (C={top.concurrency}, mean {top.mean_inflight:.0f}, "
                  f"{top.steps_per_s:.0f} steps/s) = {top.max_inflight / CONCURRENCY_GOAL:4.2f}x goal "
                  f"[{'met' if ok_conc else 'MISSED'}]; errors {errs} [{'met' if errs == 0 else 'MISSED'}]")
        print("  (*-embcache rows are a diagnostic, not the goal: the index's embedder behind a text cache)")
    if mem:
        print()
        print(f"driver memory, {n_plan:,} planned episodes (plan() + the run queue, then ray.init; fresh process):")
        for m in mem:
            what = ("22 sample tasks x seeds" if m["kind"] == "seeds" else f"{m['tasks']:,} distinct tasks")
            print(f"  {what:<26} {m['episodes']:>8,} specs: RSS {m['base_mb']:.0f} MB after imports -> "
                  f"{m['after_mb']:.0f} MB planned (+{m['after_mb'] - m['base_mb']:.0f} MB, plan {m['plan_s']:.1f} s) -> "
                  f"{m['ray_mb']:.0f} MB with ray.init; "
                  f"peak {m['peak_mb']:.0f} MB = {m['peak_mb'] / MEMORY_GOAL_MB:.2f}x the 2 GB goal "
                  f"[{'met' if m['peak_mb'] <= MEMORY_GOAL_MB else 'MISSED'}]")
    print()
    print(f"machine: {os.cpu_count()} cores; load average (1 min) {load[0]:.2f} at start, {load[1]:.2f} at end")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--benchmarks", default="newsagent,livenews")
    ap.add_argument("--modes", default="inprocess,ray",
                    help="inprocess, ray; diagnostics: inprocess-embcache, ray-embcache (newsagent only)")
    ap.add_argument("--concurrency", default="100,500,2000", help="concurrent episodes per level")
    ap.add_argument("--episodes-factor", type=int, default=2, help="episodes per level = factor x concurrency")
    ap.add_argument("--min-episodes", type=int, default=300)
    ap.add_argument("--workers", type=int, default=2, help="Ray episode worker actors")
    ap.add_argument("--worker-cpus", type=float, default=0.25, help="cluster.worker_num_cpus")
    ap.add_argument("--index-cpus", type=float, default=1.0,
                    help="index.num_cpus (Ray sets the actor's OMP/torch threads to it)")
    ap.add_argument("--inflight", type=int, default=64,
                    help="requests in flight to the server (model.max_inflight_per_replica; split over workers)")
    ap.add_argument("--server-delay-ms", type=float, default=0.0,
                    help="diagnostic: the server waits this long per request (0: instant, the goal's setting)")
    ap.add_argument("--plan-episodes", type=int, default=100_000)
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--profile", action="store_true", help="cProfile the in-process run at the top concurrency")
    ap.add_argument("--memory-probe", choices=("seeds", "distinct"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.memory_probe:
        print(json.dumps(memory_probe(a.memory_probe, a.plan_episodes)))
        return
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s %(name)s] %(message)s", datefmt="%H:%M:%S")
    for name in ("httpx", "httpx2", "openai", "faiss.loader", "sentence_transformers", "indexes.service"):
        logging.getLogger(name).setLevel(logging.WARNING)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    load0 = os.getloadavg()[0]
    levels = sorted(int(x) for x in a.concurrency.split(","))
    modes = [m for m in a.modes.split(",") if m]
    results: list[Result] = []
    store_dir = Path(tempfile.mkdtemp(prefix="dateline-headroom-"))
    try:
        with FakeServer(delay_ms=a.server_delay_ms) as server:
            log.info("fake server at %s (delay %g ms)", server.base_url, a.server_delay_ms)
            for name in a.benchmarks.split(","):
                b = load_bench(name)
                log.info("%s: %d tasks, %d corpus documents, services %s", name, len(b.tasks), len(b.docs),
                         [s.name for s in b.services])
                for mode in modes:
                    embcache = mode.endswith("-embcache")
                    if embcache and not b.docs:
                        continue
                    if mode.startswith("inprocess"):
                        results += run_inprocess(b, server, levels, a, store_dir, embcache)
                    elif mode.startswith("ray"):
                        results += run_ray(b, server, levels, a, store_dir, embcache)
                    else:
                        raise SystemExit(f"unknown mode {mode!r}")
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)
        try:
            import ray

            if ray.is_initialized():
                ray.shutdown()
        except ImportError:
            pass
    mem = [] if a.skip_memory else measure_memory(a.plan_episodes)
    if a.server_delay_ms:
        print(f"\nNOTE: the server waited {a.server_delay_ms:g} ms per request (diagnostic; the goals assume 0)")
    report(results, mem, a.plan_episodes, (load0, os.getloadavg()[0]))


if __name__ == "__main__":
    main()
