"""Every option more than one command takes, declared once here (after pip's `cmdoptions`), and the named groups
the commands compose: data, model, endpoint, index, engine, output; `SCORED_DATA` and `SCORED_OUTPUT` are what
only a scored run takes (retrieve has no qrels). A group carries the title of its --help section; a command that
needs another default or help of an option says so with `Option.but`, in its own decorator. Option values come
from the library's registries (runtimes, index kinds, precisions, engines) through `harness.api.choices`, read when a
command that takes the option is built (`Deferred`), never when this module loads. Also the parameter callbacks, and
the printed outcome of a run."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import click

from harness.cli.group import as_flags
from harness.cli.optionkit import Deferred, Option, OptionGroup, Sectioned, compose  # noqa: F401 - the families' kit
from harness.errors import HarnessError

logger = logging.getLogger("harness")


def _choices():
    from harness.api import choices

    return choices


def _choice(read) -> Deferred:
    """A click.Choice of the names `read(harness.api.choices)` gives, read when a command is built."""
    return Deferred(lambda: click.Choice(read(_choices())))


def _default(read) -> Deferred:
    """A default `read(harness.api.choices)` gives, read when a command is built."""
    return Deferred(lambda: read(_choices()))


def k_values_callback(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...]:
    """The cutoffs of --k (``1,3,10``), checked."""
    from harness.api.scoring import parse_k_values

    try:
        return tuple(parse_k_values(value))
    except HarnessError as exc:
        raise click.BadParameter(as_flags(str(exc))) from None


def label_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A result label (--name), checked."""
    from harness.api.results import check_label

    try:
        return None if value is None else check_label(value)
    except HarnessError as exc:
        raise click.BadParameter(str(exc)) from None


def metric_callback(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A metric name (``nDCG@10``) of a saved result, checked and in its canonical spelling."""
    from harness.api import result_metric

    try:
        return result_metric(value, whole_run="beir-harness score")  # `map`, `ndcg`: results store them at cutoffs
    except HarnessError as exc:
        raise click.BadParameter(str(exc)) from None


def _size(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """--memory-budget's bytes."""
    from harness.api.machine import parse_size

    if value is None:
        return None
    try:
        size = parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param=param) from None
    if size <= 0:
        raise click.BadParameter(f"{value!r} must be positive", param=param)
    return size


def show_result(result, as_json: bool) -> None:
    """The result as JSON or as the metrics table on stdout; where it was written on stderr."""
    from harness.api.results import cost_summary, format_metrics_table

    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2, ensure_ascii=False))
    else:
        click.echo(format_metrics_table(result))
    summary = cost_summary(result)
    if summary:
        logger.info(summary)
    if result.path is not None:
        logger.info("wrote %s and %s", result.path, result.run_path)


# Data: where the data comes from: the data dir, downloads, the self-hit policy.
DATA_DIR = Option(
    "--data-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Where registry datasets live [default: $BEIR_HARNESS_DATA_DIR or ./datasets].",
)
DOWNLOAD = Option(
    "--download/--no-download",
    default=True,
    show_default=True,
    help="Download a registry dataset that is not installed yet.",
)
BASE_URL = Option(
    "--base-url",
    default=None,
    metavar="URL",
    help="Download mirror [default: $BEIR_HARNESS_MIRROR or BEIR's server].",
)
IGNORE_IDENTICAL_IDS = Option(
    "--ignore-identical-ids/--keep-identical-ids",
    default=None,
    help="Drop retrieved documents whose id equals the query id [default: the registry's "
    "policy for a known BEIR dataset (e.g. arguana, quora), else keep].",
)
DATA = OptionGroup("Data", DATA_DIR, DOWNLOAD, BASE_URL, IGNORE_IDENTICAL_IDS)

# Data: what a scored run is scored on: the qrels split.
SPLIT = Option("--split", default="test", show_default=True, help="Qrels split: qrels/<split>.tsv.")
SCORED_DATA = OptionGroup("Data", SPLIT)

