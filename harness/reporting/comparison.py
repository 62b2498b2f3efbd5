"""Comparison tables for papers and reproduction checks (paired comparisons and per-query analysis are in
`harness.reporting.inspect`).

Everything here reads result JSON files (``<dataset>/<model>/<split>.json``) only: no model and no
corpus is needed, except by `inspect`, which shows query texts and document titles.

Table rules:

* rows are datasets in the registry's order (then any others alphabetically), columns are models
  (``by="model"`` transposes);
* CQADupStack is reported as the mean over its 12 forums (``cqadupstack/<forum>`` results), as BEIR
  and MTEB do; with fewer than 12 forums the cell is left empty and a note says which are missing;
* columns are labels (`harness.reporting.labels.column_labels`, the same in every format and the plot):
  each configuration of a model is its own column; two results of different configurations with one
  label are told apart by their hash (with a note naming both and the fix), and a result lacking the
  metric shows an empty cell and a note naming its file;
* the average row is over the datasets every column has a value for, and says how many;
* values are kept unrounded; rounding happens only when rendering (``digits``), once, by
  `harness.presentation.metric_text`.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.datasets import published, registry
from harness.errors import HarnessError, setting
from harness.evaluation.significance import DEFAULT_ROUNDS, bootstrap_ci
from harness.io.files import atomic_writer
from harness.io.provenance import qrels_notes
from harness.presentation import Bold, csv_text, json_text, latex_escape, latex_table, markdown_table, metric_text
from harness.reporting.labels import candidate_keys, candidate_notes, column_labels, tested_across_sets
from harness.reporting.report import Result, check_same_data, load_results  # noqa: F401 - read from here
from harness.reporting.resolution.baseline import mark_significance, significance_note, test_columns, tests_json
from harness.runtimes.registry import kernel_dependent

logger = logging.getLogger(__name__)

CQADUPSTACK = "cqadupstack"


def nanobeir_row() -> str:
    """The row of NanoBEIR's mean: ``NanoBEIR (mean of 13)``."""
    return f"NanoBEIR (mean of {len(registry.get(registry.NANOBEIR).subsets)})"


def dataset_order(names: Iterable[str]) -> list[str]:
    """BEIR's datasets in registry order, then NanoBEIR's and their mean row, then the rest by name."""
    known = [*registry.datasets(), *(name for name in registry.nanobeir() if "/" in name), nanobeir_row()]
    names = set(names)
    return [n for n in known if n in names] + sorted(names - set(known))


def results_of_split(results: list[Result], split: str | None) -> list[Result]:
    """The results of `split`, or of each dataset's registry evaluation split (else test)."""
    return _pick_split(results, split)


def _pick_split(results: list[Result], split: str | None) -> list[Result]:
    """Keep one split per dataset: the one asked for, else the registry's eval split, else test."""
    kept = []
    for result in results:
        base = result.dataset.split("/")[0]
        spec = registry.lookup(base)
        wanted = split or (spec.eval_split if spec else "test")
        if result.split == wanted:
            kept.append(result)
    return kept


@dataclass
class Cell:
    """One (dataset, model) value with its per-query scores (for significance and error bars)."""

    value: float | None
    per_query: dict[str, float] = field(default_factory=dict)
    where: str = ""  # the result file (or files) the value comes from, for messages


