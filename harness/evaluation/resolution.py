"""Rank resolution: which of N systems a benchmark can tell apart, on one dataset and across several.

For N systems scored on the same queries (a systems × queries matrix per dataset):

* **every pair** is tested with a paired test over queries (``test``), all pairs of one scope (a dataset, or the
  mean over datasets) at once, and the p-values adjusted across that family of N(N−1)/2 pairs (``correction``,
  `harness.evaluation.significance.adjust`); each pair also gets its mean difference and the 95 % percentile
  bootstrap interval of that difference;
* a pair is **separable** when its adjusted p < α; the **compact letter display** (Piepho 2004, insert and
  absorb) gives each system letters so that two systems that are separable share no letter and two that are
  not share at least one; letters are assigned in rank order (the best system's group is ``a``);
* each system's **rank interval**: in each bootstrap resample of the queries the systems are ranked by their
  resampled means (rank 1 the best; means equal to `TIE_DECIMALS` decimals share the smaller rank), and the
  interval is the 2.5 % and 97.5 % quantiles of a system's ranks (numpy's ``lower`` and ``higher`` methods, so
  the bounds are ranks that occurred).

Tests (two-sided; ``d_q`` the per-query difference of a pair):

* ``randomization`` (the default): sign flipping; ``p = (1 + #{r : |mean(s_r · d)| ≥ |mean(d)|}) / (1 + rounds)``
  with random signs ``s_r`` (Smucker, Allan & Carterette 2007); one sign matrix serves every pair, computed as
  the sign-flipped means of each system (``signs @ scores.T``: linear, so a pair's statistic is the difference
  of its two systems');
* ``bootstrap``: the shifted bootstrap of the mean difference (Efron & Tibshirani 1993, §16.4; Sakai 2006):
  ``p = (1 + #{r : |mean*_r(d) − mean(d)| ≥ |mean(d)|}) / (1 + rounds)`` over the resamples that also give the
  intervals;
* ``t``: the paired t-test (scipy's ``ttest_rel`` on one dataset: it assumes the mean difference is roughly
  normal, which holds for the hundreds of queries of a BEIR test set). Across datasets, ``t = Σ_d mean(d_d) /
  sqrt(Σ_d var(d_d)/n_d)`` with Welch–Satterthwaite's degrees of freedom, which on one dataset is ``ttest_rel``.

A pair whose differences are all 0 has p = 1; one whose differences are one nonzero constant has p = 0 under the
t-test (zero variance) and the smallest p the resampling tests can give.

Across datasets the statistic of a pair is the mean over datasets of its per-dataset mean differences, and the
resampling stays within each dataset (a stratified bootstrap; sign flips per query): the sum over datasets of
each dataset's resampled means.

Seeds. On one dataset the signs are ``default_rng(seed).choice((-1.0, 1.0), size=(rounds, n))`` and the
resamples `harness.evaluation.agreement_stats.bootstrap_values`' ``default_rng(seed).integers(0, n,
size=(rounds, n))``, the draws of `significance.randomization_test` and `significance.bootstrap_ci`, so the
p-value of a pair on a dataset is `compare`'s. Across datasets one generator ``default_rng(seed)`` draws the
signs of every dataset in turn (datasets in the order given, every round of one before the next), and another
the resamples, so no two datasets share their draws. Everything is computed in blocks of at most
`significance.BLOCK_ITEMS` numbers: 100 systems × 18 datasets × 1,000 rounds fits in a few hundred MB (BENCHMARKS.md,
"Rank resolution").

References: Piepho, H.-P. (2004), An algorithm for a letter-based representation of all-pairwise comparisons,
J. Comput. Graph. Stat. 13(2); Smucker, Allan & Carterette (2007), A comparison of statistical significance
tests for information retrieval evaluation, CIKM; Sakai (2006), Evaluating evaluation metrics based on the
bootstrap, SIGIR.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import TYPE_CHECKING

from harness.errors import HarnessError, setting
from harness.evaluation.significance import (
    CORRECTIONS,
    DEFAULT_ROUNDS,
    DEFAULT_SEED,
    adjust,
    bootstrap_means,
    difference_intervals,
    pair_p_values,
    sign_flip_means,
)

if TYPE_CHECKING:
    import numpy as np

TESTS = ("randomization", "t", "bootstrap")
TEST_NAMES = {
    "randomization": "paired randomization test",
    "t": "paired t-test",
    "bootstrap": "paired bootstrap test",
}
ACROSS = "mean over datasets"  # the scope of the figures over every dataset
TIE_DECIMALS = 12  # resampled means equal to this many decimals tie in rank
LEVEL = 0.95
RANK_QUANTILES = (0.025, 0.975)  # a rank interval's quantiles: the 95 % interval


@dataclass(frozen=True)
class Settings:
    """How a resolution was computed (its footnote)."""

    test: str = "randomization"
    correction: str = "holm"
    alpha: float = 0.05
    rounds: int = DEFAULT_ROUNDS
    seed: int = DEFAULT_SEED

    def check(self) -> None:
        """Raises HarnessError for an unknown test or correction, α outside (0, 1), or rounds < 1."""
        if self.test not in TESTS:
            raise HarnessError(f"unknown test {self.test!r}; use one of {', '.join(TESTS)}")
        if self.correction not in CORRECTIONS:
            raise HarnessError(f"unknown correction {self.correction!r}; use one of {', '.join(CORRECTIONS)}")
        if not 0 < self.alpha < 1:
            raise HarnessError(f"{setting('alpha')} must lie strictly between 0 and 1, got {self.alpha}")
        if self.rounds < 1:
            raise HarnessError(f"{setting('rounds')} must be positive, got {self.rounds}")

    def floor_note(self, pairs: int) -> str | None:
        """Why no pair of `pairs` can be separable, when that is so: a resampling test's p is at least
        1 / (rounds + 1), and Holm's and Bonferroni's smallest adjusted p is then at least pairs / (rounds + 1)."""
        if self.test == "t" or self.correction not in ("holm", "bonferroni") or pairs / (self.rounds + 1) < self.alpha:
            return None
        return (
            f"with {self.rounds:,} rounds no p-value falls below 1/{self.rounds + 1:,}, so {self.correction} across "
            f"{pairs:,} pairs can separate none at α = {self.alpha:g}: give {setting('rounds')} ≥ "
            f"{math.ceil(pairs / self.alpha):,}, the t-test, or bh"
        )

    def describe(self) -> str:
        """``paired randomization test, 10,000 rounds, seed 0, holm correction, α = 0.05``."""
        correction = "no correction" if self.correction == "none" else f"{self.correction} correction"
        rounds = "" if self.test == "t" else f", {self.rounds:,} rounds, seed {self.seed}"
        return f"{TEST_NAMES[self.test]}{rounds}, {correction}, α = {self.alpha:g}"


@dataclass(frozen=True)
class Pair:
    """One pair of systems in one scope: `system` against `other`."""

    system: str
    other: str
    difference: float  # mean(system) − mean(other)
    low: float  # the 95 % percentile bootstrap interval of the difference
    high: float
    p: float
    p_adjusted: float  # across the scope's family of pairs
    separable: bool  # p_adjusted < alpha

    def reversed(self) -> Pair:
        """The same comparison read from `other`'s side."""
        return Pair(
            self.other, self.system, -self.difference, -self.high, -self.low, self.p, self.p_adjusted, self.separable
        )


