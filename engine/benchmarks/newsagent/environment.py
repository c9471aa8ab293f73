"""The newsagent environment (paper section 3.2): draft state, time-aware search, insert, remove.

Plain Python: the search backend is any async callable, so this runs against the Ray index
service, a local index, or a test double. Every Search/Insert/Remove, failed or not, counts
toward the operation cap (paper 4.1.3); unparseable actions count too, so a model that emits
garbage cannot loop forever.
"""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from engine.benchmarks.newsagent.data import NewsTask
from engine.llm.actions import ParseError, first_json_object, get_ci

ACTIONS = ("search", "insert", "remove", "terminate")


@dataclass(frozen=True)
class Retrieved:
    object_id: str
    text: str
    date: dt.date
    score: float


# (query, strictly-before date) -> hits, best first (top-k and threshold already applied).
SearchFn = Callable[[str, dt.date], Awaitable[list[Retrieved]]]


def normalize(text: str) -> str:
    """Text key for insert/remove: punctuation removed (not replaced by a space, so "Gray's"
    matches "Grays" and "No.10" matches "No10"; paper 4.1.3), whitespace folded, case kept.

    It only finds the candidates an action's text may name; objects are told apart, kept and
    scored by ``object_id`` (:meth:`NewsEnvironment.step`): two objects with the same key (the
    same sentence on two dates) are two objects."""
    no_punct = "".join(ch for ch in text if not unicodedata.category(ch).startswith("P"))
    return " ".join(no_punct.split())


@dataclass
class Action:
    kind: str                       # search | insert | remove | terminate
    thought: str = ""
    query: str = ""
    before: dt.date | None = None
    text: str = ""
    # insert/remove: an object named by id (the rule-based baseline; a model may add "id" to
    # "obj"), and a date that prefers, among objects of the same text, the one of that date
    object_id: str = ""
    date: dt.date | None = None

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"Action": self.kind}
        if self.kind == "search":
            d.update(query=self.query, before=self.before.isoformat() if self.before else None)
        elif self.kind in ("insert", "remove"):
            obj: dict[str, Any] = {"text": self.text}
            if self.object_id:
                obj["id"] = self.object_id
            if self.date is not None:
                obj["date"] = self.date.isoformat()
            d["obj"] = obj
        return d


# The error cases (i)-(iv) of section 3.2.1; the tests pin these texts.
MSG_SEARCH_EMPTY = "Error: search returned no results for query {query!r} before {before}. Try different keywords."
MSG_INSERT_UNKNOWN = ("Error: insert failed: the object is not among the retrieved search results. "
                      "Insert only objects returned by a prior search, copied exactly.")
MSG_REMOVE_UNKNOWN = ("Error: remove failed: the object is not in the current draft. "
                      "Remove only objects that are in the draft, copied exactly.")
MSG_INVALID = "Error: invalid action: {reason}. Output one JSON object with an \"Action\" of search, insert, remove or terminate."
MSG_SEARCH_OK = "Success: search returned {n} result(s) for query {query!r} before {before}."
MSG_INSERT_OK = "Success: inserted the object into the draft."
MSG_INSERT_DUP = "Success: the object is already in the draft; nothing changed."
MSG_REMOVE_OK = "Success: removed the object from the draft."
MSG_TERMINATE = "Terminated: the draft is final."
MSG_CAP = "Operation limit reached ({cap} operations): the draft is final."


def _parse_date(obj: dict[str, Any]) -> dt.date | None:
    """All three of year/month/day (the prompt's "Required fields"), or none (search up to the
    release date). A partial date such as a year alone is an invalid action (error iv), not
    1 January: guessing the missing parts would silently narrow the search."""
    y, m, d = (get_ci(obj, k) for k in ("year", "month", "day"))
    parts = [str(p).strip() if p is not None else "" for p in (y, m, d)]
    if not any(parts):
        return None
    where = f"year={parts[0]!r} month={parts[1]!r} day={parts[2]!r}"
    if not all(parts):
        raise ParseError(f"invalid search date {where}: give all of year, month and day, or none")
    try:
        return dt.date(int(parts[0]), int(parts[1]), int(parts[2]))
    except (ValueError, OverflowError):      # OverflowError: a year past a C int (dt.date raises it)
        raise ParseError(f"invalid search date {where}") from None