@dataclass
class Comparison:
    """A datasets × columns table of one metric, ready to render."""

    metric: str
    datasets: list[str]
    models: list[str]
    cells: dict[tuple[str, str], Cell]
    label_models: dict[str, str] = field(default_factory=dict)  # column label → the model it evaluated
    label_rerankers: dict[str, str] = field(default_factory=dict)  # column label → its cross-encoder, if any
    stored_labels: dict[str, str] = field(default_factory=dict)  # column label → the label its results store
    published_columns: list[str] = field(default_factory=list)
    published_values: dict[tuple[str, str], float] = field(default_factory=dict)
    # "Δ label vs published column" → (label, published column)
    delta_columns: dict[str, tuple[str, str]] = field(default_factory=dict)
    marks: dict[tuple[str, str], str] = field(default_factory=dict)
    tests: dict[tuple[str, str], Any] = field(default_factory=dict)  # (dataset, column) → its Pair with the baseline
    notes: list[str] = field(default_factory=list)

    @property
    def columns(self) -> list[str]:
        return [*self.models, *self.published_columns, *self.delta_columns]

    def render(self, fmt: str = "markdown", digits: int = 4, by: str = "dataset") -> str:
        """The table as text: ``markdown``, ``latex``, ``csv`` or ``json`` (module-level `render`)."""
        return render(self, fmt, digits, by)

    def value(self, dataset: str, column: str) -> float | None:
        if column in self.delta_columns:
            label, published_column = self.delta_columns[column]
            ours = self.value(dataset, label)
            theirs = self.published_values.get((dataset, published_column))
            return None if ours is None or theirs is None else ours - theirs
        if column in self.published_columns:
            return self.published_values.get((dataset, column))
        cell = self.cells.get((dataset, column))
        return cell.value if cell else None

    def shared_datasets(self) -> list[str]:
        """The datasets every value column (systems and published) has a value for: what the average is over."""
        value_columns = [*self.models, *self.published_columns]
        return [
            d
            for d in self.datasets
            if d != nanobeir_row()  # its 13 datasets are rows already
            and all(self.value(d, c) is not None for c in value_columns)
        ]

    def average_note(self) -> str | None:
        """Which datasets the average leaves out and the columns that lack them (None when none is left out)."""
        value_columns = [*self.models, *self.published_columns]
        left = {d: [c for c in value_columns if self.value(d, c) is None] for d in self.datasets if d != nanobeir_row()}
        left = {d: columns for d, columns in left.items() if columns}
        if not left or len(self.datasets) < 2:
            return None
        shared = self.shared_datasets()
        what = "; ".join(
            f"{d} (no value for {', '.join(columns[:3])}{', ...' if len(columns) > 3 else ''})"
            for d, columns in left.items()
        )
        return (
            f"the average is over {len(shared)} of {len(self.datasets)} datasets ({', '.join(shared) or 'none'}): "
            f"left out {what}"
        )

    def average(self) -> tuple[dict[str, float], int]:
        """Column means over the datasets that have every (non-delta) column, and how many those are."""
        shared = self.shared_datasets()
        if not shared:
            return {}, 0
        return {
            c: sum(self.value(d, c) for d in shared) / len(shared)
            for c in self.columns
            if all(self.value(d, c) is not None for d in shared)
        }, len(shared)

    def best(self, dataset: str) -> set[str]:
        """The systems the user ran holding the row's best value (never a published column; nothing when
        fewer than two systems have a value in the row, since there is nothing to win against)."""
        values = {c: self.value(dataset, c) for c in self.models}
        values = {c: v for c, v in values.items() if v is not None}
        if len(values) < 2:
            return set()
        top = max(values.values())
        return {c for c, v in values.items() if abs(v - top) < 1e-12}

    def to_rows(self) -> list[dict[str, Any]]:
        """The plain pivot: one dict per dataset, unrounded (no average, no marks)."""
        return [{"dataset": d, **{c: self.value(d, c) for c in self.columns}} for d in self.datasets]


def _add_forum_means(table: dict[tuple[str, str], Cell], forums: dict[str, dict[str, Cell]], notes: list[str]) -> None:
    """Each label's CQADupStack cell: the registry's mean over its forums (per-query values pooled), or none
    with a note when a forum is missing."""
    n_forums = len(registry.get(CQADUPSTACK).subsets)
    for label, by_forum in forums.items():
        mean, missing = registry.subset_mean(CQADUPSTACK, {forum: cell.value for forum, cell in by_forum.items()})
        if missing:
            notes.append(
                f"{CQADUPSTACK} × {label}: {n_forums - len(missing)} of {n_forums} forums (missing "
                f"{', '.join(missing)}); no mean reported"
            )
            table[(CQADUPSTACK, label)] = Cell(None)
            continue
        pooled = {f"{forum}/{q}": v for forum, cell in by_forum.items() for q, v in cell.per_query.items()}
        table[(CQADUPSTACK, label)] = Cell(mean, pooled, f"the {n_forums} {CQADUPSTACK} forums of {label}")


