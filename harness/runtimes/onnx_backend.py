"""An ONNX Runtime encoder: the model's transformer exported once, optionally int8-quantized.

``--backend onnx`` runs the same weights in fp32 under ONNX Runtime; ``--backend onnx-int8``
quantizes the linear layers' weights to signed 8 bits per output channel (``quantize_dynamic``; see ``QUANTIZATION``;
7 bits where the CPU's int8 kernels saturate, see ``quantization``),
which makes encoding faster on CPUs with integer dot-product instructions (1.8x torch with
AVX512-VNNI; slower than torch on an AVX2-only CPU: see BENCHMARKS.md, and `beir-harness env --bench`). Pooling and normalization follow the
sentence-transformers model's own modules (mean or CLS pooling, then ``Normalize`` when present or
asked for), so the vectors are the model's vectors.

The export uses ``torch.onnx.export`` (TorchScript exporter) and is cached under
``<cache dir>/onnx/<key>/`` where the key covers the weights, the ONNX opset and the quantization; it is
written to a temporary folder and renamed into place only when complete, so a failed export caches
nothing. Needs the ``[onnx]`` extra: ``pip install 'beir-harness[onnx]'``.
"""

from __future__ import annotations

import logging
import os
import shutil
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import HarnessError, MissingDependencyError, setting
from harness.host import int8_fast_here, int8_saturates, local_kernel_class
from harness.io.files import default_permissions, private_dir, remove_stale_temporaries
from harness.retrieval.sentence_transformer import SentenceTransformerEncoder
from harness.runtimes.preparation import Preparation

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

OPSET = 17
# Signed 8-bit weights with one scale per output channel, for the MatMul weights only (the embedding
# tables stay fp32). Measured on SciFact (benchmarks/onnx_backend.py, BENCHMARKS.md): unsigned
# per-tensor weights on every op ran at 1.3x fp32 with a mean cosine of 0.975 to the fp32 vectors and
# moved SciFact's nDCG@10 by +0.0067; these settings run at 1.8x with 0.995 and move it by -0.0003,
# because ONNX Runtime's fast AVX2 integer kernels take signed weights and per-channel scales keep
# each weight column's own range. (7-bit "reduce_range" weights were slightly further from fp32 there, with VNNI;
# on a CPU whose int8 kernels saturate they are what keeps the scores, see `quantization`.)
BACKENDS = ("onnx", "onnx-int8")  # the two backends this runtime runs (`harness.runtimes.registry`)
QUANTIZATION = {"weight_type": "QInt8", "per_channel": True, "op_types_to_quantize": ["MatMul"]}
# Where the CPU's u8 x s8 kernels sum into saturating 16-bit integers (`harness.host.int8_saturates`: AVX2, AVX512
# without VNNI), 7-bit weights keep every pair's sum in range: a tiny cross-encoder's int8 scores correlated with
# torch's at 0.571 with 8-bit weights and 0.964 with 7-bit ones on an AVX2-only EPYC (BENCHMARKS.md, "Reranker
# and sparse encoder backends").
SATURATING = {"reduce_range": True}


def quantization(kernel: str | None = None) -> dict[str, Any]:
    """The int8 recipe for CPU kernel class `kernel` (None: this machine's): `QUANTIZATION`, plus `SATURATING` where
    that class's int8 kernels saturate. Part of every int8 identity and export key, so a model quantized for one
    class is never served to another."""
    return {**QUANTIZATION, **SATURATING} if int8_saturates(kernel) else dict(QUANTIZATION)


def runtime_identity(backend: str) -> dict[str, Any]:
    """What, besides the weights and settings, decides `backend`'s vectors and can change between runs: for int8 the
    quantization settings and ONNX Runtime's version (its integer kernels); fp32 vectors differ only by rounding.
    Read from package metadata, so that remembering a model's fingerprint (`harness.pipeline.dense`) imports no
    ONNX Runtime."""
    from importlib.metadata import PackageNotFoundError, version

    if backend != "onnx-int8":
        return {}
    try:
        installed = version("onnxruntime")
    except PackageNotFoundError:
        installed = None
    return {"onnxruntime": installed, "quantization": quantization()}


