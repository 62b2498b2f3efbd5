"""Which differences are real: ``report --resolution``, the systems of a table resolved on each dataset and on the
mean over datasets (`harness.evaluation.resolution`), in every format.

The systems and values are the one-metric report's (`harness.reporting.comparison.build_comparison`: the same
labels, splits and CQADupStack forum means; published columns take no part, having no per-query scores). Scopes:

* each dataset on which two or more systems have a value (CQADupStack: the mean of its forums, resampled within
  each forum; NanoBEIR's mean row is left out, its datasets being rows already);
* `ACROSS`, the mean over the datasets every system has, when there are two or more: queries resampled within
  each dataset.

Formats: Markdown and LaTeX give each system's value with its letters and its rank with the rank interval, and a
footnote naming the test, the correction, α, the rounds and the seed; CSV ``wide`` gives per scope each system's
mean, letters, rank and rank interval and, against every other system, the difference, its interval, p and
adjusted p (pandas: ``pd.read_csv(path, header=[0, 1], index_col=0)``); CSV ``long`` one row per scope and
ordered pair (`LONG_COLUMNS`); JSON every scope's systems and pairs; the HTML page (`html_section`) draws each
rank interval.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.errors import HarnessError
from harness.evaluation.resolution import ACROSS, TEST_NAMES, Resolution, Settings, resolve_across
from harness.presentation import csv_text, json_text, latex_escape, markdown_table, metric_text
from harness.reporting.comparison import CQADUPSTACK, Comparison, build_comparison, nanobeir_row
from harness.reporting.report import Result

logger = logging.getLogger(__name__)

LONG_COLUMNS = (
    "scope",
    "system",
    "mean",
    "rank",
    "rank_low",
    "rank_high",
    "letters",
    "other",
    "difference",
    "difference_low",
    "difference_high",
    "p",
    "p_adjusted",
    "separable",
)
STANDING_FIELDS = ("mean", "letters", "rank", "rank_low", "rank_high")
PAIR_FIELDS = ("Δ", "Δ low", "Δ high", "p", "p adjusted")


@dataclass
class ResolutionTable:
    """Every scope's `Resolution` of one metric, ready to render.

    Attributes:
        systems: The table's systems: by their rank on the mean over datasets (else on the first dataset).
        resolutions: One per dataset resolved, in the report's dataset order, then `ACROSS` when there is one.
    """

    metric: str
    settings: Settings
    systems: list[str]
    resolutions: list[Resolution]
    notes: list[str] = field(default_factory=list)

    def scope(self, name: str) -> Resolution:
        return next(r for r in self.resolutions if r.scope == name)

    def footnote(self) -> str:
        """What the letters and ranks mean and how they were computed."""
        s = self.settings
        correction = "no correction" if s.correction == "none" else f"{s.correction} correction across the pairs"
        across = (
            "; across datasets resampled within each dataset"
            if any(r.scope == ACROSS for r in self.resolutions)
            else ""
        )
        return (
            f"Letters: systems sharing a letter are not separable at α = {s.alpha:g} ({TEST_NAMES[s.test]}"
            f"{'' if s.test == 't' else f', {s.rounds:,} rounds'}, {correction} of each column). "
            f"Rank: by the mean, with its 95 % interval over {s.rounds:,} bootstrap resamples of the queries"
            f"{across}. Seed {s.seed}."
        )

    def long_rows(self) -> list[dict[str, Any]]:
        """One row per scope and ordered pair of systems (`LONG_COLUMNS`), unrounded."""
        rows = []
        for resolution in self.resolutions:
            for standing in resolution.standings:
                for other in resolution.standings:
                    if other.system == standing.system:
                        continue
                    pair = resolution.pair(standing.system, other.system)
                    rows.append(
                        {
                            "scope": resolution.scope,
                            **{k: getattr(standing, k) for k in ("system", "mean", "rank", "rank_low", "rank_high")},
                            "letters": standing.letters,
                            "other": other.system,
                            "difference": pair.difference,
                            "difference_low": pair.low,
                            "difference_high": pair.high,
                            "p": pair.p,
                            "p_adjusted": pair.p_adjusted,
                            "separable": pair.separable,
                        }
                    )
        return rows

    def render(self, fmt: str = "markdown", digits: int = 4, layout: str = "wide") -> str:
        """The table as text: ``markdown``, ``latex``, ``csv`` (``wide`` or ``long``) or ``json``."""
        return render(self, fmt, digits, layout)


def build_resolution(
    results: list[Result], metric: str = "nDCG@10", split: str | None = None, settings: Settings = Settings()
) -> ResolutionTable:
    """Resolve the systems of a one-metric report on each dataset and on the mean over datasets.

    Raises:
        HarnessError: A bad setting (before any test runs); no dataset with two or more systems; two results of
            one dataset that cover different queries (naming both files).
    """
    settings.check()
    comparison = build_comparison(results, metric, split)
    datasets = [d for d in comparison.datasets if d != nanobeir_row()]
    present = {d: [m for m in comparison.models if _scores(comparison, d, m)] for d in datasets}
    for dataset, systems in present.items():
        _check_queries(comparison, dataset, systems)
    resolved = {d: systems for d, systems in present.items() if len(systems) >= 2}
    if not resolved:
        raise HarnessError(
            f"a resolution compares two or more systems on a dataset; these results hold "
            f"{', '.join(comparison.models)} on {', '.join(datasets) or 'no dataset'}"
        )
    notes = [
        f"{dataset}: only {', '.join(systems) or 'no system'} has per-query {metric}; nothing to resolve there"
        for dataset, systems in present.items()
        if dataset not in resolved
    ]
    resolutions = []
    for dataset, systems in resolved.items():
        blocks, weights = _strata(comparison, dataset, systems)
        fresh = len(blocks) == 1  # one dataset of its own: the draws `compare` makes
        resolutions.append(resolve_across(systems, blocks, dataset, settings, [dataset], fresh, weights))
        logger.info("resolved %d systems on %s", len(systems), dataset)
    shared = [d for d in resolved if set(resolved[d]) == set(comparison.models)]
    if len(shared) >= 2:
        blocks, weights = [], []
        for dataset in shared:
            parts, part_weights = _strata(comparison, dataset, comparison.models)
            blocks += parts
            weights += [w / len(shared) for w in part_weights]
        resolutions.append(resolve_across(comparison.models, blocks, ACROSS, settings, shared, False, weights))
        left = [d for d in resolved if d not in shared]
        if left:
            notes.append(f"{ACROSS}: over {', '.join(shared)}; left out {', '.join(left)} (not every system has it)")
    for pairs in sorted({len(r.pairs) for r in resolutions}):
        note = settings.floor_note(pairs)
        if note:
            logger.warning(note)
            notes.append(note)
    order = resolutions[-1].standings
    systems = [s.system for s in order] + [m for m in comparison.models if m not in {s.system for s in order}]
    return ResolutionTable(metric, settings, systems, resolutions, notes + _kept_notes(comparison))


def _scores(comparison: Comparison, dataset: str, system: str) -> dict[str, float]:
    cell = comparison.cells.get((dataset, system))
    return cell.per_query if cell is not None and cell.value is not None else {}


def _check_queries(comparison: Comparison, dataset: str, systems: Sequence[str]) -> None:
    """Refuse two results of one dataset over different queries, naming both."""
    if not systems:
        return
    first = comparison.cells[(dataset, systems[0])]
    for system in systems[1:]:
        cell = comparison.cells[(dataset, system)]
        if set(cell.per_query) != set(first.per_query):
            only_first = len(set(first.per_query) - set(cell.per_query))
            only_other = len(set(cell.per_query) - set(first.per_query))
            raise HarnessError(
                f"{first.where} and {cell.where} cover different queries of {dataset} ({only_first} only in the "
                f"first, {only_other} only in the second); evaluate both on the same split and qrels"
            )


def _strata(comparison: Comparison, dataset: str, systems: Sequence[str]):
    """The systems × queries arrays of a dataset and their weights: one array, or one per CQADupStack forum."""
    import numpy as np

    queries = sorted(_scores(comparison, dataset, systems[0]))
    groups: dict[str, list[str]] = {}
    for query in queries:
        groups.setdefault(query.split("/", 1)[0] if dataset == CQADUPSTACK else "", []).append(query)
    blocks = [
        np.asarray([[_scores(comparison, dataset, s)[q] for q in group] for s in systems], dtype=np.float64)
        for group in groups.values()
    ]
    return blocks, [1 / len(blocks)] * len(blocks)


def _kept_notes(comparison: Comparison) -> list[str]:
    """The report's notes that still concern the systems (published columns and averages do not)."""
    return [n for n in comparison.notes if not n.startswith("the average is over")]


