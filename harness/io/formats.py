"""BEIR and TREC on-disk formats: streaming readers, strict checks, atomic writers.

This is the only module that knows BEIR's spellings:

* ``corpus.jsonl`` — one JSON object a line: ``{"_id", "title", "text", "metadata"?}``
* ``queries.jsonl`` — one JSON object a line: ``{"_id", "text", "metadata"?}``
* ``qrels/<split>.tsv`` — a header ``query-id<TAB>corpus-id<TAB>score`` then one judgment a line
  (`read_qrels` also reads TREC qrels, ``query_id 0 doc_id grade``, and JSON ``{query_id: {doc_id: grade}}``)

Any of them may be gzip-compressed (``.gz`` added to the name). Lines may end in CRLF (BEIR's
own qrels do). Readers stream: the corpus is never held in memory. Every reader can feed a
hash object with the *uncompressed* bytes it reads, so a file is fingerprinted in the same
pass that parses it. Bad input raises `FormatError` naming the file, the line and the fix.

Derived files are written atomically (`atomic_writer`): into a temporary sibling, flushed,
fsynced and renamed over the target, so a crash never leaves a half file that looks complete.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import logging
import math
import os
import re
import shutil
import tempfile
from glob import escape as glob_escape
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from harness.errors import DatasetError, FormatError, OutputError, setting
from harness.records import Doc, Qrels, Query, Run

logger = logging.getLogger(__name__)

QRELS_HEADER = ("query-id", "corpus-id", "score")


@dataclass(frozen=True)
class BeirFolder:
    """The files of one split of a BEIR dataset folder."""

    root: Path
    split: str
    corpus: Path
    queries: Path
    qrels: Path


def find_file(path: Path) -> Path | None:
    """`path`, or `path` + ``.gz``, whichever exists (BEIR files may be stored compressed)."""
    for candidate in (path, path.with_name(path.name + ".gz")):
        if candidate.is_file():
            return candidate
    return None


def locate_corpus_and_queries(root: str | Path) -> BeirFolder:
    """The corpus and queries of a BEIR folder, for retrieval without judgments (``qrels`` is left unset).

    Raises:
        DatasetError: The folder or one of the two files is missing.
    """
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"{root}: no such dataset folder (expected a BEIR folder with corpus.jsonl, "
                           "queries.jsonl and, to score, qrels/<split>.tsv)")
    found = {}
    for key, relative in (("corpus", "corpus.jsonl"), ("queries", "queries.jsonl")):
        path = find_file(root / relative)
        if path is None:
            raise DatasetError(f"{root}: missing {relative} (or {relative}.gz); this is not a BEIR folder")
        found[key] = path
    return BeirFolder(root, "", found["corpus"], found["queries"], root / "qrels")


def locate_beir_folder(root: str | Path, split: str) -> BeirFolder:
    """Find the corpus, queries and qrels files of one split of a BEIR folder.

    Each file may be plain or ``.gz``.

    Args:
        root: The dataset folder (holding ``corpus.jsonl``, ``queries.jsonl``, ``qrels/``).
        split: The qrels split, e.g. ``test``.

    Raises:
        DatasetError: The folder or one of its files is missing.
    """
    folder = locate_corpus_and_queries(root)
    root = folder.root
    qrels = find_file(root / "qrels" / f"{split}.tsv")
    if qrels is None:
        available = sorted(
            p.name.split(".")[0] for p in (root / "qrels").glob("*.tsv*")
        ) if (root / "qrels").is_dir() else []
        choice = f"available splits: {', '.join(available)}" if available else "the folder has no qrels/*.tsv"
        raise DatasetError(f"{root}: missing qrels/{split}.tsv ({choice}; pick one with {setting('split')})")
    return BeirFolder(root, split, folder.corpus, folder.queries, qrels)


@contextlib.contextmanager
def _open_binary(path: Path) -> Iterator[IO[bytes]]:
    try:
        handle: IO[bytes] = gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")
    except OSError as exc:
        raise FormatError(path, f"cannot open: {exc.strerror or exc}") from exc
    with handle:
        yield handle


def content_sha256(path: str | Path) -> str:
    """sha256 of a file's uncompressed content (a ``.gz`` file is hashed as its decompressed bytes)."""
    return content_digest(path)[0]