def _onnxruntime() -> Any:
    # ONNX Runtime (1.32 here) sends usage telemetry to mobile.events.data.microsoft.com; an evaluation
    # tool has no business reporting on its user (seen by tracing tests/test_onnx_backend.py). Read
    # when its runtime starts, so set before the first session.
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    try:
        import onnxruntime
    except ImportError as exc:
        raise MissingDependencyError(
            "--backend onnx needs onnxruntime and onnx: pip install 'beir-harness[onnx]'"
        ) from exc
    return onnxruntime


def _modules(model: Any) -> dict[str, Any]:
    """The model's modules by class name (the import path of these classes moved in sentence-transformers 6)."""
    return {type(module).__name__: module for module in model}


def _pooling(model: Any) -> str:
    pooling = _modules(model).get("Pooling")
    if pooling is None:
        raise HarnessError("the ONNX backend needs a sentence-transformers model with a Pooling module")
    mode = getattr(pooling, "pooling_mode", None)  # sentence-transformers ≥ 6: one string
    if not isinstance(mode, str):
        mode = (
            "mean"
            if getattr(pooling, "pooling_mode_mean_tokens", False)
            else "cls"
            if getattr(pooling, "pooling_mode_cls_token", False)
            else "other"
        )
    if mode not in ("mean", "cls"):
        raise HarnessError(
            f"the ONNX backend supports mean or CLS pooling, not {mode!r}; use {setting('backend')} torch"
        )
    if getattr(pooling, "include_prompt", True) is False:
        raise HarnessError(
            "the ONNX backend pools over every token; this model excludes its prompt from pooling "
            "(include_prompt=False); use --backend torch"
        )
    return mode


def export(model: Any, folder: Path, quantize: bool, preparation: Preparation | None = None) -> Path:
    """Export the model's transformer to ``folder/model.onnx`` (atomically), int8 if `quantize`; the seconds of the
    export (and the quantization) go into `preparation`, or the steps are marked cached there.

    Raises:
        HarnessError: The export or the quantization failed; nothing is left in `folder`.
    """
    if quantize:
        _onnxruntime()
    preparation = preparation if preparation is not None else Preparation()
    if (folder / "model.onnx").is_file():
        preparation.cached += ["export", "quantize"] if quantize else ["export"]
        return folder / "model.onnx"
    tokens = model.tokenizer(["an example", "a longer example sentence"], padding=True, return_tensors="pt")
    return export_module(model[0].auto_model, tokens, folder, quantize, "last_hidden_state", preparation=preparation)


INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")  # what a transformer's export takes, when it has it


