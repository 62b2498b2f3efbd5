"""The quality–cost frontier (``report --frontier``): each result of a dataset placed by its quality (any metric)
against one cost its record carries, the Pareto-optimal ones marked, and the best result inside a budget.

The costs are read from what each result recorded (docs/outputs.md defines every field); `COSTS` names them
once: where each is read, its unit, and whether less or more is better. A result that did not record the cost
on the frontier's axis (an encode read from the cache has no encoding speed) is listed as *no cost recorded*,
never placed.

**Pareto-optimal**: no other result of the same frontier has at least its quality at no more cost and is better
in one of the two. Ties are explicit: two results with the same quality and the same cost do not dominate each
other (both are marked); of two with the same cost, the lower quality is dominated, and of two with the same
quality, the costlier.

**Hosts**: times, throughput and memory are measured on a machine (`CostKey.per_host`); results of one dataset
measured on different machines (their ``host`` record, as `harness.reporting.cost.host_text` names it) get one
frontier per host, each named by its host, never one frontier between them. Sizes (bytes per document, index
bytes) do not depend on the machine: their frontier spans every host, and a note says it does.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from harness.errors import HarnessError, setting
from harness.presentation import csv_text, json_text, latex_table, markdown_table, metric_text, size_text
from harness.reporting.comparison import dataset_order, results_of_split
from harness.reporting.cost import host_text
from harness.reporting.labels import column_labels
from harness.reporting.report import Result

NONE = "–"
UNRECORDED = "no cost recorded"
NO_HOST = "host not recorded"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _encode_s(result: Result) -> float | None:
    rate = _number((result.cost or {}).get("docs_per_s"))
    return 1000 / rate if rate else None


def _prep_s(result: Result) -> float | None:
    seconds = _number((result.timings or {}).get("prepare_model"))
    # A result with a cost record and no preparation phase prepared nothing (a torch model): 0 s.
    return seconds if seconds is not None else (0.0 if result.cost else None)


def _peak_rss(result: Result) -> float | None:
    cost = result.cost or {}
    # A process-wide peak (scope "process") is at least the run's, not its own: not placed.
    return _number(cost.get("peak_rss_bytes")) if cost.get("peak_rss_scope") == "evaluation" else None


def _seconds(value: float) -> str:
    return f"{value:.1f}" if value >= 100 else f"{value:.2f}" if value >= 1 else f"{value:.3f}"


@dataclass(frozen=True)
class CostKey:
    """One cost a result can be placed by.

    Attributes:
        name: The key (``--cost-axis``, ``--within``).
        heading: The column heading and the plot's axis label.
        where: Where in the result record it is read, and how.
        lower_is_better: Less is cheaper (seconds, bytes); False for a throughput (queries/s).
        per_host: Measured on a machine (a time, a rate, memory): results of different hosts are not compared.
        read: The value from a result (None: not recorded).
        text: The value as a table shows it.
    """

    name: str
    heading: str
    where: str
    lower_is_better: bool
    per_host: bool
    read: Callable[[Result], float | None] = field(repr=False)
    text: Callable[[float], str] = field(repr=False)


COSTS: dict[str, CostKey] = {
    key.name: key
    for key in (
        CostKey(
            "encode_s",
            "encode s / 1,000 docs",
            "1,000 / cost.docs_per_s: seconds per 1,000 documents of the phase that made the corpus searchable "
            "(encode_corpus; BM25: index); none when that phase was read from the cache",
            True,
            True,
            _encode_s,
            _seconds,
        ),
        CostKey(
            "qps",
            "queries/s",
            "cost.queries_per_s: judged queries / seconds of the batch search",
            False,
            True,
            lambda r: _number((r.cost or {}).get("queries_per_s")),
            lambda v: f"{v:,.1f}",
        ),
        CostKey(
            "p50_ms",
            "p50 ms",
            "cost.search_latency.p50_ms: the median time of searching one query alone",
            True,
            True,
            lambda r: _number(((r.cost or {}).get("search_latency") or {}).get("p50_ms")),
            lambda v: f"{v:.3f}",
        ),
        CostKey(
            "bytes_per_doc",
            "bytes/doc",
            "config.bytes_per_doc: the index's serialized size / documents (dense indexes)",
            True,
            False,
            lambda r: _number(r.config.get("bytes_per_doc")),
            lambda v: f"{v:,.2f}".rstrip("0").rstrip("."),  # 512.02 (a header's bytes) is not 512
        ),
        CostKey(
            "index_bytes",
            "index",
            "cost.index_bytes: the dense index's serialized size",
            True,
            False,
            lambda r: _number((r.cost or {}).get("index_bytes")),
            size_text,
        ),
        CostKey(
            "peak_rss",
            "peak RSS",
            "cost.peak_rss_bytes: the evaluation's peak resident memory (a process-wide peak is not the run's own: "
            "not placed)",
            True,
            True,
            _peak_rss,
            size_text,
        ),
        CostKey(
            "prep_s",
            "preparation s",
            "timings.prepare_model: an ONNX or OpenVINO model's export, quantization and compile (0 for a result "
            "with a cost record that prepared nothing)",
            True,
            True,
            _prep_s,
            _seconds,
        ),
        CostKey(
            "wall_s",
            "wall s",
            "timings.total: the whole evaluation's wall time",
            True,
            True,
            lambda r: _number((r.timings or {}).get("total")),
            _seconds,
        ),
    )
}


def cost_key(name: str) -> CostKey:
    """The cost named `name`.

    Raises:
        HarnessError: An unknown name, with the known ones.
    """
    if name not in COSTS:
        raise HarnessError(f"unknown cost {name!r}; the costs are {', '.join(COSTS)}")
    return COSTS[name]


# --- the Pareto set


def pareto_flags(points: Sequence[tuple[float, float]]) -> list[bool]:
    """Which of (quality, cost) points are Pareto-optimal, quality higher-is-better and cost lower-is-better.

    A point is dominated when another has quality ≥ and cost ≤ and differs in one; equal points do not
    dominate each other. O(n log n): sorted by cost, a point is dominated when a cheaper one is at least as
    good, or one of the same cost is better.
    """
    order = sorted(range(len(points)), key=lambda i: (points[i][1], -points[i][0]))
    flags = [False] * len(points)
    best_cheaper = -math.inf  # the best quality of every point strictly cheaper than the current cost
    start = 0
    while start < len(order):
        end = start
        cost = points[order[start]][1]
        while end < len(order) and points[order[end]][1] == cost:
            end += 1
        top = points[order[start]][0]  # the best of this cost (sorted by quality, descending, within it)
        for i in order[start:end]:
            flags[i] = points[i][0] == top and top > best_cheaper
        best_cheaper = max(best_cheaper, top)
        start = end
    return flags


# --- a budget


@dataclass(frozen=True)
class Limit:
    """One bound of a budget: ``encode_s <= 60``."""

    key: str
    op: str
    bound: float

    def holds(self, value: float) -> bool:
        return {"<=": value <= self.bound, "<": value < self.bound, ">=": value >= self.bound, ">": value > self.bound}[
            self.op
        ]

    def __str__(self) -> str:
        return f"{self.key}{self.op}{self.bound:g}"


_LIMIT = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*([<>=!]*)\s*(.*?)\s*$")


def parse_within(text: str) -> tuple[Limit, ...]:
    """A budget, ``"encode_s<=60,bytes_per_doc<=512"``: comma-separated limits, each a cost (`COSTS`), one of
    ``<=``, ``<``, ``>=``, ``>`` and a number; every limit must hold.

    Raises:
        HarnessError: One line naming the limit that is wrong and why (an unknown cost, with the known ones; an
            operator other than those four; a missing or non-finite number).
    """
    example = "encode_s<=60,bytes_per_doc<=512"
    items = [item for item in text.split(",")]
    if not text.strip():
        raise HarnessError(f"{setting('within')} is empty; give limits such as {example}")
    limits = []
    for item in items:
        match = _LIMIT.fullmatch(item)
        if not item.strip() or match is None:
            raise HarnessError(
                f"{setting('within')}: {item.strip()!r} is not a limit; give COST<=NUMBER items separated by "
                f"commas, such as {example} (costs: {', '.join(COSTS)})"
            )
        key, op, number = match.groups()
        if key not in COSTS:
            raise HarnessError(f"{setting('within')}: unknown cost {key!r}; the costs are {', '.join(COSTS)}")
        if op not in ("<=", "<", ">=", ">"):
            shown = f"{op!r}" if op else "no operator"
            raise HarnessError(
                f"{setting('within')}: {item.strip()!r} has {shown}; put <=, <, >= or > between {key} and a "
                f"number ({key}<=60)"
            )
        try:
            bound = float(number)
        except ValueError:
            bound = math.nan
        if not math.isfinite(bound):
            raise HarnessError(
                f"{setting('within')}: {item.strip()!r} needs a number after {op} ({key}{op}60), not {number!r}"
                if number
                else f"{setting('within')}: {item.strip()!r} needs a number after {op} ({key}{op}60)"
            )
        limits.append(Limit(key, op, bound))
    return tuple(limits)


# --- the frontier


@dataclass(frozen=True)
class Point:
    """One result on (or off) a frontier.

    Attributes:
        dataset: Its dataset.
        frontier: The frontier it belongs to within the dataset: ``""`` (one for the dataset) or its host's name
            when the dataset's results were measured on several hosts.
        system: Its label, as every table labels it.
        value: Its quality (None: the metric is not stored).
        costs: Every cost of `COSTS` it recorded (None: not recorded).
        host: The machine it recorded (None: none).
        pareto: On the Pareto set of its frontier.
        missing: Why it is on no frontier (``no cost recorded``), else None.
        budget: With a budget: ``best``, ``fits``, ``over encode_s`` or ``no encode_s recorded``; else None.
    """

    dataset: str
    frontier: str
    system: str
    value: float | None
    costs: dict[str, float | None]
    host: str | None = None
    pareto: bool = False
    missing: str | None = None
    budget: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The point as JSON (unrounded)."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class Frontier:
    """Every result of the reported split on its frontier: per dataset (and host, for a cost measured on one)
    the Pareto set of quality against `axis`, and with `within` the best result inside that budget."""

    metric: str
    axis: str
    points: list[Point]
    within: tuple[Limit, ...] = ()
    notes: list[str] = field(default_factory=list)

    @property
    def key(self) -> CostKey:
        return COSTS[self.axis]

    def groups(self) -> list[tuple[str, str]]:
        """The frontiers, (dataset, frontier), in the table's order."""
        return list(dict.fromkeys((p.dataset, p.frontier) for p in self.points))

    def best(self) -> list[tuple[str, str, Point | None, str]]:
        """With a budget: per frontier (dataset, frontier, the best point inside it or None, a line saying so)."""
        out = []
        for dataset, frontier in self.groups():
            mine = [p for p in self.points if (p.dataset, p.frontier) == (dataset, frontier)]
            chosen = next((p for p in mine if p.budget == "best"), None)
            fits = sum(p.budget in ("best", "fits") for p in mine)
            where = dataset + (f" on {frontier}" if frontier else "")
            if chosen is not None:
                value = metric_text(chosen.value, 4)
                line = f"{where}: {chosen.system} ({self.metric} {value}; {fits} of {len(mine)} fit)"
            else:
                over = sum((p.budget or "").startswith("over") for p in mine)
                unrecorded = sum((p.budget or "").startswith("no ") for p in mine)
                line = f"{where}: none fits ({over} over the budget, {unrecorded} without the costs it names)"
            out.append((dataset, frontier, chosen, line))
        return out

    def render(self, fmt: str = "markdown", digits: int = 4) -> str:
        """The table in markdown, latex, csv (unrounded, every cost) or json."""
        return render_frontier(self, fmt, digits)