def content_digest(path: str | Path, check_ids: bool = False) -> tuple[str, int]:
    """(sha256, number of lines) of a file's uncompressed content, in one pass.

    The line count includes blank lines, so for a JSONL file it is an upper bound on its records.

    Args:
        path: The file.
        check_ids: Also refuse a JSONL record whose ``_id`` contains whitespace (see `check_trec_id`),
            without parsing every line: only ids that are not plain ASCII words are decoded.

    Raises:
        FormatError: The file cannot be read, or (with `check_ids`) an id holds whitespace.
    """
    path = Path(path)
    digest = hashlib.sha256()
    lines, last, carry = 0, b"", b""
    with _open_binary(path) as handle:
        try:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
                if check_ids:
                    # Scan whole lines only; the unfinished last line waits for the next block.
                    cut = block.rfind(b"\n") + 1
                    if cut:
                        _scan_ids(path, carry + block[:cut], lines)
                        carry = block[cut:]
                    else:
                        carry += block
                lines += block.count(b"\n")
                last = block[-1:]
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise FormatError(path, f"cannot read: {exc}", hint="the file is damaged or truncated") from exc
    if check_ids and carry:
        _scan_ids(path, carry, lines)
    return digest.hexdigest(), lines + (last not in (b"", b"\n"))


# The "_id" member of a JSONL record; the id's raw bytes are group 1 (JSON escapes undecoded).
_ID_MEMBER = re.compile(rb'"_id"\s*:\s*"((?:[^"\\]|\\.)*)"')
_PLAIN_ID = re.compile(rb"[A-Za-z0-9_.:/+#@=,;()\[\]{}<>|~!?*&%$'^`-]*")
TREC_ID_HINT = "TREC run files separate columns by whitespace; replace the whitespace in the ids (e.g. with '_')"


def check_trec_id(path: str | Path, line_no: int | None, kind: str, identifier: str) -> None:
    """Refuse an id a TREC run or qrels line cannot hold (one containing whitespace).

    Raises:
        FormatError: Naming the file, the line and the id.
    """
    if len(identifier.split()) != 1 or identifier.strip() != identifier:
        raise FormatError(path, f"{kind} id {identifier!r} contains whitespace", line_no, TREC_ID_HINT)


def _scan_ids(path: Path, lines: bytes, first_line_index: int) -> None:
    """Check the ids of a run of whole JSONL lines; decode only ids that are not plain ASCII."""
    counted_to, line_no = 0, first_line_index + 1
    for match in _ID_MEMBER.finditer(lines):
        if _PLAIN_ID.fullmatch(match.group(1)):
            continue
        start = lines.rfind(b"\n", 0, match.start()) + 1
        end = lines.find(b"\n", match.end())
        line_no += lines.count(b"\n", counted_to, start)
        counted_to = start
        try:
            identifier = json.loads(lines[start:end if end >= 0 else len(lines)]).get("_id")
        except (ValueError, UnicodeDecodeError, AttributeError):
            continue  # not a record: the parser reports the line when it reaches it
        if isinstance(identifier, str):
            check_trec_id(path, line_no, "document", identifier)


def _iter_lines(path: Path, digest: Any | None) -> Iterator[tuple[int, bytes]]:
    """Yield (line_no, line without its line ending), skipping blank lines."""
    with _open_binary(path) as handle:
        try:
            for line_no, raw in enumerate(handle, start=1):
                if digest is not None:
                    digest.update(raw)
                line = raw.rstrip(b"\r\n")
                if line.strip():
                    yield line_no, line
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise FormatError(path, f"cannot read: {exc}", hint="the file is damaged or truncated") from exc


ErrorHandler = Callable[[FormatError], None]


