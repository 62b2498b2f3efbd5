"""The option machinery of the command line, after pip's `cmdoptions`: an `Option` is declared once and applied to
every command that takes it (`Option.but` is the one explicit way for a command to change its default, help or
type); an `OptionGroup` carries its options and the title of their --help section, and a command composes the groups
it takes, one decorator each; a `Sectioned` command prints its --help by those sections. An attribute read from
the library (a registry's choices, a default) is `Deferred`: read when a command that takes the option is built, so
loading the declarations loads no registry. Nothing here names an option: the declarations are in
`harness.cli.options` and the commands' own modules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

OTHER = "Other"  # the section of an option no group carries (--help)

# Every group's title, in the order the groups were made: the order of a sectioned --help's sections.
_TITLES: list[str] = []


class GroupedOption(click.Option):
    """A click option that knows its --help section and the library's names for the setting it sets."""

    def __init__(self, *args, section: str | None = None, settings: tuple[str, ...] = (), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.section = section
        self.settings = settings


class Deferred:
    """An option's attribute read from the library (through `harness.api.choices`) when a command that takes the
    option is built: `read()` gives the value."""

    def __init__(self, read: Callable[[], Any]) -> None:
        self.read = read


class Option:
    """One option, declared once: its names (flags, then the parameter's name if it is not the flag's) and click's
    attributes. `settings`: the names the library's messages give what it sets, where those are not the parameter's
    (`local_cpus` for --ray-local), so that an error names the option."""

    def __init__(self, *names: str, settings: tuple[str, ...] = (), **attributes) -> None:
        self.names = names
        self.settings = settings
        self.attributes = attributes

    @property
    def flags(self) -> tuple[str, ...]:
        """The long flags, a boolean pair's second one included (``--cache/--no-cache`` → both)."""
        return tuple(flag for name in self.names if name.startswith("--") for flag in name.split("/"))

    def but(self, *names: str, **changes) -> Option:
        """This option as one command takes it: `changes` to its attributes (a default, help, type); `names` more
        flags for it there (``-m``, an alias such as bench's ``--models``, shown first) or another parameter name.
        Its declared flags stay."""
        flags = tuple(name for name in names if name.startswith("-"))
        dest = tuple(name for name in names if not name.startswith("-"))
        kept = tuple(name for name in self.names if name.startswith("-") or not dest)
        return Option(*flags, *kept, *dest, settings=self.settings, **{**self.attributes, **changes})

    def __call__(self, command, section: str | None = None):
        attributes = {
            name: value.read() if isinstance(value, Deferred) else value for name, value in self.attributes.items()
        }
        return click.option(*self.names, cls=GroupedOption, section=section, settings=self.settings, **attributes)(
            command
        )


class OptionGroup:
    """Options that go together (data, model, index, engine, endpoint, output), under one --help section."""

    def __init__(self, title: str, *options: Option) -> None:
        self.title = title
        self.options = options
        if title not in _TITLES:
            _TITLES.append(title)

    def plus(self, *options: Option) -> OptionGroup:
        """This group's section with a command's own `options` first."""
        return OptionGroup(self.title, *options, *self.options)

    def but(self, option: Option, **changes) -> OptionGroup:
        """This group with `option` as `option.but(**changes)`: a command's own default or help of it."""
        if option not in self.options:
            raise ValueError(f"{option.flags} is not in the {self.title} group")
        return OptionGroup(self.title, *(o.but(**changes) if o is option else o for o in self.options))

    def without(self, *options: Option) -> OptionGroup:
        """This group less `options` (a command that has no use for them)."""
        return OptionGroup(self.title, *(o for o in self.options if o not in options))

    def __call__(self, command):
        for option in reversed(self.options):
            command = option(command, section=self.title)
        return command


def compose(*decorators):
    """One decorator applying `decorators` (options, groups) in the order given, as if stacked in that order."""

    def apply(command):
        for decorator in reversed(decorators):
            command = decorator(command)
        return command

    return apply


def sections(command: click.Command, ctx: click.Context) -> dict[str, list[tuple[str, str]]]:
    """A command's --help rows by section, in the sections' order; an option no group carries under "Other"."""
    rows: dict[str, list[tuple[str, str]]] = {}
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx) if isinstance(param, click.Option) else None
        if record is not None:
            rows.setdefault(getattr(param, "section", None) or OTHER, []).append(record)
    return {title: rows[title] for title in [*_TITLES, OTHER] if rows.get(title)}


class Sectioned(click.Command):
    """A command whose --help shows its options by their groups' sections (Data, Model, ..., Output)."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        for title, rows in sections(self, ctx).items():
            with formatter.section(title):
                formatter.write_dl(rows)
