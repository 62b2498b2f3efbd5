"""The dense first stage: a bi-encoder's corpus vectors from the embedding cache or encoded (here, on Ray, or on
several devices), the vector index (built, or loaded from the cache), the query vectors, the search.

The conductor (`harness.pipeline.evaluate`) calls `dense_stage`; everything else here is its inside."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

from harness.errors import HarnessError, OutputError, setting
from harness.io.cache import cache_dir, cache_record, embedding_entry
from harness.io.cache.texts import text_digests, text_stores, vector_counts
from harness.io.cache.upkeep import reading
from harness.io.lines import content_digest
from harness.metering import tree_bytes
from harness.pipeline.config import EvaluateConfig, load_model
from harness.pipeline.dense.cache import (
    cached_index_file,
    cached_query_vectors,
    calibration_file,
    feed_from_cache,
    load_cached_index,
    mapped_chunk,
)
from harness.pipeline.stages import (
    DOC_TEXT_RULE,
    Clock,
    CorpusState,
    FirstStage,
    Inputs,
    SearchPath,
    check_corpus,
    checked_corpus,
    probe_latency,
    search_path,
    streamed_index,
    take_preparation,
)
from harness.pipeline.systems.registry import system_of
from harness.presentation import size_text
from harness.records import Doc, Query, Run, doc_text
from harness.retrieval.compress import CompressionSpec
from harness.retrieval.encode import Encoder, encode_corpus
from harness.retrieval.index import IndexSpec
from harness.retrieval.models import resolve_model_source
from harness.runtimes.registry import runtime

logger = logging.getLogger(__name__)


def _model_or_lazy(config: EvaluateConfig, source: str) -> Encoder:
    """The model, or — when its fingerprint is remembered — a stand-in that loads it only if needed.

    The fingerprint (a hash of the weights) needs the loaded model; it is remembered under a cheap key of the
    model's files and the settings, so a rerun whose embeddings are all cached loads nothing.
    """
    from harness.io.cache import model_files_key, recall_fingerprint, remember_fingerprint
    from harness.retrieval.encode import LazyEncoder

    if not config.cache or system_of(config).stage.kind.service:
        return load_model(config)  # a service remembers its own identity (no weights to hash)
    root = cache_dir(config.cache_dir)
    settings = {"model": config.model, **config.encoder.to_config()}
    record = runtime(config.encoder.backend)
    if record.int8_kernels:
        from harness.host import local_kernel_class

        settings["int8_kernels"] = local_kernel_class()  # int8 (and OpenVINO's bf16) vectors differ by CPU class
    if config.calibration is not None:
        settings["calibration"] = config.calibration.identity()  # the model is fitted to this corpus's sample
    if record.identity is not None:
        settings["runtime"] = record.identity(record.name)  # a new recipe or version: a new model
    key = model_files_key(source, settings)
    remembered = recall_fingerprint(root, key) if key else None
    if remembered is not None and "fingerprint" in remembered:
        return LazyEncoder(
            remembered["fingerprint"], lambda: load_model(config), remembered.get("dimension"), remembered.get("device")
        )
    encoder = load_model(config)
    fingerprint = encoder.fingerprint()
    if key is not None and fingerprint is not None:
        remember_fingerprint(
            root,
            key,
            {"fingerprint": fingerprint, "dimension": encoder.dimension, "device": _device_used(encoder, config)},
        )
    return encoder


def _calibrated(config: EvaluateConfig, inputs: Inputs, corpus_sha256: str) -> EvaluateConfig:
    """`config` with its calibration sample: a seeded sample of this corpus's texts (one pass over it)."""
    from harness.io.formats import iter_corpus

    calibrate = runtime(config.encoder.backend).calibrate
    return replace(config, calibration=calibrate(iter_corpus(inputs.folder.corpus), corpus_sha256))


