"""The beir-harness command line: parse options, call the library, print the result.

Results go to stdout; logs and progress bars go to stderr. A `HarnessError` becomes one line
on stderr and exit code 1; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import json
import re
import logging
import os
import sys
from pathlib import Path

import click

from harness import __version__
from harness.retrieval.compress import DEFAULT_RESCORE_MULTIPLIER, PRECISIONS
from harness.retrieval.encode import DEFAULT_MODEL
from harness.errors import HarnessError

logger = logging.getLogger("harness")


class _StderrHandler(logging.Handler):
    """Writes log lines to stderr through tqdm, so they don't break a progress bar."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            from tqdm import tqdm

            tqdm.write(_flags(self.format(record)), file=sys.stderr)  # settings named as their options
        except Exception:  # noqa: BLE001 - logging must never raise
            self.handleError(record)


def _configure_logging(verbose: int, quiet: bool) -> None:
    # Quiet by default: warnings and our own progress bars; -v adds INFO lines, -vv DEBUG (and third-party
    # output); -q drops the progress bars too.
    level = logging.WARNING if quiet or not verbose else logging.INFO if verbose == 1 else logging.DEBUG
    if verbose < 2:
        # Hugging Face libraries draw their own bars (e.g. transformers' "Loading weights"): only with -vv.
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    root = logging.getLogger("harness")
    for handler in list(root.handlers):
        if isinstance(handler, _StderrHandler):
            root.removeHandler(handler)
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    root.addHandler(handler)
    root.setLevel(level)


def _k_values(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...]:
    from harness.evaluation.metrics import parse_k_values

    try:
        return tuple(parse_k_values(value))
    except HarnessError as exc:
        raise click.BadParameter(_flags(str(exc))) from None


# Settings whose option is not named after them (`harness.errors.setting` names → flags).
_FLAG_OF = {"run_path": "--run", "rerank_model": "--rerank", "cache": "--cache/--no-cache", "local_cpus": "--ray-local", "address": "--ray-address",
            "gpus_per_worker": "--ray-gpus-per-worker", "rerank_depth": "--rerank-depth", "base_url": "--base-url",
            "out": "--out", "kind": "--index", "rounds": "--rounds"}


def _flags(message: str) -> str:
    """A library message with each named setting (`top_k`) shown as the option that sets it (--top-k)."""
    return re.sub(r"`([a-z][a-z0-9_]*)`",
                  lambda match: _FLAG_OF.get(match.group(1)) or f"--{match.group(1).replace('_', '-')}", message)


# The sections of `evaluate --help` (and bench, retrieve): an option not listed goes under "Other".
_SECTIONS = {
    "Data": ("split", "data_dir", "download", "base_url", "ignore_identical_ids", "run_path", "allow_unknown_docs",
             "queries_path", "dataset_names"),
    "Model": ("model", "models", "batch_size", "max_seq_length", "query_prefix", "doc_prefix", "similarity", "normalize",
              "backend", "device", "precision", "trust_remote_code", "rerank_model", "rerank_depth", "rerank_batch_size",
              "rerank_max_length", "endpoint", "api_key_env", "endpoint_batch_size", "concurrency", "endpoint_timeout",
              "price_per_1m_tokens"),
    "Retrieval and index": ("top_k", "index_kind", "hnsw_m", "ef_construction", "ef_search", "nlist", "nprobe", "pq_m",
                            "pq_nbits", "truncate_dim", "embedding_precision", "rescore_multiplier", "truncate_dims",
                            "embedding_precisions", "rescore_multipliers"),
    "Engine": ("engine", "ray_address", "ray_local", "shards", "ray_gpus_per_worker", "threads", "use_cache",
               "cache_dir", "chunk_size", "checkpoint_seconds", "token_budget"),
    "Output": ("k_values", "output_dir", "name", "as_json", "out", "metric", "force"),
}


class _Sectioned(click.Command):
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


class _UsageError(click.UsageError):
    """A mistake in the command line: one line on stderr and exit code 2, in every command alike."""

    def show(self, file=None) -> None:
        where = self.ctx.command_path if self.ctx is not None else "beir-harness"
        click.echo(f"Error: {self.format_message()} (see '{where} --help')", err=True)


GLOBAL_FLAGS = ("-q", "--quiet", "-v", "--verbose", "-vv", "-vvv")


def _globals_first(args: list[str]) -> list[str]:
    """The arguments with -q/-v moved before the subcommand, so that `evaluate DATA -q` works like `-q evaluate DATA`."""
    if "--" in args:
        cut = args.index("--")
        return _globals_first(args[:cut]) + args[cut:]
    flags = [arg for arg in args if arg in GLOBAL_FLAGS]
    return flags + [arg for arg in args if arg not in GLOBAL_FLAGS]


class _Group(click.Group):
    """Turns HarnessError into one line (settings shown as options) and exit code 1, a command-line mistake into
    one line and exit code 2, and Ctrl-C into one line; takes the global flags anywhere on the line."""

    def main(self, args=None, *rest, **kwargs):
        args = list(sys.argv[1:] if args is None else args)
        return super().main(_globals_first(args), *rest, **kwargs)

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as exc:
            raise exc if isinstance(exc, _UsageError) else _UsageError(exc.format_message(), exc.ctx) from None

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except _UsageError:
            raise
        except click.UsageError as exc:
            raise _UsageError(exc.format_message(), exc.ctx) from None
        except HarnessError as exc:
            raise click.ClickException(_flags(str(exc))) from None
        except KeyboardInterrupt:
            click.echo("interrupted: finished work is kept (cached embedding chunks, verified downloads, complete "
                       "result files) and nothing half-written is; rerun the same command to resume", err=True)
            ctx.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="beir-harness")
@click.option("-v", "--verbose", count=True, help="More on stderr: -v adds progress notes (INFO), -vv debug logs and "
              "third-party output.")
@click.option("-q", "--quiet", is_flag=True, help="Only warnings and errors on stderr, no progress bars.")
@click.pass_context
def cli(ctx: click.Context, verbose: int, quiet: bool) -> None:
    """beir-harness: honest retrieval evaluation on BEIR-format data.

    Metrics agree exactly with trec_eval (pytrec_eval, as BEIR and MTEB use it). Results go
    to stdout, logs and progress bars to stderr.

    Example:

    \b
        beir-harness demo
        beir-harness evaluate scifact
    """
    _configure_logging(verbose, quiet)
    ctx.obj = {"progress": not quiet}


@cli.command()
@click.option("--model", default=DEFAULT_MODEL, show_default=True,
              help="sentence-transformers model name or local model folder.")
@click.pass_context
def demo(ctx: click.Context, model: str) -> None:
    """Score the bundled lesson eval set (15 products, 5 queries) with a model.

    Prints, per query, the relevant ids, the top-3 retrieved ids, Recall@3 and the
    reciprocal rank (RR@10), then the means and nDCG@10.

    Example:

    \b
        beir-harness demo
    """
    from harness.pipeline.evaluate import run_demo

    outcome = run_demo(model=model, progress=ctx.obj["progress"])
    click.echo(_format_demo(outcome))


def _format_demo(outcome) -> str:
    result, run, qrels = outcome.result, outcome.run, outcome.qrels
    lines = [f"demo: lesson eval set, {result.config['n_docs']} documents, {result.n_queries} queries, "
             f"model {result.model}", ""]
    rows = [("query", "relevant", "top-3", "Recall@3", "RR@10")]
    for query_id in qrels:
        relevant = sorted(qrels.relevant(query_id), key=lambda d: (len(d), d))
        top = [hit.doc_id for hit in run.get(query_id, ())[:3]]
        values = result.per_query[query_id]
        rows.append((query_id, f"[{', '.join(relevant)}]", f"[{', '.join(top)}]",
                     f"{values['Recall@3']:.2f}", f"{values['MRR@10']:.2f}"))
    rows.append(("mean", "", "", f"{result.metrics['Recall@3']:.2f}", f"{result.metrics['MRR@10']:.2f}"))
    from harness.presentation import align

    lines += align(rows, right=[False] * 5)
    lines += ["", f"mean Recall@3 {result.metrics['Recall@3']:.2f}   MRR@10 {result.metrics['MRR@10']:.2f}   "
              f"nDCG@10 {result.metrics['nDCG@10']:.4f}"]
    return "\n".join(lines)


