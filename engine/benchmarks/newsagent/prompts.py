"""Prompts: the agent prompt of appendix B.1, the observation of section 3.2.1, the 2-step
turns, and the rephrase step of 3.2.3.

``SYSTEM_PROMPT`` is B.1 verbatim: parts I-V joined, without the box titles ("Agent Prompt
(Part I): Role and High-Level Instructions", ...). The paper presents the prompt "in modular
blocks for readability; together, these blocks constitute the full system prompt", so the
titles label the blocks of the figure and are not prompt text. It is the same for the 1-step and
2-step settings ("All models share the same prompt and the action schema"); the 2-step turns
say what to output in their user messages (``TWO_STEP_CHOOSE``, ``TWO_STEP_ARGS``).
``tests/benchmarks/newsagent/paper_b1_prompt.txt`` holds a transcription the tests compare
against word by word.

``agent.prompt_variant=extended`` restores this repo's earlier prompt: short section headers,
examples for remove and terminate (the paper gives none), and in 2-step mode a note appended to
the system prompt that explains the two turns.
"""

from __future__ import annotations

from typing import Sequence

from engine.benchmarks.newsagent.data import NewsTask
from engine.benchmarks.newsagent.environment import NewsEnvironment, Retrieved

PROMPT_VARIANTS = ("paper", "extended")

_ROLE = """You are a professional news reporter agent that builds a coherent news draft step by step using a strict Thought -> Action loop.

Your task is to construct the draft using only evidence retrieved from prior search observations. You must not introduce information not present in the observations."""

_PROTOCOL = """At each step, output only:
- Thought: your reasoning and plan for the next action.
- Action: exactly one action, formatted as JSON.

Do not output any Observation. The system will return the Observation after you submit your Action.

You must wait for the Observation before issuing the next Action. Only output JSON (start with '{' and end with '}')."""

_OUTPUT = """{
  "Thought": "<your reasoning>",
  "Action": "<search | insert | remove | terminate>",
  "query": {},
  "year": "",
  "month": "",
  "day": ""
}"""

_CONSTRAINTS = """- Only one action is allowed per step.
- Insert actions may only use objects returned by a prior search.
- All inserted content must exactly match retrieved objects.
- Remove actions may only target previously inserted content.
- Continue until issuing a terminate action."""

_SEARCH_INSERT = """1. search
 - Perform semantic search across the dataset.
 - Required fields: query, year, month, day
 - Example:
{
 "Thought": "Search for reactions to Sue Gray's report.",
 "Action": "search",
 "query": "Sue Gray report reaction",
 "year": "2022",
 "month": "01",
 "day": "31"
}
2. insert
 - Insert one retrieved object into the draft
 - Example:
{
 "Thought": "Insert a key quote",
 "Action": "insert",
 "obj": { "text": "Sue Gray's report criticized leadership at No.10." }
}"""

_REMOVE_TERMINATE = """3. remove
 - Remove a previously inserted object
4. terminate
 - End the task and finalize the draft"""

_REMOVE_TERMINATE_EXTENDED = """3. remove
 - Remove a previously inserted object
 - Example:
{
 "Thought": "This object is off-topic",
 "Action": "remove",
 "obj": { "text": "<the exact text of an object in the draft>" }
}
4. terminate
 - End the task and finalize the draft
 - Example:
{
 "Thought": "The draft covers the event and its background.",
 "Action": "terminate"
}"""

# The paper's B.1 prompt (the default).
SYSTEM_PROMPT = "\n\n".join([_ROLE, _PROTOCOL, _OUTPUT, _CONSTRAINTS, _SEARCH_INSERT + "\n" + _REMOVE_TERMINATE])

# prompt_variant=extended: headers and the remove/terminate examples (this repo's earlier prompt).
SYSTEM_PROMPT_EXTENDED = "\n\n".join([_ROLE, _PROTOCOL, "Action output:\n" + _OUTPUT,
                                       "Constraints:\n" + _CONSTRAINTS,
                                       "Available actions:\n" + _SEARCH_INSERT + "\n" + _REMOVE_TERMINATE_EXTENDED])

TWO_STEP_NOTE = """

This run uses the 2-step setting: first choose only the operation, as
{"Thought": "<your reasoning>", "Action": "<search | insert | remove | terminate>"}
and the system will then ask you for its content in a separate step."""

# The closing line of the observation: what to output this turn.
ONE_STEP_ASK = "Output your next action as one JSON object."
TWO_STEP_CHOOSE = ('Choose your next operation: output one JSON object with only "Thought" and "Action" '
                   '(search, insert, remove or terminate). The system will then ask you for its content '
                   '(query and date, or the object) in a separate step.')

