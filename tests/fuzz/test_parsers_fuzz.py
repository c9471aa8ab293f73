"""Fuzz tests over every parser of model output (issue 12, part 3 "Malformed model output").

For each parser, Hypothesis feeds valid outputs built from the prompt's documented format,
near-valid ones (valid outputs truncated, with braces, quotes or fences added or lost, values of
the wrong JSON type, duplicate keys, partial dates, huge numbers, nesting past the recursion
limit, prose around them, both labels, negations), token soup and raw unicode (control
characters, line separators, lone surrogates). Every input must end as a parsed value of the
documented type or as the parser's documented format-error signal (``None``, or
``engine.llm.actions.ParseError``, which the episode records as a malformed action); any other
exception fails the test. Valid outputs must parse to the value they were built from, and some
malformed ones (negations, two grades, a placeholder claim) to the format error.

A parsed value holds only valid Unicode whenever the input does: a lone surrogate in a step row
or a judgement makes the Parquet write fail (pyarrow cannot encode it).

Examples per parser: ``DATELINE_FUZZ_EXAMPLES``; by default 10,000 in the full suite
(``DATELINE_CI=1``, what ``scripts/test.sh`` runs) and 300 otherwise (the fast dev loop),
derandomized so a run is reproducible. An example of a parser's own test is one Hypothesis-drawn seed from which
plain Python picks a family and builds the text (``tests/fuzz/garbage.py``), so it costs little
beyond Hypothesis's bookkeeping (about 1 ms); a failure shows the seed and the text. One more
test feeds Hypothesis's own unicode text to every parser (as many again each). The degenerate
output tests bound the time a parser may take on 16,000 characters of one repeated pattern, and
``REGRESSIONS`` holds the inputs that broke a parser before it was fixed.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import re
import time
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from engine.benchmarks.analyst import BENCHMARK as ANALYST
from engine.benchmarks.analyst.checklists import _one_criterion
from engine.benchmarks.analyst.scoring import parse_checklist, parse_claims, parse_rating, parse_verdict, stored_claims
from engine.benchmarks.livenews import BENCHMARK as LIVENEWS
from engine.benchmarks.livenews.actions import KINDS, LiveAction, parse_action_block
from engine.benchmarks.livenews.agent import FINISH_REASONS, _classify
from engine.benchmarks.livenews.grader import GRADES, parse_grade
from engine.benchmarks.newsagent.environment import ACTIONS, Action, parse_action, parse_arguments, parse_kind
from engine.benchmarks.newsagent.pairwise import DIMENSIONS
from engine.benchmarks.newsagent.pairwise import parse as parse_pairwise
from engine.llm.actions import ParseError, first_json_object
from engine.scoring.pairwise import outcome
from tests.fuzz.garbage import (
    ANY,
    Case,
    big_int,
    clean,
    confuse,
    deep,
    jobject,
    jpy,
    jstring,
    jvalue,
    key_variant,
    mutate,
    noise,
    nonblank,
    prose,
    soup,
    wrap,
)
from tests.helpers import FULL

N = int(os.environ.get("DATELINE_FUZZ_EXAMPLES", "10000" if FULL else "300"))
FUZZ = settings(max_examples=N, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"     # what str.splitlines splits on


def storable(value: object) -> bool:
    """Whether every string in ``value`` encodes as UTF-8 (what a Parquet string column needs)."""
    try:
        json.dumps(value, ensure_ascii=False, default=repr).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# -- engine.llm.actions.first_json_object (newsagent actions, analyst tool calls and claims) ---------

def json_valid(r: random.Random) -> Case:
    obj = {clean(r, r.randrange(8), exclude="`"): jpy(r) for _ in range(r.randrange(5))}
    text = json.dumps(obj, ensure_ascii=r.random() < 0.5, indent=r.choice((None, 2)))
    return wrap(r, text), obj


def json_broken(r: random.Random) -> Case:
    pairs = [(jstring(r, r.choice(("Action", "query", "a", ""))), jvalue(r)) for _ in range(r.randrange(4))]
    text = jobject(r, pairs)
    if r.random() < 0.6:
        text = mutate(r, text, ("{", "}", '"', ",", ":", "```", "\\"))
    return wrap(r, text), ANY


JSON_TOKENS = ("{", "}", '"a":', '"b": 1', ",", "[", "]", '"', "```json\n", "```", "\\", "null", "NaN", '"\\ud800"')


def check_first_json_object(case: Case) -> None:
    text, expected = case
    try:
        obj = first_json_object(text)
    except ParseError:
        assert expected is ANY, f"valid JSON object not found in {text!r}"
        return
    assert isinstance(obj, dict)
    assert not storable(text) or storable(obj)
    if expected is not ANY:
        assert obj == expected


# -- newsagent actions: 1-step (environment.parse_action) and 2-step (parse_kind, parse_arguments)

def _kind_text(r: random.Random, kind: str) -> str:
    return json.dumps(r.choice((kind, kind.upper(), kind.title(), f" {kind} ", f"{kind}\n")))


def _date_pairs(r: random.Random) -> tuple[list[tuple[str, str]], dt.date | None]:
    """No date, an all-empty one (both mean "up to the release date"), or a valid one."""
    keys = [json.dumps(key_variant(r, k)) for k in ("year", "month", "day")]
    x = r.randrange(4)
    if x == 0:
        return [], None
    if x == 1:
        return [(k, r.choice(('""', "null", '" "'))) for k in keys], None
    d = dt.date.fromordinal(r.randrange(1, dt.date(9999, 12, 31).toordinal() + 1))
    vals = []
    for v in (d.year, d.month, d.day):
        vals.append(str(v) if r.random() < 0.3 else json.dumps(r.choice((str(v), f"{v:02d}", f" {v} "))))
    return list(zip(keys, vals)), d


def _argument_pairs(r: random.Random, kind: str) -> tuple[list[tuple[str, str]], Action]:
    """The argument fields of a valid ``kind`` action and the Action they parse to."""
    action = Action(kind)
    if kind == "search":
        q = nonblank(r, exclude="`")
        value = json.dumps({"text": q}) if r.random() < 0.15 else json.dumps(q)    # the paper's "query": {}
        dates, action.before = _date_pairs(r)
        action.query = q.strip()
        return [(json.dumps(r.choice(("query", "Query", "keywords"))), value), *dates], action
    if kind in ("insert", "remove"):
        action.text = t = nonblank(r, exclude="`")
        key, value = r.choice((("obj", {"text": t}), ("obj", t), ("object", {"Text": t}), ("content", t),
                               ("OBJ", {"TEXT": t})))
        return [(json.dumps(key), json.dumps(value))], action
    return [], action


def _one_step_pairs(r: random.Random) -> tuple[list[tuple[str, str]], Action]:
    kind = r.choice(ACTIONS)
    pairs, action = _argument_pairs(r, kind)
    if r.random() < 0.8:
        action.thought = thought = clean(r, exclude="`")
        pairs.insert(0, (json.dumps(r.choice(("Thought", "thought"))), json.dumps(thought)))
    key = json.dumps(r.choice(("Action", "action", "ACTION", "action_type", "type")))
    pairs.insert(r.randrange(len(pairs) + 1), (key, _kind_text(r, kind)))
    if r.random() < 0.2:        # a decoy action first: the JSON keeps the last value of a key
        pairs.insert(0, (key, json.dumps(r.choice(("answer", "search", "finish")))))
    if r.random() < 0.2:
        pairs.append((json.dumps(r.choice(("note", "confidence"))), json.dumps(jpy(r))))
    return pairs, action


def _corrupt(r: random.Random, pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Wrong types, lost or extra fields, bad dates, unknown actions."""
    pairs = list(pairs)
    for _ in range(r.randrange(1, 4)):
        op = r.randrange(5)
        if op == 0 and pairs:
            i = r.randrange(len(pairs))
            pairs[i] = (pairs[i][0], jvalue(r))
        elif op == 1 and pairs:
            del pairs[r.randrange(len(pairs))]
        elif op == 2:
            pairs.append((json.dumps(key_variant(r, r.choice(("Action", "query", "obj", "text", "year", "month",
                                                                "day", "Thought", "type")))), jvalue(r)))
        elif op == 3:
            dates = [json.dumps("2024"), json.dumps("13"), json.dumps("0"), json.dumps("99999999999"), "2024",
                     "1e400", "null", json.dumps("\uff12\uff10\uff12\uff14"), json.dumps("\u0663"),
                     json.dumps("2_024"), json.dumps("-1"), json.dumps(" "), "10000000000000000000000",
                     json.dumps("9" * 5000), big_int(r)]
            for k in r.sample(("year", "month", "day"), r.randrange(1, 4)):
                pairs.append((json.dumps(k), r.choice(dates)))
        else:
            pairs.append((json.dumps("Action"), json.dumps(r.choice(("Search!", "finish", "", "search insert",
                                                                     "ſearch", "\u0130nsert", noise(r))))))
    return pairs


