"""The one reader of a ``LOW-HIGH`` grade scale (`harness.datasets.convert.grades.scale_bounds`), through both
of its callers: convert's ``grade_scale`` and the merge's ``scale``.

The expectations are built here by brute force: every text written from two grades on -3..5, each separator and
spacing, is a scale exactly when the first grade is below the second (one rule for both callers: a one-grade
scale is refused), and texts that are not two integers joined by a separator are refused by both.
"""

from __future__ import annotations

import itertools

import pytest

from harness.datasets.convert import parse_grade_scale
from harness.errors import HarnessError
from harness.judging.merge import parse_scale

SEPARATORS = ("-", "–", "..", ":", " to ")
GRADES = range(-3, 6)
CASES = [
    (f"{pad}{low}{pad}{separator}{pad}{high}{pad}", low, high)
    for low, high in itertools.product(GRADES, GRADES)
    for separator in SEPARATORS
    for pad in ("", " ")
]
NOT_SCALES = ["", " ", "0", "3", "-3", "a-b", "0-", "-0-", "..3", "0..", "0-3-4", "1.5-3", "0 3", "0—3", "0_3", "0,3"]


def _merge_refusal(text: str) -> str:
    with pytest.raises(ValueError) as caught:
        parse_scale(text)
    return str(caught.value)


def _convert_refusal(text: str) -> str:
    with pytest.raises(HarnessError) as caught:
        parse_grade_scale(text)
    return str(caught.value)


def test_every_two_grades_make_a_scale_exactly_when_the_first_is_below_the_second():
    assert len(CASES) == len(GRADES) ** 2 * len(SEPARATORS) * 2
    for text, low, high in CASES:
        if low < high:
            assert parse_scale(text) == (low, high), text
            assert parse_grade_scale(text) == (low, high), text
            continue
        assert _merge_refusal(text) == f"grade scale {text!r} is not LOW-HIGH with LOW < HIGH (e.g. 0-3)"
        reason = (
            "the lowest grade is above the highest"
            if low > high
            else "the lowest grade is the highest: a scale has two grades or more, e.g. 0-1"
        )
        assert _convert_refusal(text) == f"`grade_scale` {text!r}: {reason}", text


@pytest.mark.parametrize("text", NOT_SCALES)
def test_a_text_that_is_not_two_grades_is_refused_by_both_callers(text):
    assert _merge_refusal(text) == f"grade scale {text!r} is not LOW-HIGH with LOW < HIGH (e.g. 0-3)"
    assert _convert_refusal(text) == f"`grade_scale` {text!r}: expected LOWEST-HIGHEST, e.g. 0-3"
