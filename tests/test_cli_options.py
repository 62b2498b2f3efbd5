"""Options are declared once (harness.cli.options and the families' own), and every --help shows each option once."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import click
import pytest
from cli_runner import invoke

import harness
from harness.cli import cli
from harness.cli.group import as_flags

CLI = Path(harness.__file__).parent / "cli"


def _declared_flags(source: str) -> dict[str, list[int]]:
    """Each long flag written in a declaration (`click.option(...)`, `Option(...)`, `.but(...)`) → its lines; a
    boolean pair (``--cache/--no-cache``) declares both flags."""
    found = defaultdict(list)
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name not in ("option", "Option", "but"):
            continue
        for arg in node.args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("--"):
                for flag in arg.value.split("/"):
                    found[flag].append(node.lineno)
    return found


def _duplicates(sources: dict[str, str]) -> list[str]:
    places = defaultdict(list)
    for path, source in sources.items():
        for flag, lines in _declared_flags(source).items():
            places[flag] += [f"{path}:{line}" for line in lines]
    return sorted(f"{flag}: {', '.join(where)}" for flag, where in places.items() if len(where) > 1)


def test_every_option_is_declared_in_one_place():
    sources = {path.name: path.read_text(encoding="utf-8") for path in sorted(CLI.glob("*.py"))}
    duplicates = _duplicates(sources)
    assert not duplicates, "declared more than once (reuse it, with .but(...) for a command's own help):\n" + "\n".join(
        duplicates
    )


def test_the_declaration_check_sees_each_way_of_declaring():
    code = (
        'a = click.option("--json", "as_json", is_flag=True)\n'
        'b = Option("--split", default="test")\n'
        'c = SYSTEMS.but("--models", "models")\n'
        'd = Option("--cache/--no-cache", "use_cache")\n'
        'e = JSON.but(help="Print it.")\n'
    )
    assert dict(_declared_flags(code)) == {
        "--json": [1],
        "--split": [2],
        "--models": [3],
        "--cache": [4],
        "--no-cache": [4],
    }
    assert _duplicates({"a.py": code, "b.py": 'f = click.option("--no-cache", is_flag=True)\n'}) == [
        "--no-cache: a.py:4, b.py:1"
    ]


def _commands(group: click.Group, path: tuple[str, ...] = ()):
    for name, command in sorted(group.commands.items()):
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))


def _rows_by_section(text: str) -> dict[str, list[str]]:
    """The printed help's option rows (a line "  -x ..."), by the heading above them."""
    sections: dict[str, list[str]] = defaultdict(list)
    heading = None
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            heading = line[:-1]
        elif line.startswith("  -") and heading is not None:
            sections[heading].append(line.strip())
    return sections


@pytest.mark.parametrize("path", [path for path, _ in _commands(cli)], ids=" ".join)
def test_each_option_shows_in_exactly_one_section_of_its_help(path):
    command = cli
    for name in path:
        command = command.commands[name]
    text = invoke([*path, "--help"], terminal_width=400).output
    sections = _rows_by_section(text)
    ctx = click.Context(command, info_name=path[-1])
    for option in [p for p in command.get_params(ctx) if isinstance(p, click.Option) and not p.hidden]:
        first = option.get_help_record(ctx)[0]
        where = [title for title, rows in sections.items() for row in rows if row.split("  ")[0] == first]
        assert len(where) == 1, f"{' '.join(path)} --help shows {first!r} in {where or 'no section'}"
    hidden = [p.opts[0] for p in command.params if isinstance(p, click.Option) and p.hidden]
    assert not [flag for flag in hidden if any(row.startswith(flag) for rows in sections.values() for row in rows)]


def test_the_sectioned_commands_show_their_groups():
    text = invoke(["evaluate", "--help"], terminal_width=400).output
    sections = _rows_by_section(text)
    heads = {title: [row.split()[0] for row in rows] for title, rows in sections.items()}
    assert list(heads) == ["Data", "Model", "Endpoint", "Retrieval and index", "Engine", "Output", "Other"]
    assert heads["Endpoint"] == [
        "--endpoint",
        "--endpoint-batch-size",
        "--api-key-env",
        "--concurrency",
        "--endpoint-timeout",
        "--price-per-1m-tokens",
    ]
    assert heads["Output"] == ["--json", "--k", "--output-dir", "--name"]
    retrieve = _rows_by_section(invoke(["retrieve", "--help"], terminal_width=400).output)
    assert [row.split()[0] for row in retrieve["Output"]] == ["--out", "--name"]  # nothing scored: no --k
    assert not any(row.startswith("--split") for row in retrieve["Data"])


@pytest.mark.parametrize(
    ("setting", "flag"),
    [
        # what the hand-kept list said before the options carried it
        ("run_path", "--run"),
        ("rerank_model", "--rerank"),
        ("cache", "--cache/--no-cache"),
        ("local_cpus", "--ray-local"),
        ("address", "--ray-address"),
        ("gpus_per_worker", "--ray-gpus-per-worker"),
        ("kind", "--index"),
        ("sheets", "--sheet"),
        ("rerank_depth", "--rerank-depth"),
        ("base_url", "--base-url"),
        ("rounds", "--rounds"),
        # named after their flags
        ("top_k", "--top-k"),
        ("model", "--model"),  # judge's --llm sets `model` too; evaluate's --model is the one named so
        ("runs", "--runs"),
        ("download", "--download"),
        ("not_an_option", "--not-an-option"),
    ],
)
def test_library_messages_name_the_option_that_sets_a_setting(setting, flag):
    assert as_flags(f"give {'`' + setting + '`'} once") == f"give {flag} once"
