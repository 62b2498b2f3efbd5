"""The quality–cost frontier drawn (`harness.reporting.frontier`): a PNG (``report --frontier --plot FILE``) and
the HTML page's Frontier section (inline SVG, no script). One panel per frontier: every placed result a point,
labelled (the Pareto set in black, joined by a step line), the best result inside a budget ringed, the budget's bound
on the axis dashed. The cost axis is logarithmic when it spans 20× or more.
"""

from __future__ import annotations

import math
from html import escape
from pathlib import Path

from harness.presentation import metric_text
from harness.reporting.comparison import save_png
from harness.reporting.frontier.table import Frontier, Point, frontier_notes, frontier_table

PARETO, DOMINATED = "#1f5fa8", "#9aa3ad"


def _panels(frontier: Frontier) -> list[tuple[str, list[Point]]]:
    """(title, placed points) per frontier that has at least one placed point."""
    out = []
    for dataset, group in frontier.groups():
        placed = [
            p
            for p in frontier.points
            if (p.dataset, p.frontier) == (dataset, group) and p.missing is None and p.value is not None
        ]
        if placed:
            out.append((dataset + (f" · {group}" if group else ""), placed))
    return out


def _names(placed: list[Point]) -> dict[str, str]:
    """Each point's name in a panel: a variant's tokens alone (``int8 rescore2``) where every variant shown is of
    one model (the panel's title then says which), else its whole label."""
    models = {p.system.split(" [", 1)[0] for p in placed if " [" in p.system}
    if len(models) != 1:
        return {p.system: p.system for p in placed}
    model = models.pop()
    return {p.system: p.system[len(model) + 2 : -1] if p.system.startswith(model + " [") else p.system for p in placed}


def _logarithmic(values: list[float]) -> bool:
    return min(values) > 0 and max(values) / min(values) >= 20


def _steps(frontier: Frontier, placed: list[Point]) -> list[tuple[float, float]]:
    """The Pareto points as a staircase, from the cheapest to the best (cheaper: left for a lower-is-better cost)."""
    axis = frontier.axis
    pareto = sorted((p for p in placed if p.pareto), key=lambda p: (p.costs[axis], p.value))
    points: list[tuple[float, float]] = []
    for p in pareto:
        if points:
            corner = (p.costs[axis], points[-1][1]) if frontier.key.lower_is_better else (points[-1][0], p.value)
            points.append(corner)
        points.append((p.costs[axis], p.value))
    return points


def _bounds(frontier: Frontier) -> list[float]:
    return [limit.bound for limit in frontier.within if limit.key == frontier.axis]


