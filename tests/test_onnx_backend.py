"""The ONNX Runtime backend: fp32 matches torch, int8 stays close, exports are cached, errors are clear."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from cli_runner import invoke

from harness.errors import MissingDependencyError

TEXTS = [
    "Wireless earbuds with noise cancellation",
    "a budget laptop for students",
    "Over-ear headphones built for long flights, with active noise cancelling and a long battery life " * 3,
]


@pytest.fixture(scope="module")
def encoders(tmp_path_factory, default_encoder):
    pytest.importorskip("onnxruntime")
    from harness.runtimes.onnx_backend import onnx_encoder

    root = tmp_path_factory.mktemp("onnx-cache")
    return root, onnx_encoder(default_encoder, "onnx", root), onnx_encoder(default_encoder, "onnx-int8", root)


def test_fp32_onnx_matches_torch(encoders, default_encoder):
    _, fp32, _ = encoders
    np.testing.assert_allclose(fp32.encode_docs(TEXTS), default_encoder.encode_docs(TEXTS), atol=1e-5)
    np.testing.assert_allclose(fp32.encode_queries(TEXTS[:1]), default_encoder.encode_queries(TEXTS[:1]), atol=1e-5)


def test_int8_is_close_and_normalized(encoders, default_encoder):
    _, _, int8 = encoders
    vectors, reference = int8.encode_docs(TEXTS), default_encoder.encode_docs(TEXTS)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert (vectors * reference).sum(axis=1).min() > 0.95  # cosine to the fp32 vectors


def test_int8_quantizes_the_linear_weights_signed_per_channel(encoders):
    import onnx

    _, _, int8 = encoders
    graph = onnx.load(int8.session._model_path).graph
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    weights = [t for name, t in initializers.items() if name.endswith("_quantized")]
    assert len(weights) == 36 and all(
        t.data_type == onnx.TensorProto.INT8 for t in weights
    )  # 6 layers × (Q, K, V, attention output, FFN in, FFN out)
    scales = [
        initializers[name]
        for name in initializers
        if name.endswith("_scale") and name.removesuffix("_scale") + "_quantized" in initializers
    ]
    assert scales and all(len(scale.dims) == 1 and scale.dims[0] > 1 for scale in scales)  # one per channel
    embeddings = [t for name, t in initializers.items() if "word_embeddings" in name]
    assert embeddings and all(t.data_type == onnx.TensorProto.FLOAT for t in embeddings)  # the tables stay fp32
    assert int8.fingerprint()["quantization"]["weight_type"] == "QInt8"


def test_exports_are_cached_and_keyed_by_backend(encoders, default_encoder):
    root, fp32, int8 = encoders
    exports = sorted(p.parent.name for p in (root / "onnx").glob("*/model.onnx"))
    assert len(exports) == 2
    assert fp32.fingerprint() != int8.fingerprint() != default_encoder.fingerprint()
    assert fp32.settings()["backend"] == "onnx" and int8.settings()["backend"] == "onnx-int8"


def test_evaluate_with_the_onnx_backend(encoders, tiny_beir, tmp_path, monkeypatch, default_encoder):
    import harness.retrieval.encode

    root, _, _ = encoders
    monkeypatch.setattr(harness.retrieval.encode, "load_encoder", lambda *args, **kwargs: default_encoder)
    runs = {}
    for backend in ("torch", "onnx"):
        result = invoke(
            [
                "-q",
                "evaluate",
                str(tiny_beir),
                "--backend",
                backend,
                "--json",
                "--cache-dir",
                str(root),
                "--output-dir",
                str(tmp_path / backend),
            ],
        )
        assert result.exit_code == 0, result.stderr
        runs[backend] = result.stdout
    import json

    torch_result, onnx_result = (json.loads(runs[b]) for b in ("torch", "onnx"))
    assert onnx_result["config"]["backend"] == "onnx"
    assert onnx_result["metrics"] == pytest.approx(torch_result["metrics"], abs=1e-9)


def test_missing_extra_is_one_line(monkeypatch, tiny_beir, tmp_path):
    import harness.runtimes.onnx_backend

    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'beir-harness\[onnx\]'"):
        harness.runtimes.onnx_backend._onnxruntime()
    result = invoke(["evaluate", str(tiny_beir), "--backend", "onnx", "--output-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1].startswith("Error: --backend onnx needs onnxruntime")


def test_failed_export_caches_nothing(tmp_path, default_encoder, monkeypatch):
    pytest.importorskip("onnxruntime")
    import torch

    from harness.errors import HarnessError
    from harness.runtimes.onnx_backend import export

    def broken(*args, **kwargs):
        raise RuntimeError("exporter exploded")

    monkeypatch.setattr(torch.onnx, "export", broken)
    with pytest.raises(HarnessError, match="ONNX export of the model failed .*exporter exploded"):
        export(default_encoder.model, tmp_path / "onnx" / "key", quantize=False)
    assert not (tmp_path / "onnx" / "key").exists()
    assert list((tmp_path / "onnx").iterdir()) == []


def test_int8_vectors_are_keyed_by_the_cpu_kernel_class(encoders, monkeypatch):
    """A shared cache on mixed CPUs never hands one kernel class's int8 vectors to another."""
    import harness.runtimes.onnx_backend as backend

    _, fp32, int8 = encoders
    monkeypatch.setattr(backend, "local_kernel_class", lambda: "avx2")
    on_avx2 = int8.fingerprint()
    monkeypatch.setattr(backend, "local_kernel_class", lambda: "avx512-vnni")
    on_vnni = int8.fingerprint()
    assert on_avx2 != on_vnni and on_vnni["int8_kernels"] == "avx512-vnni"
    assert "int8_kernels" not in fp32.fingerprint()  # fp32 differs across CPUs by float rounding only


