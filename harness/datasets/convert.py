"""Convert a team's own eval set (tables or one eval-set file) into a verified BEIR folder.

Inputs, chosen by extension, each optionally ``.gz``: ``.csv``, ``.tsv``, ``.jsonl``, ``.json`` (a
list of objects) and ``.parquet``; Excel workbooks (``.xlsx``, a sheet per table, see `harness.datasets.excel`);
or one eval-set file (``.json``/``.yaml``/``.yml``) holding
``documents`` and ``queries`` with their relevant ids. Columns are found by common names (see
`CORPUS_ID` and friends) unless named explicitly by a `ColumnMap`.

Rules:

* Ids are text: a spreadsheet id ``007`` stays ``"007"``; surrounding whitespace is stripped and an
  id with whitespace inside is refused (TREC run files cannot hold it).
* Grades are integers and kept as given, 0 included; ``1.0`` counts as 1, ``1.5`` is an error;
  negative grades only with ``allow_negative``. A ``;``-separated CSV (or ``decimal_comma``) writes
  ``3,0`` for 3. Grades outside ``grade_scale`` are refused; without one the summary states the range.
* Every row problem is reported in one run (up to `PROBLEM_LIMIT`, then a count), each naming its
  file and line: a judgments file naming an unknown query and an unknown document reports both.
* Every check runs before anything becomes visible: the folder is built in a temporary sibling
  and renamed into place when complete. An existing folder is refused unless ``force``, except
  that a new split may be added to it when its ids resolve against the folder's corpus and queries.
* The corpus streams: only the set of ids and one row are held in memory.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import itertools
import json
import logging
import os
import re
import shutil
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from harness.datasets.excel import EXCEL_SUFFIXES, Workbook, suggestion
from harness.errors import FormatError, HarnessError, MissingDependencyError, OutputError, setting
from harness.io.formats import (
    corpus_line,
    default_permissions,
    find_file,
    iter_corpus,
    iter_queries,
    private_dir,
    query_line,
    remove_stale_temporaries,
    write_qrels,
)
from harness.records import Doc, Query

logger = logging.getLogger(__name__)

CORPUS_ID = ("_id", "id", "doc_id", "docid", "corpus_id", "corpus-id")
CORPUS_TITLE = ("title",)
CORPUS_TEXT = ("text", "body", "content", "contents", "passage", "document")
QUERY_ID = ("_id", "id", "query_id", "qid", "query-id")
QUERY_TEXT = ("text", "query", "question")
QRELS_QUERY = ("query-id", "query_id", "qid")
QRELS_DOC = ("corpus-id", "corpus_id", "doc_id", "docid")
QRELS_SCORE = ("score", "relevance", "grade", "label", "rel")

TABLE_SUFFIXES = (".csv", ".tsv", ".jsonl", ".json", ".parquet", *EXCEL_SUFFIXES)
_SHOWN = 5  # how many offending lines an error lists before "and N more"
PROBLEM_LIMIT = 20  # how many row problems one run lists before "and N more"
# Sheet names that say which table a sheet of a workbook holds (compared in lower case).
SHEET_NAMES = {
    "corpus": ("corpus", "documents", "docs", "passages", "articles", "collection"),
    "queries": ("queries", "questions", "topics"),
    "qrels": ("qrels", "judgments", "judgements", "relevance", "labels", "assessments"),
}


@dataclass(frozen=True)
class ColumnMap:
    """Explicit column names; None means detect from the common names."""

    corpus_id: str | None = None
    corpus_title: str | None = None
    corpus_text: str | None = None
    query_id: str | None = None
    query_text: str | None = None
    qrels_query: str | None = None
    qrels_doc: str | None = None
    qrels_score: str | None = None


@dataclass(frozen=True)
class ConvertOptions:
    """How to convert.

    Attributes:
        split: Name of the qrels split written (``qrels/<split>.tsv``).
        force: Replace an existing output folder.
        drop_empty: Skip documents and queries with empty text (counted) instead of failing.
        allow_negative: Accept negative grades (TREC-COVID style -1).
        columns: Explicit column names.
        delimiter: The field separator of ``.csv`` tables; None sniffs it from the header row (``,`` ``;``
            ``\t`` ``|``: Excel writes ``;`` where the decimal mark is a comma).
        default_grade: The grade of every pair of a judgments table without a grade column (a list of
            relevant pairs); None requires a grade column.
        decimal_comma: Read ``3,0`` as 3 in every table (always so in a ``;``-separated CSV).
        grade_scale: The (lowest, highest) grade allowed, e.g. ``(0, 3)``; a grade outside it is refused.
            None accepts any and states the range found in the summary.
        sheets: The sheet of an ``.xlsx`` input to read, by table (``corpus``, ``queries``, ``qrels``;
            ``*`` for any); a table without one is found by the sheet's name, or its header.
    """

    split: str = "test"
    force: bool = False
    drop_empty: bool = False
    allow_negative: bool = False
    columns: ColumnMap = field(default_factory=ColumnMap)
    delimiter: str | None = None
    default_grade: int | None = None
    decimal_comma: bool = False
    grade_scale: tuple[int, int] | None = None
    sheets: dict[str, str] = field(default_factory=dict)


@dataclass
class ConversionSummary:
    """What a conversion wrote."""

    out: str
    split: str
    mode: str
    n_docs: int = 0
    n_queries: int = 0
    n_judgments: int = 0
    n_judged_queries: int = 0
    grades: dict[int, int] = field(default_factory=dict)
    dropped_docs: int = 0
    dropped_queries: int = 0
    unjudged_queries: int = 0
    warnings: list[str] = field(default_factory=list)
    formats: dict[str, str] = field(default_factory=dict)  # input file → how it was read
    grade_scale: str = ""  # e.g. "0-3 (given)" or "0-2 (the grades found; not checked)"

    def to_json(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["grades"] = {str(grade): count for grade, count in sorted(self.grades.items())}
        return data


# --------------------------------------------------------------------------- tables


@dataclass
class Table:
    """An open input table: its columns and a stream of (position, record)."""

    path: Path
    columns: list[str]
    rows: Iterator[tuple[int, dict[str, Any]]]
    unit: str  # what a position counts: "line", "item" or "row"
    description: str = ""  # how it was read, e.g. "CSV, ';'-separated (detected)"
    decimal_comma: bool = False  # numbers are written 3,5 (a ';'-separated CSV)
    # Given a sink, a row the reader cannot read is added to it and skipped (so that a run reports every
    # one); without, it is raised.
    sink: Problems | None = None

    def error(self, reason: str, position: int | None = None, hint: str | None = None) -> FormatError:
        return FormatError(self.path, reason, position, hint, unit=self.unit)

    def skip(self, problem: FormatError) -> None:
        """A row the reader cannot read: raised, or added to the `sink`."""
        if self.sink is None:
            raise problem
        self.sink.add(problem)


def _kind(path: Path) -> tuple[str, bool]:
    name = path.name.lower()
    gz = name.endswith(".gz")
    if gz:
        name = name[:-3]
    for suffix in TABLE_SUFFIXES:
        if name.endswith(suffix):
            if gz and suffix in EXCEL_SUFFIXES:
                raise FormatError(path, "a compressed workbook", hint="an .xlsx file is compressed already; unpack it")
            return suffix, gz
    if name.endswith(".xls"):
        raise FormatError(
            path,
            "the old Excel format (.xls) is not read",
            hint="open it in Excel or LibreOffice and save it as .xlsx, or as .csv",
        )
    raise FormatError(path, "unsupported file type", hint=f"use one of {', '.join(TABLE_SUFFIXES)}, optionally .gz")


DELIMITERS = {",": "comma", ";": "semicolon", "\t": "tab", "|": "pipe"}


def sniff_delimiter(header: str) -> str:
    """The delimiter that splits a CSV header row into the most fields (quotes respected); ``,`` if none does."""
    counts = {d: _field_count(header, d) for d in DELIMITERS}
    best = max(counts, key=counts.get)
    return best if counts[best] > 1 else ","


def _field_count(header: str, delimiter: str) -> int:
    """Fields of one header row split by `delimiter`; 0 for a row the csv module refuses (a bare carriage
    return inside it: the reader then names the line)."""
    try:
        return len(next(csv.reader([header], delimiter=delimiter), []))
    except csv.Error:
        return 0


@contextlib.contextmanager
def open_table(path: str | Path, delimiter: str | None = None, sheet: str | None = None) -> Iterator[Table]:
    """Open an input table by its extension and stream its records.

    CSV/TSV values are read as text (so ``007`` stays ``007``); JSON values keep their JSON type. A
    ``.csv`` file's delimiter is sniffed from its header row unless `delimiter` is given; ``.tsv`` is tab.
    An ``.xlsx`` workbook is read from `sheet` (by name, case ignored), or from its only sheet.

    Raises:
        FormatError: Unsupported extension, unreadable file, bad header or malformed records.
    """
    path = Path(path)
    kind, gz = _kind(path)
    if not path.is_file():
        raise FormatError(path, "no such file")
    with contextlib.ExitStack() as stack:
        if kind in EXCEL_SUFFIXES:
            book = stack.enter_context(Workbook(path))
            if sheet is None and len(book.sheet_names) > 1:
                raise FormatError(
                    path,
                    f"{len(book.sheet_names)} sheets: {', '.join(map(repr, book.sheet_names))}",
                    hint=f"choose one with {setting('sheets')}",
                )
            name = book.find_sheet(sheet, setting("sheets")) if sheet else book.sheet_names[0]
            yield excel_table(book, name, "chosen" if sheet else "its only sheet")
        elif kind in (".csv", ".tsv"):
            handle = stack.enter_context(gzip.open(path, "rb") if gz else open(path, "rb"))
            lines = _decoded_lines(path, handle)
            how = "given"
            if delimiter is None and kind == ".tsv":
                delimiter, how = "\t", "by its name"
            elif delimiter is None:
                first = next(lines, "")
                delimiter, how = sniff_delimiter(first), "detected"
                lines = itertools.chain([first], lines)
            table = _csv_table(path, lines, delimiter)
            table.description = f"{kind[1:].upper()}, {DELIMITERS.get(delimiter, repr(delimiter))}-separated ({how})"
            # Where Excel writes ';' between fields, the decimal mark is a comma (Excel's own rule).
            table.decimal_comma = delimiter == ";"
            yield table
        elif kind == ".jsonl":
            handle = stack.enter_context(gzip.open(path, "rb") if gz else open(path, "rb"))
            yield _jsonl_table(path, handle)
        elif kind == ".json":
            yield _json_table(path, gz)
        else:
            yield _parquet_table(path, gz)


def excel_table(book: Workbook, sheet: str, how: str) -> Table:
    """One sheet of an open workbook as a table; positions are Excel's row numbers."""
    table = Table(Path(book.where(sheet)), [], iter(()), "row", f"an Excel sheet ({how})")
    table.columns, table.rows = book.open_sheet(sheet, table.skip)
    return table