# --------------------------------------------------------------------------- rendering


def _rank_text(standing) -> str:
    interval = (
        f"{standing.rank_low}"
        if standing.rank_low == standing.rank_high
        else f"{standing.rank_low}–{standing.rank_high}"
    )
    return f"{standing.rank} [{interval}]"


def _grid(table: ResolutionTable, digits: int) -> tuple[list[str], list[list[str]], list[tuple[str, str]]]:
    """Header and rows of text, and each value cell's (value, letters) for the formats that set letters apart."""
    header = ["system"]
    for resolution in table.resolutions:
        header += [resolution.scope, f"{resolution.scope} rank"]
    rows, parts = [], []
    for system in table.systems:
        row = [system]
        for resolution in table.resolutions:
            try:
                standing = resolution.standing(system)
            except KeyError:
                row += ["", ""]
                parts.append(("", ""))
                continue
            value = metric_text(standing.mean, digits)
            row += [f"{value} {standing.letters}", _rank_text(standing)]
            parts.append((value, standing.letters))
        rows.append(row)
    return header, rows, parts


def render_markdown(table: ResolutionTable, digits: int = 4) -> str:
    """Each system's value with its letters and its rank [interval] per scope, then the footnote and notes."""
    header, rows, _ = _grid(table, digits)
    return markdown_table(header, rows, [f"{table.metric}. {table.footnote()}", *table.notes])


