"""Ray actors scheduled on GPUs: a local cluster that declares 2 logical GPUs on this CPU machine.

Ray assigns each actor its GPU (CUDA_VISIBLE_DEVICES, `ray.get_gpu_ids()`); the actor checks its device and
precision itself and encodes on ``cuda:0`` in its own view when torch sees a GPU, and falls back to the CPU
here, where the GPUs are logical only (the hashing stand-in encoder ignores the device anyway). The last
tests run a second cluster whose workers' torch is told it sees one GPU (a worker setup hook), with a fake
model loader: what an actor on a real GPU would check and record.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from dataclasses import replace

import pytest

from harness.engines.ray_engine import RaySpec, start_local_cluster
from harness.errors import HarnessError
from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def gpu_cluster():
    if ray.is_initialized():
        ray.shutdown()
    start_local_cluster(ray, 2, num_gpus=2, include_dashboard=False, log_to_driver=False)  # as --ray-local does
    yield
    ray.shutdown()


def _folder(tmp_path):
    folder = tmp_path / "data"
    (folder / "qrels").mkdir(parents=True)
    with open(folder / "corpus.jsonl", "w") as handle:
        handle.writelines(json.dumps({"_id": f"d{i}", "text": f"w{i % 7} w{i % 5} doc{i}"}) + "\n" for i in range(40))
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": f"doc{i * 3}"}) + "\n" for i in range(5))
    )
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i * 3}\t1\n" for i in range(5))
    )
    return folder


def test_actors_ask_for_gpus_and_each_gets_its_own(gpu_cluster, tmp_path, caplog):
    folder = _folder(tmp_path)
    base = EvaluateConfig(
        dataset_path=folder,
        model="hash:64",
        output_dir=None,
        progress=False,
        cache_dir=tmp_path / "cache",
        k_values=(1, 10),
    )
    with caplog.at_level(logging.INFO, logger="harness"):
        on_gpus = evaluate_dataset(replace(base, engine="ray", ray=RaySpec(shards=4, gpus_per_worker=1)))
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("Ray engine: "))
    assert line.startswith("Ray engine: 2 workers")
    assert sorted(re.findall(r"gpus \[(\d+)\]", line)) == ["0", "1"]  # one logical GPU each
    local = evaluate_dataset(replace(base, cache_dir=tmp_path / "local-cache"))
    assert on_gpus.result.metrics == local.result.metrics
    # The result records each actor's own device (here the CPU fallback), not the driver's option.
    recorded = on_gpus.result.config["device"]
    assert sorted(re.findall(r"gpus \[(\d+)\] (\w+)", recorded)) == [("0", "cpu"), ("1", "cpu")], recorded


def test_fractional_gpus_pack_workers(gpu_cluster, tmp_path, caplog):
    folder = _folder(tmp_path)
    config = EvaluateConfig(
        dataset_path=folder,
        model="hash:64",
        output_dir=None,
        progress=False,
        cache_dir=tmp_path / "cache",
        k_values=(1, 10),
        engine="ray",
        ray=RaySpec(shards=4, gpus_per_worker=0.5),
    )
    with caplog.at_level(logging.INFO, logger="harness"):
        evaluate_dataset(config)
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("Ray engine: "))
    assert line.startswith("Ray engine: 2 workers")  # 4 fit on the GPUs, the 2 CPUs cap them at 2


def test_fp16_from_a_cpu_driver_is_checked_on_the_actors_not_refused_on_the_driver(gpu_cluster, tiny_beir, tmp_path):
    """The driver has no GPU and fp16 is not refused there; each actor checks where the model runs: these
    logical-GPU actors' torch sees no CUDA, so it is they that refuse, naming themselves."""
    config = EvaluateConfig(
        dataset_path=tiny_beir,
        output_dir=None,
        progress=False,
        cache_dir=tmp_path / "cache",
        engine="ray",
        ray=RaySpec(gpus_per_worker=1),
        device="cpu",
    )
    config = replace(config, encoder=replace(config.encoder, precision="fp16"))
    with pytest.raises(
        HarnessError,
        match=r"a Ray worker could not start: on Ray worker .* \(Ray GPU\(s\) \[\d\], "
        r"cpu\): precision fp16 on a CPU is not supported",
    ):
        evaluate_dataset(config)


def test_several_gpus_per_actor_are_refused_with_what_to_ask_instead():
    with pytest.raises(HarnessError, match=r"ray_gpus_per_worker 2: an actor encodes on one GPU.*use 1"):
        RaySpec(gpus_per_worker=2).check()
    RaySpec(gpus_per_worker=1).check()
    RaySpec(gpus_per_worker=0.25).check()


def _sees_one_gpu():
    """Ray worker setup hook: this worker's torch reports one CUDA device (none is there)."""
    import torch

    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 1


class OnDevice:
    """The hashing stand-in as a model loaded on `device` in `precision` (a fake model loader's product)."""

    def __init__(self, device: str, precision: str):
        from harness.retrieval.encode import load_encoder

        self.inner, self.device, self.precision = load_encoder("hash:16"), device, precision
        self.name, self.normalize, self.max_seq_length, self.dimension = "fake", True, None, 16

    def fingerprint(self):
        return {"name": "fake", "precision": self.precision}

    def encode_docs(self, texts):
        return self.inner.encode_docs(texts)


def load_fp16(device: str) -> OnDevice:
    return OnDevice(device, "fp16")


@pytest.fixture(scope="module")
def fake_gpu_cluster():
    if ray.is_initialized():
        ray.shutdown()
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this test module
    start_local_cluster(
        ray,
        2,
        num_gpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"worker_process_setup_hook": _sees_one_gpu},
    )  # as --ray-local does
    yield
    ray.shutdown()
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def test_each_actor_checks_fp16_on_its_gpu_and_records_the_device_it_used(fake_gpu_cluster, tmp_path, caplog):
    from harness.engines.ray_engine import encode_corpus_ray
    from harness.engines.shards import EncodeJob
    from harness.io.cache import embedding_entry
    from harness.records import Doc

    docs = [Doc(f"d{i}", "", f"w{i % 7} w{i % 5} doc{i}") for i in range(40)]
    entry = embedding_entry(tmp_path, {"kind": "corpus"})
    entry.start(10)
    job = EncodeJob(load_fp16, {"name": "fake", "precision": "fp16"}, entry, chunk_size=10, batch_size=4)
    with caplog.at_level(logging.INFO, logger="harness"):
        chunks = list(encode_corpus_ray(job, iter(docs), RaySpec(gpus_per_worker=1), progress=False))
    assert [i for ids, _, _ in chunks for i in ids] == [doc.doc_id for doc in docs]
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("Ray engine: "))
    # Each actor: its own Ray GPU, encoding on cuda:0 of its own view (not the driver's cpu).
    assert sorted(re.findall(r"gpus \[(\d+)\] ([^,\s]+)", line)) == [("0", "cuda:0"), ("1", "cuda:0")]