# Options shared by `evaluate` and `bench`: how to retrieve and score.
_RUN_OPTIONS = [
    click.option("--split", default="test", show_default=True, help="Qrels split: qrels/<split>.tsv."),
    click.option("--k", "k_values", default="1,3,5,10,100", show_default=True, callback=_k_values,
                 help="Comma-separated cutoffs shown; every metric (nDCG, MAP, Recall, P, MRR, Success, Judged) is stored at each and at the standard cutoffs."),
    click.option("--batch-size", default=32, show_default=True, type=click.IntRange(min=1),
                 help="Texts per forward pass."),
    click.option("--top-k", type=click.IntRange(min=1), default=None,
                 help="Documents retrieved per query [default: 100 or the largest k]."),
    click.option("--max-seq-length", type=click.IntRange(min=1), default=None,
                 help="Truncate texts to this many tokens [default: the model's]."),
    click.option("--output-dir", type=click.Path(path_type=Path), default=Path("results"), show_default=True,
                 help="Results go to <output-dir>/<dataset>/<model>/<split>[.<variant>].json and .run.trec; "
                      "each configuration has its own file."),
    click.option("--name", default=None, metavar="LABEL", callback=lambda ctx, param, value: _label(ctx, param, value),
                 help="Label of the result in every report, table and plot [default: the model, plus the "
                      "non-default settings]."),
    click.option("--data-dir", type=click.Path(path_type=Path, file_okay=False), default=None,
                 help="Where registry datasets live [default: $BEIR_HARNESS_DATA_DIR or ./datasets]."),
    click.option("--download/--no-download", default=True, show_default=True,
                 help="Download a registry dataset that is not installed yet."),
    click.option("--base-url", default=None, metavar="URL",
                 help="Download mirror [default: $BEIR_HARNESS_MIRROR or BEIR's server]."),
    click.option("--cache-dir", type=click.Path(path_type=Path, file_okay=False), default=None,
                 help="Embedding cache [default: $BEIR_HARNESS_CACHE_DIR, else the user cache folder, "
                      "~/.cache/beir-harness on Linux]."),
    click.option("--cache/--no-cache", "use_cache", default=True, show_default=True,
                 help="Reuse and store embeddings (content-addressed: model weights + corpus content)."),
    click.option("--threads", type=click.IntRange(min=1), default=None,
                 help="torch and faiss threads [default: all cores]."),
    click.option("--ignore-identical-ids/--keep-identical-ids", default=None,
                 help="Drop retrieved documents whose id equals the query id [default: the registry's "
                      "policy for a known BEIR dataset (e.g. arguana, quora), else keep]."),
    click.option("--query-prefix", default="", help="Text prepended to each query, e.g. 'query: ' for E5 models."),
    click.option("--doc-prefix", default="", help="Text prepended to each document, e.g. 'passage: '."),
    click.option("--similarity", type=click.Choice(["cosine", "dot"]), default="cosine", show_default=True,
                 help="cosine (normalized vectors) or dot (raw vectors); inner-product index either way."),
    click.option("--normalize/--no-normalize", default=None,
                 help="L2-normalize embeddings [default: yes for cosine, no for dot]."),
    click.option("--backend", type=click.Choice(["torch", "onnx", "onnx-int8"]), default="torch", show_default=True,
                 help="Encoder runtime: torch, or ONNX Runtime fp32 / int8 (pip install 'beir-harness[onnx]')."),
    click.option("--device", default=None, metavar="DEVICE",
                 help="auto, cpu, cuda, cuda:N, cuda:all, mps, or a list such as cuda:0,cuda:1 (one worker process "
                      "per device) [default: $BEIR_HARNESS_DEVICE, else auto: CUDA, else MPS, else CPU]."),
    click.option("--precision", type=click.Choice(["fp32", "fp16", "bf16"]), default="fp32", show_default=True,
                 help="Model weights and activations; stored vectors are float32. fp16 needs a GPU."),
    click.option("--trust-remote-code", is_flag=True,
                 help="Let the model run code from its repository (off by default)."),
    click.option("--index", "index_kind", type=click.Choice(["flat", "hnsw", "ivf", "ivfpq", "pq", "sq8"]),
                 default="flat", show_default=True,
                 help="FAISS index: flat is exact; the others are approximate and record their recall of flat."),
    click.option("--hnsw-m", type=int, default=32, show_default=True, help="HNSW links per node."),
    click.option("--ef-construction", type=int, default=200, show_default=True, help="HNSW build beam width."),
    click.option("--ef-search", type=int, default=128, show_default=True, help="HNSW search beam width."),
    click.option("--nlist", type=int, default=None, help="IVF cells [default: min(4*sqrt(n), n/39)]."),
    click.option("--nprobe", type=int, default=16, show_default=True, help="IVF cells searched per query."),
    click.option("--pq-m", type=int, default=48, show_default=True,
                 help="PQ sub-vectors (must divide the dimension)."),
    click.option("--pq-nbits", type=int, default=8, show_default=True, help="Bits per PQ code."),
    click.option("--endpoint", default=None, metavar="URL",
                 help="With --model openai:MODEL: the OpenAI-compatible service, e.g. https://api.openai.com/v1 or "
                      "http://localhost:8080/v1 [default: $BEIR_HARNESS_ENDPOINT]."),
    click.option("--api-key-env", default="OPENAI_API_KEY", show_default=True, metavar="NAME",
                 help="With --endpoint: the environment variable holding the API key (never written anywhere)."),
    click.option("--endpoint-batch-size", type=int, default=64, show_default=True,
                 help="With --endpoint: most texts per request (and at most about 100k tokens)."),
    click.option("--concurrency", type=int, default=4, show_default=True,
                 help="With --endpoint: requests in flight."),
    click.option("--endpoint-timeout", type=float, default=60.0, show_default=True,
                 help="With --endpoint: seconds to wait for one answer (then retried)."),
    click.option("--price-per-1m-tokens", type=float, default=None, metavar="PRICE",
                 help="With --endpoint: record the cost of the tokens the service reports."),
    click.option("--truncate-dim", type=int, default=None, metavar="D",
                 help="Keep the first D dimensions of the stored vectors (Matryoshka), renormalized for cosine; "
                      "derived from the cached float32 vectors, never a new encode."),
    click.option("--embedding-precision", type=click.Choice(PRECISIONS), default="float32", show_default=True,
                 help="Store and search the vectors as int8/uint8 (ranges calibrated on the corpus) or binary/ubinary "
                      "(Hamming, FAISS's binary index)."),
    click.option("--rescore-multiplier", type=int, default=DEFAULT_RESCORE_MULTIPLIER, show_default=True,
                 metavar="M",
                 help="With a compressed precision: retrieve M x depth candidates, rescore them with float32 vectors; "
                      "0 keeps the raw compressed ranking."),
    click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
                 help="Where the corpus is encoded: this process, or a Ray cluster (pip install "
                      "'beir-harness[ray]'; the cache dir must be on a filesystem every node mounts)."),
    click.option("--ray-address", default=None, metavar="ADDRESS",
                 help="With --engine ray: a running cluster, e.g. auto, HOST:6379 or ray://HOST:10001 "
                      "[default: $RAY_ADDRESS, else a new local cluster]."),
    click.option("--ray-local", type=click.IntRange(min=1), default=None, metavar="CPUS",
                 help="With --engine ray: start a private local Ray cluster with this many CPUs."),
    click.option("--shards", type=click.IntRange(min=1), default=None,
                 help="With --engine ray: cut the corpus into about this many shards [default: one per "
                      "16,384 documents]."),
    click.option("--token-budget", type=click.IntRange(min=1), default=None, metavar="TOKENS",
                 help="Batch documents by tokens (texts x longest text's tokens <= TOKENS: long texts in small "
                      "batches, short ones in large) instead of --batch-size texts; for GPUs."),
    click.option("--checkpoint-seconds", type=click.FloatRange(min=0), default=60.0, show_default=True,
                 help="Store what is encoded at least this often (seconds of encoding), so a killed run loses "
                      "at most about this much work; 0 stores after every batch."),
    click.option("--rerank", "rerank_model", default=None, metavar="CROSS_ENCODER",
                 help="Rerank the first stage's top documents with this sentence-transformers CrossEncoder "
                      "(name or folder)."),
    click.option("--rerank-depth", type=click.IntRange(min=1), default=100, show_default=True,
                 help="With --rerank: first-stage documents reranked per query; the result keeps exactly these."),
    click.option("--rerank-batch-size", type=click.IntRange(min=1), default=32, show_default=True,
                 help="With --rerank: pairs per forward pass."),
    click.option("--rerank-max-length", type=click.IntRange(min=1), default=None,
                 help="With --rerank: truncate each (query, document) pair to this many tokens [default: the "
                      "model's]."),
    click.option("--ray-gpus-per-worker", type=click.FloatRange(min=0, min_open=True), default=None, metavar="G",
                 help="With --engine ray: GPUs each worker asks for (e.g. 1, or 0.5 to pack two per GPU); each "
                      "encodes on the GPU Ray assigned it."),
    click.option("--chunk-size", type=click.IntRange(min=1), default=16384, hidden=True,
                 help="Documents encoded and cached per chunk."),
]


