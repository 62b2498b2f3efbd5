"""Several metrics in one table (``report --metric nDCG@10 --metric Recall@100 --metric MRR@10``).

One `harness.reporting.comparison.Comparison` per metric, built as a one-metric ``report`` builds it (the same
labels, published columns, Δ columns, significance marks and notes), then laid out together:

* **wide** (the default): systems as rows, dataset × metric as columns (``by="dataset"``: datasets as rows,
  system × metric as columns); the best system of each dataset and metric is bold, a significance mark
  (``†``) belongs to its own metric, and an ``average`` group per metric (Markdown, LaTeX, HTML) is each
  metric's average over the datasets every column has, as the one-metric table's average row;
* **long**: one row per system × dataset × metric (``system, kind, dataset, metric, value, significant``),
  tidy, so that ``pandas.read_csv(path).pivot_table(index="system", columns=["dataset", "metric"],
  values="value")`` is the wide table; a missing value is a missing row.

With a baseline (``significance``), both CSV layouts also carry each tested cell's difference from the baseline, its
95 % bootstrap interval, p and adjusted p (`harness.reporting.resolution.baseline`): the long layout as the columns
`TEST_COLUMNS`, the wide one as ``<metric> Δ``, ``<metric> Δ low``, ``<metric> Δ high``, ``<metric> p`` and
``<metric> p adjusted`` beside each metric; LaTeX ends with the marks' footnote (test, correction, α, rounds, seed).

The wide CSV is pandas' own layout of a two-level header (``pd.read_csv(path, header=[0, 1], index_col=0)``
reads it back): a ``dataset`` row, a ``metric`` row and a ``system`` row naming the index. CSV and JSON are
unrounded; the other formats round once (`harness.presentation.metric_text`).

Rerankers of one candidate set (``--candidates``) are named with the set's digest in the notes, and rerankers of
different sets are said to be so, as the one-metric table says it (`harness.reporting.labels.candidate_notes`):
Markdown, HTML and JSON carry every note, LaTeX these below the table with the marks' footnote, and a table with
rerankers of different sets logs a warning too (the CSV has no notes).
"""

from __future__ import annotations

import html
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.errors import HarnessError
from harness.presentation import Bold, csv_text, json_text, latex_escape, markdown_table, metric_text
from harness.reporting.comparison import (
    Comparison,
    build_comparison,
    dataset_order,
    labelled_results,
    results_of_split,
)
from harness.reporting.labels import OWN, candidate_keys, candidate_notes
from harness.reporting.report import Result
from harness.reporting.resolution.baseline import PAIR_COLUMNS, significance_note

AVERAGE = "average"
LAYOUTS = ("wide", "long")
FORMATS = ("markdown", "latex", "csv", "json", "html")
LONG_COLUMNS = ("system", "kind", "dataset", "metric", "value", "significant")
TEST_COLUMNS = ("difference", "difference_low", "difference_high", "p", "p_adjusted")  # with a baseline

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Cell:
    """One value of the table as it is shown: the number, its mark, whether it is the best, whether a Δ."""

    value: float | None
    mark: str = ""
    best: bool = False
    signed: bool = False
    pair: Any = None  # the `harness.evaluation.resolution.Pair` of its test against the baseline, if tested

    def text(self, digits: int) -> str:
        text = metric_text(self.value, digits, self.signed) + self.mark
        return Bold(text) if self.best and self.value is not None else text


