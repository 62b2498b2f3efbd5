"""The OpenVINO backends: vectors match sentence-transformers' own, int8 is calibrated on the corpus being
evaluated and keyed by its sample, telemetry stays off, and each bad input is one clear line.

The model is a tiny BERT bi-encoder with random weights built here (no download, seconds to quantize)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_runner import invoke
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import HarnessError, MissingDependencyError

pytest.importorskip("openvino")
pytest.importorskip("nncf")

WORDS = (
    "apple banana cherry date fig grape kiwi lemon mango melon olive peach pear plum fruit stone tree "
    "sweet sour green red ripe seed juice"
).split()


def _texts(count: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(3, 14)))) for _ in range(count)]


@pytest.fixture(scope="module")
def tiny_model(tiny_bert) -> Path:
    """A 2-layer BERT bi-encoder (mean pooling, normalized) with random weights over this file's words."""
    return tiny_bert(WORDS)


@pytest.fixture(scope="module")
def torch_encoder(tiny_model):
    from harness.retrieval.encode import load_encoder

    return load_encoder(str(tiny_model), batch_size=8)


@pytest.fixture(scope="module")
def reference(tiny_model):
    """sentence-transformers' own vectors of the probe texts (the independent reference)."""
    from sentence_transformers import SentenceTransformer

    texts = _texts(40, seed=1)
    return texts, SentenceTransformer(str(tiny_model), device="cpu").encode(texts, normalize_embeddings=True)


def _calibration(count: int = 60, seed: int = 2):
    from harness.records import Doc
    from harness.runtimes.openvino_backend import corpus_calibration

    docs = [Doc(f"d{i}", "", text) for i, text in enumerate(_texts(count, seed))]
    return corpus_calibration(iter(docs), f"corpus-{count}-{seed}", size=50)


def _cosines(vectors, reference_vectors):
    vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors * reference_vectors).sum(axis=1)


def test_openvino_matches_sentence_transformers_and_records_its_precision(torch_encoder, reference, tmp_path):
    from harness.runtimes.openvino_backend import openvino_encoder, openvino_module

    openvino = openvino_module()  # telemetry declined, as the harness imports it

    texts, expected = reference
    encoder = openvino_encoder(torch_encoder, "openvino", tmp_path)
    assert _cosines(encoder.encode_docs(texts), expected).min() >= 0.999
    assert _cosines(encoder.encode_queries(texts[:3]), expected[:3]).min() >= 0.999
    # The plugin's default: bf16 where the CPU computes it natively, f32 elsewhere (OpenVINO's own report).
    native_bf16 = "BF16" in openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    assert encoder.settings()["inference_precision"] == ("bf16" if native_bf16 else "f32")
    assert encoder.fingerprint()["openvino"] == openvino.__version__
    assert list((tmp_path / "onnx").glob("*/model.onnx"))  # the project's own export, shared with --backend onnx


def test_torch_bf16_on_the_cpu_matches_sentence_transformers(tiny_model, reference):
    from harness.retrieval.encode import load_encoder

    texts, expected = reference
    encoder = load_encoder(str(tiny_model), batch_size=8, device="cpu", precision="bf16")
    assert _cosines(encoder.encode_docs(texts), expected).min() >= 0.999


def test_int8_is_close_and_calibrated_on_the_corpus(torch_encoder, reference, tmp_path, monkeypatch):
    from harness.runtimes.openvino_backend import nncf_module, openvino_encoder

    nncf = nncf_module()

    texts, expected = reference
    calls = []
    real = nncf.quantize
    monkeypatch.setattr(
        nncf, "quantize", lambda *args, **kwargs: calls.append(len(list(args[1].get_data()))) or real(*args, **kwargs)
    )
    calibration = _calibration()
    encoder = openvino_encoder(torch_encoder, "openvino-int8", tmp_path, calibration=calibration)
    cosines = _cosines(encoder.encode_docs(texts), expected)
    assert cosines.min() >= 0.99
    assert calls == [50]  # one quantization, on the 50 sampled corpus texts
    settings = encoder.settings()
    assert (
        settings["calibration"] == calibration.identity() and settings["quantization"]["activations"] == "int8 static"
    )
    again = openvino_encoder(torch_encoder, "openvino-int8", tmp_path, calibration=calibration)
    assert calls == [50] and again.fingerprint() == encoder.fingerprint()  # cached
    other = openvino_encoder(torch_encoder, "openvino-int8", tmp_path, calibration=_calibration(seed=3))
    assert calls == [50, 50] and other.fingerprint() != encoder.fingerprint()  # another corpus, another model
    assert len(list((tmp_path / "openvino").glob("*/model.xml"))) == 2


