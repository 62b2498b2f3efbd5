"""--device and --precision: resolution against what torch sees (faked), refusals before anything
loads, precision in the cache key and the configuration."""

from __future__ import annotations

import contextlib
import json
from types import SimpleNamespace

import numpy as np
import pytest
from cli_runner import invoke

import harness.pipeline.evaluate
import harness.retrieval.encode
from harness.retrieval.devices import DeviceError, DeviceSpec


def fake_torch(cuda: int = 0, mps: bool = False, cuda_build: bool = True, bf16: tuple[int, ...] | None = None):
    """A stand-in for torch's device queries: `cuda` GPUs (those in `bf16` with native bf16; default all), MPS
    or not."""
    current = [0]

    @contextlib.contextmanager
    def device(index):
        before, current[0] = current[0], index
        yield
        current[0] = before

    def is_bf16_supported(including_emulation=True):
        return including_emulation or bf16 is None or current[0] in bf16

    return SimpleNamespace(
        cuda=SimpleNamespace(
            is_available=lambda: cuda > 0, device_count=lambda: cuda, device=device, is_bf16_supported=is_bf16_supported
        ),
        backends=SimpleNamespace(mps=SimpleNamespace(is_available=lambda: mps)),
        version=SimpleNamespace(cuda="12.4" if cuda_build else None),
    )


@pytest.mark.parametrize(
    ("option", "torch", "expected"),
    [
        ("auto", fake_torch(), ["cpu"]),
        ("auto", fake_torch(cuda=2), ["cuda:0"]),
        ("auto", fake_torch(mps=True), ["mps"]),
        ("auto", fake_torch(cuda=1, mps=True), ["cuda:0"]),
        ("cuda", fake_torch(cuda=2), ["cuda:0"]),
        ("cuda:1", fake_torch(cuda=2), ["cuda:1"]),
        ("cuda:all", fake_torch(cuda=3), ["cuda:0", "cuda:1", "cuda:2"]),
        ("cuda:0,cuda:1", fake_torch(cuda=2), ["cuda:0", "cuda:1"]),
        ("cpu,cpu", fake_torch(), ["cpu", "cpu"]),
        ("mps", fake_torch(mps=True), ["mps"]),
    ],
)
def test_devices_resolve_against_what_torch_sees(option, torch, expected):
    assert DeviceSpec(option).resolve(torch) == expected


@pytest.mark.parametrize(
    ("option", "torch", "message"),
    [
        (
            "cuda",
            fake_torch(cuda_build=False),
            "torch sees no CUDA device (this torch is a CPU-only build); devices here: cpu",
        ),
        ("cuda:7", fake_torch(cuda=2), "device cuda:7: torch sees 2 CUDA device(s); devices here: cuda:0, cuda:1, cpu"),
        ("mps", fake_torch(), "device mps: torch sees no MPS"),
        ("cuda:all", fake_torch(), "device cuda:all: torch sees no CUDA device"),
        ("gpu", fake_torch(), "device 'gpu' in 'gpu' is not one of auto, cpu, cuda"),
        ("cuda:0,,cuda:1", fake_torch(cuda=2), "device '' in 'cuda:0,,cuda:1' is not one of"),
        ("cuda:x", fake_torch(cuda=2), "device 'cuda:x'"),
        ("auto,cpu", fake_torch(), "auto and cuda:all stand alone"),
    ],
)
def test_a_device_that_does_not_exist_is_one_line(option, torch, message):
    with pytest.raises(DeviceError) as error:
        DeviceSpec(option).resolve(torch)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_fp16_on_a_cpu_is_refused_and_bf16_allowed():
    with pytest.raises(DeviceError, match="precision fp16 on a CPU is not supported"):
        DeviceSpec("cpu", "fp16").resolve(fake_torch())
    assert DeviceSpec("cpu", "bf16").resolve(fake_torch()) == ["cpu"]
    assert DeviceSpec("cuda", "fp16").resolve(fake_torch(cuda=1)) == ["cuda:0"]


def test_bf16_on_a_gpu_without_native_bf16_is_refused_naming_the_gpu():
    # cuda:1 lacks bf16 (a V100 next to an A100); emulated support, which torch also reports, does not count.
    torch = fake_torch(cuda=2, bf16=(0,))
    assert DeviceSpec("cuda:0", "bf16").resolve(torch) == ["cuda:0"]
    with pytest.raises(DeviceError, match=r"^precision bf16 on cuda:1: this GPU has no native bf16 .*use fp16 or fp32"):
        DeviceSpec("cuda:0,cuda:1", "bf16").resolve(torch)
    assert DeviceSpec("cuda:1", "fp16").resolve(torch) == ["cuda:1"]