def one_step_valid(r: random.Random) -> Case:
    pairs, action = _one_step_pairs(r)
    return wrap(r, jobject(r, pairs)), action


def one_step_broken(r: random.Random) -> Case:
    pairs, _ = _one_step_pairs(r)
    text = jobject(r, _corrupt(r, pairs))
    if r.random() < 0.4:
        text = mutate(r, text, ("{", "}", '"', ",", ":", "```"))
    return wrap(r, text), ANY


ACTION_TOKENS = ('{"Action": ', '"search"', '"insert"', '"remove"', '"terminate"', '"query": ', '"obj": ',
                 '{"text": ', '"year": "2024"', '"month": "13"', '"day": ', "}", "{", '"Thought": "', ", ")


def check_action(action: Action, text: str) -> None:
    """The contract of a parsed newsagent action: what ``NewsEnvironment.step`` relies on."""
    assert isinstance(action, Action) and action.kind in ACTIONS and isinstance(action.thought, str)
    if action.kind == "search":
        assert isinstance(action.query, str) and action.query and action.query == action.query.strip()
        assert action.before is None or type(action.before) is dt.date
    if action.kind in ("insert", "remove"):
        assert isinstance(action.text, str) and action.text.strip()
    assert not storable(text) or storable(action.as_dict()), action


def check_newsagent_one_step_action(case: Case) -> None:
    text, expected = case
    try:
        action = parse_action(text)
    except ParseError as e:
        assert expected is ANY, f"valid action rejected ({e}): {text!r}"
        return
    check_action(action, text)
    if expected is not ANY:
        assert action == expected