@dataclass
class MetricTable:
    """Every metric's `Comparison` over the same results, rendered as one table."""

    metrics: list[str]
    comparisons: dict[str, Comparison]
    candidate_notes: list[str] = field(default_factory=list)  # which rerankers reranked which candidate set

    @property
    def datasets(self) -> list[str]:
        return dataset_order({d for c in self.comparisons.values() for d in c.datasets})

    @property
    def systems(self) -> list[str]:
        """The systems run, then the published columns, then the Δ columns, each in first-seen order."""
        kinds = self.kinds()
        return [s for kind in ("system", "published", "delta") for s in kinds if kinds[s] == kind]

    def kinds(self) -> dict[str, str]:
        """Each row's kind: ``system`` (a result), ``published`` or ``delta`` (against a published column)."""
        kinds: dict[str, str] = {}
        for comparison in self.comparisons.values():
            kinds.update((m, "system") for m in comparison.models if m not in kinds)
            kinds.update((p, "published") for p in comparison.published_columns if p not in kinds)
            kinds.update((d, "delta") for d in comparison.delta_columns if d not in kinds)
        return kinds

    @property
    def notes(self) -> list[str]:
        """Every metric's notes, each once, in order."""
        return list(dict.fromkeys(n for c in self.comparisons.values() for n in c.notes))

    def cell(self, system: str, dataset: str, metric: str) -> Cell:
        """The value of `system` on `dataset` in `metric` (the metric's average over shared datasets for
        `AVERAGE`)."""
        comparison = self.comparisons[metric]
        signed = system in comparison.delta_columns
        if dataset == AVERAGE:
            return Cell(comparison.average()[0].get(system), signed=signed)
        value = comparison.value(dataset, system) if system in comparison.columns else None
        mark = comparison.marks.get((dataset, system), "")
        return Cell(value, mark, system in comparison.best(dataset), signed, comparison.tests.get((dataset, system)))

    @property
    def tested(self) -> bool:
        """Whether cells were tested against a baseline (their p-values then go into the CSV)."""
        return any(c.tests for c in self.comparisons.values())

    def long_rows(self) -> list[dict[str, Any]]:
        """The tidy rows (`LONG_COLUMNS`, and `TEST_COLUMNS` when `tested`), unrounded; a missing value has no
        row."""
        kinds = self.kinds()
        rows = []
        for system in self.systems:
            for dataset in self.datasets:
                for metric in self.metrics:
                    cell = self.cell(system, dataset, metric)
                    if cell.value is not None:
                        rows.append(
                            dict(zip(LONG_COLUMNS, (system, kinds[system], dataset, metric, cell.value, cell.mark)))
                            | (_test_fields(cell.pair) if self.tested else {})
                        )
        return rows

    def render(self, fmt: str = "markdown", digits: int = 4, by: str = "model", layout: str = "wide") -> str:
        """The table as text (module-level `render`)."""
        return render(self, fmt, digits, by, layout)


def _test_fields(pair: Any) -> dict[str, Any]:
    keys = ("difference", "low", "high", "p", "p_adjusted")
    return {column: getattr(pair, key) if pair else None for column, key in zip(TEST_COLUMNS, keys)}


def build_table(results: list[Result], metrics: Sequence[str], **options: Any) -> MetricTable:
    """One `Comparison` per metric (`harness.reporting.comparison.build_comparison`, with `options`: ``split``,
    ``with_published``, ``significance``, ``alpha``, ``correction``, ``rounds``, ``test``, ``seed``,
    ``published_systems``, ``published_from``), as one table.

    Raises:
        HarnessError: No metric, a metric named twice, or one no result has (as a one-metric report says it).
    """
    if not metrics:
        raise HarnessError("no metric to tabulate: name at least one (e.g. nDCG@10)")
    twice = sorted({m for m in metrics if list(metrics).count(m) > 1})
    if twice:
        raise HarnessError(f"metric {twice[0]} is asked for twice; name each metric once")
    comparisons = {m: build_comparison(results, m, **options) for m in metrics}
    return MetricTable(list(metrics), comparisons, _candidate_notes(results, options.get("split")))


def _candidate_notes(results: list[Result], split: str | None) -> list[str]:
    """The candidate-set notes of `results` as each metric's comparison has them; a warning when one dataset's
    rerankers reranked different candidates."""
    kept, labels = labelled_results(results_of_split(results, split), [])
    keys = candidate_keys(kept, labels)
    sets: dict[str, list[str]] = {}
    for (dataset, _), (key, _) in keys.items():
        sets.setdefault(dataset, []).append(key)
    mixed = [dataset for dataset, found in sets.items() if len(set(found)) > 1 or found.count(OWN) > 1]
    if mixed:
        logger.warning(
            "%s: rerankers of different candidate sets in one table: their difference is their first stages' as "
            "much as their rerankers' (the table's notes say which; compare rerankers on one --candidates set)",
            ", ".join(dataset_order(mixed)),
        )
    return candidate_notes(keys)