def test_bf16_without_support_is_refused_before_the_model_loads(monkeypatch):
    import torch

    from harness.retrieval.encode import load_encoder

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "device", lambda index: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    monkeypatch.setattr(
        "sentence_transformers.SentenceTransformer",
        lambda *a, **k: pytest.fail("the model was loaded before bf16 was checked"),
    )
    with pytest.raises(DeviceError, match="precision bf16 on cuda:0: this GPU has no native bf16"):
        load_encoder(device="cuda:0", precision="bf16")


def test_the_environment_variable_is_the_default(monkeypatch):
    monkeypatch.setenv("BEIR_HARNESS_DEVICE", "cuda:1")
    assert DeviceSpec().resolve(fake_torch(cuda=2)) == ["cuda:1"]
    assert DeviceSpec("cpu").resolve(fake_torch(cuda=2)) == ["cpu"]  # the option wins


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--device", "cuda:3"], "device cuda:3: torch sees no CUDA device"),
        (["--device", "cuda:0;cuda:1"], "is not one of auto, cpu, cuda"),
        (["--device", "cuda", "--backend", "onnx"], "backend onnx runs on the CPU in fp32 only"),
        (["--precision", "bf16", "--backend", "onnx-int8"], "backend onnx-int8 runs on the CPU in fp32 only"),
        (["--precision", "fp16", "--device", "cpu"], "precision fp16 on a CPU is not supported"),
    ],
)
def test_device_errors_come_before_any_model_loads_or_file_is_read(tiny_beir, tmp_path, monkeypatch, options, message):
    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded")

    def no_dataset(*args, **kwargs):
        raise AssertionError("the dataset was read")

    monkeypatch.setattr(harness.retrieval.encode, "load_encoder", no_model)
    monkeypatch.setattr(harness.pipeline.evaluate, "resolve_dataset", no_dataset)
    result = invoke(["-q", "evaluate", str(tiny_beir), "--output-dir", str(tmp_path / "r"), *options])
    assert result.exit_code == 1, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_the_device_is_recorded_and_precision_is_part_of_the_configuration(
    tiny_beir, tmp_path, monkeypatch, fake_encoder
):
    monkeypatch.setattr(harness.retrieval.encode, "load_encoder", lambda *args, **kwargs: fake_encoder)
    out = tmp_path / "r"
    fp32 = invoke(
        ["-q", "evaluate", str(tiny_beir), "--output-dir", str(out), "--device", "cpu", "--json", "--no-cache"]
    )
    bf16 = invoke(
        [
            "-q",
            "evaluate",
            str(tiny_beir),
            "--output-dir",
            str(out),
            "--device",
            "cpu",
            "--precision",
            "bf16",
            "--json",
            "--no-cache",
        ],
    )
    assert fp32.exit_code == 0 and bf16.exit_code == 0, bf16.stderr
    a, b = json.loads(fp32.stdout), json.loads(bf16.stdout)
    assert a["config"]["device"] == "cpu" and a["variant"] == ""
    assert b["variant"].startswith("bf16-") and b["label"].endswith("[bf16]") and a["config_hash"] != b["config_hash"]
    assert len(list(out.glob("*/*/*.json"))) == 2


def test_precision_is_part_of_the_embedding_cache_key_and_vectors_stay_float32(default_encoder):
    from harness.retrieval.encode import load_encoder

    bf16 = load_encoder(precision="bf16")
    assert bf16.fingerprint() != default_encoder.fingerprint()
    assert bf16.fingerprint()["precision"] == "bf16" and "precision" not in default_encoder.fingerprint()
    texts = ["noise cancelling headphones for flights", "a budget laptop"]
    vectors = bf16.encode_docs(texts)
    assert vectors.dtype == np.float32
    assert (vectors * default_encoder.encode_docs(texts)).sum(axis=1).min() > 0.99


def _synthetic(folder, n_docs: int = 400):
    (folder / "qrels").mkdir(parents=True)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda".split()
    with open(folder / "corpus.jsonl", "w") as handle:
        for i in range(n_docs):
            text = " ".join(words[(i * k) % len(words)] for k in range(1, 2 + i % 9)) + f" doc{i}"
            handle.write(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n")
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": f"doc{i * 7} alpha"}) + "\n" for i in range(20))
    )
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i * 7}\t1\n" for i in range(20))
    )
    return folder


def _entry_vectors(cache):
    from harness.io.cache import embedding_entry

    for key_file in cache.glob("embeddings/*/key.json"):
        inputs = json.loads(key_file.read_text())["inputs"]
        if inputs["kind"] == "corpus":
            chunks = list(embedding_entry(cache, inputs).chunks())
            return [i for ids, _ in chunks for i in ids], np.concatenate([v for _, v in chunks])
    raise AssertionError("no corpus entry")


