"""What `judgments agreement` prints: the table, the intervals, the unsteady-figure note and the confusion counts,
each line written out here as a user reads it; and the raw share of same grades counted by hand
(mutation testing: docs/mutation-report.md)."""

from __future__ import annotations

import krippendorff
import numpy as np
import pytest

from harness.evaluation.agreement_stats import FEW_PAIRS, Interval
from harness.judging.agreement import Agreement, PairAgreement, agreement, krippendorff_alpha


def _interval(value, low, high):
    return Interval(value=value, low=low, high=high, level=0.95, rounds=1000, undefined=0, n=60)


def _measured(n=60, alpha_units=60, intervals=True):
    pair = PairAgreement(
        "alice",
        "bob",
        n,
        0.75,
        0.5,
        {(0, 0): 2, (1, 0): 1, (1, 1): 1},
        _interval(0.5, 0.25, 0.75) if intervals else None,
    )
    return Agreement(
        ["alice", "bob"],
        [pair],
        0.625,
        alpha_units,
        "linear",
        "ordinal",
        [0, 1],
        _interval(0.625, 0.5, 0.875) if intervals else None,
    )


TABLE = [
    "agreement (2 annotators; Cohen's κ linear-weighted):",
    "  annotator A          annotator B          both graded   same       κ",
    "  alice                bob                           60  75.0%   0.500",
]


def test_the_table_with_its_intervals_reads_as_written():
    assert _measured().format_text().splitlines() == TABLE + [
        "Krippendorff's α (ordinal) over 60 pairs graded by two or more: 0.625 [0.500, 0.875]",
        "95% CI in brackets: percentile bootstrap, 1000 resamples of the pairs "
        "(seeded: the same grades give the same interval)",
        "  κ alice × bob: 0.500 [0.250, 0.750]",
    ]


def test_without_intervals_no_interval_is_printed():
    assert _measured(intervals=False).format_text().splitlines() == TABLE + [
        "Krippendorff's α (ordinal) over 60 pairs graded by two or more: 0.625",
    ]


def test_a_kappa_interval_alone_still_explains_the_brackets():
    measured = _measured()
    measured.alpha_interval = None
    assert measured.format_text().splitlines()[-2:] == [
        "95% CI in brackets: percentile bootstrap, 1000 resamples of the pairs "
        "(seeded: the same grades give the same interval)",
        "  κ alice × bob: 0.500 [0.250, 0.750]",
    ]


def test_a_pair_without_an_interval_shows_its_kappa_alone():
    measured = _measured()
    measured.pairs[0].kappa_interval = None  # an Agreement put together by hand: α has an interval, the pair none
    assert measured.format_text().splitlines()[-1] == "  κ alice × bob: 0.500"


def test_the_confusion_counts_are_printed_only_when_asked():
    text = _measured(intervals=False).format_text(confusion=True).splitlines()
    assert text[len(TABLE) + 1 :] == [
        "confusion alice (rows) × bob (columns):",
        "             0     1",
        "       0     2     0",
        "       1     1     1",
    ]
    assert "confusion" not in _measured(intervals=False).format_text()


@pytest.mark.parametrize(
    "n, units, flagged",
    [
        (FEW_PAIRS, FEW_PAIRS, []),
        (FEW_PAIRS - 1, FEW_PAIRS, ["alice × bob (49)"]),
        (FEW_PAIRS, FEW_PAIRS - 1, ["α (49)"]),
    ],
)
def test_a_figure_on_fewer_than_fifty_pairs_is_flagged_and_fifty_is_not(n, units, flagged):
    last = _measured(n, units, intervals=False).format_text().splitlines()[-1]
    if not flagged:
        assert not last.startswith("note:")
    else:
        assert last == (
            f"note: fewer than 50 pairs graded by both for {', '.join(flagged)}: the figure is unsteady (see its "
            "interval); have both annotators grade more of the same pairs before trusting it"
        )


def test_each_pair_that_shares_items_is_measured_after_one_that_shares_none():
    # a and b share nothing; a and c, and b and c, share items: both pairs are measured
    votes = {("q", "d1"): {"a": 1, "c": 1}, ("q", "d2"): {"a": 0, "c": 1}, ("q", "d3"): {"b": 2, "c": 2}}
    measured = agreement(votes, [0, 1, 2], rounds=0)
    assert [(p.first, p.second, p.n) for p in measured.pairs] == [("a", "c", 2), ("b", "c", 1)]


def test_the_share_of_same_grades_is_counted_by_hand():
    votes = {("q", f"d{i}"): {"a": i % 3, "b": (i * i) % 3} for i in range(12)}
    same = sum(1 for v in votes.values() if v["a"] == v["b"]) / len(votes)
    (pair,) = agreement(votes, [0, 1, 2], rounds=0).pairs
    assert pair.exact == pytest.approx(same) and 0 < same < 1


def test_alpha_is_ordinal_unless_told():
    units = [[0, 1], [1, 1, 2], [2, 0], [1, 2]]
    votes = {("q", f"d{i}"): {f"r{j}": g for j, g in enumerate(u)} for i, u in enumerate(units)}
    table = np.full((3, len(units)), np.nan)
    for i, u in enumerate(units):
        table[: len(u), i] = u
    expected = krippendorff.alpha(reliability_data=table, level_of_measurement="ordinal", value_domain=[0, 1, 2])
    assert agreement(votes, [0, 1, 2], rounds=0).alpha == pytest.approx(expected)
    assert krippendorff_alpha(units, [0, 1, 2]) == pytest.approx(expected)


def test_an_unknown_level_is_refused_listing_the_levels():
    with pytest.raises(ValueError, match=r"^unknown level 'ratio' \(ordinal, interval or nominal\)$"):
        krippendorff_alpha([[0, 1], [1, 1]], [0, 1], "ratio")