def two_step_valid(r: random.Random) -> Case:
    kind = r.choice(ACTIONS)
    choose = [(json.dumps("Thought"), json.dumps(clean(r, exclude="`"))),
              (json.dumps(r.choice(("Action", "action"))), _kind_text(r, kind))]
    args, action = _argument_pairs(r, kind)
    return (wrap(r, jobject(r, choose)), wrap(r, jobject(r, args))), (kind, action)


def two_step_broken(r: random.Random) -> Case:
    (choose, args), _ = two_step_valid(r)
    if r.random() < 0.5:
        choose = mutate(r, choose, ("{", "}", '"', '"Action": '))
    args = r.choice((mutate(r, args, ("{", "}", '"', ",")), jobject(r, _corrupt(r, [])), soup(r, ACTION_TOKENS)))
    return (choose, args), ANY


def _raw_pair(r: random.Random) -> Case:
    return (noise(r), noise(r)), ANY


def check_newsagent_two_step_action(case: Case) -> None:
    """As ``agent._two_step_turn``: the action name from the first output, then (unless it is
    terminate) its arguments from the second."""
    (choose, args), expected = case
    try:
        kind = parse_kind(first_json_object(choose))
    except ParseError as e:
        assert expected is ANY, f"valid choice rejected ({e}): {choose!r}"
        return
    assert kind in ACTIONS
    if expected is not ANY:
        assert kind == expected[0]
    if kind == "terminate":
        return
    try:
        action = parse_arguments(kind, first_json_object(args))
    except ParseError as e:
        assert expected is ANY, f"valid arguments rejected ({e}): {args!r}"
        return
    check_action(action, args)
    assert action.kind == kind and action.thought == ""
    if expected is not ANY:
        assert action == expected[1]


# -- livenews action blocks (actions.parse_action_block) -------------------------------------------

_BLOCK_KINDS = ("Search", "search", "SEARCH", "Click", "click", "Visit", "Finish", "finish", "FINISH")


def _item(r: random.Random) -> str:
    s = nonblank(r, exclude="`" + LINE_BREAKS)
    return s if s.strip().lower() != "action" else s + "x"


def _block(r: random.Random) -> tuple[str, LiveAction, bool]:
    """A valid block (fenced, or between ``action`` lines), its action, and whether it is fenced."""
    word = r.choice(_BLOCK_KINDS)
    kind = KINDS[word.lower()]
    items = [_item(r) for _ in range(r.randrange(1, 4))]
    lines = [r.choice(("type: ", "type:", "Type: ", "TYPE : ", "type :\t")) + word +
             r.choice(("", "", " (one per line)"))]
    for it in items:
        lines.append(it)
        if r.random() < 0.15:
            lines.append(r.choice(("", "   ", "\t")))             # blank lines between items are skipped
    body = "\n".join(lines)
    stripped = tuple(it.strip() for it in items)
    action = LiveAction(kind, (" ".join(stripped),) if kind == "finish" else stripped)
    if r.random() < 0.8:
        fence = r.choice(("```action\n", "```\n", "``` action\n", "```ACTION \n"))
        return fence + body + r.choice(("\n```", "\n```\n")), action, True
    return r.choice(("action\n", "Action\n", "  action \n")) + body + "\naction", action, False


def _block_prose(r: random.Random, fenced: bool) -> str:
    words = prose(r, exclude="`{}").replace("\n", " ")
    if not fenced:
        words = re.sub(r"(?i)\baction\b", "act", words)
    return words


def block_valid(r: random.Random) -> Case:
    block, action, fenced = _block(r)
    before = _block_prose(r, fenced) + "\n" if r.random() < 0.7 else ""
    after = "\n" + _block_prose(r, fenced) if r.random() < 0.4 else ""
    return before + block + after, action


def block_broken(r: random.Random) -> Case:
    block, _, _ = _block(r)
    x = r.randrange(7)
    if x == 0:
        block = block + "\n" + _block(r)[0]                       # two blocks
    elif x == 1:
        block = block.replace("type", r.choice(("typ", "kind", "")), 1)
    elif x == 2:
        block = re.sub(r"(?i)(type\s*:\s*)\w+", lambda m: m.group(1) + r.choice(
            ("Answer", "Navigate", "Fіnish", "Searches", "", "Click2", "\u017fearch")), block, count=1)
    elif x == 3:
        block = block.split("\n")[0] + "\n" + block.split("\n")[1] + "\n```"   # no items
    elif x == 4:
        block = block.replace("\n", "\r\n")
    elif x == 5:
        block = block.rstrip("`\n")                               # the closing fence cut off
    else:
        block = mutate(r, block, ("```", "```action\n", "type: ", "\n", "action\n", "Finish", "Search"))
    return (prose(r, exclude="{}") + "\n" if r.random() < 0.5 else "") + block, ANY


BLOCK_TOKENS = ("```", "```action\n", "action\n", "\naction", "type: ", "type:Search", "Search\n", "Click\n",
                "Finish\n", "Visit", "https://example.com/a\n", "\n", "query one\n")


