"""Which runtime a cross-encoder or a sparse encoder runs on (``--rerank-backend``, ``--sparse-backend``): torch as
it loads, an export (`harness.runtimes.heads`) wrapped around torch fp32 on the CPU, or ``auto``'s pick — the
bi-encoder's probe (`harness.runtimes.auto.pick_backend`: the same bounds, the same per-host cache), measured on
the reranker's centred scores of a sample of the pairs (`CentredScores`) or on the sparse encoder's rows of the
corpus's first texts (`DenseRows`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness.runtimes.calibration import Calibration
from harness.runtimes.heads import wrap_reranker, wrap_sparse

PROBE_GROUP = 12  # pairs per query in a reranker's probe: the cosine of centred scores is their correlation


class CentredScores:
    """A reranker as the probe (`harness.runtimes.auto.measure`) measures an encoder: its scores of a sample of
    `group` pairs per query, as one row per query, centred, so the cosine of two rows is the correlation of the two
    runtimes' scores of that query's pairs (what reranking reads: their order, not their offset)."""

    def __init__(self, reranker: Any, group: int):
        self.reranker, self.group = reranker, group

    def encode_docs(self, pairs: Sequence[tuple[str, str]]) -> Any:
        scores = self.reranker.score(pairs)
        whole = len(scores) // self.group * self.group
        rows = scores[:whole].reshape(-1, self.group) if whole else scores.reshape(1, -1)
        return rows - rows.mean(axis=1, keepdims=True)


class DenseRows:
    """A sparse encoder as the probe measures an encoder: its document rows, dense (a probe's sample is small)."""

    def __init__(self, sparse: Any):
        self.sparse = sparse

    def encode_docs(self, texts: Sequence[str]) -> Any:
        return self.sparse.encode_docs(texts).toarray()


def probe_pairs(groups: Sequence[Sequence[tuple[str, str]]]) -> tuple[list[tuple[str, str]], int]:
    """The probe's sample of a run's pairs (one list per query, in rank order): the top `PROBE_GROUP` pairs of the
    first queries that have that many (as many as make `harness.runtimes.auto.PROBE_TEXTS` pairs), and the group."""
    from harness.runtimes.auto import PROBE_TEXTS

    group = min(PROBE_GROUP, max((len(pairs) for pairs in groups), default=0))
    chosen = [list(pairs[:group]) for pairs in groups if len(pairs) >= group][: max(1, PROBE_TEXTS // max(group, 1))]
    return [pair for pairs in chosen for pair in pairs] if group >= 2 else [], group


def _probe(
    role: str, reference: Any, sample: list, measured: Callable[[Any], Any], wrap: Callable, reload: Callable, **how
) -> tuple[dict[str, Any], dict[str, Any]]:
    """`harness.runtimes.auto.pick_backend` for a reranker or a sparse encoder, with `reference` (torch fp32, on
    the CPU) loaded already: (the choice, the models loaded for it by candidate name)."""
    from harness.runtimes.auto import REFERENCE, pick_backend
    from harness.runtimes.registry import BY_NAME

    loaded: dict[str, Any] = {}

    def load(candidate: Any) -> Any:
        if candidate == REFERENCE:
            model = reference
        elif candidate.precision == REFERENCE.precision:
            model = wrap(BY_NAME[candidate.backend], reference, how["cache_root"], threads=how["threads"])
        else:
            model = reload("cpu", candidate.precision)
        loaded[candidate.name] = model
        return measured(model)

    choice = pick_backend(
        {"role": role, **reference.fingerprint()},
        sample,
        load,
        how["cache_root"] if how["cache"] else None,
        batch_size=how["batch_size"],
        threads=how["threads"],
    )
    return choice, loaded


def _on_runtime(
    backend: str,
    device: str,
    precision: str,
    load: Callable[[str, str], Any],
    wrap: Callable,
    calibrate: Callable[[Any], Calibration],
    probe: Callable[[Any], tuple[dict[str, Any], dict[str, Any]] | None],
    cache_root: Path,
    threads: int | None,
) -> tuple[Any, dict[str, Any] | None]:
    """The model on `backend` (torch: `load`(device, precision); an export: wrapped around torch fp32 on the CPU;
    auto: `probe`d on the CPU, torch on another device) and auto's choice (None when not auto)."""
    from harness.runtimes.auto import moot
    from harness.runtimes.registry import is_auto, runtime

    if is_auto(backend) and device != "cpu":
        return load(device, precision), moot(f"the probe compares CPU runtimes; the model runs on {device}, with torch")
    if not is_auto(backend) and runtime(backend).head is None:
        return load(device, precision), None
    reference = load("cpu", "fp32")
    if not is_auto(backend):
        record = runtime(backend)
        calibration = calibrate(reference) if record.calibrates_heads else None
        return wrap(record, reference, cache_root, calibration, threads), None
    probed = probe(reference)
    if probed is None:
        return reference, moot("there is nothing to probe")
    choice, loaded = probed
    if choice["picked"] in loaded:
        return loaded[choice["picked"]], choice
    if choice["precision"] != "fp32":
        return load("cpu", choice["precision"]), choice
    return wrap(runtime(choice["backend"]), reference, cache_root, threads=threads), choice


def load_reranker(
    spec: Any,
    device: str,
    precision: str,
    cache_root: Path,
    groups: Sequence[Sequence[tuple[str, str]]],
    threads: int | None = None,
    cache: bool = True,
) -> tuple[Any, dict[str, Any] | None]:
    """The cross-encoder of `spec` (a `RerankSpec`) on ``spec.backend``, for the pairs of `groups` (one list per
    query, in rank order: ``openvino-int8`` calibrates on a seeded sample of them, ``auto`` probes on their top),
    and auto's choice (None when not auto; the probe's choice is cached under `cache_root` when `cache`)."""
    from harness.retrieval.rerank import Reranker
    from harness.runtimes.calibration import pair_calibration

    def probe(reference: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
        sample, group = probe_pairs(groups)
        if not sample:
            return None
        return _probe(
            "reranker",
            reference,
            sample,
            lambda model: CentredScores(model, group),
            wrap_reranker,
            lambda where, at: Reranker(spec, where, at),
            cache_root=cache_root,
            cache=cache,
            threads=threads,
            batch_size=spec.batch_size,
        )

    return _on_runtime(
        spec.backend,
        device,
        precision,
        lambda where, at: Reranker(spec, where, at),
        wrap_reranker,
        lambda _: pair_calibration([pair for pairs in groups for pair in pairs]),
        probe,
        cache_root,
        threads,
    )


def load_sparse(
    backend: str,
    load: Callable[[str, str], Any],
    device: str,
    precision: str,
    cache_root: Path,
    texts: Callable[[], list[str]],
    calibrate: Callable[[], Calibration],
    threads: int | None = None,
    cache: bool = True,
) -> tuple[Any, dict[str, Any] | None]:
    """The sparse encoder `load`(device, precision) makes, on `backend` (``openvino-int8`` calibrates on
    `calibrate`'s corpus sample, ``auto`` probes on the corpus's first `texts`), and auto's choice (None when not
    auto)."""

    def probe(reference: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
        sample = texts()
        if not sample:
            return None
        return _probe(
            "sparse encoder",
            reference,
            sample,
            DenseRows,
            wrap_sparse,
            load,
            cache_root=cache_root,
            cache=cache,
            threads=threads,
            batch_size=reference.batch_size,
        )

    return _on_runtime(backend, device, precision, load, wrap_sparse, lambda _: calibrate(), probe, cache_root, threads)
