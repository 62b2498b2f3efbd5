"""Excel workbooks (``.xlsx``) as input tables, read through openpyxl (the ``excel`` extra).

A sheet is read as Excel shows it: the first non-empty row names the columns, positions are Excel's
own row numbers, and a formula counts as the value Excel saved with it (openpyxl's ``data_only``
mode; openpyxl computes no formula, so a formula saved without its value is an error naming the
cell). Merged header cells are refused, naming their range. Workbooks are read in openpyxl's
read-only (streaming) mode, so a large corpus sheet is never held in memory.
"""

from __future__ import annotations

import difflib
import itertools
import posixpath
import warnings
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from harness.errors import FormatError, MissingDependencyError

EXCEL_SUFFIXES = (".xlsx", ".xlsm")
_NO_VALUE_HINT = (
    "openpyxl reads the values Excel saves with its formulas and computes none: open the workbook "
    "in Excel or LibreOffice and save it, or paste the cells as values"
)


def _load(path: Path) -> Any:
    try:
        import openpyxl
    except ImportError as exc:
        raise MissingDependencyError(
            "reading .xlsx needs openpyxl: pip install 'beir-harness[excel]' (or save the sheets as .csv)"
        ) from exc
    try:
        # openpyxl warns about parts it drops (data validation extensions, print settings): nothing a table needs.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return openpyxl.load_workbook(path, read_only=True, data_only=True)
    except Exception as exc:  # noqa: BLE001 - zipfile, XML and openpyxl raise several unrelated types
        raise FormatError(
            path, f"not a readable .xlsx workbook: {exc}", hint="save it from Excel as 'Excel Workbook (.xlsx)'"
        ) from None


def suggestion(wanted: str, names: list[str]) -> str:
    """``did you mean 'ArticleNo'? `` for the names close to `wanted` (case ignored; a name inside the
    other first, then the spellings difflib finds close), or ``""``."""
    wanted = wanted.strip().lower()
    by_lower = {name.lower(): name for name in names}
    close = [name for lower, name in by_lower.items() if wanted and (wanted in lower or lower in wanted)]
    close += [by_lower[c] for c in difflib.get_close_matches(wanted, list(by_lower), n=3, cutoff=0.7)]
    close = list(dict.fromkeys(close))[:3]
    return f"did you mean {' or '.join(map(repr, close))}? " if close else ""


def column_letter(index: int) -> str:
    """Excel's name of the 1-based column `index`: 1 → A, 27 → AA."""
    letters = ""
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(ord("A") + rest) + letters
    return letters


def _row_of(ref: str) -> int:
    """The row number of a cell reference: ``C12`` → 12."""
    return int("".join(ch for ch in ref if ch.isdigit()) or 0)


