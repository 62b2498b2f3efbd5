"""The trec_eval inputs on disk: qrels (BEIR's TSV, TREC's four columns, JSON) and runs (TREC, MS MARCO, JSON),
read strictly and streamed, written atomically."""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from harness.errors import FormatError
from harness.io.files import atomic_writer
from harness.io.lines import ErrorHandler, check_trec_id, decode_line, iter_lines, open_binary, report_error
from harness.records import Qrels, Run

QRELS_HEADER = ("query-id", "corpus-id", "score")

QRELS_FORMATS = ("beir", "trec", "json")


def qrels_format(path: str | Path) -> str:
    """Which of `QRELS_FORMATS` a judgments file is, from its name and first line: ``json`` for a ``.json``
    name or a file starting with ``{``; ``beir`` when the first line has three tab-separated columns (BEIR's
    header, or a BEIR file missing it); else ``trec`` (``query_id iteration doc_id grade``)."""
    path = Path(path)
    if _looks_like_json(path):
        return "json"
    try:
        first = next((line for _, line in iter_lines(path, None)), b"")
    except FormatError:
        return "beir"  # unreadable: the BEIR reader says why, naming the file
    return "beir" if first.count(b"\t") == 2 else "trec"


def iter_qrels(
    path: str | Path, digest: Any | None = None, on_error: ErrorHandler | None = None, check_ids: bool = False
) -> Iterator[tuple[int | None, str, str, int]]:
    """Stream the judgments of a qrels file as (line_no, query_id, doc_id, grade), in the format
    `qrels_format` finds: BEIR TSV, TREC qrels or JSON (whose judgments have no line: line_no is None).

    Checks BEIR's header (``query-id<TAB>corpus-id<TAB>score``), the column count (TREC's four, as
    trec_eval reads them, ``#`` comment lines skipped as it skips them) and that grades are integers;
    duplicates are `read_qrels`'s business.

    Args:
        path: The qrels file (plain or ``.gz``).
        digest: Optional hashlib object updated with the file's uncompressed bytes.
        on_error: As for `iter_corpus`: collect problems and skip the bad lines.
        check_ids: Also refuse ids that contain whitespace (trec_eval's qrels cannot hold them).
    """
    path = Path(path)
    readers = {"beir": _beir_qrels, "trec": _trec_qrels, "json": _json_qrels}
    for line_no, query_id, doc_id, grade in readers[qrels_format(path)](path, digest, on_error):
        try:
            if check_ids:
                check_trec_id(path, line_no, "query", query_id)
                check_trec_id(path, line_no, "document", doc_id)
        except FormatError as exc:
            report_error(exc, on_error)
            continue
        yield line_no, query_id, doc_id, grade


_Judgments = Iterator[tuple[int | None, str, str, int]]


def _beir_qrels(path: Path, digest: Any | None, on_error: ErrorHandler | None) -> _Judgments:
    header_seen = False
    for line_no, line in iter_lines(path, digest):
        try:
            columns = decode_line(path, line_no, line).split("\t")
            if not header_seen:
                header_seen = True
                if tuple(c.strip() for c in columns) != QRELS_HEADER:
                    raise FormatError(
                        path,
                        f"wrong header {line.decode('utf-8', 'replace')!r}",
                        line_no,
                        "the first line must be 'query-id<TAB>corpus-id<TAB>score' (BEIR); a TREC qrels line "
                        "has four columns, 'query_id 0 doc_id grade'",
                    )
                continue
            yield (line_no, *_qrels_line(path, line_no, columns))
        except FormatError as exc:
            report_error(exc, on_error)


def _trec_qrels(path: Path, digest: Any | None, on_error: ErrorHandler | None) -> _Judgments:
    """trec_eval's qrels: ``query_id iteration doc_id grade``, whitespace-separated, the iteration ignored."""
    for line_no, line in iter_lines(path, digest):
        try:
            columns = decode_line(path, line_no, line).split()
            if not columns or columns[0].startswith("#"):
                continue  # trec_eval skips comment lines (and str.split's whitespace is wider than bytes')
            if len(columns) != 4:
                raise FormatError(
                    path,
                    f"expected 4 columns (TREC qrels), found {len(columns)}",
                    line_no,
                    "a TREC qrels line is 'query_id 0 doc_id grade'; a BEIR qrels file starts "
                    "with the header query-id<TAB>corpus-id<TAB>score",
                )
            query_id, _, doc_id, grade_text = columns
            yield line_no, query_id, doc_id, _grade(path, line_no, grade_text, "grade")
        except FormatError as exc:
            report_error(exc, on_error)


