"""The LiveNewsBench pipeline's model stages (the paper's section 2; ``prompts/`` holds one file a
stage): the prompts each stage sends and how its answers are read.

* relevance (figure 5's structure), drafting (figure 6's structure): the generator, in the draft;
* answer (the verifier answers from the article alone), match (the livenews grader of section
  3.3 compares the two answers), adherence (the verifier checks the guidelines of section 2.2;
  a pair failing only ``stable`` goes to the longitudinal set): judge rounds on the verifier.

The prompts are our own words; where the paper prints one (figures 5 and 6) they follow its
structure: the same instructions in the same order, the same output format.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from engine.benchmarks.livenews.grader import GRADER_PROMPT, grader_prompt, parse_grade
from engine.build.protocol import Stage
from engine.identity import prompt_version

PROMPTS = Path(__file__).with_name("prompts")
# A folder whose <stage>.txt files replace the bundled prompts (read at import by every process of
# the job: ray_jobs/cluster/session.py passes it to the workers). A stage's version is its text's
# hash, so a changed file re-runs that stage and the stages after it, nothing before.
PROMPTS_ENV = "DATELINE_BUILD_PROMPTS"


def _text(name: str) -> str:
    own = os.environ.get(PROMPTS_ENV, "")
    path = Path(own) / f"{name}.txt" if own and (Path(own) / f"{name}.txt").is_file() else PROMPTS / f"{name}.txt"
    return path.read_text(encoding="utf-8")


RELEVANCE_PROMPT, DRAFT_PROMPT = _text("relevance"), _text("draft")
ANSWER_PROMPT, ADHERENCE_PROMPT = _text("answer"), _text("adherence")

INTAKE = Stage("intake", "", doc="articles read, in an allowed outlet and an event's window")
RELEVANCE = Stage("relevance", "generator", prompt_version(RELEVANCE_PROMPT), "the article reports the event (figure 5)")
DRAFT = Stage("draft", "generator", prompt_version(DRAFT_PROMPT), "one Q&A pair, or a skip (figure 6)")
ANSWER = Stage("answer", "verifier", prompt_version(ANSWER_PROMPT), "the verifier answers from the article alone")
MATCH = Stage("match", "verifier", prompt_version(GRADER_PROMPT), "the grader finds the two answers the same")
ADHERENCE = Stage("adherence", "verifier", prompt_version(ADHERENCE_PROMPT), "the pair follows every guideline")
DEDUPE = Stage("dedupe", "", doc="no near-duplicate of an earlier kept question")
SPLIT = Stage("split", "", doc="train / validation / test by event date (section 2.3)")
STAGES = (INTAKE, RELEVANCE, DRAFT, ANSWER, MATCH, ADHERENCE, DEDUPE, SPLIT)

RULES = ("from_article", "self_contained", "unambiguous", "not_self_answering", "short_answer",
         "not_known_before", "objective", "stable")
ADHERENCE_SCHEMA: dict[str, Any] = {
    "type": "object", "properties": {r: {"type": "boolean"} for r in RULES},
    "required": list(RULES), "additionalProperties": False}
NOT_ANSWERED = "N/A"
MAIN, LONGITUDINAL = "main", "longitudinal"        # the release's sets of kept pairs


def _fill(template: str, **values: str) -> str:
    out = template
    for k, v in values.items():
        out = out.replace("{" + k + "}", v)
    return out


def relevance_messages(summary: str, title: str, text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": _fill(RELEVANCE_PROMPT, summary=summary, title=title, text=text)}]


def draft_messages(title: str, text: str, knowledge_date: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": _fill(DRAFT_PROMPT, title=title, text=text, knowledge_date=knowledge_date)}]


def answer_messages(question: str, title: str, text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": _fill(ANSWER_PROMPT, question=question, title=title, text=text)}]


def match_messages(question: str, drafted: str, verified: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": grader_prompt(question, drafted, verified)}]


def adherence_messages(question: str, answer: str, title: str, text: str, knowledge_date: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": _fill(ADHERENCE_PROMPT, question=question, answer=answer, title=title,
                                              text=text, knowledge_date=knowledge_date)}]


_VERDICT = re.compile(r"answer\s*[:：]\s*\**\s*(yes|no)\b", re.IGNORECASE)


_BARE = re.compile(r"\W*(yes|no)\W*", re.IGNORECASE)


def parse_relevance(text: str) -> bool | None:
    """Figure 5's verdict: the last ``Answer: Yes`` / ``Answer: No`` in the reply, or a reply that is
    the word alone (``No``, ``**Yes.**``: the bundled 0.5B model answers so); None otherwise."""
    found = _VERDICT.findall(text or "")
    if found:
        return bool(found[-1].lower() == "yes")
    bare = _BARE.fullmatch((text or "").strip())
    return bool(bare.group(1).lower() == "yes") if bare else None


_FIELD = {"question": r"question", "answer": r"answer", "stability": r"temporal\s+stability", "explanation": r"explanation"}


def parse_draft(text: str) -> dict[str, str] | None:
    """Figure 6's output: ``{question, answer, stability, explanation}`` (the last block of those
    lines), ``{}`` for a skip (``Question: N/A``), None when there is no such block."""
    out: dict[str, str] = {}
    for key, label in _FIELD.items():
        # the value is on the label's line ([ \t], not \s: an empty "Question:" must not take the next line)
        found = re.findall(rf"^\W*{label}\W*?:[ \t]*(.*?)[ \t]*$", text or "", re.IGNORECASE | re.MULTILINE)
        if found:
            out[key] = found[-1].strip().strip("*").strip()
    if not out.get("question") or not out.get("answer"):
        return None
    if out["question"].upper().startswith(NOT_ANSWERED) or out["answer"].upper().startswith(NOT_ANSWERED):
        return {}
    return out


def parse_answer(text: str) -> str | None:
    """The verifier's answer: its first non-empty line; None for an empty reply."""
    lines = [ln.strip().strip("*").strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[0][:500] if lines else None


def parse_adherence(text: str) -> str | None:
    """The verifier's rule verdicts as canonical JSON (every rule a boolean); None otherwise."""
    m = re.search(r"\{.*\}", text or "", re.DOTALL)
    try:
        obj = json.loads(m.group(0)) if m else None
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or any(not isinstance(obj.get(r), bool) for r in RULES):
        return None
    return json.dumps({r: obj[r] for r in RULES}, sort_keys=True)


def parse_match(text: str) -> str | None:
    return parse_grade(text)
