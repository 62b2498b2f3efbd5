"""Validate any BEIR folder (ours, downloaded, or hand-made) and summarise it.

Unlike the readers used for evaluation, validation does not stop at the first problem: it reads
every file once, lists every problem with its file and line (the first `MAX_LISTED`, then a
count), and summarises the data. Errors (malformed lines, duplicate ids, judgments that name
unknown queries or documents, missing files) make the folder invalid; warnings (empty texts) and
notes (CRLF line endings) do not.
"""

from __future__ import annotations

import gzip
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import DatasetError, FormatError
from harness.io.exclusions import EXCLUSIONS_FOLDER, iter_exclusions, unknown_exclusions
from harness.io.formats import find_file, iter_corpus, iter_qrels, iter_queries, misnamed_id, read_qrels
from harness.io.ids import normalisation_hint
from harness.records import doc_text

MAX_LISTED = 50


@dataclass(frozen=True)
class Problem:
    """One finding: ``severity`` is ``error``, ``warning`` or ``note``."""

    severity: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.severity:<7} {self.where}: {self.message}"


@dataclass
class SplitSummary:
    """One ``qrels/<split>.tsv``: its judgments and grades."""

    split: str
    path: str
    judgments: int = 0
    judged_queries: int = 0
    grades: dict[int, int] = field(default_factory=dict)

    @property
    def mean_judged_per_query(self) -> float:
        return self.judgments / self.judged_queries if self.judged_queries else 0.0


@dataclass
class ValidationReport:
    """Everything `validate_folder` found."""

    folder: str
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    n_docs: int = 0
    n_queries: int = 0
    mean_doc_words: float = 0.0
    splits: list[SplitSummary] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    unlisted: Counter = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        """True when there is no error (warnings and notes are allowed)."""
        return not self.count("error")

    @property
    def judged(self) -> bool:
        """False for a folder not judged yet (no qrels file, or each a header only): valid, to be pooled."""
        return any(s.judgments for s in self.splits)

    def count(self, severity: str) -> int:
        return sum(p.severity == severity for p in self.problems) + self.unlisted[severity]

    def add(self, severity: str, where: str, message: str) -> None:
        if len(self.problems) < MAX_LISTED:
            self.problems.append(Problem(severity, where, message))
        else:
            self.unlisted[severity] += 1

    def add_error(self, error: FormatError) -> None:
        where = error.path if error.line_no is None else f"{error.path}:{error.line_no}"
        self.add("error", where, error.reason + (f" ({error.hint})" if error.hint else ""))

    def to_json(self) -> dict[str, Any]:
        return {
            "folder": self.folder,
            "ok": self.ok,
            "judged": self.judged,
            "errors": self.count("error"),
            "warnings": self.count("warning"),
            "files": self.files,
            "n_docs": self.n_docs,
            "n_queries": self.n_queries,
            "mean_doc_words": self.mean_doc_words,
            "splits": [
                {
                    "split": s.split,
                    "path": s.path,
                    "judgments": s.judgments,
                    "judged_queries": s.judged_queries,
                    "mean_judged_per_query": s.mean_judged_per_query,
                    "grades": {str(g): n for g, n in sorted(s.grades.items())},
                }
                for s in self.splits
            ],
            "problems": [p.__dict__ for p in self.problems],
            "problems_not_listed": sum(self.unlisted.values()),
        }

    def format_text(self) -> str:
        """A human-readable summary and the problem list."""
        errors, warnings = self.count("error"), self.count("warning")
        status = "OK" if self.ok else f"INVALID: {errors} error(s)"
        if warnings:
            status += f", {warnings} warning(s)"
        if self.ok and not self.judged:
            status += f"; no judgments yet: pool it (beir-harness pool {self.folder} --systems ... --out POOL)"
        lines = [f"{self.folder}: {status}"]
        for name, info in self.files.items():
            notes = [n for n, on in (("gzip", info["gzip"]), ("CRLF line endings", info["crlf"])) if on]
            lines.append(f"  {name}" + (f" ({', '.join(notes)})" if notes else ""))
        lines.append(f"documents  {self.n_docs:>9,}   mean length {self.mean_doc_words:.1f} words (title + text)")
        lines.append(f"queries    {self.n_queries:>9,}")
        for s in self.splits:
            grades = ", ".join(f"{g}: {n:,}" for g, n in sorted(s.grades.items()))
            lines.append(
                f"qrels {s.split:<6}{s.judgments:>8,} judgments, {s.judged_queries:,} judged queries, "
                f"{s.mean_judged_per_query:.2f} judged docs/query, grades {{{grades}}}"
            )
        if self.problems:
            lines.append("problems:")
            lines += [f"  {problem}" for problem in self.problems]
            hidden = sum(self.unlisted.values())
            if hidden:
                lines.append(f"  ... and {hidden:,} more")
        return "\n".join(lines)


def _file_info(path: Path) -> dict[str, Any]:
    gz = path.name.endswith(".gz")
    try:
        with gzip.open(path, "rb") if gz else open(path, "rb") as handle:
            head = handle.read(1 << 16)
    except (OSError, EOFError):
        head = b""
    return {"path": str(path), "gzip": gz, "crlf": b"\r\n" in head}


