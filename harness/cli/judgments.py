"""Commands on judgments: merge annotators' grades into a split, and their agreement."""

from __future__ import annotations

from pathlib import Path

import click

from harness.cli.group import cli
from harness.cli.options import SPLIT, WEIGHTS, Option
from harness.judging.merge import POLICIES, TIES


def _scale(ctx, param, value: str) -> tuple[int, int]:
    from harness.api.commandline import parse_scale

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


@cli.group()
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
    type=click.Choice(POLICIES),
    default="majority",
    show_default=True,
    help="How disagreeing grades become one; strict refuses any disagreement.",
)
@click.option(
    "--ties",
    type=click.Choice(TIES),
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
