"""Paired tests, corrections and bootstrap intervals on hand-computable cases."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import HarnessError
from harness.evaluation.significance import (
    bonferroni,
    bootstrap_ci,
    compare_metric,
    holm,
    paired_values,
    randomization_test,
    t_test,
)


def test_identical_runs_give_p_one():
    a = [0.1, 0.5, 0.9, 0.0]
    assert t_test(a, a) == 1.0 and randomization_test(a, a) == 1.0


def test_constant_shift_gives_a_tiny_p():
    a = [random.Random(i).random() * 0.5 for i in range(100)]
    b = [x + 0.2 for x in a]
    assert t_test(a, b) < 1e-10
    assert randomization_test(a, b, rounds=2000) == pytest.approx(1 / 2001)  # the minimum possible


def test_randomization_agrees_with_the_t_test_on_normal_differences():
    rng = random.Random(7)
    a = [rng.gauss(0.5, 0.2) for _ in range(400)]
    b = [x + rng.gauss(0.02, 0.2) for x in a]
    assert randomization_test(a, b, rounds=20_000) == pytest.approx(t_test(a, b), abs=0.01)


def test_randomization_is_exact_on_a_tiny_case():
    # d = (+1, +1): of the 4 sign patterns, 2 reach |mean| >= 1 → p ≈ 0.5.
    assert randomization_test([0, 0], [1, 1], rounds=20_000, seed=3) == pytest.approx(0.5, abs=0.02)
    assert randomization_test([0, 0], [1, 1], rounds=500, seed=1) == randomization_test([0, 0], [1, 1], 500, 1)
    with pytest.raises(HarnessError):
        randomization_test([0], [1], rounds=0)


def test_compare_metric_counts():
    test = compare_metric("nDCG@10", {"q1": 0.5, "q2": 0.2, "q3": 0.9}, {"q1": 0.7, "q2": 0.2, "q3": 0.1})
    assert (test.wins, test.ties, test.losses, test.n_queries) == (1, 1, 1, 3)
    assert test.difference == pytest.approx((0.7 + 0.2 + 0.1 - 0.5 - 0.2 - 0.9) / 3)
    with pytest.raises(HarnessError, match="different queries"):
        paired_values({"q1": 1.0}, {"q2": 1.0})


def test_corrections():
    assert bonferroni([0.01, 0.04, 0.5]) == pytest.approx([0.03, 0.12, 1.0])
    # Holm: sorted 0.01*3, 0.03*2, 0.04*1 → 0.03, 0.06, 0.06 (kept monotone).
    assert holm([0.04, 0.01, 0.03]) == pytest.approx([0.06, 0.03, 0.06])
    assert holm([]) == []


def test_bootstrap_ci_brackets_the_mean():
    values = [random.Random(i).random() for i in range(200)]
    low, high = bootstrap_ci(values)
    mean = sum(values) / len(values)
    assert low < mean < high and high - low < 0.2
    assert bootstrap_ci([0.5] * 10) == (0.5, 0.5)


@settings(derandomize=True, deadline=None, max_examples=40)
@given(
    st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]), min_size=1, max_size=40),  # ties everywhere
    st.integers(0, 2**32 - 1),
    st.integers(1, 60),
    st.sampled_from([0.5, 0.9, 0.95]),
)
def test_bootstrap_ci_is_the_seeded_percentile_bootstrap_drawn_as_numpy_draws_it(values, seed, rounds, level):
    """The same numbers for a seed as the resamples written out: default_rng(seed) draws (rounds, n) indices at
    once, each row's mean, numpy's quantiles; and the same interval as the agreement bootstrap of the mean."""
    import numpy as np

    from harness.evaluation.agreement_stats import bootstrap_interval

    data = np.asarray(values)
    means = data[np.random.default_rng(seed).integers(0, len(data), size=(rounds, len(data)))].mean(axis=1)
    tail = (1 - level) / 2
    expected = (float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail)))
    assert bootstrap_ci(values, rounds, seed, level) == expected
    shared = bootstrap_interval(len(data), lambda rows: float(data[rows].mean()), rounds, seed, level)
    assert (shared.low, shared.high) == pytest.approx(expected, abs=1e-12)


def test_bootstrap_ci_of_scores_holding_a_nan_is_nan():
    low, high = bootstrap_ci([0.5, float("nan"), 0.25], rounds=200)
    assert low != low and high != high
