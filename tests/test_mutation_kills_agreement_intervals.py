"""The bootstrap intervals of κ and α at their edges: no pairs, one pair, and resamples on which the statistic is
undefined. Each interval is checked field by field against a brute-force loop (numpy's generator drawn here with
the same seed, κ from scikit-learn, α from the `krippendorff` package, numpy's quantiles over the defined values).
No fixture of conftest.py: `tools/mutation.py` runs this file with --noconftest."""

from __future__ import annotations

import math
import warnings

import krippendorff
import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score

from harness.judging.agreement import alpha_interval, kappa_interval

SCALE = [0, 1, 2, 3]


def _fields(interval):
    return (
        interval.value,
        interval.low,
        interval.high,
        interval.level,
        interval.rounds,
        interval.undefined,
        interval.n,
    )


def _same(got, want) -> bool:
    return all((a != a and b != b) or a == pytest.approx(b) for a, b in zip(got, want, strict=True))


def _brute(value, draws, statistic, n):
    """(value, low, high, level, rounds, undefined, n) of the percentile interval over `draws`, by hand."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scikit-learn and krippendorff warn on 0/0
        values = [statistic(row) for row in draws]
    kept = [v for v in values if v == v]
    low, high = (float(np.quantile(kept, 0.025)), float(np.quantile(kept, 0.975))) if kept else (math.nan, math.nan)
    return (value, low, high, 0.95, len(values), len(values) - len(kept), n)


def _kappa_reference(first, second, weights, rounds, seed):
    n = len(first)
    draws = np.random.default_rng(seed).integers(0, n, size=(rounds, n))

    def kappa(rows):
        return cohen_kappa_score([first[i] for i in rows], [second[i] for i in rows], labels=SCALE, weights=weights)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = kappa(range(n))
    return _brute(value, draws, kappa, n)


def _alpha_reference(units, level, rounds, seed):
    n = len(units)
    draws = np.random.default_rng(seed).integers(0, n, size=(rounds, n))

    def alpha(rows):
        chosen = [units[i] for i in rows]
        data = np.full((max(len(u) for u in chosen), len(chosen)), np.nan)
        for column, grades in enumerate(chosen):
            data[: len(grades), column] = grades
        return krippendorff.alpha(reliability_data=data, level_of_measurement=level, value_domain=SCALE)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = alpha(range(n))
    return _brute(value, draws, alpha, n)


@pytest.mark.parametrize("rounds", [1, 7])
def test_no_pairs_give_an_interval_undefined_everywhere_over_no_items(rounds):
    want = (math.nan, math.nan, math.nan, 0.95, rounds, rounds, 0)
    assert _same(_fields(kappa_interval([], [], SCALE, rounds=rounds)), want)
    assert _same(_fields(alpha_interval([], SCALE, rounds=rounds)), want)
    assert _same(_fields(alpha_interval([[1], [2]], SCALE, rounds=rounds)), want)  # no unit graded twice


@pytest.mark.parametrize("weights", [None, "linear", "quadratic"])
@pytest.mark.parametrize(
    "first, second",
    [
        ([1], [2]),  # one pair: every resample is that pair, κ 0
        ([1], [1]),  # one pair of the same grade: every resample undefined
        ([1, 2], [1, 2]),  # resamples of one item are undefined, of both are 1
        ([0, 3, 3], [0, 3, 2]),  # some resamples undefined, others not
        ([0, 1, 2, 3, 1], [1, 1, 3, 3, 0]),
    ],
)
def test_kappa_interval_at_its_edges_is_the_brute_force_bootstrap(first, second, weights):
    got = kappa_interval(first, second, SCALE, weights, rounds=60, seed=3)
    assert _same(_fields(got), _kappa_reference(first, second, weights, 60, 3))


@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval"])
@pytest.mark.parametrize(
    "units",
    [
        [[1, 2]],  # one unit of two grades: every resample is it, α 0 (two values in all)
        [[1, 1]],  # one unit, one grade: undefined
        [[1, 1], [2, 2]],  # resamples of one unit undefined, of both 1
        [[0, 3, 3], [2, 2], [1, 3]],  # units of different sizes
        [[0, 1], [1, 1, 2], [3, 3], [2, 0]],
    ],
)
def test_alpha_interval_at_its_edges_is_the_brute_force_bootstrap(units, level):
    got = alpha_interval(units, SCALE, level, rounds=60, seed=5)
    assert _same(_fields(got), _alpha_reference(units, level, 60, 5))


def test_units_graded_once_are_left_out_of_the_resampled_items():
    units = [[0, 1], [2], [1, 1, 2], [3]]
    got = alpha_interval(units, SCALE, "ordinal", rounds=40, seed=2)
    assert _same(_fields(got), _alpha_reference([[0, 1], [1, 1, 2]], "ordinal", 40, 2))


def test_the_alpha_interval_is_ordinal_unless_told():
    units = [[0, 1], [1, 1, 2], [3, 3], [2, 0]]
    assert _same(_fields(alpha_interval(units, SCALE, rounds=30, seed=4)), _alpha_reference(units, "ordinal", 30, 4))


def test_an_unknown_level_of_the_interval_is_refused_naming_the_levels():
    with pytest.raises(ValueError) as caught:
        alpha_interval([[0, 1], [1, 2]], SCALE, "ratio", rounds=5)
    assert str(caught.value) == "unknown level 'ratio' (ordinal, interval or nominal)"