def _budget(point: Point, within: tuple[Limit, ...]) -> str:
    for limit in within:
        value = point.costs.get(limit.key)
        if value is None:
            return f"no {limit.key} recorded"
        if not limit.holds(value):
            return f"over {limit.key}"
    return "fits" if point.value is not None else "no quality"


def _default_axis(points: list[Point]) -> str:
    """encode_s when at least half the results recorded it, else the cost recorded by the most results (ties:
    `COSTS`' order); prep_s counts only where it was measured, not where it is 0 for want of a preparation."""
    counts = {
        name: sum(p.costs[name] is not None and (name != "prep_s" or bool(p.costs[name])) for p in points)
        for name in COSTS
    }
    if 2 * counts["encode_s"] >= len(points):
        return "encode_s"
    return max(COSTS, key=lambda name: (counts[name], -list(COSTS).index(name)))


def build_frontier(
    results: Sequence[Result],
    metric: str = "nDCG@10",
    axis: str | None = None,
    within: tuple[Limit, ...] = (),
    split: str | None = None,
) -> Frontier:
    """The frontier of every result of `split` (default each dataset's evaluation split), labelled as every
    table labels them (`column_labels`).

    Args:
        results: The results.
        metric: The quality.
        axis: The cost placed against it (`COSTS`); None: encode_s when at least half the results recorded
            it, else the cost recorded by the most results (ties: the order of `COSTS`).
        within: A budget (`parse_within`): the best result inside it per frontier.
        split: The split.

    Raises:
        HarnessError: No result of that split, an unknown axis, or no result that records the axis.
    """
    kept = results_of_split(list(results), split)
    if not kept:
        raise HarnessError(f"no results of split {split or 'test'} to place on a frontier")
    notes: list[str] = []
    labelled, labels = column_labels(kept, notes)
    raw = [
        Point(
            dataset=r.dataset,
            frontier="",
            system=labels[id(r)],
            value=_number(r.metrics.get(metric)),
            costs={name: key.read(r) for name, key in COSTS.items()},
            host=host_text(r.host),
        )
        for r in labelled
    ]
    axis = axis or _default_axis(raw)
    key = cost_key(axis)
    recorded = sum(p.costs[axis] is not None for p in raw)
    if not recorded:
        counts = ", ".join(f"{n} ({c})" for n in COSTS if (c := sum(p.costs[n] is not None for p in raw)))
        raise HarnessError(
            f"no result records {axis}; recorded: {counts or 'none (results written before cost records)'}"
        )
    per_host = key.per_host or any(COSTS[limit.key].per_host for limit in within)
    order = {name: i for i, name in enumerate(dataset_order(p.dataset for p in raw))}
    points: list[Point] = []
    for dataset in sorted({p.dataset for p in raw}, key=order.__getitem__):
        mine = [p for p in raw if p.dataset == dataset]
        hosts = sorted({p.host or NO_HOST for p in mine})
        split_hosts = per_host and len(hosts) > 1
        if split_hosts:
            measured = [axis] if key.per_host else [limit.key for limit in within if COSTS[limit.key].per_host]
            notes.append(
                f"{dataset}: measured on {len(hosts)} hosts ({'; '.join(hosts)}): one frontier per host, since "
                f"{' and '.join(dict.fromkeys(measured))} measured on one machine says nothing of another's"
            )
        elif len(hosts) > 1:
            notes.append(
                f"{dataset}: results from {len(hosts)} hosts on one frontier: {axis} does not depend on the host"
            )
        groups: dict[str, list[Point]] = {}
        for p in mine:
            groups.setdefault((p.host or NO_HOST) if split_hosts else "", []).append(p)
        for frontier in sorted(groups):
            points += _place(groups[frontier], frontier, key, metric, within)
    return Frontier(metric, axis, points, within, notes)


