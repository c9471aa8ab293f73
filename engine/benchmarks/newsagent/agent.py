"""One newsagent episode: the ReAct loop (1-step or 2-step), or the rule-based baseline,
then the rephrase step with its traceability check (section 3.2.3)."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from engine.benchmarks.newsagent import prompts
from engine.benchmarks.newsagent.data import NewsTask
from engine.benchmarks.newsagent.environment import (
    Action,
    NewsEnvironment,
    Retrieved,
    StepOutcome,
    parse_action,
    parse_arguments,
    parse_kind,
    split_sentences,
)
from engine.benchmarks.newsagent.metrics import episode_scores
from engine.llm import RequestRejected
from engine.llm.actions import ParseError, first_json_object
from engine.protocol import EpisodeContext, EpisodeOutcome, dumps

log = logging.getLogger(__name__)


def _search_fn(ctx: EpisodeContext) -> Callable[[str, dt.date], Awaitable[list[Retrieved]]]:
    async def search(query: str, before: dt.date) -> list[Retrieved]:
        assert ctx.index is not None        # newsagent's corpus is indexed
        hits = (await ctx.index.search([query], [before], ctx.top_k, ctx.threshold))[0]
        return [Retrieved(h.doc_id, h.text, h.date, h.score) for h in hits]
    return search


def _record_outcome(ctx: EpisodeContext, turn: str, obs: str, completion: Any, action: Action | None,
                    outcome: StepOutcome) -> None:
    ctx.record(turn=turn, observation_chars=len(obs), raw_output=completion.text if completion else "",
               parsed_action=dumps(action.as_dict()) if action else "", result=outcome.message, ok=outcome.ok,
               tokens_in=completion.prompt_tokens if completion else 0,
               tokens_out=completion.completion_tokens if completion else 0,
               latency_s=completion.latency_s if completion else 0.0)


async def _ask(env: NewsEnvironment, ctx: EpisodeContext, system: str, schema: dict[str, Any],
               ask: str = prompts.ONE_STEP_ASK) -> tuple[str, list[dict[str, str]], Any]:
    """One model turn on the current observation (closed by ``ask``, what to output this turn);
    the schema applies when guided_json is on."""
    cfg = ctx.agent
    obs = prompts.observation(env, cfg.max_retrieved_in_observation, ask=ask)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": obs}]
    comp = await ctx.model.chat(messages, cfg.max_tokens_action, json_schema=schema if cfg.guided_json else None)
    return obs, messages, comp


async def _one_step_turn(env: NewsEnvironment, ctx: EpisodeContext, system: str) -> None:
    obs, _, comp = await _ask(env, ctx, system, prompts.ONE_STEP_SCHEMA)
    try:
        action = parse_action(comp.text)
    except ParseError as e:
        _record_outcome(ctx, "action", obs, comp, None, env.invalid(str(e)))
        return
    _record_outcome(ctx, "action", obs, comp, action, await env.step(action))


async def _two_step_turn(env: NewsEnvironment, ctx: EpisodeContext, system: str) -> None:
    cfg = ctx.agent
    obs, messages, comp = await _ask(env, ctx, system, prompts.CHOOSE_SCHEMA, ask=prompts.TWO_STEP_CHOOSE)
    try:
        kind = parse_kind(first_json_object(comp.text))
    except ParseError as e:
        _record_outcome(ctx, "choose", obs, comp, None, env.invalid(str(e)))
        return
    if kind == "terminate":
        action = Action("terminate")
        _record_outcome(ctx, "choose", obs, comp, action, await env.step(action))
        return
    ask = prompts.TWO_STEP_ARGS[kind]
    ctx.record(turn="choose", observation_chars=len(obs), raw_output=comp.text, parsed_action=dumps({"Action": kind}),
               result="chose " + kind, ok=True, tokens_in=comp.prompt_tokens, tokens_out=comp.completion_tokens,
               latency_s=comp.latency_s)
    messages += [{"role": "assistant", "content": comp.text}, {"role": "user", "content": ask}]
    comp2 = await ctx.model.chat(messages, cfg.max_tokens_action,
                               json_schema=prompts.ARGS_SCHEMA[kind] if cfg.guided_json else None)
    try:
        action = parse_arguments(kind, first_json_object(comp2.text))
    except ParseError as e:
        _record_outcome(ctx, "arguments", ask, comp2, None, env.invalid(str(e)))
        return
    _record_outcome(ctx, "arguments", ask, comp2, action, await env.step(action))


async def _rule_based(env: NewsEnvironment, ctx: EpisodeContext) -> None:
    """The paper's mechanical lower bound: search the title, insert the top five results (by
    object id, so two hits of the same text are two objects, as in the search scores)."""
    search = Action("search", query=env.task.title)
    out = await env.step(search)
    _record_outcome(ctx, "baseline", "", None, search, out)
    for hit in out.hits[:5]:
        if env.done:
            break
        ins = Action("insert", text=hit.text, object_id=hit.object_id)
        _record_outcome(ctx, "baseline", "", None, ins, await env.step(ins))


async def _rephrase(task: NewsTask, draft: list[str], ctx: EpisodeContext) -> tuple[str, int, float]:
    """Rephrase with a traceability check; returns (article, attempts, untraceable share)."""
    cfg = ctx.agent
    evidence = list(task.firsthand) + draft
    index = ctx.index
    assert index is not None                # newsagent's corpus is indexed
    ev = await index.embed(evidence)
    best: tuple[str, float] | None = None
    feedback: list[str] = []
    attempts = 0
    for attempts in range(1, cfg.rephrase_attempts + 1):      # noqa: B007 (returned: how many were made)
        user = prompts.rephrase_prompt(task, draft, feedback)
        comp = await ctx.model.chat([{"role": "system", "content": prompts.REPHRASE_SYSTEM},
                                   {"role": "user", "content": user}], cfg.rephrase_max_tokens)
        sentences = split_sentences(comp.text)
        if sentences:
            sims = np.asarray(await index.embed(sentences)) @ np.asarray(ev).T
            untraced = [s for s, b in zip(sentences, sims.max(axis=1)) if not b > cfg.trace_threshold]
            share = len(untraced) / len(sentences)
        else:
            untraced, share = [], 1.0
        ctx.record(turn="rephrase", observation_chars=len(user), raw_output=comp.text, parsed_action="",
                   result=f"untraceable sentences: {len(untraced)}/{len(sentences)}",
                   ok=share <= cfg.trace_tolerance, tokens_in=comp.prompt_tokens,
                   tokens_out=comp.completion_tokens, latency_s=comp.latency_s)
        if best is None or share < best[1]:
            best = (comp.text.strip(), share)
        if share <= cfg.trace_tolerance:
            break
        feedback = untraced[:10]
    assert best is not None
    return best[0], attempts, best[1]


async def run_episode(task: NewsTask, ctx: EpisodeContext) -> EpisodeOutcome:
    cfg = ctx.agent
    env = NewsEnvironment(task, _search_fn(ctx), cfg.max_operations)
    turns = 0
    if cfg.mode == "rule-based":
        await _rule_based(env, ctx)
        finish = "baseline"
    else:
        system = prompts.system_prompt(two_step=cfg.mode == "2-step", variant=cfg.prompt_variant)
        turn = _two_step_turn if cfg.mode == "2-step" else _one_step_turn
        rejected = ""
        while not env.done and turns < cfg.max_turns:
            turns += 1
            try:
                await turn(env, ctx, system)
            except RequestRejected as e:
                # the server refused the turn (the prompt outgrew the context window): a property of
                # this episode, so a result (scored on the draft so far), not an infrastructure error
                rejected = str(e)
                ctx.record(turn="action", observation_chars=0, raw_output="", parsed_action="",
                           result=f"request rejected by the server: {rejected[:300]}", ok=False)
                break
        if rejected:
            finish = "request_rejected"
        elif env.counters.terminate:
            finish = "terminate"
        elif env.done:
            finish = "operation_cap"
        else:
            finish = "max_turns"
    draft = [d.text for d in env.draft]
    attempts, share = 0, float("nan")
    if cfg.mode == "rule-based" or not cfg.rephrase:
        # The baseline outputs its draft directly (firsthand material first, then what it inserted).
        article = "\n".join(list(task.firsthand) + draft)
    else:
        try:
            article, attempts, share = await _rephrase(task, draft, ctx)
        except RequestRejected as e:      # the draft is the article (as the baseline's), untraced
            ctx.record(turn="rephrase", observation_chars=0, raw_output="", parsed_action="",
                       result=f"request rejected by the server: {str(e)[:300]}", ok=False)
            article = "\n".join(list(task.firsthand) + draft)
    c = env.counters
    extras: dict[str, Any] = {
        "title": task.title, "release_date": task.release_date.isoformat(),
        "final_draft": draft, "draft_ids": env.draft_ids(), "retrieved_ids": env.retrieved_ids(),
        "reference_ids": list(task.reference_evidence),
        "n_search": c.search, "n_insert": c.insert, "n_remove": c.remove, "n_terminate": c.terminate,
        "n_failed_insert": c.failed_insert, "n_duplicate_insert": c.duplicate_insert, "n_failed_remove": c.failed_remove,
        "n_failed_parse": c.failed_parse, "n_empty_search": c.empty_search, "operations": c.operations,
        "rephrase_attempts": attempts, "trace_untraceable_share": share,
        "traceable": bool(attempts and share <= cfg.trace_tolerance),
        **episode_scores(env.retrieved_ids(), env.draft_ids(), list(task.reference_evidence)),
    }
    return EpisodeOutcome(output=article, finish_reason=finish, extras=extras)