def test_int8_keeps_the_matmuls_of_two_activations_in_float(torch_encoder, tmp_path):
    """The recipe quantizes every weight MatMul's input and leaves the attention MatMuls (both inputs activations)
    in float: read from the saved int8 model's graph, by each MatMul's inputs (a FakeQuantize in front of an input
    is int8), against the float export's own MatMuls classified here by their inputs."""
    from harness.runtimes.openvino_backend import openvino_encoder, openvino_module

    openvino = openvino_module()  # telemetry declined, as the harness imports it

    openvino_encoder(torch_encoder, "openvino-int8", tmp_path, calibration=_calibration())
    quantized = openvino.Core().read_model(str(next((tmp_path / "openvino").glob("*/model.xml"))))
    onnx = openvino.Core().read_model(str(next((tmp_path / "onnx").glob("*/model.onnx"))))

    def kinds(op):
        return [op.input_value(i).get_node().get_type_name() for i in range(2)]

    weights = {
        op.get_friendly_name() for op in onnx.get_ops() if op.get_type_name() == "MatMul" and "Constant" in kinds(op)
    }
    both = {op.get_friendly_name() for op in onnx.get_ops() if op.get_type_name() == "MatMul"} - weights
    assert len(both) == 4 and len(weights) == 12  # 2 layers: Q·K and scores·V; Q, K, V, output, FFN in and out

    def fed_by_fake_quantize(op) -> bool:
        def through(node):
            while node.get_type_name() in ("Convert", "Reshape", "Transpose"):
                node = node.input_value(0).get_node()
            return node.get_type_name() == "FakeQuantize"

        return any(through(op.input_value(i).get_node()) for i in range(2))

    matmuls = {op.get_friendly_name(): op for op in quantized.get_ops() if op.get_type_name() == "MatMul"}
    assert {name for name, op in matmuls.items() if fed_by_fake_quantize(op)} == weights
    assert both <= set(matmuls)


def test_the_calibration_sample_is_a_seeded_uniform_subset():
    from harness.records import Doc
    from harness.runtimes.openvino_backend import corpus_calibration

    docs = [Doc(f"d{i}", "", f"text {i}") for i in range(1000)]
    first = corpus_calibration(iter(docs), "sha", size=300, seed=0)
    assert first == corpus_calibration(iter(docs), "sha", size=300, seed=0)
    assert first.texts != corpus_calibration(iter(docs), "sha", size=300, seed=1).texts
    numbers = [int(text.split()[1]) for text in first.texts]
    assert len(set(numbers)) == 300 and numbers == sorted(numbers)  # distinct, in corpus order
    assert 350 < np.mean(numbers) < 650  # not the first 300 (mean 149.5): drawn over the whole corpus
    assert (
        first.identity()["drawn"] == 300
        and first.identity()["texts_sha256"]
        != corpus_calibration(iter(docs[:-1]), "sha", size=300, seed=1).identity()["texts_sha256"]
    )


@settings(derandomize=True, deadline=None, max_examples=40)
@given(seeds=st.lists(st.integers(0, 2**32), min_size=2, max_size=2, unique=True), count=st.integers(40, 400))
def test_the_pair_sample_is_the_seed_s_uniform_draw(seeds, count):
    """A reranker's int8 calibration: `size` of the pairs, drawn as the seed says (two seeds, two draws: two draws of
    30 of 40 or more pairs coincide by chance less than once in 1e8), in their order, each pair once."""
    from harness.runtimes.calibration import pair_calibration

    pairs = [(f"query {i % 7}", f"document {i}") for i in range(count)]
    drawn = [pair_calibration(pairs, size=30, seed=seed) for seed in seeds]
    for seed, calibration in zip(seeds, drawn):
        numbers = [int(document.split()[1]) for _, document in calibration.texts]
        assert len(set(numbers)) == 30 and numbers == sorted(numbers)  # distinct, in the pairs' order
        assert all(pairs[number] == pair for number, pair in zip(numbers, calibration.texts))
        assert calibration == pair_calibration(pairs, size=30, seed=seed)  # the same seed, the same draw
        assert calibration.identity()["seed"] == seed
    assert drawn[0].texts != drawn[1].texts
    assert drawn[0].identity()["texts_sha256"] != drawn[1].identity()["texts_sha256"]


