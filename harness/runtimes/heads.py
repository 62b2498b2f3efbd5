"""The cross-encoder reranker and the learned sparse encoder on a runtime (``--rerank-backend``, ``--sparse-backend``).

A runtime whose record exports (`harness.runtimes.registry.Runtime.head`) runs the model's transformer *with its
head* — a cross-encoder's sequence-classification logits, a SPLADE model's masked-LM vocabulary logits — exported
once to ONNX (`harness.runtimes.onnx_backend.export_module`, cached under ``<cache dir>/onnx/``) under ONNX Runtime
(``onnx``, ``onnx-int8``: int8 weights, `onnx_backend.quantization`) or OpenVINO (``openvino``; ``openvino-int8``:
static int8 by NNCF, `openvino_backend.quantization`, calibrated on a seeded sample of the pairs being reranked or
of the corpus, cached under ``<cache dir>/openvino/``). What follows the logits is cheap and done here in numpy as
sentence-transformers does it: the cross-encoder's activation (``CrossEncoder.activation_fn``: identity or
sigmoid), SPLADE pooling (``SpladePooling``: logits × attention mask, relu, log1p — twice for ``log1p_relu`` —,
then max or sum over the tokens). Inputs are tokenized by the model's own ``preprocess`` (its truncation, prompts
and special tokens). A model of another shape (several labels, another activation or pooling, ``max_active_dims``,
a router) is refused in one line naming ``backend torch``.

The wrapped model's fingerprint is the torch model's plus the backend and what decides its numbers (opset, runtime
versions, quantization, the CPU's kernel class, the calibration sample): the rerank score cache and the sparse rows'
cache key read it, so no two backends share scores or rows; torch's fingerprint is unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.host import local_kernel_class
from harness.runtimes.calibration import Calibration
from harness.runtimes.onnx_backend import INPUT_NAMES, OPSET, export_module, ort_session
from harness.runtimes.preparation import Preparation

logger = logging.getLogger(__name__)

EXAMPLE_PAIRS = [("an example query", "a document"), ("a longer example query", "another, longer document text")]
EXAMPLE_TEXTS = ["an example", "a longer example sentence"]
ACTIVATIONS = {"Identity": lambda x: x, "Sigmoid": lambda x: 1.0 / (1.0 + _exp(-x))}


def _exp(x: Any) -> Any:
    import numpy as np

    return np.exp(x)


@dataclass(frozen=True)
class Head:
    """What is exported of a model: its transformers module with the head, and how inputs reach it.

    Attributes:
        kind: ``sequence-classification`` or ``fill-mask`` (part of the export's cache key).
        module: The transformers model (``...ForSequenceClassification``, ``...ForMaskedLM``).
        example: An example batch of torch tensors (`INPUT_NAMES` among its keys), for the export.
        per_token: Its logits have a row per token (the masked-LM head) rather than one per input.
        items: Calibration inputs → one model input each (numpy int64, batch 1: no padding in the ranges).
    """

    kind: str
    module: Any
    example: dict[str, Any]
    per_token: bool
    items: Callable[[Sequence[Any]], list[dict[str, Any]]]


def _feed(features: dict[str, Any], names: set[str]) -> dict[str, Any]:
    """The model inputs among `features` (torch tensors from ``preprocess``) as numpy int64."""
    import numpy as np

    return {name: features[name].numpy().astype(np.int64) for name in INPUT_NAMES if name in features and name in names}


def onnx_head(
    backend: str,
    head: Head,
    weights: str,
    cache_root: Path,
    calibration: Calibration | None = None,
    threads: int | None = None,
    preparation: Preparation | None = None,
) -> tuple[Any, dict[str, Any]]:
    """An ONNX Runtime session of `head` (int8 weights for ``onnx-int8``) and the facts its numbers depend on; the
    seconds of the export, the quantization and the session go into `preparation`."""
    from harness.io.cache import content_key
    from harness.runtimes.onnx_backend import quantization, runtime_identity

    quantize = backend == "onnx-int8"
    key = content_key(
        {
            "weights": weights,
            "opset": OPSET,
            "backend": backend,
            "head": head.kind,
            **({"quantization": quantization()} if quantize else {}),
        }
    )
    preparation = preparation if preparation is not None else Preparation()
    path = export_module(
        head.module, head.example, cache_root / "onnx" / key, quantize, "logits", head.per_token, preparation
    )
    facts = {"onnx_opset": OPSET, **runtime_identity(backend)}
    if quantize:
        facts["int8_kernels"] = local_kernel_class()  # int8 MatMuls differ by CPU kernel class
    logger.info("%s backend (%s): %s", backend, head.kind, path)
    with preparation.step("compile"):  # ONNX Runtime's graph optimization, as the session is made
        return ort_session(path, threads), facts


def openvino_head(
    backend: str,
    head: Head,
    weights: str,
    cache_root: Path,
    calibration: Calibration | None = None,
    threads: int | None = None,
    preparation: Preparation | None = None,
) -> tuple[Any, dict[str, Any]]:
    """An OpenVINO session of `head` (static int8 calibrated on `calibration` for ``openvino-int8``) and the facts
    its numbers depend on (the precision the plugin compiled it at among them); the seconds of the export, the
    calibration, the quantization and the compile go into `preparation`."""
    from harness.io.cache import content_key
    from harness.runtimes.openvino_backend import (
        CompiledSession,
        nncf_module,
        openvino_module,
        quantization,
        quantize_items,
        read,
        runtime_identity,
    )

    quantize = backend == "openvino-int8"
    if quantize and calibration is None:
        raise HarnessError(f"backend {backend} calibrates on the texts it scores, and none were given")
    ov = openvino_module()
    if quantize:
        nncf_module()  # a missing nncf is one line before anything is exported
    preparation = preparation if preparation is not None else Preparation()
    onnx_key = content_key({"weights": weights, "opset": OPSET, "backend": "onnx", "head": head.kind})
    onnx_path = export_module(
        head.module, head.example, cache_root / "onnx" / onnx_key, False, "logits", head.per_token, preparation
    )
    core = ov.Core()
    model = read(core, onnx_path)
    facts: dict[str, Any] = {"onnx_opset": OPSET, **runtime_identity(backend), "cpu_kernels": local_kernel_class()}
    if quantize:
        identity = calibration.identity()
        names = {port.get_any_name() for port in model.inputs}
        items = [
            {name: value for name, value in item.items() if name in names} for item in head.items(calibration.texts)
        ]
        versions = {name: facts[name] for name in ("openvino", "nncf")}
        key = content_key({"onnx": onnx_key, "quantization": quantization(), "calibration": identity, **versions})
        with preparation.step("quantize"):
            model = quantize_items(core, model, items, calibration, cache_root / "openvino" / key, preparation)
        preparation.seconds["quantize"] -= preparation.seconds.get("calibration", 0.0)  # timed inside it
        facts["calibration"] = identity
    try:
        with preparation.step("compile"):
            compiled = core.compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": threads} if threads else {})
    except Exception as exc:  # noqa: BLE001 - the plugin raises its own runtime errors
        raise HarnessError(
            f"OpenVINO cannot compile the {head.kind} model for the CPU ({type(exc).__name__}); use backend torch"
        ) from exc
    facts["inference_precision"] = compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()
    return CompiledSession(compiled), facts


class RuntimeReranker:
    """A loaded `harness.retrieval.rerank.Reranker` whose pairs are scored by its export on a runtime: the same
    interface (``spec``, ``fingerprint``, ``score``), the same tokenization and activation."""

    def __init__(self, reranker: Any, backend: str, session: Any, facts: dict[str, Any]):
        self.reranker, self.spec, self.backend = reranker, reranker.spec, backend
        self.session, self.facts = session, facts
        self.activation = ACTIVATIONS[type(reranker.model.activation_fn).__name__]
        self.inputs = {item.name for item in session.get_inputs()}

    def fingerprint(self) -> dict[str, Any]:
        """The torch model's fingerprint, the backend and what decides its scores."""
        return {**self.reranker.fingerprint(), "backend": self.backend, **self.facts}

    def score(self, pairs: Sequence[tuple[str, str]]) -> Any:
        """Scores of (query, document) pairs, float32, with the model's own activation."""
        import numpy as np

        model, size, scores = self.reranker.model, self.spec.batch_size, []
        for start in range(0, len(pairs), size):
            feed = _feed(model.preprocess([tuple(pair) for pair in pairs[start : start + size]]), self.inputs)
            logits = np.asarray(self.session.run(["logits"], feed)[0], dtype=np.float32)
            scores.append(self.activation(logits).astype(np.float32).reshape(-1))
        return np.concatenate(scores) if scores else np.zeros(0, np.float32)


def reranker_head(reranker: Any) -> Head:
    """The export of a one-label cross-encoder with an identity or sigmoid activation.

    Raises:
        HarnessError: Another shape of model, naming backend torch.
    """
    model = reranker.model
    activation = type(getattr(model, "activation_fn", None)).__name__
    if getattr(model, "num_labels", 1) != 1 or activation not in ACTIVATIONS or len(list(model)) != 1:
        raise HarnessError(
            f"{reranker.spec.model}: an exported reranker needs a one-label cross-encoder with an identity or "
            f"sigmoid activation (this one: {getattr(model, 'num_labels', '?')} labels, {activation}); use "
            "rerank backend torch"
        )
    return Head(
        "sequence-classification",
        model.model,
        dict(model.preprocess(EXAMPLE_PAIRS)),
        per_token=False,
        items=lambda pairs: [_feed(model.preprocess([tuple(pair)]), set(INPUT_NAMES)) for pair in pairs],
    )


def wrap_reranker(
    record: Any, reranker: Any, cache_root: Path, calibration: Calibration | None = None, threads: int | None = None
) -> Any:
    """`reranker` (a torch `Reranker`, fp32 on the CPU) on runtime `record`; torch's record returns it as it is."""
    return _wrapped(record, reranker, reranker_head, RuntimeReranker, cache_root, calibration, threads)


def _wrapped(
    record: Any,
    torch_model: Any,
    head: Callable[[Any], Any],
    wrapper: Callable[..., Any],
    cache_root: Path,
    calibration: Calibration | None,
    threads: int | None,
) -> Any:
    """`torch_model` exported with its `head` and run by `record`'s runtime inside `wrapper`; torch: itself."""
    if record.head is None:
        return torch_model
    preparation = Preparation()
    session, facts = record.head(
        record.name,
        head(torch_model),
        torch_model.fingerprint()["weights_sha256"],
        cache_root,
        calibration if record.calibrates_heads else None,
        threads,
        preparation=preparation,
    )
    wrapped = wrapper(torch_model, record.name, session, facts)
    wrapped.preparation = preparation.record()  # what preparing it cost: not its identity
    return wrapped


class RuntimeSparse:
    """A loaded `harness.retrieval.learned_sparse.SparseModel` encoded by its export on a runtime: the same interface
    (``name``, ``batch_size``, ``precision``, ``fingerprint``, ``encode_docs``, ``encode_queries``), the same
    tokenization, prompts and SPLADE pooling."""

    def __init__(self, sparse: Any, backend: str, session: Any, facts: dict[str, Any]):
        self.sparse, self.backend, self.session, self.facts = sparse, backend, session, facts
        self.name, self.batch_size, self.precision = sparse.name, sparse.batch_size, sparse.precision
        self.pooling = list(sparse.model)[1]
        self.inputs = {item.name for item in session.get_inputs()}

    def fingerprint(self) -> dict[str, Any]:
        """The torch model's fingerprint, the backend and what decides its rows."""
        return {**self.sparse.fingerprint(), "backend": self.backend, **self.facts}

    def encode_docs(self, texts: Sequence[str]) -> Any:
        """Document rows (CSR, float32)."""
        return self._encode(texts, prompt_of(self.sparse.model, ("document", "passage", "corpus")))

    def encode_queries(self, texts: Sequence[str]) -> Any:
        """Query rows (CSR, float32)."""
        return self._encode(texts, prompt_of(self.sparse.model, ("query",)))

    def _encode(self, texts: Sequence[str], prompt: str | None) -> Any:
        import numpy as np
        import scipy.sparse

        model, rows = self.sparse.model, []
        for start in range(0, len(texts), self.batch_size):
            features = model.preprocess(list(texts[start : start + self.batch_size]), prompt=prompt)
            logits = np.asarray(self.session.run(["logits"], _feed(features, self.inputs))[0], dtype=np.float32)
            pooled = splade_pool(
                logits,
                features["attention_mask"].numpy(),
                self.pooling.pooling_strategy,
                self.pooling.activation_function,
            )
            rows.append(scipy.sparse.csr_matrix(pooled, dtype=np.float32))
        if not rows:
            return scipy.sparse.csr_matrix((0, self.pooling_width()), dtype=np.float32)
        return scipy.sparse.vstack(rows, format="csr", dtype=np.float32)

    def pooling_width(self) -> int:
        return int(self.sparse.model.get_embedding_dimension() or 0)


def splade_pool(logits: Any, attention_mask: Any, strategy: str, activation: str) -> Any:
    """``SpladePooling`` in numpy, in place: logits × mask, relu, log1p (twice for ``log1p_relu``), max or sum over
    the tokens."""
    import numpy as np

    values = logits * attention_mask[..., None].astype(np.float32)
    np.maximum(values, 0, out=values)
    np.log1p(values, out=values)
    if activation == "log1p_relu":
        np.log1p(values, out=values)
    return values.max(axis=1) if strategy == "max" else values.sum(axis=1)


def prompt_of(model: Any, names: Sequence[str]) -> str | None:
    """The prompt ``encode_query`` / ``encode_document`` apply: the first of `names` the model has, else its
    default prompt, else none."""
    prompts = getattr(model, "prompts", None) or {}
    for name in names:
        if name in prompts:
            return prompts[name]
    default = getattr(model, "default_prompt_name", None)
    return prompts.get(default) if default else None


def sparse_head(sparse: Any) -> Head:
    """The export of a masked-LM transformer followed by SPLADE pooling (max or sum, relu or log1p_relu).

    Raises:
        HarnessError: Another shape of model, naming backend torch.
    """
    modules = list(sparse.model)
    pooling = modules[1] if len(modules) == 2 else None
    if (
        pooling is None
        or type(pooling).__name__ != "SpladePooling"
        or getattr(pooling, "pooling_strategy", None) not in ("max", "sum")
        or getattr(pooling, "activation_function", None) not in ("relu", "log1p_relu")
        or getattr(sparse.model, "max_active_dims", None) is not None
        or not hasattr(modules[0], "auto_model")
    ):
        raise HarnessError(
            f"{sparse.name}: an exported sparse encoder needs a masked-LM transformer and SPLADE pooling (max or "
            f"sum, relu), without max_active_dims (this one: {', '.join(type(m).__name__ for m in modules)}); use "
            "sparse backend torch"
        )
    model = sparse.model
    return Head(
        "fill-mask",
        modules[0].auto_model,
        dict(model.preprocess(EXAMPLE_TEXTS)),
        per_token=True,
        items=lambda texts: [_feed(model.preprocess([text]), set(INPUT_NAMES)) for text in texts],
    )


def wrap_sparse(
    record: Any, sparse: Any, cache_root: Path, calibration: Calibration | None = None, threads: int | None = None
) -> Any:
    """`sparse` (a torch `SparseModel`, fp32 on the CPU) on runtime `record`; torch's record returns it as it is."""
    return _wrapped(record, sparse, sparse_head, RuntimeSparse, cache_root, calibration, threads)
