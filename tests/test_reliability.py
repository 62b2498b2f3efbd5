"""RELIABILITY.md cannot go stale: each row names a test that the README's test command runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLOORS = {"Bad input": 40, "Download faults": 10, "Interruption points": 6}
SEPARATOR = re.compile(r":?-{3,}:?")  # one cell of a table's |---| line


def _rows() -> list[tuple[int, str, str]]:
    """(line number, section title, the test named in the last column) for each table row."""
    rows = []
    current = None
    for number, line in enumerate((ROOT / "RELIABILITY.md").read_text(encoding="utf-8").splitlines(), start=1):
        if line.startswith("## "):
            current = line[3:].strip()
        elif current and line.startswith("| ") and not line.startswith("| fault or input"):
            last = line.rstrip().removesuffix("|").rsplit("|", 1)[-1].strip()
            match = re.fullmatch(r"`(tests/[^`]+)`", last)
            assert match, f"RELIABILITY.md:{number}: the last column must name a test, got {last!r}"
            rows.append((number, current, match.group(1)))
    return rows


def _rows_by_section() -> dict[str, list[str]]:
    """Section title → the test named in the last column of each table row."""
    sections: dict[str, list[str]] = {}
    for line in (ROOT / "RELIABILITY.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            sections[line[3:].strip()] = []
    for _, section, test in _rows():
        sections[section].append(test)
    return sections


def rows_that_did_not_run(outcomes: dict[str, str]) -> list[str]:
    """One line per RELIABILITY.md row whose test did not run, given each node id's outcome.

    A row naming one parametrization (`test_x[case]`) needs that node to have run; a row naming a
    function needs each of its parametrizations to have run. Failed counts as run (pytest reports it).
    """
    missed = []
    for number, section, test in _rows():
        nodes = {
            node: outcome
            for node, outcome in outcomes.items()
            if node == test or ("[" not in test and node.startswith(test + "["))
        }
        if not nodes:
            missed.append(f"RELIABILITY.md:{number} ({section}): {test} was not collected")
        for node, outcome in sorted(nodes.items()):
            if outcome not in ("passed", "failed"):
                missed.append(f"RELIABILITY.md:{number} ({section}): {node} {outcome}")
    return missed


@pytest.fixture(scope="module")
def collected(request) -> set[str]:
    """The node ids `pytest` collects with the project's default options (slow tests deselected).

    When this session is that very command (a bare `pytest` in the repository, as CI runs it), they are the
    session's own items (under pytest-xdist each worker collects the whole suite); otherwise a `--collect-only`
    run finds them (half a minute on two cores)."""
    config = request.config
    if (
        not config.invocation_params.args
        and not os.environ.get("PYTEST_ADDOPTS")
        and config.invocation_params.dir == ROOT
    ):
        return {item.nodeid for item in request.session.items}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {line.strip() for line in proc.stdout.splitlines() if "::" in line}


def test_every_row_names_a_test_that_ci_runs(collected):
    missing = []
    for section, tests in _rows_by_section().items():
        for test in tests:
            found = (
                test in collected
                if "[" in test
                else any(node == test or node.startswith(test + "[") for node in collected)
            )
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
    counts = (
        f"{len(sections['Bad input'])} bad inputs, {len(sections['Download faults'])} download faults, "
        f"{len(sections['Interruption points'])} interruption points"
    )
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
            if not rest or not all(SEPARATOR.fullmatch(cell) for cell in rest[0][1]):
                faults.append(f"{path.name}:{first + 1}: the table's second line is not a |---| separator")
            for row_number, cells in rest:
                if all(SEPARATOR.fullmatch(cell) for cell in cells) and row_number != first + 1:
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
    page.write_text(
        "| a | b |\n|---|---|\n| 1 | `x \\| y` |\n\ntext\n\n| a | b |\n| 1 | 2 |\n|---|---|\n\n"
        "| a | b |\n|---|---|---|\n| 1 | 2 | 3 |\n",
        encoding="utf-8",
    )
    assert _table_faults(page) == [
        "page.md:8: the table's second line is not a |---| separator",
        "page.md:9: a |---| separator inside the table",
        "page.md:12: 3 cells, the header has 2",
        "page.md:13: 3 cells, the header has 2",
    ]


def test_rows_whose_test_was_skipped_deselected_or_missing_are_listed():
    rows = _rows()
    once = [row for row in rows if sum(test == row[2] for _, _, test in rows) == 1]
    exact = next(row for row in once if "[" in row[2])
    whole, plain = [row for row in once if "[" not in row[2]][:2]
    outcomes = {test: "passed" for _, _, test in rows if test != whole[2]}
    outcomes.update({whole[2] + "[a]": "passed", whole[2] + "[b]": "failed"})  # a parametrized function
    assert rows_that_did_not_run(outcomes) == []  # a failure ran: pytest itself reports it
    outcomes[exact[2]] = "skipped (no atheris)"
    outcomes[whole[2] + "[c]"] = "deselected"
    del outcomes[plain[2]]
    outcomes[plain[2] + "_longer"] = "passed"  # a name that only starts like the row's is another test
    expected = [
        f"RELIABILITY.md:{exact[0]} ({exact[1]}): {exact[2]} skipped (no atheris)",
        f"RELIABILITY.md:{whole[0]} ({whole[1]}): {whole[2]}[c] deselected",
        f"RELIABILITY.md:{plain[0]} ({plain[1]}): {plain[2]} was not collected",
    ]
    assert sorted(rows_that_did_not_run(outcomes)) == sorted(expected)


def test_a_skipped_row_fails_the_ci_check_end_to_end(tmp_path):
    """The real hook and the real check: pytest skips one row's test (a plugin adds the mark), the check fails."""
    row = "tests/test_formats.py::test_atomic_writer_unwritable_parent"
    (tmp_path / "skip_one.py").write_text(
        "import pytest\n\ndef pytest_collection_modifyitems(items):\n    for item in items:\n"
        f"        if item.nodeid == {row!r}:\n            item.add_marker(pytest.mark.skip(reason='on purpose'))\n"
    )
    outcomes = tmp_path / "outcomes.json"
    env = {
        **os.environ,
        "BEIR_HARNESS_TEST_OUTCOMES": str(outcomes),
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
    }
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "skip_one", "tests/test_formats.py", "-k", "atomic_writer"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stdout[-2000:]  # pytest alone passes on a skip
    check = subprocess.run(
        [sys.executable, str(Path(__file__)), "--require-ran", str(outcomes)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 1
    assert f"{row} skipped (on purpose)" in check.stderr
    assert "tests/test_formats.py::test_atomic_writer_disk_full" not in check.stderr  # it ran
    assert "tests/test_formats.py::test_qrels_errors[no-header] deselected" in check.stderr


def main(argv: list[str]) -> int:
    """`python tests/test_reliability.py --require-ran OUTCOMES.json`: exit 1 listing the rows that did not run."""
    import json

    if len(argv) != 2 or argv[0] != "--require-ran":
        print("usage: python tests/test_reliability.py --require-ran OUTCOMES.json", file=sys.stderr)
        return 2
    path = Path(argv[1])
    if not path.is_file() or not path.stat().st_size:
        print(
            f"{path}: no test outcomes (pytest did not finish, or BEIR_HARNESS_TEST_OUTCOMES was not set)",
            file=sys.stderr,
        )
        return 1
    missed = rows_that_did_not_run(json.loads(path.read_text(encoding="utf-8")))
    if missed:
        print(
            f"{len(missed)} RELIABILITY.md row(s) say their test runs in CI, but it did not run here:",
            *missed,
            sep="\n",
            file=sys.stderr,
        )
        return 1
    print(f"all {len(_rows())} RELIABILITY.md rows ran their tests")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
