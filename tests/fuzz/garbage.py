"""Model output for the fuzz tests: valid, near-valid and plain garbage, built cheaply.

A fuzz example is one Hypothesis-drawn seed that plain Python (``random.Random``) turns into a
text, so an example costs little more than Hypothesis's own bookkeeping and 10,000 of them per
parser fit in CI. Builders take the ``random.Random`` and return ``(text, expected)``: the value
a valid text must parse to, or :data:`ANY` when only the parser's contract (its return type or
its format-error signal) holds. :func:`seeded` and :data:`RAW_TEXT` make Hypothesis strategies
of them (the episode tests draw a list of turns).
"""

from __future__ import annotations

import functools
import json
import random
import string
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st


class _Any:
    """The expected value of a malformed example: only the parser's contract is checked."""

    def __repr__(self) -> str:
        return "ANY"


ANY = _Any()

Case = tuple[str, Any]

# Characters that break parsers: line separators str.splitlines knows and regexes do not,
# zero-width and direction marks, case-mapping oddities (İ.upper() is İ, ſ matches s under
# IGNORECASE), fullwidth and non-ASCII digits (int() reads them), control characters, and lone
# surrogates (a str can hold them, UTF-8 cannot).
ODD = ("\x00", "\x01", "\x07", "\x08", "\x1b", "\x7f", "\t", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d",
       "\x1e", "\x1f", "\x85", "\u2028", "\u2029", "\u00a0", "\u3000", "\u200b", "\ufeff", "\u202e",
       "\u0130", "\u0131", "\u017f", "\u212a", "\u00df", "\ufb01", "\uff21", "\uff43", "\u0661", "\u0663",
       "\u00b2", "\u0301", "\u00e9", "\U0001f600", "\U0010ffff", "\ufffd", "\ud800", "\udfff", "\ud83d")
SYNTAX = ("{", "}", "[", "]", '"', "'", ":", ",", "\\", "`", "```", "\n", "\n\n", " ", "  ", "*", "**", "#",
          "-", "(", ")", ".", "?", "/", "\\u", '\\"', "=", "_", "|", "<", ">")
PRINTABLE = string.ascii_letters + string.digits + string.punctuation + "    \n"
# Text a valid example may hold (no surrogates: a valid answer is valid Unicode).
CLEAN = string.ascii_letters + string.digits + " .,;:!?'\"-_()[]{}/\\#*`<>=+%&@$~^|" + \
    "\u00e9\u00df\u00fc\u4e2d\u6587\U0001f600\u0130\u0131\u017f\u00a0\u3000\t"
WORDS = ("the", "answer", "is", "because", "probably", "maybe", "report", "council", "flood", "2024", "news",
         "search", "insert", "remove", "terminate", "first", "second", "tie", "claim", "quote", "none", "null",
         "true", "Thought", "Action", "query", "type", "Finish", "Search", "Click", "action", "json", "winner",
         "A", "B", "C", "CORRECT", "INCORRECT", "NOT", "ATTEMPTED", "SUPPORTED", "UNSUPPORTED", "not",
         "rating", "is:", "5", "0", "6", "-", "- 1:", "Overall")


def seeded(build: Callable[[random.Random], Case]) -> st.SearchStrategy[Case]:
    """``build`` run on a ``random.Random`` seeded by Hypothesis (one draw per example)."""
    return st.integers(min_value=0, max_value=2**64 - 1).map(lambda seed: build(random.Random(seed)))


# Hypothesis's own unicode text, lone surrogates included (it shrinks well).
RAW_TEXT: st.SearchStrategy[Case] = st.text(st.characters(exclude_categories=()), max_size=80).map(
    lambda t: (t, ANY))


# -- characters and text -------------------------------------------------------------------------

def char(r: random.Random) -> str:
    x = r.random()
    if x < 0.5:
        return r.choice(PRINTABLE)
    if x < 0.7:
        return r.choice(ODD)
    if x < 0.88:
        return r.choice(SYNTAX)
    if x < 0.97:
        return chr(r.randrange(0x80, 0x10000))          # a lone surrogate sometimes
    return chr(r.randrange(0x10000, 0x110000))