def dense_stage(
    config: EvaluateConfig, inputs: Inputs, encoder: Encoder | None, depth: int, top_k: int, clock: Clock
) -> FirstStage:
    """A bi-encoder: load (or not, when the cache holds everything), encode, index, search."""
    cost: dict[str, object] = {}
    with clock.stage("load"):
        # Hashed up front (cheap next to encoding) so a warm cache needs no corpus parse at all.
        corpus_sha256, corpus_lines = content_digest(inputs.folder.corpus, check_ids=True)
        corpus = inputs.corpus_state(corpus_sha256)
        model_source = encoder.name if encoder is not None else resolve_model_source(config.model)
        if runtime(config.encoder.backend).calibrated:
            config = _calibrated(config, inputs, corpus_sha256)
            encoder = None  # fitted to this corpus: never another corpus's model
        if encoder is None:
            encoder = _model_or_lazy(config, model_source)
        config.index.check(encoder.dimension)  # before encoding, so a bad --pq-m costs nothing
        config.compression.check(encoder.dimension)
        config = replace(config, compression=config.compression.effective(encoder.dimension))
    if config.passages is not None:  # documents scored by their passages (`harness.pipeline.dense.passages`)
        from harness.pipeline.dense.passages import dense_passages

        return dense_passages(config, inputs, encoder, corpus, model_source, depth, clock, cost)
    chunk_size = config.chunk_size
    if config.engine == "ray" and config.ray.shards is not None:
        from harness.engines.ray_engine import shard_size

        chunk_size = shard_size(corpus_lines, config.ray.shards)
    path = search_path(config, corpus_lines, encoder.dimension, len(inputs.queries), depth, chunk_size)
    if path.streamed:
        inputs.notes.append(
            f"streamed exact search: the corpus vectors ({size_text(path.needed, places=2)} in memory) "
            f"exceed {path.budget_words()}"
        )
        logger.info(inputs.notes[-1])
    with _one_ray_session(config), ExitStack() as held:  # held: the cache folders this run reads
        run, quality = _retrieve(
            encoder,
            checked_corpus(inputs.folder, corpus),
            inputs.queries,
            depth,
            top_k,
            config,
            clock,
            corpus,
            chunk_size,
            cost,
            path,
            held,
        )
    take_preparation(clock, encoder, cost)  # its own phase, out of the one it was timed in
    check_corpus(inputs.folder, corpus)
    record = dict(
        model_source=model_source,
        **(config.index.to_config() | ({"nlist": int(quality["nlist"])} if "nlist" in quality else {})),
        similarity="cosine" if encoder.normalize else "dot",
        **encoder.settings(),
        batch_size=config.encoder.batch_size,
        doc_text=DOC_TEXT_RULE,
        embedding_cache=corpus.stored,
        threads=config.threads,
        engine=config.engine,
        device=_device_used(encoder, config, corpus.workers),
        **(
            {"shard_size": chunk_size, "search_path": quality.get("search_path", "driver")}
            if config.engine == "ray"
            else {}
        ),
        **({"search_shards": int(quality["search_shards"])} if "search_shards" in quality else {}),
        **path.record(),
    ) | _compression_record(config.compression, quality, encoder.dimension)  # the stored dimension wins
    if recalls := {n: v for n, v in quality.items() if n.startswith("recall")}:
        logger.info("%s index: %s", config.index.kind, ", ".join(f"{n} {v:.4f}" for n, v in recalls.items()))
    if "endpoint_usage" in record:
        cost["endpoint"] = dict(record["endpoint_usage"])  # requests, tokens, retries (and cost, with a price)
    return FirstStage(run, corpus, encoder.name, record, quality, config, cost)


