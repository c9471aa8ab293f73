"""The driver's writes at sweep scale on S3: the old per-point synchronous flush in the dispatch
loop vs the background writer (engine/runtime/writer.py), side by side in one run.

    python perf/driver_scale.py                       # 32 points, 20,000 episodes
    python perf/driver_scale.py --episodes 100000     # the 100k case
    python perf/driver_scale.py --latency-ms 0        # moto without added latency

S3 is a moto server on loopback in this process (the WSGI app moto's ``ThreadedMotoServer``
serves, under werkzeug's threaded server) wrapped in a WSGI middleware that sleeps
``--latency-ms`` (default 40 ms) before every request and counts the requests; concurrent requests
wait concurrently, as on a real endpoint. Each side runs in a child process of its own (so each
peak RSS is its own) writing to a fresh prefix of the bucket.

Each child simulates the dispatch loop of ``ray_jobs/run/dispatch_loop.py``: ``--episodes`` analyst-
shaped episodes (the analyst benchmark's columns, a 2.5 KB report, 3 steps, one model call with
its prompt messages: about 8 KB of values each, as ``docs/design/transcripts.md`` measured)
finish at an even rate over ``--arrive-s`` seconds across ``--points`` points of one run dir. Every
50 ms an iteration takes the episodes that finished, buffers them per point, and then

* old: every ``--flush-s`` seconds writes, per point with rows, ``EpisodeStore.write_batch`` (calls,
  messages, steps, episodes shards; on S3 each a PUT, a server-side copy and a delete), in the
  loop: the old ``flush()`` closure as it was;
* new: hands each point's rows to ``StoreWriter.put`` (every iteration, as ``_dispatch`` now does);
  the writer thread writes one shard per table per run dir per flush (``--flush-s`` or 32 MiB).

Printed: the longest and p99 time one loop iteration spent in flush / hand-off (no worker slot is
refilled meanwhile), the longest iteration overall, the S3 requests of the writes (counted at the
fake endpoint, from the loop's start to the final flush's end) and per flush, the time spent
writing, the final flush, the wall time, the child's peak RSS; then new / old ratios. Both sides
read the store back at the end and must find every episode once.

Then compaction on the same S3 (``--compact-shards`` flushes of 10 episodes each, in two
prefixes): ``EpisodeStore.compact`` with its remote reads and deletes one object at a time (as
before) vs from its pool of threads.

Then the judge stage and the reduce (``--judge-episodes``, 0 skips): analyst episodes finish at
``--judge-rate`` per second into the real writer, which hands them, once stored, to
``--judge-actors`` judge actors (``ray_jobs.judging.fleet.JudgeFleet`` on a local Ray) that build the
analyst judge's real requests (``--criteria`` checklist criteria per task, claim extraction per
report chunk, 40 claims verified with MiniLM-retrieved evidence: 58 per episode by default)
against an instant fake judge (aiohttp, in a process of its own) and write the judgements
through their own writers to the same S3 run dir. Printed: generated vs judged episodes per
second, the dispatch loop's longest stall, the driver's peak RSS, S3 requests per flush; then
``reduce_metrics`` over that run dir in a child process (its time and peak RSS), twice: with
Arrow's default read-ahead (4 shards, 8 I/O threads: how remote reads went before) and as the
store reads a remote run dir now; both must give the same rows. On a 2-core machine the judge
actors, the fake judge, moto and the driver share the cores: this box judges about 5 analyst
episodes per second with one actor and 9 with two (``docs/design/driver.md``), so the judge
stage runs a few thousand episodes here, not 100,000 (5.8 M judge calls: over 3 hours at that
ceiling); ``perf/reduce_scale.py`` runs the reduce at 100,000.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import random
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

BUCKET = "dateline-perf"
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}


# -- the fake S3 endpoint ------------------------------------------------------------------------------
class Latency:
    """WSGI middleware: sleep ``delay_s`` before each request, count requests by method.
    ``GET /__stats`` answers the counts without delay (and is not counted)."""

    def __init__(self, app: Any, delay_s: float) -> None:
        self.app, self.delay_s = app, delay_s
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("PATH_INFO") == "/__stats":
            with self.lock:
                body = json.dumps(self.counts).encode()
            start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]
        with self.lock:
            m = environ.get("REQUEST_METHOD", "?")
            self.counts[m] = self.counts.get(m, 0) + 1
        if self.delay_s:
            time.sleep(self.delay_s)
        return self.app(environ, start_response)


def start_s3(delay_s: float) -> tuple[str, Any]:
    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    logging.getLogger("werkzeug").setLevel(logging.ERROR)          # no line per request
    server = make_server("127.0.0.1", port, Latency(DomainDispatcherApplication(create_backend_app), delay_s),
                         threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"127.0.0.1:{port}", server


def s3_requests(endpoint: str) -> dict[str, int]:
    """Requests the endpoint has answered so far, by HTTP method."""
    with urllib.request.urlopen(f"http://{endpoint}/__stats") as r:
        counts: dict[str, int] = json.loads(r.read())
        return counts


def peak_rss_mb() -> float:
    """This process's peak resident set (``VmHWM``) in MB. Not ``getrusage().ru_maxrss``: Linux
    carries that over from the parent across fork + exec, so a child of this script (whose moto
    holds every object written) would report the parent's size."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