def _shipped_identity() -> dict:
    """The shipped sample's identity, from the file itself: its sha256, its lines and their groups of four."""
    import hashlib

    text = (Path(__file__).parents[1] / "harness" / "data" / "calibration-sample.txt").read_bytes()
    lines = [line for line in text.decode().splitlines() if line.strip()]
    return {"sample_sha256": hashlib.sha256(text).hexdigest(), "drawn": len(lines) + -(-len(lines) // 4)}


def test_evaluate_calibrates_int8_on_the_shipped_sample_not_the_corpus(tiny_model, tiny_beir, tmp_path):
    result = invoke(
        [
            "evaluate",
            str(tiny_beir),
            "--model",
            str(tiny_model),
            "--backend",
            "openvino-int8",
            "--json",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--output-dir",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 0, result.stderr
    config = json.loads(result.stdout)["config"]
    assert config["calibration"]["sample"] == "harness/data/calibration-sample.txt"
    assert {key: config["calibration"][key] for key in ("sample_sha256", "drawn")} == _shipped_identity()
    assert "corpus_sha256" not in config["calibration"]


def test_evaluate_records_the_backend_cold_and_warm(tiny_model, tiny_beir, tmp_path):
    """The result records precision, quantization and calibration; a warm run (vectors cached, no model
    loaded) records the same, and scores the same."""
    runs = []
    for run in range(2):
        result = invoke(
            [
                "-q",
                "evaluate",
                str(tiny_beir),
                "--model",
                str(tiny_model),
                "--backend",
                "openvino-int8",
                "--json",
                "--cache-dir",
                str(tmp_path / "cache"),
                "--output-dir",
                str(tmp_path / f"out{run}"),
            ],
        )
        assert result.exit_code == 0, result.stderr
        runs.append(json.loads(result.stdout))
    cold, warm = runs
    assert warm["config"]["embedding_cache"] == "hit"
    for key in ("backend", "inference_precision", "quantization", "calibration"):
        assert cold["config"][key] == warm["config"][key], key
    assert cold["metrics"] == warm["metrics"]
    assert {"openvino", "nncf"} <= set(cold["versions"])


def test_missing_extra_is_one_line(monkeypatch, tiny_beir, tmp_path):
    from harness.runtimes import openvino_backend

    monkeypatch.setitem(sys.modules, "openvino", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'beir-harness\[openvino\]'"):
        openvino_backend.openvino_module()
    result = invoke(
        [
            "evaluate",
            str(tiny_beir),
            "--backend",
            "openvino",
            "--output-dir",
            str(tmp_path),
            "--cache-dir",
            str(tmp_path / "cache"),
        ],
    )
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "Error: --backend openvino needs openvino (and nncf for openvino-int8): pip install 'beir-harness[openvino]'"
    )
    assert not list(tmp_path.glob("**/*.json"))


def test_missing_nncf_is_one_line(monkeypatch, torch_encoder, tmp_path):
    from harness.runtimes.openvino_backend import openvino_encoder

    monkeypatch.setitem(sys.modules, "nncf", None)
    with pytest.raises(
        MissingDependencyError, match=r"openvino-int8 needs nncf: pip install 'beir-harness\[openvino\]'"
    ):
        openvino_encoder(torch_encoder, "openvino-int8", tmp_path, calibration=_calibration())


def _unconvertible(folder: Path) -> Path:
    """An ONNX graph with an operator no frontend knows (a custom domain's op)."""
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("Mystery", ["input_ids"], ["last_hidden_state"], domain="com.example.unknown")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, 4])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [1, 4, 8])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example.unknown", 1)]
    )
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(folder / "model.onnx"))
    return folder / "model.onnx"


@pytest.mark.parametrize("backend", ["openvino", "openvino-int8"])
def test_a_model_openvino_cannot_convert_is_one_line_and_caches_nothing(backend, torch_encoder, tmp_path, monkeypatch):
    from harness.runtimes import openvino_backend

    monkeypatch.setattr(openvino_backend, "export", lambda model, folder, *rest: _unconvertible(tmp_path / "x"))
    with pytest.raises(HarnessError) as caught:
        openvino_backend.openvino_encoder(torch_encoder, backend, tmp_path / "cache", calibration=_calibration())
    message = str(caught.value)
    assert message.startswith("OpenVINO cannot convert the model's ONNX export")
    assert "No conversion rule found for operations: com.example.unknown.Mystery" in message
    assert "use --backend torch or onnx" in message and "\n" not in message
    assert not (tmp_path / "cache" / "openvino").exists() or not list((tmp_path / "cache" / "openvino").iterdir())


