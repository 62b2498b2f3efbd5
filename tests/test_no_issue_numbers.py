"""No issue numbers in code or docs: nothing in the repository says what they were.

A figure is cited by its BENCHMARKS.md section title, a decision by the docs page that explains it, and a
change dated by what it changed ("before the term-ids build"), never by the number of the request for it.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Built in two pieces so that this file's own source does not match it: the word, an optional plural, then a
# space or hyphen and digits (the hyphen catches the "pre-...-N" and "the ...-N host" forms too).
WORD = "iss" + "ue"
CITATION = re.compile(r"(?i)\b" + WORD + r"(?:s|'s)?[ -](?:(?:item|point|must-have) )?\d+")


def _checked_files() -> list[Path]:
    files: list[Path] = []
    for folder in ("harness", "tests", "benchmarks", "tools"):
        files += sorted((ROOT / folder).rglob("*.py"))
    files += sorted((ROOT / "docs").glob("*.md"))
    files += [ROOT / name for name in ("README.md", "RELIABILITY.md", "BENCHMARKS.md", "mkdocs.yml", "setup.cfg")]
    return [path for path in files if path.is_file()]


def test_the_pattern_finds_what_it_forbids():
    for text in (
        "see " + WORD + " 34",
        WORD.title() + " 31: a title",
        WORD + "s 14, 29",
        "pre-" + WORD + "-34",
        WORD + " item 2",
        "the " + WORD + "'s point 3",
    ):
        assert CITATION.search(text), text
    for text in (WORD + "s reported upstream", "the " + WORD + "'s value", "beir#74", "tissue 3"):
        assert not CITATION.search(text), text


def test_no_file_cites_an_issue_number():
    files = _checked_files()
    assert any(path.name == "BENCHMARKS.md" for path in files) and len(files) > 50
    found = []
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if CITATION.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:160]}")
    assert not found, (
        "issue numbers say nothing to a reader: cite the BENCHMARKS.md section title, the docs page, or say in words "
        "what changed\n" + "\n".join(found)
    )
