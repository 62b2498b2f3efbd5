"""One candidate set for every reranker: ``--candidates RUN_OR_SYSTEM --depth N``.

Rerankers compared on different first stages compare first stages as much as rerankers. With a candidate set, every
rerank of the command written ``>> CROSS_ENCODER`` reranks the same pool: each query's top `N` documents of a run
file, or of a system's ranking (a fusion of several retrievers, say; evaluated first, its own result written as
``evaluate`` writes it), after the dataset's exclusions and self-hit policy. The pool is written once as a TREC run,
``candidates-<sha256 12>.trec`` (beside the results, else in the cache), whose sha256 is the set's digest: each
rerank's result records it (``config["candidates"]``, and ``fingerprints["run"]``), its model is
``run:candidates-<digest>.trec``, and ``report`` groups rerankers by it.

A run file whose queries are not the dataset's, or whose documents are not in its corpus, is refused in one line
naming its first such line, before any model loads; ``bench`` checks every dataset's set so (`check_candidate_sets`)
before its first cell, and a set that fails only when made fails only the cells that rerank it.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from harness.datasets.catalog import locate_dataset, resolve_dataset
from harness.errors import DatasetError, HarnessError, OutputError, setting
from harness.io.cache import cache_dir
from harness.io.files import private_dir
from harness.io.formats import iter_corpus, iter_queries, locate_beir_folder
from harness.io.lines import content_sha256, decode_line, iter_lines
from harness.io.trec import read_run, write_run
from harness.pipeline.config import DEFAULT_DEPTH, EvaluateConfig
from harness.pipeline.stages import Inputs, apply_exclusions, read_exclusions, self_hit_policy
from harness.pipeline.systems.registry import CANDIDATES, FUSION, RERANK, RUN, configure, parse_system
from harness.records import Run, model_slug

logger = logging.getLogger(__name__)

CANDIDATES_TAG = "candidates"  # the tag of every line of a candidate file (part of its digest)


def uses_candidates(model: str) -> bool:
    """Whether a system is a rerank of the candidate set (``>> CROSS_ENCODER``)."""
    system = parse_system(model)
    return system.kind is RERANK and system.first.kind is CANDIDATES


def bind_candidates(config: EvaluateConfig, evaluate: Callable) -> EvaluateConfig:
    """`config` with its candidate set made (`make_candidates`) when its system reranks it; else as it is.

    Raises:
        HarnessError: A candidate set given to a system that reranks nothing (``--candidates`` with ``--model bm25``),
            or as `make_candidates`.
    """
    spec = config.candidates
    if spec is None or spec.run_path is not None or config.run_path is not None:
        return config
    system = parse_system(config.model)
    if system.kind is RERANK:
        configure(system, config)  # a rerank naming its own first stage, or another depth: refused before any work
    if not uses_candidates(config.model):
        raise HarnessError(
            f"{setting('candidates')} gives reranks written '>> CROSS_ENCODER' their first stage; system "
            f"{config.model!r} reranks nothing: write --model '>> CROSS_ENCODER'"
        )
    return make_candidates(config, evaluate)


def check_candidate_sets(config: EvaluateConfig, datasets: Sequence[str]) -> list[str]:
    """`config.candidates` checked for every dataset of a grid before its first cell, cheaply: the depth, the source
    (a run file, or a system that parses and is no rerank of the set), and a run file's queries and documents against
    each dataset already on disk (one pass over its queries and corpus; one still to download is checked when its set
    is made). Returns the systems the source evaluates (its members for a fusion; none for a run file), for the
    caller to check as it checks its own.

    Raises:
        HarnessError: A depth below 1; a malformed system; a rerank of the set itself.
        DatasetError: A run file that is missing, or names a query or document one of the datasets does not have.
    """
    spec = config.candidates
    if spec.depth < 1:
        raise HarnessError(f"{setting('candidates_depth')} must be at least 1, got {spec.depth}")
    path = _run_file(spec.source)
    if path is None:
        system = parse_system(spec.source)
        if system.kind is RERANK and system.first.kind is CANDIDATES:
            raise HarnessError(f"candidates {spec.source!r}: the candidate set cannot be a rerank of itself")
        return [member.spec for member in system.members] if system.kind is FUSION else [spec.source]
    run = _read(path)
    fix = "a run file fits one dataset: bench that dataset alone, or give --candidates a system (e.g. bm25)"
    for dataset in datasets:
        folder_path, _, missing = locate_dataset(dataset, config.data_dir, config.download)
        if missing is None:
            _check_ids(path, run, locate_beir_folder(folder_path, config.split), fix if len(datasets) > 1 else "")
    return []


def make_candidates(config: EvaluateConfig, evaluate: Callable) -> EvaluateConfig:
    """Make `config.candidates` on `config`'s dataset and split: its run (read, or its system evaluated), the
    exclusions removed, each query cut to the set's depth, written as ``candidates-<sha256 12>.trec``; returns
    `config` with the set's file and digest. `evaluate` evaluates a system's config into an `Outcome`
    (`harness.pipeline.evaluate.evaluate_dataset`, passed in: that module makes candidate sets through this one).

    Raises:
        DatasetError: A run file naming queries the dataset does not have, or documents not in its corpus.
        HarnessError: A depth below 1; what evaluating the candidates' system raises.
    """
    spec = config.candidates
    if spec.depth < 1:
        raise HarnessError(f"{setting('candidates_depth')} must be at least 1, got {spec.depth}")
    folder_path, name = resolve_dataset(
        config.dataset_path, config.data_dir, config.download, config.base_url, config.progress
    )
    folder = locate_beir_folder(folder_path, config.split)
    dataset = config.dataset_name or name
    inputs = Inputs(folder, dataset, digests={})
    exclusions = read_exclusions(inputs, config.split, self_hit_policy(config, dataset)[0])
    path = _run_file(spec.source)
    run = _checked_run(path, folder) if path is not None else _system_run(config, evaluate)
    cut = apply_exclusions(run, exclusions).truncated(spec.depth)
    canonical = Run.adopt({q: dict(cut.scores_of(q)) for q in sorted(cut) if cut.depth(q)}, CANDIDATES_TAG)
    if not len(canonical):
        raise DatasetError(f"candidates {spec.source!r}: no query of {folder.queries} has a candidate")
    root = _folder(config, dataset)
    try:
        root.mkdir(parents=True, exist_ok=True)
        staging = private_dir(root, ".candidates")
    except OSError as exc:
        raise OutputError(f"{root}: cannot write the candidate set ({exc.strerror or exc})") from None
    try:
        write_run(canonical, staging / "candidates.trec")
        digest = content_sha256(staging / "candidates.trec")
        final = root / f"candidates-{digest[:12]}.trec"
        os.replace(staging / "candidates.trec", final)  # content-addressed: the same set is the same file
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    pairs = sum(canonical.depth(q) for q in canonical)
    logger.info("candidates %s: %d queries, %d pairs → %s", spec.source, len(canonical), pairs, final)
    return replace(config, candidates=replace(spec, run_path=final, sha256=digest))


def _run_file(source: str) -> Path | None:
    """The run file a candidate source names (``run:FILE``, or an existing file), else None (a system)."""
    if Path(source).is_file():
        return Path(source)
    system = parse_system(source)
    return Path(system.model) if system.kind is RUN else None


def _checked_run(path: Path, folder) -> Run:
    """A candidate run file, refused when made on another dataset: a query not in the folder's queries, or a
    document not in its corpus (one pass over each; before any model loads)."""
    run = _read(path)
    _check_ids(path, run, folder)
    return run


def _read(path: Path) -> Run:
    if not path.is_file():
        raise DatasetError(f"{path}: no such candidate run file (give a run file or a system to --candidates)")
    return read_run(path)


def _check_ids(path: Path, run: Run, folder, fix: str = "") -> None:
    """Refuse `run` where it names a query not in `folder`'s queries or a document not in its corpus: one line naming
    the run's first such line, and `fix` (default: make the candidates on this dataset)."""
    unknown = set(run) - {query.query_id for query in iter_queries(folder.queries)}
    if unknown:
        raise DatasetError(
            f"{_where(path, run, unknown, 0)}: {len(unknown)} candidate quer{'y is' if len(unknown) == 1 else 'ies are'}"
            f" not in {folder.queries} (e.g. {sorted(unknown)[0]!r}); the candidates were made on another dataset: "
            f"{fix or 'make them on this one'}"
        )
    docs = {hit.doc_id for hits in run.values() for hit in hits}
    for doc in iter_corpus(folder.corpus):
        docs.discard(doc.doc_id)
        if not docs:
            break
    if docs:
        raise DatasetError(
            f"{_where(path, run, docs, 2)}: {len(docs)} candidate document(s) are not in {folder.corpus} (e.g. "
            f"{sorted(docs)[0]!r}); the candidates were made on another corpus: {fix or 'make them on this one'}"
        )