def render_latex(table: ResolutionTable, digits: int = 4) -> str:
    """A booktabs ``tabular``: values with their letters as superscripts, ranks with their intervals, the footnote
    below."""
    header, rows, parts = _grid(table, digits)
    width = len(table.resolutions)
    lines = [r"\begin{tabular}{l" + "rr" * width + "}", r"\toprule"]
    lines.append(" & ".join(_latex(h) for h in header) + r" \\")
    lines.append(r"\midrule")
    cells = iter(parts)
    for row in rows:
        out = [_latex(row[0])]
        for k in range(width):
            value, letters = next(cells)
            out.append(rf"{value}\textsuperscript{{{letters}}}" if value else "")
            out.append(_latex(row[2 + 2 * k]))
        lines.append(" & ".join(out) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", ""]
    lines.append(r"\par\smallskip\footnotesize " + _latex(f"{table.metric}. {table.footnote()}"))
    return "\n".join(lines)


def _latex(text: str) -> str:
    return latex_escape(text).replace("α", r"$\alpha$")


def render_csv(table: ResolutionTable, layout: str = "wide") -> str:
    """Unrounded CSV: one row per scope and ordered pair (``long``), or per system (``wide``, a two-level header
    of scope and field)."""
    if layout == "long":
        return csv_text(LONG_COLUMNS, [[row[c] for c in LONG_COLUMNS] for row in table.long_rows()])
    top, fields = ["scope"], ["field"]
    for resolution in table.resolutions:
        others = [s.system for s in resolution.standings]
        names = [*STANDING_FIELDS, *(f"{what} vs {other}" for other in others for what in PAIR_FIELDS)]
        top += [resolution.scope] * len(names)
        fields += names
    body = []
    for system in table.systems:
        row: list[Any] = [system]
        for resolution in table.resolutions:
            others = [s.system for s in resolution.standings]
            try:
                standing = resolution.standing(system)
            except KeyError:
                row += [None] * (len(STANDING_FIELDS) + len(PAIR_FIELDS) * len(others))
                continue
            row += [standing.mean, standing.letters, standing.rank, standing.rank_low, standing.rank_high]
            for other in others:
                if other == system:
                    row += [None] * len(PAIR_FIELDS)
                    continue
                pair = resolution.pair(system, other)
                row += [pair.difference, pair.low, pair.high, pair.p, pair.p_adjusted]
        body.append(row)
    return csv_text(top, [fields, ["system"] + [""] * (len(top) - 1), *body])


def to_json(table: ResolutionTable) -> dict[str, Any]:
    """Per scope: its datasets, queries, each system's standing and each pair (each once, better-ranked first)."""
    return {
        "metric": table.metric,
        "settings": asdict(table.settings),
        "footnote": table.footnote(),
        "systems": table.systems,
        "scopes": [
            {
                "scope": r.scope,
                "datasets": list(r.datasets),
                "n_queries": r.n_queries,
                "systems": [asdict(s) for s in r.standings],
                "pairs": [asdict(p) for p in r.pairs],
            }
            for r in table.resolutions
        ],
        "notes": table.notes,
    }


def render(table: ResolutionTable, fmt: str = "markdown", digits: int = 4, layout: str = "wide") -> str:
    """Render in ``markdown``, ``latex``, ``csv`` or ``json`` (HTML: the page's `html_section`)."""
    if fmt == "markdown":
        return render_markdown(table, digits)
    if fmt == "latex":
        return render_latex(table, digits)
    if fmt == "csv":
        return render_csv(table, layout)
    if fmt == "json":
        return json_text(to_json(table))
    raise HarnessError(f"unknown format {fmt!r} for a resolution; use markdown, latex, csv, json or html")


# --------------------------------------------------------------------------- the page's section

_ROW, _LEFT, _WIDTH = 22, 8, 260  # an interval chart's row height, margin and drawing width (px)


def _interval_svg(resolution: Resolution) -> str:
    """Each system's rank interval as a bar over the ranks 1..N and its rank as a dot (inline SVG)."""
    n = len(resolution.standings)

    def x(rank: float) -> float:
        return _LEFT + (rank - 1) / max(n - 1, 1) * _WIDTH

    parts = [
        f'<svg class="rank-intervals" width="{_WIDTH + 2 * _LEFT}" height="{_ROW * n + 18}" role="img" '
        f'aria-label="rank intervals on {html.escape(resolution.scope)}">'
    ]
    for k, standing in enumerate(resolution.standings):
        y = _ROW * k + _ROW / 2
        parts.append(
            f'<line x1="{x(standing.rank_low):.1f}" x2="{x(standing.rank_high):.1f}" y1="{y}" y2="{y}" '
            f'stroke="#4269d0" stroke-width="6" stroke-linecap="round"><title>{html.escape(standing.system)}: '
            f"rank {standing.rank}, 95 % interval {standing.rank_low}–{standing.rank_high}</title></line>"
        )
        parts.append(f'<circle cx="{x(standing.rank):.1f}" cy="{y}" r="4" fill="#111"/>')
    for rank in range(1, n + 1):
        parts.append(f'<text x="{x(rank):.1f}" y="{_ROW * n + 14}" font-size="10" text-anchor="middle">{rank}</text>')
    return "".join(parts) + "</svg>"


def html_section(table: ResolutionTable, digits: int = 4) -> str:
    """The page's section: per scope a table of systems (value, letters, rank [interval]) beside a drawing of the
    rank intervals, then the footnote; every text escaped."""
    out = [
        '<section aria-labelledby="resolution-heading">',
        f'  <h2 id="resolution-heading">Which differences are real ({html.escape(table.metric)})</h2>',
    ]
    for resolution in table.resolutions:
        rows = "".join(
            f"<tr><td>{html.escape(s.system)}</td><td>{metric_text(s.mean, digits)}</td>"
            f"<td>{html.escape(s.letters)}</td><td>{html.escape(_rank_text(s))}</td></tr>"
            for s in resolution.standings
        )
        out.append(
            f"  <h3>{html.escape(resolution.scope)} <small>({resolution.n_queries} queries)</small></h3>\n"
            f'  <div class="resolution"><table class="metric-table"><thead><tr><th>system</th>'
            f"<th>{html.escape(table.metric)}</th><th>letters</th><th>rank [95 % interval]</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>{_interval_svg(resolution)}</div>"
        )
    out += [f'  <p class="note">{html.escape(note)}</p>' for note in [table.footnote(), *table.notes]]
    return "\n".join(out + ["</section>"])
