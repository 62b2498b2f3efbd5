"""docs/walkthrough-eval-set.md, executed: every ``$ beir-harness ...`` line of its console blocks runs, in the
page's order, in one fresh folder, and prints exactly the lines the page shows under it; each file the page
shows (``<!-- file: PATH -->`` before its block) is written there first. Where headless Chromium is at hand,
the judges' exports shown are first typed into the pool's judging page with its keys, every judge in one
browser profile (each starting from 0 judged, never another's progress), and what the page exports must be
the file the page shows (so the exports are the page's, not hand-written). The page starts from nothing:
documents and questions converted without judgments."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from browser import CHROMIUM
from browser import launch as browser_launch
from cli_runner import invoke

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "walkthrough-eval-set.md"
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d")  # a result's time: the one line that varies
BLOCK = re.compile(r"(?:<!-- file: (?P<file>\S+) -->\n)?```(?P<lang>\w+)\n(?P<body>.*?)```", re.S)


def steps(text: str) -> list[tuple[str, str, list[str]]]:
    """("file", path, its lines) and ("run", command, the lines shown under it), in the page's order."""
    found = []
    for match in BLOCK.finditer(text):
        if match["file"]:
            found.append(("file", match["file"], match["body"].splitlines()))
        elif match["lang"] == "console":
            for chunk in re.split(r"^\$ ", match["body"], flags=re.M)[1:]:
                command, *shown = chunk.rstrip("\n").split("\n")
                found.append(("run", command, shown))
    return found


def run(command: str) -> list[str]:
    """The lines `command` (a ``beir-harness`` line) prints, stdout and stderr as a terminal shows them."""
    words = shlex.split(command)
    assert words[0] == "beir-harness", f"{PAGE.name}: {command!r} is not a beir-harness command"
    result = invoke(words[1:])
    assert result.exit_code == 0, f"{command}\n{result.output}"
    return [line.rstrip() for line in result.output.splitlines()]


class Judges:
    """One headless Chromium, one browser profile, for every judge of the page (judges sharing a computer):
    each export is typed into the pool's judging page under its annotator's name."""

    def __init__(self):
        self.manager = self.page = None
        if CHROMIUM.exists():
            sync_api = pytest.importorskip("playwright.sync_api")
            self.manager = sync_api.sync_playwright().start()
            self.browser = browser_launch(self.manager)
            self.page = self.browser.new_context(accept_downloads=True).new_page()  # shared by every judge

    def typed_export(self, path: Path, lines: list[str], downloads: Path) -> str | None:
        """The page's CSV export after typing the grades of `lines` (query_id,doc_id,grade,annotator) in its
        order, as that annotator; None without Chromium. A judge new to this browser starts at 0 judged."""
        if self.page is None:
            return None
        rows = [line.split(",") for line in lines[1:]]
        page = self.page
        page.goto(path.as_uri())
        page.wait_for_selector("body[data-ready='1']")
        assert page.inner_text("#progress") == "no annotator yet"  # the page asks who is judging first
        page.fill("#annotator", rows[0][3])
        page.press("#annotator", "Enter")
        page.wait_for_selector(f"body[data-annotator='{rows[0][3]}']")
        assert page.inner_text("#progress").startswith("0 of ")  # never another judge's progress
        for _, _, grade, _ in rows:
            page.keyboard.press(grade)
        with page.expect_download() as info:
            page.click("#export-csv")
        target = downloads / info.value.suggested_filename
        info.value.save_as(target)
        return target.read_text(encoding="utf-8")

    def close(self) -> None:
        if self.manager is not None:
            self.browser.close()
            self.manager.stop()


def test_every_command_of_the_walkthrough_prints_what_the_page_shows(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "downloads").mkdir()
    done = steps(PAGE.read_text(encoding="utf-8"))
    assert sum(kind == "run" for kind, _, _ in done) >= 8
    assert done[0][:2] == ("file", "docs.csv") and done[2][1].startswith("beir-harness convert ")
    assert "--qrels" not in done[2][1]  # from nothing: documents and questions, no judgments
    judges = Judges()
    try:
        for kind, what, lines in done:
            if kind == "file":
                path = tmp_path / what
                if what.startswith("pool/judgments-"):
                    exported = judges.typed_export(path.parent / "judge.html", lines, tmp_path / "downloads")
                    assert exported in (None, "\n".join(lines) + "\n"), f"the page exports\n{exported}"
                    pool_id = json.loads((tmp_path / "pool" / "manifest.json").read_text())["pool_id"]
                    assert path.name == f"judgments-{pool_id}-{lines[1].split(',')[3]}.csv"  # the page's own name
                path.write_text("\n".join(lines) + "\n", encoding="utf-8")
            else:
                assert [TIME.sub("TIME", line) for line in run(what)] == [TIME.sub("TIME", line) for line in lines], (
                    what
                )
    finally:
        judges.close()