def _unless_misnamed(report: ValidationReport, path: Path | None) -> Path | None:
    """A file whose records name their id ``id`` (or another alias) gets one error with the fix, not one per
    line, and is left out of the checks that need its ids (None)."""
    hint = misnamed_id(path) if path is not None else None
    if hint is None:
        return path
    report.add("error", str(path), f'the first record has no "_id" ({hint}); the checks that need its ids were skipped')
    return None


def validate_folder(root: str | Path) -> ValidationReport:
    """Check a BEIR folder and summarise it.

    Checks: the files exist; every corpus/queries line is a JSON object with ``_id`` and text;
    ids are unique; each qrels file has BEIR's header, three columns and integer grades, no
    conflicting duplicate, and only ids present in queries.jsonl and corpus.jsonl; each excluded pairs file
    (``excluded/<split>.tsv``) its header, two columns and only ids of the folder; no id holds
    whitespace (a TREC run or qrels line cannot). Notes empty texts (warning) and CRLF line
    endings (note).

    Args:
        root: The folder.

    Returns:
        The report; ``report.ok`` is False when any error was found.

    Raises:
        DatasetError: `root` is not a folder.
    """
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"{root}: no such folder")
    report = ValidationReport(str(root))
    corpus, queries = find_file(root / "corpus.jsonl"), find_file(root / "queries.jsonl")
    qrels_files = (
        sorted(p for p in (root / "qrels").glob("*.tsv*") if p.name.endswith((".tsv", ".tsv.gz")))
        if (root / "qrels").is_dir()
        else []
    )
    for path, name in ((corpus, "corpus.jsonl"), (queries, "queries.jsonl")):
        if path is None:
            report.add("error", str(root), f"missing {name}")
        else:
            report.files[path.relative_to(root).as_posix()] = _file_info(path)
    excluded_files = (
        sorted(p for p in (root / EXCLUSIONS_FOLDER).glob("*.tsv*") if p.name.endswith((".tsv", ".tsv.gz")))
        if (root / EXCLUSIONS_FOLDER).is_dir()
        else []
    )
    for path in (*qrels_files, *excluded_files):
        report.files[path.relative_to(root).as_posix()] = _file_info(path)

    corpus, queries = _unless_misnamed(report, corpus), _unless_misnamed(report, queries)
    doc_ids: set[str] = set()
    words = 0
    if corpus is not None:
        for doc in iter_corpus(corpus, on_error=report.add_error, check_ids=True):
            doc_ids.add(doc.doc_id)
            text = doc_text(doc)
            words += len(text.split())
            if not text:
                report.add("warning", str(corpus), f"document {doc.doc_id!r} has empty title and text")
        report.n_docs = len(doc_ids)
        report.mean_doc_words = words / len(doc_ids) if doc_ids else 0.0
        if not doc_ids:
            report.add("error", str(corpus), "the corpus has no documents")
    query_ids: set[str] = set()
    if queries is not None:
        for query in iter_queries(queries, on_error=report.add_error, check_ids=True):
            query_ids.add(query.query_id)
            if not query.text.strip():
                report.add("warning", str(queries), f"query {query.query_id!r} has empty text")
        report.n_queries = len(query_ids)
        if not query_ids:  # nothing to retrieve for, nothing to pool
            report.add("error", str(queries), "no queries (add at least one)")

    for path in qrels_files:
        split = path.name.split(".")[0]
        qrels = read_qrels(path, on_error=report.add_error, check_ids=True, allow_empty=True)  # a header: to judge
        summary = SplitSummary(
            split,
            str(path),
            qrels.n_judgments,
            len(qrels),
            dict(Counter(g for docs in qrels.values() for g in docs.values())),
        )
        report.splits.append(summary)
        if corpus is None or queries is None:
            continue
        unknown_queries = set(qrels) - query_ids
        unknown_docs = qrels.doc_ids() - doc_ids
        if unknown_queries or unknown_docs:
            # Only now look up the lines, so a clean folder reads each qrels file once.
            for line_no, query_id, doc_id, _ in iter_qrels(path, on_error=lambda error: None):
                if query_id in unknown_queries:
                    hint = normalisation_hint(query_id, query_ids, queries.name)
                    message = f"query {query_id!r} is not in {queries.name}" + (f" ({hint})" if hint else "")
                    report.add("error", f"{path}:{line_no}", message)
                if doc_id in unknown_docs:
                    hint = normalisation_hint(doc_id, doc_ids, corpus.name)
                    message = f"document {doc_id!r} is not in {corpus.name}" + (f" ({hint})" if hint else "")
                    report.add("error", f"{path}:{line_no}", message)
    _check_excluded(report, excluded_files, qrels_files, query_ids if queries else None, doc_ids if corpus else None)
    return report


def _check_excluded(report: ValidationReport, files: list[Path], qrels_files: list[Path], query_ids, doc_ids) -> None:
    """Each ``excluded/<split>.tsv``: its lines (`harness.io.exclusions`), its ids against the folder's, and a split
    the qrels have (an exclusions file of a split without qrels excludes nothing anyone scores)."""
    splits = {path.name.split(".")[0] for path in qrels_files}
    for path in files:
        pairs = sum(1 for _ in iter_exclusions(path, on_error=report.add_error))
        if path.name.split(".")[0] not in splits:
            report.add(
                "warning", str(path), f"no qrels/{path.name.split('.')[0]}.tsv: these {pairs} pairs apply to no split"
            )
        if query_ids is None or doc_ids is None:
            continue
        for error in unknown_exclusions(path, query_ids, doc_ids):
            report.add_error(error)