# Model: how the texts are encoded, and reranked.
BATCH_SIZE = Option(
    "--batch-size", default=32, show_default=True, type=click.IntRange(min=1), help="Texts per forward pass."
)
MAX_SEQ_LENGTH = Option(
    "--max-seq-length",
    type=click.IntRange(min=1),
    default=None,
    help="Truncate texts to this many tokens [default: the model's].",
)
QUERY_PREFIX = Option(
    "--query-prefix",
    default=None,
    help="Text prepended to each query, e.g. 'query: ' for E5 models [default: the model's own "
    "prompts, else the model registry's; either flag, even '', turns the registry off].",
)
DOC_PREFIX = Option("--doc-prefix", default=None, help="Text prepended to each document, e.g. 'passage: '.")
SIMILARITY = Option(
    "--similarity",
    type=click.Choice(["cosine", "dot"]),
    default="cosine",
    show_default=True,
    help="cosine (normalized vectors) or dot (raw vectors); inner-product index either way.",
)
NORMALIZE = Option(
    "--normalize/--no-normalize",
    default=None,
    help="L2-normalize embeddings [default: yes for cosine, no for dot].",
)
BACKEND = Option(
    "--backend",
    type=_choice(lambda api: api.backends()),
    default=_default(lambda api: api.default_backend()),
    envvar=_default(lambda api: api.backend_env()),
    show_default=True,
    show_envvar=True,
    help="Encoder runtime: torch (the reference), ONNX Runtime fp32 / int8 ([onnx] extra), OpenVINO at the CPU's "
    "precision / static int8 prepared once per machine ([openvino] extra); auto: the fastest installed one within "
    "a quality bound of torch fp32, from the CPU class table confirmed on one batch (a class not in the table: a "
    "probe, once per host and model); the result records the runtime chosen (docs/evaluate.md).",
)
PROBE = Option("--probe", is_flag=True, help="With --backend auto: probe every runtime here, not the CPU class table.")
DEVICE = Option(
    "--device",
    default=None,
    metavar="DEVICE",
    help="auto, cpu, cuda, cuda:N, cuda:all, mps, or a list such as cuda:0,cuda:1 (one worker process "
    "per device) [default: $BEIR_HARNESS_DEVICE, else auto: CUDA, else MPS, else CPU].",
)
PRECISION = Option(
    "--precision",
    type=_choice(lambda api: api.model_precisions()),
    default="fp32",
    show_default=True,
    help="Model weights and activations; stored vectors are float32. fp16 needs a GPU.",
)
TRUST_REMOTE_CODE = Option(
    "--trust-remote-code", is_flag=True, help="Let the model run code from its repository (off by default)."
)
RERANK_MODEL = Option(
    "--rerank",
    "rerank_model",
    default=None,
    metavar="CROSS_ENCODER",
    help="Rerank the first stage's top documents with this sentence-transformers CrossEncoder (name or folder).",
)
RERANK_DEPTH = Option(
    "--rerank-depth",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="With --rerank: first-stage documents reranked per query; the result keeps exactly these.",
)
RERANK_BATCH_SIZE = Option(
    "--rerank-batch-size",
    type=click.IntRange(min=1),
    default=32,
    show_default=True,
    help="With --rerank: pairs per forward pass.",
)
RERANK_MAX_LENGTH = Option(
    "--rerank-max-length",
    type=click.IntRange(min=1),
    default=None,
    help="With --rerank: truncate each (query, document) pair to this many tokens [default: the model's].",
)
RERANK_BACKEND = Option(
    "--rerank-backend",
    type=_choice(lambda api: api.backends()),
    default=_default(lambda api: api.reference_backend()),
    show_default=True,
    help="With --rerank: the cross-encoder's runtime, as --backend's (its transformer and head exported; exported "
    "ones run on the CPU in fp32 or their own precision; openvino-int8 calibrates on the pairs being reranked; auto "
    "probes on them). Not --backend's value: a bi-encoder's runtime says nothing of a reranker's.",
)
SPARSE_BACKEND = Option(
    "--sparse-backend",
    type=_choice(lambda api: api.backends()),
    default=_default(lambda api: api.reference_backend()),
    show_default=True,
    help="A learned sparse encoder's (SPLADE's) runtime, as --backend's (openvino-int8 calibrates on the corpus; "
    "auto probes on it), so a grid runs its bi-encoders and its sparse encoders each on their own.",
)
MODEL = OptionGroup(
    "Model",
    BATCH_SIZE,
    MAX_SEQ_LENGTH,
    QUERY_PREFIX,
    DOC_PREFIX,
    SIMILARITY,
    NORMALIZE,
    BACKEND,
    PROBE,
    DEVICE,
    PRECISION,
    TRUST_REMOTE_CODE,
    RERANK_MODEL,
    RERANK_DEPTH,
    RERANK_BATCH_SIZE,
    RERANK_MAX_LENGTH,
    RERANK_BACKEND,
    SPARSE_BACKEND,
)

