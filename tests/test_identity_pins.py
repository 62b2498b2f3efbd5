"""Identities that must not move when code moves: configuration hashes, the keys a model's fingerprint is
remembered under, a calibration sample's and the hashing encoder's identities. The expected values were computed
by the code before the runtimes got their registry and the encoder module was split, so a result or a cache
entry written then is found and reused now."""

from __future__ import annotations

from pathlib import Path

import pytest

BACKENDS = ("torch", "onnx", "onnx-int8", "openvino", "openvino-int8")
CONFIG_HASHES = {
    "torch": "14c955ea8b4ca480",
    "onnx": "1aca964d5cdab0e6",
    "onnx-int8": "85d921c0dae3a248",
    "openvino": "7381b4a62bc93223",
    "openvino-int8": "dd7955fcbccd293f",
}
VARIANTS = {
    "torch": "",
    "onnx": "onnx-1aca964d",
    "onnx-int8": "onnx-int8-85d921c0",
    "openvino": "openvino-7381b4a6",
    "openvino-int8": "openvino-int8-dd7955fc",
}
MODEL_SETTINGS = {
    "torch": "4200b0ec2bff7c5423f4bb28f7ae70e2ed45a054d38be28f82e0349f828f661f",
    "onnx": "67cc4cefe8491f1e9a6519b562413a26e37e493a3863683c35a770370f55d6b6",
    "onnx-int8": "c6dbe6faf47917caba0ab7ec2d3c81b0d79dcc5b2717c887878f12a759b23b20",
    "openvino": "e3d2c8b91ba235b0310220b3092627b7727378d04510d58c7390d8271494c513",
    "openvino-int8": "df3ef0e0d3b1e82dddd819c787634716ce13203d2dbaf5922c16501fb7fd43f1",
}
VERSIONS = {"onnxruntime": "1.20.0", "openvino": "2025.1.0", "nncf": "2.16.0"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_backends_configuration_hash_and_variant_stay_what_they_were(backend):
    from harness.pipeline.evaluate import EvaluateConfig, configuration
    from harness.runtimes.spec import EncoderSpec

    identity = configuration(
        EvaluateConfig(dataset_path=Path("/nonexistent"), model="m", encoder=EncoderSpec(backend=backend)), "scifact"
    )
    assert identity.config_hash == CONFIG_HASHES[backend]
    assert identity.variant == VARIANTS[backend]


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_key_a_models_fingerprint_is_remembered_under_stays_what_it_was(backend, tmp_path, monkeypatch):
    import importlib.metadata

    import harness.host
    from harness.io import cache
    from harness.io.cache import content_key
    from harness.pipeline.dense import stage as dense
    from harness.pipeline.evaluate import EvaluateConfig
    from harness.runtimes.spec import EncoderSpec

    monkeypatch.setattr(harness.host, "local_kernel_class", lambda: "avx512-vnni")
    monkeypatch.setattr(importlib.metadata, "version", lambda name: VERSIONS[name])
    seen = {}

    class Stop(Exception):
        pass

    def recorded(source, settings):
        seen["settings"] = settings
        raise Stop

    monkeypatch.setattr(cache, "model_files_key", recorded)
    config = EvaluateConfig(
        dataset_path=Path("/nonexistent"),
        model="m",
        encoder=EncoderSpec(backend=backend),
        cache=True,
        cache_dir=str(tmp_path),
    )
    with pytest.raises(Stop):
        dense._model_or_lazy(config, "src")
    assert content_key(seen["settings"]) == MODEL_SETTINGS[backend]


def test_a_calibration_samples_and_the_hashing_encoders_identities_stay_what_they_were():
    from harness.io.cache import content_key
    from harness.retrieval.encode import load_encoder
    from harness.runtimes.calibration import Calibration

    sample = Calibration(("a b", "c\u00e9"), "f" * 64, 300, 0)
    assert content_key(sample.identity()) == "35bcbfb718b5f5e7fb5aa681a369648d5edc0ed2e9a8ef8fbf73ec59ee988511"
    assert (
        content_key(load_encoder("hash:16").fingerprint())
        == "b5483b460ba39869d7184101b5e14df80f698e357277cbad0a5eef8438887ada"
    )


def test_results_written_before_the_move_are_found_and_reused(tmp_path):
    """tests/data/written-before holds what ``bench --datasets tiny --systems hash:16,bm25`` wrote before the
    runtimes got their registry and the encoder and formats modules were split: the same bench now skips both."""
    import shutil

    from click.testing import CliRunner

    from harness.cli import cli

    data = Path(__file__).parent / "data"
    shutil.copytree(data / "tiny", tmp_path / "data" / "tiny")
    shutil.copytree(data / "written-before", tmp_path / "out")
    result = CliRunner().invoke(
        cli,
        [
            "bench",
            "--datasets",
            str(tmp_path / "data" / "tiny"),
            "--systems",
            "hash:16,bm25",
            "--output-dir",
            str(tmp_path / "out"),
            "--cache-dir",
            str(tmp_path / "cache"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "2 cells: 0 done, 2 skipped" in result.output
