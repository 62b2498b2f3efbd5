"""Paired significance tests over per-query scores, multiple-testing corrections, bootstrap CIs.

Two systems evaluated on the same judged queries give paired per-query differences
``d_q = score_B(q) - score_A(q)``. Three tests of "mean difference = 0", all two-sided:

* **paired t-test** (scipy's ``ttest_rel``): assumes the mean of the differences is roughly normal,
  which holds for the hundreds of queries of a BEIR test set;
* **paired randomization test** (sign flipping): under the null hypothesis each difference is as
  likely to have either sign, so ``p = (1 + #{rounds r : |mean(s_r · d)| ≥ |mean(d)|}) / (1 + rounds)``
  with random signs ``s_r`` from a fixed seed (Fisher; Smucker, Allan & Carterette 2007 recommend it
  for IR). Identical runs give p = 1;
* **paired bootstrap test**: the bootstrap distribution of the mean difference shifted to mean 0,
  ``p = (1 + #{r : |mean*_r(d) − mean(d)| ≥ |mean(d)|}) / (1 + rounds)`` (Efron & Tibshirani 1993, §16.4;
  Sakai 2006), over the resamples `bootstrap_ci` draws for the seed.

The tests of many pairs at once (`sign_flip_means`, `bootstrap_means`, `pair_p_values`: one matrix of signs or
resamples for every pair, `harness.evaluation.resolution`) are the ones `t_test`, `randomization_test` and
`bootstrap_test` run on one pair, so `compare` and `report --resolution` give one p-value for one pair.

Corrections across several tests (`adjust`, `CORRECTIONS`): ``bonferroni`` multiplies each p by the number of
tests; ``holm``'s step-down multiplies the i-th smallest by (m − i + 1) and keeps the adjusted values monotone
(both control the family-wise error rate; Holm rejects at least as much); ``bh`` (Benjamini–Hochberg's step-up,
statsmodels' ``fdr_bh``) multiplies the i-th smallest by m / i, keeps them monotone from the largest down, and
controls the false discovery rate instead; ``none`` leaves them.

Bootstrap CIs of a mean over queries (`bootstrap_ci`) are `harness.evaluation.agreement_stats`'s seeded percentile
bootstrap, the one the agreement and ranking intervals use: the same seed draws the same resamples.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.errors import HarnessError, setting
from harness.evaluation.agreement_stats import bootstrap_values, percentile_interval

if TYPE_CHECKING:
    import numpy as np

DEFAULT_ROUNDS = 10_000
DEFAULT_SEED = 0
CORRECTIONS = ("holm", "bh", "bonferroni", "none")
BLOCK_ITEMS = 4_000_000  # the most numbers one block of draws or of pair statistics holds


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
    p_bootstrap: float

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
    """Two-sided paired t-test p-value (scipy's ``ttest_rel``); 1.0 when every difference is 0, 0.0 for a
    constant nonzero shift (zero variance, infinite t)."""
    return float(pair_p_values([_pair(a, b)], [0], [1], "t")[0])


def randomization_test(
    a: Sequence[float], b: Sequence[float], rounds: int = DEFAULT_ROUNDS, seed: int = DEFAULT_SEED
) -> float:
    """Two-sided paired randomization (sign-flip) test p-value, reproducible for a seed (`sign_flip_means`'
    draws from ``default_rng(seed)``)."""
    import numpy as np

    _check_rounds(rounds)
    scores = _pair(a, b)
    if scores.shape[1] == 0:
        return 1.0
    nulls = sign_flip_means(scores, rounds, np.random.default_rng(seed))
    return float(pair_p_values([scores], [0], [1], "randomization", nulls=nulls)[0])


def bootstrap_test(
    a: Sequence[float], b: Sequence[float], rounds: int = DEFAULT_ROUNDS, seed: int = DEFAULT_SEED
) -> float:
    """Two-sided paired bootstrap test p-value (the shifted bootstrap of the mean difference over
    `bootstrap_means`' resamples, the draws of `bootstrap_ci` for the seed)."""
    import numpy as np

    _check_rounds(rounds)
    scores = _pair(a, b)
    if scores.shape[1] == 0:
        return 1.0
    booted = bootstrap_means(scores, rounds, np.random.default_rng(seed))
    return float(pair_p_values([scores], [0], [1], "bootstrap", booted=booted)[0])


def _check_rounds(rounds: int) -> None:
    if rounds < 1:
        raise HarnessError(f"{setting('rounds')} must be positive, got {rounds}")


def _pair(a: Sequence[float], b: Sequence[float]):
    import numpy as np

    return np.asarray([a, b], dtype=np.float64).reshape(2, -1)


# --------------------------------------------------------------------------- every pair at once


def _rows_per_block(n: int) -> int:
    return max(1, BLOCK_ITEMS // max(n, 1))


def sign_flip_means(scores: np.ndarray, rounds: int, generator: np.random.Generator) -> np.ndarray:
    """Each system's mean under `rounds` random sign flips of the queries (a rounds × systems array): the signs
    ``generator.choice((-1.0, 1.0), size=(rounds, n))``, drawn in blocks of at most `BLOCK_ITEMS` (numpy draws
    the same numbers whatever the blocks). A pair's statistic under a flip is the difference of its two
    systems' columns (the mean is linear), so one matrix of signs serves every pair.

    Args:
        scores: A systems × queries array.
    """
    import numpy as np

    n = scores.shape[1]
    out = [np.zeros((0, scores.shape[0]))]
    for start in range(0, rounds, _rows_per_block(n)):
        signs = generator.choice((-1.0, 1.0), size=(min(_rows_per_block(n), rounds - start), n))
        out.append(signs @ scores.T / n)
    return np.concatenate(out)


def bootstrap_means(scores: np.ndarray, rounds: int, generator: np.random.Generator) -> np.ndarray:
    """Each system's mean on `rounds` bootstrap resamples of the queries (a rounds × systems array): the
    resamples of `agreement_stats.bootstrap_values` (its ``integers(0, n, size=(rounds, n))`` draws), each
    turned into counts of each query so that one product gives every system's mean."""
    import numpy as np

    n = scores.shape[1]

    def means(rows: np.ndarray) -> np.ndarray:
        offsets = (rows + n * np.arange(len(rows))[:, None]).ravel()
        counts = np.bincount(offsets, minlength=len(rows) * n).reshape(len(rows), n).astype(np.float64)
        return counts @ scores.T / n

    return bootstrap_values(n, means, rounds, generator).reshape(rounds, scores.shape[0])


def pair_p_values(
    blocks: Sequence[np.ndarray],
    first: Sequence[int],
    second: Sequence[int],
    test: str,
    nulls: np.ndarray | None = None,
    booted: np.ndarray | None = None,
    weights: Sequence[float] | None = None,
) -> np.ndarray:
    """Two-sided p-values of the pairs (first[k], second[k]) of rows, on the (weighted) mean over `blocks` (one
    systems × queries array per dataset) of each dataset's mean difference.

    Args:
        test: ``randomization`` (needs `nulls`: the mean over datasets of `sign_flip_means`), ``bootstrap``
            (needs `booted`: the same of `bootstrap_means`) or ``t`` (Welch–Satterthwaite over datasets; on one
            dataset scipy's ``ttest_rel``).
        weights: Each block's weight in the mean (default 1 / their number).

    Returns:
        One p per pair; 1 where every difference is 0.
    """
    import numpy as np

    first, second = np.asarray(first, dtype=np.intp), np.asarray(second, dtype=np.intp)
    weights = [1 / len(blocks)] * len(blocks) if weights is None else list(weights)
    p = np.empty(len(first))
    widest = max(
        [b.shape[1] for b in blocks] + [0 if nulls is None else len(nulls), 0 if booted is None else len(booted)]
    )
    step = max(1, BLOCK_ITEMS // max(widest, 1))
    for start in range(0, len(first), step):
        i, j = first[start : start + step], second[start : start + step]
        zero = np.logical_and.reduce([(b[j] == b[i]).all(axis=1) for b in blocks])
        if test == "t":
            values = _t_test(blocks, weights, i, j)
        else:
            observed = sum(w * (b[j].mean(axis=1) - b[i].mean(axis=1)) for w, b in zip(weights, blocks))
            if test == "randomization":
                null = nulls[:, j] - nulls[:, i]
            else:  # the bootstrap's differences, shifted to the null's mean of 0
                null = booted[:, j] - booted[:, i] - observed
            # A tolerance, so that float noise does not make the observed value itself "not ≥".
            exceed = (np.abs(null) >= np.abs(observed) - 1e-12).sum(axis=0)
            values = (exceed + 1) / (len(null) + 1)
        p[start : start + step] = np.where(zero, 1.0, values)
    return p


def _t_test(blocks: Sequence[np.ndarray], weights: Sequence[float], i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Two-sided p of the (stratified) paired t-test of the pairs (i, j); 0 for a constant nonzero shift."""
    import numpy as np
    from scipy import stats

    total, variance, df_terms, constant = 0.0, 0.0, 0.0, True
    for w, block in zip(weights, blocks):
        d = block[j] - block[i]
        n = d.shape[1]
        flat = d.max(axis=1) - d.min(axis=1) < 1e-15
        constant = constant & flat
        v = np.zeros(len(d)) if n < 2 else np.where(flat, 0.0, d.var(axis=1, ddof=1) / n)
        total = total + w * d.mean(axis=1)
        variance = variance + w**2 * v
        df_terms = df_terms + ((w**2 * v) ** 2 / (n - 1) if n > 1 else 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = 2 * stats.t.sf(np.abs(total / np.sqrt(variance)), variance**2 / df_terms)
    p = np.where(constant, np.where(np.abs(total) < 1e-15, 1.0, 0.0), p)
    return np.where(np.isnan(p), 1.0, p)


def difference_intervals(
    booted: np.ndarray, first: Sequence[int], second: Sequence[int], level: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """The percentile intervals (numpy's linear quantiles, as `bootstrap_ci`) of each pair's resampled
    difference ``booted[:, second] − booted[:, first]``, pairs in blocks."""
    import numpy as np

    first, second = np.asarray(first, dtype=np.intp), np.asarray(second, dtype=np.intp)
    low, high = np.empty(len(first)), np.empty(len(first))
    tail = (1 - level) / 2
    step = max(1, BLOCK_ITEMS // max(len(booted), 1))
    for start in range(0, len(first), step):
        i, j = first[start : start + step], second[start : start + step]
        low[start : start + step], high[start : start + step] = np.quantile(
            booted[:, j] - booted[:, i], [tail, 1 - tail], axis=0
        )
    return low, high


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
        bootstrap_test(values_a, values_b, rounds, seed),
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


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """Benjamini–Hochberg adjusted p-values (statsmodels' ``fdr_bh``; same order as given)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i], reverse=True)
    adjusted = [0.0] * m
    running = 1.0
    for position, i in enumerate(order):
        running = min(running, m / (m - position) * p_values[i])
        adjusted[i] = min(1.0, running)
    return adjusted


def adjust(p_values: Sequence[float], correction: str = "holm") -> list[float]:
    """The p-values adjusted by one of `CORRECTIONS` (``none`` returns them as given).

    Raises:
        HarnessError: An unknown correction.
    """
    methods = {"holm": holm, "bh": benjamini_hochberg, "bonferroni": bonferroni, "none": list}
    if correction not in methods:
        raise HarnessError(f"unknown correction {correction!r}; use one of {', '.join(CORRECTIONS)}")
    return methods[correction](p_values)


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