def build_comparison(
    results: list[Result],
    metric: str = "nDCG@10",
    split: str | None = None,
    with_published: bool = False,
    significance: str | None = None,
    alpha: float = 0.05,
    correction: str = "holm",
    rounds: int = DEFAULT_ROUNDS,
    published_systems: Sequence[str] = (),
    published_from: Sequence[str | Path] = (),
    test: str = "randomization",
    seed: int = 0,
) -> Comparison:
    """Pivot results into a datasets × models table of `metric`.

    Args:
        results: Result JSON objects (see `load_results`).
        metric: A canonical metric name, e.g. ``nDCG@10``.
        split: Use this split; default each dataset's registry eval split (else ``test``).
        with_published: Add published columns (`_add_published`): each system's own published
            column with a delta column against it, and the BM25 baseline (pyserini flat).
        published_systems: More published columns, by system (``bm25+ce``, ``splade-pp-ed``) or by
            column heading (``bge-base-en-v1.5 · pyserini lucene-hnsw``); implies `with_published`.
        published_from: MTEB results folders whose models become published columns
            (`harness.datasets.published.from_mteb_folder`); implies `with_published`.
        significance: A baseline model; every other model's cell is tested against it per dataset (`test`) and
            marked ``†`` when the corrected p < `alpha` (`harness.reporting.resolution.baseline`).
        alpha: Significance level.
        correction: ``holm`` (default), ``bh``, ``bonferroni`` or ``none``, across the datasets of each model.
        rounds: Randomization rounds and bootstrap resamples.
        test: ``randomization`` (default), ``t`` or ``bootstrap``.
        seed: Seeds the randomization test and the bootstrap.

    Raises:
        HarnessError: No result has the metric, or the baseline is not among the models.
    """
    notes: list[str] = []
    results, labels = labelled_results(_pick_split(results, split), notes)
    if not any(metric in result.metrics for result in results):
        raise HarnessError(
            f"no result has {metric} (compute it with {setting('k_values')}, e.g. {metric.split('@')[-1]})"
        )
    table: dict[tuple[str, str], Cell] = {}
    forums: dict[str, dict[str, Cell]] = {}
    label_models: dict[str, str] = {}
    stored: dict[str, str] = {}  # column label → the label stored in its results: columns keep that order
    label_rerankers: dict[str, str] = {}
    for result in results:
        label = labels[id(result)]
        label_models[label] = result.model
        stored[label] = result.label or result.model
        if result.config.get("rerank"):
            label_rerankers[label] = result.config["rerank"].get("model")
        if metric in result.metrics:
            per_query = {q: values[metric] for q, values in result.per_query.items() if metric in values}
            cell = Cell(result.metrics[metric], per_query, str(result.where))
        else:
            cell = Cell(None, where=str(result.where))
            notes.append(_lacking(result, metric))
        name = result.dataset
        if name.startswith(f"{CQADUPSTACK}/"):
            forums.setdefault(label, {})[name.split("/", 1)[1]] = cell
        else:
            table[(name, label)] = cell
    _add_forum_means(table, forums, notes)
    _add_nanobeir_means(table, notes)
    notes += qrels_notes((r.dataset, r.split, r.config.get("qrels_provenance")) for r in results)
    candidates = candidate_keys(results, labels)  # which rerankers reranked the same candidates
    notes += candidate_notes(candidates)
    warning = mixed_kernels(results)
    if warning:
        logger.warning(warning)
        notes.append(warning)
    datasets = dataset_order(d for d, _ in table)
    models = sorted({m for _, m in table}, key=lambda m: (stored.get(m, m), m))
    comparison = Comparison(
        metric,
        datasets,
        models,
        table,
        label_models=label_models,
        stored_labels=stored,
        label_rerankers=label_rerankers,
        notes=notes,
    )
    if with_published or published_systems or published_from:
        _add_published(comparison, split, published_systems or ())
    for folder in published_from:
        _add_folder_columns(comparison, split, folder)
    if significance is not None:
        base = mark_significance(comparison, significance, alpha, correction, rounds, test, seed)
        comparison.notes += filter(None, [tested_across_sets(candidates, base, comparison.models)])
    note = comparison.average_note()
    if note:
        comparison.notes.append(note)
    return comparison


