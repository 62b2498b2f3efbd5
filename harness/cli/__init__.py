"""The beir-harness command line: parse options, call the library, print the result.

Results go to stdout; logs and progress bars go to stderr. A `HarnessError` becomes one line
on stderr and exit code 1; anything else is a bug and keeps its traceback.

The group, its error translation and logging live in `harness.cli.group`; its command table (each command's name,
defining module and summary) in `harness.cli.commands`, so that the group's --help and a command's run import that
command's family alone; the shared options in `harness.cli.options`; each command family in a module of its own:
`running` (demo, evaluate, retrieve, bench, crosscheck), `data` (convert, validate, datasets), `results` (report,
export, fuse, compare, inspect), `machine` (cache, env), `judging` (pool, judge), `judgments` (merge, agreement,
rankings, reusability), `scoring` (score).
"""

from harness.cli.group import cli, main

__all__ = ["cli", "main"]
