"""What one evaluation is asked to do (`EvaluateConfig`), and what follows from it alone: the depth, the
recorded model name, the device and the loaded model."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from harness.engines.ray_engine import RaySpec
from harness.io.cache import cache_dir
from harness.pipeline.systems.registry import DEFAULT_DEPTH, system_of  # noqa: F401 - DEFAULT_DEPTH importable here
from harness.retrieval.compress import CompressionSpec
from harness.retrieval.devices import DeviceSpec
from harness.retrieval.encode import DEFAULT_CHECKPOINT_SECONDS, Encoder
from harness.retrieval.endpoint import EndpointSpec
from harness.retrieval.index import IndexSpec
from harness.retrieval.index.passages import PassageSpec
from harness.retrieval.models import DEFAULT_MODEL
from harness.retrieval.rerank import CandidateSpec, RerankSpec
from harness.runtimes.calibration import Calibration
from harness.runtimes.registry import TORCH
from harness.runtimes.spec import EncoderSpec

logger = logging.getLogger(__name__)

DEFAULT_K_VALUES = (1, 3, 5, 10, 100)
# Every result stores every metric family at these cutoffs (up to its depth), whatever was asked to
# be shown, so that results of one dataset stay comparable and a table never loses a column.
STANDARD_K = (1, 3, 5, 10, 20, 100, 1000)


@dataclass(frozen=True)
class EvaluateConfig:
    """What to evaluate and how.

    Attributes:
        dataset_path: A BEIR folder, or a registry name (``scifact``, ``cqadupstack/android``)
            resolved in `data_dir` and downloaded when missing (unless `download` is False).
        split: The qrels split to score.
        model: The system (`harness.pipeline.systems`): a sentence-transformers name or local folder, ``bm25``,
            ``hash:N``, ``openai:MODEL``, a sparse encoder, ``run:FILE``, ``FIRST >> CROSS_ENCODER@DEPTH`` or a fusion
            ``METHOD(SYSTEM, SYSTEM, ...)`` (ignored with `run_path`).
        k_values: Cutoffs shown; every metric family is stored at each of them and at every
            `STANDARD_K` cutoff up to the depth.
        top_k: Documents retrieved and kept per query; None means max(100, largest k).
        encoder: How the model turns texts into vectors (`harness.runtimes.spec.EncoderSpec`: truncation,
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
        threads: torch, faiss, ONNX Runtime and OpenVINO threads; None leaves their defaults (all cores).
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
        sparse_backend: The runtime a learned sparse encoder given as `model` runs on (``--sparse-backend``:
            `harness.runtimes.heads`); torch by default whatever `encoder.backend` says, so a grid can run its
            bi-encoders and its sparse encoders on different runtimes.
        name: The label the result carries in every report, table and plot; None means the model
            name, followed by the variant's tokens for a non-default configuration.
        allow_unknown_docs: Score an external run that names documents absent from the corpus
            (as non-relevant, noted in the result) instead of refusing it.
        candidates: The one candidate set of every rerank written ``>> CROSS_ENCODER`` (``--candidates``, ``--depth``:
            `harness.pipeline.candidates`); its file's name, and so the reranks' identity, carries its digest.
        memory_budget: Bytes this process may hold; a flat index whose vectors would not fit is searched
            streamed from the embedding cache instead (`harness.retrieval.streamed`: the same run). None means
            half of the memory available when the search is planned. Not part of the configuration.
        passages: Split each document into token windows of the model's tokenizer and score a document by its
            passages (`harness.retrieval.index.passages.PassageSpec`: window, stride, maxp/firstp/sump); None: each
            document is one text, truncated by the model. Part of the configuration only when set.
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
    sparse_backend: str = TORCH
    name: str | None = None
    allow_unknown_docs: bool = False
    memory_budget: int | None = None
    passages: PassageSpec | None = None
    candidates: CandidateSpec | None = None
    # Set by the dense stage for a calibrated backend (the corpus's own sample); not a setting of its own: the
    # sample follows from the corpus, and its hash enters the encoder's fingerprint and the result's record.
    calibration: Calibration | None = field(default=None, repr=False, compare=False)


def stored_cutoffs(depth: int, k_values: Iterable[int] = ()) -> list[int]:
    """The cutoffs a result stores, by one rule for every system: each `STANDARD_K` cutoff up to the depth it
    was asked to keep (``top_k``, the rerank depth, a fusion's ``depth``) and each cutoff asked for, whatever its
    ranking holds. A cutoff deeper than a query's ranking is computed as trec_eval computes it (Recall@100 of a
    7-document ranking): how many documents a system happened to return never removes a metric."""
    return sorted({k for k in STANDARD_K if k <= depth} | set(k_values))


def retrieval_depth(config: EvaluateConfig) -> int:
    """Documents kept per query: the rerank depth when reranking, a fusion's depth, else `top_k`, else the larger
    of 100 and the largest cutoff asked for (`harness.pipeline.systems.System.depth`)."""
    return system_of(config).depth(config.top_k, config.k_values)


def run_model_name(config: EvaluateConfig) -> str:
    """The model name a result of `config` is recorded under, known before anything loads."""
    return system_of(config).model_name


def first_device(config: EvaluateConfig) -> str:
    """The device a model of `config` loads on: the first of its devices, ``auto`` resolved now."""
    device = (config.device or "cpu").split(",")[0]
    return DeviceSpec(device, config.encoder.precision).resolve()[0] if device == "auto" else device


def load_model(config: EvaluateConfig, device: str | None = None) -> Encoder:
    """Load `config.model` with `config.encoder`'s settings, on `device` (default: `first_device`); an
    ``openai:MODEL`` is its service (`harness.retrieval.endpoint`), which remembers its identity in the cache."""
    if system_of(config).stage.kind.service:
        from harness.retrieval.endpoint import EndpointEncoder

        spec = config.encoder
        return EndpointEncoder(
            config.model,
            config.endpoint,
            spec.normalize,
            spec.query_prefix,
            spec.doc_prefix,
            cache_dir(config.cache_dir) / "models" if config.cache else None,
        )
    return config.encoder.load(
        config.model,
        device or first_device(config),
        cache_dir(config.cache_dir),
        calibration=config.calibration,
        threads=config.threads,
    )


REGISTRY_PROMPTS = "model registry"  # EncoderSpec.prompt_source of prefixes taken from `harness.datasets.prompts`


def with_model_prompts(config: EvaluateConfig) -> EvaluateConfig:
    """`config` with the model registry's prompts as its prefixes (`harness.datasets.prompts`), when the model
    has a row with prompts, neither prefix is given and the model's own sentence-transformers configuration
    defines no prompts of its own (those win, as in MTEB); otherwise `config` itself.

    The prompts become ``query_prefix``/``doc_prefix``, so the configuration hash is the one the same prefixes
    given by hand have; ``prompt_source`` says where they came from."""
    from harness.datasets.prompts import FILE, prompts_for
    from harness.retrieval.models import model_folder

    spec = config.encoder
    if not system_of(config).stage.kind.weights:  # no model registry row for a run, BM25, hash:N, a service
        return config
    row = prompts_for(config.model)
    if row is None:
        return config
    if row.normalize != spec.normalize:
        _note_similarity(config.model, row.normalize, spec.normalize)
    if not row.prompted or spec.query_prefix or spec.doc_prefix or spec.prompt_source:
        return config
    own = _own_prompts(model_folder(config.model))
    if own:
        logger.info("%s: prompts from its own sentence-transformers config (%s)", config.model, ", ".join(own))
        return config
    # A warning, so that it shows without -v: the texts encoded are not the ones given.
    logger.warning(
        "%s: prompts from the model registry (%s): query %r, document %r; --query-prefix/--doc-prefix override them",
        config.model,
        FILE,
        row.query_prompt,
        row.doc_prompt,
    )
    return replace(
        config,
        encoder=replace(spec, query_prefix=row.query_prompt, doc_prefix=row.doc_prompt, prompt_source=REGISTRY_PROMPTS),
    )


@functools.lru_cache(maxsize=None)
def _note_similarity(model: str, published: bool, used: bool) -> None:
    """Say once per process that `model` is scored with another similarity than its published numbers."""
    from harness.datasets.prompts import FILE

    def name(normalized: bool) -> str:
        return "normalized vectors (cosine)" if normalized else "raw dot products"

    logger.warning(
        "%s: its published scores use %s (%s); this run uses %s (--similarity/--normalize)",
        model,
        name(published),
        FILE,
        name(used),
    )


def _own_prompts(folder: str) -> list[str]:
    """The names of the non-empty prompts a local model folder's sentence-transformers config defines."""
    try:
        declared = json.loads((Path(folder) / "config_sentence_transformers.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    prompts = declared.get("prompts") if isinstance(declared, dict) else None
    return [name for name, text in prompts.items() if text] if isinstance(prompts, dict) else []