def check_livenews_action_block(case: Case) -> None:
    text, expected = case
    try:
        action = parse_action_block(text)
    except ParseError as e:
        assert expected is ANY, f"valid block rejected ({e}): {text!r}"
        assert _classify(e) in FINISH_REASONS
        return
    assert isinstance(action, LiveAction) and action.kind in ("search", "visit", "finish")
    assert isinstance(action.items, tuple) and action.items
    assert all(isinstance(i, str) and i and i == i.strip() for i in action.items)
    assert action.kind != "finish" or len(action.items) == 1
    assert not storable(text) or storable(list(action.items))
    if expected is not ANY:
        assert action == expected


# -- single-word judgements: livenews grades (grader.parse_grade), analyst verdicts -----------------

PRE = ("", " ", "\n", "**", "*", "`", "__", '"', "'", "\u201c", "(", "[", "# ", "## ", "> ", "- ")
POST = ("", " ", "\n", "**", "*", "`", "__", '"', "'", "\u201d", ")", "]", ".", "!", ":", ";", ".**")
_NAMES = {"A": ("CORRECT", "correct", "Correct"), "B": ("INCORRECT", "incorrect", "Incorrect"),
          "C": ("NOT ATTEMPTED", "not attempted", "Not_Attempted", "NOT-ATTEMPTED", "NOTATTEMPTED", "not  attempted")}
_TRAILING = (" because it matches", " The answer is wrong.", " probably", "\n\nThe predicted answer names the team.",
             " though")
_LEADING = ("I think ", "probably ", "The grade is ", "maybe ", "My answer is ")


def _grade_core(r: random.Random, letter: str, name_of: str | None = None) -> str:
    name = r.choice(_NAMES[name_of or letter])
    ch = r.choice((letter, letter.lower()))
    x = r.randrange(3)
    if x == 0:
        return ch
    if x == 1:
        return name
    sep = r.choice((": ", ") ", " - ", ". ", " ", " ("))
    return ch + sep + name + (")" if sep == " (" else "")


def _label(r: random.Random, labels: tuple[str, ...]) -> str:
    return r.choice(labels) if r.random() < 0.3 else ""


def grade_valid(r: random.Random) -> Case:
    letter = r.choice("ABC")
    label = _label(r, ("Grade: ", "Answer: ", "Final grade: ", "final answer = ", "**Final grade:** ", "GRADE - "))
    return r.choice(PRE) + label + _grade_core(r, letter) + r.choice(POST), GRADES[letter]


def grade_malformed(r: random.Random) -> Case:
    """Outputs the docstring of ``parse_grade`` names as malformed: always None."""
    a, b = r.sample("ABC", 2)
    x = r.randrange(6)
    if x == 0:                                     # a letter with another grade's name
        core = r.choice((a, a.lower())) + r.choice((": ", ") ", " - ")) + r.choice(_NAMES[b])
    elif x == 1:                                   # a negation
        core = r.choice(("not ", "NOT ", "isn't ", "not fully ")) + r.choice(("correct", "CORRECT", "Incorrect"))
    elif x == 2:                                   # two grades
        core = _grade_core(r, a) + r.choice((" or ", "/", ", ", "\n", " and ")) + _grade_core(r, b)
    elif x == 3:                                   # prose after
        core = _grade_core(r, a) + r.choice(_TRAILING)
    elif x == 4:                                   # prose before
        core = r.choice(_LEADING) + _grade_core(r, a)
    else:                                          # a hedge
        core = _grade_core(r, a) + r.choice(("?", " ?", "??"))
    return r.choice(PRE) + core + r.choice(POST), None


def grade_mutated(r: random.Random) -> Case:
    text = grade_valid(r)[0]
    if r.random() < 0.5:
        return confuse(r, text), ANY                # a look-alike letter: "İNCORRECT", "Сorrect"
    return mutate(r, text, ("A", "B", "C", "CORRECT", "NOT", "ATTEMPTED", "?", ":", "**", "\u0130", "\u0131",
                            "\u017f", "\u212a")), ANY


GRADE_TOKENS = ("A", "B", "C", "a", "CORRECT", "INCORRECT", "NOT ATTEMPTED", "NOT", " ", ":", "**", "Grade:",
                "\u0130", "\u0131", "\u212a", "\n", "?", ")", "not")


def check_livenews_grade(case: Case) -> None:
    text, expected = case
    grade = parse_grade(text)
    assert grade is None or grade in GRADES.values(), grade
    assert LIVENEWS.parse_judgement("grade", text) == grade
    if expected is not ANY:
        assert grade == expected, text


_VERDICT_WORDS = ("SUPPORTED", "UNSUPPORTED")


def _mixed_case(r: random.Random, word: str) -> str:
    x = r.randrange(4)
    return (word, word.lower(), word.title(), "".join(c.lower() if r.random() < 0.5 else c for c in word))[x]


def verdict_valid(r: random.Random) -> Case:
    word = r.choice(_VERDICT_WORDS)
    label = _label(r, ("Answer: ", "Verdict: ", "Final answer: ", "**Verdict:** ", "verdict : ", "ANSWER:"))
    return r.choice(PRE) + label + _mixed_case(r, word) + r.choice(POST), word == "SUPPORTED"


