"""Retrieval without judgments: the first stage (and reranker) of `evaluate`, every query, a TREC run.

What pyserini users reach for: ``beir-harness retrieve DATASET --out run.trec`` searches the corpus for
all queries of the folder (or a queries file of your own) with the same stages, settings, embedding
cache and self-hit policy as `evaluate`, and writes the run — nothing is scored.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from harness.datasets.catalog import resolve_dataset
from harness.errors import DatasetError
from harness.io.formats import iter_queries, locate_corpus_and_queries
from harness.io.outputs import check_output_file
from harness.io.trec import write_run
from harness.pipeline.checks import checked
from harness.pipeline.config import EvaluateConfig
from harness.pipeline.evaluate import (
    apply_exclusions,
    configuration,
    first_stage,
    read_exclusions,
    rerank_stage,
    self_hit_policy,
)
from harness.pipeline.fuse import as_saved
from harness.pipeline.stages import Clock, Inputs
from harness.pipeline.systems.registry import configure, settle, system_of
from harness.records import Qrels, Run
from harness.retrieval.fusion import fuse

logger = logging.getLogger(__name__)


def retrieve(config: EvaluateConfig, out: str | Path, queries_path: str | Path | None = None) -> Run:
    """Search `config`'s dataset for every query and write the run to `out` (TREC, atomically).

    A fusion's members are retrieved one by one and fused by `harness.retrieval.fusion.fuse`, the fusion `evaluate`,
    `bench` and `fuse` make, so that the run is the one they score.

    Args:
        config: What to retrieve with (`EvaluateConfig`: the system, encoder, index, rerank, depth via
            ``top_k``; its qrels settings are unused).
        out: The run file to write.
        queries_path: A queries file (BEIR ``queries.jsonl``) to search instead of the folder's own.

    Returns:
        The run written (its tag is the configuration's label, a fusion's `FusionSpec.label` of its members').

    Raises:
        HarnessError: As `evaluate_dataset`, or an external run in the config (nothing to retrieve).
    """
    if config.run_path is not None:
        raise DatasetError("retrieve makes a run; there is nothing to retrieve when one is given")
    config = settle(config)  # LABEL=, FIRST >> CROSS_ENCODER@DEPTH, run:FILE
    system = system_of(config)
    if not system.stage.kind.retrieves:
        raise DatasetError("retrieve makes a run; there is nothing to retrieve when one is given")
    check_output_file(out, "run file")  # before any work: not after the whole search
    clock = Clock()
    if system.fusion is None:
        members = [checked(config)]
    else:  # every member checked before any retrieves
        members = [checked(configure(member, replace(config, name=None))) for member in system.members]
    folder_path, dataset = resolve_dataset(
        config.dataset_path, config.data_dir, config.download, config.base_url, config.progress
    )
    folder = locate_corpus_and_queries(folder_path)
    queries = list(iter_queries(Path(queries_path) if queries_path else folder.queries))
    if not queries:
        raise DatasetError(f"{queries_path or folder.queries}: no queries to search")
    ranked = [_ranked(member, folder, config.dataset_name or dataset, queries, clock) for member in members]
    if system.fusion is None:
        run = ranked[0][0].renamed(ranked[0][1])
    else:
        label = config.name or system.fusion.label([member_label for _, member_label in ranked])
        run = fuse([as_saved(member_run) for member_run, _ in ranked], system.fusion, name=label)
    write_run(run, out)
    logger.info(
        "%d queries × up to %d documents (%s) → %s in %.1f s",
        len(run),
        system.depth(members[0][2]),
        run.name,
        out,
        clock.rounded()["total"],
    )
    return run


def _ranked(checked_config: tuple, folder, dataset: str, queries: list, clock: Clock) -> tuple[Run, str]:
    """One system's run over `queries` (its first stage, the exclusions of ``config.split`` when the folder has them
    and the self-hit policy, the depth cut, its reranker), and its label."""
    config, _, top_k, _ = checked_config
    inputs = Inputs(folder, dataset, digests={}, qrels=Qrels({}))
    inputs.queries = queries
    exclusions = read_exclusions(inputs, config.split, self_hit_policy(config, inputs.dataset)[0])
    stage = first_stage(config, inputs, None, top_k + exclusions.most, top_k, clock)
    run = apply_exclusions(stage.run, exclusions).truncated(top_k)
    if config.rerank is not None:
        run, _ = rerank_stage(config, run, inputs.queries, folder)
    return run, configuration(config, inputs.dataset, stage.model_name).label(config.name)
