"""Export results for others' tools: MTEB's results layout, per-query CSV, TREC runs with readable tags.

MTEB (`export_mteb`): ``<out>/<org>__<model>/<revision>/<Task>.json`` plus ``model_meta.json`` in each
revision folder, as MTEB's results repository lays them out, so that MTEB's own loader (``mteb.ResultCache``
over a folder whose ``results/`` is `out`) and leaderboard tools read them. Each task file holds
``scores[<split>][0]`` with ``ndcg_at_k``, ``map_at_k``, ``recall_at_k``, ``precision_at_k`` and
``mrr_at_k`` for every cutoff the result stores, ``main_score`` (= ``ndcg_at_10``, MTEB's main score for
retrieval), ``hf_subset`` ``default`` and ``languages`` ``["eng-Latn"]``; ``evaluation_time`` is the
result's total seconds; ``mteb_version`` is null (MTEB did not run); our provenance (harness version,
data fingerprints, configuration, label) is under ``beir_harness``.
"""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from harness import __version__
from harness.datasets import registry
from harness.errors import HarnessError
from harness.io.files import write_json
from harness.io.trec import read_run, write_run
from harness.reporting.report import Result, check_results, model_slug

logger = logging.getLogger(__name__)

# Our metric families → MTEB's score key prefixes.
MTEB_FAMILIES = {"nDCG": "ndcg", "MAP": "map", "Recall": "recall", "P": "precision", "MRR": "mrr"}
NO_REVISION = "no_revision_available"


def mteb_scores(metrics: dict[str, float]) -> dict[str, Any]:
    """MTEB's score keys for our metrics: ``nDCG@10`` → ``ndcg_at_10`` (families MTEB does not name are left out)."""
    scores = {}
    for name, value in metrics.items():
        family, _, k = name.partition("@")
        if family in MTEB_FAMILIES and k.isdigit():
            scores[f"{MTEB_FAMILIES[family]}_at_{k}"] = value
    return dict(
        sorted(scores.items(), key=lambda item: (item[0].rsplit("_at_", 1)[0], int(item[0].rsplit("_at_", 1)[1])))
    )


def _task_file(result: Result, task: str) -> dict[str, Any]:
    scores = mteb_scores(result.metrics)
    if "ndcg_at_10" not in scores:
        raise HarnessError(
            f"{result.where}: no nDCG@10, MTEB's main score for retrieval; evaluate with --k including 10"
        )
    return {
        "dataset_revision": f"beir-corpus-sha256:{result.fingerprints.get('corpus', 'unknown')}",
        "task_name": task,
        "mteb_version": None,
        "scores": {
            registry.mteb_split_name(result.dataset, result.split): [
                {**scores, "main_score": scores["ndcg_at_10"], "hf_subset": "default", "languages": ["eng-Latn"]}
            ]
        },
        "evaluation_time": result.timings.get("total"),
        "kg_co2_emissions": None,
        "beir_harness": {
            "version": result.versions.get("beir-harness", __version__),
            "exported_by": __version__,
            "label": result.label,
            "dataset": result.dataset,
            "config_hash": result.config_hash,
            "fingerprints": result.fingerprints,
            "config": result.config,
            "n_queries": result.n_queries,
            "created": result.created,
        },
    }


def export_mteb(results: Sequence[Result], out: Path) -> list[Path]:
    """Write `results` in MTEB's results layout under `out`; returns the task files written.

    Results on datasets MTEB has no task for are skipped with a warning.

    Raises:
        HarnessError: Nothing exportable; two results would land in one task file (two configurations
            of one model on one task: export them separately); a result without nDCG@10.
    """
    planned: dict[Path, Result] = {}
    skipped = []
    for result in results:
        task = registry.mteb_task(result.dataset)
        if task is None:
            skipped.append(result.dataset)
            continue
        model = result.model
        revision = result.config.get("model_revision") or NO_REVISION
        path = out / model_slug(model) / model_slug(revision) / f"{task}.json"
        if path in planned:
            raise HarnessError(
                f"{planned[path].where} and {result.where} are both {model} on {task}: "
                "MTEB keeps one result per model and task; export one configuration at a time"
            )
        planned[path] = result
    if skipped:
        logger.warning("not exported (MTEB has no task for them): %s", ", ".join(sorted(set(skipped))))
    if not planned:
        raise HarnessError("nothing to export: MTEB has no task for any of these datasets")
    for path, result in planned.items():
        write_json(_task_file(result, path.stem), path)
        write_json(
            {
                "name": result.model,
                "revision": path.parent.name,
                "release_date": None,
                "languages": ["eng-Latn"],
                "framework": [],
                "beir_harness": __version__,
            },
            path.parent / "model_meta.json",
        )
    return sorted(planned)


PER_QUERY_COLUMNS = ("dataset", "system", "split", "query_id", "metric", "value")


def per_query_csv(results: Iterable[Result], metrics: Sequence[str] = ()) -> str:
    """One row per (dataset, system, split, query_id, metric, value): the input of a significance analysis
    in R or pandas. `metrics` limits the metrics (default: every one stored)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(PER_QUERY_COLUMNS)
    for result in sorted(results, key=lambda r: (r.dataset, r.label, r.split)):
        for query_id, values in sorted(result.per_query.items()):
            for metric, value in values.items():
                if not metrics or metric in metrics:
                    writer.writerow([result.dataset, result.label, result.split, query_id, metric, repr(value)])
    return buffer.getvalue()


def export_trec(results: Iterable[Result], out: Path) -> list[Path]:
    """Copy each result's run file to ``<out>/<dataset>/<label>.<split>.trec`` with the label as its tag.

    Raises:
        HarnessError: A run file missing beside its result.
    """
    written = []
    results = list(results)
    # Before anything is written: each run is the one its result was scored on.
    check_results(results, run_file=True, note=False)
    for result in results:
        source = result.run_path
        if not source.is_file():
            raise HarnessError(f"{source}: the run file beside {result.where} is missing; rerun that evaluation")
        label = model_slug(result.label.replace(" ", "_"))
        run = read_run(source)
        target = out / model_slug(result.dataset) / f"{label}.{model_slug(result.split)}.trec"
        write_run(run.renamed(label), target)
        written.append(target)
    return written
