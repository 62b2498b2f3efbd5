"""Quality beside cost: one row per result (dataset × system) with the metric and what the run cost
(``report --cost``, and the cost table of the HTML page).

The cost comes from what each result recorded (`Result.timings` and `Result.cost`; docs/outputs.md
defines every field): seconds per phase (``cached`` where the phase was read from the cache), the wall
time, documents/s, search latency p50/p95/p99, peak RSS, index and cache bytes, and an endpoint's tokens
and price, and a rerank's pairs and the tokens its cross-encoder read (its config's ``rerank``). A result written
before cost records has its wall time and coarse phases but no cost record:
those cells show ``–`` (`NONE`), as a phase that did not run does. Values stay unrounded in CSV and JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.errors import HarnessError
from harness.presentation import csv_text, json_text, latex_table, markdown_table, metric_text, size_text
from harness.reporting.comparison import dataset_order, results_of_split
from harness.reporting.labels import column_labels
from harness.reporting.report import Result

NONE = "–"  # as `metric_text` shows a missing value
PHASES = (
    ("load", "load s"),
    ("probe_backend", "backend probe s"),  # --backend auto's probe, its candidates' exports included
    ("prepare_model", "model preparation s"),  # export, calibration, quantization, compile (OpenVINO)
    ("encode_corpus", "encode corpus s"),
    ("encode_queries", "encode queries s"),
    ("index", "index s"),
    ("search", "search s"),
    ("rerank", "rerank s"),
    ("score", "score s"),
)
OPTIONAL = (
    "probe_backend",
    "prepare_model",
    "rerank",
    "tokens",
    "price",
    "vectors",
    "reranked",
)  # columns shown only when some row has a value
COST_NOTES = (
    "phase seconds and wall time are the result's timings; cached: read from the embedding, index or score cache "
    "(no work done); docs/s: corpus documents / seconds of the phase that made them searchable (encode corpus; "
    "BM25: index); search latency: the wall time of searching one query alone, on an evenly spaced sample of at "
    "most 100 judged queries (query encoding excluded; the per-query values are in the result file); peak RSS: the "
    "evaluation's own peak resident memory (its high-water mark, restarted as it began; ≥ where the platform "
    "could not restart it: the evaluating process's peak so far); docs cached / encoded: corpus vectors read from "
    "the embedding cache (by corpus or by text) / texts sent to the encoder; host: the machine the result recorded, "
    "as `beir-harness env` names it (its CPU, the cores used of its logical cores, its GPUs); whether the machine "
    "was otherwise quiet is not recorded, so compare times measured on one host at one time; reranked pairs / "
    "tokens: the (query, document) pairs a rerank scored and the tokens its cross-encoder read for them (cached "
    "scores included); – : not recorded (a "
    "result written before cost records) or not run",
)


@dataclass(frozen=True)
class CostRow:
    """One result's quality and cost."""

    dataset: str
    system: str
    value: float | None
    wall_s: float | None
    phases: dict[str, float | None]  # phase → seconds (None: not recorded)
    cached: tuple[str, ...] = ()
    docs_per_s: float | None = None
    latency_ms: dict[str, float | None] = field(default_factory=dict)  # p50, p95, p99
    latency_queries: int | None = None
    peak_rss_bytes: int | None = None
    peak_rss_scope: str | None = None  # evaluation, process (the process's peak so far), None (not recorded)
    index_bytes: int | None = None
    cache_bytes: int | None = None
    tokens: int | None = None
    price: float | None = None
    docs_cached: int | None = None  # corpus vectors read from the embedding cache (by corpus or by text)
    docs_encoded: int | None = None  # corpus texts sent to the encoder
    rerank_pairs: int | None = None  # the (query, document) pairs a rerank scored
    rerank_tokens: int | None = None  # the tokens its cross-encoder read for them (None: not countable)
    host: str | None = None  # where the times were measured (`host_text`); None: the result recorded no host

    def to_json(self) -> dict[str, Any]:
        """The row as JSON (every value unrounded)."""
        return dict(self.__dict__, cached=list(self.cached))


