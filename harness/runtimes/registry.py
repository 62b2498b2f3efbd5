"""The encoder runtimes (``--backend``): one record per runtime, with the policy the pipeline and the CLI read.

A runtime takes the loaded torch encoder (`harness.retrieval.sentence_transformer`) and returns the encoder that
runs its model: ``torch`` is that encoder itself; ``onnx`` and ``onnx-int8`` run its exported transformer under ONNX
Runtime (`harness.runtimes.onnx_backend`); ``openvino`` and ``openvino-int8`` run the same export under OpenVINO,
the second quantized by NNCF on the shipped calibration sample (`harness.runtimes.calibration.shipped_calibration`:
prepared once per machine, whatever the corpus), a cross-encoder's or a learned sparse encoder's on a sample of
what it scores (`harness.runtimes.openvino_backend`). Each record says how to build it, what besides the weights
decides its vectors (its cache identity), where and in which precision it runs, what it calibrates on, whether its
vectors depend on the CPU's int8 kernels, what it needs installed, and how ``--backend auto`` may pick it. Nothing outside this package tests a backend's name: it looks the record up (`runtime`).

``auto`` is no runtime: a probe picks one of these (and a precision) for the machine (`harness.runtimes.auto`).
This module imports no runtime library; a record imports its runtime's module only when it builds one.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import HarnessError

if TYPE_CHECKING:
    from harness.records import Doc
    from harness.runtimes.calibration import Calibration

AUTO = "auto"  # not a runtime: the probe's choice of one (`harness.runtimes.auto`)
TORCH = "torch"  # the reference every other runtime is measured against, and the one a model loads as first
# The command line's --backend when none is given: auto decides in seconds on a CPU class the table lists (a known
# class whose table ranks torch first loads nothing more), so a first `evaluate` runs the fastest runtime whose
# quality holds; the result records the runtime chosen. This variable pins another (``torch``: the reference).
DEFAULT_BACKEND = AUTO
BACKEND_ENV = "BEIR_HARNESS_BACKEND"


def _onnx(torch_encoder: Any, name: str, cache_root: Path, calibration: Calibration | None, threads: int | None) -> Any:
    from harness.runtimes.onnx_backend import onnx_encoder

    return onnx_encoder(torch_encoder, name, cache_root, threads=threads)


def _onnx_identity(name: str) -> dict[str, Any]:
    from harness.runtimes.onnx_backend import runtime_identity

    return runtime_identity(name)


def _openvino(
    torch_encoder: Any, name: str, cache_root: Path, calibration: Calibration | None, threads: int | None
) -> Any:
    from harness.runtimes.openvino_backend import openvino_encoder

    if calibration is None:
        return openvino_encoder(torch_encoder, name, cache_root, threads=threads)
    return openvino_encoder(torch_encoder, name, cache_root, calibration=calibration, threads=threads)


def _openvino_identity(name: str) -> dict[str, Any]:
    from harness.runtimes.openvino_backend import runtime_identity

    return runtime_identity(name)


def _onnx_head(*args: Any, **kwargs: Any) -> Any:
    from harness.runtimes.heads import onnx_head

    return onnx_head(*args, **kwargs)


def _openvino_head(*args: Any, **kwargs: Any) -> Any:
    from harness.runtimes.heads import openvino_head

    return openvino_head(*args, **kwargs)


def _corpus_calibration(docs: Iterable[Doc], corpus_sha256: str) -> Calibration:
    from harness.runtimes.openvino_backend import corpus_calibration

    return corpus_calibration(docs, corpus_sha256)


CPU_FP32 = (
    "backend {backend} runs on the CPU in fp32 only; use backend torch for device {device} and precision {precision}"
)
CPU_OWN_PRECISION = (
    "backend {backend} runs on the CPU at OpenVINO's own precision (bf16 where the CPU has it, "
    "recorded); leave --device and --precision at their defaults, or use backend torch for device "
    "{device} and precision {precision}"
)


@dataclass(frozen=True)
class Runtime:
    """One ``--backend``: how it is built and the rules that follow from it.

    Attributes:
        name: The ``--backend`` value, recorded in a result's configuration.
        build: (torch encoder, name, cache root, calibration, threads) → the encoder that runs it; None: the torch
            encoder itself.
        identity: name → what besides the weights and settings decides its vectors and can change between runs
            (versions, a quantization recipe): part of the key its model's fingerprint is remembered under; None:
            nothing more.
        device_refusal: None when it runs on any device at any precision; otherwise it runs on the CPU at its own
            precision, and this sentence (with ``{backend}``, ``{device}``, ``{precision}``) refuses anything else.
        calibrate: (documents, corpus sha256) → its `Calibration` sample, for a runtime whose exported head (a
            learned sparse encoder, a cross-encoder) is fitted to what it scores (static int8); None: not calibrated.
        shipped_sample: Its bi-encoder model is calibrated on the shipped sample
            (`harness.runtimes.calibration.shipped_calibration`), prepared once per machine: no corpus refits it.
        int8_kernels: Its vectors depend on the CPU's int8 kernels (more than by float rounding): they are keyed by
            the CPU's kernel class, and results from CPUs of two classes are flagged when compared.
        int8_products: Its transformer's weight products run in int8 (``env --bench`` sets its rate against the
            host's int8 multiply rate); False: in the float precision it runs at.
        needs: The modules it runs on (what ``--backend auto`` checks are installed).
        extra: The extra that installs them.
        sparse: A learned sparse encoder (``--sparse-backend``) and a cross-encoder (``--rerank-backend``) may run
            on it: torch as they load, or their transformer with its head exported by `head`.
        head: (name, `harness.runtimes.heads.Head`, weights sha256, cache root, calibration, threads) → (the session
            that runs the exported transformer with its head, the facts its scores' and rows' cache keys read);
            None: it runs no export (torch).
        not_auto: Why ``--backend auto`` never picks it; None: auto may, when it is installed.
        table_only: Why auto's probe never measures it (the probe's cosine on a few texts cannot promise its
            nDCG@10): auto picks it only from the CPU class table (`harness.runtimes.classes`), on a class where
            its nDCG@10 was measured within the bound; None: the probe measures it too.
        auto_needs: The precision (`harness.host.matmul_precisions`) the CPU must compute natively for ``--backend
            auto`` to probe it: without it, it is not probed at all (it measured slower than torch fp32 there, and
            probing it costs the run minutes); None: probed wherever it is installed.
    """

    name: str
    build: Callable[..., Any] | None = None
    identity: Callable[[str], dict[str, Any]] | None = None
    device_refusal: str | None = None
    calibrate: Callable[[Iterable[Doc], str], Calibration] | None = None
    int8_kernels: bool = False
    int8_products: bool = False
    needs: tuple[str, ...] = ()
    extra: str = ""
    sparse: bool = False
    head: Callable[..., Any] | None = None
    not_auto: str | None = None
    auto_needs: str | None = None
    shipped_sample: bool = False
    table_only: str | None = None

    @property
    def calibrated(self) -> bool:
        """Its bi-encoder model is fitted to each corpus: it loads with that corpus's `Calibration`, never reused
        across (none now: ``openvino-int8`` calibrates on the shipped sample)."""
        return self.calibrate is not None and not self.shipped_sample

    @property
    def calibrates_heads(self) -> bool:
        """Its exported head (a cross-encoder, a learned sparse encoder) is quantized on a sample of what it
        scores (`calibrate`)."""
        return self.calibrate is not None

    def installed(self) -> bool:
        """Whether the modules it needs are importable here (nothing is imported)."""
        return all(importlib.util.find_spec(module) is not None for module in self.needs)

    def check_device(self, device: str, precision: str) -> None:
        """Refuse a device option or precision it cannot run (``auto`` and ``cpu`` at fp32 always pass).

        Raises:
            DeviceError: Naming the backend, the device and the precision.
        """
        if self.device_refusal is not None and (device not in ("auto", "cpu") or precision != "fp32"):
            from harness.retrieval.devices import DeviceError

            raise DeviceError(self.device_refusal.format(backend=self.name, device=device, precision=precision))

    def wrap(
        self,
        torch_encoder: Any,
        cache_root: Path | None = None,
        calibration: Calibration | None = None,
        threads: int | None = None,
    ) -> Any:
        """The encoder that runs `torch_encoder`'s model on this runtime (an export is cached under `cache_root`;
        a calibrated runtime quantizes on `calibration`; `threads` limits its session)."""
        if self.build is None:
            return torch_encoder
        from harness.io.cache import cache_dir

        return self.build(
            torch_encoder, self.name, cache_root or cache_dir(), calibration if self.calibrated else None, threads
        )


RUNTIMES = (
    Runtime(TORCH, sparse=True),
    Runtime(
        "onnx",
        build=_onnx,
        device_refusal=CPU_FP32,
        needs=("onnxruntime", "onnx"),
        extra="onnx",
        sparse=True,
        head=_onnx_head,
    ),
    Runtime(
        "onnx-int8",
        build=_onnx,
        identity=_onnx_identity,
        device_refusal=CPU_FP32,
        int8_kernels=True,
        int8_products=True,
        needs=("onnxruntime", "onnx"),
        extra="onnx",
        sparse=True,
        head=_onnx_head,
        # Without an int8 dot product (AVX2 only): 0.92x torch fp32 in `env --bench`, 0.91x in auto's probe
        # (BENCHMARKS.md, "Choosing the backend"), and outside the cosine bound there (mean 0.9935).
        auto_needs="int8",
    ),
    # OpenVINO's default precision is bf16 where the CPU has it: its vectors follow the CPU's kernels too.
    Runtime(
        "openvino",
        build=_openvino,
        identity=_openvino_identity,
        device_refusal=CPU_OWN_PRECISION,
        int8_kernels=True,
        needs=("openvino",),
        extra="openvino",
        sparse=True,
        head=_openvino_head,
    ),
    Runtime(
        "openvino-int8",
        build=_openvino,
        identity=_openvino_identity,
        device_refusal=CPU_OWN_PRECISION,
        calibrate=_corpus_calibration,
        int8_kernels=True,
        int8_products=True,
        needs=("openvino", "nncf"),
        extra="openvino",
        sparse=True,
        head=_openvino_head,
        shipped_sample=True,
        table_only='its nDCG@10 moves more than its cosine on a few texts says (BENCHMARKS.md, "OpenVINO bf16 / '
        'int8"): picked only on a CPU class whose table row measured it within the bound on SciFact and NFCorpus',
    ),
)
BY_NAME = {record.name: record for record in RUNTIMES}
NAMES = tuple(BY_NAME)  # the ``--backend`` choices, `AUTO` aside
CHOICES = (*NAMES, AUTO)  # what ``--backend`` accepts


def runtime(name: str) -> Runtime:
    """The record of backend `name` (not `AUTO`, which the probe resolves to one).

    Raises:
        HarnessError: No runtime has that name.
    """
    try:
        return BY_NAME[name]
    except KeyError:
        raise HarnessError(f"unknown backend {name!r}; use one of {', '.join(NAMES)} or {AUTO}") from None


def is_auto(name: str) -> bool:
    """Whether `name` asks the probe to pick the backend."""
    return name == AUTO


def kernel_dependent(name: Any) -> bool:
    """Whether a recorded backend `name` (anything a result's configuration holds) made CPU-kernel-dependent
    vectors."""
    record = BY_NAME.get(name) if isinstance(name, str) else None
    return record is not None and record.int8_kernels
