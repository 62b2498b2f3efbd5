"""BEIR's on-disk formats: the folder, the corpus and queries readers (streaming, strict) and their lines.

This module and `harness.io.trec` (the qrels and runs) are the only ones that know BEIR's spellings:

* ``corpus.jsonl`` — one JSON object a line: ``{"_id", "title", "text", "metadata"?}``
* ``queries.jsonl`` — one JSON object a line: ``{"_id", "text", "metadata"?}``
* ``qrels/<split>.tsv`` — a header ``query-id<TAB>corpus-id<TAB>score`` then one judgment a line
  (`read_qrels` also reads TREC qrels, ``query_id 0 doc_id grade``, and JSON ``{query_id: {doc_id: grade}}``)
* ``excluded/<split>.tsv`` (optional) — a header ``query-id<TAB>corpus-id`` then one pair a line that no ranking
  of the split may hold (`harness.io.exclusions`)

Any of them may be gzip-compressed (``.gz`` added to the name). Lines may end in CRLF (BEIR's
own qrels do). Readers stream: the corpus is never held in memory. Every reader can feed a
hash object with the *uncompressed* bytes it reads, so a file is fingerprinted in the same
pass that parses it. Bad input raises `FormatError` naming the file, the line and the fix.

Derived files are written atomically (`harness.io.files.atomic_writer`): into a temporary sibling, flushed,
fsynced and renamed over the target, so a crash never leaves a half file that looks complete.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import DatasetError, FormatError, setting

# Importable from here as well, as they were before the writers, the qrels and runs and the line reading had
# modules of their own (`harness.io.files`, `harness.io.trec`, `harness.io.lines`).
from harness.io.files import (  # noqa: F401
    atomic_writer,
    default_permissions,
    private_dir,
    remove_stale_temporaries,
    write_json,
    write_text,
)
from harness.io.lines import (  # noqa: F401
    TREC_ID_HINT,
    ErrorHandler,
    check_trec_id,
    content_digest,
    content_sha256,
    iter_lines,
    open_binary,
    report_error,
)
from harness.io.trec import (  # noqa: F401
    QRELS_FORMATS,
    RUN_FORMATS,
    iter_qrels,
    qrels_format,
    read_qrels,
    read_run,
    write_qrels,
    write_run,
)
from harness.records import Doc, Query

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BeirFolder:
    """The files of one split of a BEIR dataset folder."""

    root: Path
    split: str
    corpus: Path
    queries: Path
    qrels: Path
    excluded: Path | None = None  # the split's excluded pairs (`harness.io.exclusions`), when it has any


def find_file(path: Path) -> Path | None:
    """`path`, or `path` + ``.gz``, whichever exists (BEIR files may be stored compressed)."""
    for candidate in (path, path.with_name(path.name + ".gz")):
        if candidate.is_file():
            return candidate
    return None


EXCLUSIONS_FOLDER = "excluded"  # excluded/<split>.tsv: the pairs no ranking of the split may hold


def exclusions_path(root: str | Path, split: str) -> Path | None:
    """The excluded pairs of one split of a BEIR folder (``excluded/<split>.tsv[.gz]``, `harness.io.exclusions`),
    None when it has none."""
    return find_file(Path(root) / EXCLUSIONS_FOLDER / f"{split}.tsv")


def locate_corpus_and_queries(root: str | Path) -> BeirFolder:
    """The corpus and queries of a BEIR folder, for retrieval without judgments (``qrels`` is left unset).

    Raises:
        DatasetError: The folder or one of the two files is missing.
    """
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(
            f"{root}: no such dataset folder (expected a BEIR folder with corpus.jsonl, "
            "queries.jsonl and, to score, qrels/<split>.tsv)"
        )
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
        available = (
            sorted(p.name.split(".")[0] for p in (root / "qrels").glob("*.tsv*")) if (root / "qrels").is_dir() else []
        )
        choice = f"available splits: {', '.join(available)}" if available else "the folder has no qrels/*.tsv"
        raise DatasetError(f"{root}: missing qrels/{split}.tsv ({choice}; pick one with {setting('split')})")
    return BeirFolder(root, split, folder.corpus, folder.queries, qrels, exclusions_path(root, split))


def _json_objects(path: Path, digest: Any | None, on_error: ErrorHandler | None) -> Iterator[tuple[int, dict]]:
    for line_no, line in iter_lines(path, digest):
        try:
            record = json.loads(line)
        except (ValueError, UnicodeDecodeError) as exc:
            report_error(
                FormatError(path, f"invalid JSON: {exc}", line_no, "each line must be one JSON object"), on_error, exc
            )
            continue
        if not isinstance(record, dict):
            report_error(FormatError(path, f"expected a JSON object, got {type(record).__name__}", line_no), on_error)
            continue
        yield line_no, record


# Names other tools give a record's id; BEIR's is "_id" (convert reads all of them).
ID_ALIASES = ("id", "doc_id", "docid", "corpus_id", "query_id", "qid")


def _id_hint(record: dict) -> str:
    alias = next((name for name in ID_ALIASES if name in record), None)
    if "_id" in record or alias is None:
        return 'each record needs a string "_id"'
    return (
        f'the records name their id {alias!r}: rename the field to "_id", or build the folder with '
        f"`beir-harness convert`, which reads {alias!r}"
    )


def _record_id(path: Path, line_no: int, record: dict) -> str:
    value = record.get("_id")
    if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value) == "":
        raise FormatError(path, 'missing or empty "_id"', line_no, _id_hint(record))
    return str(value)


def misnamed_id(path: str | Path) -> str | None:
    """The hint for a JSONL file whose first record lacks ``_id`` but has another id field (``id``, ...)
    — the whole file is then likely written that way — else None."""
    with open_binary(Path(path)) as handle:
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


def _iter_records(
    path: Path,
    kind: str,
    digest: Any | None,
    on_error: ErrorHandler | None,
    make: Callable[[str, int, dict], Any],
    check_ids: bool = False,
) -> Iterator[Any]:
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
            report_error(exc, on_error)
            continue
        seen.add(record_id)
        yield item


def iter_corpus(
    path: str | Path, digest: Any | None = None, on_error: ErrorHandler | None = None, check_ids: bool = False
) -> Iterator[Doc]:
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
    return _iter_records(
        path,
        "document",
        digest,
        on_error,
        lambda doc_id, line_no, record: Doc(
            doc_id,
            _record_text(path, line_no, record, "title", False),
            _record_text(path, line_no, record, "text", True),
        ),
        check_ids,
    )


def iter_queries(
    path: str | Path, digest: Any | None = None, on_error: ErrorHandler | None = None, check_ids: bool = False
) -> Iterator[Query]:
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
    return _iter_records(
        path,
        "query",
        digest,
        on_error,
        lambda query_id, line_no, record: Query(query_id, _record_text(path, line_no, record, "text", True)),
        check_ids,
    )


def corpus_line(doc: Doc, metadata: Mapping[str, Any] | None = None) -> str:
    """One ``corpus.jsonl`` line in BEIR's spelling: ``_id``, ``title``, ``text``, ``metadata``."""
    record = {"_id": doc.doc_id, "title": doc.title, "text": doc.text, "metadata": dict(metadata or {})}
    return json.dumps(record, ensure_ascii=False) + "\n"


def query_line(query: Query, metadata: Mapping[str, Any] | None = None) -> str:
    """One ``queries.jsonl`` line in BEIR's spelling: ``_id``, ``text``, ``metadata``."""
    record = {"_id": query.query_id, "text": query.text, "metadata": dict(metadata or {})}
    return json.dumps(record, ensure_ascii=False) + "\n"