def _add_nanobeir_means(table: dict[tuple[str, str], Cell], notes: list[str]) -> None:
    """A `nanobeir_row` cell for each column with NanoBEIR results: the mean of the 13 datasets' scores (the figure
    NanoBEIR evaluators print), beside the 13 rows; a column lacking some of them gets no mean, and a note."""
    subsets = registry.get(registry.NANOBEIR).subsets
    labels = sorted({label for dataset, label in table if dataset.startswith(f"{registry.NANOBEIR}/")})
    for label in labels:
        cells = {subset: table.get((f"{registry.NANOBEIR}/{subset}", label)) for subset in subsets}
        mean, missing = registry.subset_mean(registry.NANOBEIR, {s: c.value if c else None for s, c in cells.items()})
        if missing:
            notes.append(
                f"{registry.NANOBEIR} × {label}: {len(subsets) - len(missing)} of {len(subsets)} datasets "
                f"(missing {', '.join(missing)}); no mean reported"
            )
            table[(nanobeir_row(), label)] = Cell(None)
            continue
        pooled = {f"{s}/{q}": v for s, cell in cells.items() for q, v in cell.per_query.items()}
        table[(nanobeir_row(), label)] = Cell(mean, pooled)


def labelled_results(results: list[Result], notes: list[str]) -> tuple[list[Result], dict[int, str]]:
    """One result per (dataset, split, label), and each one's column label (by ``id``): see
    `harness.reporting.labels.column_labels`, the one place labels are derived for every output."""
    return column_labels(results, notes)


def mixed_kernels(results: Sequence[Result]) -> str | None:
    """A warning when results made with a kernel-dependent backend came from CPUs of different kernel classes.

    int8 matmuls run on different instructions per CPU (AVX2, AVX512-VNNI, AVX-VNNI, AMX, NEON) and
    give slightly different vectors, so such results are not strictly comparable across hosts.
    """
    classes: dict[str, list[str]] = {}
    for result in results:
        if kernel_dependent(result.config.get("backend")):  # `harness.runtimes.registry.Runtime.int8_kernels`
            kernel = result.host.get("kernel_class", "unrecorded")
            classes.setdefault(kernel, []).append(Path(result.where).name)
    if len(classes) < 2:
        return None
    where = "; ".join(f"{kernel}: {', '.join(sorted(files)[:3])}" for kernel, files in sorted(classes.items()))
    return (
        f"int8 results here come from CPUs with different int8 kernels ({where}); their vectors, and so their "
        "scores, can differ slightly between these hosts"
    )


def _lacking(result: Result, metric: str) -> str:
    """Why a result has no value for `metric`, naming its file."""
    depth = result.config.get("top_k")
    cutoff = metric.rsplit("@", 1)[-1]
    why = (
        f"it retrieved {depth} documents per query"
        if cutoff.isdigit() and depth and int(cutoff) > depth
        else "it was written before results stored the standard metric set; rerun it"
    )
    return f"{result.where}: no {metric} ({why})"


def eval_split(dataset: str, split: str | None) -> str:
    spec = registry.lookup(dataset.split("/")[0])
    return split or (spec.eval_split if spec else "test")


