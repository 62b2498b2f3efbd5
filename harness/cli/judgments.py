"""Commands on judgments: merge annotators' grades into a split, and their agreement."""

from __future__ import annotations

from pathlib import Path

import click

from harness.api.choices import merge_policies, merge_ties
from harness.cli.options import JSON, METRIC, POOL_DIR, ROUNDS, RUNS, SEED, SPLIT, TOP_K, WEIGHTS, Option


def _scale(ctx, param, value: str) -> tuple[int, int]:
    from harness.api.judging import parse_scale

    try:
        return parse_scale(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


# Options of both commands here, each declared once.
ANNOTATOR = Option("--annotator", default=None, metavar="NAME", help="Annotator of rows that name none (TREC qrels).")
SCALE = Option(
    "--scale",
    default="0-3",
    show_default=True,
    callback=_scale,
    metavar="LOW-HIGH",
    help="The grade scale; a grade off it, or a split on another scale, is refused.",
)


@click.group()
def judgments() -> None:
    """Merge judgments into a BEIR folder and measure how far annotators agree.

    Example:

    \b
        beir-harness judgments merge ./my-eval-set alice.csv bob.qrels
        beir-harness judgments agreement ./my-eval-set
    """


@judgments.command()
@click.argument("folder", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False))
@ANNOTATOR
@SPLIT.but(help="The qrels split to add to (created if absent).")
@click.option(
    "--resolve",
    "policy",
    type=click.Choice(merge_policies()),
    default="majority",
    show_default=True,
    help="How disagreeing grades become one; strict refuses any disagreement.",
)
@click.option(
    "--ties",
    type=click.Choice(merge_ties()),
    default="low",
    show_default=True,
    help="Where --resolve cannot decide (majority: a tie; mean: exactly halfway; with two annotators, "
    "every disagreement): the lower grade, the higher, or refuse.",
)
@SCALE
@WEIGHTS
def merge(
    folder: Path,
    files: tuple[Path, ...],
    annotator: str | None,
    split: str,
    policy: str,
    ties: str,
    scale: tuple[int, int],
    weights: str,
) -> None:
    """Add judgment files (CSV query_id,doc_id,grade[,annotator] or TREC qrels) to a split.

    Who judged what goes to qrels/SPLIT.annotations.jsonl; the qrels get one grade per pair, resolved by
    --resolve and --ties. A grade already in the split is one more vote (recorded as annotator qrels:SPLIT),
    so nothing judged changes silently: changed pairs are listed. How the qrels were made goes to
    qrels/SPLIT.provenance.json, and into every result scored on them. Unknown queries or documents, grades
    off the scale, an annotator grading a pair two ways, (strict) any disagreement, or (--ties refuse) one
    the policy cannot decide: exit 1, nothing written.

    Example:

    \b
        beir-harness judgments merge ./my-eval-set alice.csv bob.csv --resolve strict
        beir-harness judgments merge ./my-eval-set carol.qrels --annotator carol --split dev
    """
    from harness.api import merge_judgments

    report = merge_judgments(
        folder, files, split, annotator=annotator, resolve=policy, scale=scale, weights=weights, ties=ties
    )
    click.echo(report.format_text())


@judgments.command("agreement")
@click.argument("sources", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True))
@SPLIT.but(help="A folder's split whose annotations are read.")
@ANNOTATOR
@SCALE.but(help="The grade scale (κ's distances and the confusion counts' rows).")
@WEIGHTS
@click.option(
    "--level",
    type=click.Choice(["ordinal", "interval", "nominal"]),
    default="ordinal",
    show_default=True,
    help="Krippendorff's α level of measurement.",
)
def agreement_command(
    sources: tuple[Path, ...], split: str, annotator: str | None, scale: tuple[int, int], weights: str, level: str
) -> None:
    """Agreement of annotators on the pairs they both graded: κ per pair, α overall, confusion counts.

    SOURCES are BEIR folders (their qrels/SPLIT.annotations.jsonl) or judgment files.

    Example:

    \b
        beir-harness judgments agreement ./my-eval-set
        beir-harness judgments agreement alice.csv bob.csv --weights quadratic
    """
    from harness.api import agreement

    measured = agreement(sources, split, annotator=annotator, scale=scale, weights=weights, level=level)
    click.echo(measured.format_text(confusion=True))


_QRELS = click.Path(path_type=Path, exists=True)


