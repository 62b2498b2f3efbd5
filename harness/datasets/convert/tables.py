"""Input tables read as streams of records: CSV/TSV (the delimiter sniffed), JSON Lines, a JSON list,
parquet, one sheet of an Excel workbook, and whitespace-separated judgments (TREC qrels); each bad line named."""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import itertools
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from harness.datasets.convert.options import QRELS_DOC, QRELS_QUERY
from harness.datasets.convert.problems import Problems
from harness.datasets.excel import EXCEL_SUFFIXES, Workbook
from harness.errors import FormatError, MissingDependencyError, setting

TABLE_SUFFIXES = (".csv", ".tsv", ".jsonl", ".json", ".parquet", *EXCEL_SUFFIXES)


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
def trec_qrels_table(path: Path) -> Iterator[Table]:
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