def _where(path: Path, run: Run, ids: set[str], column: int) -> str:
    """``FILE:LINE`` of the first line of a TREC or MS MARCO run naming one of `ids` in its query (`column` 0) or
    document (2; MS MARCO's 1) column; ``FILE`` for a JSON run."""
    run_format = run.metadata.get("format")
    if run_format not in ("trec", "msmarco"):
        return str(path)
    column = 1 if column and run_format == "msmarco" else column
    for line_no, line in iter_lines(path, None):
        columns = decode_line(path, line_no, line).split()
        if len(columns) > column and columns[column] in ids:
            return f"{path}:{line_no}"
    return str(path)


def _system_run(config: EvaluateConfig, evaluate: Callable) -> Run:
    """The ranking of the candidates' system, evaluated as ``evaluate`` evaluates it (its result written beside the
    others), at least the set's depth deep."""
    spec = config.candidates
    system = parse_system(spec.source)
    if system.kind is RERANK and system.first.kind is CANDIDATES:
        raise HarnessError(f"candidates {spec.source!r}: the candidate set cannot be a rerank of itself")
    deep = spec.depth if spec.depth > max(DEFAULT_DEPTH, *config.k_values) else None
    source = replace(config, model=spec.source, candidates=None, rerank=None, run_path=None, name=None, top_k=deep)
    return evaluate(source).run


def _folder(config: EvaluateConfig, dataset: str) -> Path:
    """Where candidate files go: ``<output dir>/<dataset>/candidates/``, else the cache's ``candidates/``."""
    if config.output_dir is not None:
        return Path(config.output_dir) / model_slug(dataset) / "candidates"
    return cache_dir(config.cache_dir) / "candidates"
