"""The matrix-multiply probe of `env --bench` (`harness.host.gemm_probe`): its operation count against a brute-force
loop, and the precisions it measures against the CPU flags (monkeypatched). No test asserts its speed."""

from __future__ import annotations

import pytest

from harness import host


def _brute_force_operations(queries: int, dim: int, docs: int) -> int:
    """A naive product's operations, counted one by one: a multiply and an add per term of each dot product."""
    operations = 0
    for _ in range(queries):
        for _ in range(docs):
            for _ in range(dim):
                operations += 2
    return operations


@pytest.mark.parametrize("shape", [(3, 5, 7), (16, 32, 8)])
def test_the_probe_counts_the_operations_of_its_shape(shape):
    probe = host.gemm_probe(seconds=0.0, shape=shape, flags=[])
    assert probe["shape"] == list(shape)
    assert probe["flops_per_multiply"] == _brute_force_operations(*shape)
    (row,) = probe["rates"]
    assert row["multiplies"] >= 2
    assert row["gflops"] == pytest.approx(row["multiplies"] * _brute_force_operations(*shape) / row["seconds"] / 1e9)


@pytest.mark.parametrize(
    ("flags", "measured"),
    [
        (["avx", "avx2", "fma"], ["fp32"]),
        (["avx2", "avx512f", "avx512_vnni"], ["fp32", "int8"]),
        (["avx2", "avx512_bf16"], ["fp32", "bf16"]),
        (["avx2", "avx_vnni"], ["fp32", "int8"]),
        (["avx2", "amx_tile", "amx_int8", "amx_bf16"], ["fp32", "bf16", "int8"]),
        (["asimd", "asimddp", "bf16"], ["fp32", "bf16", "int8"]),
    ],
)
def test_the_probe_measures_the_precisions_the_cpu_flags_allow(monkeypatch, flags, measured):
    pytest.importorskip("torch")
    monkeypatch.setattr(host, "_cpuinfo", lambda: ("a test CPU", tuple(flags)))
    probe = host.gemm_probe(seconds=0.0, shape=(8, 16, 8))
    assert [row["precision"] for row in probe["rates"]] == measured
    assert set(probe["skipped"]) == {"fp32", "bf16", "int8"} - set(measured)


def test_env_bench_reports_the_probe_in_its_json_and_its_text(monkeypatch, tmp_path):
    from harness.api import environment
    from harness.pipeline import environment as module
    from harness.pipeline.environment import format_gemm

    monkeypatch.setattr(module, "bench_backends", lambda **_: [])
    info = environment(tmp_path / "data", tmp_path / "cache", tmp_path / "results", bench=True)
    assert info["gemm"]["rates"][0]["precision"] == "fp32"
    assert format_gemm(info["gemm"]).splitlines()[2].split()[:2][0] == "fp32"
