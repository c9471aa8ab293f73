"""The judge stage: after generation, every episode's judge requests go out as one batch.

Requests come from the benchmark (``judge_requests(row, judged)``), answers are parsed by it
(``parse_judgement``); a malformed answer is retried up to ``judge.max_attempts`` times, then
recorded as a failed judgement (value null), never guessed. A call that failed at the endpoint
(timeout, server down) is recorded too, and asked again by the next stage run. Results go to the
``judgements`` table in shards as they arrive, keyed by (episode, judge identity, key): a re-run judges only
what is missing, and a killed stage loses at most one shard's worth.

Batching is what makes this cheap: all requests are in flight at once up to the judge's
``max_inflight`` per endpoint, so a hosted vLLM judge runs them in large decode batches and
reuses the shared prompt prefix (the grader's instructions) from its prefix cache.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, TypeVar

from engine.budget import BudgetExhausted, BudgetGate, LedgerLost, current_gate
from engine.config import Config, JudgeConfig, ModelConfig, PairwiseConfig, judge_model_config
from engine.identity import evaluation_settings
from engine.llm import Endpoint, GenerationError, Router, SamplingParams, transcripts
from engine.protocol import Benchmark, JudgeRequest
from engine.scoring.judges import JudgeIdentity, judge_identity
from engine.storage import EpisodeStore, PairwiseStore

log = logging.getLogger("dateline.judge")
MAX_ROUNDS = 5
FLUSH_S = 30.0
MALFORMED = "malformed judge output"      # error prefix of a final failure (the judge answered badly)
_T = TypeVar("_T")


def judge_endpoints(cfg: Config | PairwiseConfig, hosted: Callable[[ModelConfig], list[Endpoint]]) -> list[Endpoint]:
    """The judge's endpoints: its own for ``openai_compatible``, else ``hosted(model)`` with the
    judge's hosted model (``judge.hosted_model``, or the run's own model when unset)."""
    j = cfg.judge
    if j.kind == "openai_compatible":
        return [Endpoint(j.base_url.rstrip("/"), j.model, j.api_key_env)]
    m = judge_model_config(cfg.model, j)
    if m is None:
        raise ValueError(f"judge.kind={j.kind!r} has no endpoints")
    return hosted(m)


def settled(store: EpisodeStore | PairwiseStore, judge_id: str,
            retry_failed_calls: bool = True) -> dict[str, dict[str, str | None]]:
    """The judgements that count as made: verdicts, and failures where the judge answered but
    never well-formed (final: asking again at temperature 0 gives the same). With
    ``retry_failed_calls``, judgements whose last attempt failed at the endpoint (timeout, server
    down) are left out, so the caller asks again: infrastructure failures are not verdicts."""
    done = store.judgements(judge_id)
    if not retry_failed_calls:
        return done
    last: dict[tuple[str, str], dict[str, Any]] = {}
    for r in store.judgement_rows(["episode_id", "key", "batch_id", "error"], judge=judge_id, ok=False):
        k = (r["episode_id"], r["key"])
        if k not in last or r["batch_id"] > last[k]["batch_id"]:
            last[k] = r
    for (eid, key), r in last.items():
        if done.get(eid, {}).get(key, "") is None and not (r["error"] or "").startswith(MALFORMED):
            del done[eid][key]
    return done


def run_judge_identity(cfg: Config, bench: Benchmark[Any]) -> JudgeIdentity:
    """The identity a run's judge stage keys its judgements by: the judge, the benchmark's judge
    prompt version and its evaluation settings in ``cfg`` (a changed setting is a new judge: the
    next run judges again, never mixes)."""
    return judge_identity(cfg, getattr(bench, "judge_prompt_version", ""),
                          evaluation=evaluation_settings(cfg.benchmark, bench.evaluation_fields))


def pending_requests(cfg: Config, bench: Benchmark[Any], store: EpisodeStore, config_hash: str,
                     judge_id: str, retry_failed_calls: bool = True) -> list[JudgeRequest]:
    """Requests whose answers are missing; several rows asking for the same task-level judgement
    (same episode_id and key) yield one request. Rows are judged under ``cfg``'s evaluation
    settings (``row["evaluation"]``), not those they were generated under."""
    done = settled(store, judge_id, retry_failed_calls)
    out: dict[tuple[str, str], JudgeRequest] = {}
    evaluation = evaluation_settings(cfg.benchmark, bench.evaluation_fields)
    for row in store.episodes(config_hash=config_hash, ok_only=True).to_pylist():
        row["evaluation"] = evaluation
        for r in bench.judge_requests(row, done):
            if r.key not in done.get(r.episode_id, {}):
                out.setdefault((r.episode_id, r.key), r)
    return list(out.values())


class JudgeCaller:
    """Makes judge calls for one judge and hands the result rows to ``flush`` in shards: a
    malformed answer is retried up to ``judge.max_attempts`` times, then recorded as a failure;
    an endpoint failure ends the call (recorded; the next stage run asks again); a call the budget
    refuses leaves no row (a later run asks again). Shared by the batch (``judge_batch``) and the
    streaming judge of a run (:class:`JudgeStream`)."""

    def __init__(self, endpoints: list[Endpoint], j: JudgeConfig, parse: Callable[[str, str], str | None],
                 judge: JudgeIdentity, flush: Callable[[list[dict[str, Any]]], Any], gate: BudgetGate | None = None,
                 max_inflight: int | None = None, config_hash: str = "") -> None:
        # one client retry: a timed-out call is not worth repeating at once (it is asked again next run)
        # no waiting for a dead judge to come back: the call fails and the next stage run asks again
        self.router = Router(endpoints, SamplingParams.for_judge(j),
                             max_inflight or j.max_inflight, reroute_wait_s=0.0)
        self.j, self.parse, self.judge, self._flush, self.gate = j, parse, judge, flush, gate
        self.config_hash = config_hash or None
        self.buf: list[dict[str, Any]] = []
        self.last_flush = time.monotonic()
        self.stats = {"requests": 0, "ok": 0, "failed": 0, "retried": 0, "tokens_in": 0, "tokens_out": 0,
                      "budget_exhausted": 0}

    async def call(self, req: JudgeRequest) -> dict[str, Any] | None:
        """Judge one request; returns its stored row (None: the budget refused it)."""
        j, stats = self.j, self.stats
        stats["requests"] += 1
        if self.gate is not None:
            current_gate.set(self.gate)       # this task's calls reserve from the budget
        client = self.router.client_for(req.episode_id)
        row: dict[str, Any] = {"episode_id": req.episode_id, **self.judge.columns(), "key": req.key, "value": None,
                               "ok": False, "attempts": 0, "raw_output": "", "error": "", "tokens_in": 0,
                               "tokens_out": 0, "latency_s": 0.0, "truncated": False,
                               "config_hash": self.config_hash}
        try:
            for attempt in range(1, j.max_attempts + 1):
                row["attempts"] = attempt
                try:
                    c = await client.chat(req.messages, req.max_tokens, json_schema=req.json_schema,
                                          seed=attempt - 1)
                except (BudgetExhausted, LedgerLost):    # spent, or its ledger lost: no row, the next run asks again
                    stats["budget_exhausted"] += 1
                    stats["tokens_in"] += row["tokens_in"]
                    stats["tokens_out"] += row["tokens_out"]
                    return None
                except GenerationError as e:  # the endpoint failed, not the judge: the next stage run asks again
                    row["error"] = str(e)
                    break
                row["raw_output"] = c.text
                row["truncated"] = c.finish_reason == "length"    # recorded per judgement (analyst reasoning cut short)
                row["tokens_in"] += c.prompt_tokens
                row["tokens_out"] += c.completion_tokens
                row["latency_s"] += c.latency_s
                value = self.parse(req.key, c.text)
                if value is not None:
                    row.update(value=value, ok=True, error="")
                    break
                row["error"] = f"{MALFORMED}: {c.text[:200]!r}"
                stats["retried"] += attempt < j.max_attempts
        finally:
            client.close()                  # no longer counts toward its replica's load
        # the judge's own transcript (its prompts and answers, every attempt), with the judgement
        row["_calls"], row["_messages"] = transcripts.rows(client.calls, req.episode_id, "judge", self.judge.id,
                                                           req.key)
        stats["ok" if row["ok"] else "failed"] += 1
        stats["tokens_in"] += row["tokens_in"]
        stats["tokens_out"] += row["tokens_out"]
        self.buf.append(row)
        # a shard every 64 results, or every FLUSH_S on slow judges (long claim extractions),
        # so a killed stage loses little
        if len(self.buf) >= 64 or time.monotonic() - self.last_flush >= FLUSH_S:
            self.flush()
        return row

    def flush(self) -> None:
        if self.buf:
            self._flush(self.buf[:])
            self.buf.clear()
        self.last_flush = time.monotonic()

    async def close(self) -> None:
        self.flush()
        await self.router.close()


async def judge_batch(requests: list[JudgeRequest], endpoints: list[Endpoint], j: JudgeConfig,
                      parse: Callable[[str, str], str | None], judge: JudgeIdentity,
                      flush: Callable[[list[dict[str, Any]]], Any], gate: BudgetGate | None = None,
                      config_hash: str = "") -> dict[str, Any]:
    """All ``requests`` in flight at once (bounded per endpoint); ``parse(key, text)`` turns an
    answer into the stored value or None (malformed: retried, then stored as a failure);
    results are handed to ``flush`` in shards of 64 (or after ``FLUSH_S``) and at the end."""
    caller = JudgeCaller(endpoints, j, parse, judge, flush, gate, config_hash=config_hash)
    try:
        await asyncio.gather(*(caller.call(r) for r in requests))
    finally:
        await caller.close()
    return caller.stats


class _Target:
    """What the stream judges for one configuration in one run dir."""

    def __init__(self, bench: Benchmark[Any], caller: JudgeCaller, done: dict[str, dict[str, str | None]],
                 rows_at_once: int, evaluation: dict[str, Any] | None = None,
                 builder: Executor | None = None) -> None:
        self.bench, self.caller, self.done = bench, caller, done
        # where judge requests are built: off the loop when given (an analyst round embeds its
        # claims with MiniLM for tens of ms; on the loop, no answer would be read meanwhile)
        self.builder = builder
        self.evaluation = evaluation or {}         # the run's evaluation settings (row["evaluation"])
        # episodes whose prompts exist at once: a backlog of finished episodes waits as rows, and
        # their (long, for analyst) judge prompts are built only when there is room to send them
        self.room = asyncio.Semaphore(rows_at_once)
        self.inflight: dict[tuple[str, str], asyncio.Future[Any]] = {}
        self.asked: set[tuple[str, str]] = set()    # asked in this stream (an endpoint failure is not asked twice)
        self.tasks: set[asyncio.Future[Any]] = set()
        self.stopped = False                        # the budget refused a call: nothing more is asked
        self.rows = 0
        self.errors = 0

    async def request(self, req: JudgeRequest) -> None:
        k = (req.episode_id, req.key)
        if k in self.inflight:              # a task-level judgement another episode asked for
            await asyncio.shield(self.inflight[k])
            return
        self.asked.add(k)
        fut: asyncio.Future[Any] = asyncio.ensure_future(self.caller.call(req))
        self.inflight[k] = fut
        try:
            row = await fut
        finally:
            del self.inflight[k]
        if row is None:
            self.stopped = True
        elif row["ok"] or row["error"].startswith(MALFORMED):
            self.done.setdefault(req.episode_id, {})[req.key] = row["value"]

    async def judge_row(self, row: dict[str, Any]) -> None:
        async with self.room:
            await self._judge_row(dict(row, evaluation=self.evaluation))

    async def _judge_row(self, row: dict[str, Any]) -> None:
        for _ in range(MAX_ROUNDS):         # an answer may unlock the next round's requests
            if self.stopped:
                return
            if self.builder is None:
                built = self.bench.judge_requests(row, self.done)
            else:
                built = await asyncio.get_running_loop().run_in_executor(
                    self.builder, self.bench.judge_requests, row, self.done)
            reqs = [r for r in built
                    if r.key not in self.done.get(r.episode_id, {}) and (r.episode_id, r.key) not in self.asked
                    or (r.episode_id, r.key) in self.inflight]
            if not reqs:
                return
            await asyncio.gather(*(self.request(r) for r in reqs))


def _done(t: _Target, f: asyncio.Future[Any], episode_id: str) -> None:
    t.tasks.discard(f)
    if not f.cancelled() and f.exception() is not None:     # a bug: say so, the run goes on
        t.errors += 1
        log.error("judging episode %s failed: %r", episode_id, f.exception())


class JudgeStream:
    """Judges episodes while generation runs: the driver hands each stored episode row to
    ``submit`` and the stream asks that episode's judge requests at once (the next round as soon
    as an answer unlocks it), in flight up to the judge's engine batch per endpoint, on an asyncio
    loop in a thread of its own. Task-level requests that several episodes share (same episode id
    and key) are asked once. Judgements go to a :class:`~engine.runtime.writer.StoreWriter` of the
    stream's own (one judgements shard per run dir per ``flush_s``, written off the loop).
    ``finish`` waits for everything submitted and returns each target's stats.

    Where it runs: in a judge actor (:class:`JudgeFleet`, ``judge.actors`` > 0: prompt building,
    claim embedding and the judge's HTTP traffic off the driver), or on a thread of the driver
    (``judge.actors=0``)."""

    def __init__(self, flush_s: float = 2.0) -> None:
        import threading

        from engine.runtime.writer import StoreWriter

        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="judge-stream", daemon=True)
        self._thread.start()
        self.writer = StoreWriter(flush_s, name="judge-writer")
        # judge requests are built here, one row at a time, while the loop reads answers
        self.builder = ThreadPoolExecutor(1, thread_name_prefix="judge-requests")
        self.targets: dict[str, _Target] = {}
        self.t0: dict[str, float] = {}
        self.received: dict[str, int] = {}

    def _run(self, coro: Coroutine[Any, Any, _T], timeout: float | None = None) -> _T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def add(self, key: str, cfg: Config, bench: Benchmark[Any], store: EpisodeStore, endpoints: list[Endpoint],
            gate: BudgetGate | None = None, max_inflight: int | None = None, config_hash: str = "") -> None:
        """Judge configuration ``key`` (stored in ``store``, ``config_hash`` in its judgement rows)
        with ``cfg.judge`` on ``endpoints``; what the store already settled for this judge is not
        asked again (endpoint failures of earlier runs are)."""
        judge = run_judge_identity(cfg, bench)
        done = settled(store, judge.id)
        evaluation = evaluation_settings(cfg.benchmark, bench.evaluation_fields)
        writer = self.writer

        async def make() -> None:
            caller = JudgeCaller(endpoints, cfg.judge, bench.parse_judgement, judge,
                                 functools.partial(writer.put_judgements, store), gate, max_inflight, config_hash)
            per_endpoint = max_inflight or cfg.judge.max_inflight
            self.targets[key] = _Target(bench, caller, done, 2 * per_endpoint * max(1, len(endpoints)), evaluation,
                                        self.builder)
        self._run(make())
        self.t0[key] = time.time()
        self.received[key] = 0

    def submit(self, key: str, rows: list[dict[str, Any]]) -> None:
        """Judge these episode rows (ok rows only; thread-safe, returns at once)."""
        def start() -> None:
            t = self.targets[key]
            self.received[key] += len(rows)
            for row in rows:
                if row.get("status") == "ok":
                    t.rows += 1
                    task = asyncio.ensure_future(t.judge_row(row))
                    t.tasks.add(task)
                    task.add_done_callback(functools.partial(_done, t, episode_id=row["episode_id"]))
        self.loop.call_soon_threadsafe(start)

    def finish(self, key: str, expect: int | None = None) -> dict[str, Any]:
        """Wait for everything submitted for ``key`` (at least ``expect`` rows, when another
        thread may still be handing them over), write its judgements, and return its stats."""
        async def drain() -> dict[str, Any]:
            while expect is not None and self.received.get(key, 0) < expect:
                await asyncio.sleep(0.02)
            t = self.targets.pop(key)
            while t.tasks:
                await asyncio.gather(*list(t.tasks), return_exceptions=True)
            await t.caller.close()
            return dict(t.caller.stats, judge=t.caller.judge.id, judge_model=t.caller.judge.model, episodes=t.rows,
                        errors=t.errors)
        self._run(asyncio.sleep(0))         # the submissions queued before this call have started
        stats = self._run(drain())
        self.writer.drain()                 # its judgements are stored when finish returns
        stats["wall_s"] = round(time.time() - self.t0.pop(key), 1)
        self.received.pop(key, None)
        if stats["budget_exhausted"]:
            log.warning("judge: the run budget is spent; %d judgement(s) left for a later run",
                        stats["budget_exhausted"])
        return stats

    def close(self) -> None:
        for key in list(self.targets):
            try:
                self.finish(key)
            except Exception as e:  # noqa: BLE001 - teardown goes on
                log.warning("judge stream %s: %s", key, e)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.builder.shutdown(wait=False)
        self.writer.close()
