"""The conversions: `convert_tables` (corpus, queries and judgments tables) and `convert_eval_set` (one
eval-set file), each checking everything before the folder it stages is renamed into place."""

from __future__ import annotations

import itertools
from pathlib import Path

from harness.datasets.convert.columns import check_columns
from harness.datasets.convert.eval_set import load_eval_set, write_documents, write_queries
from harness.datasets.convert.folder import Staging, existing_beir_files, plan_folder
from harness.datasets.convert.options import ConversionSummary, ConvertOptions
from harness.datasets.convert.problems import ColumnProblems, Problems
from harness.datasets.convert.writer import Judgments, RecordWriter, read_excluded_table, read_qrels_table
from harness.datasets.excel import EXCEL_SUFFIXES, Workbook
from harness.errors import FormatError, HarnessError, OutputError, setting
from harness.io.formats import iter_corpus, iter_queries


def convert_tables(
    corpus: str | Path | None,
    queries: str | Path | None,
    qrels: str | Path | None,
    out: str | Path,
    options: ConvertOptions = ConvertOptions(),
    excluded: str | Path | None = None,
) -> ConversionSummary:
    """Convert corpus, queries and qrels tables into a BEIR folder.

    Args:
        corpus: Documents table; may be omitted only when adding a split to an existing folder.
        queries: Queries table; likewise.
        qrels: Judgments table; None: a folder not judged yet (``qrels/<split>.tsv`` a header only: pool it).
        out: The BEIR folder to create (or to add ``qrels/<split>.tsv`` to).
        options: Split, force, empty-text and negative-grade policy, explicit columns.
        excluded: Excluded pairs (query id, document id: the judgments' column names), written as
            ``excluded/<split>.tsv``: no ranking of the split may hold them (`harness.io.exclusions`).

    Returns:
        A summary of what was written.

    Raises:
        FormatError: Bad input, naming the file and line; nothing is written.
        OutputError: The folder exists (without ``force``) or cannot be written.
    """
    out = Path(out)
    _check_options(options, {"corpus": corpus, "queries": queries, "qrels": qrels, "excluded": excluded})
    mode = plan_folder(out, options.split, options.force)
    if (mode != "add-split" or qrels is None) and (corpus is None or queries is None):
        raise HarnessError(
            f"{setting('corpus')} and {setting('queries')} are required unless {setting('split')} adds a split to an existing folder"
        )
    problems, books = Problems(), {}
    try:
        check_columns(
            [
                (kind, Path(path))
                for kind, path in (("corpus", corpus), ("queries", queries), ("qrels", qrels), ("excluded", excluded))
                if path is not None
            ],
            options,
            books,
        )
        judged = Path(qrels) if qrels is not None else None
        return _convert(corpus, queries, judged, out, options, mode, problems, books, excluded)
    except ColumnProblems:
        raise
    except FormatError as exc:
        # A table that cannot be read on (broken JSON, bytes that are not UTF-8) ends the run; the rows
        # already found wrong are reported with it. The one problem `Problems.raise_any` raised is among them
        # already: added again, it would be listed twice.
        if not problems.count or any(exc is shown for shown in problems.shown):
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
    excluded: str | Path | None = None,
) -> ConversionSummary:
    judgments = read_qrels_table(qrels, options, problems, books) if qrels else Judgments(out, "row", sink=problems)
    pairs = read_excluded_table(Path(excluded), options, problems, books) if excluded is not None else None
    summary = ConversionSummary(str(out), options.split, mode)
    for table in (judgments, pairs):
        if table is not None and table.description:
            summary.formats[str(table.path)] = table.description
    with Staging(out) as staging:
        docs = RecordWriter("document", options.drop_empty, problems)
        queries_writer = RecordWriter("query", options.drop_empty, problems)
        existing = existing_beir_files(out) if mode == "add-split" else None
        for kind, source, writer in (("queries", queries, queries_writer), ("corpus", corpus, docs)):
            if source is None:
                # Adding a split: its ids resolve against the folder's own files.
                reader = iter_corpus if kind == "corpus" else iter_queries
                writer.ids = {record[0]: 0 for record in reader(existing[kind])}
                writer.source = str(existing[kind])
                continue
            _write_table(kind, Path(source), writer, staging, options, books)
            if writer.description:
                summary.formats[writer.source] = writer.description
            if existing is not None and not problems.count:
                _require_same(kind, staging.root / f"{kind}.jsonl", existing[kind])
        names = (queries_writer.source, docs.source)
        staging.finish(summary, judgments, queries_writer, docs, names, options, problems, pairs)
    return summary


def _write_table(
    kind: str,
    source: Path,
    writer: RecordWriter,
    staging: Staging,
    options: ConvertOptions,
    books: dict[Path, Workbook],
) -> None:
    """The corpus or queries table into the staged ``corpus.jsonl`` / ``queries.jsonl``."""
    with open(staging.root / f"{kind}.jsonl", "w", encoding="utf-8", newline="\n") as handle:
        writer.write_table(source, handle, options, books)


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
    data = load_eval_set(path)
    mode = plan_folder(out, options.split, options.force)
    if mode == "add-split":
        raise OutputError(f"{out}: exists; pass {setting('force')} to replace it with the eval set's folder")
    summary = ConversionSummary(str(out), options.split, mode)
    judgments = Judgments(path, "query")
    with Staging(out) as staging:
        docs = RecordWriter("document", options.drop_empty)
        with open(staging.root / "corpus.jsonl", "w", encoding="utf-8", newline="\n") as handle:
            write_documents(path, data["documents"], docs, handle)
        queries = RecordWriter("query", options.drop_empty)
        with open(staging.root / "queries.jsonl", "w", encoding="utf-8", newline="\n") as handle:
            write_queries(path, data["queries"], queries, handle, judgments, options)
        if not judgments.by_pair:
            raise FormatError(path, "no query has relevant documents", hint="give each query a 'relevant' list")
        staging.finish(summary, judgments, queries, docs, ("the queries", "the documents"), options, Problems())
    return summary