def export_module(
    transformer: Any,
    tokens: Any,
    folder: Path,
    quantize: bool,
    output: str,
    per_token: bool = True,
    preparation: Preparation | None = None,
) -> Path:
    """Export a transformers model to ``folder/model.onnx`` (atomically), int8 if `quantize`: its inputs named as in
    `tokens` (an example batch of torch tensors, `INPUT_NAMES` among them), its one output the model output's
    attribute `output` (``last_hidden_state``, ``logits``); the batch and sequence axes are dynamic (the output's
    sequence axis too when `per_token`: one row per token, not per input). The seconds of the export and of the
    quantization go into `preparation` (``export``, ``quantize``).

    Raises:
        HarnessError: The export or the quantization failed; nothing is left in `folder`.
    """
    import torch

    if quantize:
        _onnxruntime()  # the fp32 export needs torch only (OpenVINO reads it without ONNX Runtime)
    target = folder / "model.onnx"
    preparation = preparation if preparation is not None else Preparation()
    if target.is_file():
        preparation.cached += ["export", "quantize"] if quantize else ["export"]
        return target
    folder.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(folder.parent, f".{folder.name}.export.")
    staging = private_dir(folder.parent, f".{folder.name}.export")
    try:
        names = [name for name in INPUT_NAMES if name in tokens]

        class Named(torch.nn.Module):
            # The exporter passes inputs by position; the transformer takes them by name.
            def __init__(self):
                super().__init__()
                self.transformer = transformer

            def forward(self, *inputs):
                return getattr(self.transformer(**dict(zip(names, inputs)), return_dict=True), output)

        fp32 = staging / "fp32.onnx"
        with preparation.step("export"), torch.no_grad(), warnings.catch_warnings():
            # The TorchScript exporter's deprecation and tracer notices are not the user's to act on;
            # the test suite checks the exported graph against torch instead.
            warnings.simplefilter("ignore")
            torch.onnx.export(
                Named().eval(),
                tuple(tokens[name] for name in names),
                str(fp32),
                input_names=names,
                output_names=[output],
                opset_version=OPSET,
                dynamo=False,
                dynamic_axes={
                    **{name: {0: "batch", 1: "sequence"} for name in names},
                    output: {0: "batch", 1: "sequence"} if per_token else {0: "batch"},
                },
            )
        if quantize:
            with preparation.step("quantize"):
                _quantize_dynamic(fp32, staging / "model.onnx")
            fp32.unlink()
        else:
            fp32.rename(staging / "model.onnx")
        default_permissions(staging, folder=True)
        if folder.exists():
            shutil.rmtree(folder)
        os.rename(staging, folder)
    except HarnessError:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    except Exception as exc:  # noqa: BLE001 - the exporter raises many unrelated types
        shutil.rmtree(staging, ignore_errors=True)
        raise HarnessError(
            f"ONNX export of the model failed ({type(exc).__name__}: {str(exc)[:200]}); use --backend torch"
        ) from exc
    return target


