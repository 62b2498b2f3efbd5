"""The beir-harness command line: parse options, call the library, print the result.

Results go to stdout; logs and progress bars go to stderr. A `HarnessError` becomes one line
on stderr and exit code 1; anything else is a bug and keeps its traceback.

The group, its error translation and logging live in `harness.cli.group`; the shared options in
`harness.cli.options`; each command family in a module of its own, which registers its commands on `cli`
when imported here: `running` (demo, evaluate, retrieve, bench, crosscheck), `data` (convert, validate,
datasets), `results` (report, export, fuse, compare, inspect), `machine` (cache, env), `judging` (pool),
`judgments` (merge, agreement), `scoring` (score).
"""

# each family registers its commands on `cli` when imported
from harness.cli import data, judging, judgments, machine, results, running, scoring  # noqa: F401
from harness.cli.group import cli, main

__all__ = ["cli", "main"]
