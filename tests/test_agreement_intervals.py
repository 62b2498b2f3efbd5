"""Bootstrap intervals on κ and α: each checked against a brute-force resampling loop (numpy's generator with the
same seed, κ from scikit-learn, α from the `krippendorff` package, numpy's quantiles), and by their properties;
the intervals and the "fewer than 50 pairs" note in `judgments agreement` and `judgments merge`."""

from __future__ import annotations

import json
import random

import krippendorff
import numpy as np
import pytest
from click.testing import CliRunner
from sklearn.metrics import cohen_kappa_score

from harness.cli import cli
from harness.judging.agreement import agreement, alpha_interval, kappa_interval


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
    result = CliRunner().invoke(cli, ["judgments", "agreement", str(path)])
    assert result.exit_code == 0, result.output
    assert "95% CI" in result.output and "fewer than 50 pairs graded by both" in result.output
    root = tmp_path / "set"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "text": "x"}) + "\n" for i in range(12)))
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": "y"}) + "\n" for i in range(5)))
    result = CliRunner().invoke(cli, ["judgments", "merge", str(root), str(path)])
    assert result.exit_code == 0, result.output
    assert "95% CI" in result.output and "fewer than 50 pairs graded by both" in result.output


def test_resampling_in_blocks_draws_what_one_draw_would():
    from harness.evaluation.agreement_stats import resample_blocks

    blocks = list(resample_blocks(50, 30, seed=2, max_items=120))  # 2 resamples of 50 items a block
    assert [len(b) for b in blocks] == [2] * 15
    assert (np.concatenate(blocks) == np.random.default_rng(2).integers(0, 50, size=(30, 50))).all()
