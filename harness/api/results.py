"""The commands on saved results: report (and its page, checks, compression, cost and frontier views), compare, fuse,
export, inspect."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from harness.api.settings import result_metric, results_of, written_result
from harness.errors import HarnessError, setting
from harness.io.formats import write_text
from harness.records import Result
from harness.reporting.comparison import Comparison, plot_comparison  # noqa: F401 - the command line's
from harness.reporting.compression import plot_compression, render_compression  # noqa: F401 - the command line's
from harness.reporting.cost import cost_summary, render_cost  # noqa: F401 - the command line's
from harness.reporting.frontier import parse_within, plot_frontier  # noqa: F401 - the command line's
from harness.reporting.inspect import format_compare, format_inspect  # noqa: F401 - the command line's
from harness.reporting.labels import check_label  # noqa: F401 - the command line's
from harness.reporting.report import format_metrics_table  # noqa: F401 - the command line's
from harness.reporting.reproduction import check_exit_code, format_checks  # noqa: F401 - the command line's
from harness.retrieval.fusion import parse_weights  # noqa: F401 - the command line's


def read_results(
    results: Iterable[str | Path] | str | Path = ("results",), allow_mixed_data: bool = False
) -> list[Result]:
    """Load saved results (what `evaluate`, `bench` and `fuse` write), as `report` reads them.

    Args:
        results: Result JSON files, or folders searched recursively.
        allow_mixed_data: Results of one dataset computed on different data get labels of their own instead
            of an error.

    Returns:
        The `Result` objects.

    Raises:
        HarnessError: No result found, an unreadable file, a result that fails its checks (its content digest,
            its means against its per-query values: `harness.reporting.report.result_problems`), or (without
            `allow_mixed_data`) one dataset on different data.
    """
    return results_of(results, allow_mixed_data)


def report(
    results: Iterable[Result | str | Path] | str | Path = ("results",),
    metric: str | Sequence[str] = "nDCG@10",
    *,
    split: str | None = None,
    published: bool = False,
    published_systems: Iterable[str] = (),
    published_from: Iterable[str | Path] = (),
    significance: str | None = None,
    alpha: float = 0.05,
    correction: str = "holm",
    rounds: int = 10_000,
    test: str = "randomization",
    seed: int = 0,
    allow_mixed_data: bool = False,
) -> Comparison:
    """Tabulate results, datasets × systems, with published scores and significance (the `report` command).

    Args:
        results: `Result` objects, result files, or folders searched recursively.
        metric: The metric tabulated (at a cutoff: ``nDCG@10``, ``ndcg_cut_10``), or a list of metrics for one
            table of them all (`harness.reporting.tables`).
        split: The split reported; default each dataset's registry evaluation split.
        published: Add the published scores as columns, with deltas.
        published_systems: Published systems to add as columns (``bm25+ce``, ``splade-pp-ed``).
        published_from: MTEB results folders whose scores become columns.
        significance: Mark cells that differ significantly from this baseline system.
        alpha, correction, rounds: The significance level, ``holm``, ``bh``, ``bonferroni`` or ``none`` across
            datasets, randomization rounds and bootstrap resamples.
        test, seed: The paired test (``randomization``, ``t``, ``bootstrap``) and the seed of its draws.
        allow_mixed_data: Results computed on different data become rows of their own instead of an error.

    Returns:
        The `Comparison`; ``comparison.render("markdown" | "latex" | "csv" | "json")`` is the table. For a list
        of metrics the `harness.reporting.tables.MetricTable`: ``table.render(fmt, digits, by, layout)``, systems
        as rows and dataset × metric as columns (``layout="long"``: one row per system × dataset × metric).

    Raises:
        HarnessError: No results, an unknown metric, results of one dataset on different data.
    """
    from harness.reporting.comparison import build_comparison

    if not isinstance(metric, str):
        from harness.reporting.tables import build_table

        return build_table(
            results_of(results, allow_mixed_data),
            [result_metric(name) for name in metric],
            split=split,
            with_published=published,
            significance=significance,
            alpha=alpha,
            correction=correction,
            rounds=rounds,
            published_systems=list(published_systems),
            published_from=list(published_from),
            test=test,
            seed=seed,
        )
    return build_comparison(
        results_of(results, allow_mixed_data),
        result_metric(metric),
        split,
        published,
        significance,
        alpha,
        correction,
        rounds,
        list(published_systems),
        list(published_from),
        test,
        seed,
    )


def resolution(
    results: Iterable[Result | str | Path] | str | Path = ("results",),
    metric: str = "nDCG@10",
    *,
    split: str | None = None,
    test: str = "randomization",
    correction: str = "holm",
    alpha: float = 0.05,
    rounds: int = 10_000,
    seed: int = 0,
    allow_mixed_data: bool = False,
):
    """Which differences are real (``report --resolution``): every pair of systems tested on each dataset and on the
    mean over datasets, with adjusted p-values, letters and rank intervals (`harness.evaluation.resolution`).

    Args:
        results: `Result` objects, result files, or folders searched recursively.
        metric: The metric compared.
        split: The split; default each dataset's evaluation split.
        test: ``randomization`` (sign flipping), ``t`` (paired t-test) or ``bootstrap``.
        correction: ``holm``, ``bh`` (Benjamini–Hochberg), ``bonferroni`` or ``none``, across the pairs of a scope.
        alpha: The level at which an adjusted p makes a pair separable.
        rounds: Resamples of the randomization test and of the bootstrap (rank and difference intervals).
        seed: Seeds every draw (the same seed, the same figures).
        allow_mixed_data: Results of one dataset computed on different data become datasets of their own.

    Returns:
        A `harness.reporting.resolution.table.ResolutionTable`: ``resolutions`` (one `Resolution` per dataset, then
        the mean over datasets: each system's ``standing`` and each ``pair``), ``render(fmt, digits, layout)``.

    Raises:
        HarnessError: A bad setting (before any result is read), fewer than two systems on every dataset, two
            results of one dataset over different queries.
    """
    from harness.evaluation.resolution import Settings
    from harness.reporting.resolution.table import build_resolution

    settings = Settings(test, correction, alpha, rounds, seed)
    settings.check()
    return build_resolution(results_of(results, allow_mixed_data), result_metric(metric), split, settings)


def check_published(
    results: Iterable[Result | str | Path] | str | Path = ("results",),
    metric: str = "nDCG@10",
    *,
    tolerance: float | None = None,
    split: str | None = None,
    allow_mixed_data: bool = False,
) -> list:
    """Each result against the published score it should reproduce (``report --check-published``).

    Args:
        results: `Result` objects, result files, or folders searched recursively.
        metric: The metric compared.
        tolerance: Largest |ours - published| called OK; default the metric's (0.003 for nDCG@10).
        split: The split; default each dataset's evaluation split.
        allow_mixed_data: Results of one dataset computed on different data are read all the same.

    Returns:
        One `harness.reporting.reproduction.Check` per result: ours, published, difference, ``status``
        (OK, OFF, or none without a published counterpart).

    Raises:
        HarnessError: No results, or an unknown metric.
    """
    from harness.reporting.reproduction import check_published as run_checks

    return run_checks(results_of(results, allow_mixed_data), result_metric(metric), tolerance, split)


def compression(
    results: Iterable[Result | str | Path] | str | Path = ("results",),
    metric: str = "nDCG@10",
    *,
    split: str | None = None,
    allow_mixed_data: bool = False,
) -> list:
    """Quality against storage (``report --compression``): each dimension and precision of a model.

    Args:
        results: `Result` objects, result files, or folders searched recursively.
        metric: The metric set against bytes per document.
        split: The split; default each dataset's evaluation split.
        allow_mixed_data: Results of one dataset computed on different data are read all the same.

    Returns:
        One `harness.reporting.compression.CompressionRow` per result: bytes per document and the share of
        the float32 full-dimension score kept.

    Raises:
        HarnessError: No dense flat-index result that records its bytes per document, or the metric missing.
    """
    from harness.reporting.compression import compression_rows

    return compression_rows(results_of(results, allow_mixed_data), result_metric(metric), split)


def cost(
    results: Iterable[Result | str | Path] | str | Path = ("results",),
    metric: str = "nDCG@10",
    *,
    split: str | None = None,
    allow_mixed_data: bool = False,
) -> list:
    """Quality beside cost (``report --cost``): per result the metric and what the run cost.

    Args:
        results: `Result` objects, result files, or folders searched recursively.
        metric: The quality column.
        split: The split; default each dataset's evaluation split.
        allow_mixed_data: Results of one dataset computed on different data are read all the same.

    Returns:
        One `harness.reporting.cost.CostRow` per result: seconds per phase and which were cached, wall time,
        documents/s, search latency p50/p95/p99, peak RSS, index and cache bytes, an endpoint's tokens and price
        (None where the result recorded none: results written before cost records).

    Raises:
        HarnessError: No result of that split.
    """
    from harness.reporting.cost import cost_rows

    return cost_rows(results_of(results, allow_mixed_data), result_metric(metric), split)


def frontier(
    results: Iterable[Result | str | Path] | str | Path = ("results",),
    metric: str = "nDCG@10",
    *,
    cost_axis: str | None = None,
    within: str | None = None,
    split: str | None = None,
    allow_mixed_data: bool = False,
):
    """The quality–cost frontier (``report --frontier``): per dataset the results placed by quality against a cost
    they recorded, the Pareto-optimal ones marked, and with `within` the best inside a budget.

    Args:
        results: `Result` objects, result files, or folders searched recursively.
        metric: The quality.
        cost_axis: The cost (`harness.reporting.frontier.COSTS`: ``encode_s``, ``qps``, ``p50_ms``,
            ``bytes_per_doc``, ``index_bytes``, ``peak_rss``, ``prep_s``, ``wall_s``); default encode_s where
            half the results recorded it, else the cost recorded by the most results.
        within: A budget, ``"encode_s<=60,bytes_per_doc<=512"``: the best result whose costs all hold it.
        split: The split; default each dataset's evaluation split.
        allow_mixed_data: Results of one dataset computed on different data are read all the same.

    Returns:
        A `harness.reporting.frontier.Frontier`: its ``points`` (each with ``pareto``, ``missing`` for a result that
        did not record the cost, ``budget``), ``best()`` per frontier, ``render(fmt)``. Results of one dataset whose
        times were measured on different hosts get one frontier per host.

    Raises:
        HarnessError: A bad budget or an unknown cost (before any result is read), no result of the split, or no
            result that records the cost.
    """
    from harness.reporting.frontier import build_frontier, cost_key

    limits = parse_within(within) if within is not None else ()
    if cost_axis is not None:
        cost_key(cost_axis)
    return build_frontier(results_of(results, allow_mixed_data), result_metric(metric), cost_axis, limits, split)


def report_page(
    results: Iterable[Result | str | Path] | str | Path = ("results",),
    out: str | Path | None = None,
    *,
    allow_mixed_data: bool = False,
    **options: Any,
) -> str:
    """The self-contained HTML report page (``report --format html``): leaderboard, chart, drill-downs.

    Args:
        results: `Result` objects, result files, or folders searched recursively.
        out: Also write the page here (atomically).
        **options: Any `harness.reporting.page_data.PageOptions` field (``metric``, ``published``, ``baseline``,
            ``worst``, ``title``, ``digits``, ...).

    Returns:
        The page's HTML.

    Raises:
        HarnessError: No results, an unknown metric or option.
    """
    from harness.reporting.html import PageOptions, build_page, render_page

    known = {spec.name for spec in fields(PageOptions)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise HarnessError(f"unknown setting {setting(unknown[0])}; the page takes {', '.join(sorted(known))}")
    if "metric" in options:
        options["metric"] = result_metric(options["metric"])
    page = render_page(build_page(results_of(results, allow_mixed_data), PageOptions(**options)))
    if out is not None:
        write_text(page, Path(out))
    return page


def compare(
    first: Result | str | Path,
    second: Result | str | Path,
    metrics: Iterable[str] | None = None,
    rounds: int = 10_000,
    seed: int = 0,
) -> list:
    """Paired significance of `second` against `first`, per metric (the `compare` command).

    Args:
        first, second: Results (objects or result files) of one dataset, split and data.
        metrics: The metrics compared; default every metric both have.
        rounds, seed: The randomization test's rounds and seed.

    Returns:
        One `harness.evaluation.significance` test per metric: mean difference, t-test and randomization
        p-values, wins/ties/losses.

    Raises:
        HarnessError: Different datasets, splits, qrels or data.
    """
    from harness.reporting.inspect import compare_results
    from harness.reporting.report import check_same_data

    a, b = results_of(first)[0], results_of(second)[0]
    check_same_data([a, b])
    names = [result_metric(name) for name in metrics] if metrics is not None else None
    return compare_results(a, b, names or None, rounds, seed)


def fuse(
    results: Iterable[str | Path],
    method: str = "rrf",
    *,
    norm: str = "minmax",
    weights: Iterable[float] | str | None = None,
    rrf_k: int = 60,
    depth: int = 1000,
    name: str | None = None,
    output_dir: str | Path | None = None,
) -> Result:
    """Fuse the runs saved beside two or more results (hybrid search) and score the fused run (`fuse`).

    Args:
        results: Result files of one dataset and split, each with its run file beside it.
        method: ``rrf``, ``combsum``, ``combmnz``, ``wsum`` or ``dbsf``.
        norm: ``minmax``, ``zscore`` or ``none`` (combsum, combmnz, wsum).
        weights: With ``wsum``: one weight per result (``(0.3, 0.7)`` or ``"0.3:0.7"``).
        rrf_k: The k of RRF.
        depth: Documents kept per query.
        name: The fused result's label; default e.g. ``wsum(bm25, e5; 0.3:0.7)``.
        output_dir: Where the fused result is written (``<dataset>/fusion/...``); None writes nothing.

    Returns:
        The fused run's `Result`; ``path`` and ``run_path`` are the files written (``path`` None without
        `output_dir`).

    Raises:
        HarnessError: Results of different datasets or splits, a missing or altered run file, bad settings.
    """
    from harness.pipeline.fuse import fuse_results
    from harness.retrieval.fusion import FusionSpec

    if isinstance(weights, str):
        weights = parse_weights(weights)
    spec = FusionSpec(
        method=method, norm=norm, weights=tuple(weights) if weights is not None else None, rrf_k=rrf_k, depth=depth
    )
    return written_result(
        fuse_results([Path(p) for p in results], spec, Path(output_dir) if output_dir else None, name)
    )


def fuse_runs(
    runs: Iterable[str | Path],
    out: str | Path,
    method: str = "rrf",
    *,
    norm: str = "minmax",
    weights: Iterable[float] | str | None = None,
    rrf_k: int = 60,
    depth: int = 1000,
    name: str | None = None,
):
    """Fuse run files (TREC, MS MARCO, JSON) without qrels into one TREC run (``fuse RUN... --out``).

    Args:
        runs: Two or more run files; out: the fused TREC run written; method, norm, weights, rrf_k, depth,
            name: as for `fuse` (the name default: the fusion's label of the runs' tags, ``rrf(bm25, e5)``).

    Returns:
        A `harness.pipeline.fuse.FusedRun`: the fused run, its path, the runs' names; nothing scored.
    """
    from harness.pipeline.fuse import fuse_run_files
    from harness.retrieval.fusion import FusionSpec

    weights = parse_weights(weights) if isinstance(weights, str) else weights
    spec = FusionSpec(method, norm, tuple(weights) if weights is not None else None, rrf_k, depth)
    return fuse_run_files(list(runs), spec, out, name)


def export(
    results: Iterable[Result | str | Path] | str | Path,
    fmt: str,
    out: str | Path | None = None,
    *,
    metrics: Iterable[str] = (),
    split: str | None = None,
) -> list[Path] | str:
    """Export results for other tools (the `export` command).

    Args:
        results: `Result` objects, result files, or folders searched recursively.
        fmt: ``mteb`` (MTEB's results layout), ``csv`` (a row per dataset, system, split, query, metric) or
            ``trec`` (the run files, tagged with each result's label).
        out: The folder to write (mteb, trec), or the CSV file.
        metrics: With csv: only these metrics; default every one stored.
        split: Only results of this split; default each dataset's evaluation split.

    Returns:
        The files written; for csv without `out`, the CSV text.

    Raises:
        HarnessError: An unknown format, no `out` for a folder format, unreadable results.
    """
    from harness.io.outputs import check_output_dir, check_output_file
    from harness.reporting.comparison import results_of_split
    from harness.reporting.export import export_mteb, export_trec, per_query_csv

    if fmt not in ("mteb", "csv", "trec"):
        raise HarnessError(f"unknown export format {fmt!r}; use mteb, csv or trec")
    if out is not None:  # before any result is read
        (check_output_file if fmt == "csv" else check_output_dir)(out)
    chosen = results_of_split(results_of(results), split)
    if fmt == "csv":
        text = per_query_csv(chosen, [result_metric(name) for name in metrics])
        if out is None:
            return text
        write_text(text, Path(out))
        return [Path(out)]
    if out is None:
        raise HarnessError(f"format {fmt} writes a folder: give {setting('out')}")
    return (export_mteb if fmt == "mteb" else export_trec)(chosen, Path(out))


def inspect_results(
    results: Iterable[Result | str | Path] | str | Path, worst: int = 10, metric: str = "nDCG@10", depth: int = 5
) -> dict[str, Any]:
    """The worst queries of a result, or where two results differ most (the `inspect` command).

    Args:
        results: One result, or two of one dataset (objects or result files).
        worst: How many queries.
        metric: The metric queries are ranked by.
        depth: Retrieved documents shown per query.

    Returns:
        The queries with their texts, judged documents, ranks and top documents (what ``inspect --json`` prints).

    Raises:
        HarnessError: More than two results, results on different data, an unknown metric.
    """
    from harness.reporting.inspect import inspect_results as run_inspect
    from harness.reporting.report import check_same_data

    chosen = results_of(results)
    if len(chosen) > 2:
        raise HarnessError("give one result, or two to compare")
    return run_inspect(check_same_data(chosen), worst, result_metric(metric), depth)