def verdict_malformed(r: random.Random) -> Case:
    word = _mixed_case(r, r.choice(_VERDICT_WORDS))
    x = r.randrange(5)
    if x == 0:
        core = r.choice(("not ", "NOT_", "Not-", "partially ", "Mostly ", "isn't ")) + word
    elif x == 1:
        core = word + r.choice((" or ", "/", "\n", " ")) + _mixed_case(r, r.choice(_VERDICT_WORDS))
    elif x == 2:
        core = word + r.choice((". The excerpts agree.", " by excerpt 2", "\n\nThe date differs.", " (partially)"))
    elif x == 3:
        core = r.choice(("The claim is ", "Yes, ", "Probably ", "Answer ")) + word
    else:
        core = word + r.choice(("?", " ?"))
    return r.choice(PRE) + core + r.choice(POST), None


def verdict_mutated(r: random.Random) -> Case:
    text = verdict_valid(r)[0]
    if r.random() < 0.5:
        return confuse(r, text), ANY
    return mutate(r, text, ("SUPPORTED", "UN", "NOT ", "?", ":", "\u017f", "Verdict:")), ANY


def check_analyst_verdict(case: Case) -> None:
    text, expected = case
    verdict = parse_verdict(text)
    assert verdict is None or type(verdict) is bool
    judged = ANALYST.parse_judgement("claim:0:00", text)
    assert judged == (None if verdict is None else "SUPPORTED" if verdict else "UNSUPPORTED")
    if expected is not ANY:
        assert verdict is expected, text


# -- analyst checklist ratings (scoring.parse_rating) -----------------------------------------------

def _reasoning(r: random.Random) -> str:
    """Judge reasoning that cannot hold a rating phrase (no "g", so never "rating")."""
    return clean(r, exclude="gG") + r.choice((" ", "\n", ". "))


def rating_valid(r: random.Random) -> Case:
    text, value = "", None
    for _ in range(r.randrange(1, 4)):             # the last "rating is: X" counts
        value = r.randrange(1, 6)
        phrase = r.choice(("therefore, the rating is: ", "Therefore, the rating is: ", "the rating is ",
                           "THE RATING IS:", "rating is:  ", "Therefore the rating is :"))
        shown = r.choice(("{}", "**{}**", "({})", "{}/5", "{} / 5", "** {}**")).format(value)
        text += _reasoning(r) + phrase + shown + r.choice((".", ". ", "\n", " out of five.", "!"))
    return text, value


def rating_broken(r: random.Random) -> Case:
    text = rating_valid(r)[0]
    if r.random() < 0.5:
        text = re.sub(r"[1-5]", lambda m: r.choice(("0", "6", "five", "3.5", "", "10", "\uff13")), text)
    return mutate(r, text, ("rating is: ", "therefore", "5", "6", "/5", "**", "(", "\u0130")), ANY


def check_analyst_rating(case: Case) -> None:
    text, expected = case
    rating = parse_rating(text)
    assert rating is None or (type(rating) is int and 1 <= rating <= 5)
    assert ANALYST.parse_judgement("criterion:0123456789ab:00", text) == (None if rating is None else str(rating))
    if expected is not ANY:
        assert rating == expected, text


# -- analyst checklists (scoring.parse_checklist, checklists._one_criterion) -------------------------

def _criterion(r: random.Random, levels: tuple[int, ...] = (1, 2, 3, 4, 5)) -> tuple[str, str]:
    """A figure-15 criterion with these scoring lines, and the item it parses to when complete."""
    desc = r.choice(("The response should ", "The report should ", "Should ")) + clean(r, exclude=LINE_BREAKS)
    indent = r.choice((" ", "  ", "\t", "    "))
    lines = [f"{indent}- {k}{r.choice((':', ' :', ':  '))} {clean(r, exclude=LINE_BREAKS)}" for k in levels]
    return "\n".join(["- " + desc, *lines]), "\n".join([desc.strip(), *(ln.strip() for ln in lines)])


def checklist_valid(r: random.Random) -> Case:
    parts, items = [], []
    if r.random() < 0.5:
        parts.append("Here is the checklist: " + prose(r).strip())
    for _ in range(r.randrange(0, 5)):
        if r.random() < 0.25:                          # fewer or more than five levels: dropped
            levels = r.choice(((), (1,), (1, 2, 3), (1, 2, 3, 4), (2, 3, 4, 5), (1, 2, 3, 4, 5, 5), (1, 1, 2, 3, 4, 5)))
            parts.append(_criterion(r, levels)[0])
        else:
            text, item = _criterion(r)
            parts.append(text)
            items.append(item)
        if r.random() < 0.2:
            parts.append(r.choice(("", "Note: " + prose(r).strip())))
    return "\n".join(parts), items or None


def checklist_broken(r: random.Random) -> Case:
    return mutate(r, checklist_valid(r)[0], ("\n- ", "\n - 1: ", " - 5:", "\n", "- The response should",
                                            "\u2028", "\x85", "\r")), ANY


def check_analyst_checklist(case: Case) -> None:
    text, expected = case
    items = parse_checklist(text)
    if items is not None:
        assert isinstance(items, list) and items
        for item in items:
            lines = item.split("\n")
            assert len(lines) == 6 and lines[0].strip()
            assert all(re.match(r"- [1-5]\s*:", ln) for ln in lines[1:]), item
    assert not storable(text) or storable(items)
    one = _one_criterion(text)
    assert one == (items[0] if items and len(items) == 1 else None)
    judged = ANALYST.parse_judgement("checklist", text)
    assert judged == (json.dumps(items) if items else None)
    if expected is not ANY:
        assert items == expected, text


