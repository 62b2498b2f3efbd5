"""Cohen's κ and Krippendorff's α, their bootstrap intervals, and the table `judgments agreement` prints.

Bootstrap intervals on κ and α: each checked against a brute-force resampling loop (numpy's generator with the
same seed, κ from scikit-learn, α from the `krippendorff` package, numpy's quantiles), and by their properties;
the intervals and the "fewer than 50 pairs" note in `judgments agreement` and `judgments merge`."""

from __future__ import annotations

import json
import math
import random
import warnings

import krippendorff
import numpy as np
import pytest
from cli_runner import invoke
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import cohen_kappa_score

from harness.evaluation.agreement_stats import FEW_PAIRS, Interval
from harness.judging.agreement import (
    Agreement,
    PairAgreement,
    agreement,
    alpha_interval,
    cohen_kappa,
    kappa_interval,
    krippendorff_alpha,
)


def _graders(n: int, seed: int) -> tuple[list[int], list[int]]:
    rng = random.Random(seed)
    first = [rng.randint(0, 3) for _ in range(n)]
    second = [min(3, max(0, g + rng.choice([-1, 0, 0, 1, 2]))) for g in first]
    return first, second


def _brute_quantiles(values: list[float]) -> tuple[float, float]:
    kept = [v for v in values if v == v]
    return float(np.quantile(kept, 0.025)), float(np.quantile(kept, 0.975))


@pytest.mark.parametrize("weights", [None, "linear", "quadratic"])
def test_kappa_interval_is_the_brute_force_bootstrap_of_scikit_learn(weights):
    first, second = _graders(80, 1)
    draws = np.random.default_rng(7).integers(0, 80, size=(300, 80))
    values = [
        cohen_kappa_score([first[i] for i in row], [second[i] for i in row], labels=[0, 1, 2, 3], weights=weights)
        for row in draws
    ]
    interval = kappa_interval(first, second, range(4), weights, rounds=300, seed=7)
    assert interval.value == pytest.approx(cohen_kappa_score(first, second, labels=[0, 1, 2, 3], weights=weights))
    assert (interval.low, interval.high) == pytest.approx(_brute_quantiles(values))
    assert interval.rounds == 300 and interval.n == 80


@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval"])
def test_alpha_interval_is_the_brute_force_bootstrap_of_the_krippendorff_package(level):
    rng = random.Random(3)
    units = []
    for _ in range(60):
        truth = rng.randint(0, 3)
        units.append([min(3, max(0, truth + rng.choice([-1, 0, 0, 1]))) for _ in range(rng.choice([2, 2, 3]))])
    draws = np.random.default_rng(11).integers(0, 60, size=(200, 60))

    def package_alpha(chosen):
        data = np.full((3, len(chosen)), np.nan)
        for column, grades in enumerate(chosen):
            data[: len(grades), column] = grades
        return krippendorff.alpha(reliability_data=data, level_of_measurement=level, value_domain=[0, 1, 2, 3])

    values = [package_alpha([units[i] for i in row]) for row in draws]
    interval = alpha_interval(units, range(4), level, rounds=200, seed=11)
    assert interval.value == pytest.approx(package_alpha(units))
    assert (interval.low, interval.high) == pytest.approx(_brute_quantiles(values))


def test_the_interval_holds_the_estimate_and_narrows_with_more_pairs():
    widths = []
    for n in (30, 300, 3000):
        first, second = _graders(n, 5)
        interval = kappa_interval(first, second, range(4), "linear")
        assert interval.low <= interval.value <= interval.high
        widths.append(interval.high - interval.low)
    assert widths[0] > widths[1] > widths[2] > 0
    assert kappa_interval(first, second, range(4), "linear", seed=4) != kappa_interval(
        first, second, range(4), "linear"
    )
    assert kappa_interval(first, second, range(4), "linear", seed=4) == kappa_interval(
        first, second, range(4), "linear", seed=4
    )


def test_a_single_grade_everywhere_gives_an_undefined_interval_not_a_number():
    interval = kappa_interval([2] * 10, [2] * 10, range(4), "linear", rounds=50)
    assert interval.value != interval.value and interval.low != interval.low and interval.undefined == 50