def _json_objects(path: Path, digest: Any | None, on_error: ErrorHandler | None) -> Iterator[tuple[int, dict]]:
    for line_no, line in _iter_lines(path, digest):
        try:
            record = json.loads(line)
        except (ValueError, UnicodeDecodeError) as exc:
            _report(FormatError(path, f"invalid JSON: {exc}", line_no, "each line must be one JSON object"),
                    on_error, exc)
            continue
        if not isinstance(record, dict):
            _report(FormatError(path, f"expected a JSON object, got {type(record).__name__}", line_no), on_error)
            continue
        yield line_no, record


def _report(error: FormatError, on_error: ErrorHandler | None, cause: BaseException | None = None) -> None:
    """Raise `error`, or hand it to `on_error` (which collects it) so the reader skips the line."""
    if on_error is None:
        raise error from cause
    on_error(error)


# Names other tools give a record's id; BEIR's is "_id" (convert reads all of them).
ID_ALIASES = ("id", "doc_id", "docid", "corpus_id", "query_id", "qid")


def _id_hint(record: dict) -> str:
    alias = next((name for name in ID_ALIASES if name in record), None)
    if "_id" in record or alias is None:
        return 'each record needs a string "_id"'
    return (f'the records name their id {alias!r}: rename the field to "_id", or build the folder with '
            f'`beir-harness convert`, which reads {alias!r}')


def _record_id(path: Path, line_no: int, record: dict) -> str:
    value = record.get("_id")
    if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value) == "":
        raise FormatError(path, 'missing or empty "_id"', line_no, _id_hint(record))
    return str(value)


def misnamed_id(path: str | Path) -> str | None:
    """The hint for a JSONL file whose first record lacks ``_id`` but has another id field (``id``, ...)
    — the whole file is then likely written that way — else None."""
    with _open_binary(Path(path)) as handle:
        for line in handle:
            if line.strip():
                try:
                    record = json.loads(line)
                except (ValueError, UnicodeDecodeError):
                    return None
                if isinstance(record, dict) and "_id" not in record and any(a in record for a in ID_ALIASES):
                    return _id_hint(record)
                return None
    return None


def _record_text(path: Path, line_no: int, record: dict, key: str, required: bool) -> str:
    value = record.get(key)
    if value is None:
        if required and key not in record:
            raise FormatError(path, f'missing "{key}"', line_no, f'each record needs a string "{key}"')
        return ""
    if not isinstance(value, str):
        raise FormatError(path, f'"{key}" must be a string, got {type(value).__name__}', line_no)
    return value


def _iter_records(path: Path, kind: str, digest: Any | None, on_error: ErrorHandler | None,
                  make: Callable[[str, int, dict], Any], check_ids: bool = False) -> Iterator[Any]:
    seen: set[str] = set()
    for line_no, record in _json_objects(path, digest, on_error):
        try:
            record_id = _record_id(path, line_no, record)
            if check_ids:
                check_trec_id(path, line_no, kind, record_id)
            if record_id in seen:
                raise FormatError(path, f"duplicate {kind} id {record_id!r}", line_no, f"{kind} ids must be unique")
            item = make(record_id, line_no, record)
        except FormatError as exc:
            _report(exc, on_error)
            continue
        seen.add(record_id)
        yield item


def iter_corpus(path: str | Path, digest: Any | None = None, on_error: ErrorHandler | None = None,
                check_ids: bool = False) -> Iterator[Doc]:
    """Stream the documents of a BEIR ``corpus.jsonl[.gz]``.

    Args:
        path: The corpus file.
        digest: Optional hashlib object updated with the file's uncompressed bytes.
        on_error: Called with each FormatError instead of raising it; the bad line is skipped
            (used by validation, which lists every problem).
        check_ids: Also refuse ids that contain whitespace (no TREC run can hold them).

    Yields:
        Doc records in file order. A missing or null title is ``""``.

    Raises:
        FormatError: A line is not a JSON object with ``_id`` and ``text``, or an id repeats.
    """
    path = Path(path)
    return _iter_records(path, "document", digest, on_error, lambda doc_id, line_no, record: Doc(
        doc_id, _record_text(path, line_no, record, "title", False), _record_text(path, line_no, record, "text", True)),
        check_ids)