# -- analyst claim extraction (scoring.parse_claims) -----------------------------------------------

def _claims(r: random.Random) -> dict[str, str]:
    out: dict[str, str] = {}
    for _ in range(r.randrange(0, 6)):
        key = nonblank(r, exclude="`")
        if key.strip() not in {k.strip() for k in out}:
            out[key] = clean(r, exclude="`")
    return out


def claims_valid(r: random.Random) -> Case:
    claims = _claims(r)
    text = json.dumps(claims, ensure_ascii=r.random() < 0.5, indent=r.choice((None, 2)))
    return wrap(r, text), {k.strip(): v for k, v in claims.items()}


def claims_placeholder(r: random.Random) -> Case:
    """The prompt's example keys copied back ("Atomic claim 1 here"): malformed."""
    claims = _claims(r)
    claims[r.choice(("Atomic claim 1 here", "atomic claim 2 here", " ATOMIC CLAIM 12 HERE "))] = clean(r, exclude="`")
    return wrap(r, json.dumps(claims)), None


def claims_broken(r: random.Random) -> Case:
    pairs = [(jstring(r), jvalue(r) if r.random() < 0.3 else jstring(r)) for _ in range(r.randrange(4))]
    text = jobject(r, pairs)
    if r.random() < 0.5:
        text = mutate(r, text, ("{", "}", '"', ",", ":", "```", "[", "]"))
    return wrap(r, text), ANY


def check_analyst_claims(case: Case) -> None:
    text, expected = case
    claims = parse_claims(text)
    if claims is not None:
        assert isinstance(claims, dict)
        assert all(isinstance(k, str) and k and k == k.strip() and isinstance(v, str) for k, v in claims.items())
        assert not storable(text) or storable(claims)
    judged = ANALYST.parse_judgement("claims:0", text)
    assert judged == (json.dumps(claims) if claims is not None else None)
    if judged is not None:                         # read back as the judge stage's round two does
        assert stored_claims(judged) == list(claims)
    if expected is not ANY:
        assert claims == expected, text


# -- newsagent pairwise verdicts (pairwise.parse) ----------------------------------------------------

_SIDE_FORMS = {"first": ('"first"', '"First"', '"FIRST"', '"first article"', '"First Article"', '"Article 1"',
                         '"article_1"', '"1"', "1", "1.0"),
               "second": ('"second"', '"Second"', '"SECOND"', '"Second Article"', '"Article 2"', '"2"', "2"),
               "tie": ('"tie"', '"Tie"', '"TIE"')}
_NO_SIDE = ('"maybe"', '"both"', '""', "null", "[]", '"third"', "true", "3", "1.5", '{"reason": "x"}')


def _winner(r: random.Random, side: str | None, reason_key: str) -> str:
    """A verdict value: the side, or an object with it as ``winner``."""
    value = r.choice(_SIDE_FORMS[side]) if side else r.choice(_NO_SIDE)
    if r.random() < 0.3:
        return value
    return jobject(r, [(json.dumps(r.choice(("winner", "Winner"))), value),
                       (json.dumps(reason_key), json.dumps(clean(r, exclude="`")))])


def _dim_key(r: random.Random, dim: str) -> str:
    return json.dumps(r.choice((dim, dim.lower(), dim.upper(), dim.replace(" ", "_"), dim.replace(" ", ""))))


def pairwise_valid(r: random.Random) -> Case:
    protocol = r.choice(("dimension", "single"))
    overall = r.choice(("first", "second", "first", "second", "tie"))
    if protocol == "single":
        pairs = [(json.dumps(r.choice(("winner", "Winner", "WINNER"))), r.choice(_SIDE_FORMS[overall])),
                 (json.dumps("reason"), json.dumps(clean(r, exclude="`")))]
        dims: dict[str, str | None] = {}
    else:
        pairs, dims = [], {}
        for d in DIMENSIONS:
            x = r.random()
            side = None if x < 0.15 else r.choice(("first", "second", "tie"))
            dims[d] = side
            if side is not None or x < 0.08:              # missing, or present without a usable side
                pairs.append((_dim_key(r, d), _winner(r, side, "reasoning")))
        pairs.append((json.dumps(r.choice(("Overall", "overall", "OVERALL"))), _winner(r, overall, "reasoning")))
        r.shuffle(pairs)
    expected = None if overall == "tie" else {"overall": overall, "dimensions": dims}
    return (protocol, wrap(r, jobject(r, pairs))), expected


def pairwise_broken(r: random.Random) -> Case:
    (protocol, text), _ = pairwise_valid(r)
    x = r.randrange(3)
    if x == 0:
        text = re.sub(r'"(first|second|tie)"|\b[12]\b', lambda m: jvalue(r), text, count=r.randrange(1, 4))
    elif x == 1:
        text = mutate(r, text, ("{", "}", '"', ",", ":", "```json", '"winner": ', "1e400", "NaN"))
    else:
        text = jobject(r, [(json.dumps(r.choice(("winner", "Overall"))), r.choice(
            ("1e400", "-1e400", "NaN", "Infinity", big_int(r), deep(r), jvalue(r))))])
    return (protocol, wrap(r, text)), ANY