def _place(mine: list[Point], frontier: str, key: CostKey, metric: str, within: tuple[Limit, ...]) -> list[Point]:
    """One frontier's points: the Pareto set marked, the budget answered, placed ones by cost (best first)."""
    sign = 1 if key.lower_is_better else -1
    placed = [p for p in mine if p.value is not None and p.costs[key.name] is not None]
    ids = {id(p) for p in placed}
    flags = pareto_flags([(p.value, sign * p.costs[key.name]) for p in placed])
    out = [replace(p, frontier=frontier, pareto=flag) for p, flag in zip(placed, flags)]
    out.sort(key=lambda p: (sign * p.costs[key.name], -p.value, p.system))
    out += sorted(
        (
            replace(p, frontier=frontier, missing=UNRECORDED if p.value is not None else f"no {metric} stored")
            for p in mine
            if id(p) not in ids
        ),
        key=lambda p: p.system,
    )
    if not within:
        return out
    out = [replace(p, budget=_budget(p, within)) for p in out]
    fitting = [p for p in out if p.budget == "fits"]
    if fitting:
        # The best quality; of equal quality, the cheaper on the axis (unrecorded last), then by label.
        best = min(
            fitting,
            key=lambda p: (
                -p.value,
                p.costs[key.name] is None,
                sign * (p.costs[key.name] or 0.0),
                p.system,
            ),
        )
        out = [replace(p, budget="best") if p is best else p for p in out]
    return out


