"""The `score` command: any run against any qrels, with trec_eval's rules."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from harness.errors import DatasetError
from harness.evaluation.metrics import (  # noqa: F401 - metric_families, parse_k_values: the command line's
    Evaluation,
    metric_families,
    parse_k_values,
    parse_metric,
)
from harness.evaluation.metrics import evaluate as _score
from harness.io.formats import read_qrels, read_run
from harness.io.trec import qrels_format  # noqa: F401 - the command line's
from harness.records import Qrels, Run

DEFAULT_METRICS = ("nDCG@10", "MAP@100", "Recall@100", "P@10", "MRR@10")


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


def _examples(ids: Iterable[str], n: int = 3) -> str:
    """A few ids, quoted, for an error message."""
    ids = sorted(ids)
    return ", ".join(map(repr, ids[:n])) + (", ..." if len(ids) > n else "")
