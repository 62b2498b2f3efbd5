"""`report --resolution`'s options and its view: which systems the benchmark tells apart, per dataset and on the mean
over datasets (`harness.api.resolution`); `--test` and `--correction` serve `--significance` too."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from harness.api.choices import corrections, paired_tests
from harness.cli.optionkit import Option

logger = logging.getLogger("harness")

RESOLUTION = Option(
    "--resolution",
    is_flag=True,
    help="Which differences are real: every pair of systems tested on each dataset and on the mean over datasets, "
    "p-values adjusted across the pairs (--correction), each system's letters (systems sharing one are not "
    "separable at --alpha) and rank with its 95% bootstrap interval (docs/comparisons.md).",
)
TEST = Option(
    "--test",
    type=click.Choice(paired_tests()),
    default="randomization",
    show_default=True,
    help="The paired test over queries of --resolution and --significance.",
)
CORRECTION = Option(
    "--correction",
    type=click.Choice(corrections()),
    default="holm",
    show_default=True,
    help="Multiple-testing correction: across the pairs of a dataset (--resolution), across datasets "
    "(--significance); bh is Benjamini-Hochberg (false discovery rate).",
)


def report_resolution(paths, metric: str, fmt: str, digits: int, layout: str, out: Path | None, **how) -> None:
    """`report --resolution`: the table to `out` or stdout; `how`: split, test, correction, alpha, rounds, seed,
    allow_mixed_data."""
    from harness.api import resolution
    from harness.api.results import write_text

    text = resolution(paths, metric, **how).render(fmt, digits, layout)
    if out is not None:
        write_text(text, out)
        logger.info("wrote %s", out)
    else:
        click.echo(text)