# --- rendering


def frontier_notes(frontier: Frontier) -> list[str]:
    """The notes under the table: the axis, what Pareto means, the hosts, the budget's answer."""
    key = frontier.key
    better = "lower" if key.lower_is_better else "higher"
    notes = [
        f"cost: {key.name} = {key.where} ({better} is better); Pareto yes: no other result of its frontier has at "
        f"least its {frontier.metric} at no more cost and is better in one (equal results are both marked); "
        f"{UNRECORDED}: the result did not record {key.name}, so it is placed on no frontier",
        *frontier.notes,
    ]
    if frontier.within:
        notes.append(
            f"best within {', '.join(map(str, frontier.within))}: " + "; ".join(line for *_, line in frontier.best())
        )
    return notes


def _header(frontier: Frontier) -> list[str]:
    split = any(p.frontier for p in frontier.points)
    return [
        "dataset",
        *(["frontier"] if split else []),
        "system",
        frontier.metric,
        frontier.key.heading,
        "Pareto",
        *(["within budget"] if frontier.within else []),
        "host",
    ]


def _cells(frontier: Frontier, p: Point, digits: int) -> list[str]:
    value = p.costs[frontier.axis]
    split = any(q.frontier for q in frontier.points)
    return [
        p.dataset,
        *([p.frontier] if split else []),
        p.system,
        metric_text(p.value, digits),
        NONE if value is None else frontier.key.text(value),
        p.missing or ("yes" if p.pareto else ""),
        *([p.budget or ""] if frontier.within else []),
        p.host or NONE,
    ]


