"""An OpenVINO encoder: the project's ONNX export run by OpenVINO's CPU plugin, optionally static int8.

``--backend openvino`` reads the fp32 ONNX export (`harness.runtimes.onnx_backend.export`) and compiles it for
the CPU at the plugin's default inference precision: bf16 on CPUs with native bf16 (AVX512-BF16, AMX), fp32
elsewhere; the precision used is read back from the compiled model and recorded (``inference_precision``).

``--backend openvino-int8`` quantizes weights *and* activations to int8 with NNCF's post-training quantization
(see ``QUANTIZATION``), its activation ranges measured on a `Calibration`: for a bi-encoder, the shipped sample
(`harness.runtimes.calibration.shipped_calibration`, text the project wrote), so the model is prepared once per
machine and a new corpus pays no preparation; a seeded sample of a corpus (`corpus_calibration`) for a learned
sparse encoder. No calibration data set is downloaded. The quantized model is cached under
``<cache dir>/openvino/<key>/`` (written to a temporary folder, renamed into place when complete, its files'
sha256 checked on every load: a damaged one is quantized again, with a warning), where the key covers the
weights, the ONNX opset, the quantization recipe, the calibration sample's hash, the CPU class
(`harness.host.cpu_class`: NNCF's statistics run at the CPU's precision) and the OpenVINO and NNCF versions; the
same facts enter the embedding cache key and the result's configuration.

Telemetry stays off: importing ``openvino`` starts the ``openvino_telemetry`` client (its model-conversion
package reports the import to Google Analytics, looks up ``www.google-analytics.com`` and writes a client id and
counters under ``~/intel``), and so does NNCF's; both are declined before either is first imported
(`declined_telemetry`, used by `openvino_module` and `nncf_module`), so nothing is sent or written. Needs the ``[openvino]``
extra: ``pip install 'beir-harness[openvino]'``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import random
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import HarnessError, MissingDependencyError
from harness.host import environment_variables, int8_saturates, local_cpu_class, local_kernel_class
from harness.io.formats import default_permissions, private_dir, remove_stale_temporaries
from harness.records import Doc, doc_text
from harness.runtimes.calibration import Calibration, shipped_calibration
from harness.runtimes.onnx_backend import OPSET, OnnxEncoder, export
from harness.runtimes.preparation import Preparation

logger = logging.getLogger(__name__)

# The calibration's statistics passes run the float model on every text, twice (SmoothQuant's, then the ranges'):
# most of a cold preparation. 32 texts without bias correction prepared several times faster with the same cosine
# to torch fp32, but moved SciFact's nDCG@10 by +0.0056 (BENCHMARKS.md, "Cold start of the int8/OpenVINO model"):
# outside the bound, so the measured recipe stays.
CALIBRATION_TEXTS = 300  # measured enough for stable ranges on SciFact/NFCorpus (BENCHMARKS.md)
CALIBRATION_SEED = 0
# NNCF post-training quantization (``nncf.quantize``), measured on full SciFact and NFCorpus against torch fp32
# (BENCHMARKS.md): every MatMul in int8 ("performance" preset: symmetric int8 activations, SmoothQuant
# alpha 0.95, fast bias correction) moved nDCG@10 by +0.0013 / -0.0040; NNCF's transformer default ("mixed":
# asymmetric activations) +0.0042 / -0.0039; SmoothQuant alpha 0.5 -0.0110 / -0.0017. Keeping the MatMuls of two
# activations in float — the attention scores (Q K^T) and their weighted sum of the values, whose two inputs are
# both activations quantized per tensor — moved them by +0.0025 / -0.0006, the smallest worst case of the recipes
# tried (with alpha 0.5: -0.0032 on SciFact; 0.8: +0.0051): the recipe used. No recipe tried keeps both within
# 0.002. The weight MatMuls, nearly all of the arithmetic, stay int8.
FLOAT_OPS = "MatMul of two activations"
QUANTIZATION: dict[str, Any] = {
    "tool": "nncf.quantize",
    "weights": "int8 per channel",
    "activations": "int8 static",
    "model_type": "transformer",
    "preset": "performance",
    "smooth_quant_alpha_matmul": 0.95,
    "bias_correction": "fast",
    "float_ops": FLOAT_OPS,
    "ignored_patterns": [],
    "calibration_max_length": None,
}
# Where the CPU's 8-bit multiply-adds saturate (`harness.host.int8_saturates`: AVX2, AVX512 without VNNI), NNCF's
# overflow fix quantizes every weight to half the 8-bit range (its default fixes the first layer only): measured on
# a tiny cross-encoder on an AVX2-only EPYC (BENCHMARKS.md, "Reranker and sparse encoder backends").
SATURATING = {"overflow_fix": "enable"}
EXTRA = "pip install 'beir-harness[openvino]'"


def quantization(kernel: str | None = None) -> dict[str, Any]:
    """The int8 recipe for CPU kernel class `kernel` (None: this machine's): `QUANTIZATION`, plus `SATURATING` where
    that class's int8 kernels saturate. Part of every int8 identity and cache key, so a model quantized for one
    class is never served to another."""
    return {**QUANTIZATION, **SATURATING} if int8_saturates(kernel) else dict(QUANTIZATION)


def runtime_identity(backend: str) -> dict[str, Any]:
    """What, besides the weights and settings, decides `backend`'s vectors and can change between runs: the
    OpenVINO (and NNCF) versions and, for int8, the quantization settings. Read from package metadata, so that
    remembering a model's fingerprint (`harness.pipeline.dense`) costs no OpenVINO import."""
    from importlib.metadata import PackageNotFoundError, version

    identity: dict[str, Any] = {}
    for package in ("openvino", "nncf") if backend == "openvino-int8" else ("openvino",):
        try:
            identity[package] = version(package)
        except PackageNotFoundError:
            identity[package] = None
    if backend == "openvino-int8":
        identity |= {"quantization": quantization(), "calibration_sample": shipped_calibration().identity()}
    return identity


# Both telemetry clients decline in a CI job: ``openvino_telemetry`` (``CI=true``, which OpenVINO's model-conversion
# package and NNCF both consult) and NNCF's own switch (``NNCF_CI``). Set for the import only; the consent each
# client computes then is kept for the life of the process, so later calls send nothing either.
TELEMETRY_DECLINED = {"CI": "true", "NNCF_CI": "1"}


def declined_telemetry():
    """A block in which importing ``openvino`` or ``nncf`` builds their telemetry clients declined."""
    return environment_variables(TELEMETRY_DECLINED)


def openvino_module() -> Any:
    """The ``openvino`` module, imported with its telemetry declined, or one line naming the extra."""
    try:
        with declined_telemetry():
            import openvino
    except ImportError as exc:
        raise MissingDependencyError(
            f"--backend openvino needs openvino (and nncf for openvino-int8): {EXTRA}"
        ) from exc
    return openvino


def nncf_module() -> Any:
    """The ``nncf`` module, imported with its telemetry declined, or one line naming the extra.

    NNCF builds its telemetry client when imported and, without a consent file, counts that as consent; both
    its CI switch (``NNCF_CI``) and the telemetry package's own CI check (``CI=true``) decline it, so the two
    are set for the import only (nothing is written under ``~/intel``, nothing is sent).
    """
    try:
        with declined_telemetry():
            import nncf
    except ImportError as exc:
        raise MissingDependencyError(f"--backend openvino-int8 needs nncf: {EXTRA}") from exc
    return nncf


def corpus_calibration(
    docs: Iterable[Doc], corpus_sha256: str, size: int = CALIBRATION_TEXTS, seed: int = CALIBRATION_SEED
) -> Calibration:
    """A seeded uniform sample of `size` document texts (reservoir sampling: one pass, no count needed).

    A corpus with fewer documents gives all of them, with a warning: the ranges are then measured on less.
    """
    rng = random.Random(seed)
    chosen: list[tuple[int, str]] = []
    seen = 0
    for seen, doc in enumerate(docs, start=1):
        if len(chosen) < size:
            chosen.append((seen, doc_text(doc)))
        else:
            slot = rng.randrange(seen)
            if slot < size:
                chosen[slot] = (seen, doc_text(doc))
    if seen < size:
        logger.warning(
            "openvino-int8: the corpus has %d documents, fewer than the %d-text calibration sample; "
            "calibrating on all %d",
            seen,
            size,
            seen,
        )
    return Calibration(tuple(text for _, text in sorted(chosen)), corpus_sha256, size, seed)


class CompiledSession:
    """An OpenVINO compiled model behind the two calls `OnnxEncoder` makes of an ONNX Runtime session."""

    @dataclass(frozen=True)
    class Input:
        name: str

    def __init__(self, compiled: Any):
        self.compiled = compiled
        self.request = compiled.create_infer_request()

    def get_inputs(self) -> list[Input]:
        return [self.Input(port.get_any_name()) for port in self.compiled.inputs]

    def run(self, names: list[str], feed: dict[str, Any]) -> list[Any]:
        outputs = self.request.infer(feed)
        return [outputs[self.compiled.output(name)] for name in names]


@dataclass
class OpenVinoEncoder(OnnxEncoder):
    """Encodes with OpenVINO; same tokenization, pooling and normalization as `OnnxEncoder` (and torch)."""

    inference_precision: str = "f32"
    calibration: dict[str, Any] | None = None
    versions: dict[str, str] | None = None

    def settings(self) -> dict[str, Any]:
        quantized = {"quantization": quantization(), "calibration": self.calibration} if self.calibration else {}
        return {**super().settings(), "inference_precision": self.inference_precision, **quantized}

    def fingerprint(self) -> dict[str, Any]:
        """The torch model's identity, the settings, the runtime versions and this CPU's kernel class (bf16 and
        int8 kernels differ by CPU more than by float rounding)."""
        return {
            **self.torch_fingerprint,
            **self.settings(),
            "onnx_opset": OPSET,
            **(self.versions or {}),
            "cpu_kernels": local_kernel_class(),
        }


def _precision_name(compiled: Any) -> str:
    # OpenVINO's element type names: "bf16", "f32", "f16".
    return compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _cached_model(core: Any, folder: Path) -> Any | None:
    """The quantized model cached in `folder`, or None; a damaged one is removed, with a warning."""
    manifest = folder / "manifest.json"
    if not manifest.is_file():
        return None
    try:
        sums = json.loads(manifest.read_text(encoding="utf-8"))["sha256"]
        if any(_sha256(folder / name) != digest for name, digest in sums.items()):
            raise ValueError("a file's sha256 differs from the manifest's")
        return core.read_model(str(folder / "model.xml"))
    except Exception as exc:  # noqa: BLE001 - a damaged cache entry fails in many ways; all mean "redo it"
        logger.warning(
            "the cached OpenVINO model %s is damaged (%s); quantizing it again",
            folder,
            f"{type(exc).__name__}: {str(exc)[:120]}",
        )
        shutil.rmtree(folder, ignore_errors=True)
        return None


def _items(tokenizer: Any, texts: Iterable[str], names: set[str], max_length: int | None) -> list[dict[str, Any]]:
    """One model input per calibration text (batch 1: no padding enters the activation ranges)."""
    import numpy as np

    items = []
    for text in texts:
        batch = tokenizer([text], truncation=True, max_length=max_length, return_tensors="np")
        items.append({name: value.astype(np.int64) for name, value in batch.items() if name in names})
    return items


class TimedItems:
    """The calibration inputs as NNCF iterates them, once per statistics pass (SmoothQuant's, then the ranges'):
    `seconds` adds up each pass from its first item to its end, which is the model run on every item and the
    statistics kept of it, the calibration's share of ``nncf.quantize``."""

    def __init__(self, items: list[dict[str, Any]], timer: Callable[[], float] = time.perf_counter):
        self.items, self.timer, self.seconds, self.passes = items, timer, 0.0, 0

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        started = self.timer()
        self.passes += 1
        try:
            yield from self.items
        finally:
            self.seconds += self.timer() - started


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """NNCF's progress bars and INFO lines go to stdout, where ``--json`` writes the result: the bars are dropped
    and its warnings sent to stderr while it quantizes."""
    handlers = [handler for handler in logging.getLogger("nncf").handlers if isinstance(handler, logging.StreamHandler)]
    streams = [handler.setStream(sys.stderr) for handler in handlers]
    nncf_logger = logging.getLogger("nncf")
    level = nncf_logger.level
    nncf_logger.setLevel(logging.DEBUG if logger.isEnabledFor(logging.DEBUG) else logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        nncf_logger.setLevel(level)
        for handler, stream in zip(handlers, streams):
            handler.setStream(stream)


def quantize(
    core: Any,
    onnx_path: Path,
    model: Any,
    calibration: Calibration,
    folder: Path,
    max_length: int | None,
    preparation: Preparation | None = None,
) -> Any:
    """The int8 model of `onnx_path`, calibrated on `calibration`, cached (atomically) in `folder`; its steps'
    seconds go into `preparation` (``calibration``: NNCF's statistics passes; ``quantize``: the rest).

    Raises:
        HarnessError: OpenVINO could not read the model or NNCF could not quantize it; nothing is cached.
    """
    preparation = preparation if preparation is not None else Preparation()
    with preparation.step("quantize"):
        cached = _cached_model(core, folder)
    if cached is not None:
        preparation.cached += ["calibration", "quantize"]
        return cached
    with preparation.step("quantize"):
        float_model = read(core, onnx_path)
        names = {port.get_any_name() for port in float_model.inputs}
        items = _items(model.tokenizer, calibration.texts, names, QUANTIZATION["calibration_max_length"] or max_length)
        quantized = quantize_items(core, float_model, items, calibration, folder, preparation)
    preparation.seconds["quantize"] -= preparation.seconds.get("calibration", 0.0)  # timed inside it
    return quantized


def quantize_items(
    core: Any,
    float_model: Any,
    items: list[dict[str, Any]],
    calibration: Calibration,
    folder: Path,
    preparation: Preparation | None = None,
):
    """The int8 model of `float_model` (OpenVINO's read of an ONNX export) by `quantization`, its activation ranges
    measured on `items` (one model input each, drawn as `calibration` says), cached (atomically) in `folder`; the
    seconds NNCF spends in its statistics passes go into `preparation` as ``calibration``.

    Raises:
        HarnessError: NNCF could not quantize it; nothing is cached.
    """
    cached = _cached_model(core, folder)
    if cached is not None:
        if preparation is not None:
            preparation.cached += ["calibration", "quantize"]
        return cached
    items = TimedItems(items)
    nncf = nncf_module()
    from nncf.quantization.advanced_parameters import (
        AdvancedQuantizationParameters,
        AdvancedSmoothQuantParameters,
        OverflowFix,
    )

    ov = openvino_module()
    recipe = quantization()
    folder.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(folder.parent, f".{folder.name}.quantize.")
    staging = private_dir(folder.parent, f".{folder.name}.quantize")
    try:
        with _quiet():
            quantized = nncf.quantize(
                float_model,
                nncf.Dataset(items),
                model_type=nncf.ModelType.TRANSFORMER,
                preset=nncf.QuantizationPreset(QUANTIZATION["preset"]),
                subset_size=len(items),
                fast_bias_correction=QUANTIZATION["bias_correction"] == "fast",
                ignored_scope=_ignored_scope(nncf, float_model),
                advanced_parameters=AdvancedQuantizationParameters(
                    smooth_quant_alphas=AdvancedSmoothQuantParameters(matmul=QUANTIZATION["smooth_quant_alpha_matmul"]),
                    disable_bias_correction=QUANTIZATION["bias_correction"] == "off",
                    **({"overflow_fix": OverflowFix(recipe["overflow_fix"])} if "overflow_fix" in recipe else {}),
                ),
            )
        if preparation is not None:
            preparation.add("calibration", items.seconds)
        ov.save_model(quantized, str(staging / "model.xml"), compress_to_fp16=False)
        sums = {name: _sha256(staging / name) for name in ("model.xml", "model.bin")}
        (staging / "manifest.json").write_text(
            json.dumps({"sha256": sums, "calibration": calibration.identity(), "quantization": recipe}),
            encoding="utf-8",
        )
        default_permissions(staging, folder=True)
        if folder.exists():
            shutil.rmtree(folder)
        os.rename(staging, folder)
    except Exception as exc:  # noqa: BLE001 - NNCF and OpenVINO raise many unrelated types
        shutil.rmtree(staging, ignore_errors=True)
        raise HarnessError(
            f"NNCF could not quantize the model ({type(exc).__name__}: {str(exc)[:200]}); "
            "use --backend openvino or onnx-int8"
        ) from exc
    # Read back from its files, as every later load reads it: OpenVINO keys its compiled blob by the model's graph,
    # and NNCF's model in memory hashes differently from the same model saved and read.
    return core.read_model(str(folder / "model.xml"))


def activation_matmuls(model: Any) -> list[str]:
    """The names of `model`'s MatMuls whose two inputs are both activations (neither a weight constant, nor a
    constant behind a Convert): in a transformer, the attention scores and their weighted sum of the values. Found
    from the graph, so that the recipe holds for any architecture's export, whatever its node names."""

    def constant(output: Any) -> bool:
        node = output.get_node()
        while node.get_type_name() == "Convert":  # a compressed (fp16) weight is a Constant behind a Convert
            node = node.input_value(0).get_node()
        return node.get_type_name() == "Constant"

    return [
        op.get_friendly_name()
        for op in model.get_ops()
        if op.get_type_name() == "MatMul" and not any(constant(op.input_value(i)) for i in range(2))
    ]


def _ignored_scope(nncf: Any, model: Any) -> Any:
    """What `QUANTIZATION` keeps in float, as NNCF's ignored scope (None: everything is quantized)."""
    names = activation_matmuls(model) if QUANTIZATION.get("float_ops") == FLOAT_OPS else []
    patterns = QUANTIZATION["ignored_patterns"]
    return nncf.IgnoredScope(names=names, patterns=patterns, validate=False) if names or patterns else None


def read(core: Any, onnx_path: Path) -> Any:
    """OpenVINO's model of the ONNX export.

    Raises:
        HarnessError: OpenVINO cannot convert it (an operator it lacks, a malformed graph).
    """
    try:
        return core.read_model(str(onnx_path))
    except Exception as exc:  # noqa: BLE001 - the ONNX frontend raises its own runtime errors
        raise HarnessError(
            f"OpenVINO cannot convert the model's ONNX export {onnx_path} ({_reason(exc)}); use --backend torch or onnx"
        ) from exc


def _reason(exc: Exception) -> str:
    """OpenVINO's message without its source locations: ``Exception from src/...``, ``Check '...' failed at``."""
    lines = [line.strip().removeprefix("-- ") for line in str(exc).splitlines()]
    kept = [
        line
        for line in lines
        if line and not line.startswith(("Exception from ", "Check ", "FrontEnd API failed", "Summary:"))
    ]
    return f"{type(exc).__name__}: {' '.join(kept)[:300]}"


# OpenVINO's own cache of compiled models (``CACHE_DIR``), under the user cache: a second load of the same model with
# the same settings on this OpenVINO imports the compiled blob instead of compiling (the plugin keys each blob by the
# model, the compile settings, the device and its own version, and compiles again when a blob fails to import).
COMPILED = "openvino-compiled"  # beside openvino/, which holds one folder per quantized model


def compile_for_cpu(core: Any, model: Any, blobs: Path | None, threads: int | None = None) -> Any:
    """`model` compiled for the CPU on `threads` threads (None: all cores), through the blob cache in `blobs`.

    Raises:
        HarnessError: The plugin cannot compile it.
    """
    config: dict[str, Any] = {"INFERENCE_NUM_THREADS": threads} if threads else {}
    if blobs is not None:
        blobs.mkdir(parents=True, exist_ok=True)
        config["CACHE_DIR"] = str(blobs)
    try:
        return core.compile_model(model, "CPU", config)
    except Exception as exc:  # noqa: BLE001 - the plugin raises its own runtime errors
        raise HarnessError(
            f"OpenVINO cannot compile the model for the CPU ({_reason(exc)}); use --backend torch or onnx"
        ) from exc


def _loaded_from_cache(compiled: Any) -> bool:
    try:
        return bool(compiled.get_property("LOADED_FROM_CACHE"))
    except Exception:  # noqa: BLE001 - a plugin without the property: not known to be cached
        return False


def openvino_encoder(
    torch_encoder: Any,
    backend: str,
    cache_root: Path,
    calibration: Calibration | None = None,
    threads: int | None = None,
) -> OpenVinoEncoder:
    """Wrap a loaded `SentenceTransformerEncoder` into an OpenVINO encoder (exporting and quantizing once),
    compiled to run on `threads` threads (None: the CPU plugin's default, all cores).

    Raises:
        MissingDependencyError: openvino (or, for int8, nncf) is not installed.
        HarnessError: Unknown backend, or a model OpenVINO cannot convert.
    """
    if backend not in ("openvino", "openvino-int8"):
        raise HarnessError(f"unknown OpenVINO backend {backend!r}; use openvino or openvino-int8")
    if backend == "openvino-int8" and calibration is None:
        calibration = shipped_calibration()
    ov = openvino_module()
    if backend == "openvino-int8":
        nncf_module()  # a missing nncf is one line before anything is exported
    from harness.io.cache import content_key

    fingerprint = torch_encoder.fingerprint()
    onnx_key = content_key({"weights": fingerprint["weights_sha256"], "opset": OPSET, "backend": "onnx"})
    preparation = Preparation()
    onnx_path = export(torch_encoder.model, cache_root / "onnx" / onnx_key, False, preparation)  # shared with onnx
    core = ov.Core()
    versions = {"openvino": ov.__version__}
    identity = None
    if backend == "openvino-int8":
        identity = calibration.identity()
        versions["nncf"] = nncf_module().__version__
        key = content_key(
            {"onnx": onnx_key, "quantization": quantization(), "calibration": identity, **versions}
            | ({"cpu_class": local_cpu_class()} if calibration.sample is not None else {})
        )
        folder = cache_root / "openvino" / key
        model = quantize(
            core, onnx_path, torch_encoder.model, calibration, folder, torch_encoder.max_seq_length, preparation
        )
    else:
        with preparation.step("read"):
            model = read(core, onnx_path)
    with preparation.step("compile"):
        compiled = compile_for_cpu(core, model, cache_root / COMPILED, threads)
    if _loaded_from_cache(compiled):
        preparation.cached.append("compile")
    precision = _precision_name(compiled)
    logger.info("%s backend: inference precision %s (OpenVINO %s)", backend, precision, ov.__version__)
    return OpenVinoEncoder(
        torch_encoder.name,
        torch_encoder.model,
        batch_size=torch_encoder.batch_size,
        normalize=torch_encoder.normalize,
        query_prefix=torch_encoder.query_prefix,
        doc_prefix=torch_encoder.doc_prefix,
        query_prompt_name=torch_encoder.query_prompt_name,
        doc_prompt_name=torch_encoder.doc_prompt_name,
        session=CompiledSession(compiled),
        backend=backend,
        torch_fingerprint={k: v for k, v in fingerprint.items() if k not in torch_encoder.settings()},
        inference_precision=precision,
        calibration=identity,
        versions=versions,
        preparation=preparation.record(),
    )
