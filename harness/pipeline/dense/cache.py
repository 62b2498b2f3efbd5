"""The dense stage's cached artefacts: approximate index files and int8 calibration ranges under ``indexes/`` (keyed
by the corpus entry's key: the model identity and the corpus's texts), a complete entry fed to the index, and the
query vectors (per text from the model's store)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from dataclasses import asdict
from pathlib import Path

from harness.errors import OutputError
from harness.io.cache import CacheCorrupt, content_key, embedding_entry
from harness.io.cache.texts import encode_with_store, text_digests
from harness.pipeline.stages import CorpusState
from harness.records import Query
from harness.retrieval.compress import CompressionSpec
from harness.retrieval.encode import Encoder, check_finite_queries
from harness.retrieval.index import IndexSpec

logger = logging.getLogger(__name__)


def cached_index_file(
    cache_root: Path, entry, spec: IndexSpec, compression: CompressionSpec
) -> tuple[Path | None, bool]:
    """Where an approximate index over this entry (truncated as `compression` says) is cached, and whether it
    can be used now."""
    if spec.kind == "flat":
        return None, False
    import faiss

    truncation = {"truncate_dim": compression.truncate_dim} if compression.truncate_dim is not None else {}
    path = (
        cache_root
        / "indexes"
        / (
            content_key({"embeddings": entry.key, "index": asdict(spec), "faiss": faiss.__version__, **truncation})
            + ".faiss"
        )
    )
    return path, entry.complete and path.is_file()


def calibration_file(cache_root: Path, entry, compression: CompressionSpec) -> Path | None:
    """Where the int8/uint8 ranges of this entry's corpus vectors (truncated as `compression` says) are kept."""
    if compression.embedding_precision not in ("int8", "uint8"):
        return None
    return (
        cache_root
        / "indexes"
        / (
            content_key({"embeddings": entry.key, "calibration": "minmax", "truncate_dim": compression.truncate_dim})
            + ".ranges.npz"
        )
    )


def feed_from_cache(entry, builder, corpus: CorpusState) -> None:
    """Feed a complete entry's chunks to the index (memory-mapped); a damaged entry is dropped and forgotten."""
    if not entry.complete:
        return
    try:
        for doc_ids, vectors in entry.chunks(mmap=True):
            corpus.tick(doc_ids)
            builder.add(doc_ids, vectors)
        corpus.cached = True
        logger.info("corpus embeddings from the cache (%s)", entry.root)
    except CacheCorrupt as exc:
        logger.warning("damaged cache entry, recomputing: %s", exc)
        entry.drop()
        builder.reset()
        corpus.n_docs, corpus.cached, corpus.unseen = 0, False, set(corpus.judged)


def mapped_chunk(entry, index: int, vectors):
    """The chunk just written, memory-mapped from the cache (or the in-memory vectors if unreadable)."""
    try:
        _, mapped = entry.read_chunk(index, mmap=True)
    except CacheCorrupt:
        return vectors
    return mapped if mapped.shape == vectors.shape else vectors


def load_cached_index(path: Path, spec: IndexSpec, doc_ids, chunks: list, writable: bool = True):
    """(The cached approximate index over these chunks, True), or (damaged) (one rebuilt from them and stored in
    its place, False)."""
    from harness.retrieval.index import TRAINED, VectorIndex

    dimension = chunks[0].shape[1]
    try:
        index = VectorIndex.load(path, dimension, spec, doc_ids)
        with contextlib.suppress(OSError):  # last used now: `cache prune --older-than` goes by it
            os.utime(path)
        if spec.kind in TRAINED:
            index.attach_vectors(chunks)  # for exact search
        logger.info("%s index from the cache (%s)", spec.kind, path)
        return index, True
    except ValueError as exc:
        logger.warning("damaged cached index, rebuilding: %s", exc)
        rebuilt = VectorIndex(dimension, spec)
        start = 0
        for vectors in chunks:
            rebuilt.add(doc_ids[start : start + len(vectors)], vectors)
            start += len(vectors)
        rebuilt.build()
        if writable:  # replace the damaged file, or every later run rebuilds (and warns) again
            try:
                rebuilt.save(path)
            except OutputError as save_error:
                logger.warning("could not cache the rebuilt index (%s); continuing", save_error)
        return rebuilt, False


def cached_query_vectors(
    encoder: Encoder, queries: list[Query], cache_root: Path | None, fingerprint, dataset: str, store=None
):
    """(The query vectors, whether they came from the cache, their entry's folder or None, how many texts were
    encoded): from their entry (keyed by the exact ids and texts), else each text from `store` or encoded."""
    texts = [query.text for query in queries]
    if cache_root is None:
        vectors = encoder.encode_queries(texts)
        check_finite_queries(vectors, [query.query_id for query in queries], encoder)
        return vectors, False, None, len(texts)
    texts_sha = hashlib.sha256(json.dumps([[q.query_id, q.text] for q in queries]).encode()).hexdigest()
    entry = embedding_entry(
        cache_root,
        {"kind": "queries", "model": fingerprint, "dtype": "float32", "queries_sha256": texts_sha},
        {"dataset": dataset},
    )
    if entry.complete:  # the query set's entry: its ids and their texts' digests (the vectors are in the store)
        try:
            ((ids, vectors),) = list(entry.chunks())
            if ids == [query.query_id for query in queries]:
                return vectors, True, entry.root, 0
        except (CacheCorrupt, ValueError) as exc:
            logger.warning("damaged cache entry, recomputing: %s", exc)
        entry.drop()
    ids_of = {query.text: query.query_id for query in reversed(queries)}  # a text → its first query

    def encode(batch: list[str]):
        fresh = encoder.encode_queries(batch)
        check_finite_queries(fresh, [ids_of[text] for text in batch], encoder)  # before anything is stored
        return fresh

    vectors, encoded = encode_with_store(store, texts, encode, encoder.dimension)
    entry.start(len(texts))
    entry.write_chunk(0, [query.query_id for query in queries], vectors, digests=text_digests(texts))
    entry.finish(1, len(texts), vectors.shape[1])
    return vectors, False, entry.root, encoded