def noise(r: random.Random, n: int | None = None) -> str:
    """Arbitrary text: any code point, weighted toward what breaks parsers."""
    n = r.choice((0, 1, 2, 5, 10, 30, 80)) if n is None else n
    return "".join(char(r) for _ in range(n))


@functools.cache
def _pool(exclude: str) -> str:
    return "".join(c for c in CLEAN if c not in exclude)


def clean(r: random.Random, n: int | None = None, exclude: str = "") -> str:
    """Valid Unicode text without the characters in ``exclude`` (possibly empty)."""
    n = r.choice((0, 1, 3, 8, 20, 60)) if n is None else n
    return "".join(r.choices(_pool(exclude), k=n))


def nonblank(r: random.Random, exclude: str = "", n: int | None = None) -> str:
    """Valid Unicode text that is not empty after ``str.strip``."""
    s = clean(r, n or r.choice((1, 3, 8, 20)), exclude)
    return s if s.strip() else s + "x"


def prose(r: random.Random, exclude: str = "{}`") -> str:
    """A sentence or two of words around an answer (never holding a character in ``exclude``)."""
    words = [w for w in (r.choice(WORDS) for _ in range(r.randrange(1, 8))) if not set(w) & set(exclude)]
    tail = r.choice(("", ".", ":", "!", "\n", "\n\n", " "))
    return (" ".join(words) + tail) if words else "Sure" + tail


def soup(r: random.Random, tokens: tuple[str, ...]) -> str:
    """Parser-relevant tokens, syntax and noise in random order."""
    parts = []
    for _ in range(r.randrange(0, 25)):
        x = r.random()
        parts.append(r.choice(tokens) if x < 0.5 else r.choice(SYNTAX) if x < 0.75 else
                     r.choice(WORDS) if x < 0.9 else noise(r, r.randrange(1, 4)))
    return "".join(parts)


# Look-alikes that IGNORECASE matching or int() accept but str.upper()/lower() do not map back.
CONFUSABLE = {"I": "\u0130", "i": "\u0131", "S": "\u017f", "s": "\u017f", "K": "\u212a", "k": "\u212a",
              "A": "\uff21", "a": "\u0430", "C": "\u0421", "c": "\u0441", "e": "\u0435", "o": "\u043e",
              "1": "\u0661", "2": "\uff12", "5": "\u0665", " ": "\u00a0", "-": "\u2010", ":": "\uff1a"}


def confuse(r: random.Random, s: str) -> str:
    """``s`` with one or more characters swapped for a look-alike."""
    spots = [i for i, c in enumerate(s) if c in CONFUSABLE]
    for i in r.sample(spots, min(len(spots), r.randrange(1, 3))):
        s = s[:i] + CONFUSABLE[s[i]] + s[i + 1:]
    return s


def mutate(r: random.Random, s: str, tokens: tuple[str, ...] = ()) -> str:
    """One to three edits: truncate, delete, duplicate, insert a token, replace, change case,
    swap in a look-alike."""
    for _ in range(r.randrange(1, 4)):
        n = len(s)
        i, j = sorted((r.randrange(n + 1), r.randrange(n + 1)))
        op = r.randrange(9)
        if op == 0:
            s = s[:i]                                                  # cut off (max_tokens)
        elif op == 1:
            s = s[:i] + s[j:]
        elif op == 2:
            s = s[:j] + s[i:j] + s[j:]
        elif op == 3:
            s = s[:i] + (r.choice(tokens) if tokens and r.random() < 0.6 else r.choice(SYNTAX)) + s[i:]
        elif op == 4:
            s = s[:i] + char(r) + s[i + 1:]
        elif op == 5:
            s = s[:i] + s[i:j].swapcase() + s[j:]
        elif op == 6:
            s = s[:i] + noise(r, r.randrange(1, 6)) + s[i:]
        elif op == 7:
            s = confuse(r, s)
        else:
            s = s[:i] + s[j:] + s[i:j]                                 # move a slice to the end
    return s


