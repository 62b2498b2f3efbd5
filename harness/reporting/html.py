"""A results page a team can open and share: one self-contained HTML file (``report --format html``).

The page holds everything as one JSON document inside the file — no request to any server, it opens from
``file://`` — and the page's own script draws it: the leaderboard (datasets × systems, sortable, a metric
switcher over every stored metric, the average row, published columns with their Δ, significance marks),
the grouped bar chart with 95% bootstrap intervals (inline SVG), per dataset a drill-down (each system's
worst queries with their texts, judged documents and grades, and the top retrieved documents with score and
grade or "unjudged"; a per-query scatter of two systems), what each run cost beside its quality
(`harness.reporting.cost`), and a provenance footer per column.

Texts from the data (queries, titles, labels) are only ever inserted as text (``textContent``), never as
markup, and the JSON is escaped so that no ``</script>`` inside a text can end its block.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any

from harness import __version__
from harness.errors import HarnessError
from harness.evaluation.significance import bootstrap_ci
from harness.presentation import embedded_json, metric_text
from harness.reporting.comparison import Comparison, build_comparison, labelled_results, results_of_split
from harness.reporting.page_data import PageOptions, drilldowns, provenance
from harness.reporting.report import Result
from harness.reporting.tables import build_table

logger = logging.getLogger(__name__)

TABLE_KEY = "metric_table"  # the several-metric table's HTML: written into the page, not into its data
FRONTIER_KEY = "frontier_section"  # the quality-against-cost section's HTML (inline SVG), likewise
RESOLUTION_KEY = "resolution_section"  # which differences are real: letters and rank intervals (inline SVG)
_FAMILIES = ("nDCG", "MAP", "Recall", "P", "MRR", "Success", "R-Prec", "Judged")


def _metric_order(name: str) -> tuple[int, int, str]:
    family, _, cutoff = name.partition("@")
    return (
        _FAMILIES.index(family) if family in _FAMILIES else len(_FAMILIES),
        int(cutoff) if cutoff.isdigit() else 0,
        name,
    )


def _leaderboard(
    results: list[Result], metric: str, options: PageOptions, columns: dict[str, int], kinds: dict[str, str]
) -> tuple[dict[str, Any], Comparison]:
    """One metric's table, compactly: its columns as indices into the page's column list (`columns`, grown
    here), a row of values per dataset in that order, the average row, the marks and the notes."""
    comparison = build_comparison(
        results,
        metric,
        options.split,
        options.published,
        options.baseline if metric == options.metric else None,
        options.alpha,
        options.correction,
        options.rounds,
        test=options.test,
        seed=options.seed,
    )
    kinds.update({c: "system" for c in comparison.models})
    kinds.update({c: "published" for c in comparison.published_columns})
    kinds.update({c: "delta" for c in comparison.delta_columns})
    for column in comparison.columns:
        columns.setdefault(column, len(columns))
    average, shared = comparison.average()

    def texts(values: list[float | None]) -> list[str]:
        return [metric_text(v, options.digits, kinds[c] == "delta") for v, c in zip(values, comparison.columns)]

    values = {d: [comparison.value(d, c) for c in comparison.columns] for d in comparison.datasets}
    averages = [average.get(c) for c in comparison.columns]
    # The stored floats (to sort, bold and draw) and the text shown, formatted here as every table is.
    return {
        "columns": [columns[c] for c in comparison.columns],
        "values": values,
        "text": {d: texts(row) for d, row in values.items()},
        "average": {"over": shared, "values": averages, "text": texts(averages)},
        "marks": {f"{d}\t{columns[c]}": mark for (d, c), mark in comparison.marks.items()},
        "notes": comparison.notes,
    }, comparison


def _intervals(comparison: Comparison) -> dict[str, dict[str, list[float]]]:
    """95% percentile-bootstrap intervals (1,000 rounds) of each system's mean, per dataset."""
    intervals: dict[str, dict[str, list[float]]] = {}
    for (dataset, column), cell in comparison.cells.items():
        if cell.value is not None and cell.per_query:
            low, high = bootstrap_ci(list(cell.per_query.values()), 1000)
            intervals.setdefault(dataset, {})[column] = [round(low, 5), round(high, 5)]
    return intervals


