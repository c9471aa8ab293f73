"""Report generation: vanilla (chunked map-reduce) and agentic (a tool loop in a sandbox).

The paper prints no generation prompts; these are dateline's, kept short and stated here.

**Vanilla.** Sources become text (``sources.py``) and are packed into chunks that fit the
model's window with the map prompt and its answer. With one chunk the report is written in one
call. Otherwise each chunk is mapped to notes ("extract what the report needs, with exact
numbers"), and the notes are reduced into the report; when the notes themselves overflow the
window they are reduced in groups first (a tree). Input settings add parts to the final call:
T (instruction only, no sources), T+S, T+S+ToC (the table of contents), T+S+R* (the template).

**Agentic.** One JSON action per turn (guided decoding when ``agent.guided_json``):
``list_files``, ``grep``, ``read`` (a line range), ``python`` (a snippet run by the sandbox:
time, memory, no network, writes only inside the episode folder), ``write_report`` (the
Markdown report, figures referenced as ``figures/*.png``) and ``finish``. The episode ends on
finish, at ``agent.max_steps`` or past ``agent.max_episode_tokens`` (prompt + completion
tokens over all turns). Old tool outputs are elided first when the conversation outgrows the
window. Without a written report the episode's finish reason says so and its output is empty.

**Sampling.** Every call samples at ``agent.temperature`` (0.6, the paper's generation
temperature; null falls back to ``model.temperature``) with the attempt's seed (see
``AnalystBenchmark.run_episode``: an episode without a report is attempted again, up to
``agent.report_attempts`` times, each attempt with its own seed so it can turn out differently).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.benchmarks.analyst.data import AnalystTask, copy_sources
from engine.benchmarks.analyst.sources import chunk_sources, chunk_text, source_texts
from engine.inputs import fdtree
from engine.llm import RequestRejected
from engine.llm.actions import ParseError, first_json_object
from engine.protocol import EpisodeContext, dumps
from engine.sandbox import Limits, PathRefused, Sandbox, clip_list

SYSTEM = "You are a professional analyst who writes accurate, well-structured reports in Markdown."

MAP_PROMPT = """Task for the final report:
{instruction}

Below is one part of the source documents. Extract every fact, number, table row and named entity from it that the report needs, exactly as written (do not round numbers). Write concise bullet points. If nothing in this part is relevant, answer "Nothing relevant."

{chunk}"""

REDUCE_NOTES_PROMPT = """Task for the final report:
{instruction}

Merge these notes, taken from different parts of the source documents, into one set of bullet points. Keep every number and name exactly; drop duplicates.

{notes}"""

REPORT_PROMPT = """{instruction}
{extras}
Write the complete report in Markdown. Use tables where data is compared. For each chart, include a Markdown image with a descriptive caption as its alt text, like ![Caption](figures/name.png), and the Python (matplotlib) code that draws it. Use only information from the material below.

{material}"""

AGENT_PROMPT = """{instruction}
{extras}
Your working directory holds the source documents in sources/. Explore them, compute what the report needs with Python (pandas and matplotlib are available; save charts as PNG files under figures/), then write the report.

Answer every turn with exactly one JSON object, one of:
{{"tool": "list_files"}}
{{"tool": "grep", "pattern": "<regular expression>", "path": "<file or folder, optional>"}}
{{"tool": "read", "path": "<file>", "start": <first line>, "end": <last line>}}
{{"tool": "python", "code": "<a Python script; print what you need to see>"}}
{{"tool": "write_report", "content": "<the whole report in Markdown; reference charts as ![caption](figures/name.png)>"}}
{{"tool": "finish"}}

