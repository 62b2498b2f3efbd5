"""Agreement between annotators on the pairs they both graded: Cohen's κ and Krippendorff's α.

Cohen's κ compares two annotators; with ``weights="linear"`` or ``"quadratic"`` a near miss on a graded
scale (2 vs 3) counts less than a far one (0 vs 3), with the distance taken between grade values over
the whole scale. Krippendorff's α compares any number of annotators, each pair graded by two or more of
them counting, at the ordinal or interval level. Both are 1 for perfect agreement, 0 for chance, and
undefined (NaN) when the grades leave no room for chance disagreement (everyone gave one grade).
Formulas: Cohen (1968) for weighted κ; Krippendorff (2011), "Computing Krippendorff's alpha-reliability",
for α's coincidence matrix. The tests check both against scikit-learn and the ``krippendorff`` package.

Each κ and α comes with a seeded percentile bootstrap interval (`harness.evaluation.agreement_stats`): κ's
over the pairs both annotators graded, α's over the pairs graded by two or more (each resampled whole, with
all its grades). Fewer than 50 such pairs get a note: the interval is then wide and the figure unsteady.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from harness.evaluation.agreement_stats import (
    DEFAULT_ROUNDS,
    DEFAULT_SEED,
    FEW_PAIRS,
    Interval,
    percentile_interval,
    resample_blocks,
    undefined_interval,
)

Votes = Mapping[tuple[str, str], Mapping[str, int]]  # (query id, doc id) → annotator → grade


def _weight(a: int, b: int, weights: str | None) -> float:
    if weights is None or weights == "none":
        return 0.0 if a == b else 1.0
    if weights == "linear":
        return abs(a - b)
    if weights == "quadratic":
        return (a - b) ** 2
    raise ValueError(f"unknown weights {weights!r} (none, linear or quadratic)")


def cohen_kappa(first: Sequence[int], second: Sequence[int], scale: Sequence[int], weights: str | None = None) -> float:
    """Cohen's κ of two annotators' grades for the same items, in the same order.

    Args:
        first, second: The grades, one per item.
        scale: Every grade of the scale (a grade nobody gave still counts in the distances).
        weights: None/"none" (unweighted), "linear" or "quadratic".

    Returns:
        κ, or NaN when it is undefined (no items, or chance agreement is already perfect).
    """
    n = len(first)
    if n != len(second):
        raise ValueError(f"{n} grades against {len(second)}: both annotators must grade the same items")
    if n == 0:
        return float("nan")
    rows, cols, both = Counter(first), Counter(second), Counter(zip(first, second))
    observed = sum(count * _weight(a, b, weights) for (a, b), count in both.items())
    expected = sum(rows[a] * cols[b] * _weight(a, b, weights) for a in scale for b in scale) / n
    return float("nan") if expected == 0 else 1.0 - observed / expected


def _ordinal_distance(c: int, k: int, totals: Mapping[int, float], scale: Sequence[int]) -> float:
    low, high = min(c, k), max(c, k)
    between = sum(totals.get(g, 0.0) for g in scale if low <= g <= high)
    return (between - (totals.get(c, 0.0) + totals.get(k, 0.0)) / 2) ** 2


def krippendorff_alpha(units: Sequence[Sequence[int]], scale: Sequence[int], level: str = "ordinal") -> float:
    """Krippendorff's α over units, each the grades its annotators gave (units with fewer than two are left out).

    Args:
        units: For each item, the grades of the annotators who graded it.
        scale: Every grade of the scale, in order.
        level: "ordinal", "interval" or "nominal".

    Returns:
        α, or NaN when undefined (fewer than two pairable grades, or a single grade value).
    """
    coincidences: Counter = Counter()
    for grades in (u for u in units if len(u) >= 2):
        for a, b in itertools.permutations(grades, 2):
            coincidences[a, b] += 1.0 / (len(grades) - 1)
    totals: Counter = Counter()
    for (a, _), count in coincidences.items():
        totals[a] += count
    n = sum(totals.values())
    if n <= 1:
        return float("nan")

    def distance(c: int, k: int) -> float:
        if level == "ordinal":
            return _ordinal_distance(c, k, totals, scale)
        if level == "interval":
            return float((c - k) ** 2)
        if level == "nominal":
            return 0.0 if c == k else 1.0
        raise ValueError(f"unknown level {level!r} (ordinal, interval or nominal)")

    observed = sum(count * distance(c, k) for (c, k), count in coincidences.items())
    expected = sum(totals[c] * totals[k] * distance(c, k) for c in totals for k in totals)
    return float("nan") if expected == 0 else 1.0 - (n - 1) * observed / expected


@dataclass
class PairAgreement:
    """Two annotators on the items they both graded."""

    first: str
    second: str
    n: int
    exact: float  # share of items with the same grade
    kappa: float
    confusion: dict[tuple[int, int], int] = field(default_factory=dict)  # (first's grade, second's) → items
    kappa_interval: Interval | None = None  # bootstrap over the items both graded


@dataclass
class Agreement:
    """Agreement of every pair of annotators, and Krippendorff's α over all of them."""

    annotators: list[str]
    pairs: list[PairAgreement]
    alpha: float
    alpha_units: int  # items graded by two or more annotators
    weights: str
    level: str
    scale: list[int]
    alpha_interval: Interval | None = None  # bootstrap over the items graded by two or more

    def format_text(self, confusion: bool = False) -> str:
        """The agreement table (and, with `confusion`, each pair's confusion counts)."""
        lines = [
            f"agreement ({len(self.annotators)} annotators; Cohen's κ {self.weights}-weighted):",
            f"  {'annotator A':<20} {'annotator B':<20} {'both graded':>11} {'same':>6} {'κ':>7}",
        ]
        for pair in self.pairs:
            lines.append(f"  {pair.first:<20} {pair.second:<20} {pair.n:>11} {pair.exact:>6.1%} {_num(pair.kappa):>7}")
        if not self.pairs:
            lines.append("  (no two annotators graded the same pair)")
        lines.append(
            f"Krippendorff's α ({self.level}) over {self.alpha_units} pairs graded by two or more: {_num(self.alpha)}"
            + (f" {_bounds(self.alpha_interval)}" if self.alpha_interval else "")
        )
        lines += _interval_lines(self)
        lines += _few_pairs_notes(self)
        if confusion:
            for pair in self.pairs:
                lines += [
                    f"confusion {pair.first} (rows) × {pair.second} (columns):",
                    "  " + " " * 6 + "".join(f"{g:>6}" for g in self.scale),
                ]
                lines += [
                    "  " + f"{a:>6}" + "".join(f"{pair.confusion.get((a, b), 0):>6}" for b in self.scale)
                    for a in self.scale
                ]
        return "\n".join(lines)