def plot_frontier(frontier: Frontier, path: str | Path) -> None:
    """The frontier as PNG, written atomically: one panel per frontier (dataset, and host where split)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = _panels(frontier)
    columns = min(3, max(1, len(panels)))
    rows = max(1, math.ceil(len(panels) / columns))
    fig, axes = plt.subplots(rows, columns, figsize=(6.4 * columns, 4.6 * rows), dpi=150, squeeze=False)
    axis = frontier.axis
    for ax, (title, placed) in zip(axes.flat, panels):
        names = _names(placed)
        for i, p in enumerate(sorted(placed, key=lambda p: (p.costs[axis], p.value))):
            colour = PARETO if p.pareto else DOMINATED
            ax.scatter(p.costs[axis], p.value, s=28 if p.pareto else 18, color=colour, zorder=3)
            if p.budget == "best":
                ax.scatter(p.costs[axis], p.value, s=140, facecolors="none", edgecolors="#c2410c", zorder=4)
            ax.annotate(
                names[p.system],
                (p.costs[axis], p.value),
                textcoords="offset points",
                xytext=(4, 4 if i % 2 == 0 else -9),  # alternately above and below: neighbours overlap less
                fontsize=6,
                color="black" if p.pareto else "#6b7480",
            )
        steps = _steps(frontier, placed)
        ax.plot([x for x, _ in steps], [y for _, y in steps], color=PARETO, linewidth=1, zorder=2)
        for bound in _bounds(frontier):
            ax.axvline(bound, color="#c2410c", linestyle="--", linewidth=0.8)
        if _logarithmic([p.costs[axis] for p in placed]):
            ax.set_xscale("log")
        better = "lower" if frontier.key.lower_is_better else "higher"
        ax.set_xlabel(f"{frontier.key.heading} ({better} is better)")
        ax.set_ylabel(frontier.metric)
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    save_png(fig, path)


def _svg_panel(frontier: Frontier, title: str, placed: list[Point], digits: int) -> str:
    """One frontier as an inline SVG: axes, points with their labels as tooltips, the staircase, the budget."""
    width, height, left, right, top, bottom = 460, 300, 56, 14, 24, 40
    axis = frontier.axis
    xs, ys = [p.costs[axis] for p in placed] + _bounds(frontier), [p.value for p in placed]
    log = _logarithmic(xs)
    fx = math.log10 if log else float
    x_lo, x_hi = fx(min(xs)), fx(max(xs))
    y_lo, y_hi = min(ys), max(ys)
    x_pad = (x_hi - x_lo) * 0.06 or 0.5
    y_pad = (y_hi - y_lo) * 0.08 or 0.02

    def x(value: float) -> float:
        return left + (fx(value) - x_lo + x_pad) / (x_hi - x_lo + 2 * x_pad) * (width - left - right)

    def y(value: float) -> float:
        return height - bottom - (value - y_lo + y_pad) / (y_hi - y_lo + 2 * y_pad) * (height - top - bottom)

    better = "lower" if frontier.key.lower_is_better else "higher"
    names = _names(placed)
    parts = [
        f'<svg viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{escape(frontier.metric)} against {escape(frontier.key.heading)}: {escape(title)}">',
        f'<text x="{left}" y="14">{escape(title)}</text>',
        f'<line class="axis" x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}"/>',
        f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}"/>',
        f'<text x="{(left + width - right) / 2}" y="{height - 6}" text-anchor="middle">'
        f"{escape(frontier.key.heading)} ({better} is better{', log scale' if log else ''})</text>",
        f'<text x="12" y="{(top + height - bottom) / 2}" transform="rotate(-90 12 {(top + height - bottom) / 2})" '
        f'text-anchor="middle">{escape(frontier.metric)}</text>',
    ]
    for value in (y_lo, y_hi):
        parts.append(f'<text x="{left - 4}" y="{y(value) + 4:.1f}" text-anchor="end">{metric_text(value, 3)}</text>')
    for value in (min(xs), max(xs)):
        text = escape(frontier.key.text(value))
        parts.append(f'<text x="{x(value):.1f}" y="{height - bottom + 14}" text-anchor="middle">{text}</text>')
    for bound in _bounds(frontier):
        parts.append(
            f'<line x1="{x(bound):.1f}" y1="{top}" x2="{x(bound):.1f}" y2="{height - bottom}" stroke="#c2410c" '
            'stroke-dasharray="4 3"/>'
        )
    steps = _steps(frontier, placed)
    if len(steps) > 1:
        line = " ".join(f"{x(a):.1f},{y(b):.1f}" for a, b in steps)
        parts.append(f'<polyline points="{line}" fill="none" stroke="{PARETO}" stroke-width="1.2"/>')
    for p in placed:
        cx, cy = x(p.costs[axis]), y(p.value)
        tip = f"{p.system}: {frontier.metric} {metric_text(p.value, digits)}, {frontier.key.text(p.costs[axis])}"
        tip += " (Pareto)" if p.pareto else ""
        parts.append(
            f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{4 if p.pareto else 3}" '
            f'fill="{PARETO if p.pareto else DOMINATED}"><title>{escape(tip)}</title></circle>'
        )
        if p.budget == "best":
            parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="8" fill="none" stroke="#c2410c"/>')
        if p.pareto:
            parts.append(f'<text x="{cx + 5:.1f}" y="{cy - 5:.1f}" font-size="10">{escape(names[p.system])}</text>')
    parts.append("</svg>")
    return "".join(parts)


def frontier_section(frontier: Frontier, digits: int = 4) -> str:
    """The page's Frontier section: the panels (inline SVG), the table and its notes, as static HTML whose every
    text from the data is escaped."""
    header, rows = frontier_table(frontier, digits)
    panels = "".join(_svg_panel(frontier, title, placed, digits) for title, placed in _panels(frontier))

    def cells(texts: list[str], tag: str) -> str:
        return "".join(f"<{tag}>{escape(text)}</{tag}>" for text in texts)

    body = "".join(f"<tr>{cells(row, 'td')}</tr>" for row in rows)
    table = (
        f"<table><caption>{escape(frontier.metric)} against {escape(frontier.key.heading)}</caption>"
        f"<thead><tr>{cells(header, 'th')}</tr></thead><tbody>{body}</tbody></table>"
    )
    notes = "".join(f'<p class="note">{escape(note)}</p>' for note in frontier_notes(frontier))
    return (
        '\n\n<section aria-labelledby="frontier-heading">\n  <h2 id="frontier-heading">Quality against cost</h2>\n'
        f'  <div class="scroll">{panels}</div>\n  <div class="scroll">{table}</div>\n  {notes}\n</section>'
    )