def _run_options(command):
    for option in reversed(_RUN_OPTIONS):
        command = option(command)
    return command


# What a run made without judgments has no use for.
_SCORING_ONLY = ("output_dir", "k_values", "split")


def _retrieval_options(command):
    """`_RUN_OPTIONS` without the scoring ones."""
    for option in reversed(_RUN_OPTIONS):
        probe = option(click.command()(lambda: None))
        if probe.params[-1].name not in _SCORING_ONLY:
            command = option(command)
    return command


def _config(ctx: click.Context, dataset, model: str, options: dict):
    """An EvaluateConfig from the shared options (consumed from `options`)."""
    from harness.retrieval.encode import EncoderSpec
    from harness.retrieval.index import IndexSpec
    from harness.pipeline.evaluate import EvaluateConfig
    from harness.engines.ray_engine import RaySpec
    from harness.retrieval.compress import CompressionSpec
    from harness.retrieval.endpoint import EndpointSpec
    from harness.retrieval.rerank import RerankSpec

    similarity, normalize = options.pop("similarity"), options.pop("normalize")
    if normalize is None:
        normalize = similarity == "cosine"
    elif similarity == "cosine" and not normalize:
        raise click.UsageError("--similarity cosine needs normalized vectors; use --similarity dot with --no-normalize")
    index = IndexSpec(kind=options.pop("index_kind"), hnsw_m=options.pop("hnsw_m"),
                      ef_construction=options.pop("ef_construction"), ef_search=options.pop("ef_search"),
                      nlist=options.pop("nlist"), nprobe=options.pop("nprobe"), pq_m=options.pop("pq_m"),
                      pq_nbits=options.pop("pq_nbits"))
    ray_spec = RaySpec(address=options.pop("ray_address"), local_cpus=options.pop("ray_local"),
                       shards=options.pop("shards"), gpus_per_worker=options.pop("ray_gpus_per_worker"))
    if options["engine"] != "ray" and ray_spec != RaySpec():
        raise click.UsageError("--ray-address, --ray-local, --shards and --ray-gpus-per-worker need --engine ray")
    rerank = RerankSpec(model=options.pop("rerank_model"), depth=options.pop("rerank_depth"),
                        batch_size=options.pop("rerank_batch_size"), max_length=options.pop("rerank_max_length")) \
        if options.get("rerank_model") else None
    for name in ("rerank_model", "rerank_depth", "rerank_batch_size", "rerank_max_length"):
        options.pop(name, None)
    options["rerank"] = rerank
    encoder = EncoderSpec(normalize=normalize, **{name: options.pop(name) for name in (
        "max_seq_length", "query_prefix", "doc_prefix", "backend", "precision", "batch_size", "trust_remote_code")})
    compression = CompressionSpec(**{name: options.pop(name) for name in (
        "truncate_dim", "embedding_precision", "rescore_multiplier")})
    endpoint = EndpointSpec(url=options.pop("endpoint"), api_key_env=options.pop("api_key_env"),
                            batch_size=options.pop("endpoint_batch_size"), concurrency=options.pop("concurrency"),
                            timeout=options.pop("endpoint_timeout"),
                            price_per_1m_tokens=options.pop("price_per_1m_tokens"))
    return EvaluateConfig(dataset_path=dataset, model=model, encoder=encoder, index=index, ray=ray_spec,
                          compression=compression, endpoint=endpoint, cache=options.pop("use_cache"),
                          progress=ctx.obj["progress"], **options)


@cli.command(cls=_Sectioned)
@click.argument("dataset", type=click.Path(path_type=Path))
@click.option("--model", default=DEFAULT_MODEL, show_default=True,
              help="The first stage: bm25; a sentence-transformers bi-encoder or SparseEncoder (SPLADE), by hub id, "
                   "short alias (all-MiniLM-L6-v2) or local folder; openai:MODEL (an OpenAI-compatible embedding "
                   "service, with --endpoint); hash:DIM (a hashing stand-in, no model). A cross-encoder goes to "
                   "--rerank.")
@click.option("--json", "as_json", is_flag=True, help="Print the result JSON to stdout instead of the table.")
@click.option("--run", "run_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Score this TREC run file (qid Q0 docid rank score tag) instead of retrieving.")
@click.option("--allow-unknown-docs", is_flag=True,
              help="With --run: score documents that are not in the corpus as non-relevant instead of refusing "
                   "the run.")
@_run_options
@click.pass_context
def evaluate(ctx: click.Context, dataset: Path, model: str, as_json: bool, run_path: Path | None,
             allow_unknown_docs: bool, **options) -> None:
    """Evaluate a model, or an external run, on a BEIR folder or dataset.

    DATASET is a folder with corpus.jsonl[.gz], queries.jsonl[.gz] and qrels/<split>.tsv, or a
    BEIR dataset name (see `beir-harness datasets list`; cqadupstack/<forum> for CQADupStack),
    which is downloaded into the data dir when missing.
    Documents are encoded as (title + " " + text).strip() with normalized embeddings (cached:
    a rerun encodes nothing), searched with FAISS (exact by default) and scored with trec_eval's
    rules. --model bm25 runs the BM25 baseline instead.

    Example:

    \b
        beir-harness evaluate scifact
        beir-harness evaluate scifact --no-download
        beir-harness evaluate nfcorpus --k 1,10,100 --json
        beir-harness evaluate scifact --run my_system.trec
        beir-harness evaluate scifact --index hnsw --hnsw-m 32 --ef-search 128
        beir-harness evaluate scifact --model bm25
        beir-harness evaluate fiqa --model intfloat/e5-small-v2 --query-prefix "query: " --doc-prefix "passage: "
        beir-harness evaluate scifact --engine ray --ray-local 2
        beir-harness evaluate hotpotqa --engine ray --ray-address auto --shards 64
    """
    from harness.pipeline.evaluate import evaluate_dataset

    if allow_unknown_docs and run_path is None:
        raise click.UsageError("--allow-unknown-docs applies to --run only")
    config = _config(ctx, dataset, model, {**options, "run_path": run_path, "allow_unknown_docs": allow_unknown_docs})
    outcome = evaluate_dataset(config)
    _show_outcome(outcome, as_json)


@cli.command(cls=_Sectioned)
@click.argument("dataset", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), required=True,
              help="The TREC run file to write (atomically).")
@click.option("--queries", "queries_path", type=click.Path(path_type=Path, dir_okay=False, exists=True), default=None,
              help="Search these queries (a BEIR queries.jsonl) instead of the dataset's own.")
