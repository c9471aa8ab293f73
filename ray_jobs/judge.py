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
import logging
import time
from typing import Any, Callable

from engine.budget import BudgetExhausted, BudgetGate, current_gate
from engine.config import Config, JudgeConfig, ModelConfig
from engine.judges import JudgeIdentity, judge_identity
from engine.llm import Endpoint, GenerationError, Router, SamplingParams
from engine.protocol import JudgeRequest
from engine.storage import EpisodeStore

log = logging.getLogger("dateline.judge")
MAX_ROUNDS = 5
FLUSH_S = 30.0
MALFORMED = "malformed judge output"      # error prefix of a final failure (the judge answered badly)


def judge_endpoints(cfg: Any, hosted: Callable[[ModelConfig], list[Endpoint]]) -> list[Endpoint]:
    """The judge's endpoints: its own for ``openai_compatible``, else ``hosted(model)`` with the
    judge's hosted model (``judge.hosted_model``, or the run's own model when unset)."""
    j = cfg.judge
    if j.kind == "openai_compatible":
        return [Endpoint(j.base_url.rstrip("/"), j.model, j.api_key_env)]
    return hosted(j.hosted_model or cfg.model)


def settled(store: Any, judge_id: str, retry_failed_calls: bool = True) -> dict[str, dict[str, str | None]]:
    """The judgements that count as made: verdicts, and failures where the judge answered but
    never well-formed (final: asking again at temperature 0 gives the same). With
    ``retry_failed_calls``, judgements whose last attempt failed at the endpoint (timeout, server
    down) are left out, so the caller asks again: infrastructure failures are not verdicts."""
    done = store.judgements(judge_id)
    if not retry_failed_calls:
        return done
    last: dict[tuple[str, str], dict[str, Any]] = {}
    for r in store.judgement_rows():
        if r["judge"] == judge_id and not r["ok"]:
            k = (r["episode_id"], r["key"])
            if k not in last or r["batch_id"] > last[k]["batch_id"]:
                last[k] = r
    for (eid, key), r in last.items():
        if done.get(eid, {}).get(key, "") is None and not (r["error"] or "").startswith(MALFORMED):
            del done[eid][key]
    return done


def pending_requests(cfg: Config, bench: Any, store: EpisodeStore, config_hash: str,
                     judge_id: str, retry_failed_calls: bool = True) -> list[JudgeRequest]:
    """Requests whose answers are missing; several rows asking for the same task-level judgement
    (same episode_id and key) yield one request."""
    done = settled(store, judge_id, retry_failed_calls)
    out: dict[tuple[str, str], JudgeRequest] = {}
    for row in store.episodes().to_pylist():
        if row["config_hash"] != config_hash or row["status"] != "ok":
            continue
        for r in bench.judge_requests(row, done):
            if r.key not in done.get(r.episode_id, {}):
                out.setdefault((r.episode_id, r.key), r)
    return list(out.values())


