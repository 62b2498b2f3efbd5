"""The command line run in-process, as the tests run it."""

from __future__ import annotations

from click.testing import CliRunner, Result

from harness.cli import cli


def invoke(args, **options) -> Result:
    """``beir-harness ARGS`` run by click's CliRunner in this process: ``result.stdout`` and ``result.stderr``
    apart, ``result.output`` both interleaved; `options` go to ``CliRunner.invoke`` (input, env,
    catch_exceptions, terminal_width...)."""
    return CliRunner().invoke(cli, args, **options)
