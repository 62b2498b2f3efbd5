"""The evaluation pipeline: the one place that knows the order of the stages.

    qrels + queries → (model: stream corpus → encode → index → search | external run)
        → self-hit policy → cut to depth → metrics → result files

`evaluate_dataset` runs it on a BEIR folder (`harness.pipeline.demo.run_demo` on the bundled lesson set). The
first stages live in their own modules: `harness.pipeline.dense` (a bi-encoder and its index) and
`harness.pipeline.sparse` (BM25, learned sparse); what they share in `harness.pipeline.stages`; the config in
`harness.pipeline.config`, and its checks, made before any work, in `harness.pipeline.checks`.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from harness.datasets import registry
from harness.datasets.catalog import resolve_dataset
from harness.errors import DatasetError, HarnessError, setting
from harness.evaluation.metrics import evaluate, standard_metrics
from harness.host import host_info, versions
from harness.io.cache import cache_dir
from harness.io.formats import BeirFolder, iter_corpus, iter_queries, locate_beir_folder
from harness.io.ids import unknown_id_hint
from harness.io.provenance import read_provenance
from harness.io.trec import read_qrels, read_run
from harness.pipeline.candidates import bind_candidates
from harness.pipeline.checks import checked, resolve_devices
from harness.pipeline.config import (
    DEFAULT_DEPTH,
    REGISTRY_PROMPTS,
    EvaluateConfig,
    first_device,
    load_model,  # noqa: F401 - the config's names are importable from here too (bench, tests)
    retrieval_depth,
    run_model_name,
    with_model_prompts,  # noqa: F401 - importable from here too (bench)
)
from harness.pipeline.dense import dense_stage
from harness.pipeline.dense.multivector import multi_vector_stage
from harness.pipeline.sparse import bm25_stage, learned_sparse_stage
from harness.pipeline.stages import (
    DOC_TEXT_RULE,  # noqa: F401 - part of every cache key; importable from here too
    PREPARE_MODEL,
    PROBE_BACKEND,
    Clock,
    CorpusState,
    FirstStage,
    Inputs,
    Outcome,
    apply_exclusions,
    apply_self_hit_policy,  # noqa: F401 - importable from here too (benchmarks, tests)
    check_corpus,
    checked_corpus,
    cost_record,
    read_exclusions,
    self_hit_policy,
)
from harness.pipeline.systems.registry import (
    BM25,
    DENSE,
    ENDPOINT,
    FUSION,
    HASH,
    MULTI_VECTOR,
    RUN,
    SPARSE,
    System,
    configure,
    settle,
    system_of,
)
from harness.records import Qrels, Query, Run, doc_text
from harness.reporting.report import Result, write_result
from harness.reporting.variant import Configuration
from harness.retrieval.encode import Encoder
from harness.runtimes.registry import TORCH, is_auto

logger = logging.getLogger(__name__)


def configuration(config: EvaluateConfig, dataset: str, model: str | None = None) -> Configuration:
    """The identity of `config`'s result on `dataset`: the decisive settings that differ from defaults.

    Decisive: the depth, the self-hit policy (against the registry's policy for `dataset`), the first stage's own
    settings (its kind's `harness.pipeline.systems.Kind.identity`: for a dense model the encoder's decisive settings,
    `EncoderSpec.to_config`, the index and the compression; for BM25 its spec) and the reranker.
    Defaults are `EvaluateConfig`'s own, so they are stated once.

    Args:
        config: The evaluation.
        dataset: The dataset name (decides the default self-hit policy).
        model: The model name the result records; default `run_model_name(config)`.
    """
    default = EvaluateConfig(dataset_path=config.dataset_path)
    settings = {"depth": retrieval_depth(config), "self_hits_dropped": self_hit_policy(config, dataset)[0]}
    defaults = {"depth": DEFAULT_DEPTH, "self_hits_dropped": self_hit_policy(default, dataset)[0]}
    stage = system_of(config).stage
    if stage.kind.identity is None:
        raise HarnessError(f"system {stage.spec!r}: {stage.kind.what} has no configuration of its own")
    own, own_defaults = stage.kind.identity(config, default)
    settings.update(own)
    defaults.update(own_defaults)
    settings["rerank"], defaults["rerank"] = (config.rerank.to_config() if config.rerank else None), None
    return Configuration.from_settings(model or run_model_name(config), config.split, settings, defaults)


def rerank_stage(
    config: EvaluateConfig, run: Run, queries: list[Query], folder: BeirFolder, cost: dict | None = None
) -> tuple[Run, dict]:
    """Rerank `run` with `config.rerank` on its backend (`harness.runtimes.heads.load_reranker`: ``auto`` probes on
    the run's top pairs, ``openvino-int8`` calibrates on a sample of them); returns the reranked run and what the
    result records about it (the backend that scored, when not torch, and auto's choice). An exported reranker's
    preparation (`harness.runtimes.preparation.Preparation.record`) goes into ``cost["rerank_preparation"]``."""
    from harness.retrieval.rerank import ScoreCache, rerank
    from harness.runtimes.head_choice import load_reranker

    texts = {query.query_id: query.text for query in queries}
    if any(query_id not in texts for query_id in run):  # a candidate set may name queries this split does not score
        run = Run.adopt({q: dict(run.scores_of(q)) for q in run if q in texts}, run.name, run.metadata)
    needed = {hit.doc_id for query_id in run for hit in run[query_id]}
    documents = {doc.doc_id: doc_text(doc) for doc in iter_corpus(folder.corpus) if doc.doc_id in needed}
    groups = [
        [(texts[query_id], documents[hit.doc_id]) for hit in run[query_id][: config.rerank.depth]] for query_id in run
    ]
    reranker, auto = load_reranker(
        config.rerank,
        first_device(config),
        config.encoder.precision,
        cache_dir(config.cache_dir),
        groups,
        config.threads,
        config.cache,
    )
    spec = replace(config.rerank, backend=auto["backend"]) if auto is not None else config.rerank
    if auto is not None:
        logger.info("--rerank-backend auto picked %s: %s", auto["picked"], auto["reason"])
    if cost is not None and getattr(reranker, "preparation", None):
        cost["rerank_preparation"] = reranker.preparation
    fingerprint = reranker.fingerprint()
    cache = ScoreCache(cache_dir(config.cache_dir) if config.cache else None, fingerprint)
    reranked, counts = rerank(
        run, texts, documents, reranker, cache, progress=config.progress, checkpoint_seconds=config.checkpoint_seconds
    )
    logger.info("reranked %d pairs with %s (%d from the cache)", counts["pairs"], config.rerank.model, counts["cached"])
    return reranked, {
        **spec.to_config(),
        "batch_size": config.rerank.batch_size,
        "fingerprint": fingerprint,
        "pairs": counts["pairs"],
        "cached_pairs": counts["cached"],
        "tokens": counts.get("tokens"),  # what the cross-encoder read for those pairs (None: not countable)
        "protocol": "top-depth first-stage documents re-sorted by the cross-encoder score; the rest dropped",
        **({"backend_auto": auto} if auto is not None else {}),
    }


def _timed_rerank(
    config: EvaluateConfig, run: Run, queries: list[Query], folder: BeirFolder, stage: FirstStage, clock: Clock
) -> tuple[EvaluateConfig, Run]:
    """`rerank_stage` as the ``rerank`` phase (the reranker's preparation moved into ``prepare_model``); its record
    into ``stage.record``; the config with the backend that scored."""
    with clock.stage("rerank"):
        run, stage.record["rerank"] = rerank_stage(config, run, queries, folder, stage.cost)
    if "rerank_preparation" in stage.cost:  # the reranker's export, calibration, quantization and compile
        clock.move(stage.cost["rerank_preparation"]["seconds"], "rerank", PREPARE_MODEL)
    if 0 < stage.record["rerank"]["pairs"] == stage.record["rerank"]["cached_pairs"]:
        clock.mark_cached("rerank")  # every pair's score read from the score cache
    return settled_rerank(config, stage.record["rerank"]), run


def settled_rerank(config: EvaluateConfig, record: dict) -> EvaluateConfig:
    """`config` with the rerank backend that scored (auto's pick), read from the rerank stage's record."""
    if config.rerank is None or not is_auto(config.rerank.backend):
        return config
    return replace(config, rerank=replace(config.rerank, backend=record["backend_auto"]["backend"]))


def _judged_queries(folder: BeirFolder, qrels: Qrels, digest, notes: list[str]) -> list[Query]:
    wanted = [query for query in iter_queries(folder.queries, digest) if query.query_id in qrels]
    missing = len(qrels) - len(wanted)
    if missing:
        found = {query.query_id for query in wanted}
        example = next(query_id for query_id in qrels if query_id not in found)
        hint = unknown_id_hint(example, (query.query_id for query in iter_queries(folder.queries)), folder.queries)
        raise DatasetError(
            f"{folder.qrels}: {missing} judged quer{'y is' if missing == 1 else 'ies are'} not in "
            f"{folder.queries} (e.g. {example!r}); {hint or 'fix the qrels or add the queries'}"
        )
    empty = [query.query_id for query in wanted if not query.text.strip()]
    if empty:
        notes.append(
            f"{len(empty)} judged quer{'y has' if len(empty) == 1 else 'ies have'} empty text in "
            f"{folder.queries} ({_examples(empty)}); they are searched with an empty string and "
            "count in every mean"
        )
        logger.warning(notes[-1])
    return wanted


def _examples(ids, n: int = 3) -> str:
    """A few ids, quoted, for an error message."""
    shown = sorted(ids)[:n]
    return ", ".join(map(repr, shown)) + (", ..." if len(ids) > n else "")


def _check_run(run: Run, qrels: Qrels, run_path: Path, folder: BeirFolder) -> None:
    """Refuse a run that shares no query id with the qrels: its scores would be a silent zero."""
    if not any(query_id in qrels for query_id in run):
        raise DatasetError(
            f"{run_path}: none of the run's {len(run)} query ids is judged in {folder.qrels} "
            f"(run: {_examples(list(run))}; qrels: {_examples(list(qrels))}); the run was made for other "
            "queries, or with other ids"
        )


def _unknown_run_docs(corpus: CorpusState, run_path: Path, folder: BeirFolder, allow: bool) -> list[str]:
    """Refuse (or, when allowed, note) run documents that are not in the corpus."""
    if not corpus.unseen_run:
        return []
    count = len(corpus.unseen_run)
    what = (
        f"{count} document id{'s' if count > 1 else ''} in {run_path} {'are' if count > 1 else 'is'} not "
        f"in {folder.corpus} ({_examples(corpus.unseen_run)})"
    )
    if not allow:
        raise DatasetError(
            f"{what}; the run was probably made on another corpus version: rerun it on this "
            "corpus, or allow unknown documents (--allow-unknown-docs) to score them as non-relevant"
        )
    note = f"{what}; scored as non-relevant (unknown documents allowed)"
    logger.warning(note)
    return [note]


def evaluate_dataset(config: EvaluateConfig, encoder: Encoder | None = None) -> Outcome:
    """Evaluate a system (a model, an external run, a rerank or a fusion) on one split of a BEIR folder.

    Check the settings → resolve the dataset → read qrels and judged queries → the first stage
    (an external run, BM25, learned sparse, or a dense model with its index) → the self-hit policy
    and the depth cut → the reranker, if any → scores → the result files. For a dense model the corpus
    is hashed, then streamed once: checked and encoded in the same pass, with vectors going into the
    index (and the embedding cache) chunk by chunk; when the cache holds this model's vectors for this
    exact corpus, nothing is parsed or encoded. A fusion is its members evaluated, then fused (`_evaluate_fusion`).

    Args:
        config: What to evaluate.
        encoder: A ready encoder (tests pass a fake one); by default `config.model` is loaded.

    Returns:
        The Outcome; result files are written when `config.output_dir` is set.

    Raises:
        HarnessError: Bad input (missing files, malformed lines, ids that don't resolve,
            a model that can't be loaded, an unwritable output folder).
    """
    config = bind_candidates(config, evaluate_dataset)  # the candidate set its reranks rerank, made once
    config = settle(config)  # LABEL=, FIRST >> CROSS_ENCODER@DEPTH, run:FILE
    system = system_of(config)
    if system.kind is FUSION:
        return _evaluate_fusion(config, system, encoder)
    clock = Clock(reset_peak_memory=True)  # the cost record's peak RSS is this evaluation's (bench: each cell's)
    with clock.stage("load"):  # the settings' checks, the dataset (a download is a load), qrels and queries
        config, k_values, top_k, stored_k = checked(config, loaded=encoder is not None)
        folder_path, resolved_name = resolve_dataset(
            config.dataset_path, config.data_dir, config.download, config.base_url, config.progress
        )
        folder = locate_beir_folder(folder_path, config.split)
        dataset = config.dataset_name or resolved_name
        ignore_identical_ids, policy_source = self_hit_policy(config, dataset)
        inputs = Inputs(folder, dataset, digests={name: hashlib.sha256() for name in ("queries", "qrels")})
        inputs.qrels = read_qrels(folder.qrels, inputs.digests["qrels"], check_ids=True)
        provenance = read_provenance(folder.qrels)
        inputs.queries = _judged_queries(folder, inputs.qrels, inputs.digests["queries"], inputs.notes)
        exclusions = read_exclusions(inputs, config.split, ignore_identical_ids)
        auto = None
        if is_auto(config.encoder.backend) and _probed(config):
            with clock.moved("load", PROBE_BACKEND):  # the probe's seconds: a phase of their own
                config, auto = _auto_backend(config, folder, inputs.notes, loaded=encoder is not None)
        elif is_auto(config.encoder.backend):  # nothing to probe: the backend is moot
            config = replace(config, encoder=replace(config.encoder, backend=TORCH))
    logger.info("%s: %d judged queries, %d judgments", folder.qrels, len(inputs.qrels), inputs.qrels.n_judgments)
    if config.threads is not None:
        _set_threads(config.threads)

    # As many extra documents per query as a query can lose to its exclusions, so the depth survives them.
    stage = first_stage(config, inputs, encoder, top_k + exclusions.most, top_k, clock)
    config = stage.config or config
    if auto is not None:
        _observe_auto(config, auto, stage, clock, inputs.notes)

    with clock.stage("score"):
        scored_run = apply_exclusions(stage.run, exclusions).truncated(top_k)
    if config.rerank is not None:
        config, scored_run = _timed_rerank(config, scored_run, inputs.queries, folder, stage, clock)
    with clock.stage("score"):
        evaluation = evaluate(inputs.qrels, scored_run, standard_metrics(stored_k))
    if evaluation.n_unjudged:
        logger.info("%d run queries are not judged in %s and were ignored", evaluation.n_unjudged, folder.qrels)
    if evaluation.n_missing:
        inputs.notes.append(
            f"{evaluation.n_missing} of {evaluation.n_queries} judged queries have no results in the run and score 0"
        )
        logger.warning(inputs.notes[-1])
    config_record = {
        "k_values": list(k_values),
        "top_k": top_k,
        "ignore_identical_ids": ignore_identical_ids,
        "self_hit_policy_source": policy_source,
        **({"excluded_pairs": exclusions.n_pairs} if "excluded" in inputs.digests else {}),
        "dataset_path": str(Path(folder_path).resolve()),
        "n_docs": stage.corpus.n_docs,
        **stage.record,
    }
    if auto is not None:
        config_record["backend_auto"] = auto
    if config.candidates is not None and config.run_path == config.candidates.run_path:  # a rerank of the set
        config_record["candidates"] = config.candidates.record()
    if provenance:  # how the qrels were made (a merge's annotators, policy, ties, agreement)
        config_record["qrels_provenance"] = provenance
    if config.encoder.prompt_source == REGISTRY_PROMPTS:
        config_record["prompts"] = f"from the {REGISTRY_PROMPTS}"
    mismatch = registry.count_mismatch(dataset, config.split, stage.corpus.n_docs, len(inputs.qrels))
    if mismatch:
        config_record["registry_mismatch"] = mismatch
        inputs.notes.append(f"{dataset}: {mismatch}")
        logger.warning(inputs.notes[-1])
    result = _result(config, inputs, stage, evaluation, config_record, clock)
    paths = write_result(result, scored_run, config.output_dir) if config.output_dir is not None else None
    return Outcome(result, scored_run, inputs.qrels, paths)


def _evaluate_fusion(config: EvaluateConfig, system: System, encoder: Encoder | None) -> Outcome:
    """A fusion: each member checked (all of them before any work), evaluated as `bench` evaluates it (its own result,
    written beside the others), and their runs fused and scored by `harness.pipeline.fuse.fuse_outcomes`: the fusion,
    cutoffs and identity of `bench`'s and `fuse`'s, so that one system is one number whichever command runs it."""
    from harness.pipeline.fuse import fuse_outcomes

    if encoder is not None:
        raise HarnessError(f"system {system.spec!r}: a fusion loads its members' models itself; give no encoder")
    members = {member.spec: configure(member, replace(config, name=None)) for member in system.members}
    for member in members.values():
        checked(member)
    outcomes = {spec: evaluate_dataset(member) for spec, member in members.items()}
    return fuse_outcomes([outcomes[m.spec] for m in system.members], system.fusion, config.output_dir, config.name)


def _observe_auto(config: EvaluateConfig, auto: dict, stage: FirstStage, clock: Clock, notes: list[str]) -> None:
    """Hold ``--backend auto``'s pick to the pace it kept on the corpus (`harness.runtimes.auto.observe_pick`)."""
    from harness.runtimes.auto import observe_pick

    encoded = (stage.cost.get("vectors") or {}).get("docs_encoded")
    root = cache_dir(config.cache_dir) if config.cache else None
    note = observe_pick(auto, encoded, clock.seconds["encode_corpus"], root)
    if note is not None:
        notes.append(note)
        logger.warning(note)


def _probed(config: EvaluateConfig) -> bool:
    """Whether ``--backend auto`` has a model to probe: a dense model with weights (not a run, BM25, a sparse
    encoder, the hashing stand-in or a service, which ignore the backend)."""
    return system_of(config).stage.kind.probed


def settled_backend(config: EvaluateConfig) -> EvaluateConfig:
    """The configuration a run of `config` stores its result under: for ``--backend auto``, the backend (and
    precision) its probe picks on this host — the choice the cache remembers, probed now when not remembered,
    exactly as the run itself would; any other `config` is returned as it is. Lets a caller (``bench``) find
    the stored result of an auto run before running it. A dataset that is not on disk yet is left to the run
    (which downloads it): `config` is returned as it is."""
    if not is_auto(config.encoder.backend):
        return config
    if not _probed(config):
        return replace(config, encoder=replace(config.encoder, backend=TORCH))
    try:
        folder_path, _ = resolve_dataset(config.dataset_path, config.data_dir, False, config.base_url, False)
        folder = locate_beir_folder(folder_path, config.split)
    except HarnessError:
        return config
    return _auto_backend(config, folder, [])[0]


def _auto_backend(
    config: EvaluateConfig, folder: BeirFolder, notes: list[str], loaded: bool = False
) -> tuple[EvaluateConfig, dict]:
    """`config` with the backend (and precision) that ``--backend auto`` picks here, and what it picked and why.

    The decision (`harness.runtimes.auto.pick_backend`: the CPU class table's pick confirmed, or the full probe)
    compares CPU runtimes on the corpus's first texts; a model on a
    GPU, or one passed in already loaded, runs torch as it is. The configuration is then the picked backend's own,
    so a run that picks the same backend shares its results and embeddings."""
    from itertools import islice

    from harness.runtimes.auto import PROBE_TEXTS, candidate_loader, moot, pick_backend, reference_fingerprint
    from harness.runtimes.classes import class_rows

    device = first_device(config)
    # An empty corpus has nothing to probe: torch, and the dense stage says what is wrong with the corpus.
    sample = [doc_text(doc) for doc in islice(iter_corpus(folder.corpus), PROBE_TEXTS)] if not loaded else []
    if loaded or device != "cpu" or not sample:
        choice = moot(
            "the encoder was given already loaded"
            if loaded
            else f"the probe compares CPU runtimes; the model runs on {device}, with torch"
            if device != "cpu"
            else "the corpus has no documents to probe"
        )
    else:
        if config.threads is not None:
            _set_threads(config.threads)  # the probe measures what the run will have
        root = cache_dir(config.cache_dir)
        load = candidate_loader(config.encoder, config.model, root, config.threads)
        choice = pick_backend(
            reference_fingerprint(config.encoder, config.model, root, config.cache, load),
            sample,
            load,
            root if config.cache else None,
            batch_size=config.encoder.batch_size,
            threads=config.threads,
            table=class_rows(),
            probe=config.encoder.probe,
        )
    notes.append(f"--backend auto picked {choice['picked']}: {choice['reason']}")
    logger.info(notes[-1])
    picked = replace(config, encoder=replace(config.encoder, backend=choice["backend"], precision=choice["precision"]))
    return resolve_devices(picked), choice


def first_stage(
    config: EvaluateConfig, inputs: Inputs, encoder: Encoder | None, depth: int, top_k: int, clock: Clock
) -> FirstStage:
    """The stage that turns queries into a run, by the system's kind: an external run, BM25, a sparse encoder, or a
    dense model (the hashing stand-in and a service among them)."""
    kind = system_of(config).stage.kind
    if kind is RUN:
        return _external_run(config, inputs, clock)
    if kind is BM25:
        return bm25_stage(config, inputs, depth, clock)
    if kind is MULTI_VECTOR:
        return multi_vector_stage(config, inputs, depth, clock)
    if kind is SPARSE:
        return learned_sparse_stage(config, inputs, depth, clock)
    if kind in (DENSE, HASH, ENDPOINT):
        return dense_stage(config, inputs, encoder, depth, top_k, clock)
    raise HarnessError(f"system {config.model!r}: {kind.what} is no first stage")


def _external_run(config: EvaluateConfig, inputs: Inputs, clock: Clock) -> FirstStage:
    """Score a TREC run made elsewhere: checked against the qrels and the corpus (one corpus pass)."""
    with clock.stage("load"):
        return _read_external_run(config, inputs)


def _read_external_run(config: EvaluateConfig, inputs: Inputs) -> FirstStage:
    inputs.digests["run"] = hashlib.sha256()
    run = read_run(config.run_path, inputs.digests["run"])
    _check_run(run, inputs.qrels, config.run_path, inputs.folder)
    corpus = inputs.corpus_state()
    corpus.unseen_run = {hit.doc_id for hits in run.values() for hit in hits}
    digest = hashlib.sha256()
    for _ in checked_corpus(inputs.folder, corpus, digest):
        pass
    corpus.sha256 = digest.hexdigest()
    check_corpus(inputs.folder, corpus)
    inputs.notes += _unknown_run_docs(corpus, config.run_path, inputs.folder, config.allow_unknown_docs)
    logger.info("%s: a %s run", config.run_path, run.metadata.get("format"))
    return FirstStage(
        run,
        corpus,
        run_model_name(config),
        {"run_file": str(config.run_path), "run_tag": run.name, "run_format": run.metadata.get("format")},
    )


def _result(
    config: EvaluateConfig, inputs: Inputs, stage: FirstStage, evaluation, config_record: dict, clock: Clock
) -> Result:
    """The Result of one evaluation, with its identity (`configuration`), host and versions."""
    identity = configuration(config, inputs.dataset, stage.model_name)
    return Result(
        dataset=inputs.dataset,
        split=config.split,
        model=stage.model_name,
        label=identity.label(config.name),
        variant=identity.variant,
        metrics=evaluation.means,
        per_query=evaluation.per_query,
        n_queries=evaluation.n_queries,
        config=config_record,
        fingerprints={
            "corpus": stage.corpus.sha256,
            **{name: digest.hexdigest() for name, digest in inputs.digests.items()},
        },
        timings=clock.rounded(),
        cost=cost_record(clock, stage, evaluation.n_queries),
        versions=versions(),
        host=host_info(config.threads),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        notes=inputs.notes,
        index_quality={name: value for name, value in stage.index_quality.items() if name.startswith("recall")},
        config_hash=identity.config_hash,
    )


def _set_threads(threads: int) -> None:
    """Set torch's and faiss's thread pools (both default to every core)."""
    if threads <= 0:
        raise HarnessError(f"{setting('threads')} must be positive, got {threads}")
    import faiss
    import torch

    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(threads)