def test_int8_warns_on_a_cpu_without_vnni(default_encoder, tmp_path, monkeypatch, caplog):
    import logging

    import harness.runtimes.onnx_backend as backend

    pytest.importorskip("onnxruntime")
    monkeypatch.setattr(backend, "int8_fast_here", lambda: False)
    monkeypatch.setattr(backend, "export", lambda *args, **kwargs: (_ for _ in ()).throw(RuntimeError("stop")))
    with caplog.at_level(logging.WARNING, logger="harness"), pytest.raises(RuntimeError, match="stop"):
        backend.onnx_encoder(default_encoder, "onnx-int8", tmp_path)
    assert [r for r in caplog.records if "no VNNI or AMX" in r.getMessage() and "env --bench" in r.getMessage()]


def test_a_call_s_texts_are_batched_longest_first_and_returned_in_the_caller_s_order(encoders, default_encoder):
    """Texts of 1 to 12 repeated words, shuffled, in batches of 2: the session sees them longest first (the least
    padding: each batch as long as its own longest), and each vector is its own text's (torch's, one by one)."""
    import random

    _, fp32, _ = encoders
    texts = [" ".join(["noise"] * n) for n in range(1, 13)]
    random.Random(0).shuffle(texts)
    session = fp32.session
    seen, run = [], session.run

    class Recording:
        def __getattr__(self, name):
            return getattr(session, name)

        def run(self, outputs, feed):
            seen.append(feed["input_ids"].shape[1])
            return run(outputs, feed)

    encoder = fp32
    saved = (encoder.session, encoder.batch_size)
    encoder.session, encoder.batch_size = Recording(), 2
    try:
        vectors = encoder.encode_docs(texts)
    finally:
        encoder.session, encoder.batch_size = saved
    lengths = sorted(default_encoder.token_lengths(texts), reverse=True)
    assert seen == lengths[::2]  # batch i: the 2i-th longest text's tokens
    one_by_one = np.concatenate([default_encoder.encode_docs([text]) for text in texts])
    np.testing.assert_allclose(vectors, one_by_one, atol=1e-5)
    assert vectors.dtype == np.float32 and fp32.encode_docs([]).shape == (0, one_by_one.shape[1])
