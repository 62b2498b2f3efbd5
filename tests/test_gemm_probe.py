"""The matrix-multiply probe of `env --bench` (`harness.host.gemm_probe`): its operation count against a brute-force
loop, and the precisions it measures against the CPU flags (monkeypatched). No test asserts its speed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def _counted_operations(model, input_ids) -> int:
    """torch's own count of a forward pass's products (`torch.utils.flop_counter`: 2 per multiply-add of every
    mm/addmm/bmm), the independent reference of `host.transformer_flops`."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(input_ids=input_ids)
    return counter.get_total_flops()


@settings(max_examples=12, deadline=None, derandomize=True)
@given(
    tokens=st.integers(1, 40),
    heads=st.sampled_from([1, 2, 4]),
    head_size=st.integers(2, 8),
    layers=st.integers(1, 3),
    intermediate=st.integers(3, 50),
)
def test_transformer_flops_count_what_torch_counts_in_an_encoder_s_forward_pass(
    tokens, heads, head_size, layers, intermediate
):
    torch = pytest.importorskip("torch")
    from transformers import BertConfig, BertModel

    hidden = heads * head_size
    config = BertConfig(
        vocab_size=50, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=intermediate, max_position_embeddings=64, attn_implementation="eager",
    )  # fmt: skip
    model = BertModel(config, add_pooling_layer=False).eval()
    counted = _counted_operations(model, torch.randint(0, 50, (1, tokens)))
    assert host.transformer_flops(tokens, hidden, layers, intermediate) == counted


@pytest.mark.parametrize(
    ("row", "rates", "share"),
    [
        ({"precision": "int8", "gflops": 30.0}, {"fp32": 100.0, "int8": 400.0}, 0.075),
        ({"precision": "fp32", "gflops": 30.0}, {"fp32": 100.0, "int8": 400.0}, 0.3),
        ({"precision": "bf16", "gflops": 30.0}, {"fp32": 100.0}, None),  # no bf16 rate here: no share
        ({"precision": "fp32", "gflops": None}, {"fp32": 100.0}, None),  # a model without a BERT configuration
    ],
)
def test_a_backend_s_share_is_of_the_rate_in_its_own_precision(row, rates, share):
    rows = [dict(row)]
    host.gemm_share(rows, {"rates": [{"precision": name, "gflops": value} for name, value in rates.items()]})
    assert rows[0].get("share_of_gemm") == (pytest.approx(share) if share is not None else None)


def test_env_bench_prints_each_backend_s_operations_and_its_share_in_its_precision():
    from harness.pipeline.environment import format_bench

    rows = [
        {"backend": "torch", "docs_per_s": 29.0, "vs_torch": 1.0, "cosine_mean": 1.0, "cosine_min": 1.0,
         "precision": "fp32", "gflops": 162.4, "share_of_gemm": 0.871},
        {"backend": "openvino-int8", "docs_per_s": 53.1, "vs_torch": 1.83, "cosine_mean": 0.9968, "cosine_min": 0.9939,
         "precision": "int8", "gflops": 297.8, "share_of_gemm": 0.293},
        {"backend": "torch bf16", "docs_per_s": 9.7, "vs_torch": 0.34, "cosine_mean": 0.9999, "cosine_min": 0.9999,
         "precision": "bf16", "gflops": None},
    ]  # fmt: skip
    host = {"cpu": "a test CPU", "kernel_class": "test-class", "cpu_flags": ["avx2"], "cores_used": 2}
    lines = {
        line.split()[0] + (" bf16" if " bf16 " in line else ""): line
        for line in format_bench(rows, host, 300).splitlines()
    }
    assert lines["torch"].split()[-4:] == ["162.4", "87%", "of", "fp32"]
    assert lines["openvino-int8"].split()[-4:] == ["297.8", "29%", "of", "int8"]
    assert lines["torch bf16"].split()[-2:] == ["-", "-"]


@pytest.mark.parametrize(("backend", "attributes", "precision"), [
    ("openvino", {"inference_precision": "bf16"}, "bf16"), ("openvino", {"inference_precision": "f32"}, "fp32"),
    ("openvino-int8", {"inference_precision": "bf16"}, "int8"), ("onnx-int8", {}, "int8"), ("onnx", {}, "fp32"),
    ("torch bf16", {"precision": "bf16"}, "bf16"), ("torch", {"precision": "fp32"}, "fp32"),
])  # fmt: skip
def test_a_backend_s_products_run_in_its_int8_or_its_inference_precision(backend, attributes, precision):
    from types import SimpleNamespace

    from harness.pipeline import environment

    assert environment._product_precision(backend, SimpleNamespace(**attributes)) == precision


def test_the_operations_of_a_long_text_are_those_of_its_truncated_tokens(default_encoder):
    """Texts longer than the model's window: their operations are those of the tokens it sees (sentence-transformers'
    own tokenization, truncated), not of the whole text."""
    from harness.pipeline import environment

    texts = ["noise " * 600, "a short text", "noise " * 100]
    model = default_encoder.model
    seen = [int(mask.sum()) for mask in model.tokenize(texts)["attention_mask"]]
    assert max(seen) == model.max_seq_length  # the long one is cut
    config = model[0].auto_model.config
    expected = [
        host.transformer_flops(n, config.hidden_size, config.num_hidden_layers, config.intermediate_size) for n in seen
    ]
    assert environment._flops_per_text(default_encoder, texts) == pytest.approx(sum(expected) / 3)
