"""Checklists: one per task, built once, stored with the task, used by every system and judge.

The paper (section 4.1) prompts GPT-5.1 with the instruction, the reference report and its
excluded sections for 15 criteria (figure 15), and "the checklist is iteratively refined until
the reference document satisfies all criteria". Its footnote 12 rescored with another judge
"using the same fixed checklists": the rubric is part of the task, not of the judge. So a
checklist is never made inside a judge stage: ``dateline analyst-checklists`` builds the missing
ones with the configured judge model, the file records who built it, and every later run, system
and judge scores against that file (``AnalystTask.checklist``; criterion judgements are keyed by
its ``checklist_id``). A task that has a checklist is never rebuilt.

Build, per task (:func:`build_checklist`):

1. **Draft**: figure 15, parsed by ``scoring.parse_checklist`` (the first ``n_criteria`` items).
2. **Check**: the reference report is rated on each criterion with figure 16, the scoring
   prompt itself, so "the reference satisfies a criterion" means what scoring means by it: a
   rating of at least ``checklist_pass_rating`` (5 of 5 by default).
3. **Refine** each failing criterion with :data:`REFINE_PROMPT` (dateline's: the paper prints no
   refinement prompt), shown the reference, the criterion and the checker's reasoning; check the
   rewrite again. At most ``checklist_refine_rounds`` rounds.
4. Criteria the reference still fails are **dropped** (kept in the file under ``dropped`` with
   their last rating): they would mark the gold standard down. No criterion left, or a draft
   that never parses: the build **fails**; ``<checklist>.failed.json`` says why (the metrics
   report it as the reason the task's checklist score is missing) and a later build may retry.

Judge answers are retried ``judge.max_attempts`` times when malformed (as in the judge stage);
an endpoint failure aborts that task's build without writing anything (not the judge's fault).
A built file is created exclusively (never overwritten) and holds ``criteria``, ``generated_by``
(judge id, model, endpoint kind, temperature), ``prompt_version``, ``created_at``,
``reference_sha256``, ``dropped``, each criterion's ``history`` and the token ``usage``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import os
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.benchmarks.analyst import prompts, scoring
from engine.benchmarks.analyst.config import AnalystBenchmarkConfig
from engine.benchmarks.analyst.data import AnalystTask, checklist_target, failure_path, reference_sha256

REFINE_PROMPT = """You are refining one criterion of an evaluation checklist. (This prompt is dateline's: the paper refines its checklists "until the reference document satisfies all criteria" but does not print its refinement prompt.)

The checklist judges responses to this instruction:

{instruction}

The reference output document below is the gold standard: it must earn the top score, 5, on every criterion. A judge rated the reference document on the criterion below and gave it {rating}. The judge's reasoning:

<judge>
{judgement}
</judge>

Reference Output Document:

{ref_content}

{exclusion_text}

Criterion:

{criterion}

Rewrite the criterion so that the reference document fully satisfies it and earns a 5. Correct what the judge found missing or wrong in the criterion itself (for example a statistic, section name, chart or table format the reference document does not have); do not make it vague. It must stay specific, objective, checkable without access to the reference document (do not mention the reference document), and about one requirement only, with a 1-5 scoring scale.

Output only the revised criterion, formatted exactly as follows:

- The response should... (criteria description here)
 - 1: (scoring description here)
 - 2: (scoring description here)
 - 3: (scoring description here)
 - 4: (scoring description here)
 - 5: (scoring description here)"""

PROMPT_VERSION = "fig15+fig16+dateline-refine:" + hashlib.sha256(
    "\n".join((prompts.CHECKLIST_CREATION, prompts.CHECKLIST_EVALUATION, REFINE_PROMPT)).encode()).hexdigest()[:8]

# (messages, max_tokens, parse) -> (parsed value or None when malformed after retries, last raw answer)
Ask = Callable[[list[dict[str, str]], int, Callable[[str], Any]], Awaitable[tuple[Any, str]]]


class BuildFailed(Exception):
    def __init__(self, reason: str, raw: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.raw = raw


def _exclusion(task: AnalystTask) -> str:
    return (f"Excluded content (not derivable from the sources; do not write criteria about it):\n"
            f"{task.excluded.strip()}") if task.excluded.strip() else ""


def _user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def _one_criterion(text: str) -> str | None:
    items = scoring.parse_checklist(text)
    return items[0] if items and len(items) == 1 else None


@dataclass(eq=False)
class _Criterion:
    text: str
    history: list[dict[str, Any]] = field(default_factory=list)
    rating: int | None = None
    judgement: str = ""


async def build_checklist(task: AnalystTask, b: AnalystBenchmarkConfig, ask: Ask) -> dict[str, Any]:
    """Draft, check against the reference, refine (see the module docstring). Returns the file's
    content without ``generated_by`` / ``created_at``; raises :class:`BuildFailed`."""
    excl = _exclusion(task)
    draft_text = prompts.CHECKLIST_CREATION.format(instruction=task.instruction, ref_content=task.reference,
                                                   exclusion_text=excl, n_criteria=b.n_criteria)
    items, raw = await ask(_user(draft_text), b.checklist_max_tokens, scoring.parse_checklist)
    if not items:
        raise BuildFailed("malformed checklist draft (figure 15): no complete criterion with five scoring lines", raw)
    crits = [_Criterion(t, [{"draft": t}]) for t in items[: b.n_criteria]]

    async def check(c: _Criterion, round_: int) -> None:
        text = prompts.CHECKLIST_EVALUATION.format(instruction=task.instruction, response=task.reference,
                                                   criteria=c.text)
        c.rating, c.judgement = await ask(_user(text), b.judge_max_tokens, scoring.parse_rating)
        c.history.append({"round": round_, "reference_rating": c.rating})

    async def refine(c: _Criterion, round_: int) -> bool:
        text = REFINE_PROMPT.format(instruction=task.instruction, ref_content=task.reference, exclusion_text=excl,
                                    criterion=c.text, judgement=c.judgement.strip()[-3000:] or "(no answer)",
                                    rating=c.rating if c.rating is not None else "no readable rating")
        new, _ = await ask(_user(text), b.judge_max_tokens, _one_criterion)
        c.history.append({"round": round_, "refined": new})
        if new is None:
            return False
        c.text = new
        return True

    def failing() -> list[_Criterion]:
        return [c for c in crits if c.rating is None or c.rating < b.checklist_pass_rating]

    await asyncio.gather(*(check(c, 0) for c in crits))
    for round_ in range(1, b.checklist_refine_rounds + 1):
        todo = failing()
        if not todo:
            break
        refined = await asyncio.gather(*(refine(c, round_) for c in todo))
        await asyncio.gather(*(check(c, round_) for c, ok in zip(todo, refined) if ok))
    bad = failing()
    kept = [c for c in crits if c not in bad]
    if not kept:
        raise BuildFailed(f"the reference report reached {b.checklist_pass_rating}/5 on none of the "
                          f"{len(crits)} criteria after {b.checklist_refine_rounds} refinement round(s)")
    return {
        "task_id": task.task_id,
        "criteria": [c.text for c in kept],
        "prompt_version": PROMPT_VERSION,
        "reference_sha256": reference_sha256(task.reference),
        "settings": {"n_criteria": b.n_criteria, "refine_rounds": b.checklist_refine_rounds,
                     "pass_rating": b.checklist_pass_rating},
        "dropped": [{"criterion": c.text, "reference_rating": c.rating,
                     "reason": "the reference report fails it" if c.rating is not None else "no readable rating"}
                    for c in bad],
        "history": [c.history for c in crits],
    }


def _write_new(path: Path, obj: dict[str, Any]) -> bool:
    """Create ``path`` with ``obj`` unless it exists (atomic; False when someone else was first)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink()


@dataclass
class BuildResult:
    task_id: str
    status: str            # built | exists | failed | endpoint_error
    path: str
    detail: str = ""
    usage: dict[str, int] = field(default_factory=dict)


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


async def build_missing(tasks: Sequence[AnalystTask], b: AnalystBenchmarkConfig, client_for: Callable[[str], Any],
                        generated_by: dict[str, Any], max_attempts: int = 3,
                        checklists_dir: Path | None = None) -> list[BuildResult]:
    """Build the checklist of every task that has none, concurrently. ``client_for(name)`` gives a
    chat client (``engine.llm.ChatClient``) for the judge model; ``generated_by`` is recorded.
    Each task's file goes to :func:`data.checklist_target` (its folder, or ``checklists_dir``)."""
    from engine.llm import GenerationError

    async def one(task: AnalystTask) -> BuildResult:
        target = checklist_target(task.folder, task.task_id, task.reference, checklists_dir)
        if task.checklist:
            return BuildResult(task.task_id, "exists", task.checklist_origin.split(": ")[0])
        client = client_for(f"task:{task.task_id}")
        usage = {"calls": 0, "tokens_in": 0, "tokens_out": 0}

        async def ask(messages: list[dict[str, str]], max_tokens: int, parse: Callable[[str], Any]) -> tuple[Any, str]:
            text = ""
            for attempt in range(max_attempts):
                c = await client.chat(messages, max_tokens, seed=attempt)
                usage["calls"] += 1
                usage["tokens_in"] += c.prompt_tokens
                usage["tokens_out"] += c.completion_tokens
                text = c.text
                value = parse(text)
                if value is not None:
                    return value, text
            return None, text

        try:
            body = await build_checklist(task, b, ask)
        except GenerationError as e:
            return BuildResult(task.task_id, "endpoint_error", str(target), str(e), usage)
        except BuildFailed as e:
            fail = {"task_id": task.task_id, "reason": e.reason, "generated_by": generated_by,
                    "prompt_version": PROMPT_VERSION, "created_at": _now(), "raw_output_head": e.raw[:2000],
                    "usage": usage}
            path = failure_path(target)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(fail, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
            return BuildResult(task.task_id, "failed", str(path), e.reason, usage)
        out = {"task_id": body.pop("task_id"), "criteria": body.pop("criteria"), "generated_by": generated_by,
               "created_at": _now(), **body, "usage": usage}
        if not _write_new(target, out):
            return BuildResult(task.task_id, "exists", str(target), "built concurrently by another process", usage)
        failure_path(target).unlink(missing_ok=True)
        return BuildResult(task.task_id, "built", str(target),
                           f"{len(out['criteria'])} criteria, {len(out['dropped'])} dropped", usage)

    return list(await asyncio.gather(*(one(t) for t in tasks)))


def build(tasks: Sequence[AnalystTask], b: AnalystBenchmarkConfig, endpoints: Sequence[Any], judge: Any,
          generated_by: dict[str, Any]) -> list[BuildResult]:
    """:func:`build_missing` with the judge's endpoints and sampling (``judge``: a JudgeConfig),
    as the judge stage calls them (one client retry; malformed answers retried here), into
    ``b.checklists_dir`` (relative: from the working folder) or the task folders."""
    from engine.benchmarks.analyst import tasks_by_id
    from engine.inputs.paths import data_path
    from engine.llm import Router, SamplingParams

    async def go() -> list[BuildResult]:
        router = Router(list(endpoints), SamplingParams.for_judge(judge),
                        judge.max_inflight)
        try:
            return await build_missing(tasks, b, router.client_for, generated_by, judge.max_attempts,
                                       data_path(b.checklists_dir) if b.checklists_dir else None)
        finally:
            await router.close()

    try:
        return asyncio.run(go())
    finally:
        tasks_by_id.cache_clear()        # this process reads the new files from now on
