"""Paired tests, corrections and bootstrap intervals on hand-computable cases."""

from __future__ import annotations

import random

import pytest

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
