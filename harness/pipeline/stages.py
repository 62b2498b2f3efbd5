"""What the stages of an evaluation share: the inputs they read, what the corpus pass learns, what a first
stage returns, the clock they report to, and the corpus checks every first stage makes."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from harness.datasets import registry
from harness.errors import DatasetError, HarnessError, setting
from harness.io.cache import CacheCorrupt
from harness.io.exclusions import load_exclusions
from harness.io.formats import BeirFolder, iter_corpus
from harness.io.ids import unknown_id_hint
from harness.metering import latency_record, peak_rss, per_second, reset_high_water, search_latencies
from harness.pipeline.config import EvaluateConfig
from harness.presentation import size_text
from harness.records import Doc, Exclusions, Qrels, Query, Result, Run

logger = logging.getLogger(__name__)

DOC_TEXT_RULE = "(title + ' ' + text).strip()"


@dataclass(frozen=True)
class Outcome:
    """The result of one evaluation (or fusion), the run it scored, and where they were written."""

    result: Result
    run: Run
    qrels: Qrels
    paths: tuple[Path, Path] | None = None


@dataclass
class CorpusState:
    """What the corpus pass learns: its hash, size, and which judged documents it has seen."""

    sha256: str
    dataset: str
    judged: set[str]
    unseen: set[str]
    n_docs: int = 0
    cached: bool = False
    stored: str = "off"  # what the result records as embedding_cache (`harness.io.cache.cache_record`)
    unseen_run: set[str] = field(default_factory=set)  # an external run's doc_ids not met yet
    workers: list[str] = field(default_factory=list)  # where Ray actors encoded (their own devices)

    def tick(self, doc_ids) -> None:
        self.n_docs += len(doc_ids)
        self.unseen.difference_update(doc_ids)
        if self.unseen_run:
            self.unseen_run.difference_update(doc_ids)


class Clock:
    """Seconds per phase of one evaluation: ``with clock.stage("encode_corpus"): ...``.

    Phases: load, encode_corpus, encode_queries, index, search, score (always present), and rerank,
    exact_search, latency_probe, prepare_model (`take_preparation`) and probe_backend (``--backend auto``'s probe,
    its candidates' exports included) when they happen; a phase served from the cache is marked (`mark_cached`) and
    takes 0 s. `rounded` adds ``encode`` (corpus + queries, the one encode phase results recorded before cost
    records) and ``total``, the wall time since the clock started.
    """

    PHASES = ("load", "encode_corpus", "encode_queries", "index", "search", "score")

    def __init__(self, reset_peak_memory: bool = False):
        """`reset_peak_memory`: restart the process's peak-RSS count now (`harness.metering.reset_high_water`), so
        that the cost record's peak is this evaluation's own (``rss_scope`` says whether it could)."""
        self.seconds: dict[str, float] = dict.fromkeys(self.PHASES, 0.0)
        self.cached: list[str] = []
        self.rss_scope = "evaluation" if reset_peak_memory and reset_high_water() else "process"
        self._started = time.perf_counter()

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - started)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def move(self, seconds: float, out_of: str, into: str) -> None:
        """Count `seconds` timed inside phase `out_of` as phase `into` instead (never below 0 s in `out_of`)."""
        self.add(into, seconds)
        self.add(out_of, -min(seconds, self.seconds.get(out_of, 0.0)))

    @contextmanager
    def moved(self, out_of: str, into: str) -> Iterator[None]:
        """A block timed inside phase `out_of` whose seconds count as phase `into`: ``with clock.stage("load"):
        ... with clock.moved("load", "probe_backend"): ...``."""
        started = time.perf_counter()
        try:
            yield
        finally:
            seconds = time.perf_counter() - started
            self.add(into, seconds)
            self.add(out_of, -seconds)  # not clamped: `out_of` is still being timed, and adds these seconds as it ends

    def mark_cached(self, phase: str) -> None:
        """Say that `phase` was served from the cache (its vectors or index were read, not computed)."""
        if phase not in self.cached:
            self.cached.append(phase)

    def rounded(self) -> dict[str, float]:
        """The phases, ``encode`` and the total, to 0.1 ms (what a result records)."""
        encode = self.seconds["encode_corpus"] + self.seconds["encode_queries"]
        return {
            name: round(seconds, 4)
            for name, seconds in {
                **self.seconds,
                "encode": encode,
                "total": time.perf_counter() - self._started,
            }.items()
        }


PREPARE_MODEL = "prepare_model"  # the phase of a model's preparation (export, calibration, quantize, compile)
PROBE_BACKEND = "probe_backend"  # the phase of ``--backend auto``'s probe (its candidates' preparation included)


def take_preparation(clock: Clock, encoder: object, cost: dict[str, object]) -> None:
    """Move the preparation of `encoder`'s model (an ONNX or OpenVINO encoder's record of its export, quantization,
    calibration and compile: `harness.runtimes.preparation.Preparation`) out of the phase it was timed in
    into its own, and its steps into ``cost["model_preparation"]``; nothing for a model without one or not loaded
    (its vectors all cached). A model loaded up front was prepared in ``load``; one loaded lazily
    (`harness.retrieval.encode.LazyEncoder`) as it first encoded: the corpus, or the queries when every corpus
    vector was cached."""
    record = getattr(encoder, "preparation", None)
    if not record or "model_preparation" in cost:
        return
    phase = "load" if not hasattr(encoder, "loaded") else "encode_corpus"
    phase = "encode_queries" if phase == "encode_corpus" and "encode_corpus" in clock.cached else phase
    clock.move(record["seconds"], phase, PREPARE_MODEL)
    cost["model_preparation"] = record


def probe_latency(clock: Clock, cost: dict[str, object], search_one, n_queries: int) -> None:
    """After the batch search: search a sample of the queries one at a time (`search_one(position)`) and put
    their latency into `cost` (`harness.metering.search_latencies`); the probe's time is its own phase."""
    with clock.stage("latency_probe"):
        seconds = search_latencies(search_one, n_queries, clock.seconds["search"])
    cost["search_latency"] = latency_record(seconds, n_queries)