def _obj_target(obj: dict[str, Any]) -> tuple[str, str, dt.date | None]:
    """(text, object id, date) of an insert/remove: ``"obj": {"text": ...}`` as the prompt asks,
    optionally with ``"id"`` (or ``"object_id"``) naming a retrieved object, which then decides
    alone, and ``"date"`` (YYYY-MM-DD, as the observation shows it), which picks among objects of
    the same text; a date that does not parse is ignored (the prompt never asks for one)."""
    target = get_ci(obj, "obj", "object", "content", "text")
    object_id: Any = None
    date: Any = None
    if isinstance(target, dict):
        object_id = get_ci(target, "id", "object_id")
        date = get_ci(target, "date", "dated")
        target = get_ci(target, "text")
    object_id = object_id.strip() if isinstance(object_id, str) else ""
    text = target if isinstance(target, str) else ""
    if not text.strip() and not object_id:
        raise ParseError('insert/remove needs "obj": {"text": "..."}')
    when: dt.date | None = None
    if isinstance(date, str):
        try:
            when = dt.date.fromisoformat(date.strip()[:10])
        except ValueError:
            when = None
    return text, object_id, when


def parse_kind(obj: dict[str, Any]) -> str:
    kind = get_ci(obj, "Action", "action_type", "type")
    if not isinstance(kind, str) or kind.strip().lower() not in ACTIONS:
        raise ParseError(f"unknown action {kind!r}" if kind is not None else 'missing "Action" field')
    return kind.strip().lower()


def parse_arguments(kind: str, obj: dict[str, Any]) -> Action:
    thought = get_ci(obj, "Thought")
    action = Action(kind, thought=thought if isinstance(thought, str) else "")
    if kind == "search":
        query = get_ci(obj, "query", "keywords")
        if isinstance(query, dict):  # the paper's schema template shows "query": {}
            query = get_ci(query, "text", "query") or ""
        if not isinstance(query, str) or not query.strip():
            raise ParseError('search needs a non-empty "query"')
        action.query = query.strip()
        action.before = _parse_date(obj)
    elif kind in ("insert", "remove"):
        action.text, action.object_id, action.date = _obj_target(obj)
    return action


def parse_action(text: str) -> Action:
    """1-step: the whole action, arguments included, in one JSON object."""
    obj = first_json_object(text)
    return parse_arguments(parse_kind(obj), obj)


@dataclass
class Counters:
    search: int = 0                 # every search, empty ones included (also in empty_search)
    insert: int = 0                 # successful inserts: the object went into the draft
    remove: int = 0                 # successful removes
    terminate: int = 0
    empty_search: int = 0
    failed_insert: int = 0
    duplicate_insert: int = 0       # inserts of an object already in the draft: a no-op, not an insert
    failed_remove: int = 0
    failed_parse: int = 0

    @property
    def operations(self) -> int:
        """What the operation cap counts: every attempted search, insert and remove, failed, no-op
        or not, and every unparseable action. ``insert``/``remove`` count only the operations that
        changed the draft (Table 3's usage counts), so a duplicate insert is in ``duplicate_insert``
        (and the cap), not in ``insert``."""
        return (self.search + self.insert + self.failed_insert + self.duplicate_insert + self.remove
                + self.failed_remove + self.failed_parse)


@dataclass
class StepOutcome:
    ok: bool
    message: str
    hits: list[Retrieved] = field(default_factory=list)