You have at most {max_steps} turns. Write the report before you finish."""

AGENT_SCHEMA = {
    "type": "object",
    "properties": {
        "tool": {"type": "string", "enum": ["list_files", "grep", "read", "python", "write_report", "finish"]},
        "pattern": {"type": "string"}, "path": {"type": "string"}, "start": {"type": "integer"},
        "end": {"type": "integer"}, "code": {"type": "string"}, "content": {"type": "string"},
    },
    "required": ["tool"],
}


def extras(task: AnalystTask, setting: str) -> str:
    parts = []
    if setting == "T+S+ToC" and task.toc:
        parts.append("\nThe report should follow this table of contents:\n" + task.toc.strip() + "\n")
    if setting == "T+S+R*" and task.template:
        parts.append("\nHere is a report written for another variant of this task; follow its structure and "
                     "style, not its numbers:\n<template>\n" + task.template.strip() + "\n</template>\n")
    return "".join(parts)


@dataclass
class Budget:
    """What fits the model's window: prompt tokens for a call with ``max_new`` new tokens."""
    context_tokens: int
    count: Callable[[str], int]
    margin: int = 64           # chat template and role tokens

    def room(self, fixed: str, max_new: int) -> int:
        return self.context_tokens - self.count(fixed) - max_new - self.margin


async def _call(ctx: EpisodeContext, turn: str, prompt: str, max_new: int, seed: int, **kw: Any) -> str:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]
    c = await ctx.model.chat(messages, max_new, seed=seed, temperature=ctx.agent.temperature, **kw)
    ctx.record(turn=turn, observation_chars=len(prompt), raw_output=c.text, parsed_action="", result=c.finish_reason,
               ok=True, tokens_in=c.prompt_tokens, tokens_out=c.completion_tokens, latency_s=c.latency_s)
    return c.text


async def vanilla(task: AnalystTask, ctx: EpisodeContext, budget: Budget,
                  seed: int | None = None) -> tuple[str, dict[str, Any]]:
    a = ctx.agent
    seed = ctx.seed if seed is None else seed
    info: dict[str, Any] = {"chunks": 0, "map_calls": 0, "reduce_calls": 0}
    extra = extras(task, a.setting)
    if a.setting == "T":
        report = await _call(ctx, "report", REPORT_PROMPT.format(instruction=task.instruction, extras=extra,
                                                                 material="(no source documents)"), a.report_max_tokens,
                             seed)
        return report, info
    srcs = source_texts(task.sources_dir, a.preview_rows, a.full_table_rows)
    frame = REPORT_PROMPT.format(instruction=task.instruction, extras=extra, material="")
    room = budget.room(frame, a.report_max_tokens)
    whole = chunk_sources(srcs, max(room, 1), budget.count) if room > 64 else []
    if len(whole) == 1:                       # everything fits: one call, no map step
        info["chunks"] = 1
        return await _call(ctx, "report", frame + whole[0], a.report_max_tokens, seed), info
    map_frame = MAP_PROMPT.format(instruction=task.instruction, chunk="")
    chunks = chunk_sources(srcs, budget.room(map_frame, a.map_max_tokens), budget.count)
    info["chunks"] = len(chunks)
    notes = []
    for ch in chunks:
        notes.append(await _call(ctx, "map", map_frame + ch, a.map_max_tokens, seed))
        info["map_calls"] += 1
    notes = [n for n in notes if "nothing relevant" not in n.lower()[:40]] or notes
    joined = "\n\n".join(notes)
    red_frame = REDUCE_NOTES_PROMPT.format(instruction=task.instruction, notes="")
    while budget.count(joined) > room and len(notes) > 1:   # tree-reduce notes until they fit
        groups = chunk_text(joined, budget.room(red_frame, a.map_max_tokens), budget.count)
        if len(groups) >= len(notes):          # no progress possible: cut, and say so in the record
            break
        notes = [await _call(ctx, "reduce", red_frame + g, a.map_max_tokens, seed) for g in groups]
        info["reduce_calls"] += len(groups)
        joined = "\n\n".join(notes)
    if budget.count(joined) > room:
        joined = chunk_text(joined, max(room, 1), budget.count)[0]
        info["notes_cut"] = True
    report = await _call(ctx, "report", frame + joined, a.report_max_tokens, seed)
    return report, info


