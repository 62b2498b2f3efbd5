"""The command group: global flags anywhere on the line, logging to stderr, and the one place where errors become
one line and an exit code (a `HarnessError` → 1, a command-line mistake → 2, Ctrl-C → 130).

The group knows its commands from the table of `harness.cli.commands` (name, defining module and function, summary):
it lists them and prints its --help from the table, and imports a command family (`harness.cli.running`, `.data`,
`.results`, `.machine`, `.scoring`, `.judging`, `.judgments`) only when one of its commands is asked for.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import sys
import textwrap

import click

from harness import __version__
from harness.cli.commands import COMMANDS, LazyCommands
from harness.errors import HarnessError


class _StderrHandler(logging.Handler):
    """Writes log lines to stderr through tqdm, so they don't break a progress bar."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            from tqdm import tqdm

            tqdm.write(as_flags(self.format(record)), file=sys.stderr)  # settings named as their options
        except Exception:  # noqa: BLE001 - logging must never raise
            self.handleError(record)


def _configure_logging(verbose: int, quiet: bool) -> None:
    # Quiet by default: warnings and our own progress bars; -v adds INFO lines, -vv DEBUG (and third-party
    # output); -q drops the progress bars too.
    level = logging.WARNING if quiet or not verbose else logging.INFO if verbose == 1 else logging.DEBUG
    if verbose < 2:
        # Hugging Face libraries draw their own bars (e.g. transformers' "Loading weights"): only with -vv.
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    root = logging.getLogger("harness")
    for handler in list(root.handlers):
        if isinstance(handler, _StderrHandler):
            root.removeHandler(handler)
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    root.addHandler(handler)
    root.setLevel(level)


def _options(command: click.Command):
    """Every option of `command` and of its subcommands."""
    yield from (param for param in command.params if isinstance(param, click.Option))
    for sub in getattr(command, "commands", {}).values():
        yield from _options(sub)


@functools.cache
def _flag_of() -> dict[str, str]:
    """Each setting a library message may name whose option is not named after it → that option, read from the
    commands' options: the library's names an option declares (`settings`: ``local_cpus`` → ``--ray-local``, a
    boolean pair shown whole, ``--cache/--no-cache``), then a parameter not named after its flag (``run_path`` →
    ``--run``) unless another option has the flag its name makes."""
    options = list(_options(cli))
    flags = {flag for option in options for flag in (*option.opts, *option.secondary_opts)}
    shown: dict[str, str] = {}
    for option in options:
        pair = "/".join(flag for flag in (*option.opts, *option.secondary_opts) if flag.startswith("--"))
        for name in getattr(option, "settings", ()):
            shown.setdefault(name, pair)
    for option in options:
        if option.name and f"--{option.name.replace('_', '-')}" not in flags:
            shown.setdefault(option.name, next((flag for flag in option.opts if flag.startswith("--")), ""))
    return shown


def as_flags(message: str) -> str:
    """A library message with each named setting (`top_k`) shown as the option that sets it (--top-k)."""
    return re.sub(
        r"`([a-z][a-z0-9_]*)`",
        lambda match: _flag_of().get(match.group(1)) or f"--{match.group(1).replace('_', '-')}",
        message,
    )


class _UsageError(click.UsageError):
    """A mistake in the command line: one line on stderr and exit code 2, in every command alike."""

    def show(self, file=None) -> None:
        where = self.ctx.command_path if self.ctx is not None else "beir-harness"
        click.echo(f"Error: {self.format_message()} (see '{where} --help')", err=True)


# -q is --quiet in every command (no command has a -q of its own).
GLOBAL_FLAGS = ("-q", "--quiet", "-v", "--verbose", "-vv", "-vvv")


def _globals_first(args: list[str]) -> list[str]:
    """The arguments with -q/-v moved before the subcommand, so that `evaluate DATA -q` works like `-q evaluate DATA`."""
    if "--" in args:
        cut = args.index("--")
        return _globals_first(args[:cut]) + args[cut:]
    moved = [i for i, arg in enumerate(args) if arg in GLOBAL_FLAGS]
    return [args[i] for i in moved] + [arg for i, arg in enumerate(args) if i not in set(moved)]


def _shortened(summary: str, limit: int) -> str:
    """A summary cut to `limit` characters at a word, as click shortens a command's help in its group's list."""
    return (
        summary
        if len(summary) <= limit
        else textwrap.shorten(summary, limit, placeholder="...", break_on_hyphens=False)
    )


class _Group(click.Group):
    """Turns HarnessError into one line (settings shown as options) and exit code 1, a command-line mistake into
    one line and exit code 2, and Ctrl-C into one line; takes the global flags anywhere on the line. Its commands
    come from the command table (`harness.cli.commands`): listed from it, each imported when it is asked for."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.commands = LazyCommands(COMMANDS)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self.commands)  # the names: nothing imported

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self.commands.get(cmd_name)  # imports that command's module alone

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands with their summaries, from the table: the group's --help imports no command (one added
        with `add_command`, outside the table, shows its own short help)."""
        names = [name for name in self.list_commands(ctx) if name in COMMANDS or not self.commands[name].hidden]
        if not names:
            return
        limit = formatter.width - 6 - max(map(len, names))
        rows = [
            (name, _shortened(COMMANDS[name].summary, limit))
            if name in COMMANDS
            else (name, self.commands[name].get_short_help_str(limit))
            for name in names
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def main(self, args=None, *rest, **kwargs):
        args = list(sys.argv[1:] if args is None else args)
        return super().main(_globals_first(args), *rest, **kwargs)

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as exc:
            raise exc if isinstance(exc, _UsageError) else _UsageError(exc.format_message(), exc.ctx) from None

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except _UsageError:
            raise
        except click.UsageError as exc:
            raise _UsageError(exc.format_message(), exc.ctx) from None
        except HarnessError as exc:
            if getattr(exc, "usage", False):  # an option's value found wrong only once the data was seen
                raise _UsageError(as_flags(str(exc)), ctx) from None
            raise click.ClickException(as_flags(str(exc))) from None
        except KeyboardInterrupt:
            click.echo(
                "interrupted: finished work is kept (cached embedding chunks, verified downloads, complete "
                "result files) and nothing half-written is; rerun the same command to resume",
                err=True,
            )
            ctx.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="beir-harness")
@click.option(
    "-v",
    "--verbose",
    count=True,
    help="More on stderr: -v adds progress notes (INFO), -vv debug logs and third-party output.",
)
@click.option("-q", "--quiet", is_flag=True, help="Only warnings and errors on stderr, no progress bars.")
@click.pass_context
def cli(ctx: click.Context, verbose: int, quiet: bool) -> None:
    """beir-harness: honest retrieval evaluation on BEIR-format data.

    Metrics agree exactly with trec_eval (pytrec_eval, as BEIR and MTEB use it). Results go
    to stdout, logs and progress bars to stderr.

    Example:

    \b
        beir-harness demo
        beir-harness evaluate scifact
    """
    _configure_logging(verbose, quiet)
    ctx.obj = {"progress": not quiet}


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="beir-harness")
