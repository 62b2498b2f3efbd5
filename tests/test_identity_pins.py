"""Identities that must not move when code moves: configuration hashes, the keys a model's fingerprint is
remembered under, a calibration sample's and the hashing encoder's identities. The expected values were computed
by the code before the runtimes got their registry and the encoder module was split, so a result or a cache
entry written then is found and reused now."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest
from cli_runner import invoke

import harness.pipeline.dense.stage as dense
from harness.pipeline.config import EvaluateConfig
from harness.retrieval.encode import LazyEncoder
from harness.runtimes.spec import EncoderSpec

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
    # moved once, on purpose: openvino-int8 is calibrated on the shipped sample (harness/data/calibration-sample.txt),
    # not on the corpus, so its prepared model is keyed by that sample (docs/cache-and-env.md) and is prepared again
    "openvino-int8": "36f074b552e03ecc40a654ba34a76bc7c0994620d1023084aaefad1b00b02acd",
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

    data = Path(__file__).parent / "data"
    shutil.copytree(data / "tiny", tmp_path / "data" / "tiny")
    shutil.copytree(data / "written-before", tmp_path / "out")
    result = invoke(
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


# A backend's runtime versions are part of its cache identity.
#
# A remembered model fingerprint (which decides the embedding cache key) must never be served to a run whose
# runtime differs: each package version that decides a backend's vectors (ONNX Runtime for onnx-int8;
# OpenVINO, and NNCF for openvino-int8) is changed in turn. The reference versions are importlib.metadata's,
# replaced here by a fake table.
# The tests below use no fixture of conftest.py: tools/mutation.py runs them with --noconftest.


RUNTIME_VERSIONS = {"onnxruntime": "1.20.0", "openvino": "2026.4.1", "nncf": "3.4.0"}
# the packages whose version decides each backend's vectors (from the backends' docstrings)
DECIDING = {
    "torch": (),
    "onnx": (),
    "onnx-int8": ("onnxruntime",),
    "openvino": ("openvino",),
    "openvino-int8": ("openvino", "nncf"),
}


@pytest.fixture
def versions(monkeypatch):
    table = dict(RUNTIME_VERSIONS)

    def version(name):
        if name in table:
            return table[name]
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    return table


class FakeEncoder:
    dimension, device = 4, "cpu"

    def __init__(self, tag):
        self.tag = tag

    def fingerprint(self):
        return {"name": "m", "normalize": True, "tag": self.tag}


@pytest.fixture
def model(tmp_path, monkeypatch):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "weights.bin").write_bytes(b"w")
    loads = []

    def load_model(config):
        loads.append(config.encoder.backend)
        return FakeEncoder(len(loads))

    monkeypatch.setattr(dense, "load_model", load_model)
    return folder, loads


def _config(tmp_path, folder, backend):
    return EvaluateConfig(
        dataset_path=tmp_path, model=str(folder), encoder=EncoderSpec(backend=backend), cache_dir=tmp_path / "cache"
    )


@pytest.mark.parametrize("backend", ["onnx-int8", "openvino", "openvino-int8"])
def test_a_remembered_fingerprint_is_never_served_to_another_runtime_version(tmp_path, versions, model, backend):
    folder, loads = model
    config = _config(tmp_path, folder, backend)
    first = dense._model_or_lazy(config, str(folder))
    assert isinstance(first, FakeEncoder) and loads == [backend]
    again = dense._model_or_lazy(config, str(folder))  # the same runtime: remembered, nothing loads
    assert isinstance(again, LazyEncoder) and loads == [backend]
    for package in DECIDING[backend]:
        versions[package] += ".post1"
        fresh = dense._model_or_lazy(config, str(folder))
        assert isinstance(fresh, FakeEncoder), f"{package}'s new version was served the old fingerprint"
    assert len(loads) == 1 + len(DECIDING[backend])


@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_a_package_that_decides_nothing_keeps_the_fingerprint(tmp_path, versions, model, backend):
    folder, loads = model
    config = _config(tmp_path, folder, backend)
    dense._model_or_lazy(config, str(folder))
    for package in RUNTIME_VERSIONS:
        versions[package] += ".post1"
    assert isinstance(dense._model_or_lazy(config, str(folder)), LazyEncoder)
    assert len(loads) == 1


def test_backends_never_share_a_remembered_fingerprint(tmp_path, versions, model):
    folder, loads = model
    for backend in DECIDING:
        assert isinstance(dense._model_or_lazy(_config(tmp_path, folder, backend), str(folder)), FakeEncoder)
    assert loads == list(DECIDING)


def test_the_onnx_runtime_identity(versions, kernels):
    from harness.runtimes.onnx_backend import QUANTIZATION, runtime_identity

    kernels["class"] = "avx512-vnni"
    assert runtime_identity("onnx") == {}
    assert runtime_identity("onnx-int8") == {"onnxruntime": "1.20.0", "quantization": QUANTIZATION}
    del versions["onnxruntime"]
    assert runtime_identity("onnx-int8") == {"onnxruntime": None, "quantization": QUANTIZATION}
    kernels["class"] = "avx2"  # 7-bit weights where the int8 kernels saturate
    assert runtime_identity("onnx-int8") == {
        "onnxruntime": None,
        "quantization": {**QUANTIZATION, "reduce_range": True},
    }


def test_the_openvino_runtime_identity(versions, kernels):
    from harness.runtimes.openvino_backend import QUANTIZATION, runtime_identity

    kernels["class"] = "avx512-vnni"
    assert runtime_identity("openvino") == {"openvino": "2026.4.1"}
    sample = {  # the shipped calibration sample's identity, pinned: a new sample is a new prepared model
        "drawn": 80,
        "group": 4,
        "sample": "harness/data/calibration-sample.txt",
        "sample_sha256": "9f7974c78732627a2ffe710ecb8c08c063e33907195656bea1f136a179e68671",
        "texts_sha256": "50f617a45484a40fb652a865b696eff1eba48a557f3023d50c04047d14e2f55a",
    }
    assert runtime_identity("openvino-int8") == {
        "openvino": "2026.4.1",
        "nncf": "3.4.0",
        "quantization": QUANTIZATION,
        "calibration_sample": sample,
    }
    kernels["class"] = "avx2"  # NNCF's overflow fix on every layer where the int8 kernels saturate
    assert runtime_identity("openvino-int8")["quantization"] == {**QUANTIZATION, "overflow_fix": "enable"}
    del versions["nncf"]
    assert runtime_identity("openvino-int8")["nncf"] is None


@pytest.mark.parametrize("name", ["amx", "avx512-vnni", "avx-vnni", "avx512", "avx2", "neon-dot", "neon", "baseline"])
def test_the_int8_recipes_change_only_where_the_cpu_s_kernels_saturate(name):
    from harness.runtimes import onnx_backend, openvino_backend

    # AVX2 and AVX512 without VNNI sum u8 x s8 pairs into saturating 16-bit integers (vpmaddubsw): ONNX Runtime's
    # quantization guide and NNCF's OverflowFix name exactly these
    saturates = name in ("avx512", "avx2")
    assert onnx_backend.quantization(name) == {
        **onnx_backend.QUANTIZATION,
        **({"reduce_range": True} if saturates else {}),
    }
    assert openvino_backend.quantization(name) == {
        **openvino_backend.QUANTIZATION,
        **({"overflow_fix": "enable"} if saturates else {}),
    }


@pytest.fixture
def kernels(monkeypatch):
    import harness.host
    from harness.runtimes import onnx_backend, openvino_backend

    current = {"class": "avx2"}
    for module in (harness.host, onnx_backend, openvino_backend):
        monkeypatch.setattr(module, "local_kernel_class", lambda: current["class"])
    return current


@pytest.mark.parametrize(
    "backend, by_cpu",
    [("torch", False), ("onnx", False), ("onnx-int8", True), ("openvino", True), ("openvino-int8", True)],
)
def test_the_cpu_kernel_class_keys_the_backends_whose_vectors_it_changes(
    tmp_path, versions, model, kernels, backend, by_cpu
):
    folder, loads = model
    config = _config(tmp_path, folder, backend)
    dense._model_or_lazy(config, str(folder))
    kernels["class"] = "avx512-vnni"
    again = dense._model_or_lazy(config, str(folder))
    assert isinstance(again, FakeEncoder if by_cpu else LazyEncoder)
    assert len(loads) == (2 if by_cpu else 1)


def test_another_calibration_sample_is_another_model(tmp_path, versions, model, kernels):
    from dataclasses import replace

    from harness.runtimes.calibration import Calibration

    folder, loads = model
    sample = Calibration(("a", "b"), "c" * 64, 2, 0)
    config = replace(_config(tmp_path, folder, "openvino-int8"), calibration=sample)
    dense._model_or_lazy(config, str(folder))
    assert isinstance(dense._model_or_lazy(config, str(folder)), LazyEncoder)
    for other in (
        Calibration(("a", "x"), "c" * 64, 2, 0),
        Calibration(("a", "b"), "d" * 64, 2, 0),
        Calibration(("a", "b"), "c" * 64, 3, 0),
        Calibration(("a", "b"), "c" * 64, 2, 1),
    ):
        assert isinstance(dense._model_or_lazy(replace(config, calibration=other), str(folder)), FakeEncoder)
    assert len(loads) == 5


@pytest.mark.parametrize(
    "change",
    [
        {"max_seq_length": 128},
        {"normalize": False},
        {"query_prefix": "q: "},
        {"doc_prefix": "p: "},
        {"precision": "bf16"},
    ],
)
def test_each_decisive_encoder_setting_is_another_model(tmp_path, versions, model, change):
    folder, loads = model
    config = _config(tmp_path, folder, "torch")
    dense._model_or_lazy(config, str(folder))
    other = EvaluateConfig(
        dataset_path=tmp_path, model=str(folder), encoder=EncoderSpec(**change), cache_dir=tmp_path / "cache"
    )
    assert isinstance(dense._model_or_lazy(other, str(folder)), FakeEncoder)
    assert isinstance(dense._model_or_lazy(config, str(folder)), LazyEncoder)


def test_the_remembered_model_brings_its_dimension_and_device_and_loads_on_demand(tmp_path, versions, model):
    folder, loads = model
    config = _config(tmp_path, folder, "torch")
    dense._model_or_lazy(config, str(folder))
    lazy = dense._model_or_lazy(config, str(folder))
    assert isinstance(lazy, LazyEncoder)
    assert lazy.dimension == 4 and lazy.device == "cpu" and lazy.fingerprint()["tag"] == 1
    assert len(loads) == 1


def test_without_the_cache_or_a_fingerprint_nothing_is_remembered(tmp_path, versions, model, monkeypatch):
    from dataclasses import replace

    folder, loads = model
    config = replace(_config(tmp_path, folder, "torch"), cache=False)
    dense._model_or_lazy(config, str(folder))
    assert isinstance(dense._model_or_lazy(config, str(folder)), FakeEncoder)
    monkeypatch.setattr(FakeEncoder, "fingerprint", lambda self: None)
    config = _config(tmp_path, folder, "torch")
    dense._model_or_lazy(config, str(folder))
    assert isinstance(dense._model_or_lazy(config, str(folder)), FakeEncoder)
    assert len(loads) == 4


def test_the_onnx_int8_recipe_is_the_measured_one():
    from harness.runtimes.onnx_backend import QUANTIZATION

    # BENCHMARKS.md / the module's comment: signed per-channel int8 weights on MatMul only
    assert QUANTIZATION == {"weight_type": "QInt8", "per_channel": True, "op_types_to_quantize": ["MatMul"]}


def test_a_remembered_model_loads_the_real_one_when_asked(tmp_path, versions, model):
    folder, loads = model
    config = _config(tmp_path, folder, "torch")
    dense._model_or_lazy(config, str(folder))
    lazy = dense._model_or_lazy(config, str(folder))
    assert not lazy.loaded
    real = lazy._real()
    assert isinstance(real, FakeEncoder) and real.tag == 2 and loads == ["torch", "torch"]


# /proc/cpuinfo flags of real CPUs (the ones `harness.host.KERNEL_FLAGS` keeps) and the int8 kernels each gets,
# by the instruction sets' documentation: AMX tiles, VNNI dot products (AVX512 or the VEX-coded AVX-VNNI of
# Alder Lake), AVX512BW's and AVX2's saturating vpmaddubsw, ARM's SVE, NEON with and without dot products.
CPUS = [
    ("Sapphire Rapids", "avx avx2 fma f16c avx512f avx512bw avx512_vnni avx512_bf16 avx_vnni amx_tile amx_int8 amx_bf16",
     "amx", True, False),
    ("Zen 4 (host D)", "avx avx2 fma f16c avx512f avx512bw avx512_vnni avx512_bf16", "avx512-vnni", True, False),
    ("Alder Lake", "avx avx2 fma f16c avx_vnni", "avx-vnni", True, False),
    ("Skylake-SP", "avx avx2 fma f16c avx512f avx512bw", "avx512", False, True),
    ("Zen 1 (host B)", "avx avx2 fma f16c", "avx2", False, True),
    ("Graviton 3", "asimd asimddp sve i8mm bf16", "sve", None, False),
    ("Graviton 2", "asimd asimddp", "neon-dot", None, False),
    ("Cortex-A72", "asimd", "neon", None, False),
    ("an old x86", "avx", "baseline", False, False),
]  # fmt: skip


@pytest.mark.parametrize(("cpu", "flags", "kernel", "fast", "saturates"), CPUS, ids=[cpu for cpu, *_ in CPUS])
def test_each_cpu_s_kernel_class_and_what_its_int8_kernels_do(monkeypatch, cpu, flags, kernel, fast, saturates):
    import harness.host

    machine = "aarch64" if "asimd" in flags else "x86_64"
    monkeypatch.setattr(harness.host, "_cpuinfo", lambda: (cpu, tuple(flags.split())))
    monkeypatch.setattr(harness.host.platform, "machine", lambda: machine)
    assert harness.host.kernel_class(flags.split()) == kernel == harness.host.local_kernel_class()
    assert harness.host.int8_fast_here() is fast  # None: not x86, where the answer is not known
    assert harness.host.int8_saturates() is saturates and harness.host.int8_saturates(kernel) is saturates


@pytest.mark.parametrize(
    ("machine", "known"),
    [("x86_64", True), ("AMD64", True), ("i686", True), ("x86", True), ("arm64", False), ("riscv64", False)],
)  # how Linux, Windows (AMD64) and 32-bit systems name an x86 CPU in `platform.machine()`
def test_int8_speed_is_judged_on_every_x86_spelling_and_only_there(monkeypatch, machine, known):
    import harness.host

    monkeypatch.setattr(harness.host, "_cpuinfo", lambda: ("cpu", ("avx2", "avx512_vnni")))
    monkeypatch.setattr(harness.host.platform, "machine", lambda: machine)
    assert harness.host.int8_fast_here() is (True if known else None)
