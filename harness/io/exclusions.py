"""A BEIR folder's excluded pairs: ``excluded/<split>.tsv`` beside ``qrels/<split>.tsv``.

The file lists (query, document) pairs that no ranking of that split may hold (BRIGHT's ``excluded_ids``: the
documents a query was written from, or that would answer it trivially). It is read like qrels: a header
``query-id<TAB>corpus-id``, then one pair a line, plain or gzip, CRLF accepted; a pair written twice counts once.
Every pair is removed from every ranking before any cut, metric or pool (`harness.records.Exclusions`). An id a
TREC line cannot hold, a malformed line, or an id the folder does not have is refused with the file and line.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from harness.errors import FormatError
from harness.io.files import atomic_writer
from harness.io.formats import EXCLUSIONS_FOLDER, exclusions_path, iter_corpus, iter_queries  # noqa: F401 - the layout
from harness.io.ids import normalisation_hint
from harness.io.lines import ErrorHandler, check_trec_id, decode_line, iter_lines, report_error
from harness.records import Exclusions

EXCLUSIONS_HEADER = ("query-id", "corpus-id")


def iter_exclusions(
    path: str | Path, digest: Any | None = None, on_error: ErrorHandler | None = None
) -> Iterator[tuple[int, str, str]]:
    """Stream the pairs of an exclusions file as (line_no, query_id, doc_id).

    Raises:
        FormatError: A wrong header, a line without exactly two tab-separated ids, an empty id or one holding
            whitespace (unless `on_error` collects them).
    """
    path = Path(path)
    header_seen = False
    for line_no, line in iter_lines(path, digest):
        try:
            columns = [column.strip() for column in decode_line(path, line_no, line).split("\t")]
            if not header_seen:
                header_seen = True
                if tuple(columns) != EXCLUSIONS_HEADER:
                    raise FormatError(
                        path,
                        f"wrong header {line.decode('utf-8', 'replace')!r}",
                        line_no,
                        "the first line must be 'query-id<TAB>corpus-id'",
                    )
                continue
            if len(columns) != 2 or not all(columns):
                raise FormatError(
                    path,
                    f"expected 2 tab-separated ids, found {len([c for c in columns if c])}",
                    line_no,
                    "each line is query-id<TAB>corpus-id",
                )
            check_trec_id(path, line_no, "query", columns[0])
            check_trec_id(path, line_no, "document", columns[1])
        except FormatError as exc:
            report_error(exc, on_error)
            continue
        yield line_no, columns[0], columns[1]
    if not header_seen:
        report_error(FormatError(path, "empty file", hint="the first line must be 'query-id<TAB>corpus-id'"), on_error)


def read_exclusions(
    path: str | Path, digest: Any | None = None, on_error: ErrorHandler | None = None, self_hits: bool = False
) -> Exclusions:
    """The pairs of an exclusions file (`iter_exclusions`), with the self-hit policy, as `Exclusions`."""
    pairs: dict[str, set[str]] = {}
    for _, query_id, doc_id in iter_exclusions(path, digest, on_error):
        pairs.setdefault(query_id, set()).add(doc_id)
    return Exclusions({query_id: frozenset(docs) for query_id, docs in pairs.items()}, self_hits)


def unknown_exclusions(
    path: str | Path, query_ids: Iterable[str] | Mapping[str, Any], doc_ids: Iterable[str] | Mapping[str, Any]
) -> Iterator[FormatError]:
    """One `FormatError` per line of `path` naming a query or a document the folder does not have (file, line, fix).

    Args:
        path: The exclusions file.
        query_ids: Every query id of the folder (a set or mapping: membership is tested).
        doc_ids: Every document id of the folder.
    """
    for line_no, query_id, doc_id in iter_exclusions(path, on_error=lambda error: None):
        for kind, identifier, known, file in (
            ("query", query_id, query_ids, "queries.jsonl"),
            ("document", doc_id, doc_ids, "corpus.jsonl"),
        ):
            if identifier not in known:
                hint = "" if isinstance(known, _AllBut) else normalisation_hint(identifier, known, file)
                yield FormatError(
                    path,
                    f"{kind} {identifier!r} is not in {file}",
                    line_no,
                    hint or f"exclude only ids of the folder's {file}, or drop the line",
                )


def check_exclusion_ids(path: str | Path, query_ids, doc_ids) -> None:
    """Refuse an exclusions file naming an id the folder does not have: the first such line (`unknown_exclusions`).

    Raises:
        FormatError: Naming the file, the line, the id and the fix.
    """
    for error in unknown_exclusions(path, query_ids, doc_ids):
        raise error


def write_exclusions(pairs: Iterable[tuple[str, str]], path: str | Path) -> int:
    """Write (query_id, doc_id) pairs as an exclusions file (atomically, BEIR's header); returns the pairs written."""
    count = 0
    with atomic_writer(Path(path)) as handle:
        handle.write("\t".join(EXCLUSIONS_HEADER) + "\n")
        for query_id, doc_id in dict.fromkeys(pairs):
            handle.write(f"{query_id}\t{doc_id}\n")
            count += 1
    return count


def load_exclusions(
    root: str | Path, split: str, self_hits: bool, queries: Path, corpus: Path, digest: Any | None = None
) -> tuple[Exclusions, Path | None]:
    """The exclusions of one split of a folder (its ``excluded/<split>.tsv`` and the self-hit policy), every id
    checked against the folder's queries and corpus (one pass over each, only when the file exists): what every
    command that ranks calls before any model loads or any document is encoded.

    Returns:
        (the `Exclusions`, the file read or None).

    Raises:
        FormatError: A malformed line, or an id the folder does not have (the file, the line and the fix).
    """
    path = exclusions_path(root, split)
    if path is None:
        return Exclusions(self_hits=self_hits), None
    exclusions = read_exclusions(path, digest, self_hits=self_hits)
    unseen_queries = set(exclusions.pairs)
    for query in iter_queries(queries):
        unseen_queries.discard(query.query_id)
    unseen_docs = {doc_id for docs in exclusions.pairs.values() for doc_id in docs}
    for doc in iter_corpus(corpus):  # only the excluded ids are held, not the corpus's
        unseen_docs.discard(doc.doc_id)
        if not unseen_docs:
            break
    if unseen_queries or unseen_docs:
        check_exclusion_ids(path, _AllBut(unseen_queries), _AllBut(unseen_docs))
    return exclusions, path


class _AllBut:
    """Every id but the ones given (membership only): what the folder has, known from the ids it lacks."""

    def __init__(self, missing: set[str]):
        self.missing = missing

    def __contains__(self, identifier: object) -> bool:
        return identifier not in self.missing
