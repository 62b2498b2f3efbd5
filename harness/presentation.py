"""Presentation: every table the harness prints or writes, from rows of cells to text.

One alignment helper (`align`) for the terminal tables (bench, datasets list, cache list, checks,
compare, crosscheck, env, the demo, a result's metrics), and the paper formats (Markdown, LaTeX,
CSV, JSON) for `report`. Callers build rows of strings; a cell wrapped in `Bold` is emphasised where
the format can (``**x**`` in Markdown, ``\\textbf{x}`` in LaTeX). Nothing here knows what a result is.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Sequence
from typing import Any

_NUMBER = re.compile(r"^[-+]?(\d[\d,]*\.?\d*|\.\d+)(e[-+]?\d+)?x?%?$|^[–-]$|^< ?1e-\d+$|^n/a$")


def metric_text(value: float | None, digits: int = 4, signed: bool = False) -> str:
    """A metric value as every table, page and plot shows it: rounded once, from the stored float.

    ``format(value, f".{digits}f")`` (correctly rounded from the float's exact binary value, as Python
    formats it), ``+`` in front of a non-negative value when `signed`, and ``–`` for no value. Nothing else
    may round a value for display (rounding an already rounded value can move the last digit: 0.535845
    stored as 0.53585 shows 0.5359, not 0.5358).
    """
    if value is None:
        return "–"
    return format(value, f"+.{digits}f" if signed else f".{digits}f")


BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")  # powers of 1024, by their IEC names


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes from ``3GB``, ``500M``, ``1.5GiB``, ``2048``: K/M/G/T are powers of 1024 whether written KB or KiB,
    as `size_text` prints them (the memory budget, ``cache prune --max-size``).

    Raises:
        ValueError: Not a size.
    """
    match = _SIZE.match(str(text))
    if not match:
        raise ValueError(f"{text!r} is not a size (e.g. 3GB, 500MB, 1.5GiB or a number of bytes)")
    unit = (match.group(2) or "").lower()[:1]
    return int(float(match.group(1)) * 1024 ** " kmgt".index(unit or " "))


def size_text(n_bytes: float, places: int | None = None) -> str:
    """A number of bytes as every message and table shows it: in powers of 1024, named B, KiB, MiB, GiB, TiB
    (the largest unit the value reaches, TiB at most); whole bytes below 1 KiB (``512 B``).

    With `places`, that many decimals: a figure to act on, as a memory budget's messages give it (``1.00 MiB``,
    the minimum to raise it to). Without, three significant digits and a whole number from 100 up, as a table
    shows it (``1.5 KiB``, ``12.3 GiB``, ``1000 MiB``: never ``1e+03 MiB``).
    """
    value, unit = float(n_bytes), BYTE_UNITS[0]
    for unit in BYTE_UNITS:
        if abs(value) < 1024 or unit == BYTE_UNITS[-1]:
            break
        value /= 1024
    if unit == BYTE_UNITS[0]:
        return f"{n_bytes:.0f} B"
    if places is not None:
        return f"{value:.{places}f} {unit}"
    return f"{value:.0f} {unit}" if abs(value) >= 100 else f"{value:.3g} {unit}"


class Bold(str):
    """A cell to emphasise (the best value of a row)."""


class PlainText(str):
    """A note that is text throughout, with names a user typed in it (annotators): `markdown_table` escapes its
    Markdown, so a name such as ``**bob**`` or ``[x](https://...)`` shows as typed instead of as markup. (LaTeX
    escapes every note; the HTML page inserts notes as text.)"""


_MARKDOWN_SPECIAL = frozenset("\\`*_~<>|&")


def markdown_escape(text: str) -> str:
    """`text` shown as typed in Markdown: its emphasis, code, strike-through, HTML, table and link markup escaped
    (brackets stay as they are unless a ``](`` would make them a link)."""
    return "".join(f"\\{ch}" if ch in _MARKDOWN_SPECIAL else ch for ch in text).replace("](", "]\\(")


def _numeric(cell: str) -> bool:
    return bool(_NUMBER.match(cell.strip().rstrip("*†").strip())) if cell.strip() else True


def align(rows: Sequence[Sequence[str]], right: Sequence[bool] | None = None, gap: str = "  ") -> list[str]:
    """Lines with every column padded to its widest cell.

    Args:
        rows: The header (if any) and body rows; short rows are padded with empty cells.
        right: Per column, whether to right-align; default: the columns whose cells below the first
            row all read as numbers (``0.6451``, ``1,024``, ``+0.0020``, ``1.5x``, ``–``, ``< 1e-4``).
        gap: Between columns.
    """
    if not rows:
        return []
    width = max(len(row) for row in rows)
    cells = [[str(cell) for cell in row] + [""] * (width - len(row)) for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(width)]
    if right is None:
        body = cells[1:] or cells
        right = [i > 0 and all(_numeric(row[i]) for row in body) for i in range(width)]
    return [
        gap.join(cell.rjust(w) if r else cell.ljust(w) for cell, w, r in zip(row, widths, right)).rstrip()
        for row in cells
    ]


def markdown_table(header: Sequence[str], body: Sequence[Sequence[str]], notes: Sequence[str] = ()) -> str:
    """A Markdown table (first column left-aligned, the others right), then the notes as lines."""

    def cell(text: str) -> str:
        return f"**{text}**" if isinstance(text, Bold) else str(text)

    lines = [f"| {' | '.join(header)} |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += [f"| {' | '.join(cell(c) for c in row)} |" for row in body]
    if notes:
        lines += [""] + [f"{markdown_escape(note) if isinstance(note, PlainText) else note}  " for note in notes]
    return "\n".join(lines).rstrip()


_LATEX_ESCAPES = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def latex_escape(text: str) -> str:
    """`text` safe inside a LaTeX table cell (Δ and † become math)."""
    escaped = "".join(_LATEX_ESCAPES.get(ch, ch) for ch in text.replace("–", "--"))
    return escaped.replace("Δ", r"$\Delta$").replace("†", r"$^\dagger$")


def latex_table(header: Sequence[str], body: Sequence[Sequence[str]], footer: Sequence[Sequence[str]] = ()) -> str:
    """A booktabs ``tabular`` (needs ``\\usepackage{booktabs}``); `footer` rows follow a rule."""

    def cell(text: str) -> str:
        return rf"\textbf{{{latex_escape(text)}}}" if isinstance(text, Bold) else latex_escape(str(text))

    def line(row: Sequence[str]) -> str:
        return " & ".join(cell(c) for c in row) + r" \\"

    lines = [r"\begin{tabular}{l" + "r" * (len(header) - 1) + "}", r"\toprule", line(header), r"\midrule"]
    lines += [line(row) for row in body]
    if footer:
        lines += [r"\midrule", *(line(row) for row in footer)]
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines)


def csv_text(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """CSV with floats written in full (``repr``) and None as an empty cell."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow("" if value is None else repr(value) if isinstance(value, float) else value for value in row)
    return buffer.getvalue()


def json_text(data: Any) -> str:
    """Indented UTF-8 JSON."""
    return json.dumps(data, indent=2, ensure_ascii=False)


def embedded_json(data: Any) -> str:
    """JSON that can sit inside ``<script type="application/json">`` of a page: ``<``, ``>``, ``&`` and the
    JavaScript line separators as escapes, so no text (``</script>``, ``<!--``) can end or change the block."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )
