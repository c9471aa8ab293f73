"""Analyst judge parsing and metric arithmetic on hand-made cases."""

from __future__ import annotations

import numpy as np
import pytest

from engine.benchmarks.analyst.scoring import (
    checklist_score,
    coverage,
    figures,
    hallucination_rate,
    parse_checklist,
    parse_claims,
    parse_rating,
    parse_verdict,
)


@pytest.mark.parametrize("text,want", [
    ("The table is complete... therefore, the rating is: 4", 4),
    ("Therefore, the rating is: **5**", 5),
    ("therefore, the rating is: 1/5", 1),               # the paper's parsing bug read this as 0
    ("Step 1 ... the rating is: 2. On reflection, therefore, the rating is: 3", 3),
    ("Rating is 5", 5),
    ("I would give it a 4.", None),
    ("therefore, the rating is: 6", None),
    ("therefore, the rating is: 0", None),
    ("", None),
])
def test_parse_rating(text, want):
    assert parse_rating(text) == want


def test_checklist_score_arithmetic():
    # 15 criteria summing to 43 -> 57.33 %, one of the paper's per-report numbers
    s = checklist_score([3] * 13 + [2, 2])
    assert s.percent == pytest.approx(100 * 43 / 75) and round(s.percent, 2) == 57.33
    # a criterion without a rating leaves the score missing (not 100 % over the 14 rated ones)
    assert checklist_score([5] * 14 + [None]) == checklist_score([5] * 14).__class__(None, 14, 1)
    assert checklist_score([None, None]).percent is None and checklist_score([]).percent is None
    assert checklist_score([1] * 15).percent == 20.0
    with pytest.raises(ValueError):
        checklist_score([0])


def test_parse_checklist():
    text = "Here:\n" + "\n".join(
        f"- The response should include item {i}.\n" + "\n".join(f" - {s}: level {s}" for s in range(1, 6))
        for i in range(3)) + "\n- The response should be incomplete.\n - 1: only one level"
    items = parse_checklist(text)
    assert len(items) == 3 and items[0].startswith("The response should include item 0.") and "- 5: level 5" in items[2]
    assert parse_checklist("no list here") is None


def test_claims_and_hallucination_arithmetic():
    out = 'Sure:\n```\n{"GDP grew 2.1% in 2023": "GDP grew 2.1% in 2023.", "Ohio had 12 crashes": "12 crashes"}\n```'
    assert parse_claims(out) == {"GDP grew 2.1% in 2023": "GDP grew 2.1% in 2023.", "Ohio had 12 crashes": "12 crashes"}
    assert parse_claims("no json") is None and parse_claims('{"a": 1}') is None and parse_claims("[1, 2]") is None
    # the prompt's example keys copied back (the 0.5B model does this) are not claims
    assert parse_claims('{"Atomic claim 1 here": "Crashes fell 4%.", "Atomic claim 2 here": "x"}') is None
    assert parse_verdict("SUPPORTED") is True and parse_verdict("Unsupported.") is False
    assert parse_verdict("SUPPORTED or UNSUPPORTED") is None and parse_verdict("yes") is None
    # a verdict that could not be parsed counts as unsupported, and is counted as unverified
    h = hallucination_rate([True, False, True, None, False])
    assert (h.percent, h.claims, h.unsupported, h.unverified) == (60.0, 5, 3, 1)
    assert hallucination_rate([]).percent is None and hallucination_rate([None]).percent == 100.0
    # the case: 40 claims, 10 unsupported, 4 of them written "Not supported" (unparsed)
    verdicts = [parse_verdict("SUPPORTED")] * 30 + [parse_verdict("UNSUPPORTED")] * 6 + [parse_verdict("Not supported")] * 4
    h = hallucination_rate(verdicts)
    assert (h.percent, h.unverified) == (25.0, 4)


def test_figures_and_coverage():
    md = ("# Report\n![Unemployment rate by state, 2020-2024](figs/unemp.png)\n\ntext\n"
          "![](figs/b.png)\nFigure 2: Crashes per year in Columbus\n\nFigure 3: Budget by department (source: city)\n")
    figs = figures(md)
    assert [f.caption for f in figs] == ["Unemployment rate by state, 2020-2024", "Crashes per year in Columbus",
                                         "Budget by department (source: city)"]
    assert [f.path for f in figs] == ["figs/unemp.png", "figs/b.png", ""]
    sim = np.array([[0.9, 0.1], [0.2, 0.55], [0.3, 0.61]])
    assert coverage(sim, 0.6) == (pytest.approx(200 / 3), 2, 3)
    assert coverage(np.zeros((0, 2)), 0.6) == (None, 0, 0)
    assert coverage(np.zeros((2, 0)), 0.6) == (0.0, 0, 2)