def _is_empty(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


class Workbook:
    """An open workbook: its sheet names, each sheet's header, and a stream of each sheet's rows."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise FormatError(self.path, "no such file")
        self.book = _load(self.path)
        self.sheet_names: list[str] = list(self.book.sheetnames)
        self.scans: dict[str, tuple[list[tuple[str, int, int]], dict[int, str]]] = {}

    def close(self) -> None:
        self.book.close()

    def __enter__(self) -> Workbook:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def where(self, sheet: str) -> str:
        """How messages name a sheet: ``book.xlsx, sheet 'Judgments'``."""
        return f"{self.path}, sheet {sheet!r}"

    def find_sheet(self, name: str, option: str) -> str:
        """The sheet called `name` (case and surrounding spaces ignored).

        Raises:
            FormatError: No such sheet; the message lists the sheets and the closest names.
        """
        by_lower = {sheet.strip().lower(): sheet for sheet in self.sheet_names}
        found = by_lower.get(name.strip().lower())
        if found is not None:
            return found
        raise FormatError(
            self.path,
            f"no sheet {name!r} (from {option})",
            hint=f"{suggestion(name, self.sheet_names)}sheets: {', '.join(map(repr, self.sheet_names))}",
        )

    def _rows(self, sheet: str) -> Iterator[tuple[Any, ...]]:
        worksheet = self.book[sheet]
        if not hasattr(worksheet, "reset_dimensions"):
            raise FormatError(self.where(sheet), "is a chart sheet, not a table", hint="choose a sheet of cells")
        # A file's recorded dimensions can be wrong (some writers put A1); read every row there is.
        worksheet.reset_dimensions()
        rows = worksheet.iter_rows(values_only=True)
        for row_no in itertools.count(1):
            try:
                row = next(rows)
            except StopIteration:
                return
            except Exception as exc:  # noqa: BLE001 - a damaged sheet raises XML, zip and value errors alike
                raise FormatError(
                    self.where(sheet),
                    f"cannot read the sheet: {exc!r}",
                    row_no,
                    "the workbook is damaged; save it again from Excel or LibreOffice",
                    unit="row",
                ) from None
            yield row

    def header(self, sheet: str) -> tuple[int, list[str]] | None:
        """The header row's number and its column names (an empty cell is named by its letter:
        ``column C``), or None for an empty sheet.

        Raises:
            FormatError: Duplicate column names.
        """
        for row_no, values in enumerate(self._rows(sheet), start=1):
            if all(_is_empty(v) for v in values):
                continue
            cells = list(values)
            while cells and _is_empty(cells[-1]):
                cells.pop()
            names = [
                str(v).strip() if not _is_empty(v) else f"column {column_letter(i)}"
                for i, v in enumerate(cells, start=1)
            ]
            duplicates = sorted({n for n in names if names.count(n) > 1})
            if duplicates:
                raise FormatError(
                    self.where(sheet),
                    f"duplicate column name(s) {', '.join(map(repr, duplicates))} in the header",
                    row_no,
                    unit="row",
                )
            return row_no, names
        return None

    def open_sheet(
        self, sheet: str, skip: Callable[[FormatError], None]
    ) -> tuple[list[str], Iterator[tuple[int, dict]]]:
        """The columns of `sheet` and a stream of (row number, record) for its non-empty rows after the
        header. A row that cannot be read (a formula without a saved value, a value under no column
        name) is passed to `skip` (which raises it, or keeps it so that one run reports all of them).

        Raises:
            FormatError: An empty sheet, or merged cells in the header row.
        """
        where = self.where(sheet)
        found = self.header(sheet)
        if found is None:
            raise FormatError(
                where,
                "empty sheet: no header row",
                hint="put the column names in its first row, or choose another sheet with --sheet",
            )
        header_row, columns = found
        merged = [cells for cells in self.scan(sheet)[0] if cells[1] <= header_row <= cells[2]]
        if merged:
            raise FormatError(
                where,
                f"merged header cells {', '.join(cells[0] for cells in merged)}",
                header_row,
                "unmerge them and give each column its own name in its own cell",
                unit="row",
            )
        return columns, self._records(sheet, header_row, columns, skip)

    def _records(
        self, sheet: str, header_row: int, columns: list[str], skip: Callable[[FormatError], None]
    ) -> Iterator[tuple[int, dict]]:
        where = self.where(sheet)
        width = len(columns)
        uncached = self.scan(sheet)[1]
        for row_no, values in enumerate(self._rows(sheet), start=1):
            if row_no in uncached:
                skip(
                    FormatError(
                        where,
                        f"formula without a saved value in cell {uncached[row_no]}",
                        row_no,
                        _NO_VALUE_HINT,
                        unit="row",
                    )
                )
                continue
            if row_no <= header_row or all(_is_empty(v) for v in values):
                continue
            beyond = [i for i, v in enumerate(values[width:], start=width + 1) if not _is_empty(v)]
            if beyond:
                cell = f"{column_letter(beyond[0])}{row_no}"
                skip(
                    FormatError(
                        where,
                        f"cell {cell} holds a value under no column name",
                        row_no,
                        "name its column in the header row, or clear the cell",
                        unit="row",
                    )
                )
                continue
            # A number shows as Excel's General format shows it: 12.0 is 12 (an id "12", not "12.0").
            cells = [int(v) if isinstance(v, float) and v.is_integer() else v for v in values[:width]]
            yield row_no, dict(zip(columns, cells + [None] * (width - len(cells))))

    def scan(self, sheet: str) -> tuple[list[tuple[str, int, int]], dict[int, str]]:
        """What openpyxl's streaming mode does not say, from one pass over the sheet's XML: each merged
        range as (``A1:B1``, first row, last row), and each row holding a formula saved without its
        value → its first such cell (``C2 (=1+1)``)."""
        if sheet not in self.scans:
            try:
                self.scans[sheet] = self._scan(sheet)
            except (KeyError, StopIteration, ElementTree.ParseError, zipfile.BadZipFile, OSError) as exc:
                raise FormatError(
                    self.where(sheet),
                    f"cannot read the sheet's XML: {exc!r}",
                    hint="save the workbook again from Excel or LibreOffice as .xlsx",
                ) from None
        return self.scans[sheet]

    def _scan(self, sheet: str) -> tuple[list[tuple[str, int, int]], dict[int, str]]:
        merged, uncached, rows = [], {}, None
        with zipfile.ZipFile(self.path) as archive, archive.open(self._sheet_member(archive, sheet)) as xml:
            for event, element in ElementTree.iterparse(xml, events=("start", "end")):
                tag = _local(element.tag)
                if event == "start":
                    rows = element if tag == "sheetData" else rows
                    continue
                if tag == "row" and rows is not None:
                    rows.clear()  # the rows read so far: memory stays flat however long the sheet
                elif tag == "c":
                    formula = next((child for child in element if _local(child.tag) == "f"), None)
                    value = next((child for child in element if _local(child.tag) == "v"), None)
                    if formula is not None and (value is None or not (value.text or "").strip()):
                        ref = element.get("r", "")
                        uncached.setdefault(_row_of(ref), f"{ref} (={formula.text or 'a shared formula'})")
                elif tag == "mergeCell":
                    ref = element.get("ref", "")
                    rows_of = [_row_of(part) for part in ref.split(":")]
                    merged.append((ref, min(rows_of), max(rows_of)))
        return merged, uncached

    @staticmethod
    def _sheet_member(archive: zipfile.ZipFile, sheet: str) -> str:
        """The zip member holding `sheet`: the package names the workbook part, the workbook the sheet's
        relationship, and the workbook's relationships the sheet's file."""
        package = ElementTree.fromstring(archive.read("_rels/.rels"))
        workbook = next(
            _part("", node.get("Target", "")) for node in package if node.get("Type", "").endswith("/officeDocument")
        )
        rel_id = next(
            value
            for node in ElementTree.fromstring(archive.read(workbook)).iter()
            if _local(node.tag) == "sheet" and node.get("name") == sheet
            for key, value in node.attrib.items()
            if key.endswith("}id")
        )
        folder, name = posixpath.split(workbook)
        rels = ElementTree.fromstring(archive.read(posixpath.join(folder, "_rels", f"{name}.rels")))
        return next(_part(folder, node.get("Target", "")) for node in rels if node.get("Id") == rel_id)


def _local(tag: str) -> str:
    """An XML tag without its namespace (transitional and strict OOXML name them differently)."""
    return tag.rsplit("}", 1)[-1]


def _part(folder: str, target: str) -> str:
    """A relationship's target as a zip member name: absolute (``/xl/...``) or relative to `folder`."""
    return target.lstrip("/") if target.startswith("/") else posixpath.normpath(posixpath.join(folder, target))
