"""The quality–cost frontier (``report --frontier``): the costs a result is placed by, the Pareto set, a budget and
the table (`table`), and the frontier drawn: a PNG and the HTML page's section (`plot`)."""

from harness.reporting.frontier.plot import frontier_section, plot_frontier
from harness.reporting.frontier.table import (
    COSTS,
    UNRECORDED,
    CostKey,
    Frontier,
    Limit,
    Point,
    build_frontier,
    cost_key,
    pareto_flags,
    parse_within,
    render_frontier,
)

__all__ = [
    "COSTS",
    "UNRECORDED",
    "CostKey",
    "Frontier",
    "Limit",
    "Point",
    "build_frontier",
    "cost_key",
    "frontier_section",
    "pareto_flags",
    "parse_within",
    "plot_frontier",
    "render_frontier",
]