def frontier_table(frontier: Frontier, digits: int = 4) -> tuple[list[str], list[list[str]]]:
    """(header, body) of the table as text cells, as markdown, LaTeX and the HTML page show it."""
    return _header(frontier), [_cells(frontier, p, digits) for p in frontier.points]


def render_frontier(frontier: Frontier, fmt: str = "markdown", digits: int = 4) -> str:
    """The frontier table in markdown, latex, csv (unrounded, with every cost) or json."""
    if fmt == "json":
        return json_text(
            {
                "metric": frontier.metric,
                "cost": frontier.axis,
                "lower_is_better": frontier.key.lower_is_better,
                "within": [str(limit) for limit in frontier.within],
                "best": [
                    {"dataset": d, "frontier": f, "system": p.system if p else None, "line": line}
                    for d, f, p, line in (frontier.best() if frontier.within else [])
                ],
                "notes": frontier_notes(frontier),
                "rows": [p.to_json() for p in frontier.points],
            }
        )
    if fmt == "csv":
        header = ["dataset", "frontier", "system", frontier.metric, "cost", frontier.axis, "pareto", "missing"]
        header += ["within_budget", *(f"cost_{name}" for name in COSTS), "host"]
        rows = [
            [p.dataset, p.frontier, p.system, p.value, frontier.axis, p.costs[frontier.axis], p.pareto, p.missing]
            + [p.budget, *(p.costs[name] for name in COSTS), p.host]
            for p in frontier.points
        ]
        return csv_text(header, rows)
    header, body = frontier_table(frontier, digits)
    if fmt == "latex":
        return latex_table(header, body)
    return markdown_table(header, body, frontier_notes(frontier))
