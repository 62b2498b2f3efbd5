"""Paired significance tests over per-query scores, multiple-testing corrections, bootstrap CIs.

Two systems evaluated on the same judged queries give paired per-query differences
``d_q = score_B(q) - score_A(q)``. Two tests of "mean difference = 0":

* **paired t-test** (scipy's ``ttest_rel``): assumes the mean of the differences is roughly normal,
  which holds for the hundreds of queries of a BEIR test set;
* **paired randomization test** (sign flipping): under the null hypothesis each difference is as
  likely to have either sign, so ``p = (1 + #{rounds r : |mean(s_r · d)| ≥ |mean(d)|}) / (1 + rounds)``
  with random signs ``s_r`` from a fixed seed (Fisher; Smucker, Allan & Carterette 2007 recommend it
  for IR). Identical runs give p = 1.

Corrections across several tests (e.g. one per dataset): Bonferroni multiplies each p by the number
of tests; Holm's step-down (the default) multiplies the i-th smallest by (m − i + 1) and keeps the
adjusted values monotone. Both control the family-wise error rate; Holm rejects at least as much.

Bootstrap CIs of a mean over queries (`bootstrap_ci`) are `harness.evaluation.agreement_stats`'s seeded percentile
bootstrap, the one the agreement and ranking intervals use: the same seed draws the same resamples.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.errors import HarnessError, setting
from harness.evaluation.agreement_stats import bootstrap_values, percentile_interval

DEFAULT_ROUNDS = 10_000
DEFAULT_SEED = 0


@dataclass(frozen=True)
class PairedTest:
    """The comparison of two systems on one metric."""

    metric: str
    n_queries: int
    mean_a: float
    mean_b: float
    wins: int  # queries where B > A
    ties: int
    losses: int
    p_t_test: float
    p_randomization: float

    @property
    def difference(self) -> float:
        return self.mean_b - self.mean_a


def paired_values(a: Mapping[str, float], b: Mapping[str, float]) -> tuple[list[str], list[float], list[float]]:
    """Align two per-query score maps.

    Raises:
        HarnessError: The two do not cover the same queries (different qrels or splits).
    """
    if set(a) != set(b):
        only_a, only_b = len(set(a) - set(b)), len(set(b) - set(a))
        raise HarnessError(
            f"the results cover different queries ({only_a} only in the first, {only_b} only in "
            "the second); compare results of the same dataset, split and qrels"
        )
    query_ids = sorted(a)
    return query_ids, [a[q] for q in query_ids], [b[q] for q in query_ids]


def t_test(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided paired t-test p-value; 1.0 when every difference is 0, 0.0 for a constant shift."""
    from scipy import stats

    diffs = [y - x for x, y in zip(a, b)]
    if not any(diffs):
        return 1.0
    if max(diffs) - min(diffs) < 1e-15:
        return 0.0  # a constant nonzero shift: zero variance, infinite t
    return float(stats.ttest_rel(b, a).pvalue)


def randomization_test(
    a: Sequence[float], b: Sequence[float], rounds: int = DEFAULT_ROUNDS, seed: int = DEFAULT_SEED
) -> float:
    """Two-sided paired randomization (sign-flip) test p-value, reproducible for a seed."""
    import numpy as np

    if rounds < 1:
        raise HarnessError(f"{setting('rounds')} must be positive, got {rounds}")
    diffs = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    if len(diffs) == 0 or not diffs.any():
        return 1.0
    observed = abs(diffs.mean())
    rng = np.random.default_rng(seed)
    exceed = 0
    for start in range(0, rounds, 1000):  # blocks of 1000 rounds keep memory small
        size = min(1000, rounds - start)
        signs = rng.choice((-1.0, 1.0), size=(size, len(diffs)))
        # A tolerance, so that float noise does not make the observed value itself "not ≥".
        exceed += int((np.abs((signs * diffs).mean(axis=1)) >= observed - 1e-12).sum())
    return (exceed + 1) / (rounds + 1)


def compare_metric(
    metric: str, a: Mapping[str, float], b: Mapping[str, float], rounds: int = DEFAULT_ROUNDS, seed: int = DEFAULT_SEED
) -> PairedTest:
    """Both tests and the win/tie/loss counts for one metric (B relative to A)."""
    _, values_a, values_b = paired_values(a, b)
    n = len(values_a)
    wins = sum(y > x for x, y in zip(values_a, values_b))
    losses = sum(y < x for x, y in zip(values_a, values_b))
    return PairedTest(
        metric,
        n,
        sum(values_a) / n if n else 0.0,
        sum(values_b) / n if n else 0.0,
        wins,
        n - wins - losses,
        losses,
        t_test(values_a, values_b),
        randomization_test(values_a, values_b, rounds, seed),
    )


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values (same order as given)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def bonferroni(p_values: Sequence[float]) -> list[float]:
    """Bonferroni adjusted p-values."""
    return [min(1.0, p * len(p_values)) for p in p_values]


def bootstrap_ci(
    values: Sequence[float], rounds: int = 1000, seed: int = DEFAULT_SEED, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean over queries (`agreement_stats.bootstrap_values`'
    seeded resamples, `agreement_stats.percentile_interval`'s quantiles); (0, 0) for no queries, NaN bounds where
    a resample draws a NaN score."""
    import numpy as np

    data = np.asarray(values, dtype=np.float64)
    if len(data) == 0:
        return 0.0, 0.0
    means = bootstrap_values(len(data), lambda rows: data[rows].mean(axis=1), rounds, seed)
    if np.isnan(means).any():
        return math.nan, math.nan
    interval = percentile_interval(float(data.mean()), means, level, len(data))
    return interval.low, interval.high
