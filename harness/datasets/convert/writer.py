"""The eval set's records: judgments read from their table (one grade per pair), and documents and queries
checked row by row and streamed into BEIR's ``corpus.jsonl`` and ``queries.jsonl``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from harness.datasets.convert.columns import columns_of, open_any
from harness.datasets.convert.grades import table_grade
from harness.datasets.convert.options import ConvertOptions
from harness.datasets.convert.problems import Problems
from harness.datasets.convert.tables import Table
from harness.datasets.excel import Workbook
from harness.errors import FormatError, setting
from harness.io.formats import corpus_line, query_line
from harness.records import Doc, Query


@dataclass
class Judgments:
    """(query_id, doc_id) → (grade, position), in input order."""

    path: Path
    unit: str
    by_pair: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    description: str = ""
    sink: Problems | None = None  # where a conflict goes; None raises it

    def add(self, query_id: str, doc_id: str, grade: int, position: int) -> None:
        previous = self.by_pair.get((query_id, doc_id))
        if previous is not None and previous[0] != grade:
            problem = FormatError(
                self.path,
                f"({query_id}, {doc_id}) judged {previous[0]} at {self.unit} {previous[1]} and {grade} here",
                position,
                "keep one judgment per pair",
                unit=self.unit,
            )
            if self.sink is None:
                raise problem
            self.sink.add(problem)
        if previous is None:
            self.by_pair[(query_id, doc_id)] = (grade, position)

    def rows(self) -> Iterator[tuple[str, str, int]]:
        for (query_id, doc_id), (grade, _) in self.by_pair.items():
            yield query_id, doc_id, grade


def _id(table: Table, position: int, record: dict[str, Any], column: str, what: str) -> str:
    value = record.get(column)
    if value is None or isinstance(value, (bool, dict, list)):
        raise table.error(f"missing {what} in column {column!r}", position)
    text = str(value).strip()
    if not text:
        raise table.error(f"empty {what} in column {column!r}", position)
    if any(ch.isspace() for ch in text):
        raise table.error(
            f"{what} {text!r} contains whitespace",
            position,
            "BEIR qrels and TREC run files cannot hold such ids; replace the spaces",
        )
    return text


def _text(table: Table, position: int, record: dict[str, Any], column: str | None) -> str:
    if column is None:
        return ""
    value = record.get(column)
    if value is None:
        return ""
    if isinstance(value, (dict, list, bool)):
        raise table.error(f"column {column!r} must hold text, got {type(value).__name__}", position)
    return value if isinstance(value, str) else str(value)


def extra_fields(record: dict[str, Any], used: set[str]) -> dict[str, Any]:
    """A record's other fields, kept as its ``metadata`` (values JSON cannot hold written as text)."""
    metadata = {}
    for key, value in record.items():
        if key in used:
            continue
        if value is not None and not isinstance(value, (str, int, float, bool, list, dict)):
            value = str(value)  # dates, decimals from parquet
        metadata[key] = value
    return metadata


def read_qrels_table(
    path: Path, options: ConvertOptions, problems: Problems, books: dict[Path, Workbook] | None = None
) -> Judgments:
    """Every judgment of the table; rows that cannot be read go to `problems` (all of them, not the first)."""
    with open_any(path, "qrels", options, books) as table:
        table.sink = problems
        columns = columns_of(table, "qrels", options)
        score_col = columns["score"]
        notes = [table.description] if table.description else []
        if score_col is None:
            notes.append(
                f"no grade column, so every pair has grade {options.default_grade} ({setting('default_grade')})"
            )
        elif table.decimal_comma or options.decimal_comma:
            notes.append("grades with a decimal comma (3,0 is 3)")
        judgments = Judgments(table.path, table.unit, description="; ".join(notes), sink=problems)
        for position, record in table.rows:
            try:
                query_id = _id(table, position, record, columns["query"], "query id")
                doc_id = _id(table, position, record, columns["doc"], "document id")
                grade = (
                    options.default_grade
                    if score_col is None
                    else table_grade(table, position, record, score_col, options)
                )
            except FormatError as exc:
                problems.add(exc)
                continue
            judgments.add(query_id, doc_id, grade, position)
    if not judgments.by_pair and not problems.count:
        raise FormatError(judgments.path, "no judgments", hint=f"omit {setting('qrels')} for a folder not judged yet")
    return judgments


