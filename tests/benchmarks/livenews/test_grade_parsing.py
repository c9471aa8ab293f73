"""The figure-8 grade parser on realistic judge outputs: only an answer that *is* a grade parses.

The prompt ends 'Just return the letters "A", "B", or "C", with no text around it.' Accepted:
the letter (any case, wrapped in markdown, quotes, brackets or punctuation), the letter with its
own grade name, the grade name alone, optionally after a "Grade:" / "Answer:" label. Everything
else (prose, negations, hedges, two grades, a letter with another grade's name) is malformed:
``None``, which the judge stage retries and then reports as ungraded.
"""

from __future__ import annotations

import pytest

from engine.benchmarks.livenews.grader import parse_grade

C, I, N = "CORRECT", "INCORRECT", "NOT ATTEMPTED"  # noqa: E741 (the grader's letters)

CASES = [
    # the bare letter, as asked
    ("A", C), ("B", I), ("C", N),
    ("a", C), ("b", I), (" b\n", I), ("\n\nC\n", N),
    # wrapped in markdown / quotes / punctuation
    ("**A**", C), ("*B*", I), ("`C`", N), ("__B__", I), ('"B"', I), ("'A'", C), ("“C”", N),
    ("A.", C), ("(B)", I), ("[C]", N), ("**A.**", C), ("# B", I),
    # the letter with its own grade name
    ("A: CORRECT", C), ("B) INCORRECT", I), ("C - NOT ATTEMPTED", N), ("C) not attempted", N),
    ("**B: INCORRECT**", I), ("A (CORRECT)", C), ("B. Incorrect", I),
    # the grade name alone
    ("CORRECT", C), ("INCORRECT", I), ("NOT ATTEMPTED", N), ("correct", C), ("Incorrect.", I),
    ("**NOT ATTEMPTED**", N), ("NOT_ATTEMPTED", N), ("not-attempted", N),
    # a label before the grade
    ("Grade: B", I), ("Answer: A", C), ("**Final grade:** C: NOT ATTEMPTED", N), ("Final answer: INCORRECT", I),
    # negations: the defect ("B ... not fully correct" read as CORRECT)
    ("B … not fully correct", None), ("B - not fully correct", None), ("not correct", None),
    ("NOT CORRECT", None), ("The answer is not correct.", None), ("isn't correct", None),
    ("INCORRECT, though partly CORRECT", None),
    # both labels / several grades
    ("CORRECT or INCORRECT", None), ("A or B", None), ("A/B", None), ("A, B", None), ("A\nB", None),
    ("A: INCORRECT", None), ("B: CORRECT", None), ("C: CORRECT", None), ("CORRECT INCORRECT", None),
    # hedges and questions
    ("A?", None), ("probably A", None), ("I think B", None), ("B (probably)", None), ("Maybe C.", None),
    # trailing or leading prose
    ("B\n\nThe predicted answer names the wrong team.", None), ("A. The answer matches the gold target.", None),
    ("The answer is INCORRECT.", None), ("The grade is B", None), ("A correct answer", None),
    ("Correct answer: A", None), ("B because it contradicts the target", None),
    # not a grade
    ("", None), ("   \n ", None), ("D", None), ("AB", None), ("ACORRECT", None), ("maybe", None),
    ("I cannot grade this answer", None), ("Grade B", None), ("N/A", None), ("CORRECTLY", None),
    ("A" + " " * 100, C), ("**" * 40 + "A", None),
]


@pytest.mark.parametrize("output,expected", CASES)
def test_parse_grade(output, expected):
    assert parse_grade(output) == expected


def test_table_size():
    assert len(CASES) >= 30 and sum(e is None for _, e in CASES) >= 15


def test_long_punctuation_is_fast():
    import time

    t = time.perf_counter()
    for n in (10, 30, 60):
        assert parse_grade("*" * n + "A" + "-" * n + "!") in (C, None)
        assert parse_grade(" ." * n) is None
    assert time.perf_counter() - t < 1.0