def _json_qrels(path: Path, digest: Any | None, on_error: ErrorHandler | None) -> _Judgments:
    """``{query_id: {doc_id: grade}}``, as ranx and ir_measures take qrels from Python."""
    data = _json_document(path, digest, "qrels", "a JSON qrels file is one object {query_id: {doc_id: grade}}")
    if not isinstance(data, dict) or not all(isinstance(docs, dict) for docs in data.values()):
        raise FormatError(path, "a JSON qrels file must map each query_id to {doc_id: grade}")
    for query_id, docs in data.items():
        for doc_id, grade in docs.items():
            if isinstance(grade, bool) or not isinstance(grade, int):
                report_error(
                    FormatError(
                        path,
                        f"grade {grade!r} of {query_id!r}/{doc_id!r} is not an integer",
                        hint="relevance grades are integers such as 0, 1, 2 (is this a run?)",
                    ),
                    on_error,
                )
                continue
            yield None, str(query_id), str(doc_id), grade


def read_qrels(
    path: str | Path,
    digest: Any | None = None,
    on_error: ErrorHandler | None = None,
    check_ids: bool = False,
    allow_empty: bool = False,
) -> Qrels:
    """Read a qrels file into `Qrels`: BEIR TSV, TREC qrels or JSON, told apart by `qrels_format`.

    A (query, document) pair written twice with the same grade is accepted once; with two
    different grades it is an error, since either choice would silently change the scores.

    Args:
        path: The qrels file (plain or ``.gz``).
        digest: Optional hashlib object updated with the file's uncompressed bytes.
        on_error: As for `iter_corpus`: collect problems and skip the bad lines.
        check_ids: As for `iter_qrels`. allow_empty: a header only (not judged yet) is empty `Qrels`.

    Returns:
        The `Qrels`: query id → document id → grade.

    Raises:
        FormatError: A wrong BEIR header, a wrong column count, a non-integer grade, a conflicting
            duplicate, or no judgments at all.
    """
    path = Path(path)
    judgments: dict[str, dict[str, int]] = {}
    first_line: dict[tuple[str, str], int] = {}
    for line_no, query_id, doc_id, grade in iter_qrels(path, digest, on_error, check_ids):
        docs = judgments.setdefault(query_id, {})
        if doc_id in docs and docs[doc_id] != grade:
            report_error(
                FormatError(
                    path,
                    f"({query_id}, {doc_id}) judged {docs[doc_id]} on line "
                    f"{first_line[(query_id, doc_id)]} and {grade} here",
                    line_no,
                    "keep one judgment per pair",
                ),
                on_error,
            )
            continue
        first_line.setdefault((query_id, doc_id), line_no)
        docs[doc_id] = grade
    if not judgments and not allow_empty:
        report_error(
            FormatError(
                path,
                "no judgments",
                hint="a BEIR qrels file needs a header and at least one line; "
                "TREC qrels one line 'query_id 0 doc_id grade'",
            ),
            on_error,
        )
    return Qrels(judgments)


def _qrels_line(path: Path, line_no: int, columns: list[str]) -> tuple[str, str, int]:
    if len(columns) != 3:
        raise FormatError(
            path,
            f"expected 3 tab-separated columns, found {len(columns)}",
            line_no,
            "each line is query-id<TAB>corpus-id<TAB>score",
        )
    query_id, doc_id, grade_text = (c.strip() for c in columns)
    if not query_id or not doc_id:
        raise FormatError(path, "empty query-id or corpus-id", line_no)
    return query_id, doc_id, _grade(path, line_no, grade_text, "score")