def checked_corpus(folder: BeirFolder, corpus: CorpusState, digest=None) -> Iterator[Doc]:
    """Stream the corpus, ticking off judged doc_ids as they pass (ids with whitespace are refused)."""
    for doc in iter_corpus(folder.corpus, digest, check_ids=True):
        corpus.tick((doc.doc_id,))
        yield doc


def check_corpus(folder: BeirFolder, corpus: CorpusState) -> None:
    """Refuse an empty corpus, and judged documents the corpus pass did not meet."""
    if corpus.n_docs == 0:
        raise DatasetError(f"{folder.corpus}: the corpus is empty")
    if corpus.unseen:
        example = sorted(corpus.unseen)[0]
        hint = unknown_id_hint(example, (doc.doc_id for doc in iter_corpus(folder.corpus)), folder.corpus)
        raise DatasetError(
            f"{folder.qrels}: {len(corpus.unseen)} judged document id(s) are not in {folder.corpus} "
            f"(e.g. {example!r}); {hint or 'fix the qrels or the corpus'}"
        )


@dataclass
class Inputs:
    """What every stage reads: the folder, the judged queries and qrels, their digests, the notes so far."""

    folder: BeirFolder
    dataset: str
    digests: dict[str, object]
    qrels: Qrels | None = None
    queries: list[Query] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def corpus_state(self, sha256: str = "") -> CorpusState:
        judged = self.qrels.doc_ids()
        return CorpusState(sha256, self.dataset, judged, set(judged))


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


def apply_exclusions(run: Run, exclusions: Exclusions) -> Run:
    """The only place excluded pairs leave a ranking, before any cut, rerank, metric or pool: a dataset's excluded
    pairs (``excluded/<split>.tsv``) and, by the self-hit policy, each query's own id.

    BEIR's evaluator drops self-hits by default and MTEB follows it; for ArguAna and Quora, whose
    queries are corpus documents, keeping them inflates every metric.
    """
    return run.without(exclusions) if exclusions else run


def apply_self_hit_policy(run: Run, ignore_identical_ids: bool) -> Run:
    """`apply_exclusions` with the self-hit policy alone (no excluded pairs)."""
    return apply_exclusions(run, Exclusions(self_hits=ignore_identical_ids))


def read_exclusions(inputs: Inputs, split: str, self_hits: bool) -> Exclusions:
    """The split's exclusions (`harness.io.exclusions.load_exclusions`: every id checked against the folder, before
    any model loads); their sha256 joins the result's fingerprints only when the folder has excluded pairs."""
    digest = hashlib.sha256()
    folder = inputs.folder
    exclusions, path = load_exclusions(folder.root, split, self_hits, folder.queries, folder.corpus, digest)
    if path is not None:
        inputs.digests["excluded"] = digest
        logger.info("%s: %d excluded pairs", path, exclusions.n_pairs)
    return exclusions


@dataclass
class FirstStage:
    """What a first stage produced: its run, what it learned of the corpus, and what the result records."""

    run: Run
    corpus: CorpusState
    model_name: str
    record: dict[str, object] = field(default_factory=dict)
    index_quality: dict[str, float] = field(default_factory=dict)
    config: EvaluateConfig | None = (
        None  # the settings as applied, when the stage resolved one (a full-size truncation)
    )
    cost: dict[str, object] = field(default_factory=dict)  # what the stage measured of its cost (`cost_record`)


def cost_record(clock: Clock, stage: FirstStage, n_queries: int) -> dict[str, object]:
    """What the run cost, as the result stores it (`Result.cost`; fields in docs/outputs.md): the phases served
    from the cache, documents/s of the phase that turned the corpus into something searchable, batch search
    throughput, what the stage measured (search latency, index and cache bytes, endpoint usage) and peak RSS
    at the end of the run: of this evaluation when its clock reset the peak as it started (`Clock.rss_scope`
    ``evaluation``), else of the process since it started (``process``)."""
    seconds = clock.seconds
    corpus_phase = "encode_corpus" if seconds["encode_corpus"] > 0 or "encode_corpus" in clock.cached else "index"
    record: dict[str, object] = {
        "cached": list(clock.cached),
        "docs": stage.corpus.n_docs,
        "docs_per_s": None if corpus_phase in clock.cached else per_second(stage.corpus.n_docs, seconds[corpus_phase]),
        "docs_per_s_phase": corpus_phase,
        "queries_per_s": per_second(n_queries, seconds["search"]),
        "search_latency": None,
        "index_bytes": None,
        "cache_bytes": None,
        "endpoint": None,
        **stage.cost,
    }
    rss = peak_rss()
    record["peak_rss_bytes"], record["children_peak_rss_bytes"] = rss["self"], rss["children"]
    record["peak_rss_scope"] = clock.rss_scope
    return record


