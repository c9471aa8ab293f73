"""The claim-verification verdict parser on realistic judge outputs.

The prompt ends "Answer with one word: SUPPORTED or UNSUPPORTED." Accepted: that one word, any
case, wrapped in markdown, quotes, brackets or punctuation, optionally after an "Answer:" or
"Verdict:" label. Everything else is malformed (``None``: retried, then the claim counts as
unverified), in particular "Not supported", which a word search read as SUPPORTED.
"""

from __future__ import annotations

import pytest

from engine.benchmarks.analyst.scoring import parse_verdict

CASES = [
    # the one word
    ("SUPPORTED", True), ("UNSUPPORTED", False), ("Supported", True), ("unsupported", False),
    ("  SUPPORTED\n", True), ("\n\nUNSUPPORTED\n\n", False),
    # markdown, quotes, punctuation
    ("**SUPPORTED**", True), ("*UNSUPPORTED*", False), ("`SUPPORTED`", True), ("__UNSUPPORTED__", False),
    ('"SUPPORTED"', True), ("'UNSUPPORTED'", False), ("“SUPPORTED”", True), ("SUPPORTED.", True),
    ("Unsupported.", False), ("UNSUPPORTED!", False), ("(SUPPORTED)", True), ("[UNSUPPORTED]", False),
    # a label first
    ("Answer: SUPPORTED", True), ("Verdict: UNSUPPORTED", False), ("**Verdict:** SUPPORTED", True),
    ("answer: unsupported", False), ("Final answer: SUPPORTED", True),
    # negations: the defect ("Not supported" read as SUPPORTED)
    ("Not supported", None), ("NOT SUPPORTED", None), ("not supported.", None), ("Not SUPPORTED", None),
    ("The claim is not supported.", None), ("isn't supported", None), ("NOT_SUPPORTED", None),
    # partial / hedged
    ("partially supported", None), ("PARTIALLY SUPPORTED", None), ("Mostly SUPPORTED", None),
    ("SUPPORTED?", None), ("Probably SUPPORTED", None), ("SUPPORTED (partially)", None),
    ("Likely UNSUPPORTED", None),
    # both words
    ("SUPPORTED or UNSUPPORTED", None), ("SUPPORTED/UNSUPPORTED", None), ("UNSUPPORTED SUPPORTED", None),
    ("SUPPORTED\nUNSUPPORTED", None),
    # prose around the word
    ("SUPPORTED. The excerpts state the same figure.", None), ("UNSUPPORTED\n\nThe date differs.", None),
    ("The claim is SUPPORTED.", None), ("Yes, SUPPORTED", None), ("SUPPORTED by excerpt 2", None),
    ("Answer SUPPORTED", None),
    # not a verdict
    ("", None), ("   ", None), ("yes", None), ("no", None), ("TRUE", None), ("SUPPORT", None),
    ("SUPPORTS", None), ("UNSUPPORTEDLY", None), ("UN-SUPPORTED", None), ("N/A", None),
]


@pytest.mark.parametrize("output,expected", CASES)
def test_parse_verdict(output, expected):
    assert parse_verdict(output) is expected


def test_table_size():
    assert len(CASES) >= 30 and sum(e is None for _, e in CASES) >= 15
