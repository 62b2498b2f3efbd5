"""What several command families share: the option sets of evaluate, retrieve and bench, the parameter
callbacks, the sectioned --help, and the printed outcome of a run."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import click

from harness.cli.group import as_flags
from harness.errors import HarnessError
from harness.retrieval.compress import DEFAULT_RESCORE_MULTIPLIER, PRECISIONS
from harness.retrieval.index import INDEX_KINDS
from harness.runtimes.registry import CHOICES, TORCH

logger = logging.getLogger("harness")


def k_values_callback(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...]:
    """The cutoffs of --k (``1,3,10``), checked."""
    from harness.api.commandline import parse_k_values

    try:
        return tuple(parse_k_values(value))
    except HarnessError as exc:
        raise click.BadParameter(as_flags(str(exc))) from None


# The sections of `evaluate --help` (and bench, retrieve): an option not listed goes under "Other".
_SECTIONS = {
    "Data": (
        "split",
        "data_dir",
        "download",
        "base_url",
        "ignore_identical_ids",
        "run_path",
        "allow_unknown_docs",
        "queries_path",
        "dataset_names",
    ),
    "Model": (
        "model",
        "models",
        "batch_size",
        "max_seq_length",
        "query_prefix",
        "doc_prefix",
        "similarity",
        "normalize",
        "backend",
        "device",
        "precision",
        "trust_remote_code",
        "rerank_model",
        "rerank_depth",
        "rerank_batch_size",
        "rerank_max_length",
        "endpoint",
        "api_key_env",
        "endpoint_batch_size",
        "concurrency",
        "endpoint_timeout",
        "price_per_1m_tokens",
    ),
    "Retrieval and index": (
        "top_k",
        "index_kind",
        "hnsw_m",
        "ef_construction",
        "ef_search",
        "nlist",
        "nprobe",
        "pq_m",
        "pq_nbits",
        "truncate_dim",
        "embedding_precision",
        "rescore_multiplier",
        "truncate_dims",
        "embedding_precisions",
        "rescore_multipliers",
    ),
    "Engine": (
        "engine",
        "ray_address",
        "ray_local",
        "shards",
        "ray_gpus_per_worker",
        "ray_search",
        "threads",
        "use_cache",
        "cache_dir",
        "chunk_size",
        "checkpoint_seconds",
        "token_budget",
        "memory_budget",
    ),
    "Output": ("k_values", "output_dir", "name", "as_json", "out", "metric", "force"),
}


class Sectioned(click.Command):
    """A command whose --help groups its options (Data, Model, Retrieval and index, Engine, Output)."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        section_of = {name: section for section, names in _SECTIONS.items() for name in names}
        rows: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx) if isinstance(param, click.Option) else None
            if record is not None:
                rows.setdefault(section_of.get(param.name, "Other"), []).append(record)
        for section in [*_SECTIONS, "Other"]:
            if rows.get(section):
                with formatter.section(section):
                    formatter.write_dl(rows[section])


