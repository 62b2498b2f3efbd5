"""The score command: a run file against a qrels file, as trec_eval and ir_measures take them."""

from __future__ import annotations

import json
from pathlib import Path

import click

from harness.cli.options import DIGITS, JSON, METRIC
from harness.errors import HarnessError

DEFAULT_SCORE_METRICS = ("nDCG@10", "MAP", "MRR", "Recall@100", "P@10", "R-Prec")


def metrics_callback(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """The -m metric names, checked, in their canonical spelling; the defaults when none is given."""
    from harness.api.scoring import parse_metric

    try:
        return tuple(dict.fromkeys(str(parse_metric(name)) for name in value or DEFAULT_SCORE_METRICS))
    except HarnessError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command()
@click.argument("qrels", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.argument("run", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@METRIC.but(
    "-m",
    "metrics",
    multiple=True,
    default=None,
    show_default=False,
    metavar="METRIC",
    callback=metrics_callback,
    help="A metric, in any tool's spelling (nDCG@10, ndcg_cut_10, map, recip_rank, AP, RR@10, Rprec, "
    "Judged@10); repeatable [default: " + ", ".join(DEFAULT_SCORE_METRICS) + "]. nDCG, MAP and MRR "
    "without a cutoff read the whole run, as trec_eval's ndcg, map and recip_rank do.",
)
@click.option(
    "--per-query",
    is_flag=True,
    help="Each query's values before the means, as trec_eval -q prints them (here -q is the global --quiet, as in "
    "every command).",
)
@click.option(
    "--judged-only",
    is_flag=True,
    help="Count only the judged queries the run has results for (trec_eval without -c) [default: every "
    "judged query counts, one missing from the run scores 0, as trec_eval -c].",
)
@JSON.but(help="Print the scores as JSON (unrounded).")
@DIGITS.but(type=click.IntRange(0, 17), help="Decimals printed (trec_eval prints 4).")
def score(
    qrels: Path, run: Path, metrics: tuple[str, ...], per_query: bool, judged_only: bool, as_json: bool, digits: int
) -> None:
    """Score a run file against a qrels file, the trec_eval way: QRELS RUN.

    QRELS is TREC qrels (query_id 0 doc_id grade), a BEIR qrels TSV (with its header) or JSON
    ({query_id: {doc_id: grade}}), told apart by content; RUN is a TREC run (words after the tag
    ignored, as trec_eval ignores them), an MS MARCO run or a JSON run. No dataset folder is needed.
    Lines are `metric<TAB>query<TAB>value`, the means under 'all'; lines starting with # say what was
    counted.

    Example:

    \b
        beir-harness score qrels.test results.test
        beir-harness score qrels.test results.test -m map -m ndcg -m P@10 --per-query
        beir-harness score qrels/test.tsv run.trec -m nDCG@10 --judged-only --json
    """
    from harness.api import read_qrels, read_run
    from harness.api import score as score_run
    from harness.api.scoring import qrels_format

    ranked = read_run(run)
    evaluation = score_run(qrels, ranked, metrics, judged_only)  # the qrels by path: an error names the file
    judgments = read_qrels(qrels)  # again, for the counts: small next to the run, and read in milliseconds
    counted = _counted(evaluation, len(judgments), judged_only)
    depth = _depth_note(evaluation, metrics)
    if as_json:
        document = {
            "qrels": str(qrels),
            "qrels_format": qrels_format(qrels),
            "run": str(run),
            "run_format": ranked.metadata.get("format"),
            "run_name": ranked.name,
            "queries": counted,
            "judged_only": judged_only,
            "n_queries": evaluation.n_queries,
            "n_missing": evaluation.n_missing,
            "n_unjudged": evaluation.n_unjudged,
            "depth": evaluation.depth,
            "metrics": list(metrics),
            "means": evaluation.means,
        }
        if per_query:
            document["per_query"] = evaluation.per_query
        click.echo(json.dumps(document, indent=2, ensure_ascii=False))
        return
    kinds = {"beir": "BEIR", "trec": "TREC", "json": "JSON", "msmarco": "MS MARCO"}
    click.echo(
        f"# qrels {qrels} ({kinds[qrels_format(qrels)]} qrels: {len(judgments)} queries, "
        f"{judgments.n_judgments} judgments); run {run} ({kinds[ranked.metadata['format']]} run "
        f"{ranked.name!r}: {len(ranked)} queries)"
    )
    click.echo(f"# queries: {counted}")
    if depth:
        click.echo(f"# {depth}")
    rows = (
        [(query_id, evaluation.per_query[query_id]) for query_id in sorted(evaluation.per_query)] if per_query else []
    )
    for query_id, values in [*rows, ("all", evaluation.means)]:
        for name in metrics:
            click.echo(f"{name:<22}\t{query_id}\t{values[name]:.{digits}f}")


def _counted(evaluation, n_judged: int, judged_only: bool) -> str:
    """Which queries the means are over, in words, with trec_eval's flag for the same choice."""
    if judged_only:
        left_out = n_judged - evaluation.n_queries
        return (
            f"{evaluation.n_queries} of {n_judged} judged queries, those the run has results for (--judged-only, "
            f"as trec_eval without -c); {left_out} judged without results left out"
        )
    return (
        f"every judged query, {evaluation.n_queries} (as trec_eval -c); {evaluation.n_missing} without results "
        f"in the run score 0; {evaluation.n_unjudged} run queries nobody judged are ignored"
    )


def _depth_note(evaluation, metrics: tuple[str, ...]) -> str:
    """For nDCG, MAP, MRR without a cutoff: the depth they read, the deepest ranked list of a counted query."""
    from harness.api.scoring import metric_families, parse_metric

    specs = [parse_metric(name) for name in metrics]
    whole = [metric_families()[spec.name] for spec in specs if not spec.k and metric_families()[spec.name].cutoff]
    if not whole or evaluation.depth is None:
        return ""
    return (
        f"{', '.join(family.name for family in whole)}: no cutoff, over the whole run as retrieved, up to "
        f"{evaluation.depth} documents a query (as trec_eval's {', '.join(family.uncut for family in whole)})"
    )