def build_page(results: Sequence[Result], options: PageOptions = PageOptions()) -> dict[str, Any]:
    """Everything the page shows, as JSON-ready data.

    Raises:
        HarnessError: No result, or none with `options.metric`.
    """
    if not results:
        raise HarnessError("no results to report")
    kept = results_of_split(list(results), options.split)
    notes = (
        [
            f"left out {len(results) - len(kept)} result(s) of other splits: "
            + ", ".join(sorted({f"{r.dataset} [{r.split}]" for r in results if r not in kept}))
        ]
        if len(kept) < len(results)
        else []
    )
    metrics = sorted({m for r in kept for m in r.metrics}, key=_metric_order)
    if options.metric not in metrics:
        raise HarnessError(f"no result has {options.metric}; stored: {', '.join(metrics[:12])}")
    boards, main, columns, kinds = {}, None, {}, {}
    for metric in metrics:
        boards[metric], comparison = _leaderboard(kept, metric, options, columns, kinds)
        if metric == options.metric:
            main = comparison
    labelled, labels = labelled_results(kept, [])
    by_label: dict[str, dict[str, Result]] = {}
    for result in labelled:
        by_label.setdefault(labels[id(result)], {})[result.dataset] = result
    return {
        "title": options.title,
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "harness_version": __version__,
        "metric": options.metric,
        "metrics": metrics,
        "datasets": main.datasets,
        "systems": main.models,
        "columns": list(columns),
        "kinds": kinds,
        "boards": boards,
        "notes": notes,
        "intervals": {options.metric: _intervals(main)},
        "significance": next((n for n in main.notes if n.startswith("†")), None),
        "drilldowns": drilldowns(by_label, options),
        "provenance": provenance(by_label),
        "cost": _cost(kept, options),
        **_metric_table(kept, options),
        **_frontier(kept, options),
        **_resolution(kept, options),
    }


def _metric_table(results: list[Result], options: PageOptions) -> dict[str, str]:
    """The several-metric table (`harness.reporting.tables`) as static HTML, when `options.metrics` names any."""
    if not options.metrics:
        return {}
    table = build_table(
        results,
        list(options.metrics),
        split=options.split,
        with_published=options.published,
        significance=options.baseline,
        alpha=options.alpha,
        correction=options.correction,
        rounds=options.rounds,
        test=options.test,
        seed=options.seed,
    )
    return {TABLE_KEY: table.render("html", options.digits, "model", options.layout)}


def _cost(results: list[Result], options: PageOptions) -> dict[str, Any]:
    """The quality-beside-cost table (`harness.reporting.cost`) as the page shows it: header, text rows, notes."""
    from harness.reporting.cost import COST_NOTES, cost_rows, cost_table

    header, body = cost_table(cost_rows(results, options.metric, options.split), options.metric, options.digits)
    return {"header": header, "rows": body, "notes": list(COST_NOTES)}


def _frontier(results: list[Result], options: PageOptions) -> dict[str, str]:
    """The quality-against-cost section (`harness.reporting.frontier`) as static HTML; none when no result records
    a cost and no axis was asked for."""
    from harness.reporting.frontier import build_frontier, cost_key, frontier_section, parse_within

    within = parse_within(options.within) if options.within is not None else ()
    axis = cost_key(options.cost_axis).name if options.cost_axis is not None else None
    try:
        frontier = build_frontier(results, options.metric, axis, within, options.split)
    except HarnessError:
        if axis is not None:
            raise
        return {}
    return {FRONTIER_KEY: frontier_section(frontier, options.digits)}


def _resolution(results: list[Result], options: PageOptions) -> dict[str, str]:
    """Which differences are real (`harness.reporting.resolution.table`) as static HTML, when asked for."""
    if not options.resolution:
        return {}
    from harness.evaluation.resolution import Settings
    from harness.reporting.resolution.table import build_resolution, html_section

    settings = Settings(options.test, options.correction, options.alpha, options.rounds, options.seed)
    table = build_resolution(results, options.metric, options.split, settings)
    return {RESOLUTION_KEY: html_section(table, options.digits)}


def render_page(data: dict[str, Any]) -> str:
    """The self-contained HTML page for `build_page`'s data."""
    template = resources.files("harness").joinpath("data/report-page.html").read_text(encoding="utf-8")
    title = re.sub(r"[<>&\"']", "", data["title"])
    table = data.get(TABLE_KEY)
    section = (
        f'\n\n<section aria-labelledby="table-heading">\n  <h2 id="table-heading">Every metric</h2>\n'
        f'  <div class="scroll">{table}</div>\n</section>'
        if table
        else ""
    )
    rest = {key: value for key, value in data.items() if key not in (TABLE_KEY, FRONTIER_KEY, RESOLUTION_KEY)}
    page = template.replace("</header>", "</header>" + section, 1)
    page = page.replace("{{TITLE}}", title).replace("{{DATA}}", embedded_json(rest))
    # After the data (whose JSON holds no "<"), so no text in the section can be taken for a placeholder.
    footer = '<footer aria-labelledby="provenance-heading">'
    if data.get(RESOLUTION_KEY):
        page = page.replace(footer, data[RESOLUTION_KEY] + "\n\n" + footer, 1)
    return page.replace(footer, data[FRONTIER_KEY].strip() + "\n\n" + footer, 1) if data.get(FRONTIER_KEY) else page


def write_page(results: Sequence[Result], path: str | Path, options: PageOptions = PageOptions()) -> int:
    """Build, render and write the page atomically; returns its size in bytes."""
    from harness.io.files import write_text

    text = render_page(build_page(results, options))
    write_text(text, path)
    return len(text.encode("utf-8"))
