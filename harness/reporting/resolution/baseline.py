"""``report --significance BASELINE``: every other system's cell tested against the baseline's on each dataset,
the p-values adjusted across the datasets of each system, and what every format shows of it.

Each tested cell keeps its `harness.evaluation.resolution.Pair` (``comparison.tests``): the difference from the
baseline, the 95 % percentile bootstrap interval of that difference (`significance.bootstrap_ci` of the per-query
differences: the resamples `compare` draws for the seed), the p-value of the test (`compare`'s, for the same test,
rounds and seed) and the adjusted p; a cell whose adjusted p < α is marked ``†``. The CSV carries the figures as
columns (`test_columns`), JSON as a list (`tests_json`), Markdown, LaTeX and HTML the marks and the footnote that
names the test, the correction, α, the rounds and the seed.

Works on a `harness.reporting.comparison.Comparison` (its ``models``, ``cells``, ``datasets``, ``marks``,
``tests``, ``notes``), which imports this module.
"""

from __future__ import annotations

from typing import Any

from harness.datasets import published
from harness.errors import HarnessError
from harness.evaluation.resolution import TEST_NAMES, TESTS, Pair
from harness.evaluation.significance import adjust, bootstrap_ci, bootstrap_test, randomization_test, t_test

PAIR_COLUMNS = ("Δ", "Δ low", "Δ high", "p", "p adjusted")


def mark_significance(
    comparison: Any,
    baseline: str,
    alpha: float,
    correction: str,
    rounds: int,
    test: str = "randomization",
    seed: int = 0,
) -> str:
    """Test every other column against `baseline`'s, per dataset; mark ``†`` where the adjusted p < `alpha`.

    Returns:
        The baseline's column label.

    Raises:
        HarnessError: The baseline is not among the models; an unknown test or correction; two results of one
            dataset over different queries (naming both files).
    """
    matches = [m for m in comparison.models if baseline in (m, comparison.stored_labels.get(m))] or [
        m
        for m in comparison.models
        if published.system_of(comparison.label_models.get(m, m)) == published.system_of(baseline)
    ]
    if not matches:
        raise HarnessError(f"baseline {baseline!r} is not among the models: {', '.join(comparison.models)}")
    if test not in TESTS:
        raise HarnessError(f"unknown test {test!r}; use one of {', '.join(TESTS)}")
    adjust([], correction)  # an unknown correction is refused before any test runs
    base = matches[0]
    for model in comparison.models:
        if model == base:
            continue
        tested = []
        for dataset in comparison.datasets:
            a, b = comparison.cells.get((dataset, base)), comparison.cells.get((dataset, model))
            if a is None or b is None or a.value is None or b.value is None or not a.per_query:
                continue
            if set(a.per_query) != set(b.per_query):
                raise HarnessError(
                    f"{a.where} and {b.where} cover different queries of {dataset} "
                    f"({len(set(a.per_query) - set(b.per_query))} only in the first, "
                    f"{len(set(b.per_query) - set(a.per_query))} only in the second); evaluate both on the same "
                    "split and qrels"
                )
            queries = sorted(a.per_query)
            first, second = [a.per_query[q] for q in queries], [b.per_query[q] for q in queries]
            p = t_test(first, second) if test == "t" else _tests[test](first, second, rounds, seed)
            low, high = bootstrap_ci([y - x for x, y in zip(first, second)], rounds, seed)
            tested.append((dataset, b.value - a.value, low, high, p))
        for (dataset, difference, low, high, p), p_adjusted in zip(tested, adjust([t[-1] for t in tested], correction)):
            comparison.tests[(dataset, model)] = Pair(
                model, base, difference, low, high, p, p_adjusted, p_adjusted < alpha
            )
            if p_adjusted < alpha:
                comparison.marks[(dataset, model)] = "†"
    rounds_text = "" if test == "t" else f", {rounds:,} rounds, seed {seed}"
    comparison.notes.append(
        f"† differs from {base} ({TEST_NAMES[test]}{rounds_text}, {correction} correction across datasets, p < {alpha})"
    )
    return base


_tests = {"randomization": randomization_test, "bootstrap": bootstrap_test}


def test_columns(comparison: Any) -> list[tuple[str, dict[str, float]]]:
    """The CSV's columns of the tests: per tested column ``<label> Δ vs <baseline>``, its interval, p and adjusted p,
    each a dataset → value map (none when nothing was tested)."""
    columns = []
    for model in comparison.models:
        pairs = {d: pair for (d, m), pair in comparison.tests.items() if m == model}
        if not pairs:
            continue
        base = next(iter(pairs.values())).other
        for name, key in zip(PAIR_COLUMNS, ("difference", "low", "high", "p", "p_adjusted")):
            columns.append((f"{model} {name} vs {base}", {d: getattr(pair, key) for d, pair in pairs.items()}))
    return columns


def tests_json(comparison: Any) -> list[dict[str, Any]]:
    """Each tested cell: dataset, model, baseline, difference and interval, p, adjusted p, whether it is marked."""
    return [
        {
            "dataset": dataset,
            "model": model,
            "baseline": pair.other,
            "difference": pair.difference,
            "low": pair.low,
            "high": pair.high,
            "p": pair.p,
            "p_adjusted": pair.p_adjusted,
            "significant": pair.separable,
        }
        for (dataset, model), pair in comparison.tests.items()
    ]


def significance_note(notes: list[str]) -> str | None:
    """The footnote of the marks, when the table has any."""
    return next((note for note in notes if note.startswith("†")), None)