def test_two_cpu_workers_give_the_one_process_result(tmp_path):
    folder = _synthetic(tmp_path / "synthetic")
    runs = {}
    for devices in ("cpu", "cpu,cpu"):
        result = invoke(
            [
                "-v",
                "evaluate",
                str(folder),
                "--model",
                "hash:64",
                "--device",
                devices,
                "--chunk-size",
                "50",
                "--cache-dir",
                str(tmp_path / devices),
                "--output-dir",
                str(tmp_path / f"out-{devices}"),
                "--json",
            ],
        )
        assert result.exit_code == 0, result.stderr
        runs[devices] = json.loads(result.stdout)
    assert "2 devices: 8 chunk(s) encoded" in result.stderr
    one, two = runs["cpu"], runs["cpu,cpu"]
    assert one["metrics"] == two["metrics"] and one["per_query"] == two["per_query"]
    assert two["config"]["device"] == "cpu,cpu" and one["config_hash"] == two["config_hash"]
    ids_one, vectors_one = _entry_vectors(tmp_path / "cpu")
    ids_two, vectors_two = _entry_vectors(tmp_path / "cpu,cpu")
    assert ids_one == ids_two
    np.testing.assert_array_equal(vectors_one, vectors_two)


def test_two_cpu_workers_with_the_real_model_match_one_to_1e5(tiny_beir, tmp_path):
    runs = {}
    for devices in ("cpu", "cpu,cpu"):
        result = invoke(
            [
                "-q",
                "evaluate",
                str(tiny_beir),
                "--device",
                devices,
                "--chunk-size",
                "2",
                "--cache-dir",
                str(tmp_path / devices),
                "--output-dir",
                str(tmp_path / f"out-{devices}"),
                "--json",
            ],
        )
        assert result.exit_code == 0, result.stderr
        runs[devices] = json.loads(result.stdout)
    assert runs["cpu"]["metrics"] == runs["cpu,cpu"]["metrics"]
    ids_one, vectors_one = _entry_vectors(tmp_path / "cpu")
    ids_two, vectors_two = _entry_vectors(tmp_path / "cpu,cpu")
    assert ids_one == ids_two
    np.testing.assert_allclose(vectors_one, vectors_two, atol=1e-5)


def test_a_worker_killed_mid_run_is_named_and_the_rerun_resumes(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import threading
    import time

    folder = _synthetic(tmp_path / "synthetic", 300)
    cache = tmp_path / "cache"
    command = [
        sys.executable,
        "-m",
        "harness",
        "-q",
        "evaluate",
        str(folder),
        "--model",
        "hash:64:0.2",
        "--device",
        "cpu,cpu",
        "--chunk-size",
        "50",
        "--batch-size",
        "25",
        "--cache-dir",
        str(cache),
        "--output-dir",
        str(tmp_path / "out"),
    ]
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)

    def kill_a_worker():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not list(cache.rglob("chunk-*.ids.json")):
            time.sleep(0.05)
        children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        workers = [pid for pid in children if "spawn_main" in open(f"/proc/{pid}/cmdline").read()]
        os.kill(int(workers[0]), signal.SIGKILL)

    killer = threading.Thread(target=kill_a_worker)
    killer.start()
    _, stderr = proc.communicate(timeout=120)
    killer.join()
    assert proc.returncode == 1 and "failed: a worker process died" in stderr and "rerun to resume" in stderr
    assert not (tmp_path / "out" / "synthetic").exists()
    rerun = subprocess.run(
        [part if part != "-q" else "-v" for part in command], capture_output=True, text=True, timeout=120
    )
    assert rerun.returncode == 0, rerun.stderr
    assert "from the cache" in rerun.stderr


def test_auto_is_resolved_only_when_a_model_loads(tiny_beir, tmp_path):
    """A warm run (every vector cached) loads no model, so `--device auto` must not import torch either."""
    import subprocess
    import sys

    cold = invoke(
        [
            "-q",
            "evaluate",
            str(tiny_beir),
            "--cache-dir",
            str(tmp_path / "c"),
            "--output-dir",
            str(tmp_path / "r"),
            "--json",
        ],
    )
    assert cold.exit_code == 0, cold.stderr
    assert json.loads(cold.stdout)["config"]["device"] == "cpu"  # resolved when the model loaded
    script = (
        "import json, sys\nfrom harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset\n"
        f"o = evaluate_dataset(EvaluateConfig({str(tiny_beir)!r}, cache_dir={str(tmp_path / 'c')!r}, "
        "output_dir=None, progress=False))\n"
        "print(json.dumps([o.result.config['embedding_cache'], o.result.config['device'], 'torch' in sys.modules]))"
    )
    warm = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert warm.returncode == 0, warm.stderr
    assert json.loads(warm.stdout.splitlines()[-1]) == ["hit", "cpu", False]  # the device the vectors came from
