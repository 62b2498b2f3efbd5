"""Every time quoted in the README and docs/*.md says where it was measured: its paragraph names a host of
BENCHMARKS.md (``host A``, ``host C``) and whether the machine was quiet, or says the figure is not measured; a figure that is a setting (a
timeout, a budget, a resolution) is listed here with why. BENCHMARKS.md itself names the host of every section."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# A number with a unit of time (5 minutes, 290.8 s, 186 ms, 1.5 hours) or a throughput (9.8 docs/s).
TIME = re.compile(r"(?<![\w.])\d[\d,]*(\.\d+)?\s?(ms|s|sec|seconds?|min|minutes?|h|hours?|docs/s|documents/s)(?![\w/])")
HOST = re.compile(r"\bhosts? [A-Z]\b")
QUIET = re.compile(r"quiet|loaded|busy|load average")  # whether the machine was quiet ("... not recorded" counts)
SETTINGS = {  # (file, the text around the figure): a figure that is not a measurement
    ("docs/evaluate.md", "fails within 5 seconds"): "the connect timeout of a Ray address",
    ("docs/outputs.md", "to 0.1 ms"): "the resolution timings are stored at",
    ("docs/outputs.md", "(or 1 s, whichever is longer)"): "the latency probe's budget",
    ("docs/walkthrough-eval-set.md", "24 hour battery life"): "a document's text in the example data",
}
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
SKIPPED = {"docs/benchmarks.md", "docs/reliability.md", "docs/mutation-report.md"}  # includes and tool output


def _paragraphs(text: str) -> list[str]:
    """Blank-line separated blocks; a table's rows one by one; code blocks left out (commands, not claims)."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    blocks = []
    for block in re.split(r"\n\s*\n", text):
        rows = block.splitlines()
        blocks += rows if rows and all(r.lstrip().startswith("|") for r in rows) else [block]
    return blocks


def unplaced_times(page: str, text: str) -> list[str]:
    """The time figures of `text` whose paragraph neither names a host nor says not measured, less `SETTINGS`."""
    found = []
    for paragraph in _paragraphs(text):
        flat = " ".join(paragraph.split())
        if "not measured" in flat or (HOST.search(flat) and QUIET.search(flat)):
            continue
        for match in TIME.finditer(flat):
            around = flat[max(0, match.start() - 40) : match.end() + 40]
            if not any(p == page and phrase in around for p, phrase in SETTINGS):
                found.append(around)
    return found


@pytest.mark.parametrize("page", [p for p in PAGES if p not in SKIPPED])
def test_every_time_names_its_host(page):
    assert unplaced_times(page, (ROOT / page).read_text(encoding="utf-8")) == []


def test_the_check_finds_a_time_without_a_host_and_spares_one_with():
    assert unplaced_times("x.md", "Encoding SciFact takes 5 minutes.\n\nIt ran at 21.9 docs/s.") == [
        "Encoding SciFact takes 5 minutes.",
        "It ran at 21.9 docs/s.",
    ]
    assert unplaced_times("x.md", "It took 290.8 s on host A, quiet.\n\n| a | 3 ms |\n| host C, loaded | 4 ms |") == [
        "| a | 3 ms |"
    ]
    assert unplaced_times("x.md", "It took 290.8 s on host A.") == ["It took 290.8 s on host A."]  # quiet or not?
    assert unplaced_times("x.md", "```\nsleep 5 s\n```\nbm25s and 5,183 abstracts, 0.9 k1") == []


def test_benchmarks_names_its_hosts_as_env_prints_them():
    """The pages cite BENCHMARKS.md's hosts by letter: its host table must be there to say what each one is."""
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    assert re.search(r"^\| A \|.*\n\| B \|.*\n\| C \|", text, re.M)  # the host table, as `env` prints the CPU