def _row(result: Result, system: str, metric: str) -> CostRow:
    cost, timings = result.cost or {}, result.timings or {}
    latency = cost.get("search_latency") or {}
    endpoint = cost.get("endpoint") or {}
    vectors = cost.get("vectors") or {}
    rerank = result.config.get("rerank") or {}
    return CostRow(
        dataset=result.dataset,
        system=system,
        value=result.metrics.get(metric),
        wall_s=timings.get("total"),
        phases={phase: timings.get(phase) for phase, _ in PHASES},
        cached=tuple(cost.get("cached") or ()),
        docs_per_s=cost.get("docs_per_s"),
        latency_ms={q: latency.get(f"{q}_ms") for q in ("p50", "p95", "p99")},
        latency_queries=latency.get("queries"),
        peak_rss_bytes=cost.get("peak_rss_bytes"),
        peak_rss_scope=cost.get("peak_rss_scope"),
        index_bytes=cost.get("index_bytes"),
        cache_bytes=cost.get("cache_bytes"),
        tokens=endpoint.get("tokens"),
        price=endpoint.get("cost"),
        docs_cached=vectors.get("docs_cached"),
        docs_encoded=vectors.get("docs_encoded"),
        rerank_pairs=rerank.get("pairs"),
        rerank_tokens=rerank.get("tokens"),
        host=host_text(result.host),
    )


def host_text(host: dict[str, Any] | None) -> str | None:
    """The machine a result's times were measured on, as `beir-harness env` names it: the CPU, the cores the run
    used of the logical cores, and the GPUs torch used (None when the result recorded no host)."""
    if not host or not host.get("cpu"):
        return None
    text = f"{host['cpu']} ({host.get('cores_used', '?')} of {host.get('logical_cores', '?')} cores)"
    gpus = host.get("gpus") or []
    return text + (f", {', '.join(gpus)}" if gpus else "")


def cost_rows(results: Sequence[Result], metric: str = "nDCG@10", split: str | None = None) -> list[CostRow]:
    """One row per (dataset, system) of `split` (default: each dataset's evaluation split), datasets in the
    tables' order, systems by label, labelled as every table labels them (`column_labels`).

    Raises:
        HarnessError: No result of that split.
    """
    kept = results_of_split(list(results), split)
    if not kept:
        raise HarnessError(f"no results of split {split or 'test'} to report the cost of")
    labelled, labels = column_labels(kept, [])
    order = {name: i for i, name in enumerate(dataset_order(r.dataset for r in labelled))}
    rows = [_row(result, labels[id(result)], metric) for result in labelled]
    return sorted(rows, key=lambda r: (order[r.dataset], r.system))


def _seconds(value: float | None) -> str:
    if value is None:
        return NONE
    return f"{value:.1f}" if value >= 100 else f"{value:.2f}" if value >= 1 else f"{value:.3f}"


def _bytes(count: int | None) -> str:
    return NONE if count is None else size_text(count)


def _number(value: float | None, fmt: str) -> str:
    return NONE if value is None else format(value, fmt)


def _columns(rows: Sequence[CostRow]) -> list[str]:
    """The column keys shown: everything, less the optional columns no row has."""
    present = {
        "probe_backend": any(r.phases.get("probe_backend") is not None for r in rows),
        "prepare_model": any(r.phases.get("prepare_model") is not None for r in rows),
        "rerank": any(r.phases.get("rerank") is not None for r in rows),
        "tokens": any(r.tokens is not None for r in rows),
        "price": any(r.price is not None for r in rows),
        "vectors": any(r.docs_encoded is not None for r in rows),
        "reranked": any(r.rerank_pairs is not None for r in rows),
    }
    keys = [
        "dataset",
        "system",
        "metric",
        "wall",
        *(phase for phase, _ in PHASES),
        "docs_per_s",
        "p50",
        "p95",
        "p99",
        "peak_rss",
        "index_bytes",
        "cache_bytes",
        "vectors",
        "reranked",
        "tokens",
        "price",
        "host",
    ]
    return [key for key in keys if key not in OPTIONAL or present[key]]


def _headers(metric: str) -> dict[str, str]:
    return {
        "dataset": "dataset",
        "system": "system",
        "metric": metric,
        "wall": "wall s",
        **dict(PHASES),
        "docs_per_s": "docs/s",
        "p50": "p50 ms",
        "p95": "p95 ms",
        "p99": "p99 ms",
        "peak_rss": "peak RSS",
        "index_bytes": "index",
        "cache_bytes": "cache",
        "vectors": "docs cached / encoded",
        "reranked": "reranked pairs / tokens",
        "tokens": "tokens",
        "price": "price",
        "host": "host",
    }