# -- agentic ------------------------------------------------------------------------------------

GREP_BUDGET_S = 0.5          # a model-chosen pattern gets this long over all files (regex's timeout)
GREP_MAX_BYTES = 1 << 22     # per file


def _grep(box: Sandbox, pattern: str, under: str) -> str:
    """Lines matching ``pattern`` (``regex``, case-insensitive) in the folder's regular files,
    read without following links; the whole search gets ``GREP_BUDGET_S`` seconds (a pattern
    that backtracks catastrophically stops there instead of holding the worker)."""
    import regex

    try:
        pat = regex.compile(pattern, regex.IGNORECASE)
    except (regex.error, ValueError, OverflowError, RecursionError) as e:
        raise ValueError(f"not a regular expression: {e}") from e
    deadline = time.monotonic() + GREP_BUDGET_S
    files = box.files(under) if box.is_dir(under) else [under]
    hits: list[str] = []
    for f in files:
        for i, line in enumerate(box.read_text(f, GREP_MAX_BYTES).splitlines(), 1):
            left = deadline - time.monotonic()
            if left <= 0 or pat.search(line, timeout=left):
                if left <= 0:
                    raise TimeoutError(f"the pattern took over {GREP_BUDGET_S:g} s; use a simpler one")
                hits.append(f"{fdtree.show(f)}:{i}: {line[:200]}")
    return ("\n".join(hits[:60]) + (f"\n[{len(hits) - 60} more matches]" if len(hits) > 60 else "")
            if hits else "no matches")


def _observation(box: Sandbox, action: dict[str, Any], limit: int) -> tuple[str, bool]:
    tool = action.get("tool")
    try:
        if tool == "list_files":
            names = [fdtree.show(f) for f in box.files()]
            return clip_list(names, limit, "\n") if names else "(no files)", True
        if tool == "grep":
            return _grep(box, str(action.get("pattern", "")), str(action.get("path") or ".")), True
        if tool == "read":
            rel = str(action.get("path", ""))
            start = max(1, int(action.get("start", 1)))
            end = min(start + 999, int(action.get("end", start + 99)))       # a page, not the file
            lines, total = box.read_lines(rel, start, end)
            end = min(end, total)
            body = "\n".join(f"{i}: {line}" for i, line in enumerate(lines, start))
            return f"{rel} lines {start}-{end} of {total}\n{body}"[:limit], True
        if tool == "python":
            res = box.run_python(str(action.get("code", "")))
            return res.summary(limit), res.ok
        if tool == "write_report":
            content = str(action.get("content", ""))
            if not content.strip():
                return "error: empty report", False
            box.write_text("report.md", content)
            return f"report.md written ({len(content)} characters)", True
    except PathRefused as e:
        return f"error: {e}", False
    except (OSError, ValueError, TypeError, OverflowError, RecursionError, TimeoutError) as e:
        # OverflowError: "start": 1e400; a pattern regex cannot compile is a ValueError (_grep)
        return f"error: {type(e).__name__}: {e}", False
    return f"error: unknown tool {tool!r}", False


def _fit(messages: list[dict[str, str]], budget: Budget, max_new: int) -> None:
    """Elide the oldest tool outputs until the conversation fits the window."""
    total: Callable[[], int] = lambda: (sum(budget.count(m["content"]) for m in messages)  # noqa: E731
                                        + budget.margin * len(messages))
    for m in messages[2:]:
        if total() + max_new <= budget.context_tokens:
            return
        if m["role"] == "user" and not m["content"].startswith("[elided"):
            m["content"] = "[elided: an earlier tool output]"