PAIR_TOKENS = ("{", "}", '"winner": ', '"first"', '"second"', '"tie"', '"Overall": ', "1", "2", "1e400", "NaN",
               ",", "```json", '"Readability": ')


def check_newsagent_pairwise(case: Case) -> None:
    (protocol, text), expected = case
    verdict = parse_pairwise(protocol, text)
    if verdict is not None:
        v = json.loads(verdict)
        assert set(v) == {"overall", "dimensions"} and v["overall"] in ("first", "second")
        assert set(v["dimensions"]) == (set(DIMENSIONS) if protocol == "dimension" else set())
        assert all(s in ("first", "second", "tie", None) for s in v["dimensions"].values())
        row = {"task_id": "t", "system_a": "a", "system_b": "b", "first": "b", "second": "a"}
        for dim in (None, *v["dimensions"]):
            outcome(row, verdict, dim)
    if expected is not ANY:
        assert (json.loads(verdict) if verdict else None) == expected, text


# -- the fuzz tests ---------------------------------------------------------------------------------

SEEDS = st.integers(min_value=0, max_value=2**64 - 1)


def raw(r: random.Random) -> Case:
    return noise(r, r.choice((0, 1, 3, 10, 40, 200))), ANY


def raw_pair(r: random.Random) -> Case:
    return (raw(r)[0], raw(r)[0]), ANY


def raw_pairwise(r: random.Random) -> Case:
    return (r.choice(("dimension", "single")), r.choice((raw(r)[0], soup(r, PAIR_TOKENS)))), ANY


def fuzz_once(check: Callable[[Case], None], seed: int, *families: Callable[[random.Random], Case]) -> None:
    """One example: a family picked by the seed builds the case, ``check`` asserts the contract.
    (One Hypothesis draw per example keeps 10,000 of them cheap; the failing text is noted.)"""
    r = random.Random(seed)
    case = r.choice(families)(r)
    try:
        check(case)
    except BaseException:
        note(f"case: {case!r}")         # shown with the falsifying example
        raise


@FUZZ
@given(seed=SEEDS)
def test_first_json_object(seed: int) -> None:
    fuzz_once(check_first_json_object, seed, json_valid, json_valid, json_broken, json_broken,
              lambda r: (soup(r, JSON_TOKENS), ANY), raw)


@FUZZ
@given(seed=SEEDS)
def test_newsagent_one_step_action(seed: int) -> None:
    fuzz_once(check_newsagent_one_step_action, seed, one_step_valid, one_step_valid, one_step_broken,
              one_step_broken, one_step_broken, lambda r: (soup(r, ACTION_TOKENS), ANY), raw)


@FUZZ
@given(seed=SEEDS)
def test_newsagent_two_step_action(seed: int) -> None:
    fuzz_once(check_newsagent_two_step_action, seed, two_step_valid, two_step_valid, two_step_broken,
              two_step_broken, raw_pair)


@FUZZ
@given(seed=SEEDS)
def test_livenews_action_block(seed: int) -> None:
    fuzz_once(check_livenews_action_block, seed, block_valid, block_valid, block_broken, block_broken,
              lambda r: (soup(r, BLOCK_TOKENS), ANY), raw)


@FUZZ
@given(seed=SEEDS)
def test_livenews_grade(seed: int) -> None:
    fuzz_once(check_livenews_grade, seed, grade_valid, grade_malformed, grade_mutated, grade_mutated,
              lambda r: (soup(r, GRADE_TOKENS), ANY), raw)


@FUZZ
@given(seed=SEEDS)
def test_analyst_verdict(seed: int) -> None:
    fuzz_once(check_analyst_verdict, seed, verdict_valid, verdict_malformed, verdict_mutated, verdict_mutated,
              lambda r: (soup(r, ("SUPPORTED", "UNSUPPORTED", "not", "Verdict:", "**", "?", "\u017f")), ANY), raw)


@pytest.mark.slow
@FUZZ
@given(seed=SEEDS)
def test_analyst_rating(seed: int) -> None:
    fuzz_once(check_analyst_rating, seed, rating_valid, rating_valid, rating_broken, rating_broken,
              lambda r: (soup(r, ("rating", " is", ": ", "3", "5", "0", "/5", "**", "(", " " * 300)), ANY), raw)


@pytest.mark.slow
@FUZZ
@given(seed=SEEDS)
def test_analyst_checklist(seed: int) -> None:
    fuzz_once(check_analyst_checklist, seed, checklist_valid, checklist_valid, checklist_broken, checklist_broken,
              lambda r: (soup(r, ("\n- ", "- A", "\n - 1: x", "\n - 2:", " - 3 :", "\n\t- 4: y", "\n  - 5: z")), ANY),
              raw)


@FUZZ
@given(seed=SEEDS)
def test_analyst_claims(seed: int) -> None:
    fuzz_once(check_analyst_claims, seed, claims_valid, claims_valid, claims_placeholder, claims_broken,
              claims_broken, lambda r: (soup(r, JSON_TOKENS + ('"claim": "quote"',)), ANY), raw)


@FUZZ
@given(seed=SEEDS)
def test_newsagent_pairwise(seed: int) -> None:
    fuzz_once(check_newsagent_pairwise, seed, pairwise_valid, pairwise_valid, pairwise_broken, pairwise_broken,
              raw_pairwise)