@dataclass(frozen=True)
class Standing:
    """One system in one scope: its mean, its rank and rank interval, its letters."""

    system: str
    mean: float
    rank: int
    rank_low: int
    rank_high: int
    letters: str


@dataclass(frozen=True)
class Resolution:
    """Every system's standing and every pair's comparison in one scope (a dataset, or `ACROSS`).

    Attributes:
        standings: In rank order (ties in the order the systems were given).
        pairs: Each unordered pair once, the better-ranked system first.
        n_queries: The queries compared (summed over the datasets across datasets).
        datasets: The datasets the scope covers.
    """

    scope: str
    settings: Settings
    standings: tuple[Standing, ...]
    pairs: tuple[Pair, ...]
    n_queries: int
    datasets: tuple[str, ...]

    def standing(self, system: str) -> Standing:
        """The system's standing; KeyError when the scope does not hold it."""
        for standing in self.standings:
            if standing.system == system:
                return standing
        raise KeyError(system)

    def pair(self, system: str, other: str) -> Pair:
        """The comparison of `system` against `other` (difference = mean(system) − mean(other))."""
        for pair in self.pairs:
            if (pair.system, pair.other) == (system, other):
                return pair
            if (pair.other, pair.system) == (system, other):
                return pair.reversed()
        raise KeyError((system, other))