def _votes(n: int) -> dict:
    first, second = _graders(n, 2)
    return {(f"q{i % 5}", f"d{i}"): {"alice": a, "bob": b} for i, (a, b) in enumerate(zip(first, second))}


def test_agreement_table_shows_the_intervals_and_notes_fewer_than_50_pairs():
    few = agreement(_votes(20), range(4)).format_text()
    assert "95% CI in brackets: percentile bootstrap, 1000 resamples" in few
    assert "note: fewer than 50 pairs graded by both for alice × bob (20), α (20)" in few
    measured = agreement(_votes(120), range(4))
    text = measured.format_text()
    pair = measured.pairs[0]
    assert f"[{pair.kappa_interval.low:.3f}, {pair.kappa_interval.high:.3f}]" in text
    assert f"[{measured.alpha_interval.low:.3f}, {measured.alpha_interval.high:.3f}]" in text
    assert "fewer than 50" not in text


def test_agreement_and_merge_commands_print_the_intervals_and_the_note(tmp_path):
    lines = ["query_id,doc_id,grade,annotator"]
    for (q, d), grades in _votes(12).items():
        lines += [f"{q},{d},{g},{who}" for who, g in grades.items()]
    path = tmp_path / "both.csv"
    path.write_text("\n".join(lines) + "\n")
    result = invoke(["judgments", "agreement", str(path)])
    assert result.exit_code == 0, result.output
    assert "95% CI" in result.output and "fewer than 50 pairs graded by both" in result.output
    root = tmp_path / "set"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "text": "x"}) + "\n" for i in range(12)))
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": "y"}) + "\n" for i in range(5)))
    result = invoke(["judgments", "merge", str(root), str(path)])
    assert result.exit_code == 0, result.output
    assert "95% CI" in result.output and "fewer than 50 pairs graded by both" in result.output


def test_resampling_in_blocks_draws_what_one_draw_would():
    from harness.evaluation.agreement_stats import resample_blocks

    blocks = list(resample_blocks(50, 30, seed=2, max_items=120))  # 2 resamples of 50 items a block
    assert [len(b) for b in blocks] == [2] * 15
    assert (np.concatenate(blocks) == np.random.default_rng(2).integers(0, 50, size=(30, 50))).all()


WEIGHTINGS = ("none", "linear", "quadratic")


# --- agreement(): each pair's κ interval with its weights, α's with its level, against brute-force bootstraps ------


@st.composite
def _vote_tables(draw):
    """Pairs graded by a random subset of two or three annotators, grades 0-3 (near and far misses: weighted and
    unweighted κ differ), a weighting, an α level and a seed."""
    annotators = ["ann", "bob", "cy"][: draw(st.integers(2, 3))]
    votes = {}
    for i in range(draw(st.integers(2, 24))):
        who = draw(st.lists(st.sampled_from(annotators), min_size=1, max_size=len(annotators), unique=True))
        truth = draw(st.integers(0, 3))
        votes["q", f"d{i}"] = {a: min(3, max(0, truth + draw(st.sampled_from([-2, -1, 0, 0, 1, 3])))) for a in who}
    weights = draw(st.sampled_from(["none", "linear", "quadratic"]))
    return votes, weights, draw(st.sampled_from(["nominal", "ordinal", "interval"])), draw(st.integers(1, 2**31))