def wrap(r: random.Random, s: str) -> str:
    """``s`` as a chatty model writes it: in a code fence, after or before prose (the prose never
    holds braces or backticks, so a valid ``s`` stays the only candidate)."""
    x = r.randrange(6)
    if x == 0:
        return s
    if x == 1:
        return f"```{r.choice(('json', 'JSON', ''))}\n{s}\n```"
    if x == 2:
        return prose(r) + r.choice((" ", "\n", "\n\n")) + s
    if x == 3:
        return s + r.choice((" ", "\n", "\n\n")) + prose(r)
    if x == 4:
        return prose(r) + "\n```json\n" + s + "\n```\n" + prose(r)
    return r.choice(("\n", "  ", "\t")) + s + r.choice(("\n", "  ", ""))


# -- JSON ------------------------------------------------------------------------------------------

BAD_NUMBERS = ("0", "-0", "1", "-1", "2", "3.5", "1.0", "1e3", "1e400", "-1e400", "NaN", "Infinity", "-Infinity",
               "00", "+1", ".5", "1e", "0x10", "2024", "13", "32", "99999999999", "10000000000000000000000")
BAD_STRINGS = ('"\\ud800"', '"\\udfff x"', '"\\ud83d\\ude00"', '"\\u0000"', '"\\uZZZZ"', '"a\\"b"', '"\\n"',
               '""', '" "', '"\\t\\u3000"', "'single'", '"unterminated', '"two" "strings"')


def big_int(r: random.Random) -> str:
    """An integer past ``int``'s 4,300-digit string limit, or just below it."""
    return "1" + "0" * r.choice((4299, 4300, 5000))


def deep(r: random.Random) -> str:
    """Nesting past the recursion limit: the JSON decoder raises RecursionError. Arrays, so the
    value adds no "{" (nested objects are the degenerate-output tests' case: each "{" is a start)."""
    n = r.choice((100, 1100, 3000))
    return r.choice(("[" * n + "]" * n, "[" * n + "{}" + "]" * n, "[" * n))


def jstring(r: random.Random, s: str | None = None) -> str:
    s = noise(r) if s is None else s
    return json.dumps(s, ensure_ascii=r.random() < 0.5)


def jvalue(r: random.Random, depth: int = 0) -> str:
    """A JSON value's text, often of the wrong type, sometimes not JSON at all."""
    x = r.randrange(100)
    if x < 30:
        return jstring(r)
    if x < 42:
        return r.choice(BAD_NUMBERS)
    if x < 50:
        return r.choice(BAD_STRINGS)
    if x < 58:
        return r.choice(("true", "false", "null", "True", "None", "undefined"))
    if x < 68 and depth < 3:
        return "[" + ", ".join(jvalue(r, depth + 1) for _ in range(r.randrange(4))) + "]"
    if x < 80 and depth < 3:
        return jobject(r, [(jstring(r, r.choice(WORDS)), jvalue(r, depth + 1)) for _ in range(r.randrange(4))])
    if x < 82:
        return big_int(r)
    if x < 83:
        return deep(r)
    if x < 84:
        return json.dumps("x" * r.choice((1000, 20000)))        # a very long string
    return jstring(r, clean(r))


def jobject(r: random.Random, pairs: list[tuple[str, str]]) -> str:
    """``{key: value, ...}`` from key and value texts, with random spacing."""
    sep = r.choice((", ", ",", ",\n  ", " , "))
    colon = r.choice((": ", ":", " : "))
    body = sep.join(k + colon + v for k, v in pairs)
    return "{" + (r.choice(("", "\n  ", " ")) + body + r.choice(("", "\n", " ")) if pairs else "") + "}"


def jpy(r: random.Random, depth: int = 0) -> Any:
    """A random JSON-serialisable Python value (valid Unicode, no NaN) for round trips."""
    x = r.randrange(10)
    if x < 3 or depth >= 3:
        leaf = r.randrange(8)
        if leaf == 0:
            return clean(r, exclude="`")
        return (None, r.randrange(-10**6, 10**6), r.random() * 1e6, True, False, None, float("inf"),
                10**r.randrange(1, 40))[leaf]
    if x < 5:
        return [jpy(r, depth + 1) for _ in range(r.randrange(4))]
    return {clean(r, r.randrange(0, 8), exclude="`"): jpy(r, depth + 1) for _ in range(r.randrange(5))}


def key_variant(r: random.Random, key: str) -> str:
    """A key the parsers read case-insensitively, in another case."""
    return r.choice((key, key.lower(), key.upper(), key.title()))
