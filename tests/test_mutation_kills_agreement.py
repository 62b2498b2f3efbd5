"""Cohen's κ and Krippendorff's α (`harness.judging.agreement`) where the common cases do not reach: every
weighting and level against scikit-learn and the ``krippendorff`` package, on scales with grades nobody gave,
units of two to four annotators, a single unit, and the undefined cases; the refusals and the table's text as a
user reads them."""

from __future__ import annotations

import math
import random

import krippendorff
import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score

from harness.judging.agreement import Agreement, PairAgreement, cohen_kappa, krippendorff_alpha

SCALE = [0, 1, 2, 3, 4]  # 4 is never given below: it still counts in the distances


def _grades(seed: int, n: int = 60) -> tuple[list[int], list[int]]:
    rng = random.Random(seed)
    first = [rng.choice([0, 1, 1, 2, 3]) for _ in range(n)]
    second = [g if rng.random() < 0.6 else rng.choice([0, 1, 2, 3]) for g in first]
    return first, second


@pytest.mark.parametrize("weights", [None, "none", "linear", "quadratic"])
@pytest.mark.parametrize("seed", [0, 1])
def test_kappa_equals_scikit_learn_for_every_weighting(weights, seed):
    first, second = _grades(seed)
    expected = cohen_kappa_score(first, second, labels=SCALE, weights=None if weights == "none" else weights)
    assert cohen_kappa(first, second, SCALE, weights) == pytest.approx(expected, abs=1e-12)


def test_kappa_refuses_what_it_cannot_compute_in_words_a_user_can_act_on():
    with pytest.raises(ValueError) as unknown:
        cohen_kappa([0, 1], [1, 1], SCALE, "cubic")
    assert str(unknown.value) == "unknown weights 'cubic' (none, linear or quadratic)"
    with pytest.raises(ValueError) as uneven:
        cohen_kappa([0, 1, 2], [1, 1], SCALE)
    assert str(uneven.value) == "3 grades against 2: both annotators must grade the same items"
    assert math.isnan(cohen_kappa([], [], SCALE))  # no items: undefined, not 0 and not an error
    assert math.isnan(cohen_kappa([2, 2], [2, 2], SCALE))  # one grade everywhere: no room for chance


def _reliability(units: list[list[int]], annotators: int) -> np.ndarray:
    """The ``krippendorff`` package's layout: annotators × units, NaN where an annotator did not grade."""
    data = np.full((annotators, len(units)), np.nan)
    for column, grades in enumerate(units):
        data[: len(grades), column] = grades
    return data


@pytest.mark.parametrize("level", ["ordinal", "interval", "nominal"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_alpha_equals_the_krippendorff_package_at_every_level(level, seed):
    rng = random.Random(seed)
    units = []
    for _ in range(40):  # two to four annotators per unit, grades spread over 0-3 of the 0-4 scale
        base = rng.choice([0, 1, 2, 3])
        units.append([min(3, max(0, base + rng.choice([-2, -1, 0, 0, 1]))) for _ in range(rng.randint(2, 4))])
    units.append([2])  # a unit one annotator graded: left out by both
    expected = krippendorff.alpha(
        reliability_data=_reliability(units, 4), level_of_measurement=level, value_domain=SCALE
    )
    assert krippendorff_alpha(units, SCALE, level) == pytest.approx(expected, abs=1e-12)


def test_alpha_of_a_single_unit_of_two_grades_is_defined():
    expected = krippendorff.alpha(reliability_data=np.array([[0.0], [3.0]]), level_of_measurement="ordinal",
                                  value_domain=SCALE)  # fmt: skip
    assert krippendorff_alpha([[0, 3]], SCALE, "ordinal") == pytest.approx(expected, abs=1e-12)


def test_alpha_refuses_an_unknown_level_and_is_undefined_without_pairs_or_spread():
    with pytest.raises(ValueError) as unknown:
        krippendorff_alpha([[0, 1], [1, 1]], SCALE, "ratio")
    assert str(unknown.value) == "unknown level 'ratio' (ordinal, interval or nominal)"
    assert math.isnan(krippendorff_alpha([[1], [2]], SCALE))  # nobody shares a unit
    assert math.isnan(krippendorff_alpha([[2, 2], [2, 2, 2]], SCALE))  # one grade everywhere


def test_the_table_reads_as_documented():
    pair = PairAgreement("alice", "bob", 12, 0.75, 0.5)
    table = Agreement(["alice", "bob"], [pair], 0.4, 12, "linear", "ordinal", SCALE).format_text().splitlines()
    assert table[0] == "agreement (2 annotators; Cohen's κ linear-weighted):"
    assert table[1] == "  " + "annotator A".ljust(20) + " " + "annotator B".ljust(20) + " both graded   same       κ"
    assert table[2] == "  " + "alice".ljust(20) + " " + "bob".ljust(20) + " " + "12".rjust(11) + "  75.0%   0.500"
    empty = Agreement(["alice", "bob"], [], float("nan"), 0, "none", "nominal", SCALE).format_text().splitlines()
    assert empty[2] == "  (no two annotators graded the same pair)"
    assert empty[3].endswith("over 0 pairs graded by two or more: n/a")


def test_ordinal_alpha_counts_grades_nobody_gave_between_two_others_as_empty():
    rng = random.Random(7)  # grades 0, 2 and 4 only: 1 and 3 lie between them with no value
    units = [[rng.choice([0, 2, 2, 4]) for _ in range(rng.randint(2, 3))] for _ in range(30)]
    expected = krippendorff.alpha(
        reliability_data=_reliability(units, 3), level_of_measurement="ordinal", value_domain=SCALE
    )
    assert krippendorff_alpha(units, SCALE, "ordinal") == pytest.approx(expected, abs=1e-12)