def resolve(
    systems: Sequence[str], scores: np.ndarray, scope: str = "", settings: Settings = Settings(), dataset: str = ""
) -> Resolution:
    """The resolution of the systems on one dataset.

    Args:
        systems: The systems' names, one per row of `scores`.
        scores: A systems × queries array of per-query scores, every system on the same queries in the same order.
        scope: The scope's name (default the dataset's).
        settings: The test, correction, α, rounds and seed.
        dataset: The dataset's name.

    Raises:
        HarnessError: Fewer than two systems, no queries, a bad setting.
    """
    return resolve_across(systems, [scores], scope or dataset, settings, [dataset] if dataset else [], fresh=True)


def resolve_across(
    systems: Sequence[str],
    scores: Sequence[np.ndarray],
    scope: str = ACROSS,
    settings: Settings = Settings(),
    datasets: Sequence[str] = (),
    fresh: bool = False,
    weights: Sequence[float] | None = None,
) -> Resolution:
    """The resolution of the systems on the mean over datasets: one systems × queries array per dataset, the
    systems in the same rows of each; resampled within each dataset (see the module's notes for the seeds).

    Args:
        fresh: Draw each dataset's signs and resamples from a generator of its own, seeded `settings.seed`
            (what `resolve` does for one dataset); default one generator across the datasets.
        weights: Each array's weight in the mean (default 1 / their number): CQADupStack's forums, for instance,
            each weigh 1/12 of the dataset's mean.

    Raises:
        HarnessError: Fewer than two systems, no dataset, a dataset without queries, a bad setting.
    """
    import numpy as np

    settings.check()
    systems = list(systems)
    if len(systems) < 2:
        raise HarnessError(f"a resolution compares two or more systems; got {len(systems)} ({', '.join(systems)})")
    if len(set(systems)) < len(systems):
        raise HarnessError(f"a system is named twice among {', '.join(systems)}")
    blocks = [np.asarray(block, dtype=np.float64) for block in scores]
    if not blocks or any(b.ndim != 2 or b.shape[0] != len(systems) or b.shape[1] == 0 for b in blocks):
        raise HarnessError(f"give one {len(systems)} systems × queries array with at least one query per dataset")
    weights = [1 / len(blocks)] * len(blocks) if weights is None else [float(w) for w in weights]
    means = sum(w * block.mean(axis=1) for w, block in zip(weights, blocks))
    booted = _across(blocks, weights, settings, fresh, bootstrap_means)
    nulls = _across(blocks, weights, settings, fresh, sign_flip_means) if settings.test == "randomization" else None
    first, second = (np.asarray(side, dtype=np.intp) for side in zip(*combinations(range(len(systems)), 2)))
    p = pair_p_values(blocks, first, second, settings.test, nulls=nulls, booted=booted, weights=weights)
    low, high = difference_intervals(booted, first, second, LEVEL)
    p_adjusted = np.asarray(adjust(p.tolist(), settings.correction))
    ranks = _ranks(means[None, :])[0]
    resampled = _ranks(booted)
    rank_low = np.quantile(resampled, RANK_QUANTILES[0], axis=0, method="lower").astype(int)
    rank_high = np.quantile(resampled, RANK_QUANTILES[1], axis=0, method="higher").astype(int)
    order = sorted(range(len(systems)), key=lambda k: (ranks[k], k))
    separable = {
        frozenset((systems[i], systems[j]))
        for i, j, q in zip(first.tolist(), second.tolist(), p_adjusted.tolist())
        if q < settings.alpha
    }
    letters = letter_display([systems[k] for k in order], separable)
    standings = tuple(
        Standing(systems[k], float(means[k]), int(ranks[k]), int(rank_low[k]), int(rank_high[k]), letters[systems[k]])
        for k in order
    )
    position = {k: n for n, k in enumerate(order)}
    pairs = []
    for n, (i, j) in enumerate(zip(first.tolist(), second.tolist())):
        pair = Pair(
            systems[j],
            systems[i],
            float(means[j] - means[i]),
            float(low[n]),
            float(high[n]),
            float(p[n]),
            float(p_adjusted[n]),
            bool(p_adjusted[n] < settings.alpha),
        )
        pairs.append(pair.reversed() if position[i] < position[j] else pair)
    pairs.sort(key=lambda pair: (position[systems.index(pair.system)], position[systems.index(pair.other)]))
    return Resolution(scope, settings, standings, tuple(pairs), sum(b.shape[1] for b in blocks), tuple(datasets))


