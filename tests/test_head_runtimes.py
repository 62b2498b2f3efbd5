"""The cross-encoder reranker and the learned sparse encoder on the exported runtimes (`harness.runtimes.heads`),
checked against sentence-transformers itself on tiny random-weight models built here (offline)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from cli_runner import invoke

from harness.io.cache import content_key
from harness.records import Doc
from harness.retrieval.learned_sparse import SparseModel
from harness.retrieval.rerank import Reranker, RerankSpec
from harness.runtimes.calibration import pair_calibration
from harness.runtimes.heads import wrap_reranker, wrap_sparse
from harness.runtimes.openvino_backend import corpus_calibration
from harness.runtimes.registry import runtime

pytest.importorskip("onnxruntime")
pytest.importorskip("openvino")

WORDS = "apple banana cherry date zucchini fruit stone fig elder grape kiwi lemon query doc".split()
EXPORTED = ("onnx", "onnx-int8", "openvino", "openvino-int8")


def _config(num_labels: int = 1):
    from tiny_models import bert_config

    return bert_config(WORDS, labels=num_labels)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """A one-label and a two-label BERT cross-encoder, and a SPLADE-style sparse encoder (MLM head, max pooling)."""
    from tiny_models import cross_encoder, sparse_encoder

    root = tmp_path_factory.mktemp("heads")
    cross_encoder(root / "ce", WORDS)  # seeds torch with 0; the next two go on with its generator
    cross_encoder(root / "ce2", WORDS, labels=2, seed=None)
    sparse_encoder(root / "sparse", WORDS, raw=root / "mlm", seed=None, labels=1)
    return {"ce": root / "ce", "ce2": root / "ce2", "sparse": root / "sparse"}


def _pairs(n: int = 40) -> list[tuple[str, str]]:
    rng = np.random.default_rng(0)
    return [(" ".join(rng.choice(WORDS, 3)), " ".join(rng.choice(WORDS, int(rng.integers(2, 24))))) for _ in range(n)]


def _correlation(a, b) -> float:
    return float(np.corrcoef(np.asarray(a, np.float64), np.asarray(b, np.float64))[0, 1])


def test_exported_rerankers_score_as_sentence_transformers_does(models, tmp_path):
    from sentence_transformers import CrossEncoder

    pairs = _pairs()
    expected = CrossEncoder(str(models["ce"])).predict(pairs)  # the reference: sigmoid of the logits
    torch_reranker = Reranker(RerankSpec(str(models["ce"]), batch_size=7))
    got = {
        backend: wrap_reranker(runtime(backend), torch_reranker, tmp_path, pair_calibration(pairs), 1).score(pairs)
        for backend in EXPORTED
    }
    np.testing.assert_allclose(got["onnx"], expected, atol=1e-5)  # fp32: float rounding only
    # int8 (and OpenVINO's bf16 where the CPU has it) measured on this model: correlation 0.963 (onnx-int8),
    # 0.956 (openvino-int8), 0.997 (openvino at bf16) with torch's scores of these pairs, on CPUs with an int8 dot
    # product; on an AVX2-only CPU, whose int8 kernels saturate, 0.964 and 0.981 with the halved weight range the
    # recipes take there (0.571 and 0.805 without it: BENCHMARKS.md, "Reranker and sparse encoder backends").
    for backend in EXPORTED[1:]:
        assert got[backend].shape == expected.shape
        assert _correlation(got[backend], expected) > 0.9, backend


def test_exported_sparse_encoders_encode_as_sentence_transformers_does(models, tmp_path):
    from sentence_transformers import SparseEncoder

    texts = [document for _, document in _pairs()]
    reference = SparseEncoder(str(models["sparse"]), device="cpu")
    documents = reference.encode_document(texts, convert_to_tensor=True).to_dense().numpy()
    queries = reference.encode_query(texts[:7], convert_to_tensor=True).to_dense().numpy()
    torch_model = SparseModel("sparse", str(models["sparse"]), batch_size=8)
    calibration = corpus_calibration([Doc(str(i), "", text) for i, text in enumerate(texts)], "corpus", size=20)
    for backend in EXPORTED:
        model = wrap_sparse(runtime(backend), torch_model, tmp_path, calibration, 1)
        rows, query_rows = model.encode_docs(texts), model.encode_queries(texts[:7])
        assert rows.shape == documents.shape and query_rows.shape == queries.shape
        if backend == "onnx":
            np.testing.assert_allclose(rows.toarray(), documents, atol=5e-5)
            np.testing.assert_allclose(query_rows.toarray(), queries, atol=5e-5)
            assert rows.nnz == np.count_nonzero(documents)  # the same active dimensions, zeros dropped
        else:  # measured on this model: mean row cosine 0.96 or more for each
            dense = rows.toarray()
            cosine = (dense * documents).sum(1) / np.linalg.norm(dense, axis=1) / np.linalg.norm(documents, axis=1)
            assert cosine.mean() > 0.9, backend


# The CPU classes whose 8-bit multiply-add (vpmaddubsw) saturates in 16 bits, as ONNX Runtime's quantization guide
# ("reduce_range ... on non-VNNI machines") and NNCF's OverflowFix ("AVX-2 and AVX-512") name them.
SATURATING = {"avx2": True, "avx512": True, "avx512-vnni": False, "avx-vnni": False, "amx": False, "neon-dot": False}


@pytest.fixture
def kernel(monkeypatch):
    """Pretend this CPU is of another kernel class, for the recipes and both exported runtimes' facts."""
    import harness.host
    import harness.runtimes.onnx_backend as onnx_backend
    import harness.runtimes.openvino_backend as openvino_backend

    def pretend(name: str) -> None:
        for module in (harness.host, onnx_backend, openvino_backend):
            monkeypatch.setattr(module, "local_kernel_class", lambda: name)

    return pretend


