"""The late-interaction first stage: a multi-vector model's token vectors, searched exactly by MaxSim in a memory
budget (`harness.retrieval.index.multivector`).

The corpus is streamed once: each chunk of documents is encoded into token matrices and searched against every
query at once, so neither the corpus nor its token vectors are ever held whole. The conductor
(`harness.pipeline.evaluate`) calls `multi_vector_stage` for a system of the ``multi-vector`` kind
(`harness.pipeline.systems`), whose record refuses, before anything loads, the settings that mean nothing for it."""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack

from harness.io.cache import cache_dir
from harness.io.cache.texts import vector_counts
from harness.io.lines import content_digest
from harness.metering import tree_bytes
from harness.pipeline.config import EvaluateConfig, first_device, run_model_name
from harness.pipeline.stages import DOC_TEXT_RULE, Clock, FirstStage, Inputs, check_corpus, checked_corpus
from harness.records import doc_text
from harness.retrieval.index.multivector import (
    ENCODE_CHUNK,
    TOKEN_DTYPE,
    MaxSimSearch,
    MultiVectorModel,
    plan_blocks,
    token_matrices,
)
from harness.retrieval.models import resolve_model_source

logger = logging.getLogger(__name__)

RETRIEVER = "late interaction (exact MaxSim over token vectors)"
_OWN = "a multi-vector model's own settings decide it (its saved prompts, query and document lengths, masks)"


def multi_vector_stage(config: EvaluateConfig, inputs: Inputs, depth: int, clock: Clock) -> FirstStage:
    """A multi-vector model: queries encoded, then the corpus streamed in chunks, each encoded and searched by exact
    MaxSim (`harness.retrieval.index.multivector.MaxSimSearch`) in blocks the memory budget holds."""
    with clock.stage("load"):
        corpus = inputs.corpus_state(content_digest(inputs.folder.corpus, check_ids=True)[0])
        source = resolve_model_source(config.model)
        model = MultiVectorModel(run_model_name(config), source, first_device(config), config.encoder.batch_size)
    with ExitStack() as held:  # the stores' folders stay locked against `cache prune` while they are read
        return _retrieve(config, inputs, depth, clock, model, corpus, _stores(config, model, held))


def _stores(config: EvaluateConfig, model: MultiVectorModel, held: ExitStack) -> tuple:
    """The embedding store's ragged stores of the model's documents and queries (`harness.io.cache.texts.
    token_stores`: a float16 matrix per text), locked for reading; (None, None) without the cache."""
    if not config.cache:
        return None, None
    from harness.io.cache.texts import token_stores
    from harness.io.cache.upkeep import reading

    stores = token_stores(cache_dir(config.cache_dir), model.fingerprint(), DOC_TEXT_RULE)
    held.enter_context(reading([store.folder for store in stores]))
    return stores


def _retrieve(
    config: EvaluateConfig, inputs: Inputs, depth: int, clock: Clock, model: MultiVectorModel, corpus, stores
) -> FirstStage:
    with clock.stage("encode_queries"):
        queries, queries_encoded = token_matrices(model, [query.text for query in inputs.queries], "query", stores[1])
    if not queries_encoded and queries:
        clock.mark_cached("encode_queries")
    plan = plan_blocks(
        config.memory_budget,
        sum(len(query) for query in queries),
        max([len(query) for query in queries] or [1]),
        model.longest("document"),
        model.dimension,
        len(queries),
        depth,
    )
    logger.info(
        "MaxSim search: %d query tokens and %d document tokens a block, budget %s",
        plan.query_tokens,
        plan.doc_tokens,
        plan.record()["memory_budget"],
    )
    search = MaxSimSearch(
        [query.query_id for query in inputs.queries],
        queries,
        depth,
        model.length_normalize,
        plan.query_tokens,
        plan.doc_tokens,
    )
    from harness.retrieval.encode import chunked

    encode_seconds = search_seconds = 0.0
    docs_encoded = 0
    started = time.perf_counter()
    for chunk in chunked(checked_corpus(inputs.folder, corpus), ENCODE_CHUNK):
        began = time.perf_counter()
        matrices, count = token_matrices(model, [doc_text(doc) for doc in chunk], "document", stores[0])
        docs_encoded += count
        encoded = time.perf_counter()
        search.add([doc.doc_id for doc in chunk], matrices)
        encode_seconds += encoded - began
        search_seconds += time.perf_counter() - encoded
    clock.add("encode_corpus", encode_seconds)
    clock.add("search", search_seconds)
    clock.add("load", time.perf_counter() - started - encode_seconds - search_seconds)  # reading the corpus
    check_corpus(inputs.folder, corpus)
    corpus.cached = bool(stores[0]) and corpus.n_docs > 0 and docs_encoded == 0
    if corpus.cached:
        clock.mark_cached("encode_corpus")
    corpus.stored = _cache_record(stores[0], corpus.cached)
    facts = search.facts()
    record = {
        "kind": "multi-vector",
        "retriever": RETRIEVER,
        "model_source": model.source,
        "token_dtype": TOKEN_DTYPE,
        "dimension": model.dimension,
        "bytes_per_doc": round(facts["doc_tokens_mean"] * model.dimension * 2, 2),
        **model.settings(),
        **facts,
        **plan.record(),
        "batch_size": config.encoder.batch_size,
        "doc_text": DOC_TEXT_RULE,
        "embedding_cache": corpus.stored,
        "device": model.device,
    }
    cost = {
        "vectors": vector_counts(
            {"cached": corpus.n_docs - docs_encoded, "encoded": docs_encoded}, stores, len(queries), queries_encoded
        )
    }
    if stores[0] is not None:
        cost["cache_bytes"] = tree_bytes([store.folder for store in stores])
    return FirstStage(search.run(name=model.name), corpus, model.name, record, cost=cost)


def _cache_record(store, hit: bool) -> str:
    """What the result records as ``embedding_cache``: ``hit`` (every document's token vectors came from the store),
    ``off``, ``stored``, or ``not stored: <why>`` (the store could not be written)."""
    if store is None:
        return "off"
    if hit:
        return "hit"
    return "stored" if store.writable else f"not stored: {store.folder} is not writable"