@FUZZ
@given(text=st.text(st.characters(exclude_categories=()), max_size=80))
def test_every_parser_on_unicode_text(text: str) -> None:
    """Hypothesis's own unicode text (surrogates included, shrinking to a minimal failing text)
    to every parser."""
    for check in (check_first_json_object, check_newsagent_one_step_action, check_livenews_action_block,
                  check_livenews_grade, check_analyst_verdict, check_analyst_rating, check_analyst_checklist,
                  check_analyst_claims):
        check((text, ANY))
    check_newsagent_two_step_action(((text, text), ANY))
    check_newsagent_pairwise((("dimension", text), ANY))
    check_newsagent_pairwise((("single", text), ANY))


# Inputs that raised, or parsed to a wrong value, before the fixes (engine/llm/actions.py,
# newsagent/environment.py, newsagent/pairwise.py, livenews/grader.py).
BIG = "1" + "0" * 4400                                       # past int()'s 4,300-digit limit: ValueError
NESTED = "[" * 3000 + "]" * 3000                             # past the recursion limit: RecursionError
REGRESSIONS = [
    (check_first_json_object, ('{"a": ' + BIG + "}", ANY)),
    (check_first_json_object, ('{"a": ' + NESTED + "}", ANY)),
    (check_first_json_object, ('{"a": "\\ud800"}', ANY)),                      # parsed to a lone surrogate
    (check_newsagent_one_step_action, ('{"Action": "search", "query": "x", "year": "99999999999", '
                                       '"month": "1", "day": "1"}', ANY)),       # OverflowError from dt.date
    (check_newsagent_one_step_action, ('{"Action": "search", "query": "x", "year": 10000000000000000000000, '
                                       '"month": 1, "day": 1}', ANY)),
    (check_newsagent_one_step_action, ('{"Action": "search", "query": "x", "year": ' + BIG + "}", ANY)),
    (check_newsagent_one_step_action, ('{"Action": ' + NESTED + "}", ANY)),
    (check_newsagent_one_step_action, ('{"Action": "search", "query": "\\ud800 flood"}', ANY)),
    (check_newsagent_two_step_action, (('{"Action": "search"}', '{"query": "x", "year": "2024", '
                                        '"month": "99999999999", "day": "1"}'), ANY)),
    (check_livenews_grade, ("\u0130NCORRECT", ANY)),          # İ.upper() is İ: returned "İNCORRECT"
    (check_livenews_grade, ('"GRADE\xa0- \u0130NCORRECT ', ANY)),
    (check_livenews_grade, ("C: NOT\u00a0ATTEMPTED", "NOT ATTEMPTED")),
    (check_analyst_claims, ('{"GDP grew": ' + BIG + "}", ANY)),
    (check_analyst_claims, ('{"GDP grew \\ud800": "quote"}', None)),
    (check_newsagent_pairwise, (("single", '{"winner": 1e400}'), ANY)),      # OverflowError
    (check_newsagent_pairwise, (("single", '{"winner": NaN}'), ANY)),        # ValueError
    (check_newsagent_pairwise, (("single", '{"winner": 1.5}'), None)),       # was read as "1": first
    (check_newsagent_pairwise, (("dimension", '{"Overall": {"winner": ' + BIG + "}}"), ANY)),
    (check_newsagent_pairwise, (("single", '{"winner": ' + NESTED + "}"), ANY)),
]


@pytest.mark.parametrize("check,case", REGRESSIONS, ids=[f"{c.__name__}-{i}" for i, (c, _) in enumerate(REGRESSIONS)])
def test_regressions(check: Callable[[Case], None], case: Case) -> None:
    check(case)


# -- degenerate output: a model that loops until max_tokens ------------------------------------------

DEGENERATE = {
    "braces": "{" * 16_000,                                        # a scan per "{": was quadratic
    "nested objects": '{"a": ' * 3_000 + "1" + "}" * 3_000,
    "unterminated nesting": '{"a": {"b": ' * 2_000,
    "blank after rating": "therefore, the rating is:" + " " * 8_000 + "\n" * 8_000,   # was cubic
    "repeated phrase": "the rating is: 3/5 " * 2_000,
    "fences": "```action\n" * 3_000,
    "action lines": "action\ntype: Search\n" * 3_000,
    "bullets": "- The response should\n - 1: x\n" * 3_000,
}
PARSERS = {
    "first_json_object": first_json_object, "parse_action": parse_action,
    "parse_action_block": parse_action_block, "parse_grade": parse_grade, "parse_verdict": parse_verdict,
    "parse_rating": parse_rating, "parse_checklist": parse_checklist, "parse_claims": parse_claims,
    "pairwise": lambda text: parse_pairwise("dimension", text),
}


@pytest.mark.parametrize("name", sorted(DEGENERATE))
@pytest.mark.parametrize("parser", sorted(PARSERS))
def test_parsers_stay_fast_on_degenerate_output(parser: str, name: str) -> None:
    """16,000 characters of one repeated pattern parse in well under a second (each took from
    seconds to minutes before the brace-scan budget and the rating regex fix)."""
    t0 = time.perf_counter()
    try:
        PARSERS[parser](DEGENERATE[name])
    except ParseError:
        pass
    assert time.perf_counter() - t0 < 2.0