def _num(value: float) -> str:
    return "n/a" if value != value else f"{value:.3f}"


def _interval_lines(measured: Agreement) -> list[str]:
    """Where the intervals come from, and each pair's κ interval."""
    interval = measured.alpha_interval or next((p.kappa_interval for p in measured.pairs if p.kappa_interval), None)
    if interval is None:
        return []
    lines = [
        f"{interval.level:.0%} CI in brackets: percentile bootstrap, {interval.rounds} resamples of the pairs "
        "(seeded: the same grades give the same interval)"
    ]
    return lines + [
        f"  κ {p.first} × {p.second}: {_num(p.kappa)} {_bounds(p.kappa_interval)}".rstrip() for p in measured.pairs
    ]


def _bounds(interval: Interval | None) -> str:
    if interval is None:
        return ""
    return f"[{_num(interval.low)}, {_num(interval.high)}]"


def _few_pairs_notes(measured: Agreement) -> list[str]:
    """A note for each κ and for α resting on fewer than `FEW_PAIRS` pairs graded by both (or by two or more)."""
    few = [f"{p.first} × {p.second} ({p.n})" for p in measured.pairs if p.n < FEW_PAIRS]
    if measured.alpha_units < FEW_PAIRS:
        few.append(f"α ({measured.alpha_units})")
    if not few:
        return []
    return [
        f"note: fewer than {FEW_PAIRS} pairs graded by both for {', '.join(few)}: the figure is unsteady (see its "
        "interval); have both annotators grade more of the same pairs before trusting it"
    ]


def agreement(
    votes: Votes,
    scale: Sequence[int],
    weights: str = "linear",
    level: str = "ordinal",
    rounds: int = DEFAULT_ROUNDS,
    seed: int = DEFAULT_SEED,
) -> Agreement:
    """Pairwise κ (with confusion counts) and overall α of the annotators in `votes`, each with its bootstrap
    interval (`rounds` resamples from `seed`; ``rounds=0``: no intervals)."""
    annotators = sorted({name for grades in votes.values() for name in grades})
    pairs = []
    for first, second in itertools.combinations(annotators, 2):
        both = [(g[first], g[second]) for g in votes.values() if first in g and second in g]
        if not both:
            continue
        a, b = [x for x, _ in both], [y for _, y in both]
        pairs.append(
            PairAgreement(
                first,
                second,
                len(both),
                sum(x == y for x, y in both) / len(both),
                cohen_kappa(a, b, scale, weights),
                dict(Counter(both)),
                kappa_interval(a, b, scale, weights, rounds, seed) if rounds else None,
            )
        )
    units = [list(g.values()) for g in votes.values()]
    pairable = [u for u in units if len(u) >= 2]
    return Agreement(
        annotators,
        pairs,
        krippendorff_alpha(units, scale, level),
        len(pairable),
        weights,
        level,
        list(scale),
        alpha_interval(pairable, scale, level, rounds, seed) if rounds else None,
    )


