"""The checks of an evaluation that need no file, made before any work (`checked`): the cutoffs and the depth, the
reranker, the backends, the index and the compression, the engine, the devices resolved against what torch sees, the
model found (and not a cross-encoder), the settings the first stage would ignore. A typo costs nothing: nothing is
read, loaded or encoded before they pass.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, replace

from harness.engines import ENGINES
from harness.errors import HarnessError, setting
from harness.io.outputs import check_output_dir
from harness.pipeline.config import (
    EvaluateConfig,
    retrieval_depth,
    stored_cutoffs,
    with_model_prompts,
)
from harness.pipeline.dense.passages import checked_passages
from harness.pipeline.systems.registry import KNOWN_NAMES, Kind, system_of
from harness.retrieval.compress import CompressionSpec
from harness.retrieval.devices import DeviceError, DeviceSpec
from harness.retrieval.index import IndexSpec
from harness.retrieval.models import check_model_available, model_folder
from harness.runtimes.registry import TORCH, is_auto, runtime
from harness.runtimes.spec import EncoderSpec

logger = logging.getLogger(__name__)


def checked(config: EvaluateConfig, loaded: bool = False) -> tuple[EvaluateConfig, tuple[int, ...], int, list[int]]:
    """Every check that needs no file: (the config with its engine and devices resolved, the cutoffs
    asked for, the depth, the cutoffs stored). `loaded`: the model is loaded already (nothing to find)."""
    check_output_dir(config.output_dir)  # before any work: not after the whole run
    k_values = tuple(sorted(set(config.k_values)))
    if not k_values:
        raise HarnessError(f"no cutoffs given in {setting('k_values')} (e.g. 1,3,10)")
    if config.rerank is not None:
        if config.top_k is not None and config.top_k != config.rerank.depth:  # the same depth twice is no conflict
            raise HarnessError(
                f"with a reranker the depth is the rerank depth; set {setting('rerank_depth')}, "
                f"not {setting('top_k')} (or give both the same value)"
            )
        config.rerank.check(k_values[-1])
    for backend in (config.rerank.backend if config.rerank else TORCH, config.sparse_backend):
        if not is_auto(backend):
            runtime(backend)  # an unknown name is refused, naming the backends there are
    top_k = retrieval_depth(config)
    stored_k = stored_cutoffs(top_k, k_values)
    if top_k < k_values[-1]:
        raise HarnessError(
            f"{setting('top_k')} {top_k} is smaller than the largest cutoff {k_values[-1]}; raise {setting('top_k')}"
        )
    if config.token_budget is not None and config.token_budget <= 0:
        raise HarnessError(f"token_budget must be positive, got {config.token_budget}")
    if config.checkpoint_seconds < 0:
        raise HarnessError(f"checkpoint_seconds must be 0 or more, got {config.checkpoint_seconds}")
    if config.chunk_size <= 0:
        raise HarnessError(f"chunk_size must be positive, got {config.chunk_size}")
    if not loaded:  # a loaded encoder has its prefixes already (bench resolves them before loading)
        config = with_model_prompts(config)
    config.encoder.check()
    config.index.check()  # before any encoding, so a typo costs nothing
    config.compression.check()
    if config.compression.compressed and config.index.kind != "flat":
        raise HarnessError(
            f"{setting('embedding_precision')} {config.compression.embedding_precision} searches its "
            f"own exact compressed index; {setting('index')} {config.index.kind} does not combine "
            "with it"
        )
    if config.engine not in ENGINES:
        raise HarnessError(f"unknown engine {config.engine!r}; use local or ray")
    config.ray.check()
    kind = system_of(config).stage.kind
    if config.engine == "ray" and not kind.ray:
        # A grid (`bench --engine ray`) may mix BM25 or a sparse encoder with dense models: nothing to fan out here.
        logger.info("--engine ray: %s does not fan out and runs here", kind.what)
        config = replace(config, engine="local")
    if config.engine == "ray" and not config.cache:
        raise HarnessError(
            f"the ray engine stores the workers' embeddings in the cache; turn the cache on ({setting('cache')})"
        )
    if kind.check is not None:  # what this kind of system cannot honour, before the warnings about the rest
        kind.check(config)
    config = resolve_devices(config)
    _note_unused_settings(config)
    if kind.service:
        config.endpoint.check()
        # Each encode call should fill every request in flight.
        config = replace(
            config, encoder=replace(config.encoder, batch_size=config.endpoint.batch_size * config.endpoint.concurrency)
        )
    elif kind.weights and not loaded:
        check_model_available(config.model, known=KNOWN_NAMES)  # seconds, not the hub client's retries
    if config.rerank is not None:
        check_model_available(config.rerank.model)
    _check_model_kind(config, kind)
    config = checked_passages(config, kind)
    return config, k_values, top_k, stored_k


def _note_unused_settings(config: EvaluateConfig) -> None:
    """Warn about settings the first stage ignores (an index for BM25...), which the result then does not record."""
    kind = system_of(config).stage.kind
    if kind.vectors:
        return
    what = kind.what
    if config.compression != CompressionSpec():
        changed = [
            setting(name)
            for name, value in asdict(config.compression).items()
            if value != getattr(CompressionSpec(), name)
        ]
        one = len(changed) == 1
        raise HarnessError(
            f"{', '.join(changed)} appl{'ies' if one else 'y'} to a dense model's vectors; {what} "
            f"has none (drop {'it' if one else 'them'})"
        )
    unused = []
    if config.index != IndexSpec():
        unused.append(f"{setting('index')} {config.index.kind}")
    default = EncoderSpec()
    changed = [name for name, value in config.encoder.to_config().items() if value != default.to_config()[name]]
    if changed and not kind.encodes:
        unused += [setting(name) for name in changed]
    if unused:
        logger.warning("%s does not use %s: ignored, and not recorded in the result", what, ", ".join(unused))


def _check_model_kind(config: EvaluateConfig, kind: Kind) -> None:
    """A cross-encoder given as the first stage is one clear line, before anything loads."""
    from harness.retrieval.rerank import model_kind

    if not kind.weights:
        return
    if model_kind(model_folder(config.model)) == "cross-encoder":
        raise HarnessError(
            f"{config.model} is a cross-encoder (it scores query-document pairs), not a retriever; "
            f"rerank with it (--rerank {config.model}) after a first stage given as --model, e.g. "
            "--model bm25"
        )


def resolve_devices(config: EvaluateConfig) -> EvaluateConfig:
    """`config` with its device option resolved to concrete devices, checked before anything loads.

    Scoring a run, BM25 and the hashing stand-in need no device (and no torch); the ONNX
    backends run on the CPU.
    """
    encoder = config.encoder
    if is_auto(encoder.backend):  # devices as for torch; the probe (`harness.pipeline.evaluate`) resolves the rest
        if encoder.precision != "fp32":
            raise HarnessError(
                f"{setting('backend')} auto picks the precision too; leave {setting('precision')} at "
                "fp32, or name the backend"
            )
        return replace(resolve_devices(replace(config, encoder=replace(encoder, backend=TORCH))), encoder=encoder)
    spec = DeviceSpec(
        config.device, encoder.precision, queries_only=config.engine == "ray" and bool(config.ray.gpus_per_worker)
    )
    spec.check_syntax()
    kind = system_of(config).stage.kind
    if not kind.needs_device:
        parts = spec.option.split(",")
        if kind.device == "none":  # nothing runs a model: scoring a run, BM25
            return replace(config, device="cpu")
        if any(part not in ("auto", "cpu") for part in parts):
            raise DeviceError(f"{kind.what} runs on CPUs only, not {spec.option}")
        # A list of CPUs keeps its length: `cpu,cpu` is two worker processes.
        return replace(config, device=",".join("cpu" for _ in parts))
    record = runtime(encoder.backend)
    if record.device_refusal is not None:  # a CPU runtime at its own precision
        record.check_device(spec.option, encoder.precision)
        return replace(config, device="cpu")
    if spec.option == "auto" and encoder.precision != "fp16":
        # Resolved when a model loads (`first_device`): a warm run that loads none then imports no torch.
        return replace(config, device="auto")
    devices = spec.resolve()
    if len(devices) > 1 and config.engine == "ray":
        raise DeviceError(
            "a device list fans out over local worker processes; with the ray engine, ask each worker "
            "for GPUs instead (ray_gpus_per_worker)"
        )
    return replace(config, device=",".join(devices))
