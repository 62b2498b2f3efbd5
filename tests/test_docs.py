"""The documentation: every command and option is in its docs page, the site builds strictly (a broken link
or a page missing from the navigation fails), and the README stays a short entry point."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest

from harness.cli import cli

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = ROOT / "docs"
# The page that documents each top-level command (and its subcommands).
PAGES = {
    "demo": "evaluate.md",
    "evaluate": "evaluate.md",
    "retrieve": "evaluate.md",
    "bench": "bench.md",
    "report": "reports.md",
    "compare": "reports.md",
    "inspect": "reports.md",
    "export": "reports.md",
    "fuse": "fuse.md",
    "crosscheck": "fuse.md",
    "cache": "cache-and-env.md",
    "env": "cache-and-env.md",
    "datasets": "datasets.md",
    "convert": "datasets.md",
    "validate": "datasets.md",
    "pool": "build-an-eval-set.md",
    "judge": "build-an-eval-set.md",
    "judgments": "judgments.md",
    "score": "score.md",
}


def _commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    found = []
    for name, command in group.commands.items():
        found.append((f"{prefix}{name}", command))
        if isinstance(command, click.Group):
            found += _commands(command, f"{prefix}{name} ")
    return found


def test_every_command_has_a_page():
    assert set(PAGES) == set(cli.commands), "a new command needs a row in PAGES and a section in docs/"


@pytest.mark.parametrize(("name", "command"), _commands(cli))
def test_command_has_help_and_every_option_is_in_its_page(name, command):
    page = (DOCS / PAGES[name.split()[0]]).read_text(encoding="utf-8")
    # bench and retrieve say they take evaluate's options; those are documented once, with evaluate.
    shared = {param.opts[0] for param in cli.commands["evaluate"].params} if name in ("bench", "retrieve") else set()
    evaluate_page = (DOCS / PAGES["evaluate"]).read_text(encoding="utf-8")
    assert command.help and "Example:" in command.help
    assert f"beir-harness {name}" in page
    for param in command.params:
        if isinstance(param, click.Option):
            assert param.help, f"{name} {param.opts} has no help"
            where = evaluate_page if param.opts[0] in shared else page
            assert param.opts[0] in where, f"{param.opts[0]} of {name} is not in docs/{PAGES[name.split()[0]]}"


def test_readme_is_a_short_entry_point():
    head = README.split("\n## ", 1)[0]
    assert "pip install -e . && beir-harness demo" in head
    assert "pip install -e '.[test]' && pytest" in head
    assert len(README.splitlines()) <= 200
    for name in set(PAGES):
        assert f"beir-harness {name}" in README, f"the README's command table lacks {name}"


def test_readme_and_docs_show_the_same_exit_codes():
    def table(text: str) -> str:
        return "\n".join(
            line
            for line in text.splitlines()
            if line.startswith("|")
            and ("exit code" in line or line.startswith(("| 0 ", "| 1 ", "| 2 ", "| 130 ", "|---:")))
        )

    assert table(README) and table(README) == table((DOCS / "index.md").read_text(encoding="utf-8"))


def test_no_example_needs_a_folder_beside_the_checkout():
    for path in [ROOT / "README.md", *DOCS.glob("*.md")]:
        assert "../shared" not in path.read_text(encoding="utf-8"), path


def _build(source: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(source / "mkdocs.yml"), "-d", str(site)],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )


def test_the_site_builds_strictly(tmp_path):
    proc = _build(ROOT, tmp_path / "site")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "site" / "conventions" / "index.html").is_file()
    reliability = (tmp_path / "site" / "reliability" / "index.html").read_text(encoding="utf-8")
    assert "test_bad_input_writes_nothing_and_exits_non_zero" in reliability  # the snippet was included


def test_a_broken_link_fails_the_build(tmp_path):
    copy = tmp_path / "copy"
    for name in ("mkdocs.yml", "RELIABILITY.md", "BENCHMARKS.md"):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, copy / name)
    shutil.copytree(DOCS, copy / "docs")
    with open(copy / "docs" / "bench.md", "a", encoding="utf-8") as handle:
        handle.write("\nSee [the missing page](nowhere.md).\n")
    proc = _build(copy, tmp_path / "site")
    assert proc.returncode != 0 and "nowhere.md" in proc.stdout + proc.stderr