# Endpoint: how an OpenAI-compatible service is called (evaluate's embeddings, judge's chat model).
API_KEY_ENV = Option(
    "--api-key-env",
    default="OPENAI_API_KEY",
    show_default=True,
    metavar="NAME",
    help="With --endpoint: the environment variable holding the API key (never written anywhere).",
)
CONCURRENCY = Option(
    "--concurrency", type=int, default=4, show_default=True, help="With --endpoint: requests in flight."
)
ENDPOINT_TIMEOUT = Option(
    "--endpoint-timeout",
    type=float,
    default=60.0,
    show_default=True,
    help="With --endpoint: seconds to wait for one answer (then retried).",
)
PRICE_PER_1M_TOKENS = Option(
    "--price-per-1m-tokens",
    type=float,
    default=None,
    metavar="PRICE",
    help="With --endpoint: record the cost of the tokens the service reports.",
)
SERVICE = OptionGroup("Endpoint", API_KEY_ENV, CONCURRENCY, ENDPOINT_TIMEOUT, PRICE_PER_1M_TOKENS)
ENDPOINT_URL = Option(
    "--endpoint",
    default=None,
    metavar="URL",
    help="With --model openai:MODEL: the OpenAI-compatible service, e.g. https://api.openai.com/v1 or "
    "http://localhost:8080/v1 [default: $BEIR_HARNESS_ENDPOINT].",
)
ENDPOINT_BATCH_SIZE = Option(
    "--endpoint-batch-size",
    type=int,
    default=64,
    show_default=True,
    help="With --endpoint: most texts per request (and at most about 100k tokens).",
)
ENDPOINT = SERVICE.plus(ENDPOINT_URL, ENDPOINT_BATCH_SIZE)  # evaluate's embedding service

# Retrieval and index: how the documents are searched: depth, FAISS index, stored vectors.
TOP_K = Option(
    "--top-k",
    type=click.IntRange(min=1),
    default=None,
    help="Documents retrieved per query [default: 100 or the largest k].",
)
INDEX_KIND = Option(
    "--index",
    "index_kind",
    settings=("kind",),
    type=_choice(lambda api: api.index_kinds()),
    default="flat",
    show_default=True,
    help="FAISS index: flat is exact; the others are approximate and record their recall of flat.",
)
HNSW_M = Option("--hnsw-m", type=int, default=32, show_default=True, help="HNSW links per node.")
EF_CONSTRUCTION = Option("--ef-construction", type=int, default=200, show_default=True, help="HNSW build beam width.")
EF_SEARCH = Option("--ef-search", type=int, default=128, show_default=True, help="HNSW search beam width.")
NLIST = Option("--nlist", type=int, default=None, help="IVF cells [default: min(4*sqrt(n), n/39)].")
NPROBE = Option("--nprobe", type=int, default=16, show_default=True, help="IVF cells searched per query.")
PQ_M = Option("--pq-m", type=int, default=48, show_default=True, help="PQ sub-vectors (must divide the dimension).")
PQ_NBITS = Option("--pq-nbits", type=int, default=8, show_default=True, help="Bits per PQ code.")
TRUNCATE_DIM = Option(
    "--truncate-dim",
    type=int,
    default=None,
    metavar="D",
    help="Keep the first D dimensions of the stored vectors (Matryoshka), renormalized for cosine; "
    "derived from the cached float32 vectors, never a new encode.",
)
EMBEDDING_PRECISION = Option(
    "--embedding-precision",
    type=_choice(lambda api: api.embedding_precisions()),
    default="float32",
    show_default=True,
    help="Store and search the vectors as int8/uint8 (ranges calibrated on the corpus) or binary/ubinary "
    "(Hamming, FAISS's binary index).",
)
RESCORE_MULTIPLIER = Option(
    "--rescore-multiplier",
    type=int,
    default=_default(lambda api: api.default_rescore_multiplier()),
    show_default=True,
    metavar="M",
    help="With a compressed precision: retrieve M x depth candidates, rescore them with float32 vectors; "
    "0 keeps the raw compressed ranking.",
)
PASSAGES = Option(
    "--passages",
    metavar="WINDOW[:STRIDE]",
    help="Score each document by its passages of WINDOW tokens of the model's tokenizer, each STRIDE after the last "
    "[default: WINDOW], the title prepended to each; e.g. 128 or 256:128 (docs/evaluate.md).",
)
PASSAGE_SCORE = Option(
    "--passage-score",
    type=_choice(lambda api: api.passage_scores()),
    help="With --passages: maxp [default], firstp, sump.",
)
INDEX = OptionGroup(
    "Retrieval and index",
    TOP_K,
    PASSAGES,
    PASSAGE_SCORE,
    INDEX_KIND,
    HNSW_M,
    EF_CONSTRUCTION,
    EF_SEARCH,
    NLIST,
    NPROBE,
    PQ_M,
    PQ_NBITS,
    TRUNCATE_DIM,
    EMBEDDING_PRECISION,
    RESCORE_MULTIPLIER,
)