# -- synthetic analyst episodes --------------------------------------------------------------------------
class Episodes:
    """Analyst-shaped finished episodes, generated as they 'finish' (fake values of realistic size)."""

    def __init__(self, points: int, seed: int = 0) -> None:
        rng = random.Random(seed)
        words = ["revenue", "growth", "quarter", "margin", "the", "of", "and", "table", "figure", "increase",
                 "decline", "segment", "2024", "2025", "per", "cent", "region", "cost", "analysis", "source"]
        words += [f"w{i}" for i in range(3000)]
        self.text = " ".join(rng.choices(words, k=400_000))       # ~2.6 MB to cut values from
        self.rng = rng
        self.points = [f"{rng.getrandbits(64):016x}" for _ in range(points)]
        self.agent = [json.dumps({"mode": "vanilla" if p % 2 else "agentic", "setting": "S", "max_steps": 8 + p,
                                  "context_tokens": 6000, "report_max_tokens": 1200, "code_memory_mb": 512,
                                  "report_attempts": 2, "observation_chars": 4000}) for p in range(points)]
        self.engine = json.dumps({"prompt": "a1b2c3d4e5f6", "weights": {"path": "/models/qwen2.5-7b-instruct",
                                  "fingerprint": "9f8e7d6c5b4a3210"}, "engine_args": {"dtype": "bfloat16",
                                  "max_model_len": 32768, "enable_prefix_caching": True}, "reproducible": False})
        self.system = {"message_id": "sys-analyst-v3", "role": "system", "content": self.cut(1800)}
        self.t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

    def cut(self, n: int) -> str:
        i = self.rng.randrange(0, len(self.text) - n)
        return self.text[i:i + n]

    def make(self, i: int) -> tuple[int, dict[str, Any], list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
        p = i % len(self.points)
        eid = f"{i:08x}{self.points[p][:8]}"
        report = self.cut(2500)
        row = dict(episode_id=eid, batch_id="", config_hash=self.points[p], benchmark="analyst",
                   task_id=f"task-{i // len(self.points):05d}", model="qwen2.5-7b-instruct", agent=self.agent[p],
                   data='{"name": "analyst", "folder": "data/analyst", "sources": "S"}', seed=0, status="ok",
                   error="", finish_reason="stop", output=report, n_steps=3, tokens_in=5200, tokens_out=640,
                   wall_time_s=41.5, started_at=self.t0, finished_at=self.t0, worker=f"worker-{i % 64}",
                   replica=i % 8, engine=self.engine, weights_id="qwen2.5-7b-instruct@9f8e7d6c5b4a3210",
                   mode="vanilla" if p % 2 else "agentic", setting="S", report_tokens=640, chunks=4, map_calls=4,
                   reduce_calls=1, steps=3, code_runs=2, code_failures=0, parse_failures=0, attempts=1,
                   figures_written=["fig1.png", "fig2.png"],
                   generation_info=json.dumps({"chunk_tokens": [1500, 1480, 1512, 900], "kept_sources": 12,
                                               "dropped_sources": 1, "notes": self.cut(200)}),
                   no_report_reason="")
        steps = [dict(episode_id=eid, step=s, turn="action", observation_chars=3800, raw_output=self.cut(400),
                      parsed_action='{"tool": "python", "code": "df.describe()"}', result=self.cut(120), ok=True,
                      tokens_in=1700, tokens_out=210, latency_s=3.2, call=s) for s in range(3)]
        user = {"message_id": f"u-{eid}", "role": "user", "content": self.cut(1500)}
        calls = [dict(episode_id=eid, purpose="episode", judge=None, key=None, call=0,
                      message_ids=[self.system["message_id"], user["message_id"]], completion=report,
                      finish_reason="stop", error=None, model="qwen2.5-7b-instruct", replica=i % 8,
                      endpoint="http://10.0.0.5:8000", params='{"max_tokens": 1200, "temperature": 0.0}',
                      tokens_in=5200, tokens_out=640, latency_s=38.0, started_at=self.t0)]
        return p, row, steps, calls, {self.system["message_id"]: self.system, user["message_id"]: user}


Buffers = dict[int, tuple[list[Any], list[Any], list[Any], dict[str, Any]]]


def buffer(bufs: Buffers, p: int, row: dict[str, Any], steps: list[Any], calls: list[Any], msgs: dict[str, Any]) -> None:
    """What the dispatch loop does per finished episode: its rows into its point's buffers."""
    b = bufs.setdefault(p, ([], [], [], {}))
    b[0].append(row)
    b[1].extend(steps)
    b[2].extend(calls)
    b[3].update(msgs)


def hand_off(writer: Any, stores: list[Any], bufs: Buffers) -> None:
    """The hand-off DispatchLoop.flush() (ray_jobs/run/dispatch_loop.py) does now: every point's buffered rows to the writer."""
    writer.check()
    for k, (eps, steps, calls, messages) in list(bufs.items()):
        if eps:
            writer.put(stores[k], eps, steps, calls, messages)
            bufs[k] = ([], [], [], {})


# -- one side (a child process) ------------------------------------------------------------------------------
def run_side(a: argparse.Namespace) -> dict[str, Any]:
    from engine.benchmarks.analyst import BENCHMARK
    from engine.runtime.writer import StoreWriter
    from engine.storage import EpisodeStore

    uri = f"s3://{BUCKET}/{a.prefix}?endpoint_override={a.endpoint}&scheme=http"
    gen = Episodes(a.points)
    # one store object per point, as plan_point makes them (each opens its own S3 filesystem)
    stores = [EpisodeStore(uri, BENCHMARK.episode_fields) for _ in range(a.points)]
    bufs: Buffers = {}
    stalls: list[float] = []
    iters: list[float] = []
    flushes = 0
    write_s = 0.0
    writer = StoreWriter(a.flush_s) if a.mode == "new" else None

    def old_flush() -> None:            # the dispatch loop's flush() before the writer
        nonlocal flushes
        wrote = False
        for k, (eps, steps, calls, messages) in list(bufs.items()):
            if not eps:
                continue
            stores[k].write_batch(eps, steps, calls, messages.values())
            bufs[k] = ([], [], [], {})
            wrote = True
        flushes += wrote

    req0 = s3_requests(a.endpoint)
    t0 = last_flush = time.monotonic()
    taken = 0
    while taken < a.episodes:
        it0 = time.monotonic()
        due = min(a.episodes, int((it0 - t0) / a.arrive_s * a.episodes))
        for i in range(taken, due):
            buffer(bufs, *gen.make(i))
        taken = due
        f0 = time.monotonic()
        if a.mode == "old":
            if f0 - last_flush >= a.flush_s or taken >= a.episodes:
                old_flush()
                last_flush = time.monotonic()
        else:
            assert writer is not None
            hand_off(writer, stores, bufs)
        f1 = time.monotonic()
        stalls.append(f1 - f0)
        if a.mode == "old":
            write_s += f1 - f0
        iters.append(f1 - it0)
        time.sleep(max(0.0, 0.05 - (time.monotonic() - it0)))      # ray.wait's poll between arrivals
    c0 = time.monotonic()
    if writer is not None:
        writer.close()
        flushes, write_s = writer.stats.flushes, writer.stats.write_s
    else:
        old_flush()
        write_s += time.monotonic() - c0
    final_s = time.monotonic() - c0
    wall = time.monotonic() - t0
    req1 = s3_requests(a.endpoint)
    by_method = {m: n - req0.get(m, 0) for m, n in sorted(req1.items()) if n - req0.get(m, 0)}
    rss_mb = peak_rss_mb()
    check = EpisodeStore(uri, BENCHMARK.episode_fields)
    ids = check.episodes(["episode_id"])["episode_id"].to_pylist()
    assert len(ids) == len(set(ids)) == a.episodes, f"{a.mode}: {len(ids)} episodes read back, {a.episodes} written"
    n_shards = len(check._files("episodes"))
    stalls.sort()
    return {"mode": a.mode, "max_stall_s": stalls[-1], "p99_stall_s": stalls[int(0.99 * (len(stalls) - 1))],
            "max_iter_s": max(iters), "iterations": len(iters), "requests": sum(by_method.values()), "by_method": by_method, "flushes": flushes,
            "episode_shards": n_shards, "write_s": write_s, "final_s": final_s, "wall_s": wall, "rss_mb": rss_mb}


# -- compaction on S3 ------------------------------------------------------------------------------------------
def compaction(endpoint: str, shards: int) -> list[tuple[str, float, int]]:
    """``shards`` flushes of 10 episodes (and their steps) into two prefixes, each compacted: one
    object at a time (as before) and from the pool; ``(how, seconds, requests)`` each."""
    from concurrent.futures import ThreadPoolExecutor

    from engine.benchmarks.analyst import BENCHMARK
    from engine.storage import EpisodeStore

    gen = Episodes(1, seed=1)
    out = []
    for how, threads in (("one at a time (before)", 1), (f"pool of {EpisodeStore.REMOTE_IO_THREADS}", 0)):
        store = EpisodeStore(f"s3://{BUCKET}/compact-{threads}?endpoint_override={endpoint}&scheme=http",
                             BENCHMARK.episode_fields)
        batches = [[gen.make(b * 10 + i) for i in range(10)] for b in range(shards)]
        with ThreadPoolExecutor(16) as ex:             # written in parallel: only the compaction is timed
            list(ex.map(lambda b: store.write_batch([e[1] for e in b], [s for e in b for s in e[2]]), batches))  # noqa: B023
        if threads:
            store.REMOTE_IO_THREADS = threads
        before = store.episodes(["episode_id"]).num_rows
        r0 = sum(s3_requests(endpoint).values())
        t0 = time.monotonic()
        store.compact()
        out.append((how, time.monotonic() - t0, sum(s3_requests(endpoint).values()) - r0))
        assert store.episodes(["episode_id"]).num_rows == before and len(store._files("episodes")) == 1
    return out


# -- the judge stage and the reduce ------------------------------------------------------------------------------
JUDGE_SERVER = r"""
import json, re, sys
from aiohttp import web

async def chat(req):
    body = await req.json()
    text = body["messages"][0]["content"]
    if "Evaluation criteria:" in text:
        out = "The criterion is mostly met, therefore, the rating is: 4"
    elif "atomic factual claims" in text:
        words = re.findall(r"[a-z0-9]+", text[-3000:])
        out = json.dumps({f"The report states {' '.join(words[i:i + 6])} (claim {i})": "quote" for i in range(24)})
    else:
        out = "SUPPORTED"
    n = len(text) // 4
    return web.json_response({"id": "x", "object": "chat.completion", "model": body.get("model", "grader"),
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": out}}],
        "usage": {"prompt_tokens": n, "completion_tokens": len(out) // 4, "total_tokens": n + len(out) // 4}})

app = web.Application(client_max_size=1 << 24)
app.router.add_post("/v1/chat/completions", chat)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


def serve_chat(source: str) -> tuple[subprocess.Popen[bytes], str]:
    """Run the fake chat server ``source`` (a script taking its port as its argument) in a process
    of its own; ``(process, base_url)`` once it answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-c", source, str(port)])
    base_url = f"http://127.0.0.1:{port}/v1"
    for _ in range(200):
        try:
            urllib.request.urlopen(f"{base_url}/chat/completions", timeout=1)
        except urllib.error.HTTPError:
            break                     # 405: it answers
        except OSError:
            time.sleep(0.05)
    return server, base_url


def judge_tasks(root: Path, n: int, criteria: int) -> Path:
    """``n`` analyst tasks (copies of the bundled unemployment brief, its sources included) with a
    checklist of ``criteria`` criteria each (the bundled 8, then rephrased repeats)."""
    import shutil

    src = REPO / "engine/benchmarks/analyst/sample_tasks/unemployment-brief"
    base = json.loads((src / "checklist.json").read_text())
    crit = [base[i % len(base)] if i < len(base) else base[i % len(base)].replace("The response should",
            f"The response (check {i}) should", 1) for i in range(criteria)]
    for t in range(n):
        d = root / f"brief-{t:03d}"
        shutil.copytree(src, d)
        task = json.loads((d / "task.json").read_text())
        (d / "task.json").write_text(json.dumps(dict(task, task_id=d.name)))
        (d / "checklist.json").write_text(json.dumps(crit))
    return root


def judge_side(a: argparse.Namespace) -> dict[str, Any]:
    """The dispatch loop with the judges: analyst episodes finish at ``--judge-rate`` per second
    into the real writer; once stored, the writer hands them to the judge actors (a JudgeFleet
    of ``--judge-actors``), whose judgements go through their own writers to the same S3 run dir.
    Measured: the loop's longest stall, generated and judged episodes per second, S3 requests."""
    import tempfile

    import ray

    from engine.benchmarks.analyst import BENCHMARK
    from engine.llm import Endpoint
    from engine.runtime.writer import StoreWriter
    from engine.storage import JUDGEMENT_SCHEMA, EpisodeStore
    from ray_jobs.config.compose import compose
    from ray_jobs.judging.fleet import JudgeFleet

    tmp = Path(tempfile.mkdtemp(prefix="dateline-judge-scale-"))
    tasks = judge_tasks(tmp / "tasks", a.judge_tasks, a.criteria)
    server, judge_url = serve_chat(JUDGE_SERVER)
    uri = f"s3://{BUCKET}/{a.prefix}?endpoint_override={a.endpoint}&scheme=http"
    gen = Episodes(a.points, seed=2)
    data = json.dumps({"name": "analyst", "tasks_dir": str(tasks), "checklists_dir": "", "max_claims": 40,
                       "claims_chunk_tokens": 1000, "evidence_k": 4})
    stores = [EpisodeStore(uri, BENCHMARK.episode_fields) for _ in range(a.points)]
    cfg = compose(["benchmark=analyst", "agent=analyst", f"benchmark.tasks_dir={tasks}", "judge=openai_compatible",
                   f"judge.base_url={judge_url}", "judge.model=grader", "judge.api_key_env=",
                   f"judge.max_inflight={a.judge_inflight}", "judge.max_attempts=1", f"judge.actors={a.judge_actors}"])
    ray.init(num_cpus=a.judge_actors + 1, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {k: v for k, v in os.environ.items() if k.startswith(("AWS_", "DATELINE_",
                                                                                              "HF_", "TRANSFORMERS_"))}})
    try:
        fleet = JudgeFleet(a.judge_actors, a.flush_s, num_cpus=1.0)
        keys = [f"point-{p}" for p in range(a.points)]
        for p, k in enumerate(keys):
            fleet.add(k, cfg, BENCHMARK, stores[p], [Endpoint(judge_url, "grader", "")], None,
                      a.judge_inflight, gen.points[p])
        by_hash = {h: k for h, k in zip(gen.points, keys)}

        first_stored: list[float] = []

        def written(store: Any, rows: list[dict[str, Any]]) -> None:
            if not first_stored:
                first_stored.append(time.monotonic())
            per: dict[str, list[dict[str, Any]]] = {}
            for r in rows:
                per.setdefault(by_hash[r["config_hash"]], []).append(r)
            for k, rs in per.items():
                fleet.submit(k, rs)

        writer = StoreWriter(a.flush_s, on_written=written)
        bufs: Buffers = {}
        stalls: list[float] = []
        req0 = s3_requests(a.endpoint)
        t0 = time.monotonic()
        taken = 0
        arrive_s = a.judge_episodes / a.judge_rate
        while taken < a.judge_episodes:
            it0 = time.monotonic()
            due = min(a.judge_episodes, int((it0 - t0) / arrive_s * a.judge_episodes))
            for i in range(taken, due):
                p, row, steps, calls, msgs = gen.make(i)
                row.update(data=data, task_id=f"brief-{(i // a.points) % a.judge_tasks:03d}",
                           output="# Brief\n\n" + "\n\n".join(gen.cut(1300) + "." for _ in range(6)))
                buffer(bufs, p, row, steps, calls, msgs)
            taken = due
            f0 = time.monotonic()
            hand_off(writer, stores, bufs)
            stalls.append(time.monotonic() - f0)
            time.sleep(max(0.0, 0.05 - (time.monotonic() - it0)))
        gen_s = time.monotonic() - t0
        writer.close()
        stats = [fleet.finish(k) for k in keys]
        judged_s = time.monotonic() - t0
        fleet.close()
        req1 = s3_requests(a.endpoint)
        rss_mb = peak_rss_mb()
        check = EpisodeStore(uri, BENCHMARK.episode_fields)
        n_j = check.read("judgements", JUDGEMENT_SCHEMA, ["episode_id"]).num_rows
        j_shards = len(check._files("judgements"))
        ok = sum(s["ok"] for s in stats)
        failed = sum(s["failed"] for s in stats)
    finally:
        ray.shutdown()
        server.terminate()
    requests = sum(req1.values()) - sum(req0.values())
    # generated: over the span episodes finished in; judged: from the first episode stored (the
    # judges get episodes only then) to the last judgement stored
    judging_s = judged_s - (first_stored[0] - t0)
    return {"episodes": a.judge_episodes, "gen_s": gen_s, "judged_s": judged_s, "gen_eps": a.judge_episodes / gen_s,
            "judged_eps": a.judge_episodes / judging_s, "judgements": n_j, "per_episode": n_j / a.judge_episodes,
            "ok": ok, "failed": failed, "max_stall_s": max(stalls), "rss_mb": rss_mb, "requests": requests,
            "flushes": writer.stats.flushes, "judgement_shards": j_shards, "tasks_dir": str(tasks)}


