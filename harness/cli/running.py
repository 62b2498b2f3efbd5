"""Commands that run a model over a dataset: demo, evaluate, retrieve, bench, crosscheck."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from harness.cli.options import (
    BATCH_SIZE,
    DATA,
    DATA_DIR,
    DEPTH,
    DEVICE,
    ENDPOINT,
    ENGINE,
    FORCE,
    INDEX,
    JSON,
    K_VALUES,
    METRIC,
    MODEL,
    MODEL_NAME,
    OUT,
    OUTPUT,
    QUERIES,
    RUN,
    SCORED_DATA,
    SCORED_OUTPUT,
    SPLIT,
    SYSTEMS,
    TOLERANCE,
    USE_CACHE,
    Option,
    Sectioned,
    show_result,
)
from harness.errors import HarnessError

logger = logging.getLogger("harness")

# One first-stage pool for every rerank of the command (evaluate's and bench's, beside the rerank options).
CANDIDATES = Option(
    "--candidates",
    default=None,
    metavar="RUN_OR_SYSTEM",
    help="One candidate set for every rerank written '>> CROSS_ENCODER': a run file, or a system (bm25, "
    "'rrf(bm25, e5)'); each query's top --depth documents after the dataset's exclusions, recorded by digest in "
    "each rerank's result.",
)
CANDIDATES_DEPTH = DEPTH.but(
    "candidates_depth",
    default=None,
    show_default=False,
    metavar="N",
    help="With --candidates: documents per query in the candidate set, every one reranked [default: 100].",
)


@click.command()
@MODEL_NAME
@click.pass_context
def demo(ctx: click.Context, model: str) -> None:
    """Score the bundled lesson eval set (15 products, 5 queries) with a model.

    Prints, per query, the relevant ids, the top-3 retrieved ids, Recall@3 and the
    reciprocal rank (RR@10), then the means and nDCG@10.

    Example:

    \b
        beir-harness demo
    """
    from harness.api import demo as run_demo

    outcome = run_demo(model, progress=ctx.obj["progress"])
    click.echo(_format_demo(outcome))


ALLOW_UNKNOWN_DOCS = Option(
    "--allow-unknown-docs",
    is_flag=True,
    help="With --run: score documents that are not in the corpus as non-relevant instead of refusing the run.",
)


def _format_demo(outcome) -> str:
    result, run, qrels = outcome.result, outcome.run, outcome.qrels
    lines = [
        f"demo: lesson eval set, {result.config['n_docs']} documents, {result.n_queries} queries, model {result.model}",
        "",
    ]
    rows = [("query", "relevant", "top-3", "Recall@3", "RR@10")]
    for query_id in qrels:
        relevant = sorted(qrels.relevant(query_id), key=lambda d: (len(d), d))
        top = [hit.doc_id for hit in run.get(query_id, ())[:3]]
        values = result.per_query[query_id]
        rows.append(
            (
                query_id,
                f"[{', '.join(relevant)}]",
                f"[{', '.join(top)}]",
                f"{values['Recall@3']:.2f}",
                f"{values['MRR@10']:.2f}",
            )
        )
    rows.append(("mean", "", "", f"{result.metrics['Recall@3']:.2f}", f"{result.metrics['MRR@10']:.2f}"))
    from harness.presentation import align

    lines += align(rows, right=[False] * 5)
    lines += [
        "",
        f"mean Recall@3 {result.metrics['Recall@3']:.2f}   MRR@10 {result.metrics['MRR@10']:.2f}   "
        f"nDCG@10 {result.metrics['nDCG@10']:.4f}",
    ]
    return "\n".join(lines)


@click.command(cls=Sectioned)
@click.argument("dataset", type=click.Path(path_type=Path))
@SCORED_DATA.plus(RUN, ALLOW_UNKNOWN_DOCS)
@DATA
@MODEL.plus(
    MODEL_NAME.but(
        help="The first stage: bm25; a sentence-transformers bi-encoder or SparseEncoder (SPLADE), by hub id, "
        "short alias (all-MiniLM-L6-v2) or local folder; openai:MODEL (an OpenAI-compatible embedding "
        "service, with --endpoint); hash:DIM (a hashing stand-in, no model); run:FILE (score a run); or a "
        "system as bench writes one: FIRST >> CROSS_ENCODER@DEPTH, a fusion rrf(bm25, hash:64) (its members "
        "evaluated and fused as bench does); '>> CROSS_ENCODER' reranks --candidates. A cross-encoder alone goes "
        "to --rerank."
    ),
    CANDIDATES,
    CANDIDATES_DEPTH,
)
@ENDPOINT
@INDEX
@ENGINE
@SCORED_OUTPUT.plus(JSON)
@OUTPUT
@click.pass_context
def evaluate(
    ctx: click.Context,
    dataset: Path,
    model: str,
    as_json: bool,
    run_path: Path | None,
    allow_unknown_docs: bool,
    **options,
) -> None:
    """Evaluate a model, or an external run, on a BEIR folder or dataset.

    DATASET is a folder with corpus.jsonl[.gz], queries.jsonl[.gz] and `qrels/<split>.tsv`, or a
    BEIR dataset name (see `beir-harness datasets list`; `cqadupstack/<forum>` for CQADupStack),
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
        beir-harness evaluate scifact --candidates "rrf(bm25, all-MiniLM-L6-v2)" --depth 100 \\
            --model ">> cross-encoder/ms-marco-MiniLM-L-6-v2"
    """
    from harness.api import evaluate as run_evaluate

    if allow_unknown_docs and run_path is None:
        raise click.UsageError("--allow-unknown-docs applies to --run only")
    result = run_evaluate(
        dataset,
        model,
        run_path=run_path,
        allow_unknown_docs=allow_unknown_docs,
        progress=ctx.obj["progress"],
        **options,
    )
    show_result(result, as_json)


@click.command(cls=Sectioned)
@click.argument("dataset", type=click.Path(path_type=Path))
@DATA.plus(
    QUERIES.but(
        "queries_path",
        type=click.Path(path_type=Path, dir_okay=False, exists=True),
        help="Search these queries (a BEIR queries.jsonl) instead of the dataset's own.",
    )
)
@MODEL.plus(
    MODEL_NAME.but(
        help="sentence-transformers model name or local folder (bi-encoder or sparse encoder), bm25, hash:DIM, "
        "openai:MODEL, FIRST >> CROSS_ENCODER@DEPTH, or a fusion rrf(bm25, hash:64) (the run bench fuses)."
    )
)
@ENDPOINT
@INDEX
@ENGINE
@OUTPUT.plus(OUT.but(required=True, help="The TREC run file to write (atomically)."))
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
    from harness.api import retrieve as run_retrieval

    run = run_retrieval(dataset, out, model, queries=queries_path, progress=ctx.obj["progress"], **options)
    click.echo(
        f"{out}: {len(run)} queries, up to {max((run.depth(q) for q in run), default=0)} documents each ({run.name})"
    )


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
    from harness.api.choices import embedding_precisions

    precisions = embedding_precisions()
    items = list(dict.fromkeys(item.strip() for item in (value or "").split(",") if item.strip()))
    bad = [item for item in items if item not in precisions]
    if bad:
        raise click.BadParameter(f"unknown precision {bad[0]!r}; use {', '.join(precisions)}", param=param)
    return items


def _systems(ctx: click.Context, param: click.Parameter, value: str) -> list[str]:
    from harness.api.running import check_labels, split_systems

    try:
        items = split_systems(value)
        check_labels(items)  # labels (LABEL=SYSTEM) checked here, so a bad one is a usage error (exit 2)
    except HarnessError as exc:
        raise click.BadParameter(str(exc)) from None
    if not items:
        raise click.BadParameter("give at least one system, comma-separated")
    return items


@click.command(cls=Sectioned)
@SCORED_DATA.plus(
    Option(
        "--datasets",
        "dataset_names",
        required=True,
        callback=_comma_list,
        help="Comma-separated datasets: registry names or BEIR folders.",
    )
)
@DATA
@MODEL.plus(
    SYSTEMS.but(
        "--models",
        "models",
        required=True,
        callback=_systems,
        metavar=None,
        help="Comma-separated systems: sentence-transformers names or folders (bi-encoders or sparse "
        "encoders), bm25, 'FIRST >> CROSS_ENCODER@DEPTH', or fusions 'METHOD(SYSTEM, SYSTEM[, "
        "norm=..., k=..., weights=W1:W2, depth=...])' with METHOD rrf, combsum, combmnz, wsum or dbsf; "
        "each optionally labelled LABEL=SYSTEM (e.g. 'hybrid=rrf(bm25, e5)'), its name in every table; "
        "'>> CROSS_ENCODER' reranks --candidates.",
    ),
    CANDIDATES,
    CANDIDATES_DEPTH,
)
@ENDPOINT
@INDEX.plus(
    Option(
        "--truncate-dims",
        callback=lambda ctx, param, value: _int_list(param, value),
        default=None,
        metavar="D,...",
        help="An axis of the grid: each dense system at each of these dimensions.",
    ),
    Option(
        "--embedding-precisions",
        callback=lambda ctx, param, value: _precisions(param, value),
        default=None,
        metavar="P,...",
        help="An axis of the grid: each dense system stored in each of these precisions (float32, int8, uint8, "
        "binary, ubinary).",
    ),
    Option(
        "--rescore-multipliers",
        callback=lambda ctx, param, value: _int_list(param, value),
        default=None,
        metavar="M,...",
        help="An axis of the grid for compressed precisions, e.g. 0,2 (raw and rescored).",
    ),
)
@ENGINE
@SCORED_OUTPUT.plus(METRIC.but(help="Metric of the summary table."), FORCE)
@OUTPUT
@click.pass_context
def bench(
    ctx: click.Context,
    models: list[str],
    dataset_names: list[str],
    metric: str,
    force: bool,
    truncate_dims: list[int],
    embedding_precisions: list[str],
    rescore_multipliers: list[int],
    **options,
) -> None:
    """Evaluate a grid of models × datasets; resumable.

    Each cell writes its result as `evaluate` does. A cell whose result already exists with the
    same settings (config hash) is skipped unless --force; a failing cell is reported and the
    rest go on (exit code 1 at the end). A fusion's systems are evaluated too, then their saved runs
    fused as `fuse` does. Prints a summary table and rewrites
    `<output-dir>/results.csv`, one row per dataset × model × split × metric.

    Example:

    \b
        beir-harness bench --models all-MiniLM-L6-v2,bm25 --datasets scifact,nfcorpus
        beir-harness bench --models bm25 --datasets scifact,./my-eval-set --metric Recall@100
        beir-harness bench --systems "bm25, all-MiniLM-L6-v2, rrf(bm25, all-MiniLM-L6-v2)" --datasets scifact
        beir-harness bench --datasets scifact \\
            --systems "bm25, e5=intfloat/e5-small-v2, hybrid=wsum(bm25, intfloat/e5-small-v2, weights=0.3:0.7)"
        beir-harness bench --models all-MiniLM-L6-v2 --datasets scifact --truncate-dims 384,256,128,64 \\
            --embedding-precisions float32,int8,binary --rescore-multipliers 0,2
        beir-harness bench --datasets scifact --candidates bm25 --depth 100 \\
            --systems ">> cross-encoder/ms-marco-MiniLM-L-6-v2, >> cross-encoder/ms-marco-TinyBERT-L-2-v2"
    """
    from harness.api import bench as run_bench

    report = run_bench(
        models,
        dataset_names,
        force=force,
        truncate_dims=truncate_dims or (),
        embedding_precisions=embedding_precisions or (),
        rescore_multipliers=rescore_multipliers or (),
        progress=ctx.obj["progress"],
        **options,
    )
    click.echo(report.format_table(metric))
    if report.csv_path:
        logger.info("wrote %s", report.csv_path)
    if report.failed:
        sys.exit(1)


@click.command()
@click.argument("dataset")
@MODEL_NAME.but(help="sentence-transformers model name or local folder.")
@SPLIT.but(help="Qrels split.")
@K_VALUES.but(help="Comma-separated cutoffs.")
@BATCH_SIZE.but(help="Texts per forward pass (both pipelines).")
@TOLERANCE
@DATA_DIR
@USE_CACHE.but(help="Let our side reuse cached embeddings (BEIR's side always encodes).")
@DEVICE.but(help="Where both sides run: auto, cpu, cuda, cuda:N, mps [default: $BEIR_HARNESS_DEVICE, else auto].")
@click.pass_context
def crosscheck(
    ctx: click.Context,
    dataset: str,
    model: str,
    split: str,
    k_values: tuple[int, ...],
    batch_size: int,
    tolerance: float,
    data_dir: Path | None,
    use_cache: bool,
    device: str | None,
) -> None:
    """Run BEIR's own pipeline beside ours and print both metric sets and their differences.

    BEIR's side: GenericDataLoader, SentenceBERT, DenseRetrievalExactSearch (cosine),
    EvaluateRetrieval. Self-hits are dropped on both sides, as BEIR's search always does.
    Exit 1 if any metric differs by more than --tolerance.

    Example:

    \b
        beir-harness crosscheck scifact
        beir-harness crosscheck nfcorpus --model all-MiniLM-L6-v2 --k 10,100
    """
    from harness.api import crosscheck as run

    result = run(
        dataset,
        model,
        split=split,
        k_values=k_values,
        batch_size=batch_size,
        data_dir=data_dir,
        cache=use_cache,
        progress=ctx.obj["progress"],
        device=device,
    )
    click.echo(result.format_text(tolerance))
    if result.largest() > tolerance:
        sys.exit(1)