# Engine: where and how the work runs: the cache, threads, Ray, budgets.
CACHE_DIR = Option(
    "--cache-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="The cache (embeddings, reranker scores, LLM grades) [default: $BEIR_HARNESS_CACHE_DIR, else the user "
    "cache folder, ~/.cache/beir-harness on Linux].",
)
USE_CACHE = Option(
    "--cache/--no-cache",
    "use_cache",
    settings=("cache",),
    default=True,
    show_default=True,
    help="Reuse and store embeddings (content-addressed: model weights + corpus content).",
)
THREADS = Option(
    "--threads",
    type=click.IntRange(min=1),
    default=None,
    help="torch, faiss, ONNX Runtime and OpenVINO threads [default: all cores].",
)
ENGINE_NAME = Option(
    "--engine",
    type=_choice(lambda api: api.engines()),
    default="local",
    show_default=True,
    help="Where the corpus is encoded: this process, or a Ray cluster (pip install "
    "'beir-harness[ray]'; the cache dir must be on a filesystem every node mounts).",
)
RAY_ADDRESS = Option(
    "--ray-address",
    settings=("address",),
    default=None,
    metavar="ADDRESS",
    help="With --engine ray: a running cluster, e.g. auto, HOST:6379 or ray://HOST:10001 "
    "[default: $RAY_ADDRESS, else a new local cluster].",
)
RAY_LOCAL = Option(
    "--ray-local",
    settings=("local_cpus",),
    type=click.IntRange(min=1),
    default=None,
    metavar="CPUS",
    help="With --engine ray: start a private local Ray cluster with this many CPUs.",
)
SHARDS = Option(
    "--shards",
    type=click.IntRange(min=1),
    default=None,
    help="With --engine ray: cut the corpus into about this many shards [default: one per 16,384 documents].",
)
RAY_SEARCH = Option(
    "--ray-search",
    type=_choice(lambda api: api.search_places()),
    default="sharded",
    show_default=True,
    help="With --engine ray and a flat index: search on the workers, each over a shard of the cached "
    "vectors, merged here (the driver never holds the corpus vectors), or in one index here.",
)
TOKEN_BUDGET = Option(
    "--token-budget",
    type=click.IntRange(min=1),
    default=None,
    metavar="TOKENS",
    help="Batch documents by tokens (texts x longest text's tokens <= TOKENS: long texts in small "
    "batches, short ones in large) instead of --batch-size texts; for GPUs.",
)
CHECKPOINT_SECONDS = Option(
    "--checkpoint-seconds",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="Store what is encoded at least this often (seconds of encoding), so a killed run loses "
    "at most about this much work; 0 stores after every batch.",
)
RAY_GPUS_PER_WORKER = Option(
    "--ray-gpus-per-worker",
    settings=("gpus_per_worker",),
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="G",
    help="With --engine ray: GPUs each worker asks for (e.g. 1, or 0.5 to pack two per GPU); each "
    "encodes on the GPU Ray assigned it.",
)
CHUNK_SIZE = Option(
    "--chunk-size",
    type=click.IntRange(min=1),
    default=16384,
    hidden=True,
    help="Documents encoded and cached per chunk.",
)
MEMORY_BUDGET = Option(
    "--memory-budget",
    callback=_size,
    default=None,
    metavar="SIZE",
    help="Memory this run may hold (e.g. 3GB); a flat index that would not fit is "
    "searched streamed from the embedding cache, with the same results "
    "[default: half of the memory available].",
)
ENGINE = OptionGroup(
    "Engine",
    CACHE_DIR,
    USE_CACHE,
    THREADS,
    ENGINE_NAME,
    RAY_ADDRESS,
    RAY_LOCAL,
    SHARDS,
    RAY_SEARCH,
    TOKEN_BUDGET,
    CHECKPOINT_SECONDS,
    RAY_GPUS_PER_WORKER,
    CHUNK_SIZE,
    MEMORY_BUDGET,
)

# Output: what a scored run shows and where its result goes.
K_VALUES = Option(
    "--k",
    "k_values",
    default="1,3,5,10,100",
    show_default=True,
    callback=k_values_callback,
    help="Comma-separated cutoffs shown; every metric (nDCG, MAP, Recall, P, MRR, Success, Judged) is stored at each and at the standard cutoffs.",
)
OUTPUT_DIR = Option(
    "--output-dir",
    type=click.Path(path_type=Path),
    default=Path("results"),
    show_default=True,
    help="Results go to <output-dir>/<dataset>/<model>/<split>[.<variant>].json and .run.trec; "
    "each configuration has its own file.",
)
SCORED_OUTPUT = OptionGroup("Output", K_VALUES, OUTPUT_DIR)

# Output: what the result is called.
NAME = Option(
    "--name",
    default=None,
    metavar="LABEL",
    callback=label_callback,
    help="Label of the result in every report, table and plot [default: the model, plus the non-default settings].",
)
OUTPUT = OptionGroup("Output", NAME)

# Options of several commands outside the groups, each declared once; a command's own help or default is its
# `but` of the declaration.
JSON = Option("--json", "as_json", is_flag=True, help="Print the result JSON to stdout instead of the table.")
MODEL_NAME = Option(
    "--model",
    default=_default(lambda api: api.default_model()),
    show_default=True,
    help="sentence-transformers model name or local model folder.",
)
SYSTEMS = Option(
    "--systems",
    default=None,
    metavar="SYSTEM,...",
    help="Systems to pool, comma-separated, written as for `bench --systems`: models retrieved now (bm25, "
    "all-MiniLM-L6-v2, ...), FIRST >> CROSS_ENCODER@DEPTH, fusions (rrf(bm25, all-MiniLM-L6-v2), "
    "wsum(a, b, weights=0.3:0.7)), each optionally LABEL=SYSTEM; or with --runs the runs to take (by "
    "tag or file name) and fusions of them. Every one is checked before anything is retrieved.",
)
METRIC = Option(
    "--metric", default="nDCG@10", show_default=True, callback=metric_callback, help="Metric to rank queries by."
)
OUT = Option(
    "--out",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Write the table here (atomically) instead of stdout.",
)
RUN = Option(
    "--run",
    "run_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Score this run file instead of retrieving: TREC (qid Q0 docid rank score tag), MS MARCO "
    "(qid docid rank) or JSON ({qid: {docid: score}}), told apart by their content.",
)
QUERIES = Option(
    "--queries", type=click.Path(path_type=Path, dir_okay=False), default=None, help="Queries, same formats."
)
FORCE = Option("--force", is_flag=True, help="Redo cells whose result already exists with the same settings.")
DEPTH = Option("--depth", type=click.IntRange(min=1), default=5, show_default=True, help="Retrieved documents shown.")
SEED = Option("--seed", type=int, default=0, show_default=True, help="Randomization-test seed.")
DIGITS = Option("--digits", type=click.IntRange(0, 10), default=4, show_default=True, help="Decimals when rendering.")
TOLERANCE = Option(
    "--tolerance",
    type=float,
    default=1e-4,
    show_default=True,
    help="Largest |ours - BEIR| called agreement; exit 1 above it.",
)
WEIGHTS = Option(
    "--weights",
    type=click.Choice(["none", "linear", "quadratic"]),
    default="linear",
    show_default=True,
    help="Cohen's κ weighting.",
)

RUNS = Option(
    "--runs",
    "run_files",
    multiple=True,
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    metavar="FILE",
    help="A system's run (TREC, MS MARCO, JSON) or result file. Repeatable.",
)
POOL_DIR = Option(
    "--pool",
    "pool_dir",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    default=None,
    metavar="POOL_DIR",
    help="A pool folder made by `beir-harness pool`.",
)
ROUNDS = Option(
    "--rounds", type=click.IntRange(min=1), default=10_000, show_default=True, help="Randomization-test rounds."
)
DRY_RUN = Option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")

# The names the families imported these by before the groups.
data_dir_option, cache_dir_option = DATA_DIR, CACHE_DIR
