"""The commands that run a model over a dataset: evaluate, retrieve, bench, demo, crosscheck."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.api.settings import evaluate_config, third_party_bars, written_result
from harness.errors import HarnessError
from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset
from harness.pipeline.systems import (  # noqa: F401 - the command line's
    check_labels,
    parse_system,
    parse_systems,
    split_systems,
)
from harness.records import Result, Run

if TYPE_CHECKING:
    from harness.pipeline.bench import BenchReport
    from harness.pipeline.evaluate import Outcome


def evaluate(dataset: str | Path | EvaluateConfig, model: str | None = None, **settings: Any) -> Result:
    """Evaluate a system (``bm25``, a sentence-transformers name or folder, ``hash:64``, ``bm25 >> CE@100``, a fusion
    ``rrf(bm25, e5)`` whose members are evaluated and fused as `bench` does) on a dataset; the `Result`.

    Args:
        dataset: A BEIR folder, a registry name (``scifact``, ``FiQA2018``), or a whole `EvaluateConfig`.
        model: The model; default `EvaluateConfig`'s (all-MiniLM-L6-v2).
        **settings: Any other `EvaluateConfig` field (``split``, ``k_values``, ``output_dir`` — None writes
            nothing —, ``encoder``, ``index``, ``rerank``, ...). Progress bars are off unless
            ``progress=True`` (Hugging Face's own bars too: `third_party_bars`).

    Returns:
        The `Result`: ``metrics``, ``per_query``, ``config``; ``to_frame()`` and ``to_json()``; ``path`` and
        ``run_path``, the files written (``path`` None when ``output_dir`` is None).

    Raises:
        HarnessError: Bad data or settings, with a one-line message naming the setting at fault.
    """
    if isinstance(dataset, EvaluateConfig):
        if model is not None or settings:
            raise HarnessError("give either an EvaluateConfig or a dataset with settings, not both")
        config = dataset
    else:
        config = evaluate_config(dataset, model, settings)
    with third_party_bars(config.progress):  # transformers' "Loading weights" bar, too, only when asked
        return written_result(evaluate_dataset(config))


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
        model: The system, as `evaluate` takes it (a fusion's members retrieved and fused); default
            `EvaluateConfig`'s.
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
        config = evaluate_config(dataset, model, {"output_dir": None, "k_values": (1,), **settings})
    with third_party_bars(config.progress):
        return run_retrieval(config, out, queries)


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
    from harness.retrieval.compress import compression_grid

    systems = split_systems(systems) if isinstance(systems, str) else list(systems)
    datasets = [d.strip() for d in datasets.split(",")] if isinstance(datasets, str) else [str(d) for d in datasets]
    if not systems or not datasets:
        raise HarnessError("give at least one system and one dataset")
    if config is not None and settings:
        raise HarnessError("give either config or settings, not both")
    base = config or evaluate_config(None, parse_system(systems[0]).spec, settings)
    axes = [list(truncate_dims), list(embedding_precisions), list(rescore_multipliers)]
    compressions = compression_grid(base.compression, *axes) if any(axes) else []
    with third_party_bars(base.progress):
        return run_bench(systems, datasets, base, force=force, compressions=compressions)


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
