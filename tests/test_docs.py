"""The documentation: every command has its docs page, the command-line reference generated from the commands
(docs/cli.md, mkdocs-click) shows every command's help and every option as --help does, the site builds strictly
(a broken link or a page missing from the navigation fails), and the README stays a short entry point."""

from __future__ import annotations

import html
import inspect
import re
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
BENCHMARKS = ROOT / "BENCHMARKS.md"
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
def test_command_has_help_and_a_section_in_its_page(name, command):
    page = (DOCS / PAGES[name.split()[0]]).read_text(encoding="utf-8")
    assert command.help and "Example:" in command.help
    assert f"beir-harness {name}" in page
    for param in command.params:
        if isinstance(param, click.Option):
            assert param.help, f"{name} {param.opts} has no help"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built once for this file's tests."""
    site = tmp_path_factory.mktemp("docs") / "site"
    proc = _build(ROOT, site)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return site


def _reference_sections(page: str) -> dict[str, str]:
    """The generated reference's text under each command's heading (id ``beir-harness-datasets-list``), tags
    stripped and entities decoded, as a reader of the page sees it."""
    heads = list(re.finditer(r'<h[1-6] id="(beir-harness[^"]*)"', page))
    last = page.find("</article>")
    ends = [head.start() for head in heads[1:]] + [last if last >= 0 else len(page)]
    return {
        head.group(1): html.unescape(re.sub(r"<[^>]+>", "", page[head.start() : end]))
        for head, end in zip(heads, ends, strict=True)
    }


def _reference_entries() -> list[tuple[str, click.Command]]:
    return [("", cli), *((f" {name}", command) for name, command in _commands(cli))]


@pytest.fixture(scope="module")
def reference(site) -> dict[str, str]:
    return _reference_sections((site / "cli" / "index.html").read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("name", "command"), _reference_entries(), ids=[f"beir-harness{n}" for n, _ in _reference_entries()]
)
def test_the_reference_shows_each_command_as_its_help_does(reference, name, command):
    """docs/cli.md is generated at build time: each command's section holds its help text, word for word (Markdown
    may eat nothing: an unquoted ``<split>`` would vanish as an HTML tag), and every option --help shows, as the
    first column of --help shows it (flags and metavar); a hidden option stays out."""
    anchor = "beir-harness" + name.replace(" ", "-")
    assert anchor in reference, f"docs/cli.md has no section for 'beir-harness{name}'"
    text = reference[anchor]
    words = " ".join(text.split())
    lines = [line for line in inspect.cleandoc(command.help or "").splitlines() if line.strip() != "\b"]
    described = " ".join(" ".join(lines).replace("`", "").split())
    assert described in words, f"the reference shows 'beir-harness{name}' --help's text otherwise"
    root = click.Context(cli, info_name="beir-harness", **cli.context_settings)  # -h, --help: inherited
    ctx = click.Context(command, info_name=name.split()[-1], parent=root, **command.context_settings) if name else root
    rows = [line.strip() for line in text.splitlines() if line.startswith("  -")]
    for param in command.get_params(ctx):
        if not isinstance(param, click.Option):
            continue
        if param.hidden:
            assert not any(row.startswith(param.opts[0]) for row in rows), f"hidden {param.opts[0]} is shown"
            continue
        first = param.get_help_record(ctx)[0]
        assert any(row.split("  ")[0] == first for row in rows), f"{first!r} of 'beir-harness{name}' is not shown"


def test_the_reference_check_sees_what_markdown_eats():
    """The section reader above is what the reference test relies on: a tag Markdown made of ``<split>`` and a
    section cut at the next command's heading."""
    page = (
        '<h3 id="beir-harness-a">beir-harness a</h3><p>qrels/<split>.tsv &amp; more</p>'
        '\n<pre><code>  --k TEXT  Cutoffs.\n</code></pre><h3 id="beir-harness-b">b</h3><p>x</p></article>'
    )
    sections = _reference_sections(page)
    assert list(sections) == ["beir-harness-a", "beir-harness-b"]
    assert "qrels/.tsv & more" in sections["beir-harness-a"] and "beir-harness-b" not in sections["beir-harness-a"]
    assert "  --k TEXT  Cutoffs." in sections["beir-harness-a"].splitlines()


def test_readme_is_a_short_entry_point():
    head = README.split("\n## ", 1)[0]
    assert "pip install -e . && beir-harness demo" in head
    assert "pip install -e '.[test]' && pytest" in head
    assert len(README.splitlines()) <= 200
    for name in set(PAGES):
        assert f"beir-harness {name}" in README, f"the README's command table lacks {name}"


def test_benchmarks_is_short_and_opens_with_its_headline():
    """BENCHMARKS.md is for users: at most 600 lines (its history is in git), its first section the headline table."""
    text = BENCHMARKS.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 600, f"BENCHMARKS.md has {len(text.splitlines())} lines: 600 at most"
    first = re.search(r"^## (.*)$", text, re.M)
    assert first and first.group(1).startswith("Headline"), "BENCHMARKS.md's first section must be its headline table"
    assert re.search(r"^\|", text[first.end() :].split("\n## ", 1)[0], re.M), "the headline section has no table"


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


def test_the_site_builds_strictly(site):
    assert (site / "conventions" / "index.html").is_file()
    reliability = (site / "reliability" / "index.html").read_text(encoding="utf-8")
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
