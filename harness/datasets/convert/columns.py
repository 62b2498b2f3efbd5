"""Which column (and which sheet of a workbook) plays each role of a table: explicit names or the common ones,
every column problem of every table found before anything is converted."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.datasets.convert.options import (
    CORPUS_ID,
    CORPUS_TEXT,
    CORPUS_TITLE,
    QRELS_DOC,
    QRELS_QUERY,
    QRELS_SCORE,
    QUERY_ID,
    QUERY_TEXT,
    SHEET_NAMES,
    ConvertOptions,
)
from harness.datasets.convert.problems import ColumnProblems
from harness.datasets.convert.tables import TREC_QRELS_SUFFIXES, Table, excel_table, open_table, trec_qrels_table
from harness.datasets.excel import EXCEL_SUFFIXES, Workbook, suggestion
from harness.errors import FormatError, setting


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
    # Excluded pairs: a judgments table's two id columns (the same names, the same --qrels-*-column options).
    "excluded": (
        _Role("query", QRELS_QUERY, "qrels_query", "query id"),
        _Role("doc", QRELS_DOC, "qrels_doc", "document id"),
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


def columns_of(table: Table, kind: str, options: ConvertOptions) -> dict[str, str | None]:
    """The column of each role of a `kind` table; the first problem raised (`check_columns` listed them all)."""
    resolved, problems = _resolve_roles(table, kind, options)
    if problems:
        raise problems[0]
    return resolved


def check_columns(
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
            with open_any(path, kind, options, books) as table:
                problems += _resolve_roles(table, kind, options)[1]
        except FormatError as exc:
            problems.append(exc)
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise ColumnProblems(problems)


@contextlib.contextmanager
def open_any(
    path: Path, kind: str, options: ConvertOptions, books: dict[Path, Workbook] | None = None
) -> Iterator[Table]:
    """Any input table of `kind`; judgments may also be whitespace-separated text (.qrels/.txt), and a
    workbook's sheet is chosen by `_choose_sheet`. Workbooks opened are kept in `books` (the caller closes
    them): one workbook holding three tables is loaded once."""
    if kind == "qrels" and path.name.lower().removesuffix(".gz").endswith(TREC_QRELS_SUFFIXES):
        with trec_qrels_table(path) as table:
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


_TABLE_NAMES = {"corpus": "documents", "queries": "queries", "qrels": "judgments", "excluded": "excluded pairs"}


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