def _compression_record(spec: CompressionSpec, quality: dict[str, float], dimension: int) -> dict[str, object]:
    """What the result records of the stored vectors: their dimension and size per document (the index's
    serialized size / documents), and for a compressed index the settings, how it searched and what its int8
    ranges were computed on."""
    record: dict[str, object] = {"dimension": spec.truncate_dim or dimension}
    if "bytes_per_doc" in quality:
        record["bytes_per_doc"] = round(quality["bytes_per_doc"], 2)
    if spec.truncate_dim is not None:
        record["truncate_dim"] = spec.truncate_dim
    if not spec.compressed:
        return record
    record.update(
        embedding_precision=spec.embedding_precision,
        rescore_multiplier=spec.rescore_multiplier,
        compressed_index="IndexBinaryFlat (Hamming)"
        if spec.binary
        else f"IndexScalarQuantizer (QT_8bit_direct{'_signed' if spec.embedding_precision == 'int8' else ''},"
        " exact inner product of the codes)",
        rescore="float32 query · float32 document vectors" if spec.rescore_multiplier else "none",
    )
    if "calibration_docs" in quality:
        record["calibration"] = f"per-dimension min/max over all {int(quality['calibration_docs'])} corpus vectors"
    return record


def _device_used(encoder: Encoder, config: EvaluateConfig, workers: list[str] = ()) -> str:
    """Where the model ran, for the result: its actual device; for a model not loaded (every vector
    cached), the device it ran on when it made them, as remembered with its fingerprint; on Ray, each
    actor's own (``HOST gpus [0] cuda:0, ...``), not the driver's."""
    if config.engine == "ray" and workers:
        return ", ".join(workers)
    device = encoder.device
    return (
        device
        if device is not None and config.engine == "local" and "," not in str(config.device)
        else str(config.device)
    )


class _IndexBuilder:
    """The vector index of one dense evaluation, fed chunk by chunk.

    With a cached approximate index for these embeddings, the chunks are only kept (memory-mapped,
    for exact search) until that index loads; otherwise they go into a new index, built at the end
    and cached when it is approximate.
    """

    def __init__(
        self,
        spec: IndexSpec,
        index_file: Path | None,
        usable: bool,
        compression: tuple[CompressionSpec, bool] = (CompressionSpec(), True),
        calibration_file: Path | None = None,
        sharded=None,
        streamed=None,
        expected_rows: int = 0,
    ):
        from harness.retrieval.index import DocIds

        self.spec, self.index_file, self.use_cached = spec, index_file, usable
        self.compression, self.calibration_file = compression, calibration_file
        self.sharded = sharded  # dimension → the ray engine's sharded "index" (`harness.engines.ray_search`)
        self.streamed = streamed  # (entry, budget, given) of a streamed search: only the ids are kept
        self.expected_rows = expected_rows  # a flat index reserves them at once (no 2x peak as FAISS grows)
        self.index = None
        self.loaded_ids, self.loaded_vectors = DocIds(), []
        self.rows, self.dimension, self.lengths = 0, 0, []  # rows of each chunk added
        self.seconds = 0.0
        self.from_cache = False  # the index was read from the cache, not built

    def add(self, doc_ids: list[str], vectors) -> None:
        from harness.retrieval.compress import CompressedIndex
        from harness.retrieval.index import VectorIndex

        added = time.perf_counter()
        compression, normalize = self.compression
        vectors = compression.prepare(vectors, normalize)  # a Matryoshka truncation: sliced, renormalized
        self.rows, self.dimension = self.rows + len(doc_ids), vectors.shape[1]
        self.lengths.append(len(doc_ids))
        if self.streamed is not None:
            self.loaded_ids.extend(doc_ids)  # the vectors are the cache's chunk files, read again by the search
        elif self.use_cached:
            self.loaded_ids.extend(doc_ids)
            self.loaded_vectors.append(vectors)
        else:
            if self.index is None and self.sharded is not None:
                self.index = self.sharded(vectors.shape[1])
            elif self.index is None:
                self.index = (
                    CompressedIndex(vectors.shape[1], compression, self.calibration_file)
                    if compression.compressed
                    else VectorIndex(vectors.shape[1], self.spec)
                )
                if isinstance(self.index, VectorIndex):
                    self.index.reserve(self.expected_rows)
            self.index.add(doc_ids, vectors)
        self.seconds += time.perf_counter() - added

    def reset(self) -> None:
        """Forget everything added (the cache entry being read turned out damaged)."""
        self.__init__(
            self.spec,
            self.index_file,
            False,
            self.compression,
            self.calibration_file,
            self.sharded,
            self.streamed,
            self.expected_rows,
        )

    def finish(self, writable: bool):
        """The built (or cached) index, or None when no vector was added."""
        built = time.perf_counter()
        if self.streamed is not None:
            self.index = (
                streamed_index(*self.streamed, self.loaded_ids, self.dimension, self.lengths) if self.rows else None
            )
        elif self.use_cached and self.loaded_vectors:
            self.index, self.from_cache = load_cached_index(
                self.index_file, self.spec, self.loaded_ids, self.loaded_vectors, writable
            )
            self.loaded_vectors.clear()
        elif self.index is not None:
            self.index.build()
            if self.index_file is not None and writable:
                try:
                    self.index.save(self.index_file)
                except OutputError as exc:
                    logger.warning("could not cache the index (%s); continuing", exc)
        self.seconds += time.perf_counter() - built
        return self.index