class NewsEnvironment:
    def __init__(self, task: NewsTask, search: SearchFn, max_operations: int = 20) -> None:
        self.task = task
        self._search = search
        self.max_operations = max_operations
        self.draft: list[Retrieved] = []
        # object id -> object, in first retrieval order: every distinct object any search returned,
        # objects of the same text (the same sentence on two dates) included
        self.retrieved: dict[str, Retrieved] = {}
        self.counters = Counters()
        self.last_message = "No action yet. Start by searching for background."
        self.history: list[str] = []
        self.done = False

    @property
    def operations_left(self) -> int:
        return max(0, self.max_operations - self.counters.operations)

    def cutoff(self, requested: dt.date | None) -> dt.date:
        """Search strictly before the release date, or an earlier date the agent asks for."""
        if requested is None or requested > self.task.release_date:
            return self.task.release_date
        return requested

    def _finish(self, outcome: StepOutcome, summary: str) -> StepOutcome:
        self.last_message = outcome.message
        self.history.append(summary)
        if not self.done and self.counters.operations >= self.max_operations:
            self.done = True
            self.last_message += " " + MSG_CAP.format(cap=self.max_operations)
        return outcome

    def invalid(self, reason: str) -> StepOutcome:
        self.counters.failed_parse += 1
        return self._finish(StepOutcome(False, MSG_INVALID.format(reason=reason)), f"invalid action ({reason})")

    async def step(self, action: Action) -> StepOutcome:
        if self.done:
            raise RuntimeError("episode already finished")
        c = self.counters
        if action.kind == "terminate":
            c.terminate += 1
            self.done = True
            self.last_message = MSG_TERMINATE
            self.history.append("terminate")
            return StepOutcome(True, MSG_TERMINATE)
        if action.kind == "search":
            c.search += 1
            before = self.cutoff(action.before)
            hits = await self._search(action.query, before)
            for h in hits:
                assert h.date < self.task.release_date, "index returned an object dated on/after release"
                self.retrieved.setdefault(h.object_id, h)
            if not hits:
                c.empty_search += 1
                msg = MSG_SEARCH_EMPTY.format(query=action.query, before=before.isoformat())
                return self._finish(StepOutcome(False, msg), f"search {action.query!r} -> no results")
            msg = MSG_SEARCH_OK.format(n=len(hits), query=action.query, before=before.isoformat())
            return self._finish(StepOutcome(True, msg, hits), f"search {action.query!r} -> {len(hits)} result(s)")
        if action.kind == "insert":
            named = named_objects(action, list(self.retrieved.values()))
            if not named:
                c.failed_insert += 1
                return self._finish(StepOutcome(False, MSG_INSERT_UNKNOWN), "insert -> failed (not retrieved)")
            in_draft = set(self.draft_ids())
            fresh = [o for o in named if o.object_id not in in_draft]
            if not fresh:
                c.duplicate_insert += 1
                return self._finish(StepOutcome(True, MSG_INSERT_DUP), "insert -> already in draft")
            obj = fresh[0]
            c.insert += 1
            self.draft.append(obj)
            return self._finish(StepOutcome(True, MSG_INSERT_OK), f"insert {obj.object_id}")
        if action.kind == "remove":
            named = named_objects(action, self.draft)
            if named:
                d = named[0]
                c.remove += 1
                self.draft.remove(d)
                return self._finish(StepOutcome(True, MSG_REMOVE_OK), f"remove {d.object_id}")
            c.failed_remove += 1
            return self._finish(StepOutcome(False, MSG_REMOVE_UNKNOWN), "remove -> failed (not in draft)")
        raise ValueError(f"unknown action kind {action.kind!r}")

    def retrieved_ids(self) -> list[str]:
        """Every distinct object id the searches returned, in first retrieval order."""
        return list(self.retrieved)

    def draft_ids(self) -> list[str]:
        return [d.object_id for d in self.draft]


def named_objects(action: Action, pool: list[Retrieved]) -> list[Retrieved]:
    """The objects of ``pool`` (the retrieved objects, or the draft) that an insert/remove names,
    equally good matches only, in pool order.

    An ``object_id`` names that object alone. Otherwise the candidates are the objects whose
    text equals the action's under :func:`normalize`, and the best of them are kept: first those whose
    text is the action's exactly (up to surrounding whitespace: the object it was copied from),
    then those of the action's ``date`` if it gave one. So "No.10" and "No10" on two dates are two
    objects, and copying either exactly picks that one; two objects of identical text and date
    are both named, and an insert takes the first not yet in the draft."""
    if action.object_id:
        return [o for o in pool if o.object_id == action.object_id]
    key = normalize(action.text)
    matches = [o for o in pool if normalize(o.text) == key]
    exact = [o for o in matches if o.text.strip() == action.text.strip()]
    matches = exact or matches
    if action.date is not None:
        matches = [o for o in matches if o.date == action.date] or matches
    return matches


def split_sentences(text: str) -> list[str]:
    parts = re.split(r"(?<=[.!?])[\"'”’)]*\s+(?=[A-Z0-9\"“'‘(\[])", text.strip())
    return [p.strip() for p in parts if len(p.strip().split()) >= 3]
