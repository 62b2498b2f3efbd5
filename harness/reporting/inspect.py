"""Per-query analysis: the worst queries of a result, or where two results differ most (`inspect`), and the
paired tests of two results over their queries (`compare`).

For each query chosen: its text, its judged documents with their grades and the rank at which each
result retrieved them (or "not retrieved"), and each result's top documents with score, grade and title.
`inspect_results` returns the data (what ``inspect --json`` prints); `format_inspect` the text.
`compare_results` tests B against A on each metric, query by query (`harness.evaluation.significance`);
`format_compare` is its table.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from harness.errors import HarnessError, setting
from harness.evaluation.significance import DEFAULT_ROUNDS
from harness.presentation import align, metric_text
from harness.reporting.comparison import mixed_kernels
from harness.reporting.labels import display_label
from harness.reporting.report import Result, check_results

logger = logging.getLogger(__name__)

NOT_RETRIEVED = None  # the rank of a judged document a run did not retrieve


def _labels(results: Sequence[Result]) -> list[str]:
    """Each result's label as every report shows it (`harness.reporting.labels`), unique: two results with
    one label are told apart as the tables tell them apart (by configuration hash, else A and B)."""
    labels = [display_label(result) for result in results]
    if len(labels) == 2 and labels[0] == labels[1]:
        hashes = [result.config_hash[:8] for result in results]
        labels = [
            f"{label} #{h}" if h and hashes[0] != hashes[1] else f"{label} ({which})"
            for label, h, which in zip(labels, hashes, "AB")
        ]
    return labels


def _chosen(
    results: Sequence[Result], values: list[dict[str, float]], worst: int, metric: str, labels: list[str]
) -> tuple[list[str], str, str]:
    """The query ids to show, a title, and how many queries tie at the boundary value."""
    first = results[0]
    where = f"{first.dataset} [{first.split}]"
    if len(results) == 1:
        order = sorted(values[0], key=lambda q: (values[0][q], q))
        chosen = order[:worst]
        low = values[0][order[0]] if order else 0.0
        tied = sum(v == low for v in values[0].values())
        ties = f"{tied} of {len(order)} queries score {metric_text(low)}, the worst value" + (
            f"; {len(chosen)} shown, ties in query_id order" if tied > len(chosen) else ""
        )
        return chosen, f"{len(chosen)} worst queries by {metric} ({labels[0]}, {where})", ties
    shared = set(values[0]) & set(values[1])
    gap = {q: abs(values[1][q] - values[0][q]) for q in shared}
    order = sorted(shared, key=lambda q: (-gap[q], q))
    chosen = order[:worst]
    top = gap[order[0]] if order else 0.0
    tied = sum(g == top for g in gap.values())
    ties = f"{tied} of {len(order)} queries differ by {metric_text(top)}, the largest difference" + (
        f"; {len(chosen)} shown, ties in query_id order" if tied > len(chosen) else ""
    )
    return chosen, (f"{len(chosen)} queries where {labels[1]} and {labels[0]} differ most on {metric} ({where})"), ties


def inspect_results(
    results: Sequence[Result], worst: int = 10, metric: str = "nDCG@10", depth: int = 5
) -> dict[str, Any]:
    """The worst queries of one result (or, for two, the queries where they differ most), as data.

    Reads the dataset folder recorded in the result (texts, judgments, titles) and the run file beside it.

    Returns:
        ``{"title", "metric", "dataset", "split", "systems", "ties", "queries": [{"query_id", "text",
        "values", "judged": [{"doc_id", "grade", "ranks": {system: rank or None}}], "top": {system:
        [{"rank", "doc_id", "score", "grade", "title"}]}}]}``; a grade is None for an unjudged document.

    Raises:
        HarnessError: The dataset folder or the run file is gone, or the metric is missing.
    """
    from harness.io.formats import iter_corpus, iter_queries, locate_beir_folder
    from harness.io.trec import read_qrels, read_run

    for result in results:
        if metric not in result.metrics:
            raise HarnessError(
                f"{result.where}: no {metric} (use {setting('metric')} with one of {', '.join(result.metrics)})"
            )
    check_results(results, run_file=True, note=False)  # the runs read below are the ones the results were scored on
    first = results[0]
    folder = locate_beir_folder(first.config["dataset_path"], first.split)
    runs = []
    for result in results:
        path = result.run_path
        if not path.is_file():
            raise HarnessError(f"{path}: the run file beside the result is missing")
        runs.append(read_run(path))
    values = [{q: v[metric] for q, v in r.per_query.items()} for r in results]
    systems = _labels(results)
    chosen, title, ties = _chosen(results, values, worst, metric, systems)
    qrels = read_qrels(folder.qrels)
    texts = {q.query_id: q.text for q in iter_queries(folder.queries) if q.query_id in set(chosen)}
    needed = {d for q in chosen for d in qrels.get(q, {})} | {
        hit.doc_id for run in runs for q in chosen for hit in run.get(q, ())[:depth]
    }
    titles = {doc.doc_id: (doc.title or doc.text)[:70] for doc in iter_corpus(folder.corpus) if doc.doc_id in needed}
    queries = []
    for query_id in chosen:
        judged = sorted(qrels.get(query_id, {}).items(), key=lambda item: (-item[1], item[0]))
        ranks = [{hit.doc_id: rank for rank, hit in enumerate(run.get(query_id, ()), start=1)} for run in runs]
        queries.append(
            {
                "query_id": query_id,
                "text": texts.get(query_id, ""),
                "values": {system: v.get(query_id, 0.0) for system, v in zip(systems, values)},
                "judged": [
                    {"doc_id": d, "grade": g, "ranks": {s: r.get(d, NOT_RETRIEVED) for s, r in zip(systems, ranks)}}
                    for d, g in judged
                ],
                "top": {
                    system: [
                        {
                            "rank": rank,
                            "doc_id": hit.doc_id,
                            "score": hit.score,
                            "grade": qrels.get(query_id, {}).get(hit.doc_id),
                            "title": titles.get(hit.doc_id, ""),
                        }
                        for rank, hit in enumerate(run.get(query_id, ())[:depth], start=1)
                    ]
                    for system, run in zip(systems, runs)
                },
            }
        )
    return {
        "title": title,
        "metric": metric,
        "dataset": first.dataset,
        "split": first.split,
        "systems": systems,
        "ties": ties,
        "queries": queries,
    }


def format_inspect(data: dict[str, Any], judged_shown: int = 10) -> str:
    """The text `inspect` prints for `inspect_results`' data."""
    lines = [data["title"], data["ties"], ""]
    for query in data["queries"]:
        scores = "  ".join(f"{system} {metric_text(value)}" for system, value in query["values"].items())
        lines.append(f"{query['query_id']}: {(query['text'] or '?')[:100]}")
        lines.append(f"  {data['metric']}: {scores}")
        lines.append("  judged (grade; rank retrieved):")
        for judged in query["judged"][:judged_shown]:
            ranks = ", ".join(f"{s} {'not retrieved' if r is None else f'#{r}'}" for s, r in judged["ranks"].items())
            lines.append(f"    {judged['doc_id']:<14} grade {judged['grade']}; {ranks}")
        if len(query["judged"]) > judged_shown:
            lines.append(f"    and {len(query['judged']) - judged_shown} more")
        for system, top in query["top"].items():
            lines.append(f"  top {len(top)} of {system}:")
            for hit in top:
                mark = f"grade {hit['grade']}" if hit["grade"] is not None else "unjudged"
                lines.append(f"    {hit['rank']}. {hit['doc_id']:<14} {hit['score']:8.4f}  {mark:<9} {hit['title']}")
        lines.append("")
    return "\n".join(lines).rstrip()


