"""Documents scored by their passages (``--passages``): the check made before any work, the corpus split
(`split_corpus`), and the first stages of a dense model and of a learned sparse encoder over passages
(`harness.retrieval.index.passages` splits and scores; a multi-vector model's: `harness.pipeline.dense.multivector`).

Dense: each passage's vector is found by its exact text in the embedding store (`harness.io.cache.texts`), so a
rerun encodes nothing, a passage text two documents share is encoded once, and a document that fits one window
shares its vector with a run without passages; every passage is scored (exact, no index) and the documents cut
by the one ranking rule. Learned sparse: the passages' rows are cached per corpus and passage setting, as a sparse
encoder's document rows are."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

from harness.errors import HarnessError, setting
from harness.io.cache import cache_dir, cache_record, embedding_entry
from harness.io.cache.texts import encode_with_store, text_stores, vector_counts
from harness.io.cache.upkeep import reading
from harness.io.formats import BeirFolder
from harness.metering import tree_bytes
from harness.pipeline.config import EvaluateConfig
from harness.pipeline.stages import (
    DOC_TEXT_RULE,
    Clock,
    CorpusState,
    FirstStage,
    Inputs,
    check_corpus,
    checked_corpus,
    probe_latency,
    take_preparation,
)
from harness.records import Query, Run
from harness.retrieval.compress import CompressionSpec
from harness.retrieval.encode import Encoder, chunked
from harness.retrieval.index.passages import (
    DocumentTop,
    document_scores,
    model_max_length,
    model_tokenizer,
    search_passages,
    split_documents,
)
from harness.retrieval.models import model_folder

logger = logging.getLogger(__name__)

SPLIT_DOCS = 1024  # documents split (tokenized in one batch), encoded and stored at a time
QUERY_BLOCK = 256  # a learned sparse encoder's queries scored against every passage at a time


def _usage(message: str) -> HarnessError:
    error = HarnessError(message)
    error.usage = True  # the command line's mistake: one line, exit 2
    return error


def checked_passages(config: EvaluateConfig, kind: Any) -> EvaluateConfig:
    """`config` with its passages checked before anything is read or encoded: the window and stride, the window
    against the model's length (read from its folder: its tokenizer and configuration, no weights), and settings
    that do not combine. A system that has no passages (BM25, a run, ``hash:N``, a service) ignores them, with a
    warning, and its result does not record them (a grid may mix it with models that have).

    Raises:
        HarnessError: (a usage error) naming the setting and the fix.
    """
    spec = config.passages
    if spec is None:
        return config
    if not kind.passages:
        logger.warning(
            "%s has no tokenizer to split documents with: %s ignored, and not recorded in the result",
            kind.what,
            setting("passages"),
        )
        return replace(config, passages=None)
    if config.index.kind != "flat" or config.compression != CompressionSpec():
        raise _usage(
            f"{setting('passages')} scores every passage exactly (no index); {setting('index')} and "
            f"{setting('embedding_precision')}/{setting('truncate_dim')} do not combine with it"
        )
    if config.engine == "ray" or "," in str(config.device or ""):
        raise _usage(
            f"{setting('passages')} encodes its passages here, on one device; drop {setting('engine')} ray or the "
            f"device list ({setting('device')})"
        )
    folder = model_folder(config.model)
    try:
        if kind.document_length is not None:  # a multi-vector model: its own document length
            spec.check(kind.document_length(folder))
        else:
            spec.check(model_max_length(folder, model_tokenizer(folder), config.encoder.max_seq_length))
    except HarnessError as exc:
        raise _usage(str(exc)) from None
    return config


def passage_record(spec, counts: dict[str, int]) -> dict[str, object]:
    return {
        "passages": {
            **spec.to_config(),
            "title": "prepended to every passage",
            "tokenizer": "the model's own",
            "n_passages": counts["passages"],
            "docs_split": counts["split"],
        }
    }


def split_corpus(config: EvaluateConfig, folder: BeirFolder, corpus: CorpusState, counts: dict[str, int]):
    """The corpus in chunks of documents, each chunk with its documents' passages (`split_documents`, by the model's
    own tokenizer, one batch a chunk): (documents, their passages) pairs; `counts` adds up the ``passages`` and the
    documents ``split``."""
    import sys

    from tqdm.auto import tqdm

    tokenizer = model_tokenizer(model_folder(config.model))
    bar = tqdm(desc="encoding passages", unit="doc", disable=not config.progress, file=sys.stderr)
    try:
        for chunk in chunked(checked_corpus(folder, corpus), SPLIT_DOCS):
            split = split_documents(chunk, tokenizer, config.passages)
            counts["passages"] += sum(len(passages) for passages in split)
            counts["split"] += sum(len(passages) > 1 for passages in split)
            yield chunk, split
            bar.update(len(chunk))
    finally:
        bar.close()


def _split_corpus(config: EvaluateConfig, folder: BeirFolder, corpus: CorpusState, encode_chunk) -> dict[str, Any]:
    """One pass over the corpus (`split_corpus`), each chunk's passage texts given to `encode_chunk` (→ the chunk's
    vectors or rows); the documents' ids, their first passage's position and the per-chunk outputs."""
    doc_ids: list[str] = []
    starts: list[int] = []
    outputs, counts, position = [], {"passages": 0, "split": 0}, 0
    for chunk, split in split_corpus(config, folder, corpus, counts):
        for doc, passages in zip(chunk, split):
            doc_ids.append(doc.doc_id)
            starts.append(position)
            position += len(passages)
        outputs.append(encode_chunk(len(outputs), [text for passages in split for text in passages]))
    return {"doc_ids": doc_ids, "starts": starts, "outputs": outputs, "counts": counts}


def dense_passages(
    config: EvaluateConfig,
    inputs: Inputs,
    encoder: Encoder,
    corpus: CorpusState,
    model_source: str,
    depth: int,
    clock: Clock,
    cost: dict[str, object],
) -> FirstStage:
    """A bi-encoder over passages: each passage's vector from the store or encoded, the queries', every passage
    scored, the documents aggregated and cut (`harness.retrieval.index.passages.search_passages`)."""
    import numpy as np

    from harness.pipeline.dense.cache import cached_query_vectors

    fingerprint = encoder.fingerprint() if config.cache else None
    root = cache_dir(config.cache_dir) if fingerprint is not None else None
    stores = text_stores(root, fingerprint, DOC_TEXT_RULE) if root is not None else (None, None)
    spent = {"encode": 0.0, "encoded": 0}

    def encode(texts: list[str]):
        started = time.perf_counter()
        vectors = encoder.encode_docs(texts)
        spent["encode"] += time.perf_counter() - started
        return vectors

    def encode_chunk(index: int, texts: list[str]):
        vectors, encoded = encode_with_store(stores[0], texts, encode, encoder.dimension)
        spent["encoded"] += encoded
        return np.asarray(vectors, dtype=np.float32)

    started = time.perf_counter()
    with reading([store.folder for store in stores if store is not None]):
        split = _split_corpus(config, inputs.folder, corpus, encode_chunk)
        if stores[0] is not None and hasattr(stores[0], "compact"):
            stores[0].compact()  # the segments of every chunk merged: one per run
        clock.add("encode_corpus", spent["encode"])
        clock.add("index", time.perf_counter() - started - spent["encode"])  # splitting and the store's lookups
        if not spent["encoded"]:
            clock.mark_cached("encode_corpus")
        with clock.stage("encode_queries"):
            query_vectors, queries_cached, queries_entry, queries_encoded = cached_query_vectors(
                encoder, inputs.queries, root, fingerprint, corpus.dataset, stores[1]
            )
    if queries_cached:
        clock.mark_cached("encode_queries")
    passages = np.concatenate(split["outputs"]) if split["outputs"] else np.zeros((0, 1), dtype=np.float32)
    query_ids = [query.query_id for query in inputs.queries]

    def search(rows: slice) -> Run:
        return search_passages(
            query_ids[rows], query_vectors[rows], passages, split["doc_ids"], split["starts"], depth,
            config.passages.score, encoder.name,
        )  # fmt: skip

    with clock.stage("search"):
        run = search(slice(None))
    probe_latency(clock, cost, lambda i: search(slice(i, i + 1)), len(query_ids))
    counts = split["counts"]
    cost["vectors"] = vector_counts(
        {"cached": counts["passages"] - spent["encoded"], "encoded": spent["encoded"]},
        stores,
        len(query_ids),
        queries_encoded,
    )
    if root is not None:
        cost["cache_bytes"] = tree_bytes([queries_entry, *(store.folder for store in stores)])
    stored = (
        "hit" if not spent["encoded"] else "stored" if root is not None else cache_record(config.cache, False, None)
    )
    record = dict(
        model_source=model_source,
        retriever="dense passages (exact)",
        similarity="cosine" if encoder.normalize else "dot",
        **encoder.settings(),
        batch_size=config.encoder.batch_size,
        doc_text=DOC_TEXT_RULE,
        **passage_record(config.passages, counts),
        embedding_cache="off" if not config.cache else stored,
        threads=config.threads,
        engine=config.engine,
        device=encoder.device or str(config.device),
        dimension=int(passages.shape[1]),
    )
    take_preparation(clock, encoder, cost)  # its own phase, out of the one it was timed in
    check_corpus(inputs.folder, corpus)
    return FirstStage(run, corpus, encoder.name, record, {}, config, cost)


def sparse_passages(
    config: EvaluateConfig,
    folder: BeirFolder,
    corpus: CorpusState,
    queries: list[Query],
    model,
    depth: int,
    clock: Clock,
    cost: dict[str, object],
) -> tuple[Run, dict[str, object]]:
    """A learned sparse encoder over passages: the passages' rows from the cache (per corpus and passage setting)
    or encoded and stored chunk by chunk, the queries' rows, every passage scored (sparse × sparse, blocks of
    queries), the documents aggregated and cut (positive scores only, as the sparse index retrieves)."""
    import numpy as np

    from harness.io.cache import CacheCorrupt
    from harness.retrieval.learned_sparse import SparseIndex

    entry = (
        embedding_entry(
            cache_dir(config.cache_dir),
            {
                "kind": "sparse-passages",
                "model": model.fingerprint(),
                "text_rule": DOC_TEXT_RULE,
                "passages": {"window": config.passages.window, "stride": config.passages.step},
                "dtype": "float32",
                "corpus_sha256": corpus.sha256,
            },
            {"dataset": corpus.dataset},
            sparse=True,
        )
        if config.cache
        else None
    )
    complete = entry is not None and entry.complete
    if entry is not None and not complete:
        entry.start(SPLIT_DOCS)
    spent = {"encode": 0.0, "encoded": 0}

    def encode_chunk(index: int, texts: list[str]):
        ids = [str(n) for n in range(len(texts))]
        if complete:
            try:
                stored_ids, rows = entry.read_chunk(index)
                if stored_ids == ids:
                    return rows
            except CacheCorrupt as exc:
                logger.warning("damaged cache entry, encoding its passages again: %s", exc)
        started = time.perf_counter()
        rows = model.encode_docs(texts)
        spent["encode"] += time.perf_counter() - started
        spent["encoded"] += len(texts)
        if entry is not None and not complete:
            entry.write_chunk(index, ids, rows)
        return rows

    started = time.perf_counter()
    split = _split_corpus(config, folder, corpus, encode_chunk)
    index = SparseIndex()
    for n, rows in enumerate(split["outputs"]):
        index.add([str(n)] * rows.shape[0], rows)
    if entry is not None and not complete and len(index):
        entry.finish(len(split["outputs"]), len(index), index.dimension)
    clock.add("encode_corpus", spent["encode"])
    clock.add("index", time.perf_counter() - started - spent["encode"])
    if not spent["encoded"]:
        clock.mark_cached("encode_corpus")
    with clock.stage("encode_queries"):
        query_rows = model.encode_queries([query.text for query in queries])
    query_ids = [query.query_id for query in queries]
    postings = index.postings
    starts = np.asarray(split["starts"], dtype=np.int64)

    def search(rows: slice) -> Run:
        ids = query_ids[rows]
        top = DocumentTop(ids, depth, positive_only=True)
        block = max(1, min(QUERY_BLOCK, 32_000_000 // max(1, postings.shape[1])))
        for first in range(0, len(ids), block):
            scores = (query_rows[rows][first : first + block] @ postings).toarray()
            top.add(first, split["doc_ids"], document_scores(scores, starts, config.passages.score))
        return top.run(model.name)

    with clock.stage("search"):
        run = search(slice(None))
    probe_latency(clock, cost, lambda i: search(slice(i, i + 1)), len(query_ids))
    cost["cache_bytes"] = tree_bytes([entry.root]) if entry is not None else None
    record = {
        "retriever": "learned-sparse passages (exact)",
        **index.stats(query_rows),
        "dimension": index.dimension,
        **passage_record(config.passages, split["counts"]),
        "embedding_cache": cache_record(config.cache, complete, entry),
    }
    return run, record
