"""The int8/OpenVINO model's preparation (export, calibration, quantization, compile): timed step by step, its own
phase in the result's cost record, and paid once per machine: a second load with the same identity neither quantizes
nor compiles from scratch, and a new corpus or a sweep over datasets prepares nothing more (the model is calibrated
on the shipped sample, not on the corpus).

Counted, never timed: calls to NNCF's quantizer and to the compile, OpenVINO's own report of a model imported from
its blob cache (``LOADED_FROM_CACHE``) and the blobs it wrote. The model is a tiny random BERT (`tiny_bert`)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from cli_runner import invoke

pytest.importorskip("openvino")
pytest.importorskip("nncf")

WORDS = "apple banana cherry date fig grape kiwi lemon mango melon olive peach pear plum".split()


@pytest.fixture(scope="module")
def tiny_model(tiny_bert) -> Path:
    return tiny_bert(WORDS)


@pytest.fixture(scope="module")
def torch_encoder(tiny_model):
    from harness.retrieval.encode import load_encoder

    return load_encoder(str(tiny_model), batch_size=8)


def _calibration(seed: int = 2):
    from harness.records import Doc
    from harness.runtimes.openvino_backend import corpus_calibration

    docs = [Doc(f"d{i}", "", " ".join(WORDS[(i * seed + j) % len(WORDS)] for j in range(3 + i % 7))) for i in range(40)]
    return corpus_calibration(iter(docs), f"corpus-{seed}", size=30)


@pytest.fixture
def counted(monkeypatch):
    """Counts NNCF's quantizer calls and the final compiles (`compile_for_cpu`), and lists each compile's
    ``LOADED_FROM_CACHE`` as OpenVINO reports it."""
    from harness.runtimes import openvino_backend

    nncf = openvino_backend.nncf_module()
    calls = {"quantize": 0, "compile": 0, "from_blob": []}
    quantize, compile_for_cpu = nncf.quantize, openvino_backend.compile_for_cpu

    def counted_quantize(*args, **kwargs):
        calls["quantize"] += 1
        return quantize(*args, **kwargs)

    def counted_compile(*args, **kwargs):
        calls["compile"] += 1
        compiled = compile_for_cpu(*args, **kwargs)
        calls["from_blob"].append(bool(compiled.get_property("LOADED_FROM_CACHE")))
        return compiled

    monkeypatch.setattr(nncf, "quantize", counted_quantize)
    monkeypatch.setattr(openvino_backend, "compile_for_cpu", counted_compile)
    return calls


def _blobs(cache: Path) -> list[Path]:
    return sorted((cache / "openvino-compiled").glob("*.blob"))


def test_a_second_load_with_the_same_identity_neither_quantizes_nor_compiles_from_scratch(
    torch_encoder, tmp_path, counted
):
    from harness.runtimes.openvino_backend import openvino_encoder

    calibration = _calibration()
    first = openvino_encoder(torch_encoder, "openvino-int8", tmp_path, calibration=calibration)
    assert counted == {"quantize": 1, "compile": 1, "from_blob": [False]}
    assert len(_blobs(tmp_path)) == 1  # OpenVINO wrote the compiled model to its cache
    assert first.preparation["cached"] == [] and set(first.preparation["steps"]) == {
        "export",
        "calibration",
        "quantize",
        "compile",
    }
    second = openvino_encoder(torch_encoder, "openvino-int8", tmp_path, calibration=calibration)
    assert counted == {"quantize": 1, "compile": 2, "from_blob": [False, True]}  # imported, not compiled
    assert len(_blobs(tmp_path)) == 1
    assert sorted(second.preparation["cached"]) == ["calibration", "compile", "export", "quantize"]
    assert second.fingerprint() == first.fingerprint()  # the blob cache is no part of the model's identity
    texts = ["apple pear", "plum kiwi mango"]
    assert (second.encode_docs(texts) == first.encode_docs(texts)).all()
    openvino_encoder(torch_encoder, "openvino-int8", tmp_path, calibration=_calibration(seed=3))
    assert counted["quantize"] == 2 and counted["from_blob"][-1] is False  # another corpus: its own model
    assert len(_blobs(tmp_path)) == 2


def test_the_float_model_is_compiled_once_too(torch_encoder, tmp_path, counted):
    from harness.runtimes.openvino_backend import openvino_encoder

    openvino_encoder(torch_encoder, "openvino", tmp_path)
    again = openvino_encoder(torch_encoder, "openvino", tmp_path)
    assert counted == {"quantize": 0, "compile": 2, "from_blob": [False, True]}
    assert sorted(again.preparation["cached"]) == ["compile", "export"]


def test_calibration_is_timed_over_each_statistics_pass():
    """`TimedItems` adds each full pass over the items, from its start to its end, on the clock it is given."""
    from harness.runtimes.openvino_backend import TimedItems

    ticks = iter(range(0, 100, 5))  # 0, 5, 10, ...: each reading 5 s after the one before
    items = TimedItems([{"a": 1}, {"a": 2}, {"a": 3}], timer=lambda: next(ticks))
    assert len(items) == 3
    assert [item["a"] for item in items] == [1, 2, 3]  # read at 0 and 5
    assert list(items) == [{"a": 1}, {"a": 2}, {"a": 3}]  # read at 10 and 15
    assert items.seconds == 10 and items.passes == 2


def test_nncf_reads_the_calibration_in_two_passes(torch_encoder, tmp_path, monkeypatch):
    """SmoothQuant's statistics, then the ranges: NNCF iterates the items twice, and the time of both is the
    calibration step (the rest of `nncf.quantize` is the quantize step)."""
    from harness.runtimes import openvino_backend

    made = []
    real = openvino_backend.TimedItems
    monkeypatch.setattr(openvino_backend, "TimedItems", lambda items: made.append(real(items)) or made[-1])
    encoder = openvino_backend.openvino_encoder(torch_encoder, "openvino-int8", tmp_path, calibration=_calibration())
    assert len(made) == 1 and made[0].passes == 2
    assert encoder.preparation["steps"]["calibration"] == round(made[0].seconds, 4)


class _Stub:
    preparation = {"seconds": 2.0, "steps": {"export": 0.5, "compile": 1.5}, "cached": []}


class _LazyStub(_Stub):
    loaded = True


@pytest.mark.parametrize(
    ("encoder", "cached", "moved_from"),
    [(_Stub(), [], "load"), (_LazyStub(), [], "encode_corpus"), (_LazyStub(), ["encode_corpus"], "encode_queries")],
)
def test_the_preparation_leaves_the_phase_it_was_timed_in(encoder, cached, moved_from):
    from harness.pipeline.stages import Clock, take_preparation

    clock, cost = Clock(), {}
    for phase in ("load", "encode_corpus", "encode_queries"):
        clock.add(phase, 5.0)
    clock.cached.extend(cached)
    take_preparation(clock, encoder, cost)
    take_preparation(clock, encoder, cost)  # once per run
    expected = {"load": 5.0, "encode_corpus": 5.0, "encode_queries": 5.0, "prepare_model": 2.0}
    expected[moved_from] = 3.0
    assert {phase: clock.seconds[phase] for phase in expected} == expected
    assert cost == {"model_preparation": _Stub.preparation}


def _evaluate(folder: Path, model: Path, cache: Path, out: Path) -> dict:
    result = invoke(
        [
            "-v",
            "evaluate",
            str(folder),
            "--model",
            str(model),
            "--backend",
            "openvino-int8",
            "--json",
            "--cache-dir",
            str(cache),
            "--output-dir",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.stderr
    return {"result": json.loads(result.stdout), "stderr": result.stderr}


def test_the_preparation_is_its_own_phase_of_the_cost_record(tiny_model, tiny_beir, tmp_path):
    cold = _evaluate(tiny_beir, tiny_model, tmp_path / "cache", tmp_path / "a")
    timings, cost = cold["result"]["timings"], cold["result"]["cost"]
    steps = cost["model_preparation"]["steps"]
    assert set(steps) == {"export", "calibration", "quantize", "compile"} and cost["model_preparation"]["cached"] == []
    assert timings["prepare_model"] == pytest.approx(sum(steps.values()), abs=1e-3) and timings["prepare_model"] > 0
    assert "model preparation" in cold["stderr"]  # the cost line evaluate logs
    warm = _evaluate(tiny_beir, tiny_model, tmp_path / "cache", tmp_path / "b")
    assert "prepare_model" not in warm["result"]["timings"] and "model_preparation" not in warm["result"]["cost"]
    assert warm["result"]["config"]["embedding_cache"] == "hit"  # no model loaded, nothing prepared
    assert warm["result"]["config_hash"] == cold["result"]["config_hash"]


def _another_corpus(tiny_beir: Path, tmp_path: Path) -> Path:
    second = tmp_path / "tiny2"
    shutil.copytree(tiny_beir, second)
    corpus = second / "corpus.jsonl"
    corpus.write_text(corpus.read_text().replace('"text": "', '"text": "plum ', 1))  # another corpus
    return second


def test_a_new_corpus_on_a_prepared_machine_pays_no_preparation(tiny_model, tiny_beir, tmp_path, counted):
    """The int8 model is calibrated on the shipped sample, not the corpus: a second corpus in the same cache neither
    calibrates nor quantizes, and both results record the recipe and the sample (its file and sha256)."""
    from harness.runtimes.calibration import SHIPPED_SAMPLE
    from harness.runtimes.openvino_backend import QUANTIZATION

    first = _evaluate(tiny_beir, tiny_model, tmp_path / "cache", tmp_path / "a")["result"]
    assert counted["quantize"] == 1
    second = _evaluate(_another_corpus(tiny_beir, tmp_path), tiny_model, tmp_path / "cache", tmp_path / "b")["result"]
    assert counted["quantize"] == 1  # no calibration, no quantization for the second corpus
    assert {"calibration", "quantize"} <= set(second["cost"]["model_preparation"]["cached"])
    assert "calibration" not in second["cost"]["model_preparation"]["steps"]
    text = (Path(__file__).parents[1] / "harness" / SHIPPED_SAMPLE).read_bytes()
    for result in (first, second):
        recorded = json.dumps(result["config"])
        assert hashlib.sha256(text).hexdigest() in recorded and f"harness/{SHIPPED_SAMPLE}" in recorded
        assert (
            json.dumps(QUANTIZATION["smooth_quant_alpha_matmul"]) in recorded and '"preset": "performance"' in recorded
        )


def test_a_sweep_prepares_the_model_once_for_every_dataset(tiny_model, tiny_beir, tmp_path, counted):
    """bench over two corpora: one quantization and one compile in all; the same sweep again quantizes nothing and
    reads the compiled model from OpenVINO's cache."""
    second = _another_corpus(tiny_beir, tmp_path)

    def bench(out: str):
        args = ["bench", "--models", str(tiny_model), "--datasets", f"{tiny_beir},{second}", "--backend"]
        args += ["openvino-int8", "--cache-dir", str(tmp_path / "cache"), "--output-dir", str(tmp_path / out)]
        result = invoke(args)
        assert result.exit_code == 0, result.stderr

    bench("a")
    assert counted["quantize"] == 1 and counted["compile"] == 1
    bench("b")  # bench loads the model once for the sweep: from OpenVINO's blob cache, nothing quantized
    assert counted == {"quantize": 1, "compile": 2, "from_blob": [False, True]}