def _quiet(function, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # both packages warn where the figure is undefined (one grade everywhere)
        return function(*args, **kwargs)


def _brute_interval(value: float, values: list[float]) -> tuple[float, float, float]:
    kept = [v for v in values if v == v]
    low, high = np.quantile(kept, [0.025, 0.975]) if kept else (np.nan, np.nan)
    return value, float(low), float(high)


def _same(got, expected) -> bool:
    return all((x != x and y != y) or x == pytest.approx(y) for x, y in zip(got, expected))


@settings(derandomize=True, deadline=None, max_examples=40)
@given(_vote_tables())
def test_each_kappa_and_alpha_interval_of_agreement_is_the_brute_force_bootstrap_with_its_weights(table):
    votes, weights, level, seed = table
    rounds = 30
    measured = agreement(votes, range(4), weights, level, rounds=rounds, seed=seed)
    sk_weights = None if weights == "none" else weights
    for pair in measured.pairs:
        both = [(g[pair.first], g[pair.second]) for g in votes.values() if pair.first in g and pair.second in g]
        first, second = [x for x, _ in both], [y for _, y in both]

        def kappa(rows, first=first, second=second):
            picked_first, picked_second = [first[i] for i in rows], [second[i] for i in rows]
            return _quiet(cohen_kappa_score, picked_first, picked_second, labels=[0, 1, 2, 3], weights=sk_weights)

        draws = np.random.default_rng(seed).integers(0, len(both), size=(rounds, len(both)))
        expected = _brute_interval(kappa(range(len(both))), [kappa(row) for row in draws])
        interval = pair.kappa_interval
        assert _same((pair.kappa, interval.value, interval.low, interval.high), (expected[0], *expected))
    units = [list(g.values()) for g in votes.values() if len(g) >= 2]
    if not units:
        assert measured.alpha_interval.value != measured.alpha_interval.value
        return

    def alpha(chosen):
        data = np.full((3, len(chosen)), np.nan)
        for column, grades in enumerate(chosen):
            data[: len(grades), column] = grades
        return _quiet(krippendorff.alpha, reliability_data=data, level_of_measurement=level, value_domain=[0, 1, 2, 3])

    draws = np.random.default_rng(seed).integers(0, len(units), size=(rounds, len(units)))
    expected = _brute_interval(alpha(units), [alpha([units[i] for i in row]) for row in draws])
    interval = measured.alpha_interval
    assert _same((measured.alpha, interval.value, interval.low, interval.high), (expected[0], *expected))


def test_a_weighted_kappas_interval_is_its_own_not_the_unweighted_one():
    # Near misses (1 vs 2) and far ones (0 vs 3): the weightings give other κs and other intervals.
    first, second = _graders(80, 1)
    votes = {("q", f"d{i}"): {"alice": a, "bob": b} for i, (a, b) in enumerate(zip(first, second))}
    intervals = {w: agreement(votes, range(4), w, rounds=200, seed=3).pairs[0].kappa_interval for w in WEIGHTINGS}
    for weights, interval in intervals.items():
        expected = kappa_interval(first, second, range(4), weights, rounds=200, seed=3)
        assert interval == expected
        assert interval.low <= interval.value <= interval.high
    assert len({(i.low, i.high) for i in intervals.values()}) == 3


def test_the_agreement_command_prints_the_quadratic_kappas_own_interval(tmp_path):
    first, second = _graders(60, 4)
    path = tmp_path / "both.csv"
    path.write_text(
        "query_id,doc_id,grade,annotator\n"
        + "".join(f"q,d{i},{a},alice\nq,d{i},{b},bob\n" for i, (a, b) in enumerate(zip(first, second)))
    )
    result = invoke(["judgments", "agreement", str(path), "--weights", "quadratic"])
    assert result.exit_code == 0, result.output
    draws = np.random.default_rng(0).integers(0, 60, size=(1000, 60))  # the documented defaults: seed 0, 1000 rounds
    values = [
        cohen_kappa_score([first[i] for i in row], [second[i] for i in row], labels=[0, 1, 2, 3], weights="quadratic")
        for row in draws
    ]
    value = cohen_kappa_score(first, second, labels=[0, 1, 2, 3], weights="quadratic")
    low, high = np.quantile(values, [0.025, 0.975])
    assert f"κ alice × bob: {value:.3f} [{low:.3f}, {high:.3f}]" in result.output


# κ and α where the common cases do not reach: every weighting and level against scikit-learn and the
# ``krippendorff`` package, on scales with grades nobody gave, units of two to four annotators, a single unit, and
# the undefined cases; the refusals and the table's text as a user reads them. The tests from here to the end of
# the file use no fixture of conftest.py: tools/mutation.py runs them with --noconftest.


SCALE = [0, 1, 2, 3, 4]  # 4 is never given below: it still counts in the distances


def _grades(seed: int, n: int = 60) -> tuple[list[int], list[int]]:
    rng = random.Random(seed)
    first = [rng.choice([0, 1, 1, 2, 3]) for _ in range(n)]
    second = [g if rng.random() < 0.6 else rng.choice([0, 1, 2, 3]) for g in first]
    return first, second


@pytest.mark.parametrize("weights", [None, "none", "linear", "quadratic"])
@pytest.mark.parametrize("seed", [0, 1])
def test_kappa_equals_scikit_learn_for_every_weighting(weights, seed):
    first, second = _grades(seed)
    expected = cohen_kappa_score(first, second, labels=SCALE, weights=None if weights == "none" else weights)
    assert cohen_kappa(first, second, SCALE, weights) == pytest.approx(expected, abs=1e-12)


def test_kappa_refuses_what_it_cannot_compute_in_words_a_user_can_act_on():
    with pytest.raises(ValueError) as unknown:
        cohen_kappa([0, 1], [1, 1], SCALE, "cubic")
    assert str(unknown.value) == "unknown weights 'cubic' (none, linear or quadratic)"
    with pytest.raises(ValueError) as uneven:
        cohen_kappa([0, 1, 2], [1, 1], SCALE)
    assert str(uneven.value) == "3 grades against 2: both annotators must grade the same items"
    assert math.isnan(cohen_kappa([], [], SCALE))  # no items: undefined, not 0 and not an error
    assert math.isnan(cohen_kappa([2, 2], [2, 2], SCALE))  # one grade everywhere: no room for chance


def _reliability(units: list[list[int]], annotators: int) -> np.ndarray:
    """The ``krippendorff`` package's layout: annotators × units, NaN where an annotator did not grade."""
    data = np.full((annotators, len(units)), np.nan)
    for column, grades in enumerate(units):
        data[: len(grades), column] = grades
    return data


@pytest.mark.parametrize("level", ["ordinal", "interval", "nominal"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_alpha_equals_the_krippendorff_package_at_every_level(level, seed):
    rng = random.Random(seed)
    units = []
    for _ in range(40):  # two to four annotators per unit, grades spread over 0-3 of the 0-4 scale
        base = rng.choice([0, 1, 2, 3])
        units.append([min(3, max(0, base + rng.choice([-2, -1, 0, 0, 1]))) for _ in range(rng.randint(2, 4))])
    units.append([2])  # a unit one annotator graded: left out by both
    expected = krippendorff.alpha(
        reliability_data=_reliability(units, 4), level_of_measurement=level, value_domain=SCALE
    )
    assert krippendorff_alpha(units, SCALE, level) == pytest.approx(expected, abs=1e-12)


def test_alpha_of_a_single_unit_of_two_grades_is_defined():
    expected = krippendorff.alpha(reliability_data=np.array([[0.0], [3.0]]), level_of_measurement="ordinal",
                                  value_domain=SCALE)  # fmt: skip
    assert krippendorff_alpha([[0, 3]], SCALE, "ordinal") == pytest.approx(expected, abs=1e-12)


def test_alpha_refuses_an_unknown_level_and_is_undefined_without_pairs_or_spread():
    with pytest.raises(ValueError) as unknown:
        krippendorff_alpha([[0, 1], [1, 1]], SCALE, "ratio")
    assert str(unknown.value) == "unknown level 'ratio' (ordinal, interval or nominal)"
    assert math.isnan(krippendorff_alpha([[1], [2]], SCALE))  # nobody shares a unit
    assert math.isnan(krippendorff_alpha([[2, 2], [2, 2, 2]], SCALE))  # one grade everywhere


def test_the_table_reads_as_documented():
    pair = PairAgreement("alice", "bob", 12, 0.75, 0.5)
    table = Agreement(["alice", "bob"], [pair], 0.4, 12, "linear", "ordinal", SCALE).format_text().splitlines()
    assert table[0] == "agreement (2 annotators; Cohen's κ linear-weighted):"
    assert table[1] == "  " + "annotator A".ljust(20) + " " + "annotator B".ljust(20) + " both graded   same       κ"
    assert table[2] == "  " + "alice".ljust(20) + " " + "bob".ljust(20) + " " + "12".rjust(11) + "  75.0%   0.500"
    empty = Agreement(["alice", "bob"], [], float("nan"), 0, "none", "nominal", SCALE).format_text().splitlines()
    assert empty[2] == "  (no two annotators graded the same pair)"
    assert empty[3].endswith("over 0 pairs graded by two or more: n/a")


def test_ordinal_alpha_counts_grades_nobody_gave_between_two_others_as_empty():
    rng = random.Random(7)  # grades 0, 2 and 4 only: 1 and 3 lie between them with no value
    units = [[rng.choice([0, 2, 2, 4]) for _ in range(rng.randint(2, 3))] for _ in range(30)]
    expected = krippendorff.alpha(
        reliability_data=_reliability(units, 3), level_of_measurement="ordinal", value_domain=SCALE
    )
    assert krippendorff_alpha(units, SCALE, "ordinal") == pytest.approx(expected, abs=1e-12)


# The intervals at their edges: no pairs, one pair, and resamples on which the statistic is undefined, each
# checked field by field against a brute-force loop (the same seed, κ from scikit-learn, α from the
# `krippendorff` package, numpy's quantiles over the defined values).


FOUR_GRADES = [0, 1, 2, 3]


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


def _same_fields(got, want) -> bool:
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
        return cohen_kappa_score(
            [first[i] for i in rows], [second[i] for i in rows], labels=FOUR_GRADES, weights=weights
        )

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
        return krippendorff.alpha(reliability_data=data, level_of_measurement=level, value_domain=FOUR_GRADES)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = alpha(range(n))
    return _brute(value, draws, alpha, n)


@pytest.mark.parametrize("rounds", [1, 7])
def test_no_pairs_give_an_interval_undefined_everywhere_over_no_items(rounds):
    want = (math.nan, math.nan, math.nan, 0.95, rounds, rounds, 0)
    assert _same_fields(_fields(kappa_interval([], [], FOUR_GRADES, rounds=rounds)), want)
    assert _same_fields(_fields(alpha_interval([], FOUR_GRADES, rounds=rounds)), want)
    assert _same_fields(_fields(alpha_interval([[1], [2]], FOUR_GRADES, rounds=rounds)), want)  # no unit graded twice


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
    got = kappa_interval(first, second, FOUR_GRADES, weights, rounds=60, seed=3)
    assert _same_fields(_fields(got), _kappa_reference(first, second, weights, 60, 3))


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
    got = alpha_interval(units, FOUR_GRADES, level, rounds=60, seed=5)
    assert _same_fields(_fields(got), _alpha_reference(units, level, 60, 5))


def test_units_graded_once_are_left_out_of_the_resampled_items():
    units = [[0, 1], [2], [1, 1, 2], [3]]
    got = alpha_interval(units, FOUR_GRADES, "ordinal", rounds=40, seed=2)
    assert _same_fields(_fields(got), _alpha_reference([[0, 1], [1, 1, 2]], "ordinal", 40, 2))


def test_the_alpha_interval_is_ordinal_unless_told():
    units = [[0, 1], [1, 1, 2], [3, 3], [2, 0]]
    assert _same_fields(
        _fields(alpha_interval(units, FOUR_GRADES, rounds=30, seed=4)), _alpha_reference(units, "ordinal", 30, 4)
    )


def test_an_unknown_level_of_the_interval_is_refused_naming_the_levels():
    with pytest.raises(ValueError) as caught:
        alpha_interval([[0, 1], [1, 2]], FOUR_GRADES, "ratio", rounds=5)
    assert str(caught.value) == "unknown level 'ratio' (ordinal, interval or nominal)"


# What `judgments agreement` prints: the table, the intervals, the unsteady-figure note and the confusion counts,
# each line written out here as a user reads it; and the raw share of same grades counted by hand.


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