@judgments.command("rankings")
@click.argument("qrels_a", metavar="QRELS_A", type=_QRELS)
@click.argument("qrels_b", metavar="QRELS_B", type=_QRELS)
@RUNS.but(help="A system's run (TREC, MS MARCO, JSON) or result file, named by its tag. Repeatable.")
@POOL_DIR.but(
    help="Take the systems of this pool too (its runs/, named as its manifest names them).",
)
@METRIC.but(help="The metric the systems are ranked by.")
@SPLIT.but(help="A BEIR folder's qrels split.")
@TOP_K.but(default=3, show_default=True, help="The k of the top-k overlap.")
@ROUNDS.but(default=1000, help="Bootstrap resamples of the queries.")
@SEED.but(help="Seeds the bootstrap.")
@JSON.but(help="Print the figures as JSON.")
def rankings_command(
    qrels_a: Path,
    qrels_b: Path,
    run_files: tuple[Path, ...],
    pool_dir: Path | None,
    metric: str,
    split: str,
    top_k: int,
    rounds: int,
    seed: int,
    as_json: bool,
) -> None:
    """Do two qrels rank the systems the same way? Kendall's τ, τ_ap and the top-k overlap, with intervals.

    QRELS_A is the reference (the human qrels), QRELS_B the other (the LLM's): qrels files, BEIR folders (their
    --split) or judgments CSVs; the systems are --runs files and/or a --pool's runs (two or more in all). Each
    run is scored under both over the queries both judge; τ ≥ 0.9 is the usual
    bar for "the same ranking" (Voorhees 2000). Intervals: bootstrap over the queries, seeded.

    Example:

    \b
        beir-harness judgments rankings ./my-eval-set pool/judgments-llm_gpt-4o-mini.csv --pool pool/
        beir-harness judgments rankings human.qrels llm.qrels --runs bm25.trec --runs minilm.trec
    """
    import json

    from harness.api import rankings

    measured = rankings(
        qrels_a, qrels_b, run_files, pool=pool_dir, metric=metric, split=split, top_k=top_k, rounds=rounds, seed=seed
    )
    click.echo(json.dumps(measured.to_json(), indent=2) if as_json else measured.format_text())


def _groups(ctx, param, value: tuple[str, ...]) -> dict[str, str]:
    groups = {}
    for item in value:
        system, sep, group = item.rpartition("=")
        if not sep or not system.strip() or not group.strip():
            raise click.BadParameter(f"{item!r}: write SYSTEM=GROUP (a pool system's name, its group)")
        groups[system.strip()] = group.strip()
    return groups


@judgments.command("reusability")
@click.argument("pool_dir", metavar="POOL_DIR", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.argument("qrels", metavar="QRELS", type=_QRELS)
@METRIC.but(help="The metric scored.")
@SPLIT.but(help="A BEIR folder's qrels split.")
@click.option(
    "--group",
    "groups",
    multiple=True,
    callback=_groups,
    metavar="SYSTEM=GROUP",
    help="A pool system's group (a team's runs): leave one group out instead. Repeatable.",
)
@RUNS.but(
    help="Runs that did not contribute to the pool: scored with a warning, Judged@k beside. Repeatable.",
)
@JSON.but(help="Print the table as JSON.")
def reusability_command(
    pool_dir: Path,
    qrels: Path,
    metric: str,
    split: str,
    groups: dict[str, str],
    run_files: tuple[Path, ...],
    as_json: bool,
) -> None:
    """Is the pool reusable? Each pool system scored with the pairs only it contributed treated as unjudged.

    POOL_DIR is the pool (`beir-harness pool --out`); QRELS the qrels its judgments made (a qrels file, a BEIR
    folder's --split, or a judgments CSV). The table gives each system's score and rank on the full qrels and
    left out (Zobel 1998), and the change; --runs adds runs the pool never saw, with a warning, their
    Judged@k and their unjudged top-k documents.

    Example:

    \b
        beir-harness judgments reusability pool/ ./my-eval-set --runs new-model.trec
        beir-harness judgments reusability pool/ ./my-eval-set --group bm25=lexical --group rm3=lexical
    """
    import json

    from harness.api import reusability

    table = reusability(pool_dir, qrels, metric=metric, split=split, groups=groups or None, runs=run_files)
    click.echo(json.dumps(table.to_json(), indent=2) if as_json else table.format_text())
