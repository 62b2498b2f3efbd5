"""The one bootstrap: intervals for statistics over items (judged pairs, queries): seeded, percentile, NaN-aware.

A statistic of n items (κ of the pairs two annotators both graded, α of the pairs graded by two or more,
τ between two system rankings over the queries, a metric's mean over the queries in
`harness.evaluation.significance.bootstrap_ci`) is recomputed on `rounds` resamples of the items drawn with
replacement (numpy's ``default_rng(seed).integers(0, n, size=(rounds, n))``, read in blocks: the same seed
draws the same resamples), and the interval is the (1 − level)/2 and (1 + level)/2 quantiles of the values
(numpy's linear interpolation). A resample on which the statistic is undefined (NaN: every grade the same) is
left out, and counted; with none defined the interval is NaN. Efron & Tibshirani (1993), ch. 13, for the
percentile interval.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

DEFAULT_ROUNDS = 1000
DEFAULT_SEED = 0
DEFAULT_LEVEL = 0.95
FEW_PAIRS = 50  # below this many pairs graded by both, an agreement figure is flagged as unsteady


@dataclass(frozen=True)
class Interval:
    """A point estimate and its bootstrap interval.

    Attributes:
        value: The statistic on every item.
        low, high: The interval's bounds (NaN when no resample was defined).
        level: The interval's coverage (0.95).
        rounds: Resamples drawn.
        undefined: Resamples on which the statistic was NaN (left out).
        n: Items resampled.
    """

    value: float
    low: float
    high: float
    level: float = DEFAULT_LEVEL
    rounds: int = DEFAULT_ROUNDS
    undefined: int = 0
    n: int = 0

    def format(self, digits: int = 3) -> str:
        """``0.512 [0.301, 0.688]`` (``n/a`` for an undefined value or bound)."""
        return f"{_num(self.value, digits)} [{_num(self.low, digits)}, {_num(self.high, digits)}]"


def _num(value: float, digits: int) -> str:
    return "n/a" if value != value else f"{value:.{digits}f}"


def resample_indices(n: int, rounds: int = DEFAULT_ROUNDS, seed: int = DEFAULT_SEED):
    """The (rounds, n) array of item indices the bootstrap draws (with replacement) for this seed."""
    import numpy as np

    return np.random.default_rng(seed).integers(0, n, size=(rounds, n))


def resample_blocks(n: int, rounds: int = DEFAULT_ROUNDS, seed: int = DEFAULT_SEED, max_items: int = 4_000_000):
    """`resample_indices`'s rows in blocks of at most `max_items` indices (the same draws: one generator, read
    in order), so a statistic over many items never holds every resample at once."""
    import numpy as np

    generator = np.random.default_rng(seed)
    block = max(1, max_items // max(n, 1))
    for start in range(0, rounds, block):
        yield generator.integers(0, n, size=(min(block, rounds - start), n))


def bootstrap_interval(
    n: int,
    statistic: Callable[[Sequence[int]], float],
    rounds: int = DEFAULT_ROUNDS,
    seed: int = DEFAULT_SEED,
    level: float = DEFAULT_LEVEL,
) -> Interval:
    """The statistic on items 0..n-1 and its percentile bootstrap interval.

    Args:
        n: Number of items.
        statistic: The statistic of a list of item indices (repeats allowed); NaN where undefined.
        rounds: Resamples.
        seed: Seeds the resamples.
        level: Coverage of the interval.

    Returns:
        The `Interval`; with no items, NaN everywhere.
    """
    if n == 0:
        return undefined_interval(rounds, level)
    values = bootstrap_values(n, lambda block: [statistic(row.tolist()) for row in block], rounds, seed)
    return percentile_interval(statistic(list(range(n))), values, level, n)


def bootstrap_values(
    n: int, statistic: Callable[[np.ndarray], Sequence[float]], rounds: int = DEFAULT_ROUNDS, seed: int = DEFAULT_SEED
) -> np.ndarray:
    """The statistic on each of the `rounds` resamples of items 0..n-1 (float64, NaN where undefined): the seeded
    draws of `resample_indices`, taken block by block (`resample_blocks`), so no more than a block is held.

    Args:
        statistic: Of a block of resamples (a (resamples, n) array of item indices), one value per resample.
    """
    import numpy as np

    if rounds < 0:
        raise ValueError(f"rounds {rounds}: give rounds ≥ 0")
    values = [np.asarray(statistic(block), dtype=np.float64) for block in resample_blocks(n, rounds, seed)]
    return np.concatenate(values) if values else np.zeros(0)


def undefined_interval(rounds: int = DEFAULT_ROUNDS, level: float = DEFAULT_LEVEL) -> Interval:
    """The interval of a statistic over no items: NaN everywhere, every resample undefined."""
    _check(rounds, level)
    return Interval(math.nan, math.nan, math.nan, level, rounds, rounds, 0)


def _check(rounds: int, level: float) -> None:
    if rounds < 1 or not 0 < level < 1:
        raise ValueError(f"rounds {rounds} and level {level}: give rounds ≥ 1 and 0 < level < 1")


def percentile_interval(value: float, values: Sequence[float], level: float = DEFAULT_LEVEL, n: int = 0) -> Interval:
    """The interval of the resampled `values` (NaNs left out and counted) around the point estimate `value`."""
    import numpy as np

    _check(max(len(values), 1), level)
    every = np.asarray(values, dtype=np.float64)
    defined = every[~np.isnan(every)]
    if not len(defined):
        return Interval(value, math.nan, math.nan, level, len(every), len(every), n)
    tail = (1 - level) / 2
    low, high = np.quantile(defined, [tail, 1 - tail])
    return Interval(value, float(low), float(high), level, len(every), len(every) - len(defined), n)