def reduce_side(a: argparse.Namespace) -> dict[str, Any]:
    """``reduce_metrics`` over the run dir the judge side wrote, in a process of its own (its peak
    RSS is the reduce's)."""
    import pyarrow as pa

    from engine.benchmarks.analyst import BENCHMARK
    from engine.storage import EpisodeStore
    from ray_jobs.run import reduce_metrics

    uri = f"s3://{BUCKET}/{a.prefix}?endpoint_override={a.endpoint}&scheme=http"
    rss0 = peak_rss_mb()
    # first as reads went before (Arrow's defaults: 4 shards ahead, 8 I/O threads), then as the
    # store reads a remote run dir now (EpisodeStore.REMOTE_READAHEAD); the store raises the
    # process's I/O pool, never lowers it, so the defaults go first
    pa.set_io_thread_count(8)
    before = EpisodeStore(uri, BENCHMARK.episode_fields)
    before.REMOTE_READAHEAD = 4
    t0 = time.monotonic()
    rows_before = reduce_metrics(before, "analyst")
    before_s = time.monotonic() - t0
    r0 = sum(s3_requests(a.endpoint).values())
    t0 = time.monotonic()
    rows = reduce_metrics(EpisodeStore(uri, BENCHMARK.episode_fields), "analyst")
    reduce_s = time.monotonic() - t0
    assert rows == rows_before
    return {"reduce_s": reduce_s, "reduce_before_s": before_s, "rss_mb": peak_rss_mb(),
            "requests": sum(s3_requests(a.endpoint).values()) - r0,
            "rss0_mb": rss0, "metric_rows": len(rows),
            "configs": len({r["config_hash"] for r in rows}),
            "n": sorted({r["n_scored"] for r in rows if r["scope"] == "all"})}