@pytest.mark.parametrize("damage", ["truncated", "altered"])
def test_a_damaged_cached_model_is_quantized_again_with_a_warning(damage, torch_encoder, reference, tmp_path, caplog):
    from harness.runtimes.openvino_backend import openvino_encoder

    texts, _ = reference
    calibration = _calibration()
    first = openvino_encoder(torch_encoder, "openvino-int8", tmp_path, calibration=calibration).encode_docs(texts)
    (weights,) = (tmp_path / "openvino").glob("*/model.bin")
    data = weights.read_bytes()
    if damage == "truncated":  # a half-written copy: OpenVINO itself would fail to read it
        weights.write_bytes(data[: len(data) // 2])
    else:  # the same size, other bytes: OpenVINO would read it and run wrong weights; the sha256 catches it
        middle = len(data) // 2
        weights.write_bytes(data[:middle] + bytes(255 - b for b in data[middle : middle + 512]) + data[middle + 512 :])
    with caplog.at_level(logging.WARNING, logger="harness"):
        again = openvino_encoder(torch_encoder, "openvino-int8", tmp_path, calibration=calibration)
    assert [r for r in caplog.records if "is damaged" in r.getMessage() and "quantizing it again" in r.getMessage()]
    np.testing.assert_allclose(again.encode_docs(texts), first, atol=1e-6)  # the same calibration, the same model
    assert weights.stat().st_size > 0 and len(list((tmp_path / "openvino").iterdir())) == 1


def test_int8_without_a_calibration_is_calibrated_on_the_shipped_sample(torch_encoder, tmp_path):
    from harness.runtimes.openvino_backend import openvino_encoder

    calibration = openvino_encoder(torch_encoder, "openvino-int8", tmp_path).settings()["calibration"]
    assert {key: calibration[key] for key in ("sample_sha256", "drawn")} == _shipped_identity()


def test_nncf_telemetry_is_declined(tmp_path):
    """Imported the harness's way, NNCF keeps its telemetry stub and writes no client id under ~/intel."""
    code = (
        "from harness.runtimes.openvino_backend import nncf_module; nncf_module(); "
        "import nncf.telemetry.wrapper as w, os; print(type(w.telemetry).__name__, os.environ.get('CI'))"
    )
    env = {**os.environ, "HOME": str(tmp_path)}
    env.pop("CI", None)
    env.pop("NNCF_CI", None)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["MagicMock", "None"]  # NNCF's stub; the environment restored after
    assert not (tmp_path / "intel").exists()


def _evaluated_config(tiny_beir, tiny_model, tmp_path, backend: str, out: str) -> dict:
    """`evaluate --backend BACKEND --json` of the tiny model on the tiny folder, one cache: the result's config."""
    result = invoke(
        [
            "-q",
            "evaluate",
            str(tiny_beir),
            "--model",
            str(tiny_model),
            "--backend",
            backend,
            "--json",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--output-dir",
            str(tmp_path / out),
        ],
    )
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)["config"]


def test_a_new_quantization_recipe_is_a_new_model_not_a_cache_hit(tiny_model, tiny_beir, tmp_path, monkeypatch):
    """The remembered fingerprint (which lets a warm run load no model) is keyed by the recipe and the versions
    too: after a change of `QUANTIZATION` the corpus is quantized and encoded again, and the result says so."""
    from harness.runtimes import openvino_backend

    def run(out: str) -> dict:
        return _evaluated_config(tiny_beir, tiny_model, tmp_path, "openvino-int8", out)

    first = run("a")
    monkeypatch.setitem(openvino_backend.QUANTIZATION, "smooth_quant_alpha_matmul", 0.5)
    second = run("b")
    assert first["quantization"]["smooth_quant_alpha_matmul"] == 0.95
    assert second["quantization"]["smooth_quant_alpha_matmul"] == 0.5 and second["embedding_cache"] != "hit"
    assert len(list((tmp_path / "cache" / "openvino").glob("*/model.xml"))) == 2


@pytest.mark.parametrize("backend", ["onnx", "onnx-int8", "openvino", "openvino-int8"])
def test_threads_limit_the_runtime_session_as_they_limit_torch(tiny_model, tmp_path, backend):
    """`--threads N` holds ONNX Runtime's and OpenVINO's sessions to N threads, not only torch and faiss (asked of
    each runtime's own session; without it both take every core)."""
    pytest.importorskip("onnxruntime")
    from harness.pipeline.config import EvaluateConfig, load_model
    from harness.runtimes.spec import EncoderSpec

    config = EvaluateConfig(
        dataset_path=tmp_path,
        model=str(tiny_model),
        encoder=EncoderSpec(backend=backend),
        cache_dir=tmp_path / "cache",
        threads=1,
        calibration=_calibration(),
    )

    def threads_of(encoder) -> int:
        if backend.startswith("openvino"):
            return int(encoder.session.compiled.get_property("INFERENCE_NUM_THREADS"))
        return encoder.session.get_session_options().intra_op_num_threads

    from dataclasses import replace

    assert threads_of(load_model(config)) == 1
    # OpenVINO reads back at most the cores this process may run on (a process pinned to one core gets 1);
    # ONNX Runtime reports the option as asked
    cores = len(os.sched_getaffinity(0))
    assert threads_of(load_model(replace(config, threads=2))) == (
        min(2, cores) if backend.startswith("openvino") else 2
    )


def test_a_new_onnx_int8_recipe_is_a_new_model_not_a_cache_hit(tiny_model, tiny_beir, tmp_path, monkeypatch):
    """The same for `--backend onnx-int8`: its remembered fingerprint is keyed by ONNX Runtime's quantization
    settings and version, so a changed recipe quantizes and encodes again instead of serving the old vectors."""
    pytest.importorskip("onnxruntime")
    from harness.runtimes import onnx_backend

    def run(out: str) -> dict:
        return _evaluated_config(tiny_beir, tiny_model, tmp_path, "onnx-int8", out)

    assert run("a")["embedding_cache"] == "stored"
    assert run("b")["embedding_cache"] == "hit"  # the same recipe: the remembered model and its vectors
    monkeypatch.setitem(onnx_backend.QUANTIZATION, "per_channel", False)
    assert run("c")["embedding_cache"] == "stored"
    assert len(list((tmp_path / "cache" / "onnx").glob("*/model*.onnx"))) >= 2


def test_the_shipped_sample_s_int8_model_is_prepared_once_per_cpu_class(torch_encoder, tmp_path, monkeypatch):
    """Calibrated on the shipped sample, the int8 model is keyed by the CPU class (NNCF's statistics run at the CPU's
    precision): a cache shared by an avx512-vnni and an avx512-vnni+bf16 host holds one model each, each host's
    second load is its own model's, from the cache (same kernel class: the recipe alone does not tell them apart)."""
    from harness.runtimes import openvino_backend

    monkeypatch.setattr(openvino_backend, "local_kernel_class", lambda: "avx512-vnni")
    made = {}
    for name in ("avx512-vnni", "avx512-vnni+bf16", "avx512-vnni", "avx512-vnni+bf16"):
        monkeypatch.setattr(openvino_backend, "local_cpu_class", lambda name=name: name)
        before = set((tmp_path / "openvino").glob("*/model.xml"))
        encoder = openvino_backend.openvino_encoder(torch_encoder, "openvino-int8", tmp_path)
        assert encoder.settings()["calibration"]["sample"] == "harness/data/calibration-sample.txt"
        new = set((tmp_path / "openvino").glob("*/model.xml")) - before
        made.setdefault(name, []).append(("calibration" in encoder.preparation["steps"], len(new)))
    assert made == {"avx512-vnni": [(True, 1), (False, 0)], "avx512-vnni+bf16": [(True, 1), (False, 0)]}
    assert len(list((tmp_path / "openvino").glob("*/model.xml"))) == 2


def test_a_bi_encoder_s_int8_model_is_made_again_for_a_cpu_class_with_another_recipe(
    torch_encoder, tmp_path, monkeypatch
):
    """AVX2 and AVX512 (saturating int8 kernels) share the halved-range recipe, VNNI has its own: a cache shared
    by such CPUs quantizes once per recipe, for both int8 backends, and never serves one recipe's model to the
    other's CPU (counted by the quantization steps each encoder made, and by the models on disk)."""
    import harness.host
    from harness.runtimes import onnx_backend, openvino_backend

    made = []
    for name in ("avx2", "avx512", "avx512-vnni"):
        for module in (harness.host, onnx_backend, openvino_backend):
            monkeypatch.setattr(module, "local_kernel_class", lambda name=name: name)
        onnx = onnx_backend.onnx_encoder(torch_encoder, "onnx-int8", tmp_path)
        openvino = openvino_backend.openvino_encoder(torch_encoder, "openvino-int8", tmp_path, _calibration())
        made.append(("quantize" in onnx.preparation["steps"], "calibration" in openvino.preparation["steps"]))
    assert made == [(True, True), (False, False), (True, True)]
    assert len(list((tmp_path / "openvino").glob("*/model.xml"))) == 2
    assert len(list((tmp_path / "onnx").glob("*/model.onnx"))) == 3  # the fp32 export OpenVINO reads, two int8
