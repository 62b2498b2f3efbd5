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

The modules, lowest first: `options` (settings, summary), `problems` (every problem in one run), `tables`
(reading each format), `grades` (grades and the grade scale), `columns` (which column plays which role),
`writer` (judgments and records), `folder` (the staged output folder), `eval_set` (one eval-set file) and
`conductor` (`convert_tables`, `convert_eval_set`).
"""

from harness.datasets.convert.columns import resolve_column
from harness.datasets.convert.conductor import convert_eval_set, convert_tables
from harness.datasets.convert.grades import parse_grade, parse_grade_scale, scale_bounds
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
    ColumnMap,
    ConversionSummary,
    ConvertOptions,
)
from harness.datasets.convert.problems import PROBLEM_LIMIT, ColumnProblems, Problems, RowProblems
from harness.datasets.convert.tables import (
    DELIMITERS,
    TABLE_SUFFIXES,
    TREC_QRELS_SUFFIXES,
    Table,
    excel_table,
    open_table,
    sniff_delimiter,
)

__all__ = [
    "CORPUS_ID",
    "CORPUS_TEXT",
    "CORPUS_TITLE",
    "DELIMITERS",
    "PROBLEM_LIMIT",
    "QRELS_DOC",
    "QRELS_QUERY",
    "QRELS_SCORE",
    "QUERY_ID",
    "QUERY_TEXT",
    "SHEET_NAMES",
    "TABLE_SUFFIXES",
    "TREC_QRELS_SUFFIXES",
    "ColumnMap",
    "ColumnProblems",
    "ConversionSummary",
    "ConvertOptions",
    "Problems",
    "RowProblems",
    "Table",
    "convert_eval_set",
    "convert_tables",
    "excel_table",
    "open_table",
    "parse_grade",
    "parse_grade_scale",
    "resolve_column",
    "scale_bounds",
    "sniff_delimiter",
]