def _grade(path: Path, line_no: int, text: str, column: str) -> int:
    """An integer grade; ``1.5`` or ``high`` is refused (trec_eval's atol would read 1.5 as 1, silently)."""
    try:
        return int(text)
    except ValueError:
        raise FormatError(
            path, f"{column} {text!r} is not an integer", line_no, "relevance grades are integers such as 0, 1, 2"
        ) from None


RUN_FORMATS = ("trec", "msmarco", "json")


def read_run(path: str | Path, digest: Any | None = None, run_format: str = "auto") -> Run:
    """Read a run file in one of the formats people have; the run's ``metadata["format"]`` says which.

    * ``trec``: ``query_id Q0 doc_id rank score tag``, whitespace-separated; as trec_eval reads it, words
      after the tag are ignored and lines starting with ``#`` are comments;
    * ``msmarco``: ``query_id doc_id rank`` (MS MARCO's three columns; the score is ``-rank``, so the
      ranking is the file's);
    * ``json``: ``{query_id: {doc_id: score}}``, as ranx and BEIR write runs.

    ``auto`` takes ``json`` for a ``.json`` name or a file starting with ``{``, else the column count of
    the first line. As in trec_eval, a TREC run's rank column is ignored and documents are ordered by
    score (ties by doc_id descending; see `harness.records`).

    Args:
        path: The run file (plain or ``.gz``).
        digest: Optional hashlib object updated with the file's uncompressed bytes.
        run_format: ``auto`` or one of `RUN_FORMATS`.

    Returns:
        The `Run`, each query's documents in trec_eval's order.

    Raises:
        FormatError: A line that fits no format (naming the formats), a non-numeric or non-finite score,
            a document listed twice for one query, or an empty file.
    """
    path = Path(path)
    if run_format not in ("auto", *RUN_FORMATS):
        raise FormatError(path, f"unknown run format {run_format!r}; use auto, {', '.join(RUN_FORMATS)}")
    if run_format == "json" or (run_format == "auto" and _looks_like_json(path)):
        return _read_json_run(path, digest)
    scores: dict[str, dict[str, float]] = {}
    tags: set[str] = set()
    detected = None if run_format == "auto" else run_format
    for line_no, line in iter_lines(path, digest):
        columns = decode_line(path, line_no, line).split()
        if not columns or (columns[0].startswith("#") and detected != "msmarco"):
            continue  # trec_eval skips comment lines
        detected = detected or ("trec" if len(columns) >= 6 else {3: "msmarco"}.get(len(columns)))
        _check_run_columns(path, line_no, columns, detected)
        if detected == "trec":
            query_id, _, doc_id, _, score_text, tag = columns[:6]  # trec_eval ignores the rest of the line
            tags.add(tag)
        else:
            query_id, doc_id, rank_text = columns
            score_text = f"-{rank_text}" if rank_text.isdigit() else rank_text
        _add_score(scores, path, line_no, query_id, doc_id, score_text, detected)
    if not scores:
        raise FormatError(path, "the run is empty")
    name = tags.pop() if len(tags) == 1 else path.name
    return Run.from_scores(scores, name=name, metadata={"source": str(path), "format": detected})


def _check_run_columns(path: Path, line_no: int, columns: list[str], detected: str | None) -> None:
    """Refuse a line that fits no run format; five columns of a TREC line are a missing run tag."""
    fits = len(columns) >= 6 if detected == "trec" else len(columns) == 3 and detected == "msmarco"
    if fits:
        return
    if len(columns) == 5 and detected in ("trec", None):
        raise FormatError(
            path,
            "the run tag (sixth column) is missing: found 5 columns",
            line_no,
            "a TREC run line is 'query_id Q0 doc_id rank score tag'; add a name for the run as the sixth column",
        )
    raise FormatError(
        path,
        f"expected {'6' if detected == 'trec' else '3' if detected else '6 or 3'} columns, found {len(columns)}",
        line_no,
        "a TREC run line is 'query_id Q0 doc_id rank score tag'; "
        "an MS MARCO one 'query_id doc_id rank'; a JSON run is {query_id: {doc_id: score}}",
    )