# --------------------------------------------------------------------------- draws, ranks, letters


def _across(blocks: list[np.ndarray], weights: list[float], settings: Settings, fresh: bool, draw) -> np.ndarray:
    """The weighted mean over datasets of each dataset's resampled system means (rounds × systems): `draw` is
    `significance.sign_flip_means` or `significance.bootstrap_means`."""
    import numpy as np

    shared = np.random.default_rng(settings.seed)
    total = None
    for weight, block in zip(weights, blocks):
        means = weight * draw(block, settings.rounds, np.random.default_rng(settings.seed) if fresh else shared)
        total = means if total is None else total + means
    return total


def _ranks(means: np.ndarray) -> np.ndarray:
    """Each row's ranks, 1 the largest; values equal to `TIE_DECIMALS` decimals share the smaller rank."""
    from scipy.stats import rankdata

    return rankdata(-means.round(TIE_DECIMALS), method="min", axis=1).astype(int)


def letter_names():
    """``a``…``z``, ``A``…``Z``, then ``a2``…``Z2``, ``a3``…: a digit suffix belongs to the letter before it."""
    import string

    alphabet = string.ascii_lowercase + string.ascii_uppercase
    round_ = 1
    while True:
        yield from (letter + (str(round_) if round_ > 1 else "") for letter in alphabet)
        round_ += 1


def letter_display(order: Sequence[str], separable: set[frozenset[str]]) -> dict[str, str]:
    """The compact letter display: letters per system such that two `separable` systems share no letter and
    any two others share one (Piepho 2004, insert and absorb).

    Starting from one group of every system, each separable pair (in `order`) splits every group that holds
    both into one without the first and one without the second; a group inside another is absorbed. The
    groups are then lettered in the order of their best-ranked members (`order` is the rank order).

    Args:
        order: The systems, best first.
        separable: The pairs told apart, each a frozenset of two names.

    Returns:
        Each system's letters, e.g. ``{"bm25": "ab", ...}``.
    """
    columns = [(1 << len(order)) - 1] if order else []
    for i, j in combinations(range(len(order)), 2):
        if frozenset((order[i], order[j])) not in separable:
            continue
        both = (1 << i) | (1 << j)
        kept = [c for c in columns if c & both != both]
        split = list(
            dict.fromkeys(part for c in columns if c & both == both for part in (c & ~(1 << i), c & ~(1 << j)))
        )
        # A new group inside a kept one or inside another new one is absorbed (a kept group can never lie inside a
        # new one: it would have lain inside the group that was split).
        split = [
            c
            for c in split
            if c and not any(c & ~o == 0 for o in kept) and not any(c != o and c & ~o == 0 for o in split)
        ]
        columns = kept + split
    members = sorted(([k for k in range(len(order)) if c >> k & 1] for c in columns))
    names = letter_names()
    letters = {system: "" for system in order}
    for group in members:
        name = next(names)
        for k in group:
            letters[order[k]] += name
    return letters
