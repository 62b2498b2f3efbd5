"""The Python API: what ``from harness import ...`` gives (loaded lazily by `harness.__getattr__`).

    from harness import evaluate, score, judge, read_qrels, read_run, Qrels, Run, EvaluateConfig

`evaluate` runs the pipeline on a dataset and returns its `Result`; `score` scores any run against any
qrels with the evaluation rules of `harness.evaluation.metrics` (trec_eval exact); `judge` grades a pool
with an LLM (`harness.judging.llm`). The command line is a thin layer over the same functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from harness.errors import DatasetError, HarnessError, setting
from harness.evaluation.metrics import Evaluation, evaluate as _score, parse_metric
from harness.io.formats import read_qrels, read_run
from harness.io.service import EndpointSpec
from harness.judging.llm import JudgeReport, JudgeSpec, judge_pool
from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset
from harness.records import Qrels, Run
from harness.reporting.report import Result

DEFAULT_METRICS = ("nDCG@10", "MAP@100", "Recall@100", "P@10", "MRR@10")

__all__ = ["EvaluateConfig", "Qrels", "Result", "Run", "evaluate", "judge", "pool_status", "read_qrels", "read_run",
           "score"]


def evaluate(dataset: str | Path | EvaluateConfig, model: str | None = None, **settings: Any) -> Result:
    """Evaluate a model (``bm25``, a sentence-transformers name or folder) on a dataset; the `Result`.

    Args:
        dataset: A BEIR folder, a registry name (``scifact``, ``FiQA2018``), or a whole `EvaluateConfig`.
        model: The model; default `EvaluateConfig`'s (all-MiniLM-L6-v2).
        **settings: Any other `EvaluateConfig` field (``split``, ``k_values``, ``output_dir`` — None writes
            nothing —, ``encoder``, ``index``, ``rerank``, ...). Progress bars are off unless
            ``progress=True``.

    Raises:
        HarnessError: Bad data or settings, with a one-line message naming the setting at fault.
    """
    if isinstance(dataset, EvaluateConfig):
        if model is not None or settings:
            raise HarnessError("give either an EvaluateConfig or a dataset with settings, not both")
        return evaluate_dataset(dataset).result
    known = {spec.name for spec in fields(EvaluateConfig)}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise HarnessError(f"unknown setting {setting(unknown[0])}; EvaluateConfig has {', '.join(sorted(known))}")
    settings.setdefault("progress", False)
    if model is not None:
        settings["model"] = model
    return evaluate_dataset(EvaluateConfig(dataset_path=dataset, **settings)).result


def score(qrels: Qrels | Mapping[str, Mapping[str, int]] | str | Path,
          run: Run | Mapping[str, Mapping[str, float]] | str | Path,
          metrics: Iterable[str] = DEFAULT_METRICS, judged_only: bool = False) -> Evaluation:
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
        raise DatasetError(f"{run_name}: none of the run's {len(run)} query ids has results judged in {qrels_name} "
                           f"(run: {_examples(run)}; qrels: {_examples(qrels)}); the run was made for other "
                           "queries, or with other ids")
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
