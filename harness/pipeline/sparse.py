"""The sparse first stages: BM25, and learned sparse encoders (rows cached per chunk, exact search).

The conductor (`harness.pipeline.evaluate`) calls `bm25_stage` or `learned_sparse_stage`, as the system's kind says
(`harness.pipeline.systems`)."""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import replace
from itertools import islice

from harness.errors import HarnessError, setting
from harness.io.cache import cache_dir, cache_record, embedding_entry
from harness.io.formats import BeirFolder, iter_corpus
from harness.io.lines import content_digest
from harness.metering import tree_bytes
from harness.pipeline.config import EvaluateConfig, first_device, run_model_name
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
from harness.records import Query, Run, doc_text
from harness.retrieval.models import resolve_model_source
from harness.runtimes.auto import PROBE_TEXTS
from harness.runtimes.registry import TORCH, is_auto, runtime

logger = logging.getLogger(__name__)


SPARSE_CHUNK = 1024  # sparse rows are cached per chunk; a small chunk bounds what a kill loses


def _sparse_rows(config: EvaluateConfig, folder: BeirFolder, corpus: CorpusState, model, entry):
    """The sparse index of the corpus: its rows from a complete cache entry, or encoded chunk by chunk (reusing
    the chunks a killed run finished) and stored."""
    from harness.io.cache import CacheCorrupt as Corrupt
    from harness.retrieval.encode import chunked
    from harness.retrieval.learned_sparse import SparseIndex

    index = SparseIndex()
    if entry is not None and entry.complete:
        try:
            for doc_ids, rows in entry.chunks():
                corpus.tick(doc_ids)
                index.add(doc_ids, rows)
            corpus.cached = True
            return index
        except Corrupt as exc:
            logger.warning("damaged cache entry, recomputing: %s", exc)
            entry.drop()
            index, corpus.n_docs, corpus.unseen = SparseIndex(), 0, set(corpus.judged)
    chunk_size = min(config.chunk_size, SPARSE_CHUNK)
    if entry is not None:
        entry.start(chunk_size)
    n_chunks = 0
    for n_chunks, chunk in enumerate(chunked(checked_corpus(folder, corpus), chunk_size), start=1):
        doc_ids = [doc.doc_id for doc in chunk]
        rows = None
        if entry is not None and entry.chunk_ids(n_chunks - 1) == doc_ids:
            try:
                rows = entry.read_chunk(n_chunks - 1)[1]  # a killed run's finished chunk
            except Corrupt:
                rows = None
        if rows is None:
            rows = model.encode_docs([doc_text(doc) for doc in chunk])
            if entry is not None:
                entry.write_chunk(n_chunks - 1, doc_ids, rows)
        index.add(doc_ids, rows)
    if entry is not None and len(index):
        entry.finish(n_chunks, len(index), index.dimension)
    return index


