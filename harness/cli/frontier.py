"""`report --frontier`'s options and its view: quality against a cost the results recorded, the Pareto set marked,
the best result inside a budget (`harness.api.frontier`)."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from harness.api.choices import cost_axes
from harness.cli.group import as_flags
from harness.cli.optionkit import Option
from harness.errors import HarnessError

logger = logging.getLogger("harness")


def _within(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Refuse a bad budget before any result is read (the API reads it again)."""
    from harness.api.results import parse_within

    try:
        if value is not None:
            parse_within(value)
    except HarnessError as exc:
        raise click.UsageError(as_flags(str(exc))) from None
    return value


FRONTIER = Option(
    "--frontier",
    is_flag=True,
    help="Quality against cost: per dataset each result placed by the metric against a cost it recorded "
    "(--cost-axis), the Pareto-optimal ones marked; results measured on different hosts get a frontier each.",
)
COST_AXIS = Option(
    "--cost-axis",
    type=click.Choice(cost_axes()),
    default=None,
    help="With --frontier: the cost placed against the metric (encode_s: seconds per 1,000 documents; qps; "
    "p50_ms; bytes_per_doc; index_bytes; peak_rss; prep_s; wall_s) [default: encode_s where half the results "
    "recorded it, else the cost most recorded].",
)
WITHIN = Option(
    "--within",
    default=None,
    callback=_within,
    metavar="COST<=N,...",
    help="With --frontier: a budget, e.g. 'encode_s<=60,bytes_per_doc<=512' (<=, <, >=, >): the best result "
    "whose costs all hold it, per dataset.",
)


def check_frontier_options(frontier: bool, fmt: str, cost_axis: str | None, within: str | None) -> None:
    """Refuse --cost-axis or --within where no frontier is drawn (neither --frontier nor the HTML page)."""
    given = [flag for flag, value in (("--cost-axis", cost_axis), ("--within", within)) if value is not None]
    if given and not frontier and fmt != "html":
        raise click.UsageError(f"{given[0]} places results on the quality-cost frontier: add --frontier")


def report_frontier(paths, metric: str, fmt: str, digits: int, split, out: Path | None, plot: Path | None, **how):
    """`report --frontier`: the table (and with `plot` the PNG); `how`: cost_axis, within, allow_mixed_data."""
    from harness.api import frontier
    from harness.api.results import plot_frontier, write_text

    view = frontier(paths, metric, split=split, **how)
    text = view.render(fmt, digits)
    if out is not None:
        write_text(text, out)
        logger.info("wrote %s", out)
    else:
        click.echo(text)
    if plot is not None:
        plot_frontier(view, plot)
        logger.info("wrote %s", plot)