def _add_score(
    scores: dict[str, dict[str, float]],
    path: Path,
    line_no: int,
    query_id: str,
    doc_id: str,
    score_text: str,
    run_format: str,
) -> None:
    try:
        score = float(score_text)
    except ValueError:
        what = "the fifth column is the retrieval score" if run_format == "trec" else "the third column is the rank"
        raise FormatError(
            path,
            f"{'score' if run_format == 'trec' else 'rank'} {score_text.lstrip('-')!r} is not a number",
            line_no,
            what,
        ) from None
    if not math.isfinite(score):
        raise FormatError(path, f"score {score_text!r} is not finite", line_no)
    docs = scores.setdefault(query_id, {})
    if doc_id in docs:
        raise FormatError(
            path,
            f"document {doc_id!r} listed twice for query {query_id!r}",
            line_no,
            "trec_eval rejects duplicate documents; keep one line per pair",
        )
    docs[doc_id] = score


def _looks_like_json(path: Path) -> bool:
    if path.name.endswith((".json", ".json.gz")):
        return True
    try:
        with open_binary(path) as handle:
            return handle.read(256).lstrip().startswith(b"{")
    except (OSError, EOFError, gzip.BadGzipFile):
        return False


def _json_document(path: Path, digest: Any | None, what: str, hint: str) -> Any:
    """A whole JSON file parsed; a JSON Lines file is named as such (a corpus or queries file given by mistake)."""
    with open_binary(path) as handle:
        try:
            raw = handle.read()
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise FormatError(path, f"cannot read: {exc}", hint="the file is damaged or truncated") from exc
    if digest is not None:
        digest.update(raw)
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        lines = raw.strip().splitlines()
        jsonl = len(lines) > 1 and lines[0].strip().startswith(b"{") and lines[0].strip().endswith(b"}")
        problem = (
            "one JSON object per line (JSON Lines: a corpus or queries file?)" if jsonl else f"not valid JSON ({exc})"
        )
        raise FormatError(path, f"not {what}: {problem}", hint=hint) from None
    return data


def _read_json_run(path: Path, digest: Any | None) -> Run:
    data = _json_document(path, digest, "a run", "a JSON run is one object {query_id: {doc_id: score}}")
    if not isinstance(data, dict) or not all(isinstance(docs, dict) for docs in data.values()):
        raise FormatError(path, "a JSON run must map each query_id to {doc_id: score}")
    scores: dict[str, dict[str, float]] = {}
    for query_id, docs in data.items():
        for doc_id, score in docs.items():
            if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
                raise FormatError(path, f"score {score!r} of {query_id!r}/{doc_id!r} is not a finite number")
            scores.setdefault(str(query_id), {})[str(doc_id)] = float(score)
    if not any(scores.values()):
        raise FormatError(path, "the run is empty")
    return Run.from_scores(scores, name=path.name.split(".")[0], metadata={"source": str(path), "format": "json"})


def write_run(run: Run, path: str | Path) -> None:
    """Write a run as a TREC run file, atomically, in rank order.

    Scores are written with full precision (``repr``), so reading the file back gives the
    same floats and therefore the same ranking and the same metrics.

    Raises:
        FormatError: An id contains whitespace, which the TREC format cannot represent.
    """
    path = Path(path)
    tag = "_".join(run.name.split()) or "run"
    with atomic_writer(path) as handle:
        for query_id, hits in run.items():
            for rank, hit in enumerate(hits, start=1):
                if len(hit.doc_id.split()) != 1 or len(query_id.split()) != 1:
                    raise FormatError(
                        path,
                        f"id {query_id!r}/{hit.doc_id!r} contains whitespace",
                        hint="TREC run files cannot hold such ids",
                    )
                handle.write(f"{query_id} Q0 {hit.doc_id} {rank} {hit.score!r} {tag}\n")


def write_qrels(judgments: Iterable[tuple[str, str, int]], path: str | Path) -> int:
    """Write a BEIR qrels file (header, then ``query-id<TAB>corpus-id<TAB>score``), atomically.

    Returns:
        The number of judgments written.
    """
    count = 0
    with atomic_writer(path) as handle:
        handle.write("\t".join(QRELS_HEADER) + "\n")
        for query_id, doc_id, grade in judgments:
            handle.write(f"{query_id}\t{doc_id}\t{grade}\n")
            count += 1
    return count