TWO_STEP_ARGS = {
    "search": 'Give the search for your chosen action as JSON: {"query": "<keywords>", "year": "YYYY", "month": "MM", "day": "DD"}',
    "insert": 'Give the object to insert, copied exactly from the retrieved content, as JSON: {"obj": {"text": "<object text>"}}',
    "remove": 'Give the draft object to remove, copied exactly, as JSON: {"obj": {"text": "<object text>"}}',
}


def system_prompt(two_step: bool, variant: str = "paper") -> str:
    """The system prompt: the paper's in both settings, or the ``extended`` variant."""
    if variant == "paper":
        return SYSTEM_PROMPT
    if variant == "extended":
        return SYSTEM_PROMPT_EXTENDED + (TWO_STEP_NOTE if two_step else "")
    raise ValueError(f"unknown prompt variant {variant!r}; expected one of {PROMPT_VARIANTS}")


def _bullets(items: Sequence[str]) -> str:
    return "\n".join(f"- {t}" for t in items) if items else "(none)"


def observation(env: NewsEnvironment, max_retrieved: int, history_tail: int = 8, ask: str = ONE_STEP_ASK) -> str:
    """Task inputs first (a stable prefix for the server's prefix cache), then the state, then
    ``ask``: what to output this turn (``TWO_STEP_CHOOSE`` on a 2-step choose turn)."""
    t: NewsTask = env.task
    retrieved: list[Retrieved] = list(env.retrieved.values())[-max_retrieved:]
    hidden = len(env.retrieved) - len(retrieved)
    history = env.history[-history_tail:]
    return "\n".join([
        "## Task inputs",
        f"Title: {t.title}",
        f"Release date: {t.release_date.isoformat()}",
        "Firsthand information:",
        _bullets(t.firsthand),
        "",
        "## Retrieved content (objects returned by previous searches; insert copies one exactly)"
        + (f" [{hidden} older object(s) not shown]" if hidden else ""),
        _bullets([f'{{"text": "{r.text}"}} (dated {r.date.isoformat()})' for r in retrieved]),
        "",
        "## Draft state",
        _bullets([d.text for d in env.draft]),
        "",
        "## Previous actions",
        "\n".join(f"{i}. {h}" for i, h in enumerate(history, start=len(env.history) - len(history) + 1)) or "(none)",
        "",
        "## Operation message",
        env.last_message,
        f"Operations used: {env.counters.operations} of {env.max_operations}.",
        "",
        ask,
    ])


REPHRASE_SYSTEM = """You are a professional news editor. Turn the reporter's material into a publishable news article: a clear lead, logical paragraphs with transitions, attribution for quotes, and a short wrap-up. Use only facts stated in the material; do not add names, numbers, dates or claims that are not there. Output only the article text: no title line, no notes, no Markdown."""


def rephrase_prompt(task: NewsTask, draft: Sequence[str], feedback: Sequence[str] = ()) -> str:
    lines = [
        f"Title: {task.title}",
        f"Release date: {task.release_date.isoformat()}",
        "Firsthand information:",
        _bullets(task.firsthand),
        "Background from the reporter's draft:",
        _bullets(draft),
    ]
    if feedback:
        lines += ["", "Your previous version contained sentences that are not supported by this material; "
                  "rewrite without them or with only supported facts:", _bullets(feedback)]
    lines += ["", "Write the article."]
    return "\n".join(lines)


# JSON schemas for guided decoding (vLLM structured outputs), by setting.
_STR = {"type": "string"}
_OBJ = {"type": "object", "properties": {"text": _STR}, "required": ["text"]}
ONE_STEP_SCHEMA = {
    "type": "object",
    "properties": {"Thought": _STR, "Action": {"type": "string", "enum": ["search", "insert", "remove", "terminate"]},
                   "query": _STR, "year": _STR, "month": _STR, "day": _STR, "obj": _OBJ},
    "required": ["Thought", "Action"],
}
CHOOSE_SCHEMA = {
    "type": "object",
    "properties": {"Thought": _STR, "Action": {"type": "string", "enum": ["search", "insert", "remove", "terminate"]}},
    "required": ["Thought", "Action"],
}
ARGS_SCHEMA = {
    "search": {"type": "object", "properties": {"query": _STR, "year": _STR, "month": _STR, "day": _STR},
               "required": ["query", "year", "month", "day"]},
    "insert": {"type": "object", "properties": {"obj": _OBJ}, "required": ["obj"]},
    "remove": {"type": "object", "properties": {"obj": _OBJ}, "required": ["obj"]},
}
