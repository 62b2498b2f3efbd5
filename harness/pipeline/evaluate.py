"""The evaluation pipeline: the one place that knows the order of the stages.

    qrels + queries → (model: stream corpus → encode → index → search | external run)
        → self-hit policy → cut to depth → metrics → result files

`evaluate_dataset` runs it on a BEIR folder; `run_demo` runs it on the bundled lesson set.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from harness.datasets import registry
from harness.io.cache import CacheCorrupt, cache_dir, content_key, embedding_entry
from harness.datasets.catalog import resolve_dataset
from harness.retrieval.encode import (
    DEFAULT_CHECKPOINT_SECONDS,
    DEFAULT_MODEL,
    HASH_PREFIX,
    Encoder,
    EncoderSpec,
    check_model_available,
    encode_corpus,
    model_folder,
    resolve_model_source,
)
from harness.retrieval.devices import DeviceError, DeviceSpec
from harness.errors import DatasetError, HarnessError, OutputError, setting
from harness.io.formats import (
    BeirFolder,
    content_digest,
    iter_corpus,
    iter_queries,
    locate_beir_folder,
    read_qrels,
    read_run,
)
from harness.retrieval.rerank import RerankSpec
from harness.host import host_info, versions
from harness.retrieval.compress import CompressionSpec
from harness.retrieval.endpoint import ENDPOINT_PREFIX, EndpointSpec
from harness.retrieval.index import IndexSpec
from harness.evaluation.metrics import evaluate, standard_metrics
from harness.engines.ray_engine import ENGINES, RaySpec
from harness.records import Doc, Qrels, Query, Run, doc_text
from harness.reporting.report import Result, write_result
from harness.reporting.variant import Configuration

logger = logging.getLogger(__name__)

DEFAULT_K_VALUES = (1, 3, 5, 10, 100)
# Every result stores every metric family at these cutoffs (up to its depth), whatever was asked to
# be shown, so that results of one dataset stay comparable and a table never loses a column.
STANDARD_K = (1, 3, 5, 10, 20, 100, 1000)
BM25_MODEL = "bm25"  # --model bm25 selects the lexical baseline instead of a dense model
DEFAULT_DEPTH = 100


@dataclass(frozen=True)
class EvaluateConfig:
    """What to evaluate and how.

    Attributes:
        dataset_path: A BEIR folder, or a registry name (``scifact``, ``cqadupstack/android``)
            resolved in `data_dir` and downloaded when missing (unless `download` is False).
        split: The qrels split to score.
        model: sentence-transformers name or local folder (ignored with `run_path`).
        k_values: Cutoffs shown; every metric family is stored at each of them and at every
            `STANDARD_K` cutoff up to the depth.
        top_k: Documents retrieved and kept per query; None means max(100, largest k).
        encoder: How the model turns texts into vectors (`harness.retrieval.encode.EncoderSpec`: truncation,
            normalization, prefixes, backend, precision, batch size).
        ignore_identical_ids: The self-hit policy: True drops a retrieved document whose id
            equals the query id; None takes the registry's policy for a known BEIR dataset
            name and False otherwise.
        run_path: Score this TREC run instead of retrieving.
        output_dir: Where result files go; None writes nothing.
        dataset_name: Name recorded in the result; None means the folder or registry name.
        progress: Show progress bars on stderr.
        data_dir: Where registry datasets live (see `harness.datasets.catalog.data_dir`).
        download: Download a registry dataset that is not installed.
        base_url: Download mirror (see `harness.datasets.catalog.base_url`).
        cache: Reuse and store embeddings in the content-addressed cache (`harness.io.cache`).
        cache_dir: The cache root; None means `harness.io.cache.cache_dir`'s default (one per user).
        threads: torch and faiss threads; None leaves their defaults (all cores).
        index: Which FAISS index to search (`harness.retrieval.index.IndexSpec`); flat (exact) by default.
        compression: Matryoshka truncation and the stored precision (int8, binary...) derived from the float32
            vectors (`harness.retrieval.compress.CompressionSpec`); none by default.
        endpoint: The embedding service of an ``openai:MODEL`` model (`harness.retrieval.endpoint.EndpointSpec`).
        chunk_size: Documents encoded (and cached) per chunk.
        checkpoint_seconds: Inside a chunk, store what is encoded whenever this much encoding time
            has passed since the last write, so a killed run loses at most about this much work.
        token_budget: Batch documents by tokens (texts × longest text's tokens ≤ budget) instead
            of `batch_size` texts (`harness.retrieval.encode.plan_batches`); None: by count.
        engine: ``local`` encodes in this process; ``ray`` fans the corpus out over a Ray cluster
            (`harness.engines.ray_engine`; needs the ``[ray]`` extra and the cache on a shared filesystem).
        ray: Which cluster and how many shards, for the ``ray`` engine.
        device: ``auto``, ``cpu``, ``cuda``, ``cuda:N``, ``cuda:all``, ``mps`` or a comma-separated
            list (one worker process per device); None means ``$BEIR_HARNESS_DEVICE`` or ``auto``
            (`harness.retrieval.devices`). Not part of the configuration: devices change vectors by float
            rounding only.
        rerank: Rerank the first stage's top documents with a cross-encoder (`harness.retrieval.rerank`);
            the result then holds `rerank.depth` documents per query.
        name: The label the result carries in every report, table and plot; None means the model
            name, followed by the variant's tokens for a non-default configuration.
        allow_unknown_docs: Score an external run that names documents absent from the corpus
            (as non-relevant, noted in the result) instead of refusing it.
    """

    dataset_path: Path | str
    split: str = "test"
    model: str = DEFAULT_MODEL
    k_values: tuple[int, ...] = DEFAULT_K_VALUES
    top_k: int | None = None
    encoder: EncoderSpec = field(default_factory=EncoderSpec)
    ignore_identical_ids: bool | None = None
    run_path: Path | None = None
    output_dir: Path | None = Path("results")
    dataset_name: str | None = None
    progress: bool = True
    data_dir: Path | None = None
    download: bool = True
    base_url: str | None = None
    cache: bool = True
    cache_dir: Path | None = None
    threads: int | None = None
    index: IndexSpec = field(default_factory=IndexSpec)
    compression: CompressionSpec = field(default_factory=CompressionSpec)
    endpoint: EndpointSpec = field(default_factory=EndpointSpec)
    chunk_size: int = 16384
    checkpoint_seconds: float = DEFAULT_CHECKPOINT_SECONDS
    token_budget: int | None = None
    engine: str = "local"
    ray: RaySpec = field(default_factory=RaySpec)
    device: str | None = None
    rerank: RerankSpec | None = None
    name: str | None = None
    allow_unknown_docs: bool = False


@dataclass(frozen=True)
class Outcome:
    """The result of one evaluation, the run it scored, and where they were written."""

    result: Result
    run: Run
    qrels: Qrels
    paths: tuple[Path, Path] | None = None


DOC_TEXT_RULE = "(title + ' ' + text).strip()"


@dataclass
class _CorpusState:
    """What the corpus pass learns: its hash, size, and which judged documents it has seen."""

    sha256: str
    dataset: str
    judged: set[str]
    unseen: set[str]
    n_docs: int = 0
    cached: bool = False
    unseen_run: set[str] = field(default_factory=set)  # an external run's doc_ids not met yet
    workers: list[str] = field(default_factory=list)  # where Ray actors encoded (their own devices)

    def tick(self, doc_ids) -> None:
        self.n_docs += len(doc_ids)
        self.unseen.difference_update(doc_ids)
        if self.unseen_run:
            self.unseen_run.difference_update(doc_ids)


@dataclass
class Clock:
    """Seconds per stage of one evaluation: ``with clock.stage("encode"): ...``.

    Stages: load, encode, index, search, score (always present), and rerank / exact_search when they
    happen; `total` is the wall time since the clock started.
    """

    def __init__(self):
        self.seconds: dict[str, float] = dict.fromkeys(("load", "encode", "index", "search", "score"), 0.0)
        self._started = time.perf_counter()

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - started)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def rounded(self) -> dict[str, float]:
        """The stages and the total, to 0.1 ms (what a result records)."""
        return {name: round(seconds, 4) for name, seconds in
                {**self.seconds, "total": time.perf_counter() - self._started}.items()}


def retrieval_depth(config: EvaluateConfig) -> int:
    """Documents kept per query: the rerank depth when reranking, else `top_k`, else the larger of 100
    and the largest cutoff asked for."""
    if config.rerank is not None:
        return config.rerank.depth
    return config.top_k if config.top_k is not None else max(DEFAULT_DEPTH, max(config.k_values, default=0))


def run_model_name(config: EvaluateConfig) -> str:
    """The model name a result of `config` is recorded under, known before anything loads."""
    from harness.retrieval.encode import canonical_model_name

    if config.run_path is not None:
        return f"run:{Path(config.run_path).name}"
    return BM25_MODEL if config.model.lower() == BM25_MODEL else canonical_model_name(config.model)


def configuration(config: EvaluateConfig, dataset: str, model: str | None = None) -> Configuration:
    """The identity of `config`'s result on `dataset`: the decisive settings that differ from defaults.

    Decisive: the depth, the self-hit policy (against the registry's policy for `dataset`), and
    for a dense model the encoder's decisive settings (`EncoderSpec.to_config`) and the index; for BM25
    its spec.
    Defaults are `EvaluateConfig`'s own, so they are stated once.

    Args:
        config: The evaluation.
        dataset: The dataset name (decides the default self-hit policy).
        model: The model name the result records; default `run_model_name(config)`.
    """
    default = EvaluateConfig(dataset_path=config.dataset_path)
    settings = {"depth": retrieval_depth(config), "self_hits_dropped": self_hit_policy(config, dataset)[0]}
    defaults = {"depth": DEFAULT_DEPTH, "self_hits_dropped": self_hit_policy(default, dataset)[0]}
    if config.run_path is None and config.model.lower() == BM25_MODEL:
        from harness.retrieval.bm25 import BM25Spec

        settings["bm25"] = defaults["bm25"] = BM25Spec().to_config()  # not configurable yet
    elif config.run_path is None:
        settings.update(config.encoder.to_config())
        defaults.update(default.encoder.to_config())
        settings["index"], defaults["index"] = config.index.to_config(), default.index.to_config()
        settings.update(config.compression.to_config())
        defaults.update(default.compression.to_config())
        if config.model.startswith(ENDPOINT_PREFIX):
            settings["endpoint"] = config.endpoint.where()  # one model name on two services: two results
    settings["rerank"], defaults["rerank"] = (config.rerank.to_config() if config.rerank else None), None
    return Configuration.from_settings(model or run_model_name(config), config.split, settings, defaults)


def self_hit_policy(config: EvaluateConfig, dataset: str) -> tuple[bool, str]:
    """Decide the self-hit policy and say where the decision came from.

    Returns:
        (ignore_identical_ids, source) where source is ``"option"``, ``"registry"`` or
        ``"default"``.
    """
    if config.ignore_identical_ids is not None:
        return config.ignore_identical_ids, "option"
    spec = registry.lookup(dataset)
    if spec is not None:
        return spec.ignore_identical_ids, "registry"
    return False, "default"


def first_device(config: EvaluateConfig) -> str:
    """The device a model of `config` loads on: the first of its devices, ``auto`` resolved now."""
    device = (config.device or "cpu").split(",")[0]
    return DeviceSpec(device, config.encoder.precision).resolve()[0] if device == "auto" else device


def load_model(config: EvaluateConfig, device: str | None = None) -> Encoder:
    """Load `config.model` with `config.encoder`'s settings, on `device` (default: `first_device`); an
    ``openai:MODEL`` is its service (`harness.retrieval.endpoint`), which remembers its identity in the cache."""
    if config.model.startswith(ENDPOINT_PREFIX):
        from harness.retrieval.endpoint import EndpointEncoder

        spec = config.encoder
        return EndpointEncoder(config.model, config.endpoint, spec.normalize, spec.query_prefix, spec.doc_prefix,
                               cache_dir(config.cache_dir) / "models" if config.cache else None)
    return config.encoder.load(config.model, device or first_device(config), cache_dir(config.cache_dir))


SPARSE_CHUNK = 1024  # sparse rows are cached per chunk; a small chunk bounds what a kill loses


def _is_sparse_model(config: EvaluateConfig) -> bool:
    from harness.retrieval.rerank import model_kind

    return config.run_path is None and config.model.lower() != BM25_MODEL and \
        not config.model.startswith((HASH_PREFIX, ENDPOINT_PREFIX)) and \
        model_kind(model_folder(config.model)) == "sparse-encoder"


def _retrieve_sparse(config: EvaluateConfig, folder: BeirFolder, corpus: _CorpusState, queries: list[Query],
                     depth: int) -> tuple[Run, dict]:
    """Learned sparse retrieval (`harness.retrieval.learned_sparse`): rows cached per chunk, exact search."""
    from harness.io.cache import CacheCorrupt as Corrupt
    from harness.retrieval.encode import chunked
    from harness.retrieval.learned_sparse import SparseIndex, SparseModel

    spec = config.encoder
    if spec.backend != "torch":
        raise HarnessError(f"backend {spec.backend} is for dense models; a sparse encoder runs with torch")
    source = resolve_model_source(config.model)
    model = SparseModel(run_model_name(config), source, spec.batch_size, first_device(config), spec.precision,
                        spec.max_seq_length)
    index = SparseIndex()
    entry = embedding_entry(cache_dir(config.cache_dir), {
        "kind": "sparse-corpus", "model": model.fingerprint(), "text_rule": DOC_TEXT_RULE, "dtype": "float32",
        "corpus_sha256": corpus.sha256}, {"dataset": corpus.dataset}, sparse=True) if config.cache else None
    if entry is not None and entry.complete:
        try:
            for doc_ids, rows in entry.chunks():
                corpus.tick(doc_ids)
                index.add(doc_ids, rows)
            corpus.cached = True
        except Corrupt as exc:
            logger.warning("damaged cache entry, recomputing: %s", exc)
            entry.drop()
            index, corpus.n_docs, corpus.unseen = SparseIndex(), 0, set(corpus.judged)
    if not corpus.cached:
        chunk_size = min(config.chunk_size, SPARSE_CHUNK)
        if entry is not None:
            entry.start(chunk_size)
        n_chunks = 0
        for n_chunks, chunk in enumerate(chunked(_checked_corpus(folder, corpus), chunk_size), start=1):
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
    query_rows = model.encode_queries([query.text for query in queries])
    run = index.search([query.query_id for query in queries], query_rows, depth, name=model.name)
    return run, {"model_source": source, "retriever": "learned-sparse", **index.stats(query_rows),
                 "dimension": index.dimension, "batch_size": spec.batch_size, "doc_text": DOC_TEXT_RULE,
                 "embedding_cache": "hit" if corpus.cached else ("stored" if config.cache else "off"),
                 "device": config.device, "precision": spec.precision}


def _check_model_kind(config: EvaluateConfig) -> None:
    """A cross-encoder given as the first stage is one clear line, before anything loads."""
    from harness.retrieval.rerank import model_kind

    if config.run_path is not None or config.model.lower() == BM25_MODEL or config.model.startswith(HASH_PREFIX):
        return
    if model_kind(model_folder(config.model)) == "cross-encoder":
        raise HarnessError(f"{config.model} is a cross-encoder (it scores query-document pairs), not a retriever; "
                           f"rerank with it (--rerank {config.model}) after a first stage given as --model, e.g. "
                           "--model bm25")


def _rerank_stage(config: EvaluateConfig, run: Run, queries: list[Query], folder: BeirFolder) -> tuple[Run, dict]:
    """Rerank `run` with `config.rerank`; returns the reranked run and what the result records about it."""
    from harness.retrieval.rerank import Reranker, ScoreCache, rerank

    reranker = Reranker(config.rerank, device=first_device(config), precision=config.encoder.precision)
    needed = {hit.doc_id for query_id in run for hit in run[query_id]}
    documents = {doc.doc_id: doc_text(doc) for doc in iter_corpus(folder.corpus) if doc.doc_id in needed}
    fingerprint = reranker.fingerprint()
    cache = ScoreCache(cache_dir(config.cache_dir) if config.cache else None, fingerprint)
    reranked, counts = rerank(run, {query.query_id: query.text for query in queries}, documents, reranker, cache,
                              progress=config.progress, checkpoint_seconds=config.checkpoint_seconds)
    logger.info("reranked %d pairs with %s (%d from the cache)", counts["pairs"], config.rerank.model,
                counts["cached"])
    return reranked, {**config.rerank.to_config(), "batch_size": config.rerank.batch_size,
                      "fingerprint": fingerprint, "pairs": counts["pairs"], "cached_pairs": counts["cached"],
                      "protocol": "top-depth first-stage documents re-sorted by the cross-encoder score; the rest "
                                  "dropped"}


def _resolve_devices(config: EvaluateConfig) -> EvaluateConfig:
    """`config` with its device option resolved to concrete devices, checked before anything loads.

    Scoring a run, BM25 and the hashing stand-in need no device (and no torch); the ONNX
    backends run on the CPU.
    """
    encoder = config.encoder
    spec = DeviceSpec(config.device, encoder.precision,
                      queries_only=config.engine == "ray" and bool(config.ray.gpus_per_worker))
    spec.check_syntax()
    needs_torch = config.run_path is None and config.model.lower() != BM25_MODEL and \
        not config.model.startswith(HASH_PREFIX)
    if not needs_torch:
        parts = spec.option.split(",")
        if any(part not in ("auto", "cpu") for part in parts) and config.run_path is None and \
                config.model.startswith(HASH_PREFIX):
            raise DeviceError(f"the hashing stand-in encoder runs on CPUs only, not {spec.option}")
        # A list of CPUs keeps its length: `cpu,cpu` is two worker processes.
        return replace(config, device=",".join("cpu" for _ in parts) if config.run_path is None and
                       config.model.startswith(HASH_PREFIX) else "cpu")
    if encoder.backend != "torch":
        if spec.option not in ("auto", "cpu") or encoder.precision != "fp32":
            raise DeviceError(f"backend {encoder.backend} runs on the CPU in fp32 only; use backend torch for "
                              f"device {spec.option} and precision {encoder.precision}")
        return replace(config, device="cpu")
    if spec.option == "auto" and encoder.precision != "fp16":
        # Resolved when a model loads (`first_device`): a warm run that loads none then imports no torch.
        return replace(config, device="auto")
    devices = spec.resolve()
    if len(devices) > 1 and config.engine == "ray":
        raise DeviceError("a device list fans out over local worker processes; with the ray engine, ask each worker "
                          "for GPUs instead (ray_gpus_per_worker)")
    return replace(config, device=",".join(devices))


def _model_or_lazy(config: EvaluateConfig, source: str) -> Encoder:
    """The model, or — when its fingerprint is remembered — a stand-in that loads it only if needed.

    The fingerprint (a hash of the weights) needs the loaded model; it is remembered under a cheap
    key of the model's files and the settings, so a rerun whose embeddings are all cached loads
    nothing.
    """
    from harness.io.cache import model_files_key, recall_fingerprint, remember_fingerprint
    from harness.retrieval.encode import LazyEncoder

    if not config.cache or config.model.startswith(ENDPOINT_PREFIX):
        return load_model(config)  # a service remembers its own identity (no weights to hash)
    root = cache_dir(config.cache_dir)
    settings = {"model": config.model, **config.encoder.to_config()}
    if config.encoder.backend == "onnx-int8":
        from harness.host import local_kernel_class

        settings["int8_kernels"] = local_kernel_class()  # int8 vectors differ by CPU kernel class
    key = model_files_key(source, settings)
    remembered = recall_fingerprint(root, key) if key else None
    if remembered is not None and "fingerprint" in remembered:
        return LazyEncoder(remembered["fingerprint"], lambda: load_model(config), remembered.get("dimension"),
                           remembered.get("device"))
    encoder = load_model(config)
    fingerprint = encoder.fingerprint()
    if key is not None and fingerprint is not None:
        remember_fingerprint(root, key, {"fingerprint": fingerprint, "dimension": encoder.dimension,
                                         "device": _device_used(encoder, config)})
    return encoder


def apply_self_hit_policy(run: Run, ignore_identical_ids: bool) -> Run:
    """The only place the self-hit policy is applied: drop doc_id == query_id when asked.

    BEIR's evaluator does this by default and MTEB follows it; for ArguAna and Quora, whose
    queries are corpus documents, keeping them inflates every metric.
    """
    return run.without_self_hits() if ignore_identical_ids else run


def _judged_queries(folder: BeirFolder, qrels: Qrels, digest, notes: list[str]) -> list[Query]:
    wanted = [query for query in iter_queries(folder.queries, digest) if query.query_id in qrels]
    missing = len(qrels) - len(wanted)
    if missing:
        found = {query.query_id for query in wanted}
        example = next(query_id for query_id in qrels if query_id not in found)
        raise DatasetError(
            f"{folder.qrels}: {missing} judged quer{'y is' if missing == 1 else 'ies are'} not in "
            f"{folder.queries} (e.g. {example!r}); fix the qrels or add the queries"
        )
    empty = [query.query_id for query in wanted if not query.text.strip()]
    if empty:
        notes.append(f"{len(empty)} judged quer{'y has' if len(empty) == 1 else 'ies have'} empty text in "
                     f"{folder.queries} ({_examples(empty)}); they are searched with an empty string and "
                     "count in every mean")
        logger.warning(notes[-1])
    return wanted


def _examples(ids, n: int = 3) -> str:
    """A few ids, quoted, for an error message."""
    shown = sorted(ids)[:n]
    return ", ".join(map(repr, shown)) + (", ..." if len(ids) > n else "")


def _check_run(run: Run, qrels: Qrels, run_path: Path, folder: BeirFolder) -> None:
    """Refuse a run that shares no query id with the qrels: its scores would be a silent zero."""
    if not any(query_id in qrels for query_id in run):
        raise DatasetError(
            f"{run_path}: none of the run's {len(run)} query ids is judged in {folder.qrels} "
            f"(run: {_examples(list(run))}; qrels: {_examples(list(qrels))}); the run was made for other "
            "queries, or with other ids"
        )


def _unknown_run_docs(corpus: _CorpusState, run_path: Path, folder: BeirFolder, allow: bool) -> list[str]:
    """Refuse (or, when allowed, note) run documents that are not in the corpus."""
    if not corpus.unseen_run:
        return []
    count = len(corpus.unseen_run)
    what = (f"{count} document id{'s' if count > 1 else ''} in {run_path} {'are' if count > 1 else 'is'} not "
            f"in {folder.corpus} ({_examples(corpus.unseen_run)})")
    if not allow:
        raise DatasetError(f"{what}; the run was probably made on another corpus version: rerun it on this "
                           "corpus, or allow unknown documents (--allow-unknown-docs) to score them as non-relevant")
    note = f"{what}; scored as non-relevant (unknown documents allowed)"
    logger.warning(note)
    return [note]


def _checked_corpus(folder: BeirFolder, corpus: _CorpusState, digest=None) -> Iterator[Doc]:
    """Stream the corpus, ticking off judged doc_ids as they pass (ids with whitespace are refused)."""
    for doc in iter_corpus(folder.corpus, digest, check_ids=True):
        corpus.tick((doc.doc_id,))
        yield doc


def _check_corpus(folder: BeirFolder, corpus: _CorpusState) -> None:
    if corpus.n_docs == 0:
        raise DatasetError(f"{folder.corpus}: the corpus is empty")
    if corpus.unseen:
        example = sorted(corpus.unseen)[0]
        raise DatasetError(
            f"{folder.qrels}: {len(corpus.unseen)} judged document id(s) are not in {folder.corpus} "
            f"(e.g. {example!r}); fix the qrels or the corpus"
        )


def evaluate_dataset(config: EvaluateConfig, encoder: Encoder | None = None) -> Outcome:
    """Evaluate a model (or an external run) on one split of a BEIR folder.

    Check the settings → resolve the dataset → read qrels and judged queries → the first stage
    (an external run, BM25, learned sparse, or a dense model with its index) → the self-hit policy
    and the depth cut → the reranker, if any → scores → the result files. For a dense model the corpus
    is hashed, then streamed once: checked and encoded in the same pass, with vectors going into the
    index (and the embedding cache) chunk by chunk; when the cache holds this model's vectors for this
    exact corpus, nothing is parsed or encoded.

    Args:
        config: What to evaluate.
        encoder: A ready encoder (tests pass a fake one); by default `config.model` is loaded.

    Returns:
        The Outcome; result files are written when `config.output_dir` is set.

    Raises:
        HarnessError: Bad input (missing files, malformed lines, ids that don't resolve,
            a model that can't be loaded, an unwritable output folder).
    """
    clock = Clock()
    config, k_values, top_k, stored_k = _checked(config, loaded=encoder is not None)
    folder_path, resolved_name = resolve_dataset(config.dataset_path, config.data_dir, config.download,
                                                 config.base_url, config.progress)
    folder = locate_beir_folder(folder_path, config.split)
    dataset = config.dataset_name or resolved_name
    ignore_identical_ids, policy_source = self_hit_policy(config, dataset)
    inputs = _Inputs(folder, dataset, digests={name: hashlib.sha256() for name in ("queries", "qrels")})
    inputs.qrels = read_qrels(folder.qrels, inputs.digests["qrels"], check_ids=True)
    inputs.queries = _judged_queries(folder, inputs.qrels, inputs.digests["queries"], inputs.notes)
    logger.info("%s: %d judged queries, %d judgments", folder.qrels, len(inputs.qrels), inputs.qrels.n_judgments)
    if config.threads is not None:
        _set_threads(config.threads)

    # One extra document per query when self-hits are dropped, so the depth survives the drop.
    stage = first_stage(config, inputs, encoder, top_k + int(ignore_identical_ids), top_k, clock)
    config = stage.config or config

    with clock.stage("score"):
        scored_run = apply_self_hit_policy(stage.run, ignore_identical_ids).truncated(top_k)
    if config.rerank is not None:
        with clock.stage("rerank"):
            scored_run, stage.record["rerank"] = _rerank_stage(config, scored_run, inputs.queries, folder)
    with clock.stage("score"):
        evaluation = evaluate(inputs.qrels, scored_run, standard_metrics(stored_k))
    if evaluation.n_unjudged:
        logger.info("%d run queries are not judged in %s and were ignored", evaluation.n_unjudged, folder.qrels)
    if evaluation.n_missing:
        inputs.notes.append(f"{evaluation.n_missing} of {evaluation.n_queries} judged queries have no results in "
                            "the run and score 0")
        logger.warning(inputs.notes[-1])
    config_record = {"k_values": list(k_values), "top_k": top_k, "ignore_identical_ids": ignore_identical_ids,
                     "self_hit_policy_source": policy_source, "dataset_path": str(Path(folder_path).resolve()),
                     "n_docs": stage.corpus.n_docs, **stage.record}
    result = _result(config, inputs, stage, evaluation, config_record, clock)
    paths = write_result(result, scored_run, config.output_dir) if config.output_dir is not None else None
    return Outcome(result, scored_run, inputs.qrels, paths)


def _checked(config: EvaluateConfig, loaded: bool = False) -> tuple[EvaluateConfig, tuple[int, ...], int, list[int]]:
    """Every check that needs no file: (the config with its engine and devices resolved, the cutoffs
    asked for, the depth, the cutoffs stored). `loaded`: the model is loaded already (nothing to find)."""
    k_values = tuple(sorted(set(config.k_values)))
    if not k_values:
        raise HarnessError(f"no cutoffs given in {setting('k_values')} (e.g. 1,3,10)")
    if config.rerank is not None:
        if config.top_k is not None:
            raise HarnessError(f"with a reranker the depth is the rerank depth; set {setting('rerank_depth')}, "
                               f"not {setting('top_k')}")
        config.rerank.check(k_values[-1])
    top_k = retrieval_depth(config)
    stored_k = sorted({k for k in STANDARD_K if k <= top_k} | set(k_values))
    if top_k < k_values[-1]:
        raise HarnessError(f"{setting('top_k')} {top_k} is smaller than the largest cutoff {k_values[-1]}; raise {setting('top_k')}")
    if config.token_budget is not None and config.token_budget <= 0:
        raise HarnessError(f"token_budget must be positive, got {config.token_budget}")
    if config.checkpoint_seconds < 0:
        raise HarnessError(f"checkpoint_seconds must be 0 or more, got {config.checkpoint_seconds}")
    if config.chunk_size <= 0:
        raise HarnessError(f"chunk_size must be positive, got {config.chunk_size}")
    config.encoder.check()
    config.index.check()  # before any encoding, so a typo costs nothing
    config.compression.check()
    if config.compression.compressed and config.index.kind != "flat":
        raise HarnessError(f"{setting('embedding_precision')} {config.compression.embedding_precision} searches its "
                           f"own exact compressed index; {setting('index')} {config.index.kind} does not combine "
                           "with it")
    if config.engine not in ENGINES:
        raise HarnessError(f"unknown engine {config.engine!r}; use local or ray")
    config.ray.check()
    if config.engine == "ray" and (config.run_path is not None or config.model.lower() == BM25_MODEL):
        # A grid (`bench --engine ray`) may mix BM25 with dense models: nothing to fan out here.
        logger.info("--engine ray: %s needs no encoding and runs here", "--run" if config.run_path else "BM25")
        config = replace(config, engine="local")
    if config.engine == "ray" and not config.cache:
        raise HarnessError(f"the ray engine stores the workers' embeddings in the cache; turn the cache on ({setting('cache')})")
    config = _resolve_devices(config)
    _note_unused_settings(config)
    if config.run_path is None and config.model.startswith(ENDPOINT_PREFIX):
        config.endpoint.check()
        # Each encode call should fill every request in flight.
        config = replace(config, encoder=replace(config.encoder, batch_size=config.endpoint.batch_size *
                                                 config.endpoint.concurrency))
    elif config.run_path is None and config.model.lower() != BM25_MODEL and not config.model.startswith(HASH_PREFIX) \
            and not loaded:
        check_model_available(config.model, known=(BM25_MODEL,))  # seconds, not the hub client's retries
    if config.rerank is not None:
        check_model_available(config.rerank.model)
    _check_model_kind(config)
    return config, k_values, top_k, stored_k


def _note_unused_settings(config: EvaluateConfig) -> None:
    """Warn about settings the first stage ignores (an index for BM25...), which the result then does not record."""
    dense = config.run_path is None and config.model.lower() != BM25_MODEL and not _is_sparse_model(config)
    if dense:
        return
    what = "an external run" if config.run_path is not None else \
        "BM25" if config.model.lower() == BM25_MODEL else "a sparse encoder"
    if config.compression != CompressionSpec():
        changed = [setting(name) for name, value in asdict(config.compression).items()
                   if value != getattr(CompressionSpec(), name)]
        one = len(changed) == 1
        raise HarnessError(f"{', '.join(changed)} appl{'ies' if one else 'y'} to a dense model's vectors; {what} "
                           f"has none (drop {'it' if one else 'them'})")
    unused = []
    if config.index != IndexSpec():
        unused.append(f"{setting('index')} {config.index.kind}")
    default = EncoderSpec()
    changed = [name for name, value in config.encoder.to_config().items() if value != default.to_config()[name]]
    if changed and (config.run_path is not None or config.model.lower() == BM25_MODEL):
        unused += [setting(name) for name in changed]
    if unused:
        logger.warning("%s does not use %s: ignored, and not recorded in the result", what, ", ".join(unused))


def first_stage(config: EvaluateConfig, inputs: _Inputs, encoder: Encoder | None, depth: int, top_k: int,
                clock: Clock) -> _FirstStage:
    """The stage that turns queries into a run: an external run, BM25, a sparse encoder, or a dense model."""
    if config.run_path is not None:
        return _external_run(config, inputs, clock)
    if config.model.lower() == BM25_MODEL:
        return _bm25(config, inputs, depth, clock)
    if _is_sparse_model(config):
        return _learned_sparse(config, inputs, depth, clock)
    return _dense(config, inputs, encoder, depth, top_k, clock)


@dataclass
class _Inputs:
    """What every stage reads: the folder, the judged queries and qrels, their digests, the notes so far."""

    folder: BeirFolder
    dataset: str
    digests: dict[str, object]
    qrels: Qrels | None = None
    queries: list[Query] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def corpus_state(self, sha256: str = "") -> _CorpusState:
        judged = self.qrels.doc_ids()
        return _CorpusState(sha256, self.dataset, judged, set(judged))


@dataclass
class _FirstStage:
    """What a first stage produced: its run, what it learned of the corpus, and what the result records."""

    run: Run
    corpus: _CorpusState
    model_name: str
    record: dict[str, object] = field(default_factory=dict)
    index_quality: dict[str, float] = field(default_factory=dict)
    config: EvaluateConfig | None = None  # the settings as applied, when the stage resolved one (a full-size truncation)


def _external_run(config: EvaluateConfig, inputs: _Inputs, clock: Clock) -> _FirstStage:
    """Score a TREC run made elsewhere: checked against the qrels and the corpus (one corpus pass)."""
    with clock.stage("load"):
        return _read_external_run(config, inputs)


def _read_external_run(config: EvaluateConfig, inputs: _Inputs) -> _FirstStage:
    inputs.digests["run"] = hashlib.sha256()
    run = read_run(config.run_path, inputs.digests["run"])
    _check_run(run, inputs.qrels, config.run_path, inputs.folder)
    corpus = inputs.corpus_state()
    corpus.unseen_run = {hit.doc_id for hits in run.values() for hit in hits}
    digest = hashlib.sha256()
    for _ in _checked_corpus(inputs.folder, corpus, digest):
        pass
    corpus.sha256 = digest.hexdigest()
    _check_corpus(inputs.folder, corpus)
    inputs.notes += _unknown_run_docs(corpus, config.run_path, inputs.folder, config.allow_unknown_docs)
    logger.info("%s: a %s run", config.run_path, run.metadata.get("format"))
    return _FirstStage(run, corpus, run_model_name(config), {"run_file": str(config.run_path), "run_tag": run.name,
                                                             "run_format": run.metadata.get("format")})


def _bm25(config: EvaluateConfig, inputs: _Inputs, depth: int, clock: Clock) -> _FirstStage:
    """The lexical baseline: index the corpus in one pass, then search."""
    from harness.retrieval.bm25 import BM25Retriever, BM25Spec

    retriever = BM25Retriever(BM25Spec())
    corpus = inputs.corpus_state()
    digest = hashlib.sha256()
    with clock.stage("index"):
        retriever.index(_checked_corpus(inputs.folder, corpus, digest), progress=config.progress)
        corpus.sha256 = digest.hexdigest()
        _check_corpus(inputs.folder, corpus)
    with clock.stage("search"):
        run = retriever.search(inputs.queries, depth)
    return _FirstStage(run, corpus, BM25_MODEL, retriever.spec.to_config())


def _learned_sparse(config: EvaluateConfig, inputs: _Inputs, depth: int, clock: Clock) -> _FirstStage:
    """A SparseEncoder: rows from the cache or encoded, exact search (`_retrieve_sparse`)."""
    with clock.stage("load"):
        corpus = inputs.corpus_state(content_digest(inputs.folder.corpus, check_ids=True)[0])
    with clock.stage("encode"):
        run, record = _retrieve_sparse(config, inputs.folder, corpus, inputs.queries, depth)
        _check_corpus(inputs.folder, corpus)
    return _FirstStage(run, corpus, run_model_name(config), record)


def _dense(config: EvaluateConfig, inputs: _Inputs, encoder: Encoder | None, depth: int, top_k: int,
           clock: Clock) -> _FirstStage:
    """A bi-encoder: load (or not, when the cache holds everything), encode, index, search."""
    with clock.stage("load"):
        # Hashed up front (cheap next to encoding) so a warm cache needs no corpus parse at all.
        corpus_sha256, corpus_lines = content_digest(inputs.folder.corpus, check_ids=True)
        corpus = inputs.corpus_state(corpus_sha256)
        model_source = encoder.name if encoder is not None else resolve_model_source(config.model)
        if encoder is None:
            encoder = _model_or_lazy(config, model_source)
        config.index.check(encoder.dimension)  # before encoding, so a bad --pq-m costs nothing
        config.compression.check(encoder.dimension)
        config = replace(config, compression=config.compression.effective(encoder.dimension))
    chunk_size = config.chunk_size
    if config.engine == "ray" and config.ray.shards is not None:
        from harness.engines.ray_engine import shard_size

        chunk_size = shard_size(corpus_lines, config.ray.shards)
    run, quality = _retrieve(encoder, _checked_corpus(inputs.folder, corpus), inputs.queries, depth, top_k,
                             config, clock, corpus, chunk_size)
    _check_corpus(inputs.folder, corpus)
    record = dict(
        model_source=model_source,
        **(config.index.to_config() | ({"nlist": int(quality["nlist"])} if "nlist" in quality else {})),
        similarity="cosine" if encoder.normalize else "dot",
        **encoder.settings(),
        batch_size=config.encoder.batch_size,
        doc_text=DOC_TEXT_RULE,
        embedding_cache="hit" if corpus.cached else ("stored" if config.cache else "off"),
        threads=config.threads,
        engine=config.engine,
        device=_device_used(encoder, config, corpus.workers),
        **({"shard_size": chunk_size} if config.engine == "ray" else {}),
    ) | _compression_record(config.compression, quality, encoder.dimension)  # the stored dimension wins
    recalls = {n: v for n, v in quality.items() if n.startswith("recall")}
    if recalls:
        logger.info("%s index: %s", config.index.kind, ", ".join(f"{n} {v:.4f}" for n, v in recalls.items()))
    return _FirstStage(run, corpus, encoder.name, record, quality, config)


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
    record.update(embedding_precision=spec.embedding_precision, rescore_multiplier=spec.rescore_multiplier,
                  compressed_index="IndexBinaryFlat (Hamming)" if spec.binary else
                  f"IndexScalarQuantizer (QT_8bit_direct{'_signed' if spec.embedding_precision == 'int8' else ''},"
                  " exact inner product of the codes)",
                  rescore="float32 query · float32 document vectors" if spec.rescore_multiplier else "none")
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
    return device if device is not None and config.engine == "local" and "," not in str(config.device) \
        else str(config.device)


def _result(config: EvaluateConfig, inputs: _Inputs, stage: _FirstStage, evaluation, config_record: dict,
            clock: Clock) -> Result:
    """The Result of one evaluation, with its identity (`configuration`), host and versions."""
    identity = configuration(config, inputs.dataset, stage.model_name)
    return Result(
        dataset=inputs.dataset,
        split=config.split,
        model=stage.model_name,
        label=identity.label(config.name),
        variant=identity.variant,
        metrics=evaluation.means,
        per_query=evaluation.per_query,
        n_queries=evaluation.n_queries,
        config=config_record,
        fingerprints={"corpus": stage.corpus.sha256,
                      **{name: digest.hexdigest() for name, digest in inputs.digests.items()}},
        timings=clock.rounded(),
        versions=versions(),
        host=host_info(config.threads),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        notes=inputs.notes,
        index_quality={name: value for name, value in stage.index_quality.items() if name.startswith("recall")},
        config_hash=identity.config_hash,
    )


class _IndexBuilder:
    """The vector index of one dense evaluation, fed chunk by chunk.

    With a cached approximate index for these embeddings, the chunks are only kept (memory-mapped,
    for exact search) until that index loads; otherwise they go into a new index, built at the end
    and cached when it is approximate.
    """

    def __init__(self, spec: IndexSpec, index_file: Path | None, usable: bool,
                 compression: tuple[CompressionSpec, bool] = (CompressionSpec(), True),
                 calibration_file: Path | None = None):
        from harness.retrieval.index import DocIds

        self.spec, self.index_file, self.use_cached = spec, index_file, usable
        self.compression, self.calibration_file = compression, calibration_file
        self.index = None
        self.loaded_ids, self.loaded_vectors = DocIds(), []
        self.seconds = 0.0

    def add(self, doc_ids: list[str], vectors) -> None:
        from harness.retrieval.compress import CompressedIndex
        from harness.retrieval.index import VectorIndex

        added = time.perf_counter()
        compression, normalize = self.compression
        vectors = compression.prepare(vectors, normalize)  # a Matryoshka truncation: sliced, renormalized
        if self.use_cached:
            self.loaded_ids.extend(doc_ids)
            self.loaded_vectors.append(vectors)
        else:
            if self.index is None:
                self.index = CompressedIndex(vectors.shape[1], compression, self.calibration_file) \
                    if compression.compressed else VectorIndex(vectors.shape[1], self.spec)
            self.index.add(doc_ids, vectors)
        self.seconds += time.perf_counter() - added

    def reset(self) -> None:
        """Forget everything added (the cache entry being read turned out damaged)."""
        self.__init__(self.spec, self.index_file, False, self.compression, self.calibration_file)

    def finish(self, writable: bool):
        """The built (or cached) index, or None when no vector was added."""
        built = time.perf_counter()
        if self.use_cached and self.loaded_vectors:
            self.index = _load_index(self.index_file, self.spec, self.loaded_ids, self.loaded_vectors)
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


def _retrieve(encoder: Encoder, docs: Iterator[Doc], queries: list[Query], depth: int, top_k: int,
              config: EvaluateConfig, clock: Clock, corpus: _CorpusState,
              chunk_size: int) -> tuple[Run, dict[str, float]]:
    """Dense retrieval: corpus vectors from the cache or encoded (locally or fanned out), the index, the search."""
    started = time.perf_counter()
    fingerprint = encoder.fingerprint() if config.cache else None
    cache_root = cache_dir(config.cache_dir) if fingerprint is not None else None
    compression = (config.compression, encoder.normalize)
    entry, builder = None, _IndexBuilder(config.index, None, False, compression)
    if cache_root is not None:
        logger.info("embedding cache: %s", cache_root)
        entry = embedding_entry(cache_root, {"kind": "corpus", "model": fingerprint, "text_rule": DOC_TEXT_RULE,
                                             "dtype": "float32", "corpus_sha256": corpus.sha256},
                                {"dataset": corpus.dataset})
        builder = _IndexBuilder(config.index, *_cached_index_file(cache_root, entry, config.index,
                                                                   config.compression), compression,
                                _calibration_file(cache_root, entry, config.compression))
        _from_cache(entry, builder, corpus)
    encode_seconds = 0.0 if corpus.cached else _encode_missing(encoder, docs, config, entry, builder, fingerprint,
                                                               chunk_size, corpus.workers)
    index = builder.finish(entry is not None and entry.writable)
    # The corpus stage interleaves reading, encoding and indexing; split its time three ways.
    corpus_seconds = time.perf_counter() - started
    clock.add("encode", encode_seconds)
    clock.add("index", builder.seconds)
    clock.add("load", corpus_seconds - encode_seconds - builder.seconds)
    if index is None:
        return Run.from_scores({}), {}
    with clock.stage("encode"):
        query_vectors = config.compression.prepare(
            _query_vectors(encoder, queries, cache_root, fingerprint, corpus.dataset), encoder.normalize)
    return _search(index, encoder.name, queries, query_vectors, depth, top_k,
                   config.index.kind != "flat" or config.compression.compressed, clock)


def _cached_index_file(cache_root: Path, entry, spec: IndexSpec,
                       compression: CompressionSpec) -> tuple[Path | None, bool]:
    """Where an approximate index over this entry (truncated as `compression` says) is cached, and whether it
    can be used now."""
    if spec.kind == "flat":
        return None, False
    import faiss

    truncation = {"truncate_dim": compression.truncate_dim} if compression.truncate_dim is not None else {}
    path = cache_root / "indexes" / (content_key(
        {"embeddings": entry.key, "index": asdict(spec), "faiss": faiss.__version__, **truncation}) + ".faiss")
    return path, entry.complete and path.is_file()


def _calibration_file(cache_root: Path, entry, compression: CompressionSpec) -> Path | None:
    """Where the int8/uint8 ranges of this entry's corpus vectors (truncated as `compression` says) are kept."""
    if compression.embedding_precision not in ("int8", "uint8"):
        return None
    return cache_root / "indexes" / (content_key({"embeddings": entry.key, "calibration": "minmax",
                                                  "truncate_dim": compression.truncate_dim}) + ".ranges.npz")


def _from_cache(entry, builder: _IndexBuilder, corpus: _CorpusState) -> None:
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


def _encode_missing(encoder: Encoder, docs: Iterator[Doc], config: EvaluateConfig, entry, builder: _IndexBuilder,
                    fingerprint, chunk_size: int, workers: list[str] | None = None) -> float:
    """Encode what the cache lacks — here, or on Ray / several devices — into the entry and the index.

    Returns:
        Seconds spent encoding (or waiting for the workers).
    """
    from harness.retrieval.index import TRAINED

    devices = (config.device or "cpu").split(",")
    seconds = 0.0
    n_chunks = 0
    if config.engine == "ray" or len(devices) > 1:
        if entry is None:
            raise HarnessError(f"{'the ray engine' if config.engine == 'ray' else 'several devices'} need a model "
                               "with a weight fingerprint, for the embedding cache the workers write into")
        resumable = entry.resumable(chunk_size)
        entry.start(chunk_size)
        chunks = _fan_out(config, fingerprint, docs, entry, chunk_size, devices,
                          cached=lambda i, ids: resumable and entry.chunk_ids(i) == ids, workers=workers)
    else:
        if entry is not None:
            done = entry.done_chunks(chunk_size)
            entry.start(chunk_size)  # drops a partial entry of another chunk size: its pieces cannot fit
            if done:
                logger.info("resuming: %d chunk(s) of %d documents already encoded in the cache", done, chunk_size)
        chunks = encode_corpus(encoder, docs, chunk_size=chunk_size, batch_size=config.encoder.batch_size,
                               progress=config.progress, store=entry, checkpoint_seconds=config.checkpoint_seconds,
                               token_budget=config.token_budget)
    # A trained index keeps every vector until it is built (and for exact search after): memory maps of
    # the cache's chunk files then, so that memory does not grow with the corpus.
    keep_mapped = config.index.kind in TRAINED or config.compression.compressed
    local = config.engine != "ray" and len(devices) == 1
    for n_chunks, (doc_ids, vectors, spent) in enumerate(chunks, start=1):
        seconds += spent
        # Fanned-out chunks are in the cache already; a local chunk with spent == 0 came whole from it.
        if local and entry is not None and (spent or not entry.has_chunk(n_chunks - 1)):
            entry.write_chunk(n_chunks - 1, doc_ids, vectors)
            if keep_mapped and entry.writable:
                vectors = _mapped(entry, n_chunks - 1, vectors)
        builder.add(doc_ids, vectors)
    if entry is not None and builder.index is not None:
        entry.finish(n_chunks, len(builder.index), builder.index.dimension)
    return seconds


def _search(index, name: str, queries: list[Query], query_vectors, depth: int, top_k: int, approximate: bool,
            clock: Clock) -> tuple[Run, dict[str, float]]:
    """Search the index; an approximate one is also measured against exact search on the same vectors."""
    from harness.retrieval.index import recall_of_exact

    query_ids = [query.query_id for query in queries]
    with clock.stage("search"):
        run = index.search(query_ids, query_vectors, depth, name=name)
    quality: dict[str, float] = index.facts()
    if approximate:
        with clock.stage("exact_search"):
            cut = min(top_k, len(index))
            reference = index.exact_search(query_ids, query_vectors, depth)
            for k in sorted({min(10, cut), cut}):
                quality[f"recall_of_exact@{k}"] = recall_of_exact(run, reference, k)
    return run, quality


def _fan_out(config: EvaluateConfig, fingerprint, docs: Iterator[Doc], entry, chunk_size: int, devices: list[str],
             cached, workers: list[str] | None = None) -> Iterator:
    """The engines that encode chunks in other processes: Ray actors, or one local worker per device."""
    from functools import partial

    from harness.engines.shards import EncodeJob

    job = EncodeJob(partial(load_model, config), fingerprint, entry, chunk_size, config.encoder.batch_size,
                    config.checkpoint_seconds, config.token_budget, workers if workers is not None else [])
    if config.engine == "ray":
        from harness.engines.ray_engine import encode_corpus_ray

        return encode_corpus_ray(job, docs, config.ray, progress=config.progress, cached=cached)
    from harness.engines.multi_device import encode_corpus_devices

    return encode_corpus_devices(job, docs, devices, progress=config.progress, cached=cached)


def _mapped(entry, index: int, vectors):
    """The chunk just written, memory-mapped from the cache (or the in-memory vectors if unreadable)."""
    try:
        _, mapped = entry.read_chunk(index, mmap=True)
    except CacheCorrupt:
        return vectors
    return mapped if mapped.shape == vectors.shape else vectors


def _load_index(path: Path, spec: IndexSpec, doc_ids, chunks: list):
    """The cached approximate index over these chunks, or (damaged) one rebuilt from them."""
    from harness.retrieval.index import TRAINED, VectorIndex

    dimension = chunks[0].shape[1]
    try:
        index = VectorIndex.load(path, dimension, spec, doc_ids)
        if spec.kind in TRAINED:
            index.attach_vectors(chunks)  # for exact search
        logger.info("%s index from the cache (%s)", spec.kind, path)
        return index
    except ValueError as exc:
        logger.warning("damaged cached index, rebuilding: %s", exc)
        rebuilt = VectorIndex(dimension, spec)
        start = 0
        for vectors in chunks:
            rebuilt.add(doc_ids[start:start + len(vectors)], vectors)
            start += len(vectors)
        rebuilt.build()
        return rebuilt


def _query_vectors(encoder: Encoder, queries: list[Query], cache_root: Path | None, fingerprint, dataset: str):
    """Encode the queries, or load them from the cache (keyed by the exact ids and texts)."""
    texts = [query.text for query in queries]
    if cache_root is None:
        return encoder.encode_queries(texts)
    texts_sha = hashlib.sha256(json.dumps([[q.query_id, q.text] for q in queries]).encode()).hexdigest()
    entry = embedding_entry(cache_root, {"kind": "queries", "model": fingerprint, "dtype": "float32",
                                         "queries_sha256": texts_sha}, {"dataset": dataset})
    if entry.complete:
        try:
            (ids, vectors), = list(entry.chunks())
            if ids == [query.query_id for query in queries]:
                return vectors
        except (CacheCorrupt, ValueError) as exc:
            logger.warning("damaged cache entry, recomputing: %s", exc)
        entry.drop()
    vectors = encoder.encode_queries(texts)
    entry.start(len(texts))
    entry.write_chunk(0, [query.query_id for query in queries], vectors)
    entry.finish(1, len(texts), vectors.shape[1])
    return vectors


def _set_threads(threads: int) -> None:
    """Set torch's and faiss's thread pools (both default to every core)."""
    if threads <= 0:
        raise HarnessError(f"{setting('threads')} must be positive, got {threads}")
    import faiss
    import torch

    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(threads)


def demo_folder() -> Path:
    """The bundled lesson eval set, a BEIR folder inside the package."""
    return Path(str(importlib.resources.files("harness").joinpath("data/demo")))


def run_demo(encoder: Encoder | None = None, model: str = DEFAULT_MODEL, progress: bool = False) -> Outcome:
    """Score the bundled lesson eval set (15 products, 5 queries) at k = 3 and 10.

    Nothing is written; the Outcome holds the per-query values and the run.
    """
    config = EvaluateConfig(
        dataset_path=demo_folder(), split="test", model=model, k_values=(3, 10), top_k=10,
        output_dir=None, dataset_name="demo", progress=progress, cache=False,
    )
    return evaluate_dataset(config, encoder=encoder)