def _int8_weights(path: Path) -> list[np.ndarray]:
    """The int8 weights of the ONNX model at `path` (``quantize_dynamic`` names them ``<weight>_quantized``)."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(path).graph
    return [
        numpy_helper.to_array(t)
        for t in graph.initializer
        if t.data_type == onnx.TensorProto.INT8 and t.name.endswith("_quantized")
    ]


@pytest.mark.parametrize("name", sorted(SATURATING))
def test_onnx_int8_halves_its_weights_range_only_where_the_cpu_s_kernels_saturate(models, tmp_path, kernel, name):
    kernel(name)
    reranker = wrap_reranker(runtime("onnx-int8"), Reranker(RerankSpec(str(models["ce"]))), tmp_path)
    (path,) = tmp_path.glob("onnx/*/model.onnx")
    weights = _int8_weights(path)
    assert len(weights) == 14  # 2 layers x (Q, K, V, attention output, FFN in, FFN out), the pooler, the classifier
    widest = max(int(np.abs(w.astype(np.int32)).max()) for w in weights)
    assert widest == (64 if SATURATING[name] else 127)  # 7-bit weights there, the whole signed range elsewhere
    assert ("reduce_range" in reranker.fingerprint()["quantization"]) is SATURATING[name]


def test_openvino_int8_halves_its_matmul_weights_range_where_the_cpu_s_kernels_saturate(models, tmp_path, kernel):
    import openvino as ov

    pairs = _pairs()
    widest = {}
    for name in ("avx2", "avx512-vnni"):
        kernel(name)
        root = tmp_path / name
        wrap_reranker(runtime("openvino-int8"), Reranker(RerankSpec(str(models["ce"]))), root, pair_calibration(pairs))
        (path,) = root.glob("openvino/*/model.xml")
        constants = [
            op.get_data()
            for op in ov.Core().read_model(str(path)).get_ops()
            if op.get_type_name() == "Constant" and op.get_element_type() == ov.Type.i8
        ]
        widest[name] = sorted((int(np.abs(c.astype(np.int32)).max()), c.shape) for c in constants)
    config = _config()
    tables = {(config.vocab_size, 32), (config.type_vocab_size, 32), (config.max_position_embeddings, 32)}
    # The 14 MatMul weights take half the range on AVX2; the embedding tables (gathered, not multiplied) keep it.
    assert {shape for top, shape in widest["avx2"] if top > 64} == tables
    assert len([top for top, _ in widest["avx2"] if top <= 64]) == 14
    assert all(top == 127 for top, _ in widest["avx512-vnni"]) and len(widest["avx512-vnni"]) == 17


def test_an_int8_export_is_never_served_to_a_cpu_class_with_another_recipe(models, tmp_path, kernel):
    torch_reranker = Reranker(RerankSpec(str(models["ce"])))
    calibration = pair_calibration(_pairs())
    for name in ("avx2", "avx512", "avx512-vnni"):  # the first two share the 7-bit recipe, the third has its own
        kernel(name)
        for backend in ("onnx-int8", "openvino-int8"):
            wrap_reranker(runtime(backend), torch_reranker, tmp_path, calibration)
    exports = [_int8_weights(path) for path in (tmp_path / "onnx").glob("*/model.onnx")]
    assert sorted(len(weights) for weights in exports) == [0, 14, 14]  # OpenVINO's fp32 export, and two int8 ones
    assert len(list((tmp_path / "openvino").glob("*/model.xml"))) == 2


def test_each_fact_of_a_backend_keys_the_scores_apart(models, tmp_path):
    torch_reranker = Reranker(RerankSpec(str(models["ce"])))
    torch_fingerprint = torch_reranker.fingerprint()
    assert "backend" not in torch_fingerprint  # torch's key is the one scores were cached under before backends
    assert RerankSpec("m").to_config() == {"model": "m", "depth": 100}  # nor does the default enter a result's identity
    assert RerankSpec("m", backend="onnx").to_config() == {"model": "m", "depth": 100, "backend": "onnx"}
    pairs = _pairs()
    fingerprints = {
        backend: wrap_reranker(runtime(backend), torch_reranker, tmp_path, pair_calibration(pairs), 1).fingerprint()
        for backend in EXPORTED
    }
    keys = {content_key(fingerprint) for fingerprint in [torch_fingerprint, *fingerprints.values()]}
    assert len(keys) == 5  # no two backends share a score
    for backend, fingerprint in fingerprints.items():
        for name in set(fingerprint) - set(torch_fingerprint):  # each fact the backend adds, changed in turn
            changed = {**fingerprint, name: ["changed", fingerprint[name]]}
            assert content_key(changed) != content_key(fingerprint), (backend, name)
    assert {"quantization", "onnxruntime", "int8_kernels"} <= set(fingerprints["onnx-int8"])
    assert {"calibration", "nncf", "openvino", "inference_precision"} <= set(fingerprints["openvino-int8"])
    other = wrap_reranker(runtime("openvino-int8"), torch_reranker, tmp_path, pair_calibration(pairs[:-1]), 1)
    assert content_key(other.fingerprint()) != content_key(fingerprints["openvino-int8"])  # other pairs: refitted


def test_the_calibration_sample_is_a_seeded_draw_of_the_pairs_reranked(models, tmp_path):
    pairs = _pairs(400)
    sample = pair_calibration(pairs)
    chosen = sorted(random.Random(0).sample(range(400), 300))  # the draw, by hand
    assert sample.texts == tuple(pairs[i] for i in chosen)
    assert pair_calibration(pairs[:10]).texts == tuple(pairs[:10])  # fewer pairs than the sample: all of them
    assert pair_calibration(pairs).identity() == sample.identity()
    assert pair_calibration(pairs, seed=1).identity() != sample.identity()
    reranker = wrap_reranker(runtime("openvino-int8"), Reranker(RerankSpec(str(models["ce"]))), tmp_path, sample, 1)
    assert reranker.fingerprint()["calibration"] == sample.identity()


def _evaluate(folder: Path, out: Path, *options: str):
    return invoke(
        [
            "-q",
            "evaluate",
            str(folder),
            "--output-dir",
            str(out / "results"),
            "--cache-dir",
            str(out / "cache"),
            "--json",
            "--k",
            "1,3",
            *options,
        ],
    )


def test_the_command_line_reranks_on_a_backend_and_auto_records_its_choice(models, tiny_beir, tmp_path):
    runs = {}
    for backend in ("torch", "onnx", "auto", "auto"):
        result = _evaluate(
            tiny_beir, tmp_path, "--model", "bm25", "--rerank", str(models["ce"]), "--rerank-depth", "5",
            "--rerank-backend", backend,
        )  # fmt: skip
        assert result.exit_code == 0, result.stderr
        runs.setdefault(backend, []).append(json.loads(result.stdout))
    torch_run, onnx_run = runs["torch"][0], runs["onnx"][0]
    assert "backend" not in torch_run["config"]["rerank"] and onnx_run["config"]["rerank"]["backend"] == "onnx"
    assert torch_run["config_hash"] != onnx_run["config_hash"]
    for name, value in torch_run["metrics"].items():
        assert onnx_run["metrics"][name] == pytest.approx(value, abs=1e-6)
    first, second = runs["auto"]
    choice = first["config"]["rerank"]["backend_auto"]
    assert choice["backend"] == first["config"]["rerank"]["backend"] if choice["backend"] != "torch" else True
    assert {row["backend"] for row in choice["candidates"]} >= {"torch", "onnx"}
    assert choice["probe"]["cached"] is False and second["config"]["rerank"]["backend_auto"]["probe"]["cached"]


@pytest.mark.parametrize(
    ("options", "key", "made"),
    [
        (["--model", "bm25", "--rerank-depth", "5", "--rerank-backend", "onnx-int8"], "rerank_preparation",
         {"export", "quantize", "compile"}),
        (["--model", "bm25", "--rerank-depth", "5", "--rerank-backend", "openvino-int8"], "rerank_preparation",
         {"export", "calibration", "quantize", "compile"}),
        (["--sparse-backend", "onnx"], "model_preparation", {"export", "compile"}),
    ],
    ids=["rerank-onnx-int8", "rerank-openvino-int8", "sparse-onnx"],
)  # fmt: skip
def test_an_exported_head_s_preparation_is_its_own_phase_and_a_second_run_reuses_it(
    models, tiny_beir, tmp_path, options, key, made
):
    """The reranker's and the sparse encoder's export, calibration, quantization and compile are recorded step by
    step (``cost.rerank_preparation``, ``cost.model_preparation``) and counted as ``prepare_model``, out of the
    ``rerank`` or ``load`` phase they ran in; a second run (another output folder, the same cache) reads them."""
    model = ["--rerank", str(models["ce"])] if key == "rerank_preparation" else ["--model", str(models["sparse"])]
    records = []
    for round_ in ("cold", "again"):
        result = _evaluate(tiny_beir, tmp_path / round_, *model, *options, "--cache-dir", str(tmp_path / "cache"))
        assert result.exit_code == 0, result.stderr
        records.append(json.loads(result.stdout))
    cold, again = (record["cost"][key] for record in records)
    assert set(cold["steps"]) == made and cold["cached"] == []
    assert cold["seconds"] == pytest.approx(sum(cold["steps"].values()), abs=1e-3)
    assert set(again["cached"]) == made - {"compile"}  # everything but the session or compile, which is made again
    for record, preparation in zip(records, (cold, again)):
        timings = record["timings"]
        assert timings["prepare_model"] == pytest.approx(preparation["seconds"], abs=1e-3)
        phases = [value for name, value in timings.items() if name not in ("encode", "total")]
        assert sum(phases) <= timings["total"] + 1e-3  # moved out of rerank or load, not counted twice


def test_an_openvino_int8_head_counts_nncf_s_statistics_passes_once(models, tmp_path, monkeypatch):
    """Each step of a reranker's preparation counted on a scripted clock (each reading one second later): NNCF's
    statistics passes, timed inside the quantization, are its ``calibration`` step and not also ``quantize``."""
    import itertools
    from types import SimpleNamespace

    from harness.runtimes import preparation

    ticks = itertools.count()
    monkeypatch.setattr(preparation, "time", SimpleNamespace(perf_counter=lambda: float(next(ticks))))

    def statistics_only(core, model, items, calibration, folder, record):
        record.add("calibration", 0.25)  # what NNCF's passes took, inside the quantize step
        return model  # the float model, compiled as the int8 one would be

    monkeypatch.setattr("harness.runtimes.openvino_backend.quantize_items", statistics_only)
    reranker = Reranker(RerankSpec(str(models["ce"])))
    wrapped = wrap_reranker(runtime("openvino-int8"), reranker, tmp_path, pair_calibration(_pairs()))
    assert wrapped.preparation["steps"] == {"export": 1.0, "quantize": 0.75, "calibration": 0.25, "compile": 1.0}


def test_the_command_line_runs_a_sparse_encoder_on_a_backend(models, tiny_beir, tmp_path):
    torch_run, onnx_run = (
        json.loads(result.stdout)
        for result in (
            _evaluate(tiny_beir, tmp_path, "--model", str(models["sparse"]), "--sparse-backend", backend)
            for backend in ("torch", "onnx")
        )
    )
    assert "sparse_backend" not in torch_run["config"] and onnx_run["config"]["sparse_backend"] == "onnx"
    assert torch_run["config_hash"] != onnx_run["config_hash"]
    assert onnx_run["metrics"]["nDCG@3"] == pytest.approx(torch_run["metrics"]["nDCG@3"], abs=1e-6)


def test_bad_backend_settings_are_one_line_before_anything_loads(models, tiny_beir, tmp_path):
    result = _evaluate(tiny_beir, tmp_path, "--model", str(models["sparse"]), "--backend", "onnx")
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        "Error: --backend onnx is a dense model's runtime; a sparse encoder runs on --sparse-backend "
        "(e.g. --sparse-backend onnx)"
    ]
    result = _evaluate(
        tiny_beir, tmp_path, "--model", "bm25", "--rerank", str(models["ce2"]), "--rerank-backend", "onnx"
    )
    assert result.exit_code == 1
    assert len(result.stderr.strip().splitlines()) == 1
    assert "one-label cross-encoder" in result.stderr and "2 labels" in result.stderr
    assert "use rerank backend torch" in result.stderr
    assert not list((tmp_path / "results").rglob("*.json"))  # nothing written


def test_an_unknown_rerank_backend_is_refused_before_anything_loads(tiny_beir, tmp_path):
    from harness import evaluate
    from harness.errors import HarnessError

    with pytest.raises(HarnessError, match="unknown backend 'tpu'"):
        evaluate(tiny_beir, model="bm25", rerank_model="nowhere/model", rerank_backend="tpu", output_dir=None)