@click.option("--model", default=DEFAULT_MODEL, show_default=True,
              help="sentence-transformers model name or local folder (bi-encoder or sparse encoder), or bm25.")
@_retrieval_options
@click.pass_context
def retrieve(ctx: click.Context, dataset: Path, out: Path, queries_path: Path | None, model: str, **options) -> None:
    """Search a corpus for every query and write a TREC run; no judgments needed, nothing scored.

    The same stages, settings, embedding cache and self-hit policy as `evaluate`; --top-k documents
    per query (default 100). Score the run later with `evaluate DATASET --run FILE`.

    Example:

    \b
        beir-harness retrieve scifact --model bm25 --out bm25.trec
        beir-harness retrieve ./my-corpus --queries new-queries.jsonl --out run.trec --top-k 1000
    """
    from harness.pipeline.retrieve import retrieve as run_retrieval

    config = _config(ctx, dataset, model, {**options, "output_dir": None, "k_values": (1,)})
    run = run_retrieval(config, out, queries_path)
    click.echo(f"{out}: {len(run)} queries, up to {max((run.depth(q) for q in run), default=0)} documents each "
               f"({run.name})")


def _show_outcome(outcome, as_json: bool) -> None:
    """The result as JSON or as the metrics table on stdout; where it was written on stderr."""
    from harness.reporting.report import format_metrics_table

    if as_json:
        click.echo(json.dumps(outcome.result.to_json(), indent=2, ensure_ascii=False))
    else:
        click.echo(format_metrics_table(outcome.result))
    if outcome.paths:
        logger.info("wrote %s and %s", *outcome.paths)


def _comma_list(ctx: click.Context, param: click.Parameter, value: str) -> list[str]:
    items = [item.strip() for item in value.split(",") if item.strip()]
    if not items:
        raise click.BadParameter("give at least one name, comma-separated")
    return list(dict.fromkeys(items))


def _int_list(param: click.Parameter, value: str | None) -> list[int]:
    """A comma-separated list of integers ("384,256"), or a usage error naming the option."""
    items = [item.strip() for item in (value or "").split(",") if item.strip()]
    bad = [item for item in items if not item.lstrip("-").isdigit()]
    if bad:
        raise click.BadParameter(f"{bad[0]!r} is not an integer (e.g. 384,256,128)", param=param)
    return [int(item) for item in items]


def _precisions(param: click.Parameter, value: str | None) -> list[str]:
    items = list(dict.fromkeys(item.strip() for item in (value or "").split(",") if item.strip()))
    bad = [item for item in items if item not in PRECISIONS]
    if bad:
        raise click.BadParameter(f"unknown precision {bad[0]!r}; use {', '.join(PRECISIONS)}", param=param)
    return items


def _systems(ctx: click.Context, param: click.Parameter, value: str) -> list[str]:
    from harness.pipeline.systems import parse_systems, split_systems

    try:
        items = split_systems(value)
        parse_systems(items)  # labels (LABEL=SYSTEM) checked here, so a bad one is a usage error (exit 2)
    except HarnessError as exc:
        raise click.BadParameter(str(exc)) from None
    if not items:
        raise click.BadParameter("give at least one system, comma-separated")
    return items