def _add_published(comparison: Comparison, split: str | None, systems: Sequence[str]) -> None:
    """Published columns: each result system's own (with a Δ column against it), the BM25 baseline, and
    `systems`; notes cite each column's sources once with the datasets it covers."""
    own = {
        label: published.preferred_column(
            published.systems_of_result(
                comparison.label_models.get(label, label),
                {"model": comparison.label_rerankers[label]} if label in comparison.label_rerankers else None,
            ),
            comparison.label_rerankers.get(label),
        )
        for label in comparison.models
    }
    try:
        chosen = published.columns(systems)
    except KeyError as exc:
        known = sorted({row.system for row in published.published_scores()})
        raise HarnessError(
            f"published system {exc.args[0]!r} is not in the published table (known: {', '.join(known[:12])}, ...)"
        ) from None
    covered: set[str] = set()
    for column in dict.fromkeys([*(c for c in own.values() if c), published.BASELINE, *chosen]):
        rows = published.column_rows(column, lambda d: eval_split(d, split), comparison.datasets)
        lacking = sorted(dataset for dataset, row in rows.items() if comparison.metric not in row.values)
        rows = {dataset: row for dataset, row in rows.items() if comparison.metric in row.values}
        if lacking:
            comparison.notes.append(f"{column}: no {comparison.metric} published for {', '.join(lacking)}")
        if not rows:
            continue
        comparison.published_columns.append(column)
        for dataset, row in rows.items():
            comparison.published_values[(dataset, column)] = row.values[comparison.metric]
        covered.update(rows)
        sources = sorted({row.source_short for row in rows.values()})
        comparison.notes.append(f"{column}: {'; '.join(sources)} (datasets: {', '.join(dataset_order(rows))})")
    for label, column in own.items():
        if column in comparison.published_columns:
            comparison.delta_columns[f"Δ {label} vs {column}"] = (label, column)
    for dataset in comparison.datasets:
        if dataset not in covered:
            comparison.notes.append(
                f"{dataset}: nothing published for it in these columns"
                + (
                    ""
                    if registry.lookup(dataset.split("/")[0])
                    else " (not a BEIR dataset: published numbers exist only for BEIR's)"
                )
            )
    if published.TOUCHE in comparison.datasets:
        comparison.notes.append(
            f"{published.TOUCHE}: published rows on other qrels editions (MTEB's "
            "Touche2020Retrieval.v3, the reranking leaderboard's pre-v2 rows) are not shown; "
            "the BEIR download is v2"
        )


def _add_folder_columns(comparison: Comparison, split: str | None, folder: str | Path) -> None:
    """A published column for each model of an MTEB results folder that has a value on these datasets."""
    rows = published.from_mteb_folder(folder)
    for column in sorted({row.column for row in rows}):
        found = published.column_rows(column, lambda d: eval_split(d, split), comparison.datasets, rows)
        found = {dataset: row for dataset, row in found.items() if comparison.metric in row.values}
        if not found or column in comparison.published_columns:
            continue
        comparison.published_columns.append(column)
        for dataset, row in found.items():
            comparison.published_values[(dataset, column)] = row.values[comparison.metric]
        comparison.notes.append(
            f"{column}: {next(iter(found.values())).source_short} (datasets: {', '.join(dataset_order(found))})"
        )


# --------------------------------------------------------------------------- rendering


_fmt = metric_text  # one rounding rule for every format (`harness.presentation.metric_text`)


def _grid(comparison: Comparison, digits: int, by: str) -> tuple[list[str], list[list[str]], list[str]]:
    """Header, body rows and the average row as strings (best values as `Bold` cells)."""
    average, n_shared = comparison.average()
    header = ["dataset", *comparison.columns]  # labels as `column_labels` made them, the same in every format
    body = []
    for dataset in comparison.datasets:
        best = comparison.best(dataset)
        row = [dataset]
        for column in comparison.columns:
            text = _fmt(comparison.value(dataset, column), digits, column in comparison.delta_columns)
            text += comparison.marks.get((dataset, column), "")
            row.append(Bold(text) if column in best and comparison.value(dataset, column) is not None else text)
        body.append(row)
    avg_row = (
        [f"average over {n_shared} dataset{'s' if n_shared > 1 else ''} shared by all columns"]
        + [_fmt(average.get(c), digits, c in comparison.delta_columns) for c in comparison.columns]
        if average
        else []
    )
    if by == "model":
        rows = [header, *body] + ([avg_row] if avg_row else [])
        transposed = [list(col) for col in zip(*rows)]
        transposed[0][0] = "model"
        return transposed[0], transposed[1:], []
    return header, body, avg_row


def render_markdown(comparison: Comparison, digits: int = 4, by: str = "dataset") -> str:
    """A Markdown table; the best value of each row is bold."""
    header, body, avg = _grid(comparison, digits, by)
    return markdown_table(header, body + ([avg] if avg else []), comparison.notes)


