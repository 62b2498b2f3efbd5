"""The reproduction check (`report --check-published`): each result against the published figure it should
reproduce, within a tolerance; the statuses, the exit code they give, and the table that shows them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.datasets import published
from harness.presentation import align, metric_text
from harness.reporting.comparison import build_comparison, eval_split
from harness.reporting.report import Result


@dataclass(frozen=True)
class Check:
    """One result against the published figure it should reproduce (`published` None: nothing published)."""

    dataset: str
    model: str
    column: str
    published: float | None
    ours: float
    tolerance: float
    why: str = ""  # a known reason the result may differ (its folder is not the registry's dataset)

    @property
    def status(self) -> str:
        """``OK`` (within tolerance), ``OFF`` (outside it), or ``none`` (nothing published to compare)."""
        if self.published is None:
            return "none"
        return "OK" if abs(self.ours - self.published) <= self.tolerance + 1e-12 else "OFF"

    @property
    def ok(self) -> bool:
        return self.status != "OFF"


def check_published(
    results: list[Result], metric: str = "nDCG@10", tolerance: float | None = None, split: str | None = None
) -> list[Check]:
    """Compare each result with the published row it should reproduce (`published.reproduced`).

    CQADupStack forums are averaged first, as in the table. A result with no published counterpart gets
    a check with status ``none``.

    Args:
        results: Result JSON objects.
        metric: The metric compared.
        tolerance: Largest |ours - published| called OK; None: the metric's default
            (`harness.datasets.published.TOLERANCE`, 0.003 for nDCG@10).
        split: The split; default each dataset's evaluation split.
    """
    comparison = build_comparison(results, metric, split)
    tolerance = tolerance if tolerance is not None else published.TOLERANCE.get(metric, 0.003)
    # One dataset's results share their data (`load_results`), so a count mismatch is the dataset's.
    mismatches = {
        result.dataset: result.config["registry_mismatch"]
        for result in results
        if result.config.get("registry_mismatch")
    }
    checks = []
    for (dataset, label), cell in sorted(comparison.cells.items()):
        if cell.value is None:
            continue
        model = comparison.label_models.get(label, label)
        row = published.reproduced(dataset, eval_split(dataset, split), model, comparison.label_rerankers.get(label))
        value = row.values.get(metric) if row is not None else None
        checks.append(
            Check(
                dataset,
                label,
                row.column if value is not None else "",
                value,
                cell.value,
                tolerance,
                mismatches.get(dataset, ""),
            )
        )
    return checks


# Exit codes of `report --check-published`.
CHECK_OK, CHECK_OFF, CHECK_NOTHING = 0, 1, 2


def check_exit_code(checks: Sequence[Check]) -> int:
    """1 when any result is OFF; 2 when no result had anything published to compare; else 0 (results with
    nothing published are listed, and do not fail a run whose other results reproduce)."""
    if any(check.status == "OFF" for check in checks):
        return CHECK_OFF
    return CHECK_OK if any(check.status == "OK" for check in checks) else CHECK_NOTHING


def format_checks(checks: Sequence[Check], metric: str, digits: int = 4) -> str:
    """One line per result, pyserini-2CR style: OK, OFF, or nothing published."""
    table = [["dataset", "model", "published", "ours", "delta", "status", f"({metric})"]]
    for c in checks:
        if c.published is None:
            table.append(
                [
                    c.dataset,
                    c.model,
                    "-",
                    metric_text(c.ours, digits),
                    "-",
                    "none",
                    "nothing published for this system on this dataset",
                ]
            )
        else:
            table.append(
                [
                    c.dataset,
                    c.model,
                    metric_text(c.published, digits),
                    metric_text(c.ours, digits),
                    metric_text(c.ours - c.published, digits, signed=True),
                    c.status,
                    c.column,
                ]
            )
    lines = align(table, right=[False, False, True, True, True, False, False])
    lines += [f"{dataset}: {why}" for dataset, why in dict.fromkeys((c.dataset, c.why) for c in checks if c.why)]
    counts = {status: sum(c.status == status for c in checks) for status in ("OK", "OFF", "none")}
    if counts["OK"] + counts["OFF"]:
        lines.append(
            f"{counts['OK'] + counts['OFF']} checked, {counts['OK']} OK, {counts['OFF']} off (tolerance "
            f"{checks[0].tolerance:g}); {counts['none']} with nothing published"
        )
    else:
        lines.append(f"nothing to compare: no result has a published {metric} for its system and dataset")
    return "\n".join(lines)
