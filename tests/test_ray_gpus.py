"""Ray actors scheduled on GPUs: a local cluster that declares 2 logical GPUs on this CPU machine.

Ray assigns each actor its GPU (CUDA_VISIBLE_DEVICES, `ray.get_gpu_ids()`); the actor encodes on
``cuda:0`` in its own view when torch sees a GPU, and falls back to the CPU here, where the GPUs
are logical only (the hashing stand-in encoder ignores the device anyway).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import replace

import pytest

from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset
from harness.engines.ray_engine import RaySpec, start_local_cluster

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
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": f"doc{i * 3}"}) + "\n"
                                                  for i in range(5)))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i}\td{i * 3}\t1\n" for i in range(5)))
    return folder


def test_actors_ask_for_gpus_and_each_gets_its_own(gpu_cluster, tmp_path, caplog):
    folder = _folder(tmp_path)
    base = EvaluateConfig(dataset_path=folder, model="hash:64", output_dir=None, progress=False,
                          cache_dir=tmp_path / "cache", k_values=(1, 10))
    with caplog.at_level(logging.INFO, logger="harness"):
        on_gpus = evaluate_dataset(replace(base, engine="ray", ray=RaySpec(shards=4, gpus_per_worker=1)))
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("Ray engine: "))
    assert line.startswith("Ray engine: 2 workers")
    assert sorted(re.findall(r"gpus \[(\d+)\]", line)) == ["0", "1"]  # one logical GPU each
    local = evaluate_dataset(replace(base, cache_dir=tmp_path / "local-cache"))
    assert on_gpus.result.metrics == local.result.metrics


def test_fractional_gpus_pack_workers(gpu_cluster, tmp_path, caplog):
    folder = _folder(tmp_path)
    config = EvaluateConfig(dataset_path=folder, model="hash:64", output_dir=None, progress=False,
                            cache_dir=tmp_path / "cache", k_values=(1, 10), engine="ray",
                            ray=RaySpec(shards=4, gpus_per_worker=0.5))
    with caplog.at_level(logging.INFO, logger="harness"):
        evaluate_dataset(config)
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("Ray engine: "))
    assert line.startswith("Ray engine: 2 workers")  # 4 fit on the GPUs, the 2 CPUs cap them at 2