# Options that several command families take, each declared here once.
data_dir_option = click.option(
    "--data-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Where registry datasets live [default: $BEIR_HARNESS_DATA_DIR or ./datasets].",
)
cache_dir_option = click.option(
    "--cache-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="The cache (embeddings, reranker scores, LLM grades) [default: $BEIR_HARNESS_CACHE_DIR, else the user "
    "cache folder, ~/.cache/beir-harness on Linux].",
)


def endpoint_options(service: str = "With --endpoint: ") -> list:
    """The options of an OpenAI-compatible service (`evaluate`'s embeddings, `judge`'s chat model), their help
    texts each starting with `service`."""

    def help(text: str) -> str:
        return (service + text)[0].upper() + (service + text)[1:]

    return [
        click.option(
            "--api-key-env",
            default="OPENAI_API_KEY",
            show_default=True,
            metavar="NAME",
            help=help("the environment variable holding the API key (never written anywhere)."),
        ),
        click.option("--concurrency", type=int, default=4, show_default=True, help=help("requests in flight.")),
        click.option(
            "--endpoint-timeout",
            type=float,
            default=60.0,
            show_default=True,
            help=help("seconds to wait for one answer (then retried)."),
        ),
        click.option(
            "--price-per-1m-tokens",
            type=float,
            default=None,
            metavar="PRICE",
            help=help("record the cost of the tokens the service reports."),
        ),
    ]


def compose(*options):
    """A decorator applying `options` (click option decorators, or lists of them) in the order given."""
    flat = [item for option in options for item in (option if isinstance(option, list) else [option])]

    def apply(command):
        for option in reversed(flat):
            command = option(command)
        return command

    return apply


# Options shared by `evaluate` and `bench`: how to retrieve and score.
_RUN_OPTIONS = [
    click.option("--split", default="test", show_default=True, help="Qrels split: qrels/<split>.tsv."),
    click.option(
        "--k",
        "k_values",
        default="1,3,5,10,100",
        show_default=True,
        callback=k_values_callback,
        help="Comma-separated cutoffs shown; every metric (nDCG, MAP, Recall, P, MRR, Success, Judged) is stored at each and at the standard cutoffs.",
    ),
    click.option(
        "--batch-size", default=32, show_default=True, type=click.IntRange(min=1), help="Texts per forward pass."
    ),
    click.option(
        "--top-k",
        type=click.IntRange(min=1),
        default=None,
        help="Documents retrieved per query [default: 100 or the largest k].",
    ),
    click.option(
        "--max-seq-length",
        type=click.IntRange(min=1),
        default=None,
        help="Truncate texts to this many tokens [default: the model's].",
    ),
    click.option(
        "--output-dir",
        type=click.Path(path_type=Path),
        default=Path("results"),
        show_default=True,
        help="Results go to <output-dir>/<dataset>/<model>/<split>[.<variant>].json and .run.trec; "
        "each configuration has its own file.",
    ),
    click.option(
        "--name",
        default=None,
        metavar="LABEL",
        callback=lambda ctx, param, value: label_callback(ctx, param, value),
        help="Label of the result in every report, table and plot [default: the model, plus the non-default settings].",
    ),
    data_dir_option,
    click.option(
        "--download/--no-download",
        default=True,
        show_default=True,
        help="Download a registry dataset that is not installed yet.",
    ),
    click.option(
        "--base-url",
        default=None,
        metavar="URL",
        help="Download mirror [default: $BEIR_HARNESS_MIRROR or BEIR's server].",
    ),
    cache_dir_option,
    click.option(
        "--cache/--no-cache",
        "use_cache",
        default=True,
        show_default=True,
        help="Reuse and store embeddings (content-addressed: model weights + corpus content).",
    ),
    click.option(
        "--threads",
        type=click.IntRange(min=1),
        default=None,
        help="torch, faiss, ONNX Runtime and OpenVINO threads [default: all cores].",
    ),
    click.option(
        "--ignore-identical-ids/--keep-identical-ids",
        default=None,
        help="Drop retrieved documents whose id equals the query id [default: the registry's "
        "policy for a known BEIR dataset (e.g. arguana, quora), else keep].",
    ),
    click.option(
        "--query-prefix",
        default=None,
        help="Text prepended to each query, e.g. 'query: ' for E5 models [default: the model's own "
        "prompts, else the model registry's; either flag, even '', turns the registry off].",
    ),
    click.option("--doc-prefix", default=None, help="Text prepended to each document, e.g. 'passage: '."),
    click.option(
        "--similarity",
        type=click.Choice(["cosine", "dot"]),
        default="cosine",
        show_default=True,
        help="cosine (normalized vectors) or dot (raw vectors); inner-product index either way.",
    ),
    click.option(
        "--normalize/--no-normalize",
        default=None,
        help="L2-normalize embeddings [default: yes for cosine, no for dot].",
    ),
    click.option(
        "--backend",
        type=click.Choice(CHOICES),
        default=TORCH,
        show_default=True,
        help="Encoder runtime: torch, ONNX Runtime fp32 / int8 (pip install 'beir-harness[onnx]'), or "
        "OpenVINO at the CPU's default precision / static int8 calibrated on the corpus "
        "(pip install 'beir-harness[openvino]'); auto: a short probe here picks the fastest installed "
        "one within a quality bound of torch fp32 (cached per host and model; docs/evaluate.md).",
    ),
    click.option(
        "--device",
        default=None,
        metavar="DEVICE",
        help="auto, cpu, cuda, cuda:N, cuda:all, mps, or a list such as cuda:0,cuda:1 (one worker process "
        "per device) [default: $BEIR_HARNESS_DEVICE, else auto: CUDA, else MPS, else CPU].",
    ),
    click.option(
        "--precision",
        type=click.Choice(["fp32", "fp16", "bf16"]),
        default="fp32",
        show_default=True,
        help="Model weights and activations; stored vectors are float32. fp16 needs a GPU.",
    ),
    click.option(
        "--trust-remote-code", is_flag=True, help="Let the model run code from its repository (off by default)."
    ),
    click.option(
        "--index",
        "index_kind",
        type=click.Choice(INDEX_KINDS),
        default="flat",
        show_default=True,
        help="FAISS index: flat is exact; the others are approximate and record their recall of flat.",
    ),
    click.option("--hnsw-m", type=int, default=32, show_default=True, help="HNSW links per node."),
    click.option("--ef-construction", type=int, default=200, show_default=True, help="HNSW build beam width."),
    click.option("--ef-search", type=int, default=128, show_default=True, help="HNSW search beam width."),
    click.option("--nlist", type=int, default=None, help="IVF cells [default: min(4*sqrt(n), n/39)]."),
    click.option("--nprobe", type=int, default=16, show_default=True, help="IVF cells searched per query."),
    click.option("--pq-m", type=int, default=48, show_default=True, help="PQ sub-vectors (must divide the dimension)."),
    click.option("--pq-nbits", type=int, default=8, show_default=True, help="Bits per PQ code."),
    click.option(
        "--endpoint",
        default=None,
        metavar="URL",
        help="With --model openai:MODEL: the OpenAI-compatible service, e.g. https://api.openai.com/v1 or "
        "http://localhost:8080/v1 [default: $BEIR_HARNESS_ENDPOINT].",
    ),
    click.option(
        "--endpoint-batch-size",
        type=int,
        default=64,
        show_default=True,
        help="With --endpoint: most texts per request (and at most about 100k tokens).",
    ),
    *endpoint_options(),
    click.option(
        "--truncate-dim",
        type=int,
        default=None,
        metavar="D",
        help="Keep the first D dimensions of the stored vectors (Matryoshka), renormalized for cosine; "
        "derived from the cached float32 vectors, never a new encode.",
    ),
    click.option(
        "--embedding-precision",
        type=click.Choice(PRECISIONS),
        default="float32",
        show_default=True,
        help="Store and search the vectors as int8/uint8 (ranges calibrated on the corpus) or binary/ubinary "
        "(Hamming, FAISS's binary index).",
    ),
    click.option(
        "--rescore-multiplier",
        type=int,
        default=DEFAULT_RESCORE_MULTIPLIER,
        show_default=True,
        metavar="M",
        help="With a compressed precision: retrieve M x depth candidates, rescore them with float32 vectors; "
        "0 keeps the raw compressed ranking.",
    ),
    click.option(
        "--engine",
        type=click.Choice(["local", "ray"]),
        default="local",
        show_default=True,
        help="Where the corpus is encoded: this process, or a Ray cluster (pip install "
        "'beir-harness[ray]'; the cache dir must be on a filesystem every node mounts).",
    ),
    click.option(
        "--ray-address",
        default=None,
        metavar="ADDRESS",
        help="With --engine ray: a running cluster, e.g. auto, HOST:6379 or ray://HOST:10001 "
        "[default: $RAY_ADDRESS, else a new local cluster].",
    ),
    click.option(
        "--ray-local",
        type=click.IntRange(min=1),
        default=None,
        metavar="CPUS",
        help="With --engine ray: start a private local Ray cluster with this many CPUs.",
    ),
    click.option(
        "--shards",
        type=click.IntRange(min=1),
        default=None,
        help="With --engine ray: cut the corpus into about this many shards [default: one per 16,384 documents].",
    ),
    click.option(
        "--ray-search",
        type=click.Choice(["sharded", "driver"]),
        default="sharded",
        show_default=True,
        help="With --engine ray and a flat index: search on the workers, each over a shard of the cached "
        "vectors, merged here (the driver never holds the corpus vectors), or in one index here.",
    ),
    click.option(
        "--token-budget",
        type=click.IntRange(min=1),
        default=None,
        metavar="TOKENS",
        help="Batch documents by tokens (texts x longest text's tokens <= TOKENS: long texts in small "
        "batches, short ones in large) instead of --batch-size texts; for GPUs.",
    ),
    click.option(
        "--checkpoint-seconds",
        type=click.FloatRange(min=0),
        default=60.0,
        show_default=True,
        help="Store what is encoded at least this often (seconds of encoding), so a killed run loses "
        "at most about this much work; 0 stores after every batch.",
    ),
    click.option(
        "--rerank",
        "rerank_model",
        default=None,
        metavar="CROSS_ENCODER",
        help="Rerank the first stage's top documents with this sentence-transformers CrossEncoder (name or folder).",
    ),
    click.option(
        "--rerank-depth",
        type=click.IntRange(min=1),
        default=100,
        show_default=True,
        help="With --rerank: first-stage documents reranked per query; the result keeps exactly these.",
    ),
    click.option(
        "--rerank-batch-size",
        type=click.IntRange(min=1),
        default=32,
        show_default=True,
        help="With --rerank: pairs per forward pass.",
    ),
    click.option(
        "--rerank-max-length",
        type=click.IntRange(min=1),
        default=None,
        help="With --rerank: truncate each (query, document) pair to this many tokens [default: the model's].",
    ),
    click.option(
        "--ray-gpus-per-worker",
        type=click.FloatRange(min=0, min_open=True),
        default=None,
        metavar="G",
        help="With --engine ray: GPUs each worker asks for (e.g. 1, or 0.5 to pack two per GPU); each "
        "encodes on the GPU Ray assigned it.",
    ),
    click.option(
        "--chunk-size",
        type=click.IntRange(min=1),
        default=16384,
        hidden=True,
        help="Documents encoded and cached per chunk.",
    ),
    click.option(
        "--memory-budget",
        callback=lambda ctx, param, value: _size(param, value),
        default=None,
        metavar="SIZE",
        help="Memory this run may hold (e.g. 3GB); a flat index that would not fit is "
        "searched streamed from the embedding cache, with the same results "
        "[default: half of the memory available].",
    ),
]


def _size(param: click.Parameter, value: str | None) -> int | None:
    """--memory-budget's bytes."""
    from harness.api.commandline import parse_size

    if value is None:
        return None
    try:
        size = parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param=param) from None
    if size <= 0:
        raise click.BadParameter(f"{value!r} must be positive", param=param)
    return size


def run_options(command):
    """`command` with every option of evaluate and bench (`_RUN_OPTIONS`)."""
    for option in reversed(_RUN_OPTIONS):
        command = option(command)
    return command


# What a run made without judgments has no use for.
_SCORING_ONLY = ("output_dir", "k_values", "split")


def retrieval_options(command):
    """`_RUN_OPTIONS` without the scoring ones."""
    for option in reversed(_RUN_OPTIONS):
        probe = option(click.command()(lambda: None))
        if probe.params[-1].name not in _SCORING_ONLY:
            command = option(command)
    return command


def show_result(result, as_json: bool) -> None:
    """The result as JSON or as the metrics table on stdout; where it was written on stderr."""
    from harness.api.commandline import cost_summary, format_metrics_table

    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2, ensure_ascii=False))
    else:
        click.echo(format_metrics_table(result))
    summary = cost_summary(result)
    if summary:
        logger.info(summary)
    if result.path is not None:
        logger.info("wrote %s and %s", result.path, result.run_path)


def label_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A result label (--name), checked."""
    from harness.api.commandline import check_label

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