async def judge_batch(requests: list[JudgeRequest], endpoints: list[Endpoint], j: JudgeConfig,
                      parse: Callable[[str, str], str | None], judge: JudgeIdentity,
                      flush: Callable[[list[dict[str, Any]]], Any], gate: BudgetGate | None = None
                      ) -> dict[str, Any]:
    """All ``requests`` in flight at once (bounded per endpoint); ``parse(key, text)`` turns an
    answer into the stored value or None (malformed: retried, then stored as a failure);
    results are handed to ``flush`` in shards of 64 (or after ``FLUSH_S``) and at the end."""
    # one client retry: a timed-out call is not worth repeating at once (it is asked again next run)
    # no waiting for a dead judge to come back: the call fails and the next stage run asks again
    router = Router(endpoints, SamplingParams(j.temperature, 1.0, None, j.request_timeout_s, 1), j.max_inflight,
                    reroute_wait_s=0.0)
    buf: list[dict[str, Any]] = []
    last_flush = [time.monotonic()]
    stats = {"requests": len(requests), "ok": 0, "failed": 0, "retried": 0, "tokens_in": 0, "tokens_out": 0,
             "budget_exhausted": 0}

    async def one(req: JudgeRequest) -> None:
        client = router.client_for(req.episode_id)
        row = {"episode_id": req.episode_id, **judge.columns(), "key": req.key, "value": None, "ok": False,
               "attempts": 0, "raw_output": "", "error": "", "tokens_in": 0, "tokens_out": 0, "latency_s": 0.0}
        for attempt in range(1, j.max_attempts + 1):
            row["attempts"] = attempt
            try:
                c = await client.chat(req.messages, req.max_tokens, json_schema=req.json_schema, seed=attempt - 1)
            except BudgetExhausted:           # the run's budget is spent: no row, the next run asks again
                client.close()
                stats["budget_exhausted"] += 1
                stats["tokens_in"] += row["tokens_in"]
                stats["tokens_out"] += row["tokens_out"]
                return
            except GenerationError as e:      # the endpoint failed, not the judge: the next stage run asks again
                row["error"] = str(e)
                break
            row["raw_output"] = c.text
            row["tokens_in"] += c.prompt_tokens
            row["tokens_out"] += c.completion_tokens
            row["latency_s"] += c.latency_s
            value = parse(req.key, c.text)
            if value is not None:
                row.update(value=value, ok=True, error="")
                break
            row["error"] = f"{MALFORMED}: {c.text[:200]!r}"
            stats["retried"] += attempt < j.max_attempts
        client.close()                      # no longer counts toward its replica's load
        stats["ok" if row["ok"] else "failed"] += 1
        stats["tokens_in"] += row["tokens_in"]
        stats["tokens_out"] += row["tokens_out"]
        buf.append(row)
        # a shard every 64 results, or every FLUSH_S on slow judges (long claim extractions),
        # so a killed stage loses little
        if len(buf) >= 64 or time.monotonic() - last_flush[0] >= FLUSH_S:
            flush(buf[:])
            buf.clear()
            last_flush[0] = time.monotonic()

    gated = current_gate.set(gate) if gate is not None else None      # every call reserves from the budget
    try:
        await asyncio.gather(*(one(r) for r in requests))
    finally:
        if gated is not None:
            current_gate.reset(gated)
        if buf:
            flush(buf[:])
        await router.close()
    return stats


def run_judge_stage(cfg: Config, bench: Any, store: EpisodeStore, config_hash: str,
                    endpoints: Callable[[ModelConfig], list[Endpoint]], gate: BudgetGate | None = None
                    ) -> dict[str, Any]:
    """Judge what is missing for this config. ``endpoints(model_config)`` returns a hosted
    judge's endpoints (so a hosted model is only started when something needs judging)."""
    if cfg.judge.kind == "none":
        return {"skipped": "judge.kind=none"}
    judge = judge_identity(cfg, getattr(bench, "judge_prompt_version", ""))
    judge_id = judge.id
    t0 = time.time()
    total: dict[str, Any] = {"judge": judge_id, "judge_model": judge.model, "requests": 0, "rounds": 0}
    eps: list[Endpoint] | None = None
    for i in range(MAX_ROUNDS):     # a round's answers may unlock the next round's requests
        # endpoint failures of earlier stages are asked again once, in the first round
        requests = pending_requests(cfg, bench, store, config_hash, judge_id, retry_failed_calls=i == 0)
        if not requests:
            break
        if eps is None:
            eps = judge_endpoints(cfg, endpoints)
        log.info("judge round %d: %d requests with %s", total["rounds"] + 1, len(requests), judge_id)
        stats = asyncio.run(judge_batch(requests, eps, cfg.judge, bench.parse_judgement, judge,
                                        store.write_judgements, gate))
        total["rounds"] += 1
        for k, v in stats.items():
            total[k] = total.get(k, 0) + v
        if stats["budget_exhausted"]:
            log.warning("judge stage: the run budget is spent; %d judgement(s) left for a later run",
                        stats["budget_exhausted"])
            break
    total["wall_s"] = round(time.time() - t0, 1)
    if total["rounds"]:
        log.info("judge stage: %d ok, %d failed in %d round(s), %.0f s", total["ok"], total["failed"],
                 total["rounds"], total["wall_s"])
    return total
