"""Retrieval without judgments: the first stage (and reranker) of `evaluate`, every query, a TREC run.

What pyserini users reach for: ``beir-harness retrieve DATASET --out run.trec`` searches the corpus for
all queries of the folder (or a queries file of your own) with the same stages, settings, embedding
cache and self-hit policy as `evaluate`, and writes the run — nothing is scored.
"""

from __future__ import annotations

import logging
from pathlib import Path

from harness.datasets.catalog import resolve_dataset
from harness.errors import DatasetError
from harness.io.formats import iter_queries, locate_corpus_and_queries
from harness.io.outputs import check_output_file
from harness.io.trec import write_run
from harness.pipeline.checks import checked
from harness.pipeline.config import EvaluateConfig
from harness.pipeline.evaluate import (
    apply_self_hit_policy,
    configuration,
    first_stage,
    rerank_stage,
    self_hit_policy,
)
from harness.pipeline.stages import Clock, Inputs
from harness.records import Qrels, Run

logger = logging.getLogger(__name__)


def retrieve(config: EvaluateConfig, out: str | Path, queries_path: str | Path | None = None) -> Run:
    """Search `config`'s dataset for every query and write the run to `out` (TREC, atomically).

    Args:
        config: What to retrieve with (`EvaluateConfig`: model, encoder, index, rerank, depth via
            ``top_k``; its qrels settings are unused).
        out: The run file to write.
        queries_path: A queries file (BEIR ``queries.jsonl``) to search instead of the folder's own.

    Returns:
        The run written (its tag is the configuration's label).

    Raises:
        HarnessError: As `evaluate_dataset`, or an external run in the config (nothing to retrieve).
    """
    if config.run_path is not None:
        raise DatasetError("retrieve makes a run; there is nothing to retrieve when one is given")
    check_output_file(out, "run file")  # before any work: not after the whole search
    clock = Clock()
    config, _, top_k, _ = checked(config)
    folder_path, dataset = resolve_dataset(
        config.dataset_path, config.data_dir, config.download, config.base_url, config.progress
    )
    folder = locate_corpus_and_queries(folder_path)
    inputs = Inputs(folder, config.dataset_name or dataset, digests={}, qrels=Qrels({}))
    inputs.queries = list(iter_queries(Path(queries_path) if queries_path else folder.queries))
    if not inputs.queries:
        raise DatasetError(f"{queries_path or folder.queries}: no queries to search")
    ignore_identical_ids, _ = self_hit_policy(config, inputs.dataset)
    stage = first_stage(config, inputs, None, top_k + int(ignore_identical_ids), top_k, clock)
    run = apply_self_hit_policy(stage.run, ignore_identical_ids).truncated(top_k)
    if config.rerank is not None:
        run, _ = rerank_stage(config, run, inputs.queries, folder)
    label = configuration(config, inputs.dataset, stage.model_name).label(config.name)
    run = run.renamed(label)
    write_run(run, out)
    logger.info(
        "%d queries × up to %d documents (%s) → %s in %.1f s", len(run), top_k, label, out, clock.rounded()["total"]
    )
    return run
