"""Where a run's seconds go when it prepares a model or probes for a backend: an ONNX model's export, int8
quantization and session are its ``prepare_model`` phase (as OpenVINO's preparation is), steps marked cached when
the export is reused; ``--backend auto``'s probe is a ``probe_backend`` phase of its own, out of ``load``.

Counted and compared, never timed against a limit: the steps recorded, the steps cached, and phases under a
scripted clock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import invoke

pytest.importorskip("onnxruntime")

WORDS = "apple banana cherry date fig grape kiwi lemon mango melon olive peach pear plum".split()


@pytest.fixture(scope="module")
def tiny_model(tiny_bert) -> Path:
    return tiny_bert(WORDS)


@pytest.fixture(scope="module")
def torch_encoder(tiny_model):
    from harness.retrieval.encode import load_encoder

    return load_encoder(str(tiny_model), batch_size=8)


@pytest.mark.parametrize(("backend", "made"), [("onnx", {"export"}), ("onnx-int8", {"export", "quantize"})])
def test_an_onnx_model_records_its_preparation_and_a_reused_export_is_marked_cached(
    torch_encoder, tmp_path, backend, made
):
    from harness.runtimes.onnx_backend import onnx_encoder

    cold = onnx_encoder(torch_encoder, backend, tmp_path).preparation
    assert set(cold["steps"]) == made | {"compile"} and cold["cached"] == []
    assert cold["seconds"] == pytest.approx(sum(cold["steps"].values()), abs=1e-3)
    again = onnx_encoder(torch_encoder, backend, tmp_path).preparation
    assert set(again["steps"]) == {"compile"} and sorted(again["cached"]) == sorted(made)


class _Ticks:
    """A scripted `perf_counter`: each call returns the next value."""

    def __init__(self, *values: float):
        self.values = iter(values)

    def __call__(self) -> float:
        return next(self.values)


def test_a_moved_block_counts_in_its_own_phase_and_leaves_the_outer_one(monkeypatch):
    from harness.pipeline import stages

    clock = stages.Clock()
    # load starts at 10; the probe runs from 12 to 19; load ends at 20
    monkeypatch.setattr(stages.time, "perf_counter", _Ticks(10.0, 12.0, 19.0, 20.0))
    with clock.stage("load"), clock.moved("load", stages.PROBE_BACKEND):
        pass
    monkeypatch.undo()
    assert clock.seconds["load"] == pytest.approx(3.0) and clock.seconds[stages.PROBE_BACKEND] == pytest.approx(7.0)


def test_move_never_leaves_a_phase_below_zero():
    from harness.pipeline.stages import Clock

    clock = Clock()
    clock.add("load", 1.5)
    clock.move(4.0, "load", "prepare_model")
    assert clock.seconds["load"] == 0.0 and clock.seconds["prepare_model"] == 4.0


def _evaluate(folder: Path, model: Path, cache: Path, out: Path, backend: str) -> dict:
    args = ["-v", "evaluate", str(folder), "--model", str(model), "--backend", backend, "--device", "cpu"]
    result = invoke([*args, "--json", "--cache-dir", str(cache), "--output-dir", str(out)])
    assert result.exit_code == 0, result.stderr
    return {"result": json.loads(result.stdout), "stderr": result.stderr}


def test_onnx_int8_preparation_is_its_own_phase_of_the_cost_record(tiny_model, tiny_beir, tmp_path):
    run = _evaluate(tiny_beir, tiny_model, tmp_path / "cache", tmp_path / "a", "onnx-int8")["result"]
    preparation = run["cost"]["model_preparation"]
    assert set(preparation["steps"]) == {"export", "quantize", "compile"}
    assert run["timings"]["prepare_model"] == pytest.approx(preparation["seconds"], abs=1e-3)


def test_the_auto_probe_is_its_own_phase_and_not_counted_twice(tiny_model, tiny_beir, tmp_path, monkeypatch):
    from harness.runtimes import classes

    monkeypatch.setattr(classes, "class_rows", lambda cpu=None: [])  # an unknown class: the full probe
    cold = _evaluate(tiny_beir, tiny_model, tmp_path / "cache", tmp_path / "a", "auto")
    timings = cold["result"]["timings"]
    assert timings["probe_backend"] > 0 and "backend probe" in cold["stderr"]  # the cost line evaluate logs
    phases = {name: value for name, value in timings.items() if name not in ("encode", "total")}
    # The probe loads and times every candidate: most of a tiny run. Counted in load as well, the phases would
    # add up to more than the run's wall time.
    assert sum(phases.values()) <= timings["total"] + 1e-3
    again = _evaluate(tiny_beir, tiny_model, tmp_path / "cache", tmp_path / "b", "auto")["result"]
    assert again["config"]["backend_auto"]["probe"]["cached"] and "probe_backend" in again["timings"]