def _cells(row: CostRow, digits: int) -> dict[str, str]:
    cells = {
        "dataset": row.dataset,
        "system": row.system,
        "metric": metric_text(row.value, digits),
        "wall": _seconds(row.wall_s),
        "docs_per_s": _number(row.docs_per_s, ",.1f"),
        "peak_rss": ("≥ " if row.peak_rss_scope == "process" and row.peak_rss_bytes is not None else "")
        + _bytes(row.peak_rss_bytes),
        "index_bytes": _bytes(row.index_bytes),
        "cache_bytes": _bytes(row.cache_bytes),
        "vectors": NONE if row.docs_encoded is None else f"{row.docs_cached:,} / {row.docs_encoded:,}",
        "reranked": NONE if row.rerank_pairs is None else f"{row.rerank_pairs:,} / {_number(row.rerank_tokens, ',')}",
        "tokens": _number(row.tokens, ","),
        "price": _number(row.price, ".4f"),
        "host": row.host or NONE,
    }
    for phase, _ in PHASES:
        cells[phase] = "cached" if phase in row.cached else _seconds(row.phases.get(phase))
    cells.update({q: _number(row.latency_ms.get(q), ".3f") for q in ("p50", "p95", "p99")})
    return cells


def cost_table(rows: Sequence[CostRow], metric: str, digits: int = 4) -> tuple[list[str], list[list[str]]]:
    """(header, body) of the table as text cells, as markdown, LaTeX and the HTML page show it."""
    keys, headers = _columns(rows), _headers(metric)
    return [headers[key] for key in keys], [[_cells(row, digits)[key] for key in keys] for row in rows]


def render_cost(rows: Sequence[CostRow], metric: str, fmt: str = "markdown", digits: int = 4) -> str:
    """The table in markdown, latex, csv (unrounded: seconds, bytes, milliseconds) or json."""
    if fmt == "json":
        return json_text({"metric": metric, "notes": list(COST_NOTES), "rows": [row.to_json() for row in rows]})
    if fmt == "csv":
        shown = _columns(rows)
        phases = [phase for phase, _ in PHASES if phase not in ("probe_backend", "prepare_model") or phase in shown]
        header = [
            "dataset",
            "system",
            metric,
            "wall_s",
            *(f"{phase}_s" for phase in phases),
            "cached",
            "docs_per_s",
            "p50_ms",
            "p95_ms",
            "p99_ms",
            "latency_queries",
            "peak_rss_bytes",
            "index_bytes",
            "cache_bytes",
            "tokens",
            "price",
            "docs_cached",
            "docs_encoded",
            "rerank_pairs",
            "rerank_tokens",
            "host",
        ]
        return csv_text(
            header,
            [
                [
                    r.dataset,
                    r.system,
                    r.value,
                    r.wall_s,
                    *(r.phases.get(p) for p in phases),
                    " ".join(r.cached),
                    r.docs_per_s,
                    *(r.latency_ms.get(q) for q in ("p50", "p95", "p99")),
                    r.latency_queries,
                    r.peak_rss_bytes,
                    r.index_bytes,
                    r.cache_bytes,
                    r.tokens,
                    r.price,
                    r.docs_cached,
                    r.docs_encoded,
                    r.rerank_pairs,
                    r.rerank_tokens,
                    r.host,
                ]
                for r in rows
            ],
        )
    header, body = cost_table(rows, metric, digits)
    if fmt == "latex":
        return latex_table(header, body)
    return markdown_table(header, body, COST_NOTES)


def cost_summary(result: Result) -> str | None:
    """One line of what a run cost, for `evaluate`'s log (None for a result without a cost record)."""
    if not result.cost:
        return None
    row = _row(result, result.label or result.model, "")
    cells = _cells(row, 4)
    phases = " · ".join(
        f"{label[:-2]} {cells[phase]}{'' if cells[phase] == 'cached' else ' s'}"
        for phase, label in PHASES
        if row.phases.get(phase) is not None
    )
    parts = [f"{cells['wall']} s wall", phases]
    if row.docs_per_s is not None:
        parts.append(f"{cells['docs_per_s']} docs/s")
    if row.latency_ms.get("p50") is not None:
        parts.append(f"search latency p50/p95/p99 {cells['p50']}/{cells['p95']}/{cells['p99']} ms")
    if row.docs_encoded is not None:
        parts.append(f"{cells['vectors']} docs cached / encoded")
    if row.rerank_pairs is not None:
        parts.append(f"{cells['reranked']} reranked pairs / tokens")
    parts.append(f"peak RSS {cells['peak_rss']}")
    if row.tokens is not None:
        parts.append(f"{cells['tokens']} tokens" + (f", price {cells['price']}" if row.price is not None else ""))
    return "cost: " + " · ".join(parts)
