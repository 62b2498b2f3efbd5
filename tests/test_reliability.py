"""RELIABILITY.md cannot go stale: each row names a test that the README's test command runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLOORS = {"Bad input": 40, "Download faults": 10, "Interruption points": 6}


def _rows_by_section() -> dict[str, list[str]]:
    """Section title → the test named in the last column of each table row."""
    sections: dict[str, list[str]] = {}
    current = None
    for number, line in enumerate((ROOT / "RELIABILITY.md").read_text(encoding="utf-8").splitlines(), start=1):
        if line.startswith("## "):
            current = line[3:].strip()
            sections[current] = []
        elif current and line.startswith("| ") and not line.startswith("| fault or input"):
            last = line.rstrip().removesuffix("|").rsplit("|", 1)[-1].strip()
            match = re.fullmatch(r"`(tests/[^`]+)`", last)
            assert match, f"RELIABILITY.md:{number}: the last column must name a test, got {last!r}"
            sections[current].append(match.group(1))
    return sections


@pytest.fixture(scope="module")
def collected() -> set[str]:
    """The node ids `pytest` collects with the project's default options (slow tests deselected)."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {line.strip() for line in proc.stdout.splitlines() if "::" in line}


def test_every_row_names_a_test_that_ci_runs(collected):
    missing = []
    for section, tests in _rows_by_section().items():
        for test in tests:
            found = test in collected if "[" in test else any(
                node == test or node.startswith(test + "[") for node in collected)
            if not found:
                missing.append(f"{section}: {test}")
    assert not missing, "RELIABILITY.md names tests that pytest does not run:\n" + "\n".join(missing)


def test_each_section_reaches_its_floor():
    sections = _rows_by_section()
    for section, floor in FLOORS.items():
        assert len(sections.get(section, [])) >= floor, f"{section}: {len(sections.get(section, []))} rows < {floor}"
    assert {"Concurrency", "Security", "Resource faults"} <= set(sections)


def test_every_convert_bad_input_case_is_listed():
    from test_convert import BAD_INPUTS

    listed = "\n".join(test for tests in _rows_by_section().values() for test in tests)
    missing = [case for case, *_ in BAD_INPUTS if f"[{case}]" not in listed]
    assert not missing, f"RELIABILITY.md lacks bad-input cases: {missing}"


def test_the_readme_quotes_the_current_counts():
    sections = _rows_by_section()
    counts = (f"{len(sections['Bad input'])} bad inputs, {len(sections['Download faults'])} download faults, "
              f"{len(sections['Interruption points'])} interruption points")
    assert counts in " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())


def _cells(line: str) -> list[str]:
    """The cells of a Markdown table row (GitHub's rule: every `|` not escaped as `\\|` ends a cell)."""
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().removeprefix("|").removesuffix("|"))]


def _table_faults(path: Path) -> list[str]:
    """Every way a table in `path` would render broken: a header, then `|---|` of as many columns, then rows."""
    faults, table = [], []
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate([*lines, ""], start=1):
        if line.lstrip().startswith("|"):
            table.append((number, _cells(line)))
            continue
        if table:
            (first, header), *rest = table
            separator = re.compile(r":?-{3,}:?")
            if not rest or not all(separator.fullmatch(cell) for cell in rest[0][1]):
                faults.append(f"{path.name}:{first + 1}: the table's second line is not a |---| separator")
            for row_number, cells in rest:
                if all(separator.fullmatch(cell) for cell in cells) and row_number != first + 1:
                    faults.append(f"{path.name}:{row_number}: a |---| separator inside the table")
                if len(cells) != len(header):
                    faults.append(f"{path.name}:{row_number}: {len(cells)} cells, the header has {len(header)}")
            table = []
    return faults


@pytest.mark.parametrize("name", ["RELIABILITY.md", "BENCHMARKS.md"])
def test_every_table_renders(name):
    faults = _table_faults(ROOT / name)
    assert not faults, "tables that render broken:\n" + "\n".join(faults)


def test_the_table_check_catches_each_way_a_table_breaks(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("| a | b |\n|---|---|\n| 1 | `x \\| y` |\n\ntext\n\n| a | b |\n| 1 | 2 |\n|---|---|\n\n"
                    "| a | b |\n|---|---|---|\n| 1 | 2 | 3 |\n", encoding="utf-8")
    assert _table_faults(page) == ["page.md:8: the table's second line is not a |---| separator",
                                   "page.md:9: a |---| separator inside the table",
                                   "page.md:12: 3 cells, the header has 2", "page.md:13: 3 cells, the header has 2"]
