"""The late-interaction first stage: a multi-vector model's token vectors, searched exactly by MaxSim in a memory
budget (`harness.retrieval.index.multivector`).

The corpus is streamed once: each chunk of documents is encoded into token matrices and searched against every
query at once, so neither the corpus nor its token vectors are ever held whole. With ``--passages`` each chunk holds
whole documents split by the model's own tokenizer (`harness.pipeline.dense.passages.split_corpus`), each passage's
token vectors are cached by its text, and every passage is scored
(`harness.retrieval.index.multivector.PassageMaxSim`). The conductor (`harness.pipeline.evaluate`) calls
`multi_vector_stage` for a system of the ``multi-vector`` kind (`harness.pipeline.systems`), whose record refuses,
before anything loads, the settings that mean nothing for it."""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack

from harness.io.cache import cache_dir
from harness.io.cache.texts import vector_counts
from harness.io.lines import content_digest
from harness.metering import tree_bytes
from harness.pipeline.config import EvaluateConfig, first_device, run_model_name
from harness.pipeline.dense.passages import passage_record, split_corpus
from harness.pipeline.stages import DOC_TEXT_RULE, Clock, FirstStage, Inputs, check_corpus, checked_corpus
from harness.records import doc_text
from harness.retrieval.index.multivector import (
    ENCODE_CHUNK,
    TOKEN_DTYPE,
    MaxSimSearch,
    MultiVectorModel,
    PassageMaxSim,
    plan_blocks,
    token_matrices,
)
from harness.retrieval.models import resolve_model_source

logger = logging.getLogger(__name__)

RETRIEVER = "late interaction (exact MaxSim over token vectors)"
PASSAGES_RETRIEVER = "late interaction over passages (exact MaxSim over every passage's token vectors)"
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
    spec = config.passages
    plan = plan_blocks(
        config.memory_budget,
        sum(len(query) for query in queries),
        max([len(query) for query in queries] or [1]),
        model.longest("document"),
        model.dimension,
        len(queries),
        depth,
        scored_docs=ENCODE_CHUNK if spec is not None else 0,
    )
    logger.info(
        "MaxSim search: %d query tokens and %d document tokens a block, budget %s",
        plan.query_tokens,
        plan.doc_tokens,
        plan.record()["memory_budget"],
    )
    query_ids = [query.query_id for query in inputs.queries]
    blocks = (model.length_normalize, plan.query_tokens, plan.doc_tokens)
    counts = {"passages": 0, "split": 0}
    if spec is None:
        search = MaxSimSearch(query_ids, queries, depth, *blocks)
        chunks = _document_chunks(inputs, corpus)
    else:
        search = PassageMaxSim(query_ids, queries, depth, spec.score, *blocks)
        chunks = _passage_chunks(config, inputs, corpus, counts)
    encode_seconds = search_seconds = 0.0
    texts_encoded = 0
    started = time.perf_counter()
    for doc_ids, starts, texts in chunks:
        began = time.perf_counter()
        matrices, count = token_matrices(model, texts, "document", stores[0])
        texts_encoded += count
        encoded = time.perf_counter()
        if starts is None:
            search.add(doc_ids, matrices)
        else:
            search.add(doc_ids, starts, matrices)
        encode_seconds += encoded - began
        search_seconds += time.perf_counter() - encoded
    clock.add("encode_corpus", encode_seconds)
    clock.add("search", search_seconds)
    clock.add("load", time.perf_counter() - started - encode_seconds - search_seconds)  # reading (and splitting)
    check_corpus(inputs.folder, corpus)
    texts = corpus.n_docs if spec is None else counts["passages"]
    corpus.cached = bool(stores[0]) and corpus.n_docs > 0 and texts_encoded == 0
    if corpus.cached:
        clock.mark_cached("encode_corpus")
    corpus.stored = _cache_record(stores[0], corpus.cached)
    facts = search.facts()
    tokens = sum(search.passage_token_counts) if spec is not None else sum(search.doc_token_counts)
    record = {
        "kind": "multi-vector",
        "retriever": RETRIEVER if spec is None else PASSAGES_RETRIEVER,
        "model_source": model.source,
        "token_dtype": TOKEN_DTYPE,
        "dimension": model.dimension,
        "bytes_per_doc": round(tokens / max(1, corpus.n_docs) * model.dimension * 2, 2),
        **model.settings(),
        **facts,
        **plan.record(),
        "batch_size": config.encoder.batch_size,
        "doc_text": DOC_TEXT_RULE,
        **(passage_record(spec, counts) if spec is not None else {}),
        "embedding_cache": corpus.stored,
        "device": model.device,
    }
    cost = {
        "vectors": vector_counts(
            {"cached": texts - texts_encoded, "encoded": texts_encoded}, stores, len(queries), queries_encoded
        )
    }
    if stores[0] is not None:
        cost["cache_bytes"] = tree_bytes([store.folder for store in stores])
    return FirstStage(search.run(name=model.name), corpus, model.name, record, cost=cost)


def _document_chunks(inputs: Inputs, corpus):
    """The corpus in chunks of `ENCODE_CHUNK` documents: (their ids, None, their texts)."""
    from harness.retrieval.encode import chunked

    for chunk in chunked(checked_corpus(inputs.folder, corpus), ENCODE_CHUNK):
        yield [doc.doc_id for doc in chunk], None, [doc_text(doc) for doc in chunk]


def _passage_chunks(config: EvaluateConfig, inputs: Inputs, corpus, counts: dict[str, int]):
    """The corpus split into passages (`harness.pipeline.dense.passages.split_corpus`), in chunks of whole documents
    holding at most `ENCODE_CHUNK` passages (a document with more: a chunk of its own): (the documents' ids, the
    position of each one's first passage, the passages' texts)."""
    ids: list[str] = []
    starts: list[int] = []
    texts: list[str] = []
    for docs, split in split_corpus(config, inputs.folder, corpus, counts):
        for doc, passages in zip(docs, split):
            if texts and len(texts) + len(passages) > ENCODE_CHUNK:
                yield ids, starts, texts
                ids, starts, texts = [], [], []
            ids.append(doc.doc_id)
            starts.append(len(texts))
            texts.extend(passages)
    if ids:
        yield ids, starts, texts


def _cache_record(store, hit: bool) -> str:
    """What the result records as ``embedding_cache``: ``hit`` (every document's token vectors came from the store),
    ``off``, ``stored``, or ``not stored: <why>`` (the store could not be written)."""
    if store is None:
        return "off"
    if hit:
        return "hit"
    return "stored" if store.writable else f"not stored: {store.folder} is not writable"