def _quantize_dynamic(source: Path, target: Path) -> None:
    """ONNX Runtime's dynamic int8 quantization of `source` into `target`, by this CPU's `quantization`."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # The quantizer logs advice ("consider pre-processing") on the root logger: not the user's to act on.
    # (A handler of our own also stops `logging.warning` from installing a root handler for good.)
    root, quiet = logging.getLogger(), logging.NullHandler()
    level = root.level
    root.addHandler(quiet)
    root.setLevel(logging.DEBUG if logger.isEnabledFor(logging.DEBUG) else logging.ERROR)
    try:
        recipe = quantization()
        quantize_dynamic(str(source), str(target), **{**recipe, "weight_type": QuantType[recipe["weight_type"]]})
    finally:
        root.setLevel(level)
        root.removeHandler(quiet)


@dataclass
class OnnxEncoder(SentenceTransformerEncoder):
    """Encodes with ONNX Runtime; same interface and same vectors (to float tolerance) as torch.

    The sentence-transformers model is kept for its tokenizer, pooling, prompts and settings.
    """

    session: Any = None
    backend: str = "onnx"
    torch_fingerprint: dict[str, Any] = field(default_factory=dict)
    preparation: dict[str, Any] | None = None  # what preparing it cost (`Preparation.record`): not its identity

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "backend": self.backend}

    def fingerprint(self) -> dict[str, Any]:
        """The torch model's identity plus the runtime; for int8 also the CPU's kernel class.

        ONNX Runtime computes int8 MatMuls with different instructions per CPU (AVX2's saturating
        8-bit multiply-adds, AVX512-VNNI / AVX-VNNI dot products, AMX tiles), and the results
        differ slightly; so a shared cache keeps int8 vectors per kernel class and never hands one
        class's vectors to another. fp32 vectors differ across CPUs only by float rounding.
        """
        int8 = (
            {
                "quantization": quantization(),
                "int8_kernels": local_kernel_class(),
                "onnxruntime": _onnxruntime().__version__,
            }
            if self.backend == "onnx-int8"
            else {}
        )
        return {**self.torch_fingerprint, **self.settings(), "onnx_opset": OPSET, **int8}

    def _encode(self, texts: Sequence[str], prefix: str, prompt_name: str | None) -> np.ndarray:
        import numpy as np

        # A model prompt is a prefix too (what sentence-transformers prepends for prompt_name).
        prefix = prefix or (getattr(self.model, "prompts", None) or {}).get(prompt_name or "", "")
        texts = [prefix + text for text in texts] if prefix else list(texts)
        # Longest first, as sentence-transformers orders a call's texts: a batch holds texts of similar length, so
        # little of it is padding (texts an evaluation passes are in that order already: `plan_batches`).
        order = np.argsort([-len(text) for text in texts], kind="stable")
        texts = [texts[i] for i in order]
        outputs = []
        pooling = _pooling(self.model)
        normalize = self.normalize or "Normalize" in _modules(self.model)
        inputs = {i.name for i in self.session.get_inputs()}
        for start in range(0, len(texts), self.batch_size):
            batch = self.model.tokenizer(
                texts[start : start + self.batch_size],
                padding=True,
                truncation=True,
                max_length=self.max_seq_length,
                return_tensors="np",
            )
            feed = {name: value.astype(np.int64) for name, value in batch.items() if name in inputs}
            hidden = self.session.run(["last_hidden_state"], feed)[0]
            if pooling == "mean":
                mask = batch["attention_mask"][..., None].astype(np.float32)
                vectors = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
            else:
                vectors = hidden[:, 0]
            if normalize:
                vectors = vectors / np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)
            outputs.append(vectors.astype(np.float32))
        if not outputs:
            return np.zeros((0, self.dimension or 0), np.float32)
        vectors = np.empty((len(texts), outputs[0].shape[1]), np.float32)
        vectors[order] = np.concatenate(outputs)  # back in the caller's order
        return vectors


def ort_session(path: Path, threads: int | None = None) -> Any:
    """An ONNX Runtime CPU session of the model at `path`, fully optimized, on `threads` threads (None: one per
    physical core).

    Raises:
        MissingDependencyError: onnxruntime is not installed.
    """
    ort = _onnxruntime()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads is not None:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1  # the graph runs sequentially (ORT_SEQUENTIAL): no second pool
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def onnx_encoder(torch_encoder: Any, backend: str, cache_root: Path, threads: int | None = None) -> OnnxEncoder:
    """Wrap a loaded `SentenceTransformerEncoder` into an ONNX Runtime encoder (exporting once), whose session
    runs on `threads` threads (None: ONNX Runtime's default, one per physical core).

    Raises:
        MissingDependencyError: onnxruntime/onnx are not installed.
        HarnessError: Unknown backend or a failed export.
    """
    if backend not in BACKENDS:
        raise HarnessError(f"unknown backend {backend!r}; this runtime runs {', '.join(BACKENDS)}")
    _onnxruntime()  # a missing ONNX Runtime is one line before anything is exported
    from harness.io.cache import content_key

    if backend == "onnx-int8" and int8_fast_here() is False:
        logger.warning(
            "--backend onnx-int8: this CPU has no VNNI or AMX (kernel class %s), where int8 measured "
            "0.92x to 1.11x torch fp32 on AVX2-only EPYCs (1.8x with VNNI); `beir-harness env --bench` "
            "measures the backends here",
            local_kernel_class(),
        )

    fingerprint = torch_encoder.fingerprint()
    key = content_key(
        {
            "weights": fingerprint["weights_sha256"],
            "opset": OPSET,
            "backend": backend,
            **({"quantization": quantization()} if backend == "onnx-int8" else {}),
        }
    )
    preparation = Preparation()
    path = export(
        torch_encoder.model, cache_root / "onnx" / key, quantize=backend == "onnx-int8", preparation=preparation
    )
    with preparation.step("compile"):  # ONNX Runtime's graph optimization, as the session is made
        session = ort_session(path, threads)
    logger.info("%s backend: %s", backend, path)
    return OnnxEncoder(
        torch_encoder.name,
        torch_encoder.model,
        batch_size=torch_encoder.batch_size,
        normalize=torch_encoder.normalize,
        query_prefix=torch_encoder.query_prefix,
        doc_prefix=torch_encoder.doc_prefix,
        query_prompt_name=torch_encoder.query_prompt_name,
        doc_prompt_name=torch_encoder.doc_prompt_name,
        session=session,
        backend=backend,
        torch_fingerprint={k: v for k, v in fingerprint.items() if k not in torch_encoder.settings()},
        preparation=preparation.record(),
    )
