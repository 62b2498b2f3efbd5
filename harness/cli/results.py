"""Commands on saved results: report, export, fuse, compare, inspect."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import click

from harness.api.choices import fusion_methods, fusion_norms, table_formats, table_layouts
from harness.cli.frontier import COST_AXIS, FRONTIER, WITHIN, check_frontier_options, report_frontier
from harness.cli.options import (
    DEPTH,
    DIGITS,
    JSON,
    METRIC,
    NAME,
    OUT,
    OUTPUT_DIR,
    POOL_DIR,
    ROUNDS,
    SEED,
    SPLIT,
    TOLERANCE,
    WEIGHTS,
    Option,
    metric_callback,
    show_result,
)
from harness.cli.views.resolution import CORRECTION, RESOLUTION, TEST, report_resolution
from harness.errors import HarnessError

logger = logging.getLogger("harness")

# Options of several commands here, each declared once.
FORMAT = Option(
    "--format",
    "fmt",
    type=click.Choice(table_formats()),
    default="markdown",
    show_default=True,
    help="Output format (csv and json are unrounded; html: one self-contained page "
    "with a sortable leaderboard, chart, drill-downs and provenance).",
)
ALPHA = Option(
    "--alpha",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=0.05,
    show_default=True,
    help="Significance level.",
)
WORST = Option("--worst", type=click.IntRange(min=1), default=10, show_default=True, help="How many queries.")


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@METRIC.but(
    "metrics",
    multiple=True,
    default=("nDCG@10",),
    callback=lambda ctx, param, values: tuple(metric_callback(ctx, param, value) for value in values),
    help="The metric tabulated; repeat it for one table of several (systems as rows, dataset × metric as columns).",
)
@click.option(
    "--layout",
    type=click.Choice(table_layouts()),
    default="wide",
    show_default=True,
    help="wide: a column per dataset (and metric); long: one row per system × dataset × metric, tidy.",
)
@FORMAT
@OUT
@click.option(
    "--by",
    type=click.Choice(["dataset", "model"]),
    default=None,
    help="Rows are datasets (columns models), or the transpose [default: dataset; with several metrics or "
    "--layout long: model, systems as rows].",
)
@DIGITS
@SPLIT.but(default=None, show_default=False, help="Split to report [default: each dataset's registry eval split].")
@click.option(
    "--published",
    "with_published",
    is_flag=True,
    help="Add the published scores as columns, with deltas for models that have one.",
)
@click.option(
    "--published-systems",
    callback=lambda ctx, param, value: [v.strip() for v in value.split(",") if v.strip()] if value else [],
    default=None,
    metavar="NAME,...",
    help="More published columns: systems (bm25+ce, splade-pp-ed, BAAI/bge-base-en-v1.5) or column "
    "headings ('bm25 · BEIR paper'); implies --published.",
)
@click.option(
    "--published-from",
    multiple=True,
    type=click.Path(path_type=Path, file_okay=False),
    metavar="DIR",
    help="An MTEB results folder (MTEB's results repository, or an `export --format mteb`); its models "
    "become published columns. Repeatable.",
)
@click.option(
    "--check-published",
    is_flag=True,
    help="Reproduction check: OK/OFF per result against the published row it should reproduce; exit 1 "
    "if any is off, 2 if nothing could be compared.",
)
@TOLERANCE.but(
    type=click.FloatRange(min=0),
    default=None,
    show_default=False,
    help="Largest |ours - published| that --check-published calls OK [default: 0.003 for nDCG@10, MAP@100 "
    "and MRR@10; 0.005 for Recall@100].",
)
@click.option(
    "--significance",
    "baseline",
    default=None,
    metavar="MODEL",
    help="Mark (†) cells that differ significantly from this baseline model.",
)
@RESOLUTION
@TEST
@ALPHA
@CORRECTION
@ROUNDS.but(help="Rounds of the randomization test and resamples of the bootstrap.")
@SEED.but(help="Seeds the randomization test and the bootstrap.")
@click.option(
    "--plot",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Also write a grouped bar chart (PNG) with 95% bootstrap confidence intervals (with --compression: "
    "the metric against bytes per document, one line per precision; with --frontier: the metric against the cost, "
    "the Pareto set joined).",
)
@WORST.but(default=20, help="With --format html: the worst queries per system and dataset in the drill-downs.")
@click.option(
    "--compression",
    is_flag=True,
    help="Quality against storage: each dimension and precision of a model with its bytes per document and "
    "the % of its float32 full-dimension score retained.",
)
@click.option(
    "--cost",
    "with_cost",
    is_flag=True,
    help="Quality beside cost: per result the metric, seconds per phase (or 'cached'), wall time, docs/s, "
    "search latency p50/p95/p99, peak RSS, index and cache size, an endpoint's tokens and price.",
)
@FRONTIER
@COST_AXIS
@WITHIN
@click.option(
    "--allow-mixed-data",
    is_flag=True,
    help="Results of one dataset computed on different data (changed corpus, queries or qrels) become rows "
    "of their own, 'scifact [data 1a2b3c4d]', instead of an error.",
)
@POOL_DIR.but(
    help="After the table: each result against the pool its qrels came from: Judged@k and the unjudged "
    "documents of its top k (k the pool's depth), and a warning for a system the pool was built without.",
)
def report(
    paths: tuple[Path, ...],
    metrics: tuple[str, ...],
    layout: str,
    fmt: str,
    out: Path | None,
    by: str | None,
    digits: int,
    split: str | None,
    with_published: bool,
    published_systems: list[str],
    published_from: tuple[Path, ...],
    check_published: bool,
    tolerance: float | None,
    baseline: str | None,
    resolution: bool,
    test: str,
    alpha: float,
    correction: str,
    rounds: int,
    seed: int,
    plot: Path | None,
    worst: int,
    compression: bool,
    with_cost: bool,
    frontier: bool,
    cost_axis: str | None,
    within: str | None,
    allow_mixed_data: bool,
    pool_dir: Path | None,
) -> None:
    """Tabulate results (models × datasets) for papers, with published scores and significance.

    PATHS are result files or folders searched recursively (default: results/). Reads result
    JSON files only: no model or corpus is needed. CQADupStack is the mean of its 12 forums.

    Example:

    \b
        beir-harness report
        beir-harness report results/ --metric Recall@100 --format latex --out table.tex
        beir-harness report --metric nDCG@10 --metric Recall@100 --metric MRR@10 --format csv
        beir-harness report --metric nDCG@10 --metric Recall@100 --layout long --format csv
        beir-harness report --published
        beir-harness report --published-systems bm25+ce,splade-pp-ed
        beir-harness report --published-from ../mteb-results/results
        beir-harness report --check-published
        beir-harness report --significance bm25 --plot comparison.png
        beir-harness report --resolution --format latex --out resolution.tex
        beir-harness report --resolution --test t --correction bh --format csv --layout long
        beir-harness report --compression --plot compression.png
        beir-harness report --cost --format latex --out cost.tex
        beir-harness report --frontier --cost-axis bytes_per_doc --within "encode_s<=60" --plot frontier.png
        beir-harness report results/ --format html --out results.html --published --significance bm25
        beir-harness report results/ --pool pool/
    """
    paths = paths or (Path("results"),)
    check_frontier_options(frontier, fmt, cost_axis, within)
    one_metric_only(
        metrics,
        compression=compression,
        cost=with_cost,
        frontier=frontier,
        resolution=resolution,
        check_published=check_published,
    )
    metric = metrics[0]
    several = len(metrics) > 1 or layout == "long"  # one table of them all; one metric, wide: today's table
    table = {"metrics": metrics, "layout": layout} if several else {}
    if fmt == "html":
        _report_page(
            paths,
            out,
            metric,
            split,
            with_published or bool(published_systems),
            baseline,
            allow_mixed_data,
            {"alpha": alpha, "correction": correction, "rounds": rounds, "worst": worst, "digits": digits, **table}
            | {"resolution": resolution, "test": test, "seed": seed}
            | {"cost_axis": cost_axis, "within": within},
        )
    elif compression:
        _report_compression(paths, metric, fmt, digits, split, out, plot, allow_mixed_data)
    elif with_cost:
        _report_cost(paths, metric, fmt, digits, split, out, allow_mixed_data)
    elif resolution:
        how = {"split": split, "test": test, "correction": correction, "alpha": alpha, "rounds": rounds, "seed": seed}
        report_resolution(paths, metric, fmt, digits, layout, out, allow_mixed_data=allow_mixed_data, **how)
    elif frontier:
        how = {"cost_axis": cost_axis, "within": within, "allow_mixed_data": allow_mixed_data}
        report_frontier(paths, metric, fmt, digits, split, out, plot, **how)
    elif check_published:
        _check_published(paths, metric, tolerance, split, digits, allow_mixed_data)
    else:
        _report_table(
            paths,
            list(metrics) if several else metric,
            {"fmt": fmt, "digits": digits, "by": by, "out": out, "plot": plot, "layout": layout if several else None},
            split=split,
            published=with_published,
            published_systems=published_systems,
            published_from=published_from,
            significance=baseline,
            alpha=alpha,
            correction=correction,
            rounds=rounds,
            test=test,
            seed=seed,
            allow_mixed_data=allow_mixed_data,
        )
        if pool_dir is not None:
            _report_pool_check(paths, pool_dir, allow_mixed_data)


def _report_table(paths, metric: str | list[str], shown: dict, **settings) -> None:
    """`report`'s table (and its plot): datasets × systems; several metrics (or the long layout): one table of
    them all, systems as rows, its plot of the first metric."""
    from harness.api import report as build_report
    from harness.api.results import plot_comparison

    comparison = build_report(paths, metric, **settings)
    if shown["layout"] is not None:
        first = comparison.comparisons[metric[0]]
        text = comparison.render(shown["fmt"], shown["digits"], shown["by"] or "model", shown["layout"])
        _emit(text, shown["out"], shown["plot"], lambda: plot_comparison(first, shown["plot"]))
        return
    text = comparison.render(shown["fmt"], shown["digits"], shown["by"] or "dataset")
    _emit(text, shown["out"], shown["plot"], lambda: plot_comparison(comparison, shown["plot"]))


def _report_pool_check(paths, pool_dir: Path, allow_mixed_data: bool) -> None:
    """`report --pool`: after the table, each result against the pool its qrels came from."""
    from harness.api import pool_check, read_results

    click.echo(f"against the pool {pool_dir}:")
    for check in pool_check(read_results(paths, allow_mixed_data), pool_dir):
        click.echo(check.format_text())


def one_metric_only(metrics: tuple[str, ...], **modes: bool) -> None:
    """Refuse several --metric values where a mode tabulates one, before any result is read."""
    chosen = [name for name, on in modes.items() if on]
    if len(metrics) > 1 and chosen:
        flag = "--" + chosen[0].replace("_", "-")
        raise click.UsageError(
            f"{flag} tabulates one metric, and {len(metrics)} were given ({', '.join(metrics)}); "
            f"give one --metric with {flag}"
        )


def _check_published(paths, metric: str, tolerance, split, digits: int, allow_mixed_data: bool) -> None:
    """`report --check-published`: OK/OFF per result; exit 1 if any is off, 2 if nothing could be compared."""
    from harness.api import check_published
    from harness.api.results import check_exit_code, format_checks

    checks = check_published(paths, metric, tolerance=tolerance, split=split, allow_mixed_data=allow_mixed_data)
    click.echo(format_checks(checks, metric, digits))
    code = check_exit_code(checks)
    if code:
        sys.exit(code)


def _report_cost(paths, metric: str, fmt: str, digits: int, split, out, allow_mixed_data: bool) -> None:
    from harness.api import cost
    from harness.api.results import render_cost

    rows = cost(paths, metric, split=split, allow_mixed_data=allow_mixed_data)
    _emit(render_cost(rows, metric, fmt, digits), out, None, None)


def _emit(text: str, out: Path | None, plot: Path | None, draw) -> None:
    """A table to `out` (atomically) or stdout, then the plot when one was asked for."""
    from harness.api.results import write_text

    if out is not None:
        write_text(text, out)
        logger.info("wrote %s", out)
    else:
        click.echo(text)
    if plot is not None:
        draw()
        logger.info("wrote %s", plot)


def _report_page(
    paths, out: Path | None, metric: str, split: str | None, with_published: bool, baseline, allow_mixed_data, shown
) -> None:
    from harness.api import report_page

    page = report_page(
        paths,
        out,
        allow_mixed_data=allow_mixed_data,
        metric=metric,
        split=split,
        published=with_published,
        baseline=baseline,
        **shown,
    )
    if out is None:
        click.echo(page)
        return
    from harness.presentation import size_text

    logger.info("wrote %s (%s)", out, size_text(len(page.encode("utf-8"))))


def _report_compression(
    paths, metric: str, fmt: str, digits: int, split: str | None, out: Path | None, plot: Path | None, allow_mixed_data
) -> None:
    from harness.api import compression
    from harness.api.results import plot_compression, render_compression

    rows = compression(paths, metric, split=split, allow_mixed_data=allow_mixed_data)
    _emit(render_compression(rows, metric, fmt, digits), out, plot, lambda: plot_compression(rows, plot, metric))


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@FORMAT.but(
    type=click.Choice(["mteb", "csv", "trec"]),
    default=None,
    show_default=False,
    required=True,
    help="mteb: MTEB's results layout; csv: one row per dataset, system, split, query and metric; trec: "
    "the run files, tagged with each result's label.",
)
@OUT.but(
    type=click.Path(path_type=Path), help="The folder to write (mteb, trec), or the CSV file [default for csv: stdout]."
)
@METRIC.but(
    "metrics",
    multiple=True,
    default=None,
    show_default=False,
    callback=lambda ctx, param, value: [metric_callback(ctx, param, v) for v in value],
    help="With --format csv: only this metric (repeatable) [default: every one stored].",
)
@SPLIT.but(default=None, show_default=False, help="Only results of this split [default: each dataset's eval split].")
def export(paths: tuple[Path, ...], fmt: str, out: Path | None, metrics: list[str], split: str | None) -> None:
    """Export results for other tools: MTEB's results layout, per-query CSV, or TREC runs.

    PATHS are result files or folders searched recursively (default: results/). The MTEB layout is
    `<out>/<org>__<model>/<revision>/<Task>.json` with `model_meta.json`, readable by MTEB's own loader;
    the CSV is the input of a significance analysis in R or pandas.

    Example:

    \b
        beir-harness export results/ --format mteb --out mteb-results
        beir-harness export results/ --format csv --out per-query.csv
        beir-harness export results/scifact --format trec --out runs/
    """
    from harness.api import export as run_export

    if fmt != "csv" and out is None:
        raise click.UsageError(f"--format {fmt} writes a folder: give --out DIR")
    written = run_export(paths or (Path("results"),), fmt, out, metrics=metrics, split=split)
    if isinstance(written, str):
        click.echo(written, nl=False)
    elif fmt == "csv":
        logger.info("wrote %s", out)
    else:
        for path in written:
            click.echo(str(path))


def _weights(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[float, ...] | None:
    from harness.api.results import parse_weights

    try:
        return None if value is None else parse_weights(value)
    except HarnessError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command()
@click.argument("results", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--method",
    type=click.Choice(fusion_methods()),
    default="rrf",
    show_default=True,
    help="Fusion method.",
)
@click.option(
    "--norm",
    type=click.Choice(fusion_norms()),
    default="minmax",
    show_default=True,
    help="Per-query score normalization for combsum, combmnz and wsum.",
)
@WEIGHTS.but(
    type=None,
    callback=_weights,
    default=None,
    show_default=False,
    metavar="W1:W2:...",
    help="With --method wsum: one weight per result, as in bench's weights=0.3:0.7 (0.3,0.7 is read "
    "too) [default: equal].",
)
@click.option("--rrf-k", type=click.IntRange(min=0), default=60, show_default=True, help="The k of RRF.")
@DEPTH.but(default=1000, help="Documents kept per query in the fused run.")
@NAME.but(help="Label of the fused result [default: method(labels; settings), e.g. wsum(bm25, e5; 0.3:0.7)].")
@OUTPUT_DIR.but(help="Where the fused result goes: <output-dir>/<dataset>/fusion/<split>.<variant>.json.")
@OUT.but(
    "out_run",
    metavar="FILE",
    help="Fuse run files instead (TREC, MS MARCO or JSON runs; no qrels needed): the fused TREC run "
    "goes to FILE, and nothing is scored.",
)
@JSON.but(help="Print the fused result JSON instead of the table.")
def fuse(
    results: tuple[Path, ...],
    method: str,
    norm: str,
    weights: tuple[float, ...] | None,
    rrf_k: int,
    depth: int,
    name: str | None,
    output_dir: Path,
    out_run: Path | None,
    as_json: bool,
) -> None:
    """Fuse the runs of two or more results (hybrid search) and score the fused run; or, with --out, fuse
    run files (no qrels needed) into one run.

    RESULTS are result files of one dataset and split (the same qrels); the run file saved beside
    each is fused — RRF = sum of 1/(k + rank); combsum, combmnz and wsum over min-max or z-score
    normalized scores; dbsf over scores clipped to mean ± 3 sigma — and the fused run is scored and
    written like any other result. With --out FILE, RESULTS are run files instead (TREC, MS MARCO or
    JSON; a team with runs and no judgments yet): the fused run, tagged with the fusion's label, goes to
    FILE, and nothing is scored.

    Example:

    \b
        beir-harness fuse results/scifact/bm25/test.json results/scifact/sentence-transformers__all-MiniLM-L6-v2/test.json
        beir-harness fuse a.json b.json --method wsum --weights 0.3:0.7 --norm zscore
        beir-harness fuse bm25.trec e5.trec --out hybrid.trec
    """
    if out_run is not None:
        from harness.api import fuse_runs

        if as_json:
            raise click.UsageError("--json prints a scored result; with --out nothing is scored")
        click.echo(
            fuse_runs(
                results, out_run, method, norm=norm, weights=weights, rrf_k=rrf_k, depth=depth, name=name
            ).format_text()
        )
        return
    from harness.api import fuse as run_fuse

    fused = run_fuse(
        results, method, norm=norm, weights=weights, rrf_k=rrf_k, depth=depth, name=name, output_dir=output_dir
    )
    show_result(fused, as_json)


@click.command()
@click.argument("first", type=click.Path(path_type=Path, dir_okay=False))
@click.argument("second", type=click.Path(path_type=Path, dir_okay=False))
@METRIC.but(
    "metrics",
    multiple=True,
    default=None,
    show_default=False,
    callback=lambda ctx, p, v: [metric_callback(ctx, p, m) for m in v],
    help="Metric to compare (repeatable) [default: every metric both results have].",
)
@ROUNDS
@SEED
@ALPHA.but(help="Significance level for the * mark.")
@JSON.but(help="Print the tests as JSON.")
def compare(first: Path, second: Path, metrics: list[str], rounds: int, seed: int, alpha: float, as_json: bool) -> None:
    """Paired significance of SECOND against FIRST, per metric.

    Per-query differences on the same judged queries; paired t-test (scipy) and paired
    randomization test (sign flipping, fixed seed); mean difference and wins/ties/losses.

    Example:

    \b
        beir-harness compare results/scifact/bm25/test.json results/scifact/sentence-transformers__all-MiniLM-L6-v2/test.json
        beir-harness compare a.json b.json --metric nDCG@10 --rounds 100000
    """
    from dataclasses import asdict

    from harness.api import compare as run_compare
    from harness.api import read_results
    from harness.api.results import format_compare

    (a,), (b,) = read_results(first), read_results(second)
    tests = run_compare(a, b, metrics or None, rounds, seed)
    if as_json:
        click.echo(json.dumps([{**asdict(t), "difference": t.difference} for t in tests], indent=2))
    else:
        click.echo(format_compare(a, b, tests, alpha))


@click.command()
@click.argument("results", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False))
@WORST
@METRIC
@DEPTH
@JSON.but(help="Print the queries, judgments, ranks and top documents as JSON.")
def inspect(results: tuple[Path, ...], worst: int, metric: str, depth: int, as_json: bool) -> None:
    """Show the worst queries of a result, or where two results differ most.

    Each query comes with its text, its judged documents with their grades and the rank at which
    each result retrieved them (or "not retrieved"), and the top retrieved documents with score,
    grade and title (read from the dataset folder the result records). A line says how many queries
    tie at the worst value (or the largest difference).

    Example:

    \b
        beir-harness inspect results/scifact/bm25/test.json --worst 10
        beir-harness inspect a/test.json b/test.json --metric Recall@100
        beir-harness inspect results/scifact/bm25/test.json --json > worst.json
    """
    from harness.api import inspect_results, read_results
    from harness.api.results import format_inspect

    if len(results) > 2:
        raise click.UsageError("give one result, or two to compare")
    data = inspect_results([read_results(r)[0] for r in results], worst, metric, depth)
    click.echo(json.dumps(data, indent=2, ensure_ascii=False) if as_json else format_inspect(data))
