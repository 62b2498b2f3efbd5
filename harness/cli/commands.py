"""The command table, after pip's `commands_dict`: each command's name, the module and function that define it, and
its one-line summary. The group (`harness.cli.group`) lists the commands and prints its --help from this table alone,
and imports a command's module only when that command is asked for, so `beir-harness --help` loads no command
(`tests/test_cli.py` holds each summary to its command's own first sentence, so the two cannot drift).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import NamedTuple

import click


class CommandInfo(NamedTuple):
    """Where a command is defined (`module`, its `function`: the click command) and its summary in the group's
    --help (the first sentence of its help)."""

    module: str
    function: str
    summary: str

    def load(self) -> click.Command:
        # As an import statement imports (`importlib.import_module` would hide it from `python -X importtime`).
        return getattr(__import__(self.module, fromlist=[self.function]), self.function)


COMMANDS: dict[str, CommandInfo] = {
    "bench": CommandInfo("harness.cli.running", "bench", "Evaluate a grid of models × datasets; resumable."),
    "cache": CommandInfo("harness.cli.machine", "cache", "List, prune or clear the embedding cache."),
    "compare": CommandInfo(
        "harness.cli.results", "compare", "Paired significance of SECOND against FIRST, per metric."
    ),
    "convert": CommandInfo(
        "harness.cli.data", "convert", "Convert your own eval set into a BEIR folder, checking it first."
    ),
    "crosscheck": CommandInfo(
        "harness.cli.running",
        "crosscheck",
        "Run BEIR's own pipeline beside ours and print both metric sets and their differences.",
    ),
    "datasets": CommandInfo("harness.cli.data", "datasets", "List, download, import and remove BEIR datasets."),
    "demo": CommandInfo(
        "harness.cli.running",
        "demo",
        "Score the bundled lesson eval set (15 products, 5 queries) with a model.",
    ),
    "env": CommandInfo(
        "harness.cli.machine",
        "env",
        "Print versions, the host, torch's devices and the folders in use (for bug reports).",
    ),
    "evaluate": CommandInfo(
        "harness.cli.running",
        "evaluate",
        "Evaluate a model, or an external run, on a BEIR folder or dataset.",
    ),
    "export": CommandInfo(
        "harness.cli.results",
        "export",
        "Export results for other tools: MTEB's results layout, per-query CSV, or TREC runs.",
    ),
    "fuse": CommandInfo(
        "harness.cli.results",
        "fuse",
        "Fuse the runs of two or more results (hybrid search) and score the fused run; or, with --out, fuse run "
        "files (no qrels needed) into one run.",
    ),
    "inspect": CommandInfo(
        "harness.cli.results",
        "inspect",
        "Show the worst queries of a result, or where two results differ most.",
    ),
    "judge": CommandInfo(
        "harness.cli.judging",
        "judge",
        "Pre-judge a pool with an LLM, as its own annotator llm:MODEL, to be measured before it is trusted.",
    ),
    "judgments": CommandInfo(
        "harness.cli.judgments",
        "judgments",
        "Merge judgments into a BEIR folder and measure how far annotators agree.",
    ),
    "pool": CommandInfo(
        "harness.cli.judging",
        "pool",
        "Pool the documents to judge (TREC depth-k) and write them with a blind judging page.",
    ),
    "report": CommandInfo(
        "harness.cli.results",
        "report",
        "Tabulate results (models × datasets) for papers, with published scores and significance.",
    ),
    "retrieve": CommandInfo(
        "harness.cli.running",
        "retrieve",
        "Search a corpus for every query and write a TREC run; no judgments needed, nothing scored.",
    ),
    "score": CommandInfo(
        "harness.cli.scoring", "score", "Score a run file against a qrels file, the trec_eval way: QRELS RUN."
    ),
    "validate": CommandInfo(
        "harness.cli.data", "validate", "Check a BEIR folder and summarise it; exit 1 if it has errors."
    ),
}


class LazyCommands(Mapping):
    """A group's commands by name, as `click.Group.commands` holds them: each imported from its module the first
    time it is asked for (`commands["evaluate"]`); iterating gives the names and imports nothing. A command added
    with `add_command` is kept as given."""

    def __init__(self, table: Mapping[str, CommandInfo]) -> None:
        self.table = table
        self.loaded: dict[str, click.Command] = {}

    def __getitem__(self, name: str) -> click.Command:
        if name not in self.loaded:
            if name not in self.table:
                raise KeyError(name)
            self.loaded[name] = self.table[name].load()
        return self.loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self.loaded[name] = command

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*self.table, *self.loaded]))

    def __len__(self) -> int:
        return len(dict.fromkeys([*self.table, *self.loaded]))