# -- the comparison ----------------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", type=int, default=32)
    ap.add_argument("--episodes", type=int, default=20_000)
    ap.add_argument("--arrive-s", type=float, default=40.0, help="episodes finish evenly over this many seconds")
    ap.add_argument("--flush-s", type=float, default=2.0, help="run.flush_interval_s")
    ap.add_argument("--latency-ms", type=float, default=40.0, help="added to every S3 request")
    ap.add_argument("--compact-shards", type=int, default=30,
                    help="flushes compacted on S3, one object at a time vs from the pool (0: skip)")
    ap.add_argument("--judge-episodes", type=int, default=2000,
                    help="analyst episodes through the writer, the judge actors and the reduce (0: skip)")
    ap.add_argument("--judge-rate", type=float, default=10.0, help="generated episodes per second, judge stage")
    ap.add_argument("--judge-actors", type=int, default=1, help="judge.actors")
    ap.add_argument("--judge-inflight", type=int, default=64, help="judge calls in flight per actor")
    ap.add_argument("--judge-points", type=int, default=8, help="configurations of the judge stage's run dir")
    ap.add_argument("--judge-tasks", type=int, default=16, help="analyst tasks the episodes are spread over")
    ap.add_argument("--criteria", type=int, default=15,
                    help="checklist criteria per task (15 + 2 claim extractions + 40 claims = 57 judgements)")
    ap.add_argument("--mode", choices=["old", "new", "judge", "reduce"], help=argparse.SUPPRESS)   # a child
    ap.add_argument("--endpoint", help=argparse.SUPPRESS)
    ap.add_argument("--prefix", help=argparse.SUPPRESS)
    a = ap.parse_args()
    os.environ.update(AWS_ENV)
    for k in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        os.environ.pop(k, None)
    if a.mode:
        side = {"judge": judge_side, "reduce": reduce_side}.get(a.mode, run_side)
        print(json.dumps(side(a)))
        return

    import pyarrow.fs as pafs

    endpoint, server = start_s3(a.latency_ms / 1000)
    fs = pafs.S3FileSystem(endpoint_override=endpoint, scheme="http", allow_bucket_creation=True)
    fs.create_dir(BUCKET)
    print(f"driver writes on S3 (moto + {a.latency_ms:.0f} ms per request): {a.points} points, {a.episodes} analyst "
          f"episodes finishing over {a.arrive_s:.0f} s, flush every {a.flush_s:g} s", flush=True)
    res = {}
    for mode in ("old", "new"):
        cmd = [sys.executable, __file__, "--mode", mode, "--endpoint", endpoint, "--prefix", f"run-{mode}",
               "--points", str(a.points), "--episodes", str(a.episodes), "--arrive-s", str(a.arrive_s),
               "--flush-s", str(a.flush_s)]
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
        if out.returncode:
            sys.exit(f"{mode} side failed:\n{out.stdout}\n{out.stderr}")
        res[mode] = json.loads(out.stdout.strip().splitlines()[-1])
        fs.delete_dir_contents(f"{BUCKET}/run-{mode}", missing_dir_ok=True)     # moto keeps objects in memory
    comp = compaction(endpoint, a.compact_shards) if a.compact_shards else []
    judge = red = None
    if a.judge_episodes:
        common = ["--endpoint", endpoint, "--prefix", "run-judge", "--flush-s", str(a.flush_s)]
        out = subprocess.run([sys.executable, __file__, "--mode", "judge", *common, "--points", str(a.judge_points),
                              "--judge-episodes", str(a.judge_episodes), "--judge-rate", str(a.judge_rate),
                              "--judge-actors", str(a.judge_actors), "--judge-inflight", str(a.judge_inflight),
                              "--judge-tasks", str(a.judge_tasks), "--criteria", str(a.criteria)],
                             capture_output=True, text=True, cwd=REPO)
        if out.returncode:
            sys.exit(f"judge side failed:\n{out.stdout[-3000:]}\n{out.stderr[-5000:]}")
        judge = json.loads(out.stdout.strip().splitlines()[-1])
        out = subprocess.run([sys.executable, __file__, "--mode", "reduce", *common], capture_output=True, text=True,
                             cwd=REPO)
        if out.returncode:
            sys.exit(f"reduce failed:\n{out.stdout[-3000:]}\n{out.stderr[-5000:]}")
        red = json.loads(out.stdout.strip().splitlines()[-1])
    server.shutdown()
    old, new = res["old"], res["new"]
    for r in (old, new):
        r["req_per_flush"] = r["requests"] / max(1, r["flushes"])
    rows = [("longest stall in flush / hand-off (s)", "max_stall_s", "{:.3f}"),
            ("p99 stall per loop iteration (s)", "p99_stall_s", "{:.4f}"),
            ("longest loop iteration (s)", "max_iter_s", "{:.3f}"),
            ("S3 requests (writes)", "requests", "{:.0f}"),
            ("flushes", "flushes", "{:.0f}"),
            ("S3 requests per flush", "req_per_flush", "{:.1f}"),
            ("episodes shards", "episode_shards", "{:.0f}"),
            ("time writing (s)", "write_s", "{:.1f}"),
            ("final flush (s)", "final_s", "{:.2f}"),
            ("wall (s)", "wall_s", "{:.1f}"),
            ("driver peak RSS (MB)", "rss_mb", "{:.0f}")]
    print(f"{'':40s}{'old (sync, per point)':>22s}{'new (writer)':>14s}{'new/old':>10s}")
    for label, k, fmt in rows:
        ratio = f"{new[k] / old[k]:.3f}" if old[k] >= 0.01 else "-"
        print(f"{label:40s}{fmt.format(old[k]):>22s}{fmt.format(new[k]):>14s}{ratio:>10s}")
    for r in (old, new):
        print(f"{r['mode']}: S3 requests by method {r['by_method']}")
    print(f"loop iterations: old {old['iterations']}, new {new['iterations']} (50 ms apart when nothing stalls); "
          f"both read back {a.episodes} episodes, each once")

    if comp:
        print(f"compaction of {a.compact_shards} flushes (episodes + steps shards) on the same S3:")
        for how, secs, reqs in comp:
            print(f"  {how:28s}{secs:8.1f} s {reqs:6d} requests")
        print(f"  pool / one at a time: {comp[1][1] / comp[0][1]:.3f}")
    if judge is not None and red is not None:
        j = judge
        print(f"judge stage: {j['episodes']} analyst episodes over {a.judge_points} points, {j['per_episode']:.1f} "
              f"judgements each ({j['judgements']} stored: {j['ok']} ok, {j['failed']} failed), "
              f"{a.judge_actors} judge actor(s), an instant fake judge")
        print(f"  generated episodes/s {j['gen_eps']:.2f}, judged episodes/s {j['judged_eps']:.2f} "
              f"(from the first stored to the last judged; all judged {j['judged_s'] - j['gen_s']:.1f} s after the "
              f"last finished): "
              f"judged / generated {j['judged_eps'] / j['gen_eps']:.3f}")
        print(f"  driver: longest dispatch stall {j['max_stall_s']:.3f} s, peak RSS {j['rss_mb']:.0f} MB; S3 requests "
              f"{j['requests']} for {j['flushes']} episode flushes and {j['judgement_shards']} judgement shards "
              f"({j['requests'] / max(1, j['flushes'] + j['judgement_shards']):.1f} per flush)")
        print(f"  reduce (one configuration at a time): {red['reduce_s']:.1f} s ({red['requests']} S3 requests), "
              f"peak RSS {red['rss_mb']:.0f} MB (after imports {red['rss0_mb']:.0f} MB), {red['metric_rows']} metric "
              f"rows for {red['configs']} configurations, n_scored {red['n']}")
        print(f"  the same reduce with Arrow's default read-ahead (4 shards, 8 I/O threads; before): "
              f"{red['reduce_before_s']:.1f} s; now / before {red['reduce_s'] / red['reduce_before_s']:.3f}")


if __name__ == "__main__":
    main()
