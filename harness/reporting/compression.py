"""Quality against storage: results of one model at several dimensions and precisions, side by side.

Each row is one result of a dense model searched with an exact index (flat, or a compressed one), with
the stored vectors' dimension, precision and rescoring, the index's bytes per document (its serialized
FAISS size / documents, as the result records it), the metric, and the **quality retained**: the metric
as a percentage of the same model's float32, full-dimension result on the same dataset with otherwise
the same settings (prefixes, sequence length, depth, self-hit policy).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.errors import HarnessError
from harness.presentation import csv_text, json_text, latex_table, markdown_table, metric_text
from harness.reporting.comparison import results_of_split, save_png
from harness.reporting.report import Result

# Settings other than the compression that must match for a result to be measured against a baseline.
_SAME = (
    "backend",
    "precision",
    "max_seq_length",
    "normalize",
    "query_prefix",
    "doc_prefix",
    "top_k",
    "ignore_identical_ids",
)


@dataclass(frozen=True)
class CompressionRow:
    """One result in the quality-against-storage table."""

    dataset: str
    model: str
    dimension: int
    precision: str
    rescore_multiplier: int | None  # None: float32, nothing to rescore
    bytes_per_doc: float
    value: float
    retained: float | None  # % of the float32 full-dimension value; None without that result

    @property
    def variant(self) -> str:
        """``int8 rescore2``, ``binary raw`` or ``float32``: one line of the plot."""
        if self.rescore_multiplier is None:
            return self.precision
        return f"{self.precision} {'rescore' + str(self.rescore_multiplier) if self.rescore_multiplier else 'raw'}"


def _group(result: Result) -> tuple[str, str, str, str]:
    return result.dataset, result.split, result.model, json.dumps([result.config.get(k) for k in _SAME], default=str)


def compression_rows(
    results: Sequence[Result], metric: str = "nDCG@10", split: str | None = None
) -> list[CompressionRow]:
    """The rows of every dense, exact-index result that records its bytes per document, grouped by dataset and
    model, largest storage first.

    Raises:
        HarnessError: No such result (nothing was evaluated with a flat or compressed index), or the metric
            is missing from them.
    """
    kept = [
        r
        for r in results_of_split(list(results), split)
        if "bytes_per_doc" in r.config and r.config.get("index", "flat") == "flat"
    ]
    if not kept:
        raise HarnessError(
            "no result records its bytes per document: evaluate a dense model with the flat index, "
            "or with `truncate_dim` / `embedding_precision` (results written by earlier releases lack it)"
        )
    baselines = {
        _group(r): r.metrics.get(metric)
        for r in kept
        if r.config.get("truncate_dim") is None and r.config.get("embedding_precision", "float32") == "float32"
    }
    rows = []
    for result in kept:
        value = result.metrics.get(metric)
        if value is None:
            raise HarnessError(f"{result.dataset} × {result.label}: no {metric} stored")
        baseline = baselines.get(_group(result))
        precision = result.config.get("embedding_precision", "float32")
        rows.append(
            CompressionRow(
                result.dataset,
                result.model,
                int(result.config.get("dimension", 0)),
                precision,
                result.config.get("rescore_multiplier") if precision != "float32" else None,
                float(result.config["bytes_per_doc"]),
                value,
                100 * value / baseline if baseline else None,
            )
        )
    return sorted(rows, key=lambda r: (r.dataset, r.model, -r.bytes_per_doc, r.variant))


def _cells(row: CompressionRow, digits: int) -> list[str]:
    rescore = (
        "-" if row.rescore_multiplier is None else (f"{row.rescore_multiplier}×" if row.rescore_multiplier else "raw")
    )
    retained = f"{row.retained:.1f}%" if row.retained is not None else "-"
    return [
        row.dataset,
        row.model.rsplit("/", 1)[-1],
        str(row.dimension),
        row.precision,
        rescore,
        f"{row.bytes_per_doc:,.0f}",
        metric_text(row.value, digits),
        retained,
    ]


def render_compression(rows: Sequence[CompressionRow], metric: str, fmt: str = "markdown", digits: int = 4) -> str:
    """The table in markdown, latex, csv (unrounded) or json."""
    header = ["dataset", "model", "dim", "precision", "rescore", "bytes/doc", metric, "retained"]
    if fmt == "csv":
        return csv_text(
            header,
            [
                [
                    r.dataset,
                    r.model,
                    r.dimension,
                    r.precision,
                    r.rescore_multiplier,
                    r.bytes_per_doc,
                    r.value,
                    r.retained,
                ]
                for r in rows
            ],
        )
    if fmt == "json":
        return json_text({"metric": metric, "rows": [r.__dict__ for r in rows]})
    body = [_cells(row, digits) for row in rows]
    if fmt == "latex":
        return latex_table(header, body)
    notes = [
        f"retained: {metric} as a % of the same model's float32 result at its full dimension; bytes/doc: "
        "the index's serialized size / documents; rescore M×: M × depth candidates rescored with float32 "
        "vectors, raw: the compressed ranking alone"
    ]
    return markdown_table(header, body, notes)


def plot_compression(rows: Sequence[CompressionRow], path: str | Path, metric: str) -> None:
    """The metric against bytes per document (log scale), one line per precision, one panel per dataset and
    model; each point is labelled with its dimension. Written as PNG, atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys((r.dataset, r.model) for r in rows))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), dpi=150, squeeze=False)
    for ax, (dataset, model) in zip(axes[0], panels):
        mine = [r for r in rows if (r.dataset, r.model) == (dataset, model)]
        for variant in dict.fromkeys(r.variant for r in mine):
            line = sorted((r for r in mine if r.variant == variant), key=lambda r: r.bytes_per_doc)
            ax.plot([r.bytes_per_doc for r in line], [r.value for r in line], marker="o", label=variant)
            for r in line:
                ax.annotate(
                    str(r.dimension), (r.bytes_per_doc, r.value), textcoords="offset points", xytext=(3, 4), fontsize=7
                )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("bytes per document (index size / documents)")
        ax.set_ylabel(metric)
        ax.set_title(f"{dataset} · {model.rsplit('/', 1)[-1]}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    save_png(fig, path)
