"""Grades and scales: a relevance grade read from a cell, the one reader of a ``LOW-HIGH`` grade scale, and a
judgments row's grade checked against the scale given."""

from __future__ import annotations

import re
from typing import Any

from harness.datasets.convert.options import ConvertOptions
from harness.datasets.convert.tables import Table
from harness.errors import HarnessError, setting

# LOW-HIGH: two integers (each may be negative) joined by "-", an en dash, "..", ":" or " to ".
SCALE = re.compile(r"\s*(-?\d+)\s*(?:-|–|\.\.|:| to )\s*(-?\d+)\s*")


def parse_grade(value: Any, allow_negative: bool, decimal_comma: bool = False) -> int:
    """An integer relevance grade from a cell: ``2``, ``"2"``, ``2.0`` and ``"2.0"`` give 2; with
    `decimal_comma`, ``"2,0"`` too (``"2,5"`` is not an integer).

    Raises:
        ValueError: Missing, non-integer or (unless `allow_negative`) negative; the message says which.
    """
    if value is None or isinstance(value, bool) or (isinstance(value, str) and not value.strip()):
        raise ValueError("missing grade")
    if isinstance(value, int):
        grade = value
    else:
        text = str(value).strip()
        number_text = text.replace(",", ".") if decimal_comma and text.count(",") == 1 and "." not in text else text
        try:
            grade = int(text)
        except ValueError:
            try:
                number = float(number_text)
            except ValueError:
                comma = (
                    f" (a decimal comma? pass {setting('decimal_comma')})" if "," in text and not decimal_comma else ""
                )
                raise ValueError(f"grade {text!r} is not an integer{comma}") from None
            if not number.is_integer():
                raise ValueError(f"grade {text!r} is not an integer") from None
            grade = int(number)
    if grade < 0 and not allow_negative:
        raise ValueError(f"negative grade {grade} (pass {setting('allow_negative')} to keep TREC-COVID-style -1)")
    return grade


def scale_bounds(text: str) -> tuple[int, int]:
    """The (lowest, highest) grade of a scale written ``LOW-HIGH``: ``"0-3"`` → (0, 3), ``"-1-2"`` → (-1, 2);
    also ``0..3``, ``0:3``, ``0 to 3`` and ``0–3``. The one reader of a grade scale (convert's
    `parse_grade_scale`, the merge's `harness.judging.merge.parse_scale`; each names its own setting).

    A scale has two grades or more, so LOW must be below HIGH: a one-grade scale (``1-1``) gives a judge no
    choice, leaves agreement undefined (κ and α divide by an expected disagreement of 0), and is not needed
    for a list of relevant pairs (convert's ``default_grade``, or a scale ``0-1``, accept it).

    Raises:
        ValueError: The reason alone (the caller names its setting): not two integers, or LOW not below HIGH.
    """
    match = SCALE.fullmatch(text)
    if not match:
        raise ValueError("expected LOWEST-HIGHEST, e.g. 0-3")
    low, high = int(match.group(1)), int(match.group(2))
    if low > high:
        raise ValueError("the lowest grade is above the highest")
    if low == high:
        raise ValueError("the lowest grade is the highest: a scale has two grades or more, e.g. 0-1")
    return low, high


def parse_grade_scale(text: str) -> tuple[int, int]:
    """`scale_bounds` for convert's ``grade_scale`` setting.

    Raises:
        HarnessError: As `scale_bounds`, naming the setting (``--grade-scale '3-0': ...``).
    """
    try:
        return scale_bounds(text)
    except ValueError as exc:
        raise HarnessError(f"{setting('grade_scale')} {text!r}: {exc}") from None


def table_grade(table: Table, position: int, record: dict[str, Any], column: str, options: ConvertOptions) -> int:
    """The grade of a judgments row, checked against the scale when one is given."""
    try:
        grade = scaled_grade(record.get(column), options, table.decimal_comma)
    except ValueError as exc:
        raise table.error(f"{exc} in column {column!r}", position) from None
    scale = options.grade_scale
    if scale and not scale[0] <= grade <= scale[1]:
        raise table.error(
            f"grade {grade} is outside the scale {scale[0]}-{scale[1]} in column {column!r}",
            position,
            f"correct it, or widen {setting('grade_scale')}",
        )
    return grade


def scaled_grade(value: Any, options: ConvertOptions, decimal_comma: bool = False) -> int:
    """`parse_grade` under the options: negative grades allowed when the scale starts below 0."""
    scale = options.grade_scale
    return parse_grade(
        value, options.allow_negative or bool(scale and scale[0] < 0), decimal_comma or options.decimal_comma
    )
