"""The one presentation module: alignment and the paper formats."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
from cli_runner import invoke

from harness.presentation import Bold, align, csv_text, latex_table, markdown_table, size_text


def test_align_pads_columns_and_right_aligns_numbers():
    lines = align([["name", "docs", "note"], ["scifact", "5,183", "ok"], ["nq", "2,681,468", ""]])
    assert lines == ["name          docs  note", "scifact      5,183  ok", "nq       2,681,468"]
    assert align([["a", "b"], ["x", "y"]], right=[True, False]) == ["a  b", "x  y"]
    assert align([]) == []


def test_numbers_deltas_dashes_and_tiny_p_values_count_as_numeric():
    lines = align([["metric", "delta", "p"], ["nDCG@10", "+0.0020", "< 1e-4"], ["MRR@10", "–", "0.0312"]])
    assert lines[1].endswith("+0.0020  < 1e-4") and lines[2].endswith("      –  0.0312")


def test_bold_cells_render_per_format():
    header, body = ["dataset", "a"], [["scifact", Bold("0.7")]]
    assert "| scifact | **0.7** |" in markdown_table(header, body)
    assert r"scifact & \textbf{0.7} \\" in latex_table(header, body)
    assert csv_text(header, [["scifact", 0.1 + 0.2], ["nq", None]]) == "dataset,a\nscifact,0.30000000000000004\nnq,\n"


# --------------------------------------------------------------------------- one rounding rule

# 0.535845 is the reported value (shown 0.5359 by a page that stored it rounded to 0.53585); 0.03125 is an exact
# binary tie, which JavaScript's toFixed rounds up (0.0313) and Python's format to even (0.0312).
TINY = Path(__file__).parent / "data" / "tiny"  # read only: the drill-downs' texts and judgments
VALUES = {"set-a": 0.535845, "set-b": 0.12345, "set-c": 0.99995, "set-d": 0.03125}


@pytest.fixture
def rounding_results(tmp_path):
    from harness.records import Run
    from harness.reporting.report import Result, write_result

    out = tmp_path / "results"
    for dataset, value in VALUES.items():
        write_result(
            Result(
                dataset,
                "test",
                "sys",
                {"nDCG@10": value},
                {"q1": {"nDCG@10": value}},
                1,
                {"top_k": 10, "dataset_path": str(TINY)},
                {},
                {},
                {"beir-harness": "test"},
                "2026-12-01T00:00:00+00:00",
                label="sys",
                config_hash="a" * 16,
            ),
            Run.from_scores({"q1": {"d1": 1.0}}),
            out,
        )
    return out


def _rows(text: str, start: str, separator: str, end: str = "") -> dict[str, str]:
    """dataset → the one value cell, from the body lines of a rendered table."""
    rows = {}
    for line in text.splitlines():
        if line.startswith(start):
            cells = [cell.strip() for cell in line.removeprefix(start).removesuffix(end).split(separator)]
            if len(cells) == 2:
                rows[cells[0]] = cells[1]
    return rows


@pytest.mark.parametrize("digits", [4, 3])
def test_every_format_shows_the_digits_of_the_stored_float(rounding_results, digits):

    def report(*options) -> str:
        result = invoke(["report", str(rounding_results), "--digits", str(digits), *options])
        assert result.exit_code == 0, result.output
        return result.stdout

    # Expected: Python's own formatting of each stored float, computed here, and the mean by a plain loop.
    expected = {dataset: format(value, f".{digits}f") for dataset, value in VALUES.items()}
    mean = 0.0
    for value in VALUES.values():
        mean += value
    average = format(mean / len(VALUES), f".{digits}f")
    markdown = _rows(report("--format", "markdown"), "| ", " | ", " |")
    latex = _rows(report("--format", "latex"), "", " & ", r" \\")
    for table in (markdown, latex):
        assert {d: table[d] for d in VALUES} == expected
        assert next(v for k, v in table.items() if k.startswith("average")) == average
    csv_rows = list(csv.reader(io.StringIO(report("--format", "csv"))))[1:]
    assert {row[0]: float(row[1]) for row in csv_rows if row} == VALUES  # CSV: the stored float itself, unrounded
    assert {row["dataset"]: row["sys"] for row in json.loads(report("--format", "json"))["rows"]} == VALUES
    html = report("--format", "html")
    page = json.loads(re.search(r'<script type="application/json" id="page-data">(.*?)</script>', html, re.S).group(1))
    board = page["boards"]["nDCG@10"]
    assert {d: texts[0] for d, texts in board["text"].items()} == expected  # what the page shows
    assert {d: values[0] for d, values in board["values"].items()} == VALUES  # what it sorts and draws by
    assert board["average"]["text"] == [average]


def test_the_printed_metrics_table_and_the_page_drill_down_round_once(rounding_results):
    from harness.reporting.comparison import load_results
    from harness.reporting.html import build_page
    from harness.reporting.report import format_metrics_table

    results = load_results([rounding_results])
    for result in results:
        assert f"nDCG@10  {format(VALUES[result.dataset], '.4f')}" in format_metrics_table(result)
    drilldowns = build_page(results)["drilldowns"]
    assert {d: drill["systems"]["sys"]["worst"][0][1] for d, drill in drilldowns.items()} == {
        d: format(value, ".4f") for d, value in VALUES.items()
    }


IEC = ("B", "KiB", "MiB", "GiB", "TiB")  # powers of 1024 are named by the IEC prefixes (IEC 80000-13)
SIZES = sorted(
    {
        n
        for power in range(6)
        for n in (
            1024**power - 1,
            1024**power,
            1024**power + 1,
            3 * 1024**power // 2,
            1000 * 1024**power,
            1023 * 1024**power + 1024**power // 2,
            99 * 1024**power + 1024**power * 96 // 100,
        )
        if n >= 0
    }
)


def _unit_by_hand(n: int) -> int:
    """The largest power of 1024 that `n` reaches, counted one by one (TiB at most)."""
    exponent = 0
    while exponent < len(IEC) - 1 and 1024 ** (exponent + 1) <= n:
        exponent += 1
    return exponent


@pytest.mark.parametrize("places", [None, 2])
def test_a_size_is_shown_in_the_power_of_1024_it_reaches_named_by_its_iec_prefix(places):
    """One byte formatter for every message and table: the unit by a brute-force count, the shown number within
    half its last digit of the exact quotient; two decimals when asked (a figure to act on), else three
    significant digits and a whole number from 100 up."""
    for n in SIZES:
        shown = size_text(n) if places is None else size_text(n, places=places)
        number, unit = shown.split(" ")
        exponent = _unit_by_hand(n)
        assert unit == IEC[exponent], (n, shown)
        exact = n / 1024**exponent
        if exponent == 0:
            assert number == str(n), (n, shown)
        elif places is not None:
            assert re.fullmatch(r"\d+\.\d{2}", number) and abs(float(number) - exact) <= 0.005, (n, shown)
        elif exact >= 100:
            assert number.isdigit() and abs(int(number) - exact) <= 0.5, (n, shown)
        else:
            last_digit = 10.0 ** (len(str(int(exact))) - 3)  # three significant digits
            assert "e" not in number and abs(float(number) - exact) <= last_digit / 2 + 1e-12, (n, shown)