def _read_errors(path: Path, unit: str = "line"):
    """Turn decoding and CSV errors raised mid-stream into FormatErrors."""

    @contextlib.contextmanager
    def guard(position: int | None):
        try:
            yield
        except UnicodeDecodeError as exc:
            bad = exc.object[exc.start : exc.start + 1].hex()
            raise FormatError(
                path,
                f"not UTF-8 (byte 0x{bad} at byte {exc.start + 1} of the line)",
                position,
                "save the file as UTF-8",
                unit=unit,
            ) from None
        except csv.Error as exc:
            raise FormatError(path, f"malformed CSV: {exc}", position, "check quoting", unit=unit) from None
        except (OSError, EOFError) as exc:
            raise FormatError(
                path, f"cannot read: {exc}", position, "the file is damaged or truncated", unit=unit
            ) from None

    return guard


def _raw_lines(path: Path, handle: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes with the line ending) for each line; read errors name the line."""
    guard = _read_errors(path)
    line_no = 0
    while True:
        with guard(line_no + 1):
            raw = handle.readline()
        if not raw:
            return
        line_no += 1
        yield line_no, raw


def _decoded_lines(path: Path, handle: IO[bytes]) -> Iterator[str]:
    """Decode line by line, so a bad byte is reported on its own line (line endings are kept)."""
    guard = _read_errors(path)
    for line_no, raw in _raw_lines(path, handle):
        with guard(line_no):
            yield raw.decode("utf-8-sig" if line_no == 1 else "utf-8")


def _csv_table(path: Path, lines: Iterator[str], delimiter: str) -> Table:
    # Documents can be long; the csv module's default limit is 128 KiB per field.
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    reader = csv.reader(lines, delimiter=delimiter)
    guard = _read_errors(path)
    with guard(1):
        header = next(reader, None)
    if not header or not any(cell.strip() for cell in header):
        raise FormatError(path, "empty file: no header row", 1, "the first row must name the columns")
    columns = [cell.strip() for cell in header]
    duplicates = sorted({c for c in columns if columns.count(c) > 1})
    if duplicates:
        raise FormatError(path, f"duplicate column name(s) {', '.join(map(repr, duplicates))} in the header", 1)

    def rows() -> Iterator[tuple[int, dict[str, Any]]]:
        start = reader.line_num + 1
        while True:
            with guard(start):
                fields = next(reader, None)
            if fields is None:
                return
            line, start = start, reader.line_num + 1
            if not any(cell.strip() for cell in fields):
                continue
            if len(fields) != len(columns):
                table.skip(
                    FormatError(
                        path,
                        f"row has {len(fields)} fields, the header has {len(columns)}",
                        line,
                        "quote fields that contain the delimiter or a line break",
                    )
                )
                continue
            yield line, dict(zip(columns, fields))

    table = Table(path, columns, rows(), "line")
    return table


def _jsonl_table(path: Path, handle: IO[bytes]) -> Table:
    def records() -> Iterator[tuple[int, dict[str, Any]]]:
        for line_no, raw in _raw_lines(path, handle):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except (ValueError, UnicodeDecodeError) as exc:
                raise FormatError(path, f"invalid JSON: {exc}", line_no, "each line must be one JSON object") from None
            if not isinstance(record, dict):
                raise FormatError(path, f"expected a JSON object, got {type(record).__name__}", line_no)
            yield line_no, record

    stream = records()
    first = next(stream, None)
    if first is None:
        raise FormatError(path, "empty file: no records")
    return Table(path, list(first[1]), itertools.chain([first], stream), "line")


def _json_table(path: Path, gz: bool) -> Table:
    try:
        raw = gzip.decompress(path.read_bytes()) if gz else path.read_bytes()
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError, OSError, EOFError) as exc:
        raise FormatError(path, f"invalid JSON: {exc}", hint="a .json input is one list of objects") from None
    if not isinstance(data, list):
        raise FormatError(
            path, f"expected a list of objects, got {type(data).__name__}", hint="use .jsonl for one object per line"
        )
    if not data:
        raise FormatError(path, "empty file: no records")
    for position, record in enumerate(data, start=1):
        if not isinstance(record, dict):
            raise FormatError(path, f"expected an object, got {type(record).__name__}", position, unit="item")
    return Table(path, list(data[0]), iter(enumerate(data, start=1)), "item")


def _parquet_table(path: Path, gz: bool) -> Table:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise MissingDependencyError("reading .parquet needs pyarrow (pip install pyarrow)") from exc
    try:
        source: Any = io.BytesIO(gzip.decompress(path.read_bytes())) if gz else str(path)
        parquet = pq.ParquetFile(source)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several unrelated types
        raise FormatError(path, f"not a readable parquet file: {exc}") from None

    def rows() -> Iterator[tuple[int, dict[str, Any]]]:
        position = 0
        for batch in parquet.iter_batches(batch_size=8192):
            for record in batch.to_pylist():
                position += 1
                yield position, record

    return Table(path, list(parquet.schema_arrow.names), rows(), "row")


# --------------------------------------------------------------------------- columns and values


def resolve_column(
    table: Table,
    candidates: tuple[str, ...],
    explicit: str | None,
    option: str,
    role: str,
    required: bool = True,
    hint: str | None = None,
) -> str | None:
    """Pick the column playing `role`: the explicit name (case ignored), else the one common name present.

    Raises:
        FormatError: The explicit column is absent, several common names are present, or a
            required column is missing. The message lists the columns found and the option
            (`hint` replaces the advice given for a missing column).
    """
    found = ", ".join(table.columns)
    if explicit is not None:
        return _explicit_column(table, explicit, option)
    by_lower = {column.lower(): column for column in table.columns}
    matches = list(dict.fromkeys(by_lower[c] for c in candidates if c in by_lower))
    if len(matches) > 1:
        raise FormatError(
            table.path,
            f"ambiguous {role} column: {' and '.join(map(repr, matches))} both match",
            hint=f"pick one with {option}; columns found: {found}",
        )
    if not matches:
        if not required:
            return None
        raise FormatError(
            table.path,
            f"no {role} column (looked for {', '.join(candidates)})",
            hint=f"{hint or f'name it with {option}'}; columns found: {found}",
        )
    return matches[0]


def _explicit_column(table: Table, explicit: str, option: str) -> str:
    """The column named `explicit`: exactly, else the one whose name differs only in case or surrounding
    spaces (``articleno`` finds ``ArticleNo``); else an error suggesting the closest names."""
    if explicit in table.columns:
        return explicit
    folded = [column for column in table.columns if column.strip().lower() == explicit.strip().lower()]
    if len(folded) == 1:
        return folded[0]
    found = ", ".join(table.columns)
    if folded:
        raise FormatError(
            table.path,
            f"{' and '.join(map(repr, folded))} all match {explicit!r} (from {option}) but for case",
            hint=f"give the exact name; columns found: {found}",
        )
    raise FormatError(
        table.path,
        f"no column {explicit!r} (from {option}); {suggestion(explicit, table.columns)}columns found: {found}",
    )


@dataclass(frozen=True)
class _Role:
    """A column a table of some kind must (or may) have: common names, the explicit setting, its option."""

    name: str
    candidates: tuple[str, ...]
    setting: str  # the ColumnMap field
    role: str
    required: bool = True

    @property
    def option(self) -> str:
        return f"--{self.setting.replace('_', '-')}-column"


_ROLES = {
    "corpus": (
        _Role("id", CORPUS_ID, "corpus_id", "document id"),
        _Role("title", CORPUS_TITLE, "corpus_title", "title", required=False),
        _Role("text", CORPUS_TEXT, "corpus_text", "text"),
    ),
    "queries": (_Role("id", QUERY_ID, "query_id", "query id"), _Role("text", QUERY_TEXT, "query_text", "text")),
    "qrels": (
        _Role("query", QRELS_QUERY, "qrels_query", "query id"),
        _Role("doc", QRELS_DOC, "qrels_doc", "document id"),
        _Role("score", QRELS_SCORE, "qrels_score", "grade"),
    ),
}
_NO_GRADE_HINT = "name it with --qrels-score-column, or pass --default-grade 1 if every listed pair is relevant"


def _resolve_roles(table: Table, kind: str, options: ConvertOptions) -> tuple[dict[str, str | None], list[FormatError]]:
    """The column of each role of a `kind` table, and every problem found (not only the first)."""
    resolved: dict[str, str | None] = {}
    problems = []
    for role in _ROLES[kind]:
        grade = role.name == "score"
        try:
            resolved[role.name] = resolve_column(
                table,
                role.candidates,
                getattr(options.columns, role.setting),
                role.option,
                role.role,
                required=role.required and not (grade and options.default_grade is not None),
                hint=_NO_GRADE_HINT if grade else None,
            )
        except FormatError as exc:
            problems.append(exc)
    return resolved, problems


def _columns_of(table: Table, kind: str, options: ConvertOptions) -> dict[str, str | None]:
    resolved, problems = _resolve_roles(table, kind, options)
    if problems:
        raise problems[0]
    return resolved


def _check_columns(
    sources: list[tuple[str, Path]], options: ConvertOptions, books: dict[Path, Workbook] | None = None
) -> None:
    """Read each table's header and resolve its columns before anything is converted, so that a run
    reports every column problem of all the tables at once (a user otherwise learns them one run at a time).

    Raises:
        FormatError: The one problem found.
        ColumnProblems: Several, one line each.
    """
    problems: list[FormatError] = []
    for kind, path in sources:
        try:
            with _open_any(path, kind, options, books) as table:
                problems += _resolve_roles(table, kind, options)[1]
        except FormatError as exc:
            problems.append(exc)
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise ColumnProblems(problems)


class ColumnProblems(FormatError):
    """Several tables (or several columns of one) cannot be read; each problem on its own line."""

    what = "with the input tables"

    def __init__(self, problems: list[FormatError], count: int | None = None):
        self.problems = problems
        self.count = len(problems) if count is None else count
        more = f"\n  and {self.count - len(problems)} more" if self.count > len(problems) else ""
        HarnessError.__init__(
            self,
            f"{self.count} problems {self.what} (nothing written):\n  "
            + "\n  ".join(str(problem) for problem in problems)
            + more,
        )
        self.path, self.reason, self.line_no, self.hint, self.unit = problems[0].path, str(self), None, None, "line"


class RowProblems(ColumnProblems):
    """Several rows of the input tables cannot be converted; the first `PROBLEM_LIMIT`, then a count."""

    what = "in the input rows"


class Problems:
    """The row problems of one conversion: the first `PROBLEM_LIMIT` kept, the rest counted."""

    def __init__(self, limit: int = PROBLEM_LIMIT):
        self.limit = limit
        self.shown: list[FormatError] = []
        self.count = 0

    def add(self, problem: FormatError) -> None:
        self.count += 1
        if len(self.shown) < self.limit:
            self.shown.append(problem)

    def raise_any(self) -> None:
        """Raises: FormatError: The one problem found. RowProblems: Several, one line each."""
        if self.count == 1:
            raise self.shown[0]
        if self.count:
            raise RowProblems(self.shown, self.count)


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


def parse_grade(value: Any, allow_negative: bool, decimal_comma: bool = False) -> int:
    """An integer relevance grade from a cell: ``2``, ``"2"``, ``2.0`` and ``"2.0"`` give 2; with
    `decimal_comma`, ``"2,0"`` too (``"2,5"`` is not an integer).

    Raises:
        ValueError: Missing, non-integer or (unless `allow_negative`) negative; the message says which.
    """
    if value is None or isinstance(value, bool) or (isinstance(value, str) and not value.strip()):
        raise ValueError("missing grade")
    if isinstance(value, int):
        grade = value
    else:
        text = str(value).strip()
        number_text = text.replace(",", ".") if decimal_comma and text.count(",") == 1 and "." not in text else text
        try:
            grade = int(text)
        except ValueError:
            try:
                number = float(number_text)
            except ValueError:
                comma = (
                    f" (a decimal comma? pass {setting('decimal_comma')})" if "," in text and not decimal_comma else ""
                )
                raise ValueError(f"grade {text!r} is not an integer{comma}") from None
            if not number.is_integer():
                raise ValueError(f"grade {text!r} is not an integer") from None
            grade = int(number)
    if grade < 0 and not allow_negative:
        raise ValueError(f"negative grade {grade} (pass {setting('allow_negative')} to keep TREC-COVID-style -1)")
    return grade


_SCALE = re.compile(r"\s*(-?\d+)\s*(?:-|–|\.\.|:| to )\s*(-?\d+)\s*")


def parse_grade_scale(text: str) -> tuple[int, int]:
    """``"0-3"`` (or ``0..3``, ``-1-2``) as (lowest, highest) grade.

    Raises:
        HarnessError: Not two integers, or the lowest above the highest.
    """
    match = _SCALE.fullmatch(text)
    if not match:
        raise HarnessError(f"{setting('grade_scale')} {text!r}: expected LOWEST-HIGHEST, e.g. 0-3")
    low, high = int(match.group(1)), int(match.group(2))
    if low > high:
        raise HarnessError(f"{setting('grade_scale')} {text!r}: the lowest grade is above the highest")
    return low, high


def _grade(table: Table, position: int, record: dict[str, Any], column: str, options: ConvertOptions) -> int:
    """The grade of a judgments row, checked against the scale when one is given."""
    try:
        grade = _scaled_grade(record.get(column), options, table.decimal_comma)
    except ValueError as exc:
        raise table.error(f"{exc} in column {column!r}", position) from None
    scale = options.grade_scale
    if scale and not scale[0] <= grade <= scale[1]:
        raise table.error(
            f"grade {grade} is outside the scale {scale[0]}-{scale[1]} in column {column!r}",
            position,
            f"correct it, or widen {setting('grade_scale')}",
        )
    return grade


def _scaled_grade(value: Any, options: ConvertOptions, decimal_comma: bool = False) -> int:
    """`parse_grade` under the options: negative grades allowed when the scale starts below 0."""
    scale = options.grade_scale
    return parse_grade(
        value, options.allow_negative or bool(scale and scale[0] < 0), decimal_comma or options.decimal_comma
    )


def _metadata(record: dict[str, Any], used: set[str]) -> dict[str, Any]:
    metadata = {}
    for key, value in record.items():
        if key in used:
            continue
        if value is not None and not isinstance(value, (str, int, float, bool, list, dict)):
            value = str(value)  # dates, decimals from parquet
        metadata[key] = value
    return metadata


# --------------------------------------------------------------------------- records


@dataclass
class _Judgments:
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


TREC_QRELS_SUFFIXES = (".qrels", ".txt")
# By the number of whitespace-separated fields: TREC's four, a graded list's three, a pair list's two.
_WHITESPACE_QRELS = {
    4: (["query-id", "iteration", "corpus-id", "score"], "TREC qrels (query_id iteration doc_id grade)"),
    3: (["query-id", "corpus-id", "score"], "judgments (query_id doc_id grade, whitespace-separated)"),
    2: (["query-id", "corpus-id"], "judgment pairs (query_id doc_id, whitespace-separated)"),
}


def _is_header(fields: list[str]) -> bool:
    """A first line of names, not judgments: its grade is not a number, or it names the id columns."""
    if len(fields) > 2:
        return not fields[-1].lstrip("-").isdigit()
    return fields[0].lower() in QRELS_QUERY + ("query",) or fields[1].lower() in QRELS_DOC + ("doc", "document")


@contextlib.contextmanager
def _trec_qrels_table(path: Path) -> Iterator[Table]:
    """A whitespace-separated judgments file (TREC's ``query_id iteration doc_id grade``, or three or two
    columns), a header row optional, as a table with BEIR's column names; the first line decides the layout."""
    if not path.is_file():
        raise FormatError(path, "no such file")
    with contextlib.ExitStack() as stack:
        handle = stack.enter_context(gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb"))
        lines = ((line_no, line.split()) for line_no, line in enumerate(_decoded_lines(path, handle), start=1))
        lines = ((line_no, fields) for line_no, fields in lines if fields)
        first = next(lines, None)
        if first is None:
            raise FormatError(path, "no judgments")
        width = len(first[1])
        if width not in _WHITESPACE_QRELS:
            raise FormatError(
                path,
                f"expected 4 columns, found {width}",
                first[0],
                "a TREC qrels line is 'query_id 0 doc_id grade' (or 'query_id doc_id [grade]')",
            )
        names, description = _WHITESPACE_QRELS[width]
        if first[0] != 1 or not _is_header(first[1]):
            lines = itertools.chain([first], lines)

        def rows() -> Iterator[tuple[int, dict[str, Any]]]:
            for line_no, fields in lines:
                if len(fields) != width:
                    raise FormatError(
                        path,
                        f"expected {width} columns (as on the first line), found {len(fields)}",
                        line_no,
                        f"every line must be {' '.join(names)}",
                    )
                yield line_no, dict(zip(names, fields))

        yield Table(path, list(names), rows(), "line", description)


@contextlib.contextmanager
def _open_any(
    path: Path, kind: str, options: ConvertOptions, books: dict[Path, Workbook] | None = None
) -> Iterator[Table]:
    """Any input table of `kind`; judgments may also be whitespace-separated text (.qrels/.txt), and a
    workbook's sheet is chosen by `_choose_sheet`. Workbooks opened are kept in `books` (the caller closes
    them): one workbook holding three tables is loaded once."""
    if kind == "qrels" and path.name.lower().removesuffix(".gz").endswith(TREC_QRELS_SUFFIXES):
        with _trec_qrels_table(path) as table:
            yield table
    elif path.name.lower().endswith(EXCEL_SUFFIXES) and books is not None:
        if path not in books:
            books[path] = Workbook(path)
        yield excel_table(books[path], *_choose_sheet(books[path], kind, options))
    elif path.name.lower().endswith(EXCEL_SUFFIXES):
        with Workbook(path) as book:
            yield excel_table(book, *_choose_sheet(book, kind, options))
    else:
        with open_table(path, options.delimiter) as table:
            yield table


_TABLE_NAMES = {"corpus": "documents", "queries": "queries", "qrels": "judgments"}


def _choose_sheet(book: Workbook, kind: str, options: ConvertOptions) -> tuple[str, str]:
    """The sheet holding the `kind` table, and how it was chosen: the one named in `sheets`, the only
    sheet, the one sheet with a telling name (``Judgments``), or the one whose header has the columns.

    Raises:
        FormatError: No such sheet, or no sheet (or several) fits; the message lists the sheets.
    """
    explicit = options.sheets.get(kind) or options.sheets.get("*")
    if explicit:
        return book.find_sheet(explicit, setting("sheets")), f"chosen with {setting('sheets')}"
    if len(book.sheet_names) == 1:
        return book.sheet_names[0], "its only sheet"
    named = [sheet for sheet in book.sheet_names if sheet.strip().lower() in SHEET_NAMES[kind]]
    if len(named) == 1:
        return named[0], "found by its name"
    fitting = [sheet for sheet in named or book.sheet_names if _header_fits(book, sheet, kind, options)]
    if len(fitting) == 1:
        return fitting[0], "found by its header"
    reason = (
        f"sheets {' and '.join(map(repr, fitting))} all have the columns of the {_TABLE_NAMES[kind]}"
        if fitting
        else f"no sheet is named {' or '.join(SHEET_NAMES[kind][:3])} or has the columns of the {_TABLE_NAMES[kind]}"
    )
    raise FormatError(
        book.path,
        reason,
        hint=f"choose one with {setting('sheets')} {kind}=NAME; sheets: {', '.join(map(repr, book.sheet_names))}",
    )


def _header_fits(book: Workbook, sheet: str, kind: str, options: ConvertOptions) -> bool:
    try:
        header = book.header(sheet)
    except FormatError:
        return False
    return header is not None and not _resolve_roles(Table(book.path, header[1], iter(()), "row"), kind, options)[1]


def _read_qrels_table(
    path: Path, options: ConvertOptions, problems: Problems, books: dict[Path, Workbook] | None = None
) -> _Judgments:
    """Every judgment of the table; rows that cannot be read go to `problems` (all of them, not the first)."""
    with _open_any(path, "qrels", options, books) as table:
        table.sink = problems
        columns = _columns_of(table, "qrels", options)
        score_col = columns["score"]
        notes = [table.description] if table.description else []
        if score_col is None:
            notes.append(
                f"no grade column, so every pair has grade {options.default_grade} ({setting('default_grade')})"
            )
        elif table.decimal_comma or options.decimal_comma:
            notes.append("grades with a decimal comma (3,0 is 3)")
        judgments = _Judgments(table.path, table.unit, description="; ".join(notes), sink=problems)
        for position, record in table.rows:
            try:
                query_id = _id(table, position, record, columns["query"], "query id")
                doc_id = _id(table, position, record, columns["doc"], "document id")
                grade = (
                    options.default_grade if score_col is None else _grade(table, position, record, score_col, options)
                )
            except FormatError as exc:
                problems.add(exc)
                continue
            judgments.add(query_id, doc_id, grade, position)
    if not judgments.by_pair and not problems.count:
        raise FormatError(judgments.path, "no judgments", hint=f"omit {setting('qrels')} for a folder not judged yet")
    return judgments


class _RecordWriter:
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
        with _open_any(path, "corpus" if self.kind == "document" else "queries", options, books) as table:
            table.sink = self.problems
            self.description, self.source = table.description, str(table.path)
            columns = _columns_of(table, "corpus" if self.kind == "document" else "queries", options)
            id_col, title_col, text_col = columns["id"], columns.get("title"), columns["text"]
            used = {c for c in (id_col, title_col, text_col) if c}
            for position, record in table.rows:
                try:
                    self.write_row(handle, table, position, record, (id_col, title_col, text_col), used)
                except FormatError as exc:
                    if self.problems is None:
                        raise
                    self.problems.add(exc)

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
        self.add(handle, record_id, title, text, _metadata(record, used), table.error, position)

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


def _unresolved(
    judgments: _Judgments,
    known_ids: tuple[Any, Any],
    dropped_ids: tuple[dict[str, str], dict[str, str]],
    names: tuple[str, str],
    problems: Problems,
) -> None:
    """Judgments whose query or document does not exist, one problem for each kind, listing the first ones."""
    for index, kind in enumerate(("queries", "documents")):
        known, dropped = known_ids[index], dropped_ids[index]
        bad = [(pair[index], position) for pair, (_, position) in judgments.by_pair.items() if pair[index] not in known]
        if not bad:
            continue
        shown = ", ".join(
            f"{judgments.unit} {position} {record_id!r}" + (" (dropped: empty text)" if record_id in dropped else "")
            for record_id, position in bad[:_SHOWN]
        )
        more = f" and {len(bad) - _SHOWN} more" if len(bad) > _SHOWN else ""
        problems.add(
            FormatError(
                judgments.path,
                f"{len(bad)} judgment(s) name unknown {kind}: {shown}{more}",
                hint=f"every id must be in {names[index]}",
            )
        )


# --------------------------------------------------------------------------- output folder


class _Staging:
    """A temporary sibling folder that becomes the output folder only when complete."""

    def __init__(self, out: Path):
        self.out = out
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            if remove_stale_temporaries(out.parent, f".{out.name}.convert."):
                logger.info("removed the staging folder of an interrupted conversion next to %s", out)
            self.root = private_dir(out.parent, f".{out.name}.convert")
            default_permissions(self.root, folder=True)
            (self.root / "qrels").mkdir()
        except OSError as exc:
            raise OutputError(f"{out}: cannot write: {exc.strerror or exc} (choose another {setting('out')})") from exc

    def discard(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> _Staging:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is not None:  # any failure, Ctrl-C included: nothing half-made stays behind
            self.discard()

    def finish(
        self,
        summary: ConversionSummary,
        judgments: _Judgments,
        queries: _RecordWriter,
        docs: _RecordWriter,
        names: tuple[str, str],
        options: ConvertOptions,
        problems: Problems,
    ) -> None:
        """Check the judgments resolve, refuse if any row had a problem, write the qrels, summarise, and move
        the folder into place."""
        _unresolved(judgments, (queries.ids, docs.ids), (queries.dropped, docs.dropped), names, problems)
        problems.raise_any()
        summary.n_judgments = write_qrels(judgments.rows(), self.root / "qrels" / f"{options.split}.tsv")
        _summarize(summary, judgments, queries, docs, options.grade_scale)
        self.commit(summary.mode, options.split)

    def commit(self, mode: str, split: str) -> None:
        try:
            if mode == "add-split":
                os.replace(self.root / "qrels" / f"{split}.tsv", self.out / "qrels" / f"{split}.tsv")
                self.discard()
            elif mode == "new":
                if self.out.is_dir():
                    self.out.rmdir()  # an empty folder
                os.rename(self.root, self.out)
            else:
                # Keep the old folder until the new one is in place; a crash in between leaves both.
                old = private_dir(self.out.parent, f".{self.out.name}.old")
                os.rename(self.out, old / "folder")
                os.rename(self.root, self.out)
                shutil.rmtree(old, ignore_errors=True)
        except OSError as exc:
            self.discard()
            raise OutputError(
                f"{self.out}: cannot move the converted folder into place: {exc.strerror or exc}"
            ) from exc


def _plan(out: Path, split: str, force: bool) -> str:
    """``new``, ``replace`` or ``add-split``; refuse to touch an existing folder otherwise."""
    if not out.exists():
        return "new"
    if not out.is_dir():
        raise OutputError(f"{out}: exists and is not a folder (choose another {setting('out')})")
    if not any(out.iterdir()):
        return "new"
    if force:
        return "replace"
    if _existing_beir_files(out) is None:
        raise OutputError(f"{out}: exists and is not a BEIR folder; pass {setting('force')} to replace it")
    if any((out / "qrels" / name).exists() for name in (f"{split}.tsv", f"{split}.tsv.gz")):
        raise OutputError(
            f"{out}: qrels/{split}.tsv already exists; pass {setting('force')} to replace the folder, "
            f"or --split NAME to add another split"
        )
    return "add-split"


def _existing_beir_files(out: Path) -> dict[str, Path] | None:
    """The corpus and queries files of an existing BEIR folder, or None."""
    paths = {"corpus": find_file(out / "corpus.jsonl"), "queries": find_file(out / "queries.jsonl")}
    return paths if all(paths.values()) else None


def convert_tables(
    corpus: str | Path | None,
    queries: str | Path | None,
    qrels: str | Path | None,
    out: str | Path,
    options: ConvertOptions = ConvertOptions(),
) -> ConversionSummary:
    """Convert corpus, queries and qrels tables into a BEIR folder.

    Args:
        corpus: Documents table; may be omitted only when adding a split to an existing folder.
        queries: Queries table; likewise.
        qrels: Judgments table; None: a folder not judged yet (``qrels/<split>.tsv`` a header only: pool it).
        out: The BEIR folder to create (or to add ``qrels/<split>.tsv`` to).
        options: Split, force, empty-text and negative-grade policy, explicit columns.

    Returns:
        A summary of what was written.

    Raises:
        FormatError: Bad input, naming the file and line; nothing is written.
        OutputError: The folder exists (without ``force``) or cannot be written.
    """
    out = Path(out)
    _check_options(options, {"corpus": corpus, "queries": queries, "qrels": qrels})
    mode = _plan(out, options.split, options.force)
    if (mode != "add-split" or qrels is None) and (corpus is None or queries is None):
        raise HarnessError(
            f"{setting('corpus')} and {setting('queries')} are required unless {setting('split')} adds a split to an existing folder"
        )
    problems, books = Problems(), {}
    try:
        _check_columns(
            [
                (kind, Path(path))
                for kind, path in (("corpus", corpus), ("queries", queries), ("qrels", qrels))
                if path is not None
            ],
            options,
            books,
        )
        return _convert(
            corpus, queries, Path(qrels) if qrels is not None else None, out, options, mode, problems, books
        )
    except ColumnProblems:
        raise
    except FormatError as exc:
        # A table that cannot be read on (broken JSON, bytes that are not UTF-8) ends the run; the rows
        # already found wrong are reported with it.
        if not problems.count:
            raise
        problems.add(exc)
        problems.raise_any()
        raise
    finally:
        for book in books.values():
            book.close()


def _check_options(options: ConvertOptions, inputs: dict[str, str | Path | None]) -> None:
    """Refuse settings that contradict each other or the inputs, before any file is read."""
    workbooks = {
        kind for kind, path in inputs.items() if path is not None and str(path).lower().endswith(EXCEL_SUFFIXES)
    }
    for kind in options.sheets:
        if kind not in workbooks and (kind != "*" or not workbooks):
            which = "no input is" if kind == "*" else f"the {kind} input is not"
            raise HarnessError(
                f"{setting('sheets')} {'' if kind == '*' else kind + '='}{options.sheets[kind]}: "
                f"{which} an .xlsx workbook"
            )
    grade, scale = options.default_grade, options.grade_scale
    if grade is not None and grade < 0 and not options.allow_negative and not (scale and scale[0] <= grade):
        raise HarnessError(
            f"{setting('default_grade')} {grade} is negative (pass {setting('allow_negative')} to allow it)"
        )
    if grade is not None and scale and not scale[0] <= grade <= scale[1]:
        raise HarnessError(
            f"{setting('default_grade')} {grade} is outside {setting('grade_scale')} {scale[0]}-{scale[1]}"
        )


def _convert(
    corpus: str | Path | None,
    queries: str | Path | None,
    qrels: Path | None,
    out: Path,
    options: ConvertOptions,
    mode: str,
    problems: Problems,
    books: dict[Path, Workbook],
) -> ConversionSummary:
    judgments = _read_qrels_table(qrels, options, problems, books) if qrels else _Judgments(out, "row", sink=problems)
    summary = ConversionSummary(str(out), options.split, mode)
    if judgments.description:
        summary.formats[str(judgments.path)] = judgments.description
    with _Staging(out) as staging:
        docs = _RecordWriter("document", options.drop_empty, problems)
        queries_writer = _RecordWriter("query", options.drop_empty, problems)
        existing = _existing_beir_files(out) if mode == "add-split" else None
        for kind, source, writer, name in (
            ("queries", queries, queries_writer, "queries.jsonl"),
            ("corpus", corpus, docs, "corpus.jsonl"),
        ):
            if source is None:
                # Adding a split: its ids resolve against the folder's own files.
                reader = iter_corpus if kind == "corpus" else iter_queries
                writer.ids = {record[0]: 0 for record in reader(existing[kind])}
                writer.source = str(existing[kind])
                continue
            with open(staging.root / name, "w", encoding="utf-8", newline="\n") as handle:
                writer.write_table(Path(source), handle, options, books)
            if writer.description:
                summary.formats[writer.source] = writer.description
            if existing is not None and not problems.count:
                _require_same(kind, staging.root / name, existing[kind])
        staging.finish(
            summary, judgments, queries_writer, docs, (queries_writer.source, docs.source), options, problems
        )
    return summary


def _require_same(kind: str, staged: Path, existing: Path) -> None:
    """When adding a split, corpus and queries given again must equal the folder's."""
    reader = iter_corpus if kind == "corpus" else iter_queries
    for position, (new, old) in enumerate(itertools.zip_longest(reader(staged), reader(existing)), start=1):
        if new != old:
            which = (new or old)[0]
            raise OutputError(
                f"{existing}: the {kind} given differs from the folder's (record {position}, id {which!r}); "
                "pass --force to rebuild the folder, or omit --corpus/--queries to add the split"
            )


def _summarize(
    summary: ConversionSummary,
    judgments: _Judgments,
    queries: _RecordWriter,
    docs: _RecordWriter,
    scale: tuple[int, int] | None,
) -> None:
    judged = {query_id for query_id, _ in judgments.by_pair}
    summary.n_docs = docs.count or len(docs.ids)
    summary.n_queries = queries.count or len(queries.ids)
    summary.n_judged_queries = len(judged)
    summary.grades = dict(Counter(grade for grade, _ in judgments.by_pair.values()))
    if scale:
        summary.grade_scale = f"{scale[0]}-{scale[1]} (given; every grade within it)"
    elif not summary.grades:  # converted without judgments: the folder is not judged yet (pool it)
        summary.grade_scale = ""
    else:
        low, high = min(summary.grades), max(summary.grades)
        summary.grade_scale = (
            f"{low}-{high} (the grades found, not checked: pass {setting('grade_scale')} "
            f"{low}-{high} or your scale to check them)"
        )
    summary.dropped_docs = len(docs.dropped)
    summary.dropped_queries = len(queries.dropped)
    if docs.dropped or queries.dropped:
        summary.warnings.append(
            f"dropped {len(docs.dropped)} document(s) and {len(queries.dropped)} quer(y/ies) with empty text"
        )
    if queries.count and judged:
        unjudged = sorted(queries.ids.keys() - judged)
        summary.unjudged_queries = len(unjudged)
        if unjudged:
            summary.warnings.append(
                f"{len(unjudged)} quer{'y has' if len(unjudged) == 1 else 'ies have'} no judgment in this split "
                f"(kept in queries.jsonl): {', '.join(unjudged[:_SHOWN])}{' ...' if len(unjudged) > _SHOWN else ''}"
            )
    for warning in summary.warnings:
        logger.warning(warning)


# --------------------------------------------------------------------------- single-file eval set


def _load_eval_set(path: Path) -> Any:
    name = path.name.lower()
    gz = name.endswith(".gz")
    name = name[:-3] if gz else name
    try:
        raw = gzip.decompress(path.read_bytes()) if gz else path.read_bytes()
    except FileNotFoundError:
        raise FormatError(path, "no such file") from None
    except (OSError, EOFError) as exc:
        raise FormatError(path, f"cannot read: {exc}") from None
    if name.endswith((".yaml", ".yml")):
        import yaml

        try:
            return yaml.safe_load(raw.decode("utf-8-sig"))
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise FormatError(path, f"invalid YAML: {' '.join(str(exc).split())}") from None
    if name.endswith(".json"):
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise FormatError(path, f"invalid JSON: {exc}") from None
    raise FormatError(path, "unsupported eval-set file type", hint="use .json, .yaml or .yml, optionally .gz")


def _eval_set_id(path: Path, where: str, value: Any) -> str:
    if value is None or isinstance(value, (bool, dict, list)) or not str(value).strip():
        raise FormatError(path, f"{where}: missing or empty id")
    text = str(value).strip()
    if any(ch.isspace() for ch in text):
        raise FormatError(
            path, f"{where}: id {text!r} contains whitespace", hint="BEIR qrels and TREC run files cannot hold such ids"
        )
    return text


def _eval_set_text(path: Path, where: str, value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise FormatError(path, f"{where}: text must be a string, got {type(value).__name__}")
    return value


def convert_eval_set(
    path: str | Path, out: str | Path, options: ConvertOptions = ConvertOptions()
) -> ConversionSummary:
    """Convert one eval-set file (JSON or YAML) into a BEIR folder.

    Positions in messages are 1-based (``query 3`` is the third entry of ``queries``). The file
    holds ``documents``: a list of strings (ids ``"0"``..``"n-1"``) or of objects with
    ``id``/``_id``/``doc_id``, optional ``title``, and ``text``; and ``queries``: objects with an
    optional ``id`` (default ``q1``, ``q2``, ...), ``text``, and ``relevant``: a list of doc ids
    (grade 1) or an object doc id → grade.

    Raises:
        FormatError: A malformed file, naming the entry (``queries[2].relevant``) at fault.
        OutputError: As for `convert_tables`.
    """
    path, out = Path(path), Path(out)
    data = _load_eval_set(path)
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("documents"), list)
        or not isinstance(data.get("queries"), list)
    ):
        raise FormatError(path, "expected an object with lists 'documents' and 'queries'")
    if not data["documents"] or not data["queries"]:
        raise FormatError(path, "'documents' and 'queries' must not be empty")
    mode = _plan(out, options.split, options.force)
    if mode == "add-split":
        raise OutputError(f"{out}: exists; pass {setting('force')} to replace it with the eval set's folder")
    summary = ConversionSummary(str(out), options.split, mode)
    judgments = _Judgments(path, "query")

    def document_error(reason: str, position: int, hint: str | None = None) -> FormatError:
        return FormatError(path, reason, position, hint, unit="document")

    def query_error(reason: str, position: int, hint: str | None = None) -> FormatError:
        return FormatError(path, reason, position, hint, unit="query")

    with _Staging(out) as staging:
        docs = _RecordWriter("document", options.drop_empty)
        with open(staging.root / "corpus.jsonl", "w", encoding="utf-8", newline="\n") as handle:
            for index, entry in enumerate(data["documents"]):
                where = f"document {index + 1}"
                if isinstance(entry, str):
                    doc_id, title, text, metadata = str(index), "", entry, {}
                elif isinstance(entry, dict):
                    id_keys = [k for k in ("id", "_id", "doc_id") if k in entry]
                    if len(id_keys) > 1:
                        raise FormatError(path, f"{where}: both {id_keys[0]!r} and {id_keys[1]!r} given")
                    doc_id = _eval_set_id(path, where, entry[id_keys[0]]) if id_keys else str(index)
                    title = _eval_set_text(path, f"{where} title", entry.get("title"))
                    text = _eval_set_text(path, f"{where} text", entry.get("text"))
                    metadata = _metadata(entry, {*id_keys, "title", "text"})
                else:
                    raise FormatError(path, f"{where}: expected a string or an object, got {type(entry).__name__}")
                if doc_id in docs.ids or doc_id in docs.dropped:
                    raise FormatError(path, f"{where}: duplicate document id {doc_id!r}")
                docs.add(handle, doc_id, title, text, metadata, document_error, index + 1)
        queries = _RecordWriter("query", options.drop_empty)
        with open(staging.root / "queries.jsonl", "w", encoding="utf-8", newline="\n") as handle:
            for index, entry in enumerate(data["queries"]):
                where = f"query {index + 1}"
                if not isinstance(entry, dict):
                    raise FormatError(path, f"{where}: expected an object with text and relevant")
                query_id = _eval_set_id(path, where, entry["id"]) if "id" in entry else f"q{index + 1}"
                if query_id in queries.ids or query_id in queries.dropped:
                    raise FormatError(path, f"{where}: duplicate query id {query_id!r}")
                text = _eval_set_text(path, f"{where} text", entry.get("text"))
                relevant = entry.get("relevant")
                if isinstance(relevant, list):
                    grades = {_eval_set_id(path, f"{where} relevant", d): 1 for d in relevant}
                elif isinstance(relevant, dict):
                    grades = {}
                    for doc_id, grade in relevant.items():
                        key = _eval_set_id(path, f"{where} relevant", doc_id)
                        try:
                            given = grades[key] = _scaled_grade(grade, options)
                        except ValueError as exc:
                            raise FormatError(path, f"{where}: relevant {doc_id!r}: {exc}") from None
                        scale = options.grade_scale
                        if scale and not scale[0] <= given <= scale[1]:
                            raise FormatError(
                                path,
                                f"{where}: relevant {doc_id!r}: grade {given} is outside the "
                                f"scale {scale[0]}-{scale[1]}",
                                hint=f"correct it, or widen {setting('grade_scale')}",
                            )
                elif relevant is None:
                    grades = {}
                else:
                    raise FormatError(path, f"{where}: 'relevant' must be a list of ids or an object id → grade")
                for doc_id, grade in grades.items():
                    judgments.add(query_id, doc_id, grade, index + 1)
                queries.add(
                    handle, query_id, "", text, _metadata(entry, {"id", "text", "relevant"}), query_error, index + 1
                )
        if not judgments.by_pair:
            raise FormatError(path, "no query has relevant documents", hint="give each query a 'relevant' list")
        staging.finish(summary, judgments, queries, docs, ("the queries", "the documents"), options, Problems())
    return summary