def _label(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    from harness.reporting.labels import check_label

    try:
        return None if value is None else check_label(value)
    except HarnessError as exc:
        raise click.BadParameter(str(exc)) from None


@cli.command(cls=_Sectioned)
@click.option("--models", "--systems", "models", required=True, callback=_systems,
              help="Comma-separated systems: sentence-transformers names or folders (bi-encoders or sparse "
                   "encoders), bm25, 'FIRST >> CROSS_ENCODER@DEPTH', or fusions 'METHOD(SYSTEM, SYSTEM[, "
                   "norm=..., k=..., weights=W1:W2, depth=...])' with METHOD rrf, combsum, combmnz, wsum or dbsf; "
                   "each optionally labelled LABEL=SYSTEM (e.g. 'hybrid=rrf(bm25, e5)'), its name in every table.")
@click.option("--datasets", "dataset_names", required=True, callback=_comma_list,
              help="Comma-separated datasets: registry names or BEIR folders.")
@click.option("--metric", default="nDCG@10", show_default=True, callback=lambda ctx, param, value: _metric(ctx, param,
              value), help="Metric of the summary table.")
@click.option("--force", is_flag=True, help="Redo cells whose result already exists with the same settings.")
@click.option("--truncate-dims", callback=lambda ctx, param, value: _int_list(param, value), default=None,
              metavar="D,...", help="An axis of the grid: each dense system at each of these dimensions.")
@click.option("--embedding-precisions", callback=lambda ctx, param, value: _precisions(param, value), default=None,
              metavar="P,...",
              help="An axis of the grid: each dense system stored in each of these precisions (float32, int8, uint8, "
                   "binary, ubinary).")
@click.option("--rescore-multipliers", callback=lambda ctx, param, value: _int_list(param, value), default=None,
              metavar="M,...", help="An axis of the grid for compressed precisions, e.g. 0,2 (raw and rescored).")
@_run_options
@click.pass_context
def bench(ctx: click.Context, models: list[str], dataset_names: list[str], metric: str, force: bool,
          truncate_dims: list[int], embedding_precisions: list[str], rescore_multipliers: list[int],
          **options) -> None:
    """Evaluate a grid of models × datasets; resumable.

    Each cell writes its result as `evaluate` does. A cell whose result already exists with the
    same settings (config hash) is skipped unless --force; a failing cell is reported and the
    rest go on (exit code 1 at the end). A fusion's systems are evaluated too, then their saved runs
    fused as `fuse` does. Prints a summary table and rewrites
    <output-dir>/results.csv, one row per dataset × model × split × metric.

    Example:

    \b
        beir-harness bench --models all-MiniLM-L6-v2,bm25 --datasets scifact,nfcorpus
        beir-harness bench --models bm25 --datasets scifact,./my-eval-set --metric Recall@100
        beir-harness bench --systems "bm25, all-MiniLM-L6-v2, rrf(bm25, all-MiniLM-L6-v2)" --datasets scifact
        beir-harness bench --systems "bm25, e5=intfloat/e5-small-v2, hybrid=wsum(bm25, intfloat/e5-small-v2, \
            weights=0.3:0.7)" --datasets scifact
        beir-harness bench --models all-MiniLM-L6-v2 --datasets scifact --truncate-dims 384,256,128,64 \
            --embedding-precisions float32,int8,binary --rescore-multipliers 0,2
    """
    from harness.pipeline.bench import run_bench
    from harness.retrieval.compress import compression_grid

    from harness.pipeline.systems import parse_system

    base = _config(ctx, None, parse_system(models[0]).spec, options)
    axes = truncate_dims or embedding_precisions or rescore_multipliers
    compressions = compression_grid(base.compression, truncate_dims or (), embedding_precisions or (),
                                    rescore_multipliers or ()) if axes else []
    report = run_bench(models, dataset_names, base, force=force, compressions=compressions)
    click.echo(report.format_table(metric))
    if report.csv_path:
        logger.info("wrote %s", report.csv_path)
    if report.failed:
        sys.exit(1)


_COLUMN_OPTIONS = (
    ("--corpus-id-column", "corpus_id", "document id"),
    ("--corpus-title-column", "corpus_title", "document title"),
    ("--corpus-text-column", "corpus_text", "document text"),
    ("--query-id-column", "query_id", "query id"),
    ("--query-text-column", "query_text", "query text"),
    ("--qrels-query-column", "qrels_query", "judgment's query id"),
    ("--qrels-doc-column", "qrels_doc", "judgment's document id"),
    ("--qrels-score-column", "qrels_score", "judgment's grade"),
)


def _column_options(command):
    for option, name, role in reversed(_COLUMN_OPTIONS):
        command = click.option(option, name, default=None, metavar="NAME",
                               help=f"Column holding the {role} [default: detected].")(command)
    return command


@cli.command()
@click.option("--corpus", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Documents: .csv/.tsv/.jsonl/.json/.parquet, optionally .gz.")
@click.option("--queries", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Queries, same formats.")
@click.option("--qrels", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Judgments (query id, document id, grade), same formats, or a TREC qrels file (.qrels/.txt).")
@click.option("--eval-set", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Instead of the three tables: one .json/.yaml file with documents and queries.")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), required=True,
              help="The BEIR folder to create.")
@click.option("--split", default="test", show_default=True, help="Name of the qrels split written.")
@click.option("--force", is_flag=True, help="Replace an existing output folder.")
@click.option("--drop-empty", is_flag=True, help="Skip documents/queries with empty text instead of failing.")
@click.option("--delimiter", type=click.Choice(["comma", "semicolon", "tab", "pipe"]), default=None,
              help="Field separator of the .csv tables [default: detected from each header row].")
@click.option("--allow-negative", is_flag=True, help="Accept negative grades (TREC-COVID-style -1).")
@click.option("--default-grade", type=int, default=None, metavar="N",
              help="Judgments without a grade column (query id, document id pairs): every pair has grade N.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@_column_options
def convert(corpus: Path | None, queries: Path | None, qrels: Path | None, eval_set: Path | None, out: Path,
            split: str, force: bool, drop_empty: bool, delimiter: str | None, allow_negative: bool,
            default_grade: int | None, as_json: bool, **columns: str | None) -> None:
    """Convert your own eval set into a BEIR folder, checking it first.

    Columns are detected from common names: document id from
    _id|id|doc_id|docid|corpus_id|corpus-id, title from title, text from
    text|body|content|contents|passage|document; query id from _id|id|query_id|qid|query-id,
    text from text|query|question; judgments from query-id|query_id|qid,
    corpus-id|corpus_id|doc_id|docid and score|relevance|grade|label|rel. Name a column
    explicitly with the --*-column options. Other document columns go into BEIR's metadata.
    Every column problem of the three tables is reported in one run. Judgments may also be
    TREC qrels (.qrels/.txt: query_id 0 doc_id grade, or query_id doc_id [grade]); a list of
    relevant pairs without grades needs --default-grade 1.

    Ids are kept as text ("007" stays "007"); grades must be integers (0 is kept). Nothing is
    written unless every check passes; an existing folder is refused without --force, except
    that a new --split can be added to it when its ids resolve against its corpus and queries.

    Example:

    \b
        beir-harness convert --corpus docs.csv --queries queries.csv --qrels judgments.csv --out datasets/helpdesk
        beir-harness convert --qrels dev.csv --out datasets/helpdesk --split dev
        beir-harness convert --corpus items.parquet --corpus-id-column sku --corpus-text-column description ...
        beir-harness convert --eval-set eval.json --out datasets/products
        beir-harness convert --corpus docs.csv --queries q.csv --qrels j.csv --out datasets/x --delimiter semicolon
        beir-harness convert --corpus docs.csv --queries q.csv --qrels pairs.csv --out datasets/x --default-grade 1
    """
    from harness.datasets.convert import ColumnMap, ConvertOptions, convert_eval_set, convert_tables

    options = ConvertOptions(split=split, force=force, drop_empty=drop_empty, allow_negative=allow_negative,
                             columns=ColumnMap(**columns), default_grade=default_grade,
                             delimiter={"comma": ",", "semicolon": ";", "tab": "\t", "pipe": "|"}.get(delimiter))
    if eval_set is not None:
        if corpus or queries or qrels:
            raise click.UsageError("give either --eval-set or --corpus/--queries/--qrels, not both")
        summary = convert_eval_set(eval_set, out, options)
    elif qrels is None:
        raise click.UsageError("give --corpus, --queries and --qrels (or --eval-set)")
    else:
        summary = convert_tables(corpus, queries, qrels, out, options)
    if as_json:
        click.echo(json.dumps(summary.to_json(), indent=2))
        return
    grades = ", ".join(f"{g}: {n}" for g, n in sorted(summary.grades.items()))
    verb = {"new": "wrote", "replace": "replaced", "add-split": "added split to"}[summary.mode]
    click.echo(f"{verb} {summary.out}: {summary.n_docs} documents, {summary.n_queries} queries, "
               f"qrels/{summary.split}.tsv with {summary.n_judgments} judgments for {summary.n_judged_queries} "
               f"queries (grades {{{grades}}})")
    for source, how in summary.formats.items():
        click.echo(_flags(f"read {source} as {how}"))


@cli.command()
@click.argument("folder", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def validate(folder: Path, as_json: bool) -> None:
    """Check a BEIR folder and summarise it; exit 1 if it has errors.

    Checks every line of corpus.jsonl, queries.jsonl and qrels/*.tsv (plain or .gz): JSON
    records with _id and text, unique ids, BEIR's qrels header, three columns, integer grades,
    no conflicting duplicates, and judgments that name existing queries and documents. Empty
    texts are warnings and CRLF line endings a note. Prints counts per split, the grade
    histogram, judged documents per query and mean document length.

    Example:

    \b
        beir-harness validate datasets/helpdesk
        beir-harness validate ./my-eval-set --json
    """
    from harness.datasets.validate import validate_folder

    report = validate_folder(folder)
    click.echo(json.dumps(report.to_json(), indent=2) if as_json else report.format_text())
    if not report.ok:
        sys.exit(1)


@cli.group()
def datasets() -> None:
    """List, download, import and remove BEIR datasets.

    Datasets live in the data dir: --data-dir, else $BEIR_HARNESS_DATA_DIR, else ./datasets.
    Downloads are verified (md5 from the registry), resumable, and installed atomically.

    Example:

    \b
        beir-harness datasets list
        beir-harness datasets download scifact nfcorpus
    """


_data_dir_option = click.option(
    "--data-dir", type=click.Path(path_type=Path, file_okay=False), default=None,
    help="Data dir [default: $BEIR_HARNESS_DATA_DIR or ./datasets].")


@datasets.command("list")
@_data_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
def datasets_list(data_dir: Path | None, as_json: bool) -> None:
    """List every BEIR dataset: split, size, counts, installed?, published scores known? Then the custom
    datasets installed with `datasets import` (family "custom"), which evaluate, bench and retrieve take by name.

    Example:

    \b
        beir-harness datasets list
        beir-harness datasets list --data-dir /data/beir --json
    """
    from harness.datasets.catalog import list_datasets

    rows = list_datasets(data_dir)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    from harness.presentation import align

    table = [["name", "family", "split", "docs", "queries", "zip MB", "installed", "published", "note"]]
    for row in rows:
        note = "not distributed" if not row["public"] else ("self-hits dropped" if row["ignore_identical_ids"] else "")
        note = "your own eval set" if row["family"] == "custom" else note
        table.append([row["name"], row["family"], row["split"], _count(row["docs"]), _count(row["queries"]),
                      f"{row['zip_mb']:.1f}" if row["zip_mb"] else "-", "yes" if row["installed"] else "no",
                      str(row["published_scores"]), note])
    click.echo("\n".join(align(table, right=[False, False, False, True, True, True, False, True, False])))


def _count(value: int | None) -> str:
    return f"{value:,}" if value is not None else "-"


@datasets.command("download")
@click.argument("names", nargs=-1, required=True)
@_data_dir_option
@click.option("--base-url", default=None, metavar="URL",
              help="Mirror to download <URL>/<name>.zip from [default: $BEIR_HARNESS_MIRROR or BEIR's server].")
@click.option("--force", is_flag=True, help="Download and install again even when installed.")
@click.pass_context
def datasets_download(ctx: click.Context, names: tuple[str, ...], data_dir: Path | None, base_url: str | None,
                      force: bool) -> None:
    """Download, verify (md5, counts) and install BEIR datasets.

    An interrupted download resumes where it stopped on the next run.

    Example:

    \b
        beir-harness datasets download scifact nfcorpus
        beir-harness datasets download fiqa --base-url https://mirror.example.org/beir/
    """
    from harness.datasets.catalog import download_dataset

    for name in names:
        installed = download_dataset(name, data_dir, base_url, progress=ctx.obj["progress"], force=force)
        click.echo(f"{name}: {installed.path}")


@datasets.command("import")
@click.argument("source", type=click.Path(path_type=Path))
@_data_dir_option
@click.option("--name", default=None, help="Dataset name [default: the file or folder name].")
@click.option("--force", is_flag=True, help="Replace an installed dataset of that name.")
def datasets_import(source: Path, data_dir: Path | None, name: str | None, force: bool) -> None:
    """Install a local BEIR zip or folder (offline), verified.

    A zip named like a BEIR dataset must have the registry's md5 and counts, and a folder imported
    under a BEIR name the registry's counts (else give it another --name). Any other zip or folder must
    pass `validate` and becomes a custom dataset: listed by `datasets list`, usable by its name in
    evaluate, bench and retrieve.

    Example:

    \b
        beir-harness datasets import ~/Downloads/nfcorpus.zip
        beir-harness datasets import datasets-in-progress/helpdesk --name helpdesk
    """
    from harness.datasets.catalog import import_dataset

    installed = import_dataset(source, data_dir, name, force=force)
    click.echo(f"{installed.name}: {installed.path}")


@datasets.command("remove")
@click.argument("name")
@_data_dir_option
def datasets_remove(name: str, data_dir: Path | None) -> None:
    """Delete an installed dataset and any download leftovers.

    Example:

    \b
        beir-harness datasets remove nfcorpus
    """
    from harness.datasets.catalog import remove_dataset

    for path in remove_dataset(name, data_dir):
        click.echo(f"removed {path}")


def _metric(ctx: click.Context, param: click.Parameter, value: str) -> str:
    from harness.evaluation.metrics import parse_metric

    try:
        return str(parse_metric(value))
    except HarnessError as exc:
        raise click.BadParameter(str(exc)) from None


@cli.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--metric", default="nDCG@10", show_default=True, callback=_metric, help="The metric tabulated.")
@click.option("--format", "fmt", type=click.Choice(["markdown", "latex", "csv", "json", "html"]), default="markdown",
              show_default=True, help="Output format (csv and json are unrounded; html: one self-contained page "
                                      "with a sortable leaderboard, chart, drill-downs and provenance).")
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Write the table here (atomically) instead of stdout.")
@click.option("--by", type=click.Choice(["dataset", "model"]), default="dataset", show_default=True,
              help="Rows are datasets (columns models), or the transpose.")
@click.option("--digits", type=click.IntRange(0, 10), default=4, show_default=True, help="Decimals when rendering.")
@click.option("--split", default=None, help="Split to report [default: each dataset's registry eval split].")
@click.option("--published", "with_published", is_flag=True,
              help="Add the published scores as columns, with deltas for models that have one.")
@click.option("--published-systems", callback=lambda ctx, param, value: [v.strip() for v in value.split(",") if
              v.strip()] if value else [], default=None, metavar="NAME,...",
              help="More published columns: systems (bm25+ce, splade-pp-ed, BAAI/bge-base-en-v1.5) or column "
                   "headings ('bm25 · BEIR paper'); implies --published.")
@click.option("--published-from", multiple=True, type=click.Path(path_type=Path, file_okay=False), metavar="DIR",
              help="An MTEB results folder (MTEB's results repository, or an `export --format mteb`); its models "
                   "become published columns. Repeatable.")
@click.option("--check-published", is_flag=True,
              help="Reproduction check: OK/OFF per result against the published row it should reproduce; exit 1 "
                   "if any is off, 2 if nothing could be compared.")
@click.option("--tolerance", type=click.FloatRange(min=0), default=None,
              help="Largest |ours - published| that --check-published calls OK [default: 0.003 for nDCG@10, MAP@100 "
                   "and MRR@10; 0.005 for Recall@100].")
@click.option("--significance", "baseline", default=None, metavar="MODEL",
              help="Mark (†) cells that differ significantly from this baseline model.")
@click.option("--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.05,
              show_default=True, help="Significance level.")
@click.option("--correction", type=click.Choice(["holm", "bonferroni"]), default="holm", show_default=True,
              help="Multiple-testing correction across datasets.")
@click.option("--rounds", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="Randomization-test rounds.")
@click.option("--plot", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also write a grouped bar chart (PNG) with 95% bootstrap confidence intervals (with --compression: "
                   "the metric against bytes per document, one line per precision).")
@click.option("--worst", type=click.IntRange(min=1), default=20, show_default=True,
              help="With --format html: the worst queries per system and dataset in the drill-downs.")
@click.option("--compression", is_flag=True,
              help="Quality against storage: each dimension and precision of a model with its bytes per document and "
                   "the % of its float32 full-dimension score retained.")
@click.option("--allow-mixed-data", is_flag=True,
              help="Results of one dataset computed on different data (changed corpus, queries or qrels) become rows "
                   "of their own, 'scifact [data 1a2b3c4d]', instead of an error.")
def report(paths: tuple[Path, ...], metric: str, fmt: str, out: Path | None, by: str, digits: int, split: str | None,
           with_published: bool, published_systems: list[str], published_from: tuple[Path, ...],
           check_published: bool, tolerance: float | None,
           baseline: str | None, alpha: float, correction: str, rounds: int, plot: Path | None,
           worst: int, compression: bool, allow_mixed_data: bool) -> None:
    """Tabulate results (models × datasets) for papers, with published scores and significance.

    PATHS are result files or folders searched recursively (default: results/). Reads result
    JSON files only: no model or corpus is needed. CQADupStack is the mean of its 12 forums.

    Example:

    \b
        beir-harness report
        beir-harness report results/ --metric Recall@100 --format latex --out table.tex
        beir-harness report --published
        beir-harness report --published-systems bm25+ce,splade-pp-ed
        beir-harness report --published-from ../mteb-results/results
        beir-harness report --check-published
        beir-harness report --significance bm25 --plot comparison.png
        beir-harness report --compression --plot compression.png
        beir-harness report results/ --format html --out results.html --published --significance bm25
    """
    from harness.reporting.comparison import (
        build_comparison,
        check_exit_code,
        check_published as run_checks,
        format_checks,
        load_results,
        plot_comparison,
        render,
    )

    results = load_results(paths or (Path("results"),), allow_mixed_data)
    if fmt == "html":
        _report_page(results, out, metric, split, with_published or bool(published_systems), baseline, alpha,
                     correction, rounds, worst, digits)
        return
    if compression:
        _report_compression(results, metric, fmt, digits, split, out, plot)
        return
    if check_published:
        checks = run_checks(results, metric, tolerance, split)
        click.echo(format_checks(checks, metric, digits))
        code = check_exit_code(checks)
        if code:
            sys.exit(code)
        return
    comparison = build_comparison(results, metric, split, with_published, baseline, alpha, correction, rounds,
                                  published_systems, published_from)
    _emit(render(comparison, fmt, digits, by), out, plot, lambda: plot_comparison(comparison, plot))


def _emit(text: str, out: Path | None, plot: Path | None, draw) -> None:
    """A table to `out` (atomically) or stdout, then the plot when one was asked for."""
    from harness.io.formats import write_text

    if out is not None:
        write_text(text, out)
        logger.info("wrote %s", out)
    else:
        click.echo(text)
    if plot is not None:
        draw()
        logger.info("wrote %s", plot)


def _report_page(results, out: Path | None, metric: str, split: str | None, with_published: bool,
                 baseline: str | None, alpha: float, correction: str, rounds: int, worst: int, digits: int) -> None:
    from harness.reporting.html import PageOptions, build_page, render_page
    from harness.io.formats import write_text

    options = PageOptions(metric=metric, split=split, published=with_published, baseline=baseline, alpha=alpha,
                          correction=correction, rounds=rounds, worst=worst, digits=digits)
    page = render_page(build_page(results, options))
    if out is None:
        click.echo(page)
        return
    write_text(page, out)
    logger.info("wrote %s (%.1f KB)", out, len(page.encode("utf-8")) / 1024)


def _report_compression(results, metric: str, fmt: str, digits: int, split: str | None, out: Path | None,
                        plot: Path | None) -> None:
    from harness.reporting.compression import compression_rows, plot_compression, render_compression

    rows = compression_rows(results, metric, split)
    _emit(render_compression(rows, metric, fmt, digits), out, plot, lambda: plot_compression(rows, plot, metric))


@cli.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["mteb", "csv", "trec"]), required=True,
              help="mteb: MTEB's results layout; csv: one row per dataset, system, split, query and metric; trec: "
                   "the run files, tagged with each result's label.")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="The folder to write (mteb, trec), or the CSV file [default for csv: stdout].")
@click.option("--metric", "metrics", multiple=True, callback=lambda ctx, param, value: [_metric(ctx, param, v)
              for v in value], help="With --format csv: only this metric (repeatable) [default: every one stored].")
@click.option("--split", default=None, help="Only results of this split [default: each dataset's eval split].")
def export(paths: tuple[Path, ...], fmt: str, out: Path | None, metrics: list[str], split: str | None) -> None:
    """Export results for other tools: MTEB's results layout, per-query CSV, or TREC runs.

    PATHS are result files or folders searched recursively (default: results/). The MTEB layout is
    <out>/<org>__<model>/<revision>/<Task>.json with model_meta.json, readable by MTEB's own loader;
    the CSV is the input of a significance analysis in R or pandas.

    Example:

    \b
        beir-harness export results/ --format mteb --out mteb-results
        beir-harness export results/ --format csv --out per-query.csv
        beir-harness export results/scifact --format trec --out runs/
    """
    from harness.reporting.comparison import load_results, results_of_split
    from harness.io.formats import write_text
    from harness.reporting.export import export_mteb, export_trec, per_query_csv

    results = results_of_split(load_results(paths or (Path("results"),)), split)
    if fmt == "csv":
        text = per_query_csv(results, metrics)
        if out is None:
            click.echo(text, nl=False)
        else:
            write_text(text, out)
            logger.info("wrote %s", out)
        return
    if out is None:
        raise click.UsageError(f"--format {fmt} writes a folder: give --out DIR")
    written = export_mteb(results, out) if fmt == "mteb" else export_trec(results, out)
    for path in written:
        click.echo(str(path))


def _weights(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[float, ...] | None:
    from harness.retrieval.fusion import parse_weights

    try:
        return None if value is None else parse_weights(value)
    except HarnessError as exc:
        raise click.BadParameter(str(exc)) from None


@cli.command()
@click.argument("results", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--method", type=click.Choice(["rrf", "combsum", "combmnz", "wsum", "dbsf"]), default="rrf",
              show_default=True, help="Fusion method.")
@click.option("--norm", type=click.Choice(["minmax", "zscore", "none"]), default="minmax", show_default=True,
              help="Per-query score normalization for combsum, combmnz and wsum.")
@click.option("--weights", callback=_weights, default=None, metavar="W1:W2:...",
              help="With --method wsum: one weight per result, as in bench's weights=0.3:0.7 (0.3,0.7 is read "
                   "too) [default: equal].")
@click.option("--rrf-k", type=click.IntRange(min=0), default=60, show_default=True, help="The k of RRF.")
@click.option("--depth", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Documents kept per query in the fused run.")
@click.option("--name", default=None, metavar="LABEL", callback=_label,
              help="Label of the fused result [default: method(labels; settings), e.g. wsum(bm25, e5; 0.3:0.7)].")
@click.option("--output-dir", type=click.Path(path_type=Path), default=Path("results"), show_default=True,
              help="Where the fused result goes: <output-dir>/<dataset>/fusion/<split>.<variant>.json.")
@click.option("--json", "as_json", is_flag=True, help="Print the fused result JSON instead of the table.")
def fuse(results: tuple[Path, ...], method: str, norm: str, weights: tuple[float, ...] | None, rrf_k: int,
         depth: int, name: str | None, output_dir: Path, as_json: bool) -> None:
    """Fuse the runs of two or more results (hybrid search) and score the fused run.

    RESULTS are result files of one dataset and split (the same qrels); the run file saved beside
    each is fused — RRF = sum of 1/(k + rank); combsum, combmnz and wsum over min-max or z-score
    normalized scores; dbsf over scores clipped to mean ± 3 sigma — and the fused run is scored and
    written like any other result.

    Example:

    \b
        beir-harness fuse results/scifact/bm25/test.json results/scifact/sentence-transformers__all-MiniLM-L6-v2/test.json
        beir-harness fuse a.json b.json --method wsum --weights 0.3:0.7 --norm zscore
    """
    from harness.retrieval.fusion import FusionSpec
    from harness.pipeline.fuse import fuse_results

    spec = FusionSpec(method=method, norm=norm, weights=weights, rrf_k=rrf_k, depth=depth)
    outcome = fuse_results(list(results), spec, output_dir, name)
    _show_outcome(outcome, as_json)


@cli.command()
@click.argument("first", type=click.Path(path_type=Path, dir_okay=False))
@click.argument("second", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--metric", "metrics", multiple=True, callback=lambda ctx, p, v: [_metric(ctx, p, m) for m in v],
              help="Metric to compare (repeatable) [default: every metric both results have].")
@click.option("--rounds", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="Randomization-test rounds.")
@click.option("--seed", type=int, default=0, show_default=True, help="Randomization-test seed.")
@click.option("--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.05,
              show_default=True, help="Significance level for the * mark.")
@click.option("--json", "as_json", is_flag=True, help="Print the tests as JSON.")
def compare(first: Path, second: Path, metrics: list[str], rounds: int, seed: int, alpha: float,
            as_json: bool) -> None:
    """Paired significance of SECOND against FIRST, per metric.

    Per-query differences on the same judged queries; paired t-test (scipy) and paired
    randomization test (sign flipping, fixed seed); mean difference and wins/ties/losses.

    Example:

    \b
        beir-harness compare results/scifact/bm25/test.json results/scifact/sentence-transformers__all-MiniLM-L6-v2/test.json
        beir-harness compare a.json b.json --metric nDCG@10 --rounds 100000
    """
    from dataclasses import asdict

    from harness.reporting.comparison import compare_results, format_compare, load_results
    from harness.reporting.report import check_same_data

    (a,), (b,) = load_results([first]), load_results([second])
    check_same_data([a, b])
    tests = compare_results(a, b, metrics or None, rounds, seed)
    if as_json:
        click.echo(json.dumps([{**asdict(t), "difference": t.difference} for t in tests], indent=2))
    else:
        click.echo(format_compare(a, b, tests, alpha))


@cli.command()
@click.argument("results", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--worst", type=click.IntRange(min=1), default=10, show_default=True, help="How many queries.")
@click.option("--metric", default="nDCG@10", show_default=True, callback=_metric, help="Metric to rank queries by.")
@click.option("--depth", type=click.IntRange(min=1), default=5, show_default=True, help="Retrieved documents shown.")
@click.option("--json", "as_json", is_flag=True, help="Print the queries, judgments, ranks and top documents as JSON.")
def inspect(results: tuple[Path, ...], worst: int, metric: str, depth: int, as_json: bool) -> None:
    """Show the worst queries of a result, or where two results differ most.

    Each query comes with its text, its judged documents with their grades and the rank at which
    each result retrieved them (or "not retrieved"), and the top retrieved documents with score,
    grade and title (read from the dataset folder the result records). A line says how many queries
    tie at the worst value (or the largest difference).

    Example:

    \b
        beir-harness inspect results/scifact/bm25/test.json --worst 10
        beir-harness inspect a/test.json b/test.json --metric Recall@100
        beir-harness inspect results/scifact/bm25/test.json --json > worst.json
    """
    from harness.reporting.comparison import load_results
    from harness.reporting.inspect import format_inspect, inspect_results
    from harness.reporting.report import check_same_data

    if len(results) > 2:
        raise click.UsageError("give one result, or two to compare")
    data = inspect_results(check_same_data([load_results([r])[0] for r in results]), worst, metric, depth)
    click.echo(json.dumps(data, indent=2, ensure_ascii=False) if as_json else format_inspect(data))


@cli.command()
@click.argument("dataset")
@click.option("--model", default=DEFAULT_MODEL, show_default=True,
              help="sentence-transformers model name or local folder.")
@click.option("--split", default="test", show_default=True, help="Qrels split.")
@click.option("--k", "k_values", default="1,3,5,10,100", show_default=True, callback=_k_values,
              help="Comma-separated cutoffs.")
@click.option("--batch-size", default=32, show_default=True, type=click.IntRange(min=1),
              help="Texts per forward pass (both pipelines).")
@click.option("--tolerance", type=float, default=1e-4, show_default=True,
              help="Largest |ours - BEIR| called agreement; exit 1 above it.")
@click.option("--data-dir", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Where registry datasets live [default: $BEIR_HARNESS_DATA_DIR or ./datasets].")
@click.option("--cache/--no-cache", "use_cache", default=True, show_default=True,
              help="Let our side reuse cached embeddings (BEIR's side always encodes).")
@click.option("--device", default=None, metavar="DEVICE",
              help="Where both sides run: auto, cpu, cuda, cuda:N, mps [default: $BEIR_HARNESS_DEVICE, else auto].")
@click.pass_context
def crosscheck(ctx: click.Context, dataset: str, model: str, split: str, k_values: tuple[int, ...], batch_size: int,
               tolerance: float, data_dir: Path | None, use_cache: bool, device: str | None) -> None:
    """Run BEIR's own pipeline beside ours and print both metric sets and their differences.

    BEIR's side: GenericDataLoader, SentenceBERT, DenseRetrievalExactSearch (cosine),
    EvaluateRetrieval. Self-hits are dropped on both sides, as BEIR's search always does.
    Exit 1 if any metric differs by more than --tolerance.

    Example:

    \b
        beir-harness crosscheck scifact
        beir-harness crosscheck nfcorpus --model all-MiniLM-L6-v2 --k 10,100
    """
    from harness.pipeline.crosscheck import crosscheck as run

    result = run(dataset, model, split, k_values, batch_size, data_dir, cache=use_cache, progress=ctx.obj["progress"],
                 device=device)
    click.echo(result.format_text(tolerance))
    if result.largest() > tolerance:
        sys.exit(1)


@cli.group()
def cache() -> None:
    """List or clear the embedding cache.

    Entries are keyed by the model's weights and settings and the corpus content, so a rerun
    of the same model on the same data encodes nothing, and a change never hits a stale entry.

    Example:

    \b
        beir-harness cache list
        beir-harness cache clear --dataset scifact
    """


_cache_dir_option = click.option(
    "--cache-dir", type=click.Path(path_type=Path, file_okay=False), default=None,
    help="Embedding cache [default: $BEIR_HARNESS_CACHE_DIR, else ~/.cache/beir-harness on Linux].")


@cache.command("list")
@_cache_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the entries as JSON.")
def cache_list(cache_dir: Path | None, as_json: bool) -> None:
    """List cached embeddings: model, dataset, kind, rows, size, complete?

    Example:

    \b
        beir-harness cache list
    """
    from harness.io.cache import cache_dir as resolve, list_entries

    root = resolve(cache_dir)
    entries = list_entries(root)
    if as_json:
        click.echo(json.dumps(entries, indent=2))
        return
    logger.info("cache: %s", root)
    click.echo(_format_entries(entries))


def _format_entries(entries: list[dict]) -> str:
    from harness.presentation import align

    table = [["key", "kind", "dataset", "rows", "MB", "complete", "model"]]
    table += [[e["key"][:12], e["kind"] or "?", e["dataset"] or "?", f"{e['rows']:,}" if e["rows"] is not None else "-",
               f"{e['bytes'] / 2**20:.1f}", "yes" if e["complete"] else "partial", e["model"] or "?"] for e in entries]
    return "\n".join(align(table, right=[False, False, False, True, True, False, False]))


@cache.command("clear")
@_cache_dir_option
@click.option("--model", default=None,
              help="Only entries of this model (any name evaluate accepts, e.g. all-MiniLM-L6-v2).")
@click.option("--dataset", default=None, help="Only entries of this dataset.")
@click.option("--dry-run", is_flag=True, help="List what would be deleted; delete nothing.")
@click.option("--yes", "-y", is_flag=True, help="Clear the whole cache without asking.")
def cache_clear(cache_dir: Path | None, model: str | None, dataset: str | None, dry_run: bool, yes: bool) -> None:
    """Delete cached embeddings (all, or those of one model and/or dataset).

    Without a filter every entry goes, so it asks first (--yes skips the question). A filter
    that matches nothing is an error that lists the models and datasets that have entries.

    Example:

    \b
        beir-harness cache clear --dry-run
        beir-harness cache clear --model all-MiniLM-L6-v2 --dataset scifact
        beir-harness cache clear --yes
    """
    from harness.io.cache import cache_dir as resolve, clear_entries
    from harness.retrieval.encode import canonical_model_name

    root = resolve(cache_dir)
    model = canonical_model_name(model) if model else None
    chosen = clear_entries(root, model, dataset, dry_run=True)
    freed = sum(e["bytes"] for e in chosen) / 2**20
    count = f"{len(chosen)} entr{'y' if len(chosen) == 1 else 'ies'} ({freed:.1f} MB)"
    if dry_run:
        click.echo(_format_entries(chosen))
        click.echo(f"would remove {count} from {root}")
        return
    if model is None and dataset is None and chosen and not yes:
        click.confirm(f"remove all {count} from {root}?", abort=True, err=True)
    removed = clear_entries(root, model, dataset)
    freed = sum(e["bytes"] for e in removed) / 2**20
    click.echo(f"removed {len(removed)} entr{'y' if len(removed) == 1 else 'ies'} ({freed:.1f} MB) from {root}")


@cli.command("env")
@click.option("--data-dir", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Data dir [default: $BEIR_HARNESS_DATA_DIR or ./datasets].")
@_cache_dir_option
@click.option("--output-dir", type=click.Path(path_type=Path), default=Path("results"), show_default=True,
              help="Results folder.")
@click.option("--json", "as_json", is_flag=True, help="Print the block as JSON.")
@click.option("--bench", is_flag=True,
              help="Also encode one sample with each available backend (torch, onnx, onnx-int8): docs/s here and "
                   "cosine to torch fp32 (about 30 s).")
@click.option("--bench-texts", type=click.IntRange(min=1), default=256, show_default=True,
              help="With --bench: how many texts to encode.")
@click.option("--bench-dataset", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="With --bench: take the texts from this BEIR folder [default: the bundled demo corpus].")
@click.option("--model", default=None, help="With --bench: the model [default: the default model].")
def env(data_dir: Path | None, cache_dir: Path | None, output_dir: Path, as_json: bool, bench: bool,
        bench_texts: int, bench_dataset: Path | None, model: str | None) -> None:
    """Print versions, the host, torch's devices and the folders in use (for bug reports).

    Shows python, beir-harness, torch, sentence-transformers, transformers, faiss, pytrec_eval
    and numpy versions; the CPU and the instruction sets that pick kernels; CUDA devices and
    MPS; the data, cache and results folders actually used, installed datasets and cache size.
    With --bench, measures every backend on this machine: which is fastest here, and how far
    its vectors are from torch fp32's.

    Example:

    \b
        beir-harness env
        beir-harness env --json
        beir-harness env --bench
        beir-harness env --bench --bench-dataset ./my-eval-set --bench-texts 300
    """
    from harness.pipeline.environment import bench_backends, describe, format_bench, format_environment

    info = describe(data_dir, cache_dir, output_dir)
    if bench:
        info["backends"] = bench_backends(model, bench_texts, bench_dataset, cache_dir)
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    click.echo(format_environment(info))
    if bench:
        click.echo("")
        click.echo(format_bench(info["backends"], info["host"], bench_texts))


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="beir-harness")