def compare_results(
    first: Result, second: Result, metrics: Sequence[str] | None = None, rounds: int = DEFAULT_ROUNDS, seed: int = 0
) -> list:
    """Paired tests of `second` against `first` for each shared metric (see `harness.evaluation.significance`).

    Raises:
        HarnessError: Different datasets, splits or qrels.
    """
    from harness.evaluation.significance import compare_metric

    for key in ("dataset", "split"):
        if getattr(first, key) != getattr(second, key):
            raise HarnessError(
                f"the results are on different {key}s ({getattr(first, key)} vs {getattr(second, key)}); "
                "compare results of the same dataset and split"
            )
    qrels_a, qrels_b = first.fingerprints.get("qrels"), second.fingerprints.get("qrels")
    if qrels_a and qrels_b and qrels_a != qrels_b:
        raise HarnessError("the results were scored against different qrels files (fingerprints differ)")
    warning = mixed_kernels([first, second])
    if warning:
        logger.warning(warning)
    names = [m for m in first.metrics if m in second.metrics] if metrics is None else list(metrics)
    tests = []
    for metric in names:
        if metric not in first.metrics or metric not in second.metrics:
            raise HarnessError(f"{metric} is not in both results")
        per_a = {q: v[metric] for q, v in first.per_query.items()}
        per_b = {q: v[metric] for q, v in second.per_query.items()}
        tests.append(compare_metric(metric, per_a, per_b, rounds, seed))
    return tests


def format_p(p: float) -> str:
    """A p-value for a table: four decimals, and ``< 1e-4`` below that (never a misleading ``0.0000``)."""
    return "< 1e-4" if p < 1e-4 else f"{p:.4f}"


def format_compare(first: Result, second: Result, tests: Sequence, alpha: float = 0.05) -> str:
    """A table: metric, A, B, B − A, p (t-test), p (randomization), p (bootstrap), and per query: B wins / ties / A wins."""
    lines = [
        f"A = {display_label(first)}  ({first.where})",
        f"B = {display_label(second)}  ({second.where})",
        f"{first.dataset} [{first.split}], {tests[0].n_queries if tests else 0} judged queries; "
        f"* p < {alpha} in all three tests",
        "",
    ]
    table = [["metric", "A", "B", "B - A", "p t-test", "p random", "p bootstrap", "", "B wins / ties / A wins"]]
    for t in tests:
        star = "*" if max(t.p_t_test, t.p_randomization, t.p_bootstrap) < alpha else ""
        table.append(
            [
                t.metric,
                metric_text(t.mean_a),
                metric_text(t.mean_b),
                metric_text(t.difference, signed=True),
                format_p(t.p_t_test),
                format_p(t.p_randomization),
                format_p(t.p_bootstrap),
                star,
                f"{t.wins} / {t.ties} / {t.losses}",
            ]
        )
    return "\n".join(lines + align(table, right=[False, True, True, True, True, True, True, False, True]))
