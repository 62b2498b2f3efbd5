"""The Python API: what ``from harness import ...`` gives (loaded lazily by `harness.__getattr__`).

    from harness import evaluate, score, judge, read_qrels, read_run, Qrels, Run, EvaluateConfig

`evaluate` runs the pipeline on a dataset and returns its `Result`; `score` scores any run against any
qrels with the evaluation rules of `harness.evaluation.metrics` (trec_eval exact); `judge` grades a pool
with an LLM (`harness.judging.llm`). The command line is a thin layer over the same functions.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import DatasetError, HarnessError, setting
from harness.evaluation.metrics import Evaluation, parse_metric
from harness.evaluation.metrics import evaluate as _score
from harness.io.formats import read_qrels, read_run
from harness.io.service import EndpointSpec
from harness.judging.llm import JudgeReport, JudgeSpec, judge_pool
from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset
from harness.records import Qrels, Run
from harness.reporting.comparison import Comparison
from harness.reporting.report import Result

if TYPE_CHECKING:
    from harness.datasets.convert import ConversionSummary
    from harness.datasets.install import Installed
    from harness.datasets.validate import ValidationReport
    from harness.judging.agreement import Agreement
    from harness.judging.coverage import Coverage
    from harness.judging.merge import MergeReport
    from harness.pipeline.bench import BenchReport
    from harness.pipeline.evaluate import Outcome

DEFAULT_METRICS = ("nDCG@10", "MAP@100", "Recall@100", "P@10", "MRR@10")

__all__ = [
    "EvaluateConfig",
    "Qrels",
    "Result",
    "Run",
    "evaluate",
    "judge",
    "pool_status",
    "read_qrels",
    "read_run",
    "score",
]
# The other commands (docs/python-api.md): see the block below `score`.
__all__ += [
    "Comparison",
    "agreement",
    "bench",
    "cache_entries",
    "cache_size",
    "check_published",
    "clear_cache",
    "compare",
    "compression",
    "convert",
    "cost",
    "coverage",
    "crosscheck",
    "demo",
    "environment",
    "download_dataset",
    "export",
    "fuse",
    "fuse_runs",
    "import_dataset",
    "inspect_results",
    "list_datasets",
    "merge_judgments",
    "pool",
    "prune_cache",
    "read_results",
    "remove_dataset",
    "report",
    "report_page",
    "retrieve",
    "third_party_bars",
    "validate",
]


def evaluate(dataset: str | Path | EvaluateConfig, model: str | None = None, **settings: Any) -> Result:
    """Evaluate a model (``bm25``, a sentence-transformers name or folder) on a dataset; the `Result`.

    Args:
        dataset: A BEIR folder, a registry name (``scifact``, ``FiQA2018``), or a whole `EvaluateConfig`.
        model: The model; default `EvaluateConfig`'s (all-MiniLM-L6-v2).
        **settings: Any other `EvaluateConfig` field (``split``, ``k_values``, ``output_dir`` — None writes
            nothing —, ``encoder``, ``index``, ``rerank``, ...). Progress bars are off unless
            ``progress=True`` (Hugging Face's own bars too: `third_party_bars`).

    Returns:
        The `Result`: ``metrics``, ``per_query``, ``config``; ``to_frame()`` and ``to_json()``.

    Raises:
        HarnessError: Bad data or settings, with a one-line message naming the setting at fault.
    """
    if isinstance(dataset, EvaluateConfig):
        if model is not None or settings:
            raise HarnessError("give either an EvaluateConfig or a dataset with settings, not both")
        config = dataset
    else:
        config = _evaluate_config(dataset, model, settings)
    with third_party_bars(config.progress):  # transformers' "Loading weights" bar, too, only when asked
        return evaluate_dataset(config).result


def score(
    qrels: Qrels | Mapping[str, Mapping[str, int]] | str | Path,
    run: Run | Mapping[str, Mapping[str, float]] | str | Path,
    metrics: Iterable[str] = DEFAULT_METRICS,
    judged_only: bool = False,
) -> Evaluation:
    """Score a run against qrels: every judged query counts, ties as trec_eval breaks them.

    Args:
        qrels: `Qrels`, ``{query_id: {doc_id: grade}}``, or a qrels file: BEIR TSV, TREC qrels
            (``query_id 0 doc_id grade``) or JSON, told apart by their content (`read_qrels`).
        run: `Run`, ``{query_id: {doc_id: score}}``, or a run file: TREC, MS MARCO or JSON (`read_run`).
        metrics: Metric names in any spelling `harness.evaluation.metrics.parse_metric` accepts
            (``nDCG@10``, ``ndcg_cut_10``, ``R@100``, ``Judged@10``; ``map``, ``recip_rank``, ``ndcg``, ``AP``,
            ``RR`` without a cutoff read the whole run, as trec_eval's do).
        judged_only: Count only the judged queries the run has results for (trec_eval without ``-c``);
            by default every judged query counts and a missing one scores 0 (trec_eval ``-c``).

    Returns:
        The `Evaluation`: ``means`` and ``per_query`` under canonical names.

    Raises:
        HarnessError: A bad file (naming its line), an unknown metric, or a run sharing no query with the qrels.
    """
    specs = [parse_metric(name) for name in metrics]  # a wrong name fails before any file is read
    qrels_name = str(qrels) if isinstance(qrels, (str, Path)) else "the qrels"
    run_name = str(run) if isinstance(run, (str, Path)) else getattr(run, "metadata", {}).get("source", "the run")
    if isinstance(qrels, (str, Path)):
        qrels = read_qrels(qrels)
    elif not isinstance(qrels, Qrels):
        qrels = Qrels(qrels)
    if isinstance(run, (str, Path)):
        run = read_run(run)
    elif not isinstance(run, Run):
        run = Run.from_scores(run)
    retrieved = {query_id for query_id, docs in run.trec_eval_input(qrels).items() if docs}
    if not retrieved:
        raise DatasetError(
            f"{run_name}: none of the run's {len(run)} query ids has results judged in {qrels_name} "
            f"(run: {_examples(run)}; qrels: {_examples(qrels)}); the run was made for other "
            "queries, or with other ids"
        )
    if judged_only:
        qrels = Qrels({query_id: qrels[query_id] for query_id in qrels if query_id in retrieved})
    return _score(qrels, run, specs)


def pool_status(pool: str | Path, dataset: str | Path | None = None, judgments: Iterable[str | Path] = ()):
    """How much of a pool (``beir-harness pool --out``) is judged: `harness.judging.status.pool_status`.

    Args:
        pool: The pool folder.
        dataset: The dataset it was made on; default: the one its manifest names.
        judgments: More judgments files (the judging page's exports) besides those in the pool folder.

    Returns:
        A `harness.judging.status.PoolStatus`: ``n_judged`` of ``n_pairs``, ``queries_by_state()``,
        ``annotators``, ``stale`` (the dataset files changed since pooling), ``to_json()``.
    """
    from harness.judging.status import pool_status as status  # lazy: judging loads the merge machinery

    return status(pool, dataset, judgments)


def judge(pool: str | Path, model: str, endpoint: str | EndpointSpec | None = None, **settings: Any) -> JudgeReport:
    """Grade every pair of a pool folder (``beir-harness pool``) with an LLM, as annotator ``llm:MODEL``.

    Args:
        pool: The pool folder; the grades go to its ``judgments-llm_<model>.csv`` (and a JSON summary).
        model: The chat model, ``openai:MODEL``, behind an OpenAI-compatible ``/chat/completions`` endpoint.
        endpoint: Its base URL (``http://localhost:8000/v1``) or a whole `EndpointSpec` (concurrency,
            timeout, retries, price); None: ``$BEIR_HARNESS_ENDPOINT``.
        **settings: Any other `JudgeSpec` field (``answer_attempts``, ``cache_dir``, ``use_cache``).

    Returns:
        The `JudgeReport`: grades, pairs from the cache, malformed answers by kind, ungraded pairs, usage.

    Raises:
        HarnessError: A bad setting, not a pool folder, a pool not on 0-3, a refusing or failing service.
    """
    known = {spec.name for spec in fields(JudgeSpec)} - {"model", "endpoint"}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise HarnessError(f"unknown setting {setting(unknown[0])}; judge takes {', '.join(sorted(known))}")
    spec = endpoint if isinstance(endpoint, EndpointSpec) else EndpointSpec(url=endpoint)
    return judge_pool(pool, JudgeSpec(model, spec, **settings))


def _examples(ids: Iterable[str], n: int = 3) -> str:
    """A few ids, quoted, for an error message."""
    ids = sorted(ids)
    return ", ".join(map(repr, ids[:n])) + (", ..." if len(ids) > n else "")


# ----------------------------------------------------------------------------------------------------------------
# Every command as a function (docs/python-api.md). Each returns the library object its command prints; the command
# line calls these. Heavy modules load inside each function, so `from harness import score` stays light.
# ----------------------------------------------------------------------------------------------------------------

_DELIMITERS = {"comma": ",", "semicolon": ";", "tab": "\t", "pipe": "|"}


@contextmanager
def third_party_bars(enabled: bool = False) -> Iterator[None]:
    """Hugging Face's own progress bars (transformers' ``Loading weights``, hub downloads) on or off, for a block.

    The previous state comes back afterwards, so a caller's own choice outlives the call.

    Args:
        enabled: True leaves the bars as they are (a no-op); False turns them off inside the block.

    Returns:
        A context manager.
    """
    if enabled:
        yield
        return
    import importlib

    hub_tqdm = importlib.import_module("huggingface_hub.utils.tqdm")  # the module: `utils.tqdm` is its class

    saved = dict(hub_tqdm.progress_bar_states)
    logging_module = sys.modules.get("transformers.utils.logging")
    was_on = logging_module.is_progress_bar_enabled() if logging_module else None
    hub_tqdm.disable_progress_bars()  # transformers, when first imported inside the block, starts with its bars off
    if logging_module:
        logging_module.disable_progress_bar()
    try:
        yield
    finally:
        logging_module = sys.modules.get("transformers.utils.logging")
        if was_on is None:  # imported inside the block: it would have started as the hub stood before
            was_on = saved.get("_global", True) and not hub_tqdm.HF_HUB_DISABLE_PROGRESS_BARS
        if logging_module and was_on:
            logging_module.enable_progress_bar()
        hub_tqdm.progress_bar_states.clear()
        hub_tqdm.progress_bar_states.update(saved)


def _evaluate_config(dataset: str | Path | None, model: str | None, settings: dict[str, Any]) -> EvaluateConfig:
    """An `EvaluateConfig` from keyword settings, a wrong name refused with the list of right ones."""
    known = {spec.name for spec in fields(EvaluateConfig)}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise HarnessError(f"unknown setting {setting(unknown[0])}; EvaluateConfig has {', '.join(sorted(known))}")
    settings.setdefault("progress", False)
    if model is not None:
        settings["model"] = model
    return EvaluateConfig(dataset_path=dataset, **settings)


def _result_metric(name: str) -> str:
    """A metric name of a saved result (stored at cutoffs), in its canonical spelling."""
    from harness.evaluation.metrics import metric_families

    spec = parse_metric(name)
    if not spec.k and metric_families()[spec.name].cutoff:
        raise HarnessError(
            f"metric {name!r} has no cutoff, and results store {spec.name} at cutoffs: write e.g. "
            f"{spec.name}@10 (score() computes {spec.name} over a whole run)"
        )
    return str(spec)


def _results(items: Iterable[Result | str | Path] | str | Path, allow_mixed_data: bool = False) -> list[Result]:
    """Results given as `Result` objects, result files or folders (searched recursively)."""
    from harness.reporting.comparison import load_results

    items = [items] if isinstance(items, (str, Path, Result)) else list(items)
    given = [item for item in items if isinstance(item, Result)]
    paths = [item for item in items if not isinstance(item, Result)]
    return given + (load_results(paths, allow_mixed_data) if paths else [])


def read_results(
    results: Iterable[str | Path] | str | Path = ("results",), allow_mixed_data: bool = False
) -> list[Result]:
    """Load saved results (what `evaluate`, `bench` and `fuse` write), as `report` reads them.

    Args:
        results: Result JSON files, or folders searched recursively.
        allow_mixed_data: Results of one dataset computed on different data get labels of their own instead
            of an error.

    Returns:
        The `Result` objects.

    Raises:
        HarnessError: No result found, an unreadable file, or (without `allow_mixed_data`) one dataset on
            different data.
    """
    return _results(results, allow_mixed_data)


def convert(
    out: str | Path,
    corpus: str | Path | None = None,
    queries: str | Path | None = None,
    qrels: str | Path | None = None,
    *,
    eval_set: str | Path | None = None,
    columns: Mapping[str, str] | None = None,
    **options: Any,
) -> ConversionSummary:
    """Convert your own tables (or one eval-set file) into a BEIR folder, checking everything first.

    Args:
        out: The BEIR folder to create.
        corpus: Documents: .csv/.tsv/.jsonl/.json/.parquet, optionally .gz.
        queries: Queries, same formats.
        qrels: Judgments, same formats, or TREC qrels; None: not judged yet (a header-only split, to pool).
        eval_set: Instead of the three tables: one .json/.yaml file with documents and queries.
        columns: Explicit column names by role (``corpus_id``, ``corpus_text``, ``qrels_score``, ... as
            `harness.datasets.convert.ColumnMap`); the others are detected.
        **options: Any `ConvertOptions` field (``split``, ``force``, ``drop_empty``, ``allow_negative``,
            ``default_grade``, ``delimiter`` — a character or comma/semicolon/tab/pipe —, ``decimal_comma``,
            ``grade_scale`` — ``(0, 3)`` or ``"0-3"`` —, ``sheets`` — ``{"corpus": "Docs"}``, ``"*"`` for any
            table —).

    Returns:
        The `ConversionSummary`: counts, grades, how each file was read.

    Raises:
        HarnessError: Bad tables (every column problem at once, each row problem by line); nothing is written.
    """
    from harness.datasets.convert import ColumnMap, ConvertOptions, convert_eval_set, convert_tables

    known = {spec.name for spec in fields(ConvertOptions)} - {"columns"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise HarnessError(f"unknown setting {setting(unknown[0])}; convert takes {', '.join(sorted(known))}")
    roles = {spec.name for spec in fields(ColumnMap)}
    bad_roles = sorted(set(columns or {}) - roles)
    if bad_roles:
        raise HarnessError(f"unknown column role {bad_roles[0]!r}; use {', '.join(sorted(roles))}")
    if options.get("delimiter") in _DELIMITERS:
        options["delimiter"] = _DELIMITERS[options["delimiter"]]
    if isinstance(options.get("grade_scale"), str):
        from harness.datasets.convert import parse_grade_scale

        options["grade_scale"] = parse_grade_scale(options["grade_scale"])
    settings = ConvertOptions(columns=ColumnMap(**(columns or {})), **options)
    if eval_set is not None:
        if corpus or queries or qrels:
            raise HarnessError("give either eval_set or corpus/queries/qrels, not both")
        return convert_eval_set(eval_set, out, settings)
    if qrels is None and (corpus is None or queries is None):
        raise HarnessError("give corpus and queries (and qrels, unless not judged yet), or eval_set")
    return convert_tables(corpus, queries, qrels, out, settings)


def validate(folder: str | Path) -> ValidationReport:
    """Check a BEIR folder line by line and summarise it (the `validate` command).

    Args:
        folder: The BEIR folder (plain or .gz files).

    Returns:
        The `ValidationReport`: ``ok``, the problems (errors, warnings, notes) and counts per split;
        ``format_text()`` and ``to_json()`` are what the command prints.
    """
    from harness.datasets.validate import validate_folder

    return validate_folder(folder)


def coverage(folder: str | Path, run: str | Path, split: str = "test", k: int = 10) -> Coverage:
    """How much of a run's top `k` is judged in a BEIR folder (``validate --run``).

    Args:
        folder: The BEIR folder.
        run: A run file (TREC, MS MARCO or JSON).
        split: The qrels split measured.
        k: The depth measured.

    Returns:
        The `Coverage`: Judged@k and the unjudged top-k pairs (what is left to judge).

    Raises:
        HarnessError: An unreadable run or folder, or an unknown split.
    """
    from harness.judging.coverage import run_coverage

    return run_coverage(folder, split, run, k)


def bench(
    systems: Iterable[str] | str,
    datasets: Iterable[str | Path] | str,
    *,
    force: bool = False,
    truncate_dims: Iterable[int] = (),
    embedding_precisions: Iterable[str] = (),
    rescore_multipliers: Iterable[int] = (),
    config: EvaluateConfig | None = None,
    **settings: Any,
) -> BenchReport:
    """Evaluate a grid of systems × datasets, resumably (the `bench` command).

    Args:
        systems: Model names or folders, ``bm25``, ``FIRST >> CROSS_ENCODER@DEPTH``, fusions
            ``rrf(bm25, e5)``, each optionally ``LABEL=SYSTEM``; a string is split at top-level commas.
        datasets: Registry names or BEIR folders.
        force: Redo cells whose result already exists with the same settings.
        truncate_dims, embedding_precisions, rescore_multipliers: Compression axes of the grid.
        config: The settings of every cell as an `EvaluateConfig` (its dataset and model are ignored).
        **settings: Or the same settings as keywords (``output_dir``, ``k_values``, ...), as `evaluate` takes.

    Returns:
        The `BenchReport`: its cells (result paths, skipped, failed) and ``format_table(metric)``.

    Raises:
        HarnessError: A bad system or setting (a failing cell is reported in the report, not raised).
    """
    from harness.pipeline.bench import run_bench
    from harness.pipeline.systems import parse_system, split_systems
    from harness.retrieval.compress import compression_grid

    systems = split_systems(systems) if isinstance(systems, str) else list(systems)
    datasets = [d.strip() for d in datasets.split(",")] if isinstance(datasets, str) else [str(d) for d in datasets]
    if not systems or not datasets:
        raise HarnessError("give at least one system and one dataset")
    if config is not None and settings:
        raise HarnessError("give either config or settings, not both")
    base = config or _evaluate_config(None, parse_system(systems[0]).spec, settings)
    axes = [list(truncate_dims), list(embedding_precisions), list(rescore_multipliers)]
    compressions = compression_grid(base.compression, *axes) if any(axes) else []
    with third_party_bars(base.progress):
        return run_bench(systems, datasets, base, force=force, compressions=compressions)


def report(
    results: Iterable[Result | str | Path] | str | Path = ("results",),
    metric: str = "nDCG@10",
    *,
    split: str | None = None,
    published: bool = False,
    published_systems: Iterable[str] = (),
    published_from: Iterable[str | Path] = (),
    significance: str | None = None,
    alpha: float = 0.05,
    correction: str = "holm",
    rounds: int = 10_000,
    allow_mixed_data: bool = False,
) -> Comparison:
    """Tabulate results, datasets × systems, with published scores and significance (the `report` command).

    Args:
        results: `Result` objects, result files, or folders searched recursively.
        metric: The metric tabulated (at a cutoff: ``nDCG@10``, ``ndcg_cut_10``).
        split: The split reported; default each dataset's registry evaluation split.
        published: Add the published scores as columns, with deltas.
        published_systems: Published systems to add as columns (``bm25+ce``, ``splade-pp-ed``).
        published_from: MTEB results folders whose scores become columns.
        significance: Mark cells that differ significantly from this baseline system.
        alpha, correction, rounds: The significance level, ``holm`` or ``bonferroni``, randomization rounds.
        allow_mixed_data: Results computed on different data become rows of their own instead of an error.

    Returns:
        The `Comparison`; ``comparison.render("markdown" | "latex" | "csv" | "json")`` is the table.

    Raises:
        HarnessError: No results, an unknown metric, results of one dataset on different data.
    """
    from harness.reporting.comparison import build_comparison

    return build_comparison(
        _results(results, allow_mixed_data),
        _result_metric(metric),
        split,
        published,
        significance,
        alpha,
        correction,
        rounds,
        list(published_systems),
        list(published_from),
    )


def check_published(
    results: Iterable[Result | str | Path] | str | Path = ("results",),
    metric: str = "nDCG@10",
    *,
    tolerance: float | None = None,
    split: str | None = None,
) -> list:
    """Each result against the published score it should reproduce (``report --check-published``).

    Args:
        results: `Result` objects, result files, or folders searched recursively.
        metric: The metric compared.
        tolerance: Largest |ours - published| called OK; default the metric's (0.003 for nDCG@10).
        split: The split; default each dataset's evaluation split.

    Returns:
        One `harness.reporting.reproduction.Check` per result: ours, published, difference, ``status``
        (OK, OFF, or none without a published counterpart).

    Raises:
        HarnessError: No results, or an unknown metric.
    """
    from harness.reporting.reproduction import check_published as run_checks

    return run_checks(_results(results), _result_metric(metric), tolerance, split)


def compression(
    results: Iterable[Result | str | Path] | str | Path = ("results",),
    metric: str = "nDCG@10",
    *,
    split: str | None = None,
) -> list:
    """Quality against storage (``report --compression``): each dimension and precision of a model.

    Args:
        results: `Result` objects, result files, or folders searched recursively.
        metric: The metric set against bytes per document.
        split: The split; default each dataset's evaluation split.

    Returns:
        One `harness.reporting.compression.CompressionRow` per result: bytes per document and the share of
        the float32 full-dimension score kept.

    Raises:
        HarnessError: No dense flat-index result that records its bytes per document, or the metric missing.
    """
    from harness.reporting.compression import compression_rows

    return compression_rows(_results(results), _result_metric(metric), split)


def cost(
    results: Iterable[Result | str | Path] | str | Path = ("results",),
    metric: str = "nDCG@10",
    *,
    split: str | None = None,
) -> list:
    """Quality beside cost (``report --cost``): per result the metric and what the run cost.

    Args:
        results: `Result` objects, result files, or folders searched recursively.
        metric: The quality column.
        split: The split; default each dataset's evaluation split.

    Returns:
        One `harness.reporting.cost.CostRow` per result: seconds per phase and which were cached, wall time,
        documents/s, search latency p50/p95/p99, peak RSS, index and cache bytes, an endpoint's tokens and price
        (None where the result recorded none: results written before cost records).

    Raises:
        HarnessError: No result of that split.
    """
    from harness.reporting.cost import cost_rows

    return cost_rows(_results(results), _result_metric(metric), split)


def report_page(
    results: Iterable[Result | str | Path] | str | Path = ("results",),
    out: str | Path | None = None,
    *,
    allow_mixed_data: bool = False,
    **options: Any,
) -> str:
    """The self-contained HTML report page (``report --format html``): leaderboard, chart, drill-downs.

    Args:
        results: `Result` objects, result files, or folders searched recursively.
        out: Also write the page here (atomically).
        **options: Any `harness.reporting.page_data.PageOptions` field (``metric``, ``published``, ``baseline``,
            ``worst``, ``title``, ``digits``, ...).

    Returns:
        The page's HTML.

    Raises:
        HarnessError: No results, an unknown metric or option.
    """
    from harness.io.formats import write_text
    from harness.reporting.html import PageOptions, build_page, render_page

    known = {spec.name for spec in fields(PageOptions)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise HarnessError(f"unknown setting {setting(unknown[0])}; the page takes {', '.join(sorted(known))}")
    if "metric" in options:
        options["metric"] = _result_metric(options["metric"])
    page = render_page(build_page(_results(results, allow_mixed_data), PageOptions(**options)))
    if out is not None:
        write_text(page, Path(out))
    return page


def compare(
    first: Result | str | Path,
    second: Result | str | Path,
    metrics: Iterable[str] | None = None,
    rounds: int = 10_000,
    seed: int = 0,
) -> list:
    """Paired significance of `second` against `first`, per metric (the `compare` command).

    Args:
        first, second: Results (objects or result files) of one dataset, split and data.
        metrics: The metrics compared; default every metric both have.
        rounds, seed: The randomization test's rounds and seed.

    Returns:
        One `harness.evaluation.significance` test per metric: mean difference, t-test and randomization
        p-values, wins/ties/losses.

    Raises:
        HarnessError: Different datasets, splits, qrels or data.
    """
    from harness.reporting.comparison import compare_results
    from harness.reporting.report import check_same_data

    a, b = _results(first)[0], _results(second)[0]
    check_same_data([a, b])
    names = [_result_metric(name) for name in metrics] if metrics is not None else None
    return compare_results(a, b, names or None, rounds, seed)


def fuse(
    results: Iterable[str | Path],
    method: str = "rrf",
    *,
    norm: str = "minmax",
    weights: Iterable[float] | str | None = None,
    rrf_k: int = 60,
    depth: int = 1000,
    name: str | None = None,
    output_dir: str | Path | None = None,
) -> Result:
    """Fuse the runs saved beside two or more results (hybrid search) and score the fused run (`fuse`).

    Args:
        results: Result files of one dataset and split, each with its run file beside it.
        method: ``rrf``, ``combsum``, ``combmnz``, ``wsum`` or ``dbsf``.
        norm: ``minmax``, ``zscore`` or ``none`` (combsum, combmnz, wsum).
        weights: With ``wsum``: one weight per result (``(0.3, 0.7)`` or ``"0.3:0.7"``).
        rrf_k: The k of RRF.
        depth: Documents kept per query.
        name: The fused result's label; default e.g. ``wsum(bm25, e5; 0.3:0.7)``.
        output_dir: Where the fused result is written (``<dataset>/fusion/...``); None writes nothing.

    Returns:
        The fused run's `Result`.

    Raises:
        HarnessError: Results of different datasets or splits, a missing or altered run file, bad settings.
    """
    from harness.pipeline.fuse import fuse_results
    from harness.retrieval.fusion import FusionSpec, parse_weights

    if isinstance(weights, str):
        weights = parse_weights(weights)
    spec = FusionSpec(
        method=method, norm=norm, weights=tuple(weights) if weights is not None else None, rrf_k=rrf_k, depth=depth
    )
    return fuse_results([Path(p) for p in results], spec, Path(output_dir) if output_dir else None, name).result


def fuse_runs(
    runs: Iterable[str | Path],
    out: str | Path,
    method: str = "rrf",
    *,
    norm: str = "minmax",
    weights: Iterable[float] | str | None = None,
    rrf_k: int = 60,
    depth: int = 1000,
    name: str | None = None,
):
    """Fuse run files (TREC, MS MARCO, JSON) without qrels into one TREC run (``fuse RUN... --out``).

    Args:
        runs: Two or more run files; out: the fused TREC run written; method, norm, weights, rrf_k, depth,
            name: as for `fuse` (the name default: the fusion's label of the runs' tags, ``rrf(bm25, e5)``).

    Returns:
        A `harness.pipeline.fuse.FusedRun`: the fused run, its path, the runs' names; nothing scored.
    """
    from harness.pipeline.fuse import fuse_run_files
    from harness.retrieval.fusion import FusionSpec, parse_weights

    weights = parse_weights(weights) if isinstance(weights, str) else weights
    spec = FusionSpec(method, norm, tuple(weights) if weights is not None else None, rrf_k, depth)
    return fuse_run_files(list(runs), spec, out, name)


def export(
    results: Iterable[Result | str | Path] | str | Path,
    fmt: str,
    out: str | Path | None = None,
    *,
    metrics: Iterable[str] = (),
    split: str | None = None,
) -> list[Path] | str:
    """Export results for other tools (the `export` command).

    Args:
        results: `Result` objects, result files, or folders searched recursively.
        fmt: ``mteb`` (MTEB's results layout), ``csv`` (a row per dataset, system, split, query, metric) or
            ``trec`` (the run files, tagged with each result's label).
        out: The folder to write (mteb, trec), or the CSV file.
        metrics: With csv: only these metrics; default every one stored.
        split: Only results of this split; default each dataset's evaluation split.

    Returns:
        The files written; for csv without `out`, the CSV text.

    Raises:
        HarnessError: An unknown format, no `out` for a folder format, unreadable results.
    """
    from harness.io.formats import write_text
    from harness.reporting.comparison import results_of_split
    from harness.reporting.export import export_mteb, export_trec, per_query_csv

    if fmt not in ("mteb", "csv", "trec"):
        raise HarnessError(f"unknown export format {fmt!r}; use mteb, csv or trec")
    chosen = results_of_split(_results(results), split)
    if fmt == "csv":
        text = per_query_csv(chosen, [_result_metric(name) for name in metrics])
        if out is None:
            return text
        write_text(text, Path(out))
        return [Path(out)]
    if out is None:
        raise HarnessError(f"format {fmt} writes a folder: give {setting('out')}")
    return (export_mteb if fmt == "mteb" else export_trec)(chosen, Path(out))


def inspect_results(
    results: Iterable[Result | str | Path] | str | Path, worst: int = 10, metric: str = "nDCG@10", depth: int = 5
) -> dict[str, Any]:
    """The worst queries of a result, or where two results differ most (the `inspect` command).

    Args:
        results: One result, or two of one dataset (objects or result files).
        worst: How many queries.
        metric: The metric queries are ranked by.
        depth: Retrieved documents shown per query.

    Returns:
        The queries with their texts, judged documents, ranks and top documents (what ``inspect --json`` prints).

    Raises:
        HarnessError: More than two results, results on different data, an unknown metric.
    """
    from harness.reporting.inspect import inspect_results as run_inspect
    from harness.reporting.report import check_same_data

    chosen = _results(results)
    if len(chosen) > 2:
        raise HarnessError("give one result, or two to compare")
    return run_inspect(check_same_data(chosen), worst, _result_metric(metric), depth)


def retrieve(
    dataset: str | Path | EvaluateConfig,
    out: str | Path,
    model: str | None = None,
    *,
    queries: str | Path | None = None,
    **settings: Any,
) -> Run:
    """Search a corpus for every query and write a TREC run; nothing scored (the `retrieve` command).

    Args:
        dataset: A BEIR folder or registry name (qrels not needed), or a whole `EvaluateConfig`.
        out: The TREC run file to write (atomically).
        model: ``bm25`` or a sentence-transformers model; default `EvaluateConfig`'s.
        queries: Search these queries (a BEIR queries.jsonl) instead of the dataset's own.
        **settings: Any other `EvaluateConfig` field (``top_k``, ``encoder``, ``index``, ``progress``, ...).

    Returns:
        The `Run` written.

    Raises:
        HarnessError: Bad data or settings.
    """
    from harness.pipeline.retrieve import retrieve as run_retrieval

    if isinstance(dataset, EvaluateConfig):
        if model is not None or settings:
            raise HarnessError("give either an EvaluateConfig or a dataset with settings, not both")
        config = dataset
    else:
        config = _evaluate_config(dataset, model, {"output_dir": None, "k_values": (1,), **settings})
    with third_party_bars(config.progress):
        return run_retrieval(config, out, queries)


def demo(model: str | None = None, progress: bool = False) -> Outcome:
    """Score the bundled lesson eval set (15 products, 5 queries) with a model (the `demo` command).

    Args:
        model: A sentence-transformers model or ``bm25``; default `EvaluateConfig`'s.
        progress: Progress bars (ours and Hugging Face's).

    Returns:
        The `Outcome`: its ``result``, ``run`` and ``qrels``.
    """
    from harness.pipeline.demo import run_demo
    from harness.retrieval.encode import DEFAULT_MODEL

    with third_party_bars(progress):
        return run_demo(model=model or DEFAULT_MODEL, progress=progress)


def crosscheck(dataset: str | Path, model: str | None = None, **options: Any) -> Any:
    """Run BEIR's own pipeline beside ours (the `crosscheck` command; needs the ``beir`` package).

    Args:
        dataset: A registry name or BEIR folder.
        model: A sentence-transformers model; default `EvaluateConfig`'s.
        **options: ``split``, ``k_values``, ``batch_size``, ``data_dir``, ``cache``, ``device``, ``progress``.

    Returns:
        The `CrossCheck`: both metric sets; ``largest()`` is the largest difference.

    Raises:
        HarnessError: Bad data or settings; MissingDependencyError without the ``beir`` package.
    """
    from harness.pipeline.crosscheck import crosscheck as run_crosscheck
    from harness.retrieval.encode import DEFAULT_MODEL

    options.setdefault("progress", False)
    with third_party_bars(options["progress"]):
        return run_crosscheck(dataset, model or DEFAULT_MODEL, **options)


def pool(
    dataset: str | Path,
    out: str | Path,
    systems: Iterable[str] = (),
    runs: Iterable[str | Path] = (),
    *,
    depth: int = 10,
    max_per_query: int | None = None,
    add: str | Path | None = None,
    split: str | None = None,
    seed: int = 0,
    scale: Iterable[Mapping[str, Any]] | None = None,
    guidelines: str | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Pool the documents to judge (TREC depth-k) and write them with a blind judging page (the `pool` command).

    Args:
        dataset: A BEIR folder or installed registry dataset (qrels optional).
        out: The pool folder to create (never overwritten).
        systems: Systems as ``bench --systems`` writes them (models, fusions, ``LABEL=SYSTEM``; a comma-separated
            string or items), retrieved now, or with `runs` the runs to take (by tag or file name) and fuse.
        runs: Saved runs (TREC, MS MARCO, JSON) or result files to pool.
        depth: Top documents pooled from each system.
        max_per_query: At most this many documents per query (round-robin by rank).
        add: A file of extra (query id, document id) pairs to judge.
        split: Only this qrels split counts as judged; default every split.
        seed: Seeds the cap and the judging page's order.
        scale: The grade scale, ``[{"grade": 0, "label": "...", "definition": "..."}, ...]``; default 0-3.
        guidelines: The guidelines shown to the judges.
        progress: Progress bars of the systems retrieved.

    Returns:
        The pool's manifest (what ``manifest.json`` holds): counts, systems, settings.

    Raises:
        HarnessError: An existing `out`, unknown systems or runs, a bad scale.
    """
    from harness.judging.pool import PoolSources, PoolSpec, build_pool

    extra = {
        **({"scale": tuple(scale)} if scale is not None else {}),
        **({"guidelines": guidelines} if guidelines is not None else {}),
    }
    spec = PoolSpec(
        depth=depth, max_per_query=max_per_query, seed=seed, add=Path(add) if add else None, split=split, **extra
    )
    with third_party_bars(progress):
        return build_pool(
            dataset,
            PoolSources((systems,) if isinstance(systems, str) else tuple(systems), tuple(Path(r) for r in runs)),
            out,
            spec,
            progress,
        )


def _scale(scale: tuple[int, int] | str) -> tuple[int, int]:
    from harness.judging.merge import parse_scale

    if not isinstance(scale, str):
        return (int(scale[0]), int(scale[1]))
    try:
        return parse_scale(scale)
    except ValueError as exc:
        raise HarnessError(str(exc)) from None


def merge_judgments(
    folder: str | Path,
    files: Iterable[str | Path],
    split: str = "test",
    *,
    annotator: str | None = None,
    resolve: str = "majority",
    scale: tuple[int, int] | str = (0, 3),
    weights: str = "linear",
    write: bool = True,
    ties: str = "low",
) -> MergeReport:
    """Add judgment files (CSV or TREC qrels) to a split of a BEIR folder (``judgments merge``).

    Args:
        folder: The BEIR folder.
        files: Judgment files: CSV ``query_id,doc_id,grade[,annotator]`` or TREC qrels.
        split: The qrels split added to (created if absent).
        annotator: Annotator of rows that name none.
        resolve: ``majority``, ``mean``, ``max`` or ``strict`` (any disagreement refused).
        scale: The grade scale, ``(0, 3)`` or ``"0-3"``.
        weights: Cohen's κ weighting: ``none``, ``linear``, ``quadratic``.
        write: False checks and reports without writing.
        ties: Where the policy cannot decide: ``low`` (the lower grade), ``high`` or ``refuse``.

    Returns:
        The `MergeReport`: pairs added and changed, agreement, provenance.

    Raises:
        HarnessError: Unknown queries or documents, grades off the scale, an annotator grading a pair two ways,
            or (strict) a disagreement; nothing written.
    """
    from harness.judging.merge import merge_judgments as run_merge

    return run_merge(folder, list(files), split, annotator, resolve, _scale(scale), weights, write, ties)


def agreement(
    sources: Iterable[str | Path],
    split: str = "test",
    *,
    annotator: str | None = None,
    scale: tuple[int, int] | str = (0, 3),
    weights: str = "linear",
    level: str = "ordinal",
) -> Agreement:
    """Agreement of annotators on the pairs they both graded (``judgments agreement``).

    Args:
        sources: BEIR folders (their ``qrels/SPLIT.annotations.jsonl``) or judgment files.
        split: A folder's split whose annotations are read.
        annotator: Annotator of rows that name none (TREC qrels).
        scale: The grade scale, ``(0, 3)`` or ``"0-3"``.
        weights: Cohen's κ weighting: ``none``, ``linear``, ``quadratic``.
        level: Krippendorff's α level: ``ordinal``, ``interval``, ``nominal``.

    Returns:
        The `Agreement`: κ per annotator pair, α overall, confusion counts (``format_text()``).

    Raises:
        HarnessError: Unreadable sources, grades off the scale.
    """
    from harness.judging.agreement import agreement as measure
    from harness.judging.merge import judgment_votes

    low, high = _scale(scale)
    return measure(judgment_votes(list(sources), split, annotator, (low, high)), range(low, high + 1), weights, level)


def list_datasets(data_dir: str | Path | None = None) -> list[dict[str, Any]]:
    """Every BEIR dataset (split, size, counts, installed?, published scores?) and the custom ones installed.

    Args:
        data_dir: The data dir; default ``$BEIR_HARNESS_DATA_DIR`` or ``./datasets``.

    Returns:
        One dict per dataset, as ``datasets list --json`` prints them.
    """
    from harness.datasets.catalog import list_datasets as rows

    return rows(data_dir)


def download_dataset(
    name: str,
    data_dir: str | Path | None = None,
    *,
    base_url: str | None = None,
    force: bool = False,
    progress: bool = False,
) -> Installed:
    """Download, verify (md5, counts) and install a BEIR dataset; resumable (``datasets download``).

    Args:
        name: A registry name (``scifact``, ``cqadupstack``, ``nano-scifact``).
        data_dir: The data dir; default ``$BEIR_HARNESS_DATA_DIR`` or ``./datasets``.
        base_url: A mirror to download ``<base_url>/<name>.zip`` from; default ``$BEIR_HARNESS_MIRROR`` or BEIR's.
        force: Download and install again even when installed.
        progress: A download bar on stderr.

    Returns:
        The `Installed` dataset: its ``name`` and ``path``.

    Raises:
        HarnessError: An unknown or undistributed name, a failed download or checksum (nothing left behind).
    """
    from harness.datasets.catalog import download_dataset as download

    return download(name, data_dir, base_url, progress=progress, force=force)


def import_dataset(
    source: str | Path, data_dir: str | Path | None = None, *, name: str | None = None, force: bool = False
) -> Installed:
    """Install a local BEIR zip or folder, verified, offline (``datasets import``).

    Args:
        source: A BEIR zip or folder.
        data_dir: The data dir; default ``$BEIR_HARNESS_DATA_DIR`` or ``./datasets``.
        name: The dataset's name; default the file or folder name.
        force: Replace an installed dataset of that name.

    Returns:
        The `Installed` dataset; a non-BEIR one becomes a custom dataset usable by its name.

    Raises:
        HarnessError: A zip or folder that fails its checks, or a name already installed without `force`.
    """
    from harness.datasets.catalog import import_dataset as install

    return install(source, data_dir, name, force=force)


def remove_dataset(name: str, data_dir: str | Path | None = None) -> list[Path]:
    """Delete an installed dataset and its download leftovers (``datasets remove``).

    Args:
        name: The installed dataset.
        data_dir: The data dir; default ``$BEIR_HARNESS_DATA_DIR`` or ``./datasets``.

    Returns:
        The paths removed.

    Raises:
        HarnessError: Nothing of that name is installed.
    """
    from harness.datasets.catalog import remove_dataset as remove

    return remove(name, data_dir)


def environment(
    data_dir: str | Path | None = None,
    cache_dir: str | Path | None = None,
    output_dir: str | Path = "results",
    *,
    bench: bool = False,
    **bench_options: Any,
) -> dict[str, Any]:
    """Versions, the host, torch's devices and the folders in use (the `env` command).

    Args:
        data_dir: The data dir; default ``$BEIR_HARNESS_DATA_DIR`` or ``./datasets``.
        cache_dir: The cache dir; default ``$BEIR_HARNESS_CACHE_DIR`` or the user cache folder.
        output_dir: The results folder.
        bench: Also encode a sample with each available backend (``env --bench``, about 30 s).
        **bench_options: With `bench`: ``model``, ``texts``, ``dataset``.

    Returns:
        What ``env --json`` prints: ``versions``, ``host``, the folders, and with `bench` ``backends``.
    """
    from harness.pipeline.environment import bench_backends, describe

    info = describe(data_dir, cache_dir, output_dir)
    if bench:
        with third_party_bars(False):
            info["backends"] = bench_backends(cache=cache_dir, **bench_options)
    return info


def cache_entries(cache_dir: str | Path | None = None) -> list[dict[str, Any]]:
    """The cached embeddings (``cache list``).

    Args:
        cache_dir: The cache dir; default ``$BEIR_HARNESS_CACHE_DIR`` or the user cache folder.

    Returns:
        One dict per entry: ``key``, ``model``, ``dataset``, ``kind``, ``rows``, ``bytes``, ``complete``.
    """
    from harness.io.cache import cache_dir as resolve
    from harness.io.cache import list_entries

    return list_entries(resolve(cache_dir))


def cache_size(cache_dir: str | Path | None = None) -> dict[str, int]:
    """The cache's size on disk (``cache list`` prints it).

    Args:
        cache_dir: The cache dir; default ``$BEIR_HARNESS_CACHE_DIR`` or the user cache folder.

    Returns:
        Bytes per top-level folder (``embeddings``, ``texts``, ``models``, ``indexes``, ...) and ``total``.
    """
    from harness.io.cache import cache_dir as resolve
    from harness.io.textcache import cache_usage

    return cache_usage(resolve(cache_dir))


def prune_cache(
    cache_dir: str | Path | None = None,
    *,
    older_than: str | float | None = None,
    max_size: str | int | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Remove cached vectors unused for `older_than`, then the least recently used until `max_size` (``cache
    prune``); whatever a running evaluation reads stays.

    Args:
        cache_dir: The cache dir; default ``$BEIR_HARNESS_CACHE_DIR`` or the user cache folder.
        older_than: Seconds, or a duration such as ``30d``, ``12h``.
        max_size: Bytes, or a size such as ``10GB``, ``500MiB``: the most ``embeddings/`` and ``texts/`` keep.
        dry_run: Return what would go; delete nothing.

    Returns:
        ``removed`` (kind, path, bytes, last use of each) and ``usage`` (bytes per cache folder, after).
    """
    from harness.io.cache import cache_dir as resolve
    from harness.io.textcache import cache_usage, parse_duration, parse_size
    from harness.io.textcache import prune_cache as prune

    root = resolve(cache_dir)
    seconds = parse_duration(older_than) if isinstance(older_than, str) else older_than
    size = parse_size(max_size) if isinstance(max_size, str) else max_size
    removed = prune(root, seconds, size, dry_run=dry_run)
    return {"removed": removed, "usage": cache_usage(root)}


def clear_cache(
    cache_dir: str | Path | None = None, *, model: str | None = None, dataset: str | None = None, dry_run: bool = False
) -> list[dict[str, Any]]:
    """Delete cached embeddings, all or those of one model and/or dataset (``cache clear``; it never asks).

    Args:
        cache_dir: The cache dir; default ``$BEIR_HARNESS_CACHE_DIR`` or the user cache folder.
        model: Only entries of this model (any name `evaluate` accepts).
        dataset: Only entries of this dataset.
        dry_run: Return what would go; delete nothing.

    Returns:
        The entries removed (or, with `dry_run`, that would be).

    Raises:
        HarnessError: A filter that matches nothing (naming the models and datasets that have entries).
    """
    from harness.io.cache import cache_dir as resolve
    from harness.io.cache import clear_entries
    from harness.retrieval.encode import canonical_model_name

    return clear_entries(resolve(cache_dir), canonical_model_name(model) if model else None, dataset, dry_run=dry_run)
