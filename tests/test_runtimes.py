"""The runtime registry: one record per ``--backend``, the policy the pipeline and the CLI read, checked here."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.host import KERNEL_FLAGS
from harness.runtimes.registry import AUTO, BY_NAME, CHOICES, NAMES, RUNTIMES, TORCH, kernel_dependent, runtime


def test_every_record_is_whole_and_consistent():
    assert len(NAMES) == len(RUNTIMES) == len(set(NAMES))
    assert NAMES[0] == TORCH and AUTO not in NAMES and CHOICES == (*NAMES, AUTO)
    for record in RUNTIMES:
        assert BY_NAME[record.name] is record and runtime(record.name) is record
        if record.name == TORCH:  # the reference: the torch encoder itself, on any device, at any precision
            assert record.build is None and record.head is None and record.device_refusal is None
            assert record.not_auto is None
            assert record.sparse and not record.needs and not record.calibrated and not record.int8_kernels
            continue
        # every exported runtime also runs the reranker's and the sparse encoder's heads (`harness.runtimes.heads`)
        assert callable(record.build) and callable(record.head) and record.sparse, record.name
        assert record.needs and record.extra, record.name  # what auto checks, and what to install
        assert record.device_refusal is not None, record.name  # every other runtime runs on the CPU
        message = record.device_refusal.format(backend=record.name, device="cuda", precision="fp16")
        assert record.name in message and "cuda" in message and "fp16" in message
        if record.int8_kernels or record.calibrated:
            assert record.identity is not None, record.name  # versions and recipe key its model
        if record.calibrated:
            assert record.not_auto, record.name  # a probe on the first texts cannot reproduce a corpus's fit
        assert record.auto_needs in (None, "fp32", "bf16", "int8"), record.name  # `harness.host.matmul_precisions`


def test_the_cli_offers_exactly_the_registrys_backends():
    import click

    from harness.cli import cli

    evaluate = cli.commands["evaluate"]
    backend = next(param for param in evaluate.params if param.name == "backend")
    assert isinstance(backend.type, click.Choice) and tuple(backend.type.choices) == CHOICES
    assert backend.default == AUTO and backend.envvar == "BEIR_HARNESS_BACKEND"  # a first evaluate: the fast one
    for name in ("rerank_backend", "sparse_backend"):  # another model each: its int8 bound is measured on its own
        assert next(param for param in evaluate.params if param.name == name).default == TORCH


def test_the_policy_each_record_carries():
    from harness.retrieval.devices import DeviceError
    from harness.runtimes.auto import EXCLUDED

    assert [r.name for r in RUNTIMES if r.calibrated] == []  # openvino-int8: the shipped sample, once per machine
    assert [r.name for r in RUNTIMES if r.shipped_sample] == [r.name for r in RUNTIMES if r.calibrates_heads]
    assert [r.name for r in RUNTIMES if r.calibrates_heads] == ["openvino-int8"]
    assert [r.name for r in RUNTIMES if r.int8_kernels] == ["onnx-int8", "openvino", "openvino-int8"]
    assert set(EXCLUDED) == {"openvino-int8"}  # from the probe: the class table alone may pick it
    assert kernel_dependent("onnx-int8") and not kernel_dependent("onnx") and not kernel_dependent(None)
    assert not kernel_dependent("hashing") and not kernel_dependent(["onnx-int8"])
    runtime("onnx").check_device("cpu", "fp32")
    runtime("torch").check_device("cuda:0", "fp16")
    with pytest.raises(DeviceError, match="in fp32 only"):
        runtime("onnx-int8").check_device("cpu", "bf16")
    with pytest.raises(DeviceError, match="OpenVINO's own precision"):
        runtime("openvino").check_device("cuda", "fp32")


@pytest.mark.parametrize(
    ("flags", "int8_probed"),
    [(["avx", "avx2", "fma"], False), (["avx2", "avx512_vnni"], True), (["avx2", "avx_vnni"], True), ([], False)],
)
def test_auto_probes_an_int8_runtime_only_where_the_cpu_has_an_int8_dot_product(flags, int8_probed, monkeypatch):
    from harness.runtimes import auto

    monkeypatch.setattr(type(BY_NAME["onnx"]), "installed", lambda self: True)  # every runtime "installed"
    names = [candidate.name for candidate in auto.probed(auto.installed_candidates(bf16=False, flags=flags))]
    assert names == ["torch", "onnx", *(["onnx-int8"] if int8_probed else []), "openvino"]
    assert [r.name for r in RUNTIMES if r.auto_needs == "int8"] == ["onnx-int8"]


@pytest.mark.parametrize(
    ("flags", "bf16"),
    [(["avx512_bf16"], True), (["amx_bf16"], True), (["fp", "asimd", "bf16"], True), (["avx2", "avx512f"], False)],
)
def test_torch_bf16_is_probed_only_where_the_cpu_computes_bf16_natively(flags, bf16, monkeypatch):
    from harness.runtimes import auto

    monkeypatch.setattr(type(BY_NAME["onnx"]), "installed", lambda self: False)  # torch's candidates alone
    assert auto.native_bf16(flags) is bf16
    names = [candidate.name for candidate in auto.installed_candidates(flags=flags)]
    assert names == ["torch", *(["torch bf16"] if bf16 else [])]


def test_an_unknown_backend_names_the_ones_there_are():
    from harness.errors import HarnessError

    with pytest.raises(HarnessError, match="unknown backend 'tensorrt'; use one of torch, onnx"):
        runtime("tensorrt")


def test_the_registry_imports_no_runtime_library():
    import subprocess
    import sys

    code = (
        "import sys, harness.runtimes.registry, harness.runtimes.spec\n"
        "print(sorted(m for m in ('torch', 'onnx', 'onnxruntime', 'openvino', 'nncf', 'numpy', "
        "'harness.runtimes.onnx_backend', 'harness.runtimes.openvino_backend') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# Every combination of the x86 flags that decide the kernels, against the classes as the instruction sets define them:
# AMX tiles with int8 beat every vector unit; then a VNNI dot product, AVX-512's (512-bit) before the VEX-coded
# AVX-VNNI (256-bit, Alder Lake); then AVX-512 without VNNI; then AVX2. bf16 and AMX flags other than amx_int8
# choose no int8 kernel. ARM: SVE, then NEON with dot products, then plain NEON.
_X86 = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16")


def _expected_class(flags: set[str]) -> str:
    if "amx_int8" in flags:
        return "amx"
    if "avx512_vnni" in flags:
        return "avx512-vnni"
    if "avx_vnni" in flags:
        return "avx-vnni"
    if "avx512f" in flags:
        return "avx512"
    if "avx2" in flags:
        return "avx2"
    if "sve" in flags:
        return "sve"
    return "neon-dot" if "asimddp" in flags else "neon" if "asimd" in flags else "baseline"


_ARM = [("asimd",), ("asimd", "asimddp"), ("asimd", "asimddp", "sve", "i8mm"), ("asimd", "sve"), ("asimd", "bf16")]
# The flags of a CPU that multiplies bf16 natively: AVX512-BF16, AMX-BF16 (Sapphire Rapids), ARMv8.6's BF16.
_BF16 = {"avx512_bf16", "amx_bf16", "bf16"}


def test_the_cpu_class_of_every_combination_of_flags():
    import itertools

    from harness.host import cpu_class, int8_saturates, kernel_class

    cpus = [[f for f, on in zip(_X86, chosen) if on] for chosen in itertools.product((False, True), repeat=len(_X86))]
    for flags in cpus + [list(arm) for arm in _ARM]:  # a CPU is x86 or ARM
        expected = _expected_class(set(flags))
        assert kernel_class(flags) == expected, flags
        assert kernel_class(list(reversed(flags))) == expected  # the order /proc/cpuinfo lists them in is no matter
        assert int8_saturates(expected) is (expected in ("avx512", "avx2"))  # vpmaddubsw without a dot product
        # the class the CPU class table is keyed by: +bf16 with any native bf16 flag, AMX's and ARM's too
        assert cpu_class(flags) == expected + ("+bf16" if _BF16 & set(flags) else ""), flags


@settings(derandomize=True, deadline=None, max_examples=300)
@given(
    flags=st.sets(st.sampled_from(KERNEL_FLAGS)).map(sorted),
    bf16=st.sampled_from([None, False, True]),
    int8_installed=st.booleans(),
)
def test_auto_s_candidates_for_every_combination_of_cpu_flags(flags, bf16, int8_installed):
    """torch bf16 is a candidate where the CPU multiplies bf16 natively (unless `bf16` says otherwise), onnx-int8 where
    it has an int8 dot product; the rest wherever installed. Each CPU a random set of every flag the host reads."""
    from unittest import mock

    from harness.runtimes import auto

    dot_product = {"avx512_vnni", "avx_vnni", "amx_int8", "asimddp", "i8mm"}
    with mock.patch.object(type(BY_NAME["onnx"]), "installed", lambda self: int8_installed or "int8" not in self.name):
        names = [candidate.name for candidate in auto.installed_candidates(bf16=bf16, flags=flags)]
    torch_bf16 = bool(_BF16 & set(flags)) if bf16 is None else bf16
    int8 = int8_installed and bool(dot_product & set(flags))
    expected = ["torch", "torch bf16", "onnx", "onnx-int8", "openvino", "openvino-int8"]
    wanted = {"torch bf16": torch_bf16, "onnx-int8": int8, "openvino-int8": int8_installed}
    assert names == [name for name in expected if wanted.get(name, True)], flags