def _fresh_folder(task: AnalystTask, workdir: Path, limits: Limits, isolation: str) -> Sandbox:
    """The episode's folder, made anew (a retried episode starts clean): the task's sources and an
    empty ``figures/``, nothing else: no reference, checklist or ToC file (the setting's ToC or
    template reaches the model in its prompt). Sources are copied without following links (a
    link, FIFO or device there is a DataError naming it: ``data.copy_sources``)."""
    box = Sandbox.fresh(workdir, limits, isolation)     # whatever an earlier attempt left: gone
    copy_sources(task.sources_dir, box.root / "sources")
    box.mkdir("figures")
    box.adopt()
    return box


async def agentic(task: AnalystTask, ctx: EpisodeContext, budget: Budget,
                  workdir: Path, seed: int | None = None) -> tuple[str, dict[str, Any]]:
    a = ctx.agent
    seed = ctx.seed if seed is None else seed
    box = await asyncio.to_thread(_fresh_folder, task, workdir,
                                  Limits(timeout_s=a.code_timeout_s, memory_mb=a.code_memory_mb,
                                         disk_mb=a.code_disk_mb, max_procs=a.code_max_procs), a.sandbox)
    prompt = AGENT_PROMPT.format(instruction=task.instruction, extras=extras(task, a.setting), max_steps=a.max_steps)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]
    info: dict[str, Any] = {"steps": 0, "code_runs": 0, "code_failures": 0, "parse_failures": 0,
                            "finish_reason": "step_cap", "isolation": box.isolation}
    used = 0
    while info["steps"] < a.max_steps:
        if used >= a.max_episode_tokens:
            info["finish_reason"] = "token_cap"
            break
        info["steps"] += 1
        _fit(messages, budget, a.max_tokens_action)
        try:
            c = await ctx.model.chat(messages, a.max_tokens_action, seed=seed, temperature=a.temperature,
                                   json_schema=AGENT_SCHEMA if a.guided_json else None)
        except RequestRejected as e:
            ctx.record(turn="action", observation_chars=0, raw_output="", parsed_action="",
                       result=f"generation failure: {e}", ok=False)
            info["finish_reason"] = "generation_failure"
            break
        used += c.prompt_tokens + c.completion_tokens
        usage = dict(tokens_in=c.prompt_tokens, tokens_out=c.completion_tokens, latency_s=c.latency_s)
        try:
            action = first_json_object(c.text)
        except ParseError as e:
            info["parse_failures"] += 1
            obs, ok, parsed = f"error: your answer must be one JSON object ({e})", False, ""
        else:
            parsed = dumps(action)
            if action.get("tool") == "finish":
                ctx.record(turn="action", observation_chars=len(messages[-1]["content"]), raw_output=c.text,
                           parsed_action=parsed, result="finish", ok=True, **usage)
                info["finish_reason"] = "finish"
                break
            # file tools and snippets block (a snippet for up to code_timeout_s): a thread, so the
            # worker's other episodes keep going
            obs, ok = await asyncio.to_thread(_observation, box, action, a.observation_chars)
            if action.get("tool") == "python":
                info["code_runs"] += 1
                info["code_failures"] += not ok
        ctx.record(turn="action", observation_chars=len(messages[-1]["content"]), raw_output=c.text,
                   parsed_action=parsed, result=obs[:2000], ok=ok, **usage)
        messages += [{"role": "assistant", "content": c.text}, {"role": "user", "content": obs}]
    # what the snippets left is not trusted: read without following links, regular files only
    try:
        report = box.read_text("report.md", 1 << 22)
    except (OSError, PathRefused) as e:
        report = ""
        if not isinstance(e, FileNotFoundError):
            info["report_refused"] = str(e)
    if not report and info["finish_reason"] == "finish":
        info["finish_reason"] = "no_report"
    info["figures_written"] = ([fdtree.show(f) for f in box.files("figures") if f.endswith(".png")]
                               if box.is_dir("figures") else [])
    info["cgroup"] = box.cgroup_version
    box.close()
    return report, info

