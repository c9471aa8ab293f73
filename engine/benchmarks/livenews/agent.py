"""The figure-7 search agent: one action block per turn, budgets over individual queries and URLs.

Finish reasons (``FINISH_REASONS``): ``finish`` is the only one with an answer; every other one
fails the task, as the paper does ("If you exceed either budget, you will fail the task
instantly"; format violations "result in task failures").

* ``budget_exceeded``: a Search or Click whose items would take the total past the budget. The
  whole action is refused: a 3-query search with 2 searches left fails, nothing is searched.
* ``no_action_block``: a turn without an action block.
* ``malformed_action``: more than one block, no ``type:`` line, or an action without items.
* ``unknown_action``: a ``type`` other than Search, Click/Visit or Finish.
* ``max_turns``: the turn cap (``config.turn_cap``) reached without Finish. By default the cap is
  derived from the budgets with slack, so it never binds before them: every turn that continues
  spends budget, and a spent budget ends the episode as ``budget_exceeded`` or by Finish.
* ``generation_failure``: the server refused the request (e.g. the conversation outgrew the
  context window). Infrastructure failures (server down after retries) are not a result: they
  propagate and the episode is recorded as an error, so a re-run retries it.

A refused visit (a URL no earlier search returned, or a blocked domain) is answered with an
error message and still costs a click.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from engine.benchmarks.livenews import prompts
from engine.benchmarks.livenews.actions import parse_action_block
from engine.benchmarks.livenews.config import turn_cap
from engine.benchmarks.livenews.data import LiveQuestion
from engine.llm import RequestRejected
from engine.llm.actions import ParseError
from engine.protocol import EpisodeContext, EpisodeOutcome, dumps

FINISH_REASONS = ("finish", "budget_exceeded", "no_action_block", "malformed_action", "unknown_action",
                  "max_turns", "generation_failure")


@dataclass
class WebPolicy:
    """What the environment enforces for one question (from the benchmark config)."""
    blocked: list[str]
    after: dt.date | None
    before: dt.date | None          # exclusive
    results_per_query: int
    visit_max_tokens: int


@dataclass
class Tally:
    searches: int = 0
    visits: int = 0
    refused_visits: int = 0
    turns: int = 0
    returned: list[str] = field(default_factory=list)      # URLs searches returned, in order, unique
    visited: list[str] = field(default_factory=list)
    latest_result: dt.date | None = None


def _classify(err: ParseError) -> str:
    msg = str(err)
    if msg.startswith("no action block"):
        return "no_action_block"
    if msg.startswith("unknown action type"):
        return "unknown_action"
    return "malformed_action"


async def run_episode(q: LiveQuestion, policy: WebPolicy, ctx: EpisodeContext) -> EpisodeOutcome:
    cfg = ctx.agent
    search_mode = cfg.mode == "search"
    system = prompts.system_prompt(cfg.max_searches, cfg.max_visits) if search_mode else prompts.no_search_prompt()
    messages = [{"role": "system", "content": system},
                {"role": "user", "content": prompts.question_turn(q.question, q.event_date.isoformat()
                                                                   if cfg.tell_date else None)}]
    web = ctx.services.get("web") if search_mode else None
    t = Tally()
    answer, reason = "", "max_turns"
    max_turns = turn_cap(cfg)
    while t.turns < max_turns:
        t.turns += 1
        try:
            regex = None
            if cfg.guided_actions:
                regex = prompts.ACTION_REGEX if search_mode else prompts.FINISH_REGEX
            comp = await ctx.model.chat(messages, cfg.max_tokens_turn, seed=ctx.seed, regex=regex)
        except RequestRejected as e:
            ctx.record(turn="action", observation_chars=sum(len(m["content"]) for m in messages), raw_output="",
                       parsed_action="", result=f"generation failure: {e}", ok=False)
            reason = "generation_failure"
            break
        usage = dict(tokens_in=comp.prompt_tokens, tokens_out=comp.completion_tokens, latency_s=comp.latency_s)
        obs_chars = len(messages[-1]["content"])
        try:
            action = parse_action_block(comp.text)
        except ParseError as e:
            reason = _classify(e)
            cut = " (output cut at max_tokens_turn)" if comp.finish_reason == "length" else ""
            ctx.record(turn="action", observation_chars=obs_chars, raw_output=comp.text, parsed_action="",
                       result=f"{reason}: {e}{cut}", ok=False, **usage)
            break
        parsed = dumps({"type": action.kind, "items": list(action.items)})
        if action.kind == "finish":
            answer, reason = action.items[0], "finish"
            ctx.record(turn="action", observation_chars=obs_chars, raw_output=comp.text, parsed_action=parsed,
                       result="finished", ok=True, **usage)
            break
        if not search_mode:
            reason = "unknown_action"     # no tools in no-search mode
            ctx.record(turn="action", observation_chars=obs_chars, raw_output=comp.text, parsed_action=parsed,
                       result=f"{action.kind} is not available without search", ok=False, **usage)
            break
        assert web is not None          # search mode: the benchmark's web service
        used, cap, budget = ((t.searches, cfg.max_searches, "search") if action.kind == "search"
                             else (t.visits, cfg.max_visits, "click"))
        if used + len(action.items) > cap:
            reason = "budget_exceeded"
            ctx.record(turn="action", observation_chars=obs_chars, raw_output=comp.text, parsed_action=parsed,
                       result=f"{budget} budget exceeded: {used} used + {len(action.items)} > {cap}", ok=False,
                       **usage)
            break
        if action.kind == "search":
            t.searches += len(action.items)
            hits = await web.search(list(action.items), policy.results_per_query, policy.blocked,
                                    policy.after, policy.before)
            for qhits in hits:
                for h in qhits:
                    if h.url not in t.returned:
                        t.returned.append(h.url)
                    if h.date and (t.latest_result is None or h.date > t.latest_result):
                        t.latest_result = h.date
            observation = prompts.search_results([(query, [(h.title, h.url, h.snippet) for h in qh])
                                                  for query, qh in zip(action.items, hits)])
            result = f"{sum(len(h) for h in hits)} results"
        else:
            t.visits += len(action.items)
            pages, refused = [], 0
            for url in action.items:
                v = await web.visit(url, t.returned, policy.blocked, policy.visit_max_tokens)
                t.visited.append(url)
                refused += not v.ok
                pages.append(v.text)
            t.refused_visits += refused
            observation = "\n\n---\n\n".join(pages)
            result = f"{len(pages)} pages, {refused} refused"
        ctx.record(turn="action", observation_chars=obs_chars, raw_output=comp.text, parsed_action=parsed,
                   result=result, ok=True, **usage)
        messages += [{"role": "assistant", "content": comp.text}, {"role": "user", "content": observation}]
    extras: dict[str, Any] = {
        "question": q.question, "gold": q.answer, "cutoff": q.event_date.isoformat(),
        "source_domain": q.source_domain, "mode": cfg.mode, "max_searches": cfg.max_searches,
        "max_visits": cfg.max_visits, "n_searches": t.searches, "n_visits": t.visits,
        "n_refused_visits": t.refused_visits, "n_turns": t.turns, "returned_urls": t.returned,
        "visited_urls": t.visited, "latest_result_date": t.latest_result.isoformat() if t.latest_result else "",
    }
    return EpisodeOutcome(output=answer, finish_reason=reason, extras=extras)