def kappa_interval(
    first: Sequence[int],
    second: Sequence[int],
    scale: Sequence[int],
    weights: str | None = None,
    rounds: int = DEFAULT_ROUNDS,
    seed: int = DEFAULT_SEED,
) -> Interval:
    """Cohen's κ and its bootstrap interval over the items (each resample: items drawn with replacement,
    `harness.evaluation.agreement_stats.resample_indices`); each resample's κ is `cohen_kappa`'s formula on
    its confusion counts, computed for all resamples at once."""
    import numpy as np

    n, index = len(first), _grade_index(scale)
    value = cohen_kappa(first, second, scale, weights)
    if n == 0:
        return undefined_interval(rounds)
    k = len(index)
    codes = np.array([index[a] * k + index[b] for a, b in zip(first, second)], dtype=np.int64)
    w = np.array([[_weight(a, b, weights) for b in scale] for a in scale], dtype=np.float64)
    counts = np.concatenate(list(_resampled_counts(codes, k * k, n, rounds, seed))).reshape(rounds, k, k)
    observed = (counts * w).sum(axis=(1, 2))
    expected = np.einsum("ra,rb,ab->r", counts.sum(axis=2), counts.sum(axis=1), w) / n
    with np.errstate(invalid="ignore"):  # expected 0 (one grade everywhere) means observed 0: 0/0 is NaN
        values = 1.0 - observed / expected
    return percentile_interval(value, values, n=n)


def _grade_index(scale: Sequence[int]) -> dict[int, int]:
    return {grade: i for i, grade in enumerate(scale)}


def _resampled_counts(codes, n_codes: int, n: int, rounds: int, seed: int):
    """Blocks of (resamples, n_codes): how often each code occurs in each resample of the items."""
    import numpy as np

    for block in resample_blocks(n, rounds, seed):
        drawn = codes[block] + np.arange(len(block))[:, None] * n_codes
        yield np.bincount(drawn.ravel(), minlength=len(block) * n_codes).reshape(len(block), n_codes).astype(float)


def alpha_interval(
    units: Sequence[Sequence[int]],
    scale: Sequence[int],
    level: str = "ordinal",
    rounds: int = DEFAULT_ROUNDS,
    seed: int = DEFAULT_SEED,
) -> Interval:
    """Krippendorff's α and its bootstrap interval over the units graded by two or more (each drawn whole with
    its grades); each resample's α is `krippendorff_alpha`'s formula on its coincidence matrix (the sum of
    its units' coincidences), computed for all resamples at once."""
    import numpy as np

    pairable = [u for u in units if len(u) >= 2]
    value, n = krippendorff_alpha(pairable, scale, level), len(pairable)
    if n == 0:
        return undefined_interval(rounds)
    index, k = _grade_index(scale), len(scale)
    per_unit = np.zeros((n, k, k))
    for u, grades in enumerate(pairable):
        for a, b in itertools.permutations(grades, 2):
            per_unit[u, index[a], index[b]] += 1.0 / (len(grades) - 1)
    flat = per_unit.reshape(n, k * k)  # each block of (resamples, units) draws → its coincidence matrices
    coincidences = np.concatenate([times @ flat for times in _resampled_counts(np.arange(n), n, n, rounds, seed)])
    coincidences = coincidences.reshape(rounds, k, k)
    totals = coincidences.sum(axis=2)
    delta = _alpha_distances(totals, np.array(list(scale), dtype=np.float64), level)
    observed = (coincidences * delta).sum(axis=(1, 2))
    expected = np.einsum("rc,rk,rck->r", totals, totals, delta)
    pairs = totals.sum(axis=1)
    # A unit holds two grades or more, so pairs ≥ 2; expected 0 (one grade everywhere) means observed 0: NaN
    with np.errstate(invalid="ignore"):
        values = 1.0 - (pairs - 1) * observed / expected
    return percentile_interval(value, values, n=n)


def _alpha_distances(totals, grades, level: str):
    """(rounds, k, k) distances between grade values: ordinal (Krippendorff's, from each resample's totals),
    interval or nominal."""
    import numpy as np

    rounds, k = totals.shape
    if level == "interval":
        return np.broadcast_to((grades[:, None] - grades[None, :]) ** 2, (rounds, k, k))
    if level == "nominal":
        return np.broadcast_to(1.0 - np.eye(k), (rounds, k, k))
    if level != "ordinal":
        raise ValueError(f"unknown level {level!r} (ordinal, interval or nominal)")
    cumulative = np.concatenate([np.zeros((rounds, 1)), np.cumsum(totals, axis=1)], axis=1)
    low = np.minimum.outer(np.arange(k), np.arange(k))
    high = np.maximum.outer(np.arange(k), np.arange(k))
    between = cumulative[:, high + 1] - cumulative[:, low]
    return (between - (totals[:, :, None] + totals[:, None, :]) / 2) ** 2
