"""Agreement between annotators on the pairs they both graded: Cohen's κ and Krippendorff's α.

Cohen's κ compares two annotators; with ``weights="linear"`` or ``"quadratic"`` a near miss on a graded
scale (2 vs 3) counts less than a far one (0 vs 3), with the distance taken between grade values over
the whole scale. Krippendorff's α compares any number of annotators, each pair graded by two or more of
them counting, at the ordinal or interval level. Both are 1 for perfect agreement, 0 for chance, and
undefined (NaN) when the grades leave no room for chance disagreement (everyone gave one grade).
Formulas: Cohen (1968) for weighted κ; Krippendorff (2011), "Computing Krippendorff's alpha-reliability",
for α's coincidence matrix. The tests check both against scikit-learn and the ``krippendorff`` package.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping, Sequence

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
        )
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


def agreement(votes: Votes, scale: Sequence[int], weights: str = "linear", level: str = "ordinal") -> Agreement:
    """Pairwise κ (with confusion counts) and overall α of the annotators in `votes`."""
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
            )
        )
    units = [list(g.values()) for g in votes.values()]
    return Agreement(
        annotators,
        pairs,
        krippendorff_alpha(units, scale, level),
        sum(1 for u in units if len(u) >= 2),
        weights,
        level,
        list(scale),
    )