def read_excluded_table(
    path: Path, options: ConvertOptions, problems: Problems, books: dict[Path, Workbook] | None = None
) -> Judgments:
    """Every (query id, document id) pair of an excluded-pairs table (`harness.io.exclusions`; grade 0, unused); rows
    that cannot be read go to `problems`. A pair written twice counts once."""
    with open_any(path, "excluded", options, books) as table:
        table.sink = problems
        columns = columns_of(table, "excluded", options)
        pairs = Judgments(table.path, table.unit, description=table.description, sink=problems)
        for position, record in table.rows:
            try:
                query_id = _id(table, position, record, columns["query"], "query id")
                doc_id = _id(table, position, record, columns["doc"], "document id")
            except FormatError as exc:
                problems.add(exc)
                continue
            pairs.add(query_id, doc_id, 0, position)
    return pairs


class RecordWriter:
    """Validates corpus or query rows and streams them into a BEIR .jsonl file."""

    def __init__(self, kind: str, drop_empty: bool, problems: Problems | None = None):
        self.kind = kind
        self.drop_empty = drop_empty
        self.problems = problems  # where row problems go; None raises the first
        self.ids: dict[str, int] = {}  # id → its position, to name both lines of a duplicate
        self.dropped: dict[str, str] = {}  # id → position, for records skipped as empty
        self.count = 0
        self.description = ""
        self.source = ""  # how messages name the table: the file, or the workbook and sheet

    def write_table(
        self, path: Path, handle: IO[str], options: ConvertOptions, books: dict[Path, Workbook] | None = None
    ) -> None:
        with open_any(path, "corpus" if self.kind == "document" else "queries", options, books) as table:
            table.sink = self.problems
            self.description, self.source = table.description, str(table.path)
            columns = columns_of(table, "corpus" if self.kind == "document" else "queries", options)
            id_col, title_col, text_col = columns["id"], columns.get("title"), columns["text"]
            used = {c for c in (id_col, title_col, text_col) if c}
            rows = 0
            for position, record in table.rows:
                rows += 1
                try:
                    self.write_row(handle, table, position, record, (id_col, title_col, text_col), used)
                except FormatError as exc:
                    if self.problems is None:
                        raise
                    self.problems.add(exc)
            if not rows:  # a header only: nothing to search (queries) or to find (documents)
                what = "queries" if self.kind == "query" else "documents"
                problem = FormatError(table.path, f"no {what}: the table has a header only", hint=f"add the {what}")
                if self.problems is None:
                    raise problem
                self.problems.add(problem)

    def write_row(
        self,
        handle: IO[str],
        table: Table,
        position: int,
        record: dict[str, Any],
        columns: tuple[str, str | None, str],
        used: set[str],
    ) -> None:
        id_col, title_col, text_col = columns
        record_id = _id(table, position, record, id_col, f"{self.kind} id")
        title = _text(table, position, record, title_col)
        text = _text(table, position, record, text_col)
        if record_id in self.ids or record_id in self.dropped:
            first = self.ids.get(record_id) or self.dropped[record_id]
            raise table.error(
                f"duplicate {self.kind} id {record_id!r} (first at {table.unit} {first})",
                position,
                f"{self.kind} ids must be unique",
            )
        self.add(handle, record_id, title, text, extra_fields(record, used), table.error, position)

    def add(
        self,
        handle: IO[str],
        record_id: str,
        title: str,
        text: str,
        metadata: dict[str, Any],
        error: Callable[[str, int, str], FormatError],
        position: int,
    ) -> None:
        if not f"{title} {text}".strip():
            if not self.drop_empty:
                raise error(
                    f"{self.kind} {record_id!r} has empty text",
                    position,
                    "fill it in, or pass --drop-empty to skip such records",
                )
            self.dropped[record_id] = str(position)
            return
        self.ids[record_id] = position
        self.count += 1
        if self.kind == "document":
            handle.write(corpus_line(Doc(record_id, title, text), metadata))
        else:
            handle.write(query_line(Query(record_id, text), metadata))