# --------------------------------------------------------------------------- the wide grid


@dataclass
class Grid:
    """The wide table as rows of cells under a two-level header: `groups` (datasets, or systems with
    ``by="dataset"``), each spanning the metrics."""

    corner: tuple[str, str, str]  # the names of the header's two levels and of the rows
    groups: list[str]
    metrics: list[str]
    rows: list[tuple[str, list[Cell]]]

    def flat_header(self) -> list[str]:
        """One header row: ``group · metric`` per column."""
        return [self.corner[2], *(f"{group} · {metric}" for group in self.groups for metric in self.metrics)]


def grid(table: MetricTable, by: str = "model", with_average: bool = False) -> Grid:
    """The wide layout: systems as rows (``by="model"``) or datasets as rows (``by="dataset"``)."""
    datasets = table.datasets + ([AVERAGE] if with_average and len(table.datasets) > 1 else [])
    if by == "model":
        rows = [
            (system, [table.cell(system, d, m) for d in datasets for m in table.metrics]) for system in table.systems
        ]
        return Grid(("dataset", "metric", "system"), datasets, table.metrics, rows)
    if by == "dataset":
        rows = [(d, [table.cell(s, d, m) for s in table.systems for m in table.metrics]) for d in datasets]
        return Grid(("system", "metric", "dataset"), table.systems, table.metrics, rows)
    raise HarnessError(f"unknown orientation {by!r}; use model (systems as rows) or dataset")


# --------------------------------------------------------------------------- rendering


def _long_text(table: MetricTable, digits: int) -> tuple[list[str], list[list[str]]]:
    signed = {s for s, kind in table.kinds().items() if kind == "delta"}
    body = [
        [r["system"], r["kind"], r["dataset"], r["metric"], metric_text(r["value"], digits, r["system"] in signed)]
        + [r["significant"]]
        for r in table.long_rows()
    ]
    return list(LONG_COLUMNS), body


def render_csv(table: MetricTable, by: str = "model", layout: str = "wide") -> str:
    """Unrounded CSV: the tidy rows, or the wide table in pandas' two-level-header layout (no average)."""
    if layout == "long":
        columns = LONG_COLUMNS + (TEST_COLUMNS if table.tested else ())
        return csv_text(columns, [[row[c] for c in columns] for row in table.long_rows()])
    wide = grid(table, by)
    names = ["", *(f" {name}" for name in PAIR_COLUMNS)] if table.tested else [""]
    fields = [f"{metric}{name}" for metric in wide.metrics for name in names]
    top = [wide.corner[0], *(group for group in wide.groups for _ in fields)]
    header_rows = [[wide.corner[1], *(fields * len(wide.groups))], [wide.corner[2]] + [""] * (len(top) - 1)]
    body = [[label, *(v for cell in cells for v in _csv_values(cell, table.tested))] for label, cells in wide.rows]
    return csv_text(top, header_rows + body)


def _csv_values(cell: Cell, tested: bool) -> list[Any]:
    return [cell.value, *(_test_fields(cell.pair).values() if tested else ())]


def render_markdown(table: MetricTable, digits: int = 4, by: str = "model", layout: str = "wide") -> str:
    """A Markdown table (one header row: ``dataset · metric``), then the notes."""
    if layout == "long":
        header, body = _long_text(table, digits)
        return markdown_table(header, body, table.notes)
    wide = grid(table, by, with_average=True)
    body = [[label, *(cell.text(digits) for cell in cells)] for label, cells in wide.rows]
    return markdown_table(wide.flat_header(), body, table.notes)


def _latex_line(cells: Sequence[str]) -> str:
    def one(text: str) -> str:
        return rf"\textbf{{{latex_escape(text)}}}" if isinstance(text, Bold) else latex_escape(str(text))

    return " & ".join(one(c) for c in cells) + r" \\"