def _retrieve(
    encoder: Encoder,
    docs: Iterator[Doc],
    queries: list[Query],
    depth: int,
    top_k: int,
    config: EvaluateConfig,
    clock: Clock,
    corpus: CorpusState,
    chunk_size: int,
    cost: dict[str, object],
    path: SearchPath = SearchPath(),
    held: ExitStack | None = None,
) -> tuple[Run, dict[str, float]]:
    """Dense retrieval: corpus vectors from the cache or encoded (locally or fanned out), the index, the search;
    what it cost beyond the clock's phases goes into `cost`; the cache folders it reads stay locked while `held` is."""
    started = time.perf_counter()
    fingerprint = encoder.fingerprint() if config.cache else None
    cache_root = cache_dir(config.cache_dir) if fingerprint is not None else None
    compression = (config.compression, encoder.normalize)
    entry, builder = None, _IndexBuilder(config.index, None, False, compression, expected_rows=path.n_docs)
    stores = (None, None)  # the text stores of documents and queries
    if cache_root is not None:
        logger.info("embedding cache: %s", cache_root)
        entry = embedding_entry(
            cache_root,
            {
                "kind": "corpus",
                "model": fingerprint,
                "text_rule": DOC_TEXT_RULE,
                "dtype": "float32",
                "corpus_sha256": corpus.sha256,
            },
            {"dataset": corpus.dataset},
        )
        builder = _IndexBuilder(
            config.index,
            *cached_index_file(cache_root, entry, config.index, config.compression),
            compression,
            calibration_file(cache_root, entry, config.compression),
            _sharded(config, entry),
            (entry, path.budget, path.given) if path.streamed else None,
            path.n_docs,
        )
        stores = text_stores(cache_root, fingerprint, DOC_TEXT_RULE)
        if held is not None:
            held.enter_context(reading([entry.root, *(store.folder for store in stores)]))
        feed_from_cache(entry, builder, corpus)
    counts = {"cached": corpus.n_docs} if corpus.cached else {}
    if path.streamed and entry is None:
        raise HarnessError(
            f"the corpus vectors need {size_text(path.needed, places=2)} in memory, more than "
            f"{path.budget_words()}, and a streamed search reads them from the embedding cache, which "
            "this model cannot use (no weight fingerprint)"
            + (f": raise {setting('memory_budget')}" if path.given else ": free memory")
        )
    encode_seconds = (
        0.0
        if corpus.cached
        else _encode_missing(
            encoder, docs, config, entry, builder, fingerprint, chunk_size, corpus.workers, (stores[0], counts)
        )
    )
    index = builder.finish(entry is not None and entry.writable)
    corpus.stored = cache_record(config.cache, corpus.cached, entry)
    # The corpus stage interleaves reading, encoding and indexing; split its time three ways.
    corpus_seconds = time.perf_counter() - started
    clock.add("encode_corpus", encode_seconds)
    clock.add("index", builder.seconds)
    clock.add("load", corpus_seconds - encode_seconds - builder.seconds)
    if corpus.cached:
        clock.mark_cached("encode_corpus")
    if builder.from_cache:
        clock.mark_cached("index")
    if index is None:
        return Run.from_scores({}), {}
    with clock.stage("encode_queries"):
        vectors, queries_cached, queries_entry, encoded = cached_query_vectors(
            encoder, queries, cache_root, fingerprint, corpus.dataset, stores[1]
        )
        query_vectors = config.compression.prepare(vectors, encoder.normalize)
    if queries_cached:
        clock.mark_cached("encode_queries")
    run, quality = _search(
        index,
        encoder.name,
        queries,
        query_vectors,
        depth,
        top_k,
        config.index.kind != "flat" or config.compression.compressed,
        clock,
        cost,
    )
    cost["vectors"] = vector_counts(counts, stores, len(queries), encoded)
    cost["index_bytes"] = int(quality.pop("index_bytes", 0)) or None
    if cache_root is not None:
        used = [entry.root, queries_entry, builder.index_file, builder.calibration_file, *(s.folder for s in stores)]
        cost["cache_bytes"] = tree_bytes(used)  # the vectors cached by text included: this run reads them
    return run, quality