def iter_queries(path: str | Path, digest: Any | None = None, on_error: ErrorHandler | None = None,
                 check_ids: bool = False) -> Iterator[Query]:
    """Stream the queries of a BEIR ``queries.jsonl[.gz]``.

    Args:
        path: The queries file.
        digest: Optional hashlib object updated with the file's uncompressed bytes.
        on_error: As for `iter_corpus`.
        check_ids: As for `iter_corpus`.

    Raises:
        FormatError: A line is not a JSON object with ``_id`` and ``text``, or an id repeats.
    """
    path = Path(path)
    return _iter_records(path, "query", digest, on_error, lambda query_id, line_no, record: Query(
        query_id, _record_text(path, line_no, record, "text", True)), check_ids)


def _decode(path: Path, line_no: int, line: bytes) -> str:
    try:
        return line.decode("utf-8-sig" if line_no == 1 else "utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(path, f"not UTF-8: {exc}", line_no, "save the file as UTF-8") from exc


QRELS_FORMATS = ("beir", "trec", "json")


def qrels_format(path: str | Path) -> str:
    """Which of `QRELS_FORMATS` a judgments file is, from its name and first line: ``json`` for a ``.json``
    name or a file starting with ``{``; ``beir`` when the first line has three tab-separated columns (BEIR's
    header, or a BEIR file missing it); else ``trec`` (``query_id iteration doc_id grade``)."""
    path = Path(path)
    if _looks_like_json(path):
        return "json"
    try:
        first = next((line for _, line in _iter_lines(path, None)), b"")
    except FormatError:
        return "beir"  # unreadable: the BEIR reader says why, naming the file
    return "beir" if first.count(b"\t") == 2 else "trec"


def iter_qrels(path: str | Path, digest: Any | None = None, on_error: ErrorHandler | None = None,
               check_ids: bool = False) -> Iterator[tuple[int | None, str, str, int]]:
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
            _report(exc, on_error)
            continue
        yield line_no, query_id, doc_id, grade


_Judgments = Iterator[tuple[int | None, str, str, int]]


def _beir_qrels(path: Path, digest: Any | None, on_error: ErrorHandler | None) -> _Judgments:
    header_seen = False
    for line_no, line in _iter_lines(path, digest):
        try:
            columns = _decode(path, line_no, line).split("\t")
            if not header_seen:
                header_seen = True
                if tuple(c.strip() for c in columns) != QRELS_HEADER:
                    raise FormatError(
                        path, f"wrong header {line.decode('utf-8', 'replace')!r}", line_no,
                        "the first line must be 'query-id<TAB>corpus-id<TAB>score' (BEIR); a TREC qrels line "
                        "has four columns, 'query_id 0 doc_id grade'",
                    )
                continue
            yield (line_no, *_qrels_line(path, line_no, columns))
        except FormatError as exc:
            _report(exc, on_error)


def _trec_qrels(path: Path, digest: Any | None, on_error: ErrorHandler | None) -> _Judgments:
    """trec_eval's qrels: ``query_id iteration doc_id grade``, whitespace-separated, the iteration ignored."""
    for line_no, line in _iter_lines(path, digest):
        try:
            columns = _decode(path, line_no, line).split()
            if not columns or columns[0].startswith("#"):
                continue  # trec_eval skips comment lines (and str.split's whitespace is wider than bytes')
            if len(columns) != 4:
                raise FormatError(path, f"expected 4 columns (TREC qrels), found {len(columns)}", line_no,
                                  "a TREC qrels line is 'query_id 0 doc_id grade'; a BEIR qrels file starts "
                                  "with the header query-id<TAB>corpus-id<TAB>score")
            query_id, _, doc_id, grade_text = columns
            yield line_no, query_id, doc_id, _grade(path, line_no, grade_text, "grade")
        except FormatError as exc:
            _report(exc, on_error)


def _json_qrels(path: Path, digest: Any | None, on_error: ErrorHandler | None) -> _Judgments:
    """``{query_id: {doc_id: grade}}``, as ranx and ir_measures take qrels from Python."""
    data = _json_document(path, digest, "qrels", "a JSON qrels file is one object {query_id: {doc_id: grade}}")
    if not isinstance(data, dict) or not all(isinstance(docs, dict) for docs in data.values()):
        raise FormatError(path, "a JSON qrels file must map each query_id to {doc_id: grade}")
    for query_id, docs in data.items():
        for doc_id, grade in docs.items():
            if isinstance(grade, bool) or not isinstance(grade, int):
                _report(FormatError(path, f"grade {grade!r} of {query_id!r}/{doc_id!r} is not an integer",
                                    hint="relevance grades are integers such as 0, 1, 2 (is this a run?)"), on_error)
                continue
            yield None, str(query_id), str(doc_id), grade


def read_qrels(path: str | Path, digest: Any | None = None, on_error: ErrorHandler | None = None,
               check_ids: bool = False, allow_empty: bool = False) -> Qrels:
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
            _report(FormatError(
                path, f"({query_id}, {doc_id}) judged {docs[doc_id]} on line "
                f"{first_line[(query_id, doc_id)]} and {grade} here", line_no, "keep one judgment per pair",
            ), on_error)
            continue
        first_line.setdefault((query_id, doc_id), line_no)
        docs[doc_id] = grade
    if not judgments and not allow_empty:
        _report(FormatError(path, "no judgments", hint="a BEIR qrels file needs a header and at least one line; "
                            "TREC qrels one line 'query_id 0 doc_id grade'"), on_error)
    return Qrels(judgments)


def _qrels_line(path: Path, line_no: int, columns: list[str]) -> tuple[str, str, int]:
    if len(columns) != 3:
        raise FormatError(
            path, f"expected 3 tab-separated columns, found {len(columns)}", line_no,
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
        raise FormatError(path, f"{column} {text!r} is not an integer", line_no,
                          "relevance grades are integers such as 0, 1, 2") from None


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
    for line_no, line in _iter_lines(path, digest):
        columns = _decode(path, line_no, line).split()
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
        raise FormatError(path, "the run tag (sixth column) is missing: found 5 columns", line_no,
                          "a TREC run line is 'query_id Q0 doc_id rank score tag'; add a name for the run "
                          "as the sixth column")
    raise FormatError(path, f"expected {'6' if detected == 'trec' else '3' if detected else '6 or 3'} columns, "
                      f"found {len(columns)}", line_no, "a TREC run line is 'query_id Q0 doc_id rank score tag'; "
                      "an MS MARCO one 'query_id doc_id rank'; a JSON run is {query_id: {doc_id: score}}")


def _add_score(scores: dict[str, dict[str, float]], path: Path, line_no: int, query_id: str, doc_id: str,
               score_text: str, run_format: str) -> None:
    try:
        score = float(score_text)
    except ValueError:
        what = "the fifth column is the retrieval score" if run_format == "trec" else "the third column is the rank"
        raise FormatError(path, f"{'score' if run_format == 'trec' else 'rank'} {score_text.lstrip('-')!r} is not "
                          "a number", line_no, what) from None
    if not math.isfinite(score):
        raise FormatError(path, f"score {score_text!r} is not finite", line_no)
    docs = scores.setdefault(query_id, {})
    if doc_id in docs:
        raise FormatError(path, f"document {doc_id!r} listed twice for query {query_id!r}", line_no,
                          "trec_eval rejects duplicate documents; keep one line per pair")
    docs[doc_id] = score


def _looks_like_json(path: Path) -> bool:
    if path.name.endswith((".json", ".json.gz")):
        return True
    try:
        with _open_binary(path) as handle:
            return handle.read(256).lstrip().startswith(b"{")
    except (OSError, EOFError, gzip.BadGzipFile):
        return False


def _json_document(path: Path, digest: Any | None, what: str, hint: str) -> Any:
    """A whole JSON file parsed; a JSON Lines file is named as such (a corpus or queries file given by mistake)."""
    with _open_binary(path) as handle:
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
        problem = "one JSON object per line (JSON Lines: a corpus or queries file?)" if jsonl else \
            f"not valid JSON ({exc})"
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


def default_permissions(path: str | Path, folder: bool = False) -> None:
    """Give a file made by mkstemp/mkdtemp (0600/0700) the permissions a plain open() would."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, (0o777 if folder else 0o666) & ~umask)


@contextlib.contextmanager
def atomic_writer(path: str | Path, mode: str = "w") -> Iterator[IO]:
    """Open a temporary sibling of `path` for writing and move it into place on success.

    The file appears under its final name only complete (flushed and fsynced); if the block
    raises, the temporary file is removed and any previous file at `path` is untouched.

    Args:
        path: The final path.
        mode: ``"w"`` (UTF-8 text) or ``"wb"``.

    Raises:
        OutputError: The folder cannot be created or written (permissions, full disk).
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # The writer's PID is in the name, so a later run can tell a killed writer's leftover
        # (see `remove_stale_temporaries`) from a file another live process is writing right now.
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc} (choose another output folder)") from exc
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8", "newline": "\n"})) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        default_permissions(tmp_name)
        os.replace(tmp_name, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        if isinstance(exc, OSError):
            raise OutputError(f"{path}: cannot write: {exc.strerror or exc} (check free space and permissions)") from exc
        raise


def private_dir(parent: str | Path, prefix: str) -> Path:
    """A new temporary folder in `parent`, named ``<prefix>.<pid>.<random>``.

    The creator's PID in the name lets `remove_stale_temporaries` tell a killed process's leftover
    from a folder a live process is still filling.
    """
    return Path(tempfile.mkdtemp(prefix=f"{prefix}.{os.getpid()}.", dir=parent))


def _writer_pid(name: str) -> int | None:
    parts = name.split(".")
    candidate = parts[-3] if name.endswith(".tmp") and len(parts) >= 4 else parts[-2] if len(parts) >= 3 else ""
    return int(candidate) if candidate.isascii() and candidate.isdigit() else None


def remove_stale_temporaries(folder: str | Path, prefix: str = ".") -> int:
    """Delete temporary files and folders (``atomic_writer``, `private_dir`) whose creator is gone.

    Only names starting with `prefix` that carry a PID are considered; those of live processes stay.

    Returns:
        How many were removed.
    """
    removed = 0
    folder = Path(folder)
    if not folder.is_dir():
        return 0
    for candidate in folder.glob(f"{glob_escape(prefix)}*"):
        if not candidate.name.startswith("."):
            continue
        pid = _writer_pid(candidate.name)
        if pid is None:
            continue
        try:
            os.kill(pid, 0)
            continue  # the writer is alive
        except ProcessLookupError:
            pass
        except PermissionError:
            continue  # alive, owned by someone else
        with contextlib.suppress(OSError):
            if candidate.is_dir() and not candidate.is_symlink():
                shutil.rmtree(candidate)
            else:
                candidate.unlink()
            removed += 1
    return removed


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
                    raise FormatError(path, f"id {query_id!r}/{hit.doc_id!r} contains whitespace",
                                      hint="TREC run files cannot hold such ids")
                handle.write(f"{query_id} Q0 {hit.doc_id} {rank} {hit.score!r} {tag}\n")


def corpus_line(doc: Doc, metadata: Mapping[str, Any] | None = None) -> str:
    """One ``corpus.jsonl`` line in BEIR's spelling: ``_id``, ``title``, ``text``, ``metadata``."""
    record = {"_id": doc.doc_id, "title": doc.title, "text": doc.text, "metadata": dict(metadata or {})}
    return json.dumps(record, ensure_ascii=False) + "\n"


def query_line(query: Query, metadata: Mapping[str, Any] | None = None) -> str:
    """One ``queries.jsonl`` line in BEIR's spelling: ``_id``, ``text``, ``metadata``."""
    record = {"_id": query.query_id, "text": query.text, "metadata": dict(metadata or {})}
    return json.dumps(record, ensure_ascii=False) + "\n"


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


def write_text(text: str, path: str | Path) -> None:
    """Write `text` (ending in a newline), atomically."""
    with atomic_writer(path) as handle:
        handle.write(text if text.endswith("\n") else text + "\n")


def write_json(data: Any, path: str | Path) -> None:
    """Write `data` as indented UTF-8 JSON, atomically."""
    with atomic_writer(path) as handle:
        json.dump(data, handle, indent=2, ensure_ascii=False)
        handle.write("\n")