def render_latex(comparison: Comparison, digits: int = 4, by: str = "dataset") -> str:
    """A booktabs ``tabular`` (needs ``\\usepackage{booktabs}``); the best value of each row is bold."""
    header, body, avg = _grid(comparison, digits, by)
    note = significance_note(comparison.notes)  # the marks' footnote below the table
    footnote = "\n\\par\\smallskip\\footnotesize " + latex_escape(note) if note else ""
    return latex_table(header, body, [avg] if avg else []) + footnote


def render_csv(comparison: Comparison, by: str = "dataset") -> str:
    """The plain pivot, unrounded; with a baseline, each tested column's difference, interval, p and adjusted p."""
    rows = comparison.to_rows()
    for name, values in test_columns(comparison):
        for row in rows:
            row[name] = values.get(row["dataset"])
    columns = [*comparison.columns, *(name for name, _ in test_columns(comparison))]
    if by == "model":
        return csv_text(
            ["model", *(row["dataset"] for row in rows)],
            [[column, *(row[column] for row in rows)] for column in columns],
        )
    return csv_text(["dataset", *columns], [[row[c] for c in ("dataset", *columns)] for row in rows])


def render_json(comparison: Comparison) -> str:
    """Rows, average, marks and notes as JSON (unrounded)."""
    average, n_shared = comparison.average()
    return json_text(
        {
            "metric": comparison.metric,
            "columns": comparison.columns,
            "rows": comparison.to_rows(),
            "average": average,
            "average_over": n_shared,
            "average_datasets": comparison.shared_datasets(),
            "significant": [{"dataset": d, "model": m} for (d, m) in comparison.marks],
            "tests": tests_json(comparison),
            "notes": comparison.notes,
        }
    )


RENDERERS = {"markdown", "latex", "csv", "json"}


def render(comparison: Comparison, fmt: str = "markdown", digits: int = 4, by: str = "dataset") -> str:
    """Render in one of `RENDERERS`."""
    if fmt == "markdown":
        return render_markdown(comparison, digits, by)
    if fmt == "latex":
        return render_latex(comparison, digits, by)
    if fmt == "csv":
        return render_csv(comparison, by)
    if fmt == "json":
        return render_json(comparison)
    raise HarnessError(f"unknown format {fmt!r}; use one of {', '.join(sorted(RENDERERS))}")


# --------------------------------------------------------------------------- plot


def plot_comparison(comparison: Comparison, path: str | Path, rounds: int = 1000) -> None:
    """A grouped bar chart (one group per dataset, one bar per model) with 95% bootstrap CIs, as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    datasets, models = comparison.datasets, comparison.models
    width = 0.8 / max(1, len(models))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(datasets) * max(1, len(models)) ** 0.5 + 2), 4.5), dpi=150)
    x = np.arange(len(datasets))
    for i, model in enumerate(models):
        heights, lower, upper = [], [], []
        for dataset in datasets:
            cell = comparison.cells.get((dataset, model))
            value = cell.value if cell and cell.value is not None else float("nan")
            low, high = (
                bootstrap_ci(list(cell.per_query.values()), rounds) if cell and cell.per_query else (value, value)
            )
            heights.append(value)
            lower.append(max(0.0, value - low) if cell else 0.0)
            upper.append(max(0.0, high - value) if cell else 0.0)
        ax.bar(x + (i - (len(models) - 1) / 2) * width, heights, width, yerr=[lower, upper], capsize=3, label=model)
    ax.set_xticks(x, datasets, rotation=20 if len(datasets) > 4 else 0, ha="right" if len(datasets) > 4 else "center")
    ax.set_ylabel(comparison.metric)
    ax.set_ylim(0, 1)
    ax.set_title(f"{comparison.metric} by dataset (error bars: 95% bootstrap CI over queries)", fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(axis="y", alpha=0.3)
    save_png(fig, path)


def save_png(fig, path: str | Path) -> None:
    """Write a matplotlib figure as PNG atomically (never a half image under the final name), then close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    with atomic_writer(path, "wb") as handle:
        handle.write(buffer.getvalue())