def _one_ray_session(config: EvaluateConfig):
    """With sharded search, one Ray session for the encoding and the search (a ``--ray-local`` cluster starts
    once, not twice); otherwise nothing (the encoding joins Ray only if something is left to encode)."""
    from contextlib import nullcontext

    if _sharded(config, None) is None:
        return nullcontext()
    from harness.engines.ray_engine import session

    return session(config.ray)


def _sharded(config: EvaluateConfig, entry):
    """How the ray engine's sharded search stands in for the flat index (dimension → `ShardedCorpus`), or None
    where search stays on the driver: another engine, ``ray_search driver``, an approximate index, or vectors the
    index does not take as cached (compressed, truncated)."""
    if (
        config.engine != "ray"
        or config.ray.search != "sharded"
        or config.index.kind != "flat"
        or config.compression.compressed
        or config.compression.truncate_dim is not None
    ):
        return None
    from functools import partial

    from harness.engines.ray_search import ShardedCorpus

    return partial(ShardedCorpus, entry=entry, spec=config.ray)


def _encode_missing(
    encoder: Encoder,
    docs: Iterator[Doc],
    config: EvaluateConfig,
    entry,
    builder: _IndexBuilder,
    fingerprint,
    chunk_size: int,
    workers: list[str] | None = None,
    by_text: tuple = (None, None),
) -> float:
    """Encode what the cache lacks — here, or on Ray / several devices — into the entry and the index; locally,
    the text store and the counts of `by_text` (`encode_corpus`'s `texts` and `counts`).

    Returns:
        Seconds spent encoding (or waiting for the workers).
    """
    from harness.retrieval.index import TRAINED

    devices = (config.device or "cpu").split(",")
    seconds = 0.0
    n_chunks = 0
    if config.engine == "ray" or len(devices) > 1:
        if entry is None:
            raise HarnessError(
                f"{'the ray engine' if config.engine == 'ray' else 'several devices'} need a model "
                "with a weight fingerprint, for the embedding cache the workers write into"
            )
        resumable = entry.resumable(chunk_size)
        entry.start(chunk_size)
        chunks = _fan_out(
            config,
            fingerprint,
            docs,
            entry,
            chunk_size,
            devices,
            cached=lambda i, ids: resumable and entry.chunk_ids(i) == ids,
            workers=workers,
        )
    else:
        if entry is not None:
            docs = _noting_texts(docs, texts := deque())  # the chunk names its texts' digests
            done = entry.done_chunks(chunk_size)
            entry.start(chunk_size)  # drops a partial entry of another chunk size: its pieces cannot fit
            if done:
                logger.info("resuming: %d chunk(s) of %d documents already encoded in the cache", done, chunk_size)
        chunks = encode_corpus(
            encoder,
            docs,
            chunk_size=chunk_size,
            batch_size=config.encoder.batch_size,
            progress=config.progress,
            store=entry,
            checkpoint_seconds=config.checkpoint_seconds,
            token_budget=config.token_budget,
            texts=by_text[0],
            counts=by_text[1],
        )
    # A trained index keeps every vector until it is built (and for exact search after): memory maps of
    # the cache's chunk files then, so that memory does not grow with the corpus.
    keep_mapped = config.index.kind in TRAINED or config.compression.compressed
    local = config.engine != "ray" and len(devices) == 1
    for n_chunks, (doc_ids, vectors, spent) in enumerate(chunks, start=1):
        seconds += spent
        # Fanned-out chunks are in the cache already; a local chunk with spent == 0 came whole from it.
        chunk_texts = [texts.popleft() for _ in doc_ids] if local and entry is not None else []
        if local and entry is not None and (spent or not entry.has_chunk(n_chunks - 1)):
            entry.write_chunk(n_chunks - 1, doc_ids, vectors, digests=text_digests(chunk_texts))
            if keep_mapped and entry.writable:
                vectors = mapped_chunk(entry, n_chunks - 1, vectors)
        builder.add(doc_ids, vectors)
    if entry is not None and builder.rows:
        entry.finish(n_chunks, builder.rows, builder.dimension)
    return seconds


