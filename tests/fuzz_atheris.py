"""Coverage-guided fuzzing of every parser with atheris (optional: ``pip install atheris``).

Usage (from the repository root):

    python tests/fuzz_atheris.py TARGET [libFuzzer options]
    python tests/fuzz_atheris.py corpus -max_total_time=600
    python tests/fuzz_atheris.py csv -atheris_runs=200000 fuzz-corpus/csv/

TARGET is one of: corpus, queries, qrels, run, csv, tsv, jsonl, json, eval-json, eval-yaml, metric.
The rule under test is the one the hypothesis tests state (tests/test_fuzz.py, tests/test_formats.py):
any input parses or raises a HarnessError, and a failed conversion leaves no output folder. Anything
else — another exception, a hang (``-timeout``), a crash — is reported by libFuzzer with the input that
caused it. ``tests/test_fuzz.py`` runs each target on a few seeds without atheris, and briefly under
atheris when it is installed, so this harness cannot rot unnoticed.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

if __name__ == "__main__":
    import atheris

    # Coverage feedback needs the package's bytecode instrumented as it is imported.
    instrumented = atheris.instrument_imports(include=["harness"])
else:
    instrumented = contextlib.nullcontext()
with instrumented:
    from harness.datasets.convert import ConvertOptions, convert_eval_set, convert_tables
    from harness.errors import HarnessError
    from harness.evaluation.metrics import parse_k_values, parse_metric
    from harness.io.formats import iter_corpus, iter_queries
    from harness.io.trec import read_qrels, read_run

WORK = Path(tempfile.mkdtemp(prefix="beir-harness-atheris-"))
GOOD = {"queries.csv": b"id,text\nq1,hello\n", "qrels.csv": b"qid,docid,score\nq1,d1,1\n"}
for _name, _content in GOOD.items():
    (WORK / _name).write_bytes(_content)


def _reader(name: str, read: Callable[[Path], object]) -> Callable[[bytes], None]:
    def target(data: bytes) -> None:
        path = WORK / name
        path.write_bytes(data)
        try:
            read(path)
        except HarnessError:
            pass

    return target


def _conversion(name: str, convert: Callable[[Path, Path], object]) -> Callable[[bytes], None]:
    def target(data: bytes) -> None:
        path, out = WORK / name, WORK / "out"
        path.write_bytes(data)
        try:
            convert(path, out)
        except HarnessError:
            if out.exists():
                raise AssertionError("a failed conversion left its output folder") from None
        shutil.rmtree(out, ignore_errors=True)

    return target


def _table(suffix: str) -> Callable[[bytes], None]:
    return _conversion(
        f"docs{suffix}",
        lambda corpus, out: convert_tables(corpus, WORK / "queries.csv", WORK / "qrels.csv", out, ConvertOptions()),
    )


def _metric(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    for parse in (parse_metric, parse_k_values):
        try:
            parse(text)
        except HarnessError:
            pass


TARGETS: dict[str, Callable[[bytes], None]] = {
    "corpus": _reader("corpus.jsonl", lambda p: list(iter_corpus(p))),
    "queries": _reader("queries.jsonl", lambda p: list(iter_queries(p))),
    "qrels": _reader("test.tsv", read_qrels),
    "run": _reader("run.trec", read_run),
    "csv": _table(".csv"),
    "tsv": _table(".tsv"),
    "jsonl": _table(".jsonl"),
    "json": _table(".json"),
    "eval-json": _conversion("eval.json", convert_eval_set),
    "eval-yaml": _conversion("eval.yaml", convert_eval_set),
    "metric": _metric,
}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        raise SystemExit(f"usage: python tests/fuzz_atheris.py {{{','.join(TARGETS)}}} [libFuzzer options]")
    target = TARGETS[sys.argv[1]]
    atheris.Setup([sys.argv[0], *sys.argv[2:]], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