def _retrieve_sparse(
    config: EvaluateConfig,
    folder: BeirFolder,
    corpus: CorpusState,
    queries: list[Query],
    depth: int,
    clock: Clock,
    cost: dict[str, object],
    notes: list[str],
) -> tuple[Run, dict]:
    """Learned sparse retrieval (`harness.retrieval.learned_sparse`): rows cached per chunk, exact search; the
    phases on `clock`, what else it cost into `cost`."""
    from harness.retrieval.learned_sparse import SparseModel
    from harness.runtimes.head_choice import load_sparse

    spec = config.encoder
    if spec.backend != TORCH:
        raise HarnessError(
            f"{setting('backend')} {spec.backend} is a dense model's runtime; a sparse encoder runs on "
            f"{setting('sparse_backend')} (e.g. {setting('sparse_backend')} {spec.backend})"
        )
    if not is_auto(config.sparse_backend) and not runtime(config.sparse_backend).sparse:
        raise HarnessError(f"backend {config.sparse_backend} cannot run a sparse encoder; use torch")
    source = resolve_model_source(config.model)
    with clock.stage("load"):
        model, auto = load_sparse(
            config.sparse_backend,
            lambda where, at: SparseModel(
                run_model_name(config), source, spec.batch_size, where, at, spec.max_seq_length
            ),
            first_device(config),
            spec.precision,
            cache_dir(config.cache_dir),
            lambda: [doc_text(doc) for doc in islice(iter_corpus(folder.corpus), PROBE_TEXTS)],
            lambda: runtime(config.sparse_backend).calibrate(iter_corpus(folder.corpus), corpus.sha256),
            config.threads,
            config.cache,
        )
    take_preparation(clock, model, cost)  # an exported sparse encoder's preparation: its own phase, out of load
    if auto is not None:
        notes.append(f"--sparse-backend auto picked {auto['picked']}: {auto['reason']}")
        logger.info(notes[-1])
    if config.passages is not None:  # documents scored by their passages (`harness.pipeline.dense.passages`)
        from harness.pipeline.dense.passages import sparse_passages

        run, own = sparse_passages(config, folder, corpus, queries, model, depth, clock, cost)
        return run, {"model_source": source, **own, **_model_record(config, model, auto)}
    started = time.perf_counter()
    entry = (
        embedding_entry(
            cache_dir(config.cache_dir),
            {
                "kind": "sparse-corpus",
                "model": model.fingerprint(),
                "text_rule": DOC_TEXT_RULE,
                "dtype": "float32",
                "corpus_sha256": corpus.sha256,
            },
            {"dataset": corpus.dataset},
            sparse=True,
        )
        if config.cache
        else None
    )
    index = _sparse_rows(config, folder, corpus, model, entry)
    # Reading cached rows is loading; otherwise reading, encoding and adding rows interleave.
    clock.add("load" if corpus.cached else "encode_corpus", time.perf_counter() - started)
    if corpus.cached:
        clock.mark_cached("encode_corpus")
    with clock.stage("encode_queries"):
        query_rows = model.encode_queries([query.text for query in queries])
    query_ids = [query.query_id for query in queries]
    with clock.stage("search"):
        run = index.search(query_ids, query_rows, depth, name=model.name)
    probe_latency(
        clock, cost, lambda i: index.search(query_ids[i : i + 1], query_rows[i : i + 1], depth), len(query_ids)
    )
    cost["cache_bytes"] = tree_bytes([entry.root]) if entry is not None else None
    return run, {
        "model_source": source,
        "retriever": "learned-sparse",
        **index.stats(query_rows),
        "dimension": index.dimension,
        "embedding_cache": cache_record(config.cache, corpus.cached, entry),
        **_model_record(config, model, auto),
    }


def _model_record(config: EvaluateConfig, model, auto: dict | None) -> dict[str, object]:
    """What a sparse result records of how its texts were encoded."""
    return {
        "batch_size": config.encoder.batch_size,
        "doc_text": DOC_TEXT_RULE,
        "device": config.device,
        "precision": model.precision,
        **({"sparse_backend": model.backend} if getattr(model, "backend", TORCH) != TORCH else {}),
        **({"sparse_backend_auto": auto} if auto is not None else {}),
    }


def bm25_stage(config: EvaluateConfig, inputs: Inputs, depth: int, clock: Clock) -> FirstStage:
    """The lexical baseline: index the corpus in one pass, then search."""
    with clock.stage("load"):  # the BM25 library's import
        from harness.retrieval.bm25 import BM25Retriever, BM25Spec

        retriever = BM25Retriever(BM25Spec())
    corpus = inputs.corpus_state()
    digest = hashlib.sha256()
    with clock.stage("index"):
        retriever.index(checked_corpus(inputs.folder, corpus, digest), progress=config.progress)
        corpus.sha256 = digest.hexdigest()
        check_corpus(inputs.folder, corpus)
    with clock.stage("search"):
        run = retriever.search(inputs.queries, depth)
    cost: dict[str, object] = {}
    probe_latency(clock, cost, lambda i: retriever.search(inputs.queries[i : i + 1], depth), len(inputs.queries))
    return FirstStage(run, corpus, run_model_name(config), retriever.spec.to_config(), cost=cost)


def learned_sparse_stage(config: EvaluateConfig, inputs: Inputs, depth: int, clock: Clock) -> FirstStage:
    """A SparseEncoder: rows from the cache or encoded, exact search (`_retrieve_sparse`)."""
    with clock.stage("load"):
        corpus = inputs.corpus_state(content_digest(inputs.folder.corpus, check_ids=True)[0])
    cost: dict[str, object] = {}
    run, record = _retrieve_sparse(config, inputs.folder, corpus, inputs.queries, depth, clock, cost, inputs.notes)
    check_corpus(inputs.folder, corpus)
    settled = (
        replace(config, sparse_backend=record["sparse_backend_auto"]["backend"])
        if is_auto(config.sparse_backend)
        else None
    )
    return FirstStage(run, corpus, run_model_name(config), record, config=settled, cost=cost)