# --- where the dense stage's exact search holds its vectors: in memory, or streamed from the cache


@dataclass(frozen=True)
class SearchPath:
    """In memory or streamed (`harness.retrieval.streamed`), decided from the memory budget before encoding.

    Attributes:
        streamed: Search the cache's chunks instead of an in-memory flat index.
        budget: Bytes the process may hold (None: unknown, no limit); `given` when the option set it.
        needed: Bytes the in-memory flat search would hold (the process now, the vectors, ids and results).
        n_docs: The corpus's documents (an in-memory flat index reserves their storage at once).
    """

    streamed: bool = False
    budget: int | None = None
    given: bool = False
    needed: int = 0
    n_docs: int = 0

    def budget_words(self) -> str:
        """The budget as an error or note names it: the setting only where it was given."""
        if self.given:
            return f"the memory budget {size_text(self.budget, places=2)} ({setting('memory_budget')})"
        return f"the memory free for it ({size_text(self.budget, places=2)}: this process now and half the memory available)"

    def record(self) -> dict[str, object]:
        """What the result's config records (not its hash: both paths rank the same); the budget when it decided
        (streamed) or was given — a default one moves with the memory free, and would make reruns differ."""
        if self.budget is None and not self.streamed:
            return {}
        budget = {"memory_budget": self.budget} if self.streamed or self.given else {}
        return {"search": "streamed" if self.streamed else "in-memory", **budget}


def search_path(
    config: EvaluateConfig, n_docs: int, dimension: int | None, n_queries: int, depth: int, chunk_size: int
) -> SearchPath:
    """Stream when a plain flat index of `n_docs` vectors would not fit the memory budget (the setting, else the
    process's size now and half the memory available: the search's own needs against the memory free); other
    indexes and compressed vectors are always in memory. A given budget too small for even a streamed search is
    refused here, before anything is encoded (`harness.retrieval.streamed.MemoryBudgetError`)."""
    from harness.retrieval.streamed import default_budget, in_memory_bytes, plan_search, resident_bytes

    if (
        config.index.kind != "flat"
        or config.compression.compressed
        or config.compression.truncate_dim is not None
        or (config.engine == "ray" and config.ray.search == "sharded")
        or dimension is None
    ):  # the workers hold the shards; an endpoint's dimension is known at its first answer
        return SearchPath(n_docs=n_docs)
    budget = config.memory_budget if config.memory_budget is not None else default_budget()
    needed = resident_bytes() + in_memory_bytes(n_docs, dimension, n_queries, depth, config.chunk_size)
    streamed = budget is not None and needed > budget
    path = SearchPath(streamed, budget, config.memory_budget is not None, needed, n_docs)
    if streamed and not config.cache:
        raise HarnessError(
            f"the corpus vectors need {size_text(needed, places=2)} in memory, more than {path.budget_words()}; "
            f"a streamed search reads them from the embedding cache, which is off: turn "
            f"{setting('cache')} on" + (f" or raise {setting('memory_budget')}" if path.given else "")
        )
    if streamed and path.given:
        plan_search(budget, resident_bytes(), n_queries, dimension, depth, max(1, min(chunk_size, n_docs)))
    return path


def streamed_index(entry, budget: int | None, given: bool, doc_ids, dimension: int, lengths: list[int]):
    """A `harness.retrieval.streamed.StreamedIndex` over a complete cache entry, each pass verified chunk by chunk
    against the manifest: a chunk damaged since it was written stops the search, naming it (never skipped)."""
    from harness.retrieval.streamed import StreamedIndex, rows_from_chunks

    if not entry.complete:
        raise HarnessError(
            f"the embedding cache {entry.root} could not be written, and a streamed search reads the "
            f"corpus vectors from it: free disk space there"
            + (f" or raise {setting('memory_budget')}" if given else "")
        )

    def chunks():
        try:
            for _, vectors in entry.chunks(mmap=True):
                yield vectors
        except CacheCorrupt as exc:
            entry.drop()
            raise HarnessError(
                f"{exc}: a chunk of the embedding cache changed during the streamed search; "
                "the entry was removed (nothing was scored): rerun to recompute it"
            ) from None

    def load(index: int):
        return entry.read_chunk(index, mmap=True)[1]  # verified by the pass that found the candidates

    return StreamedIndex(
        chunks, rows_from_chunks(load, lengths), doc_ids, dimension, budget, max(lengths), strict=given
    )
