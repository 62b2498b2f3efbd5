"""Where a model runs and in which precision: ``--device`` and ``--precision``.

A device option is ``auto`` (CUDA if torch sees a device, else MPS, else CPU), ``cpu``, ``cuda``
(the first GPU), ``cuda:N``, ``cuda:all`` (every GPU torch sees), ``mps``, or a comma-separated list
of these (``cuda:0,cuda:1``; ``cpu,cpu`` runs two CPU worker processes). Each is checked against
what torch sees *before* a model loads or a file is read, and a device that is not there is one
line naming what is.

Precision is ``fp32`` (the default: what published numbers use), ``fp16`` or ``bf16`` for the model's
weights and activations; stored embeddings are float32 whatever the precision. On a CPU, ``bf16``
runs (natively on CPUs with AVX512-BF16 or AMX, emulated and slower elsewhere) and ``fp16`` is
refused: CPU kernels for half floats are slow, and bf16 is the half precision CPUs support.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from harness.errors import HarnessError

PRECISIONS = ("fp32", "fp16", "bf16")
DEVICE_ENV = "BEIR_HARNESS_DEVICE"


class DeviceError(HarnessError):
    """A device or precision this machine cannot run."""


@dataclass(frozen=True)
class DeviceSpec:
    """The device option and the precision, checked against what torch sees.

    Attributes:
        device: The option as given (``auto``, ``cpu``, ``cuda:1``, ``cuda:0,cuda:1``, ...);
            None means ``$BEIR_HARNESS_DEVICE``, else ``auto``.
        precision: ``fp32``, ``fp16`` or ``bf16``.
        queries_only: This process encodes only the queries (Ray GPU actors encode the documents and check
            their own devices): fp16 on its CPU is then allowed, slow kernels on a few texts costing little.
    """

    device: str | None = None
    precision: str = "fp32"
    queries_only: bool = False

    @property
    def option(self) -> str:
        return (self.device or os.environ.get(DEVICE_ENV) or "auto").strip()

    def check_syntax(self) -> None:
        """Validate the option's form and the precision, without importing torch.

        Raises:
            DeviceError: A malformed device list or an unknown precision.
        """
        if self.precision not in PRECISIONS:
            raise DeviceError(f"unknown precision {self.precision!r}; use one of {', '.join(PRECISIONS)}")
        parts = [part.strip() for part in self.option.split(",")]
        for part in parts:
            kind, _, index = part.partition(":")
            ok = part in ("auto", "cpu", "cuda", "mps", "cuda:all") or (
                kind == "cuda" and index.isascii() and index.isdigit()
            )
            if not ok:
                raise DeviceError(
                    f"device {part!r} in {self.option!r} is not one of auto, cpu, cuda, cuda:N, "
                    "cuda:all, mps (or a comma-separated list of them, e.g. cuda:0,cuda:1)"
                )
        if len(parts) > 1 and any(part in ("auto", "cuda:all") for part in parts):
            raise DeviceError(f"device list {self.option!r}: auto and cuda:all stand alone, not in a list")

    def resolve(self, torch: Any = None) -> list[str]:
        """The concrete torch devices, one per worker (``["cpu"]``, ``["cuda:0", "cuda:1"]``, ...).

        Args:
            torch: The torch module (tests pass a stand-in whose CUDA and MPS queries are faked).

        Raises:
            DeviceError: A device torch does not see, or a precision the device cannot run.
        """
        self.check_syntax()
        if torch is None:
            import torch
        n_cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
        mps = getattr(torch.backends, "mps", None)
        has_mps = bool(mps is not None and mps.is_available())
        seen = ", ".join([f"cuda:{i}" for i in range(n_cuda)] + (["mps"] if has_mps else []) + ["cpu"])
        devices: list[str] = []
        for part in (p.strip() for p in self.option.split(",")):
            if part == "auto":
                devices.append("cuda:0" if n_cuda else "mps" if has_mps else "cpu")
            elif part == "cuda:all":
                if not n_cuda:
                    raise DeviceError(f"device cuda:all: torch sees no CUDA device (it sees {seen})")
                devices += [f"cuda:{i}" for i in range(n_cuda)]
            elif part.startswith("cuda"):
                index = int(part.partition(":")[2] or 0)
                if index >= n_cuda:
                    why = "torch sees no CUDA device" if not n_cuda else f"torch sees {n_cuda} CUDA device(s)"
                    hint = "" if n_cuda or torch.version.cuda else " (this torch is a CPU-only build)"
                    raise DeviceError(f"device {part}: {why}{hint}; devices here: {seen}")
                devices.append(f"cuda:{index}")
            elif part == "mps" and not has_mps:
                raise DeviceError(f"device mps: torch sees no MPS (Apple GPU) device; devices here: {seen}")
            else:
                devices.append(part)
        if self.precision == "fp16" and "cpu" in devices and not self.queries_only:
            raise DeviceError(
                "precision fp16 on a CPU is not supported (slow half-float kernels); use bf16 or fp32 there, or a GPU"
            )
        if self.precision == "bf16":
            for device in devices:
                if device.startswith("cuda") and not bf16_native(torch, int(device.partition(":")[2] or 0)):
                    raise DeviceError(
                        f"precision bf16 on {device}: this GPU has no native bf16 (compute capability "
                        "8.0 or newer needed); use fp16 or fp32 there"
                    )
        return devices


def bf16_native(torch: Any, index: int) -> bool:
    """Whether CUDA device `index` computes in bf16 natively (compute capability 8.0+); emulation, which
    older torch builds report as support, does not count."""
    with torch.cuda.device(index):
        try:
            return bool(torch.cuda.is_bf16_supported(including_emulation=False))
        except TypeError:  # torch < 2.3 has no emulation switch and reports native support only
            return bool(torch.cuda.is_bf16_supported())


def device_scope(device: Any) -> Any:
    """A context under which torch's CUDA calls go to `device` (its current stream, its allocator, its
    pinned-memory context), not to the process's current device (``cuda:0`` unless set); a no-op
    context for a CPU or MPS device. Entered around each CUDA step, never held across a ``yield``."""
    import contextlib

    if getattr(device, "type", str(device).split(":")[0]) != "cuda":
        return contextlib.nullcontext()
    import torch

    return torch.cuda.device(torch.device(device))


def torch_dtype(precision: str) -> Any:
    """The torch dtype of a precision name."""
    import torch

    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]


OUT_OF_MEMORY_MARKERS = ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED")


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` is a device out of memory, in any of the forms torch raises it: its OutOfMemoryError,
    or a RuntimeError from cuBLAS/cuDNN (``CUBLAS_STATUS_ALLOC_FAILED``) or the allocator (``out of memory``)."""
    if isinstance(exc, DeviceOutOfMemory) or type(exc).__name__ == "OutOfMemoryError":
        return True
    return isinstance(exc, RuntimeError) and any(marker in str(exc) for marker in OUT_OF_MEMORY_MARKERS)


class DeviceOutOfMemory(HarnessError):
    """The device ran out of memory on a batch of `texts` texts (raised where the failing batch is known)."""

    def __init__(self, texts: int):
        super().__init__(f"the device ran out of memory on a batch of {texts} texts")
        self.texts = texts