def render_latex(table: MetricTable, digits: int = 4, by: str = "model", layout: str = "wide") -> str:
    """A booktabs ``tabular`` (``\\usepackage{booktabs}``): a ``\\multicolumn`` per dataset over its metrics."""
    if layout == "long":
        header, body = _long_text(table, digits)
        spec, heads = "llllrl", [_latex_line(header)]
    else:
        wide = grid(table, by, with_average=True)
        n = len(wide.metrics)
        spans = " & ".join(rf"\multicolumn{{{n}}}{{c}}{{{latex_escape(g)}}}" for g in wide.groups)
        rules = " ".join(rf"\cmidrule(lr){{{2 + i * n}-{1 + (i + 1) * n}}}" for i in range(len(wide.groups)))
        heads = [
            rf"{latex_escape(wide.corner[0])} & {spans} \\",
            rules,
            _latex_line([wide.corner[2], *wide.metrics * len(wide.groups)]),
        ]
        body = [[label, *(cell.text(digits) for cell in cells)] for label, cells in wide.rows]
        spec = "l" + "r" * n * len(wide.groups)
    lines = [rf"\begin{{tabular}}{{{spec}}}", r"\toprule", *heads, r"\midrule", *map(_latex_line, body)]
    return "\n".join([*lines, r"\bottomrule", r"\end{tabular}", *_latex_footnotes(table)])


def _latex_footnotes(table: MetricTable) -> list[str]:
    """Below the table: the marks' footnote (with a baseline), then the candidate-set notes, and the one saying where
    the baseline's test crosses candidate sets."""
    marks = significance_note(table.notes)
    across = [note for note in table.notes if note.startswith("†") and note != marks]
    notes = [note for note in [marks, *table.candidate_notes, *across] if note]
    return [r"\par\smallskip\footnotesize " + latex_escape(note) for note in notes]


def _html_row(cells: Sequence[str], tag: str = "td") -> str:
    def one(text: str) -> str:
        inner = f"<strong>{html.escape(text)}</strong>" if isinstance(text, Bold) else html.escape(str(text))
        return f"<{tag}>{inner}</{tag}>"

    return "<tr>" + "".join(one(c) for c in cells) + "</tr>"


def render_html(table: MetricTable, digits: int = 4, by: str = "model", layout: str = "wide") -> str:
    """An HTML ``<table>`` (every text escaped; a ``colspan`` header per dataset), then the notes as paragraphs."""
    if layout == "long":
        header, body = _long_text(table, digits)
        heads = [_html_row(header, "th")]
    else:
        wide = grid(table, by, with_average=True)
        spans = "".join(f'<th colspan="{len(wide.metrics)}">{html.escape(group)}</th>' for group in wide.groups)
        heads = [f"<tr><th>{html.escape(wide.corner[0])}</th>{spans}</tr>"]
        heads.append(_html_row([wide.corner[2], *wide.metrics * len(wide.groups)], "th"))
        body = [[label, *(cell.text(digits) for cell in cells)] for label, cells in wide.rows]
    lines = ['<table class="metric-table">', "<thead>", *heads, "</thead>", "<tbody>"]
    lines += [_html_row(row) for row in body] + ["</tbody>", "</table>"]
    lines += [f'<p class="note">{html.escape(note)}</p>' for note in table.notes]
    return "\n".join(lines)


def render_json(table: MetricTable) -> str:
    """The tidy rows, each metric's average and the notes, unrounded."""
    averages = {}
    for metric, comparison in table.comparisons.items():
        values, over = comparison.average()
        averages[metric] = {"values": values, "over": over, "datasets": comparison.shared_datasets()}
    return json_text({"metrics": table.metrics, "rows": table.long_rows(), "averages": averages, "notes": table.notes})


def render(table: MetricTable, fmt: str = "markdown", digits: int = 4, by: str = "model", layout: str = "wide") -> str:
    """Render in one of `FORMATS` and `LAYOUTS` (JSON is always the tidy rows)."""
    if layout not in LAYOUTS:
        raise HarnessError(f"unknown layout {layout!r}; use wide or long")
    if fmt == "csv":
        return render_csv(table, by, layout)
    if fmt == "json":
        return render_json(table)
    renderers = {"markdown": render_markdown, "latex": render_latex, "html": render_html}
    if fmt not in renderers:
        raise HarnessError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    return renderers[fmt](table, digits, by, layout)
