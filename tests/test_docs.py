"""Every command has help with an example and is documented in the README."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from harness.cli import cli

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def _commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    found = []
    for name, command in group.commands.items():
        found.append((f"{prefix}{name}", command))
        if isinstance(command, click.Group):
            found += _commands(command, f"{prefix}{name} ")
    return found


@pytest.mark.parametrize(("name", "command"), _commands(cli))
def test_command_has_help_and_is_in_readme(name, command):
    assert command.help and "Example:" in command.help
    assert f"beir-harness {name}" in README
    for param in command.params:
        if isinstance(param, click.Option):
            assert param.help, f"{name} {param.opts} has no help"
            assert param.opts[0] in README, f"{param.opts[0]} of {name} is not in README.md"


def test_readme_starts_with_the_two_setup_commands():
    head = README.split("\n## ", 1)[0]
    assert "pip install -e . && beir-harness demo" in head
    assert "pip install -e '.[test]' && pytest" in head
