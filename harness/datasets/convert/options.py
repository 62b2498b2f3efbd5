"""What a conversion is told and what it reports: the column names it looks for, the explicit `ColumnMap`, the
`ConvertOptions`, and the `ConversionSummary` of what was written."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CORPUS_ID = ("_id", "id", "doc_id", "docid", "corpus_id", "corpus-id")
CORPUS_TITLE = ("title",)
CORPUS_TEXT = ("text", "body", "content", "contents", "passage", "document")
QUERY_ID = ("_id", "id", "query_id", "qid", "query-id")
QUERY_TEXT = ("text", "query", "question")
QRELS_QUERY = ("query-id", "query_id", "qid")
QRELS_DOC = ("corpus-id", "corpus_id", "doc_id", "docid")
QRELS_SCORE = ("score", "relevance", "grade", "label", "rel")
# Sheet names that say which table a sheet of a workbook holds (compared in lower case).
SHEET_NAMES = {
    "corpus": ("corpus", "documents", "docs", "passages", "articles", "collection"),
    "queries": ("queries", "questions", "topics"),
    "qrels": ("qrels", "judgments", "judgements", "relevance", "labels", "assessments"),
    "excluded": ("excluded", "exclusions", "excluded pairs"),
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
    n_excluded: int = 0  # excluded pairs written (excluded/<split>.tsv)
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