def _noting_texts(docs: Iterator[Doc], texts: deque) -> Iterator[Doc]:
    """`docs`, each one's text appended to `texts` as it passes."""
    for doc in docs:
        texts.append(doc_text(doc))
        yield doc


def _search(
    index,
    name: str,
    queries: list[Query],
    query_vectors,
    depth: int,
    top_k: int,
    approximate: bool,
    clock: Clock,
    cost: dict[str, object],
) -> tuple[Run, dict[str, float]]:
    """Search the index (then a sample of queries alone, for their latency, into `cost`); an approximate one is
    also measured against exact search on the same vectors."""
    from harness.retrieval.index import recall_of_exact

    query_ids = [query.query_id for query in queries]
    with clock.stage("search"):
        run = index.search(query_ids, query_vectors, depth, name=name)
    probe_latency(
        clock, cost, lambda i: index.search(query_ids[i : i + 1], query_vectors[i : i + 1], depth), len(query_ids)
    )
    quality: dict[str, float] = index.facts()
    if approximate:
        with clock.stage("exact_search"):
            cut = min(top_k, len(index))
            reference = index.exact_search(query_ids, query_vectors, depth)
            for k in sorted({min(10, cut), cut}):
                quality[f"recall_of_exact@{k}"] = recall_of_exact(run, reference, k)
    return run, quality


def _fan_out(
    config: EvaluateConfig,
    fingerprint,
    docs: Iterator[Doc],
    entry,
    chunk_size: int,
    devices: list[str],
    cached,
    workers: list[str] | None = None,
) -> Iterator:
    """The engines that encode chunks in other processes: Ray actors, or one local worker per device."""
    from functools import partial

    from harness.engines.shards import EncodeJob

    job = EncodeJob(
        partial(load_model, config),
        fingerprint,
        entry,
        chunk_size,
        config.encoder.batch_size,
        config.checkpoint_seconds,
        config.token_budget,
        workers if workers is not None else [],
    )
    if config.engine == "ray":
        from harness.engines.ray_engine import encode_corpus_ray

        return encode_corpus_ray(job, docs, config.ray, progress=config.progress, cached=cached)
    from harness.engines.multi_device import encode_corpus_devices

    return encode_corpus_devices(job, docs, devices, progress=config.progress, cached=cached)
