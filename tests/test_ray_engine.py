"""The Ray engine: same results as the local engine, resumable, clear failures (on a local 2-CPU cluster)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from cli_runner import invoke

from harness.engines.ray_engine import LOCAL_CLUSTER_ENV, RaySpec, ShardEncoder, connect, encode_corpus_ray, shard_size
from harness.engines.shards import EncodeJob
from harness.errors import HarnessError, MissingDependencyError
from harness.io.cache import embedding_entry
from harness.io.formats import iter_corpus
from harness.io.lines import content_digest
from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset
from harness.retrieval.encode import load_encoder

ray = pytest.importorskip("ray")

# What a worker runs must be importable there: harness's own functions, not this test module's.
_hash_loader = partial(load_encoder, "hash:64")
LOOPBACK_PROXY = LOCAL_CLUSTER_ENV["http_proxy"]


@pytest.fixture(scope="module")
def cluster():
    """One local cluster for the module (the engine joins a running session instead of starting one),
    started as ``--ray-local 2`` starts one: on 127.0.0.1, no usage statistics, no cloud probes."""
    started = connect(RaySpec(local_cpus=2))
    yield
    if started:
        ray.shutdown()


def test_a_local_cluster_runs_its_workers_at_the_driver_s_priority(cluster):
    # Ray's default is nice 15: beside 8 busy processes its encoders would get about 1 % of a core each.
    import os

    def niceness():
        return os.nice(0)

    assert ray.get(ray.remote(niceness).remote()) == os.nice(0)


def _corpus(folder: Path, n_docs: int) -> Path:
    """A BEIR folder with `n_docs` documents of varied length and 6 graded queries."""
    folder.mkdir()
    words = "apple banana cherry date elder fig grape honeydew kiwi lemon mango nectarine olive pear".split()
    with open(folder / "corpus.jsonl", "w") as handle:
        for i in range(n_docs):
            text = " ".join(words[(i * 7 + j) % len(words)] for j in range(3 + i % 11))
            handle.write(json.dumps({"_id": f"d{i}", "title": f"T{i % 5}", "text": text}) + "\n")
    with open(folder / "queries.jsonl", "w") as handle:
        for q in range(6):
            handle.write(json.dumps({"_id": f"q{q}", "text": " ".join(words[q : q + 3])}) + "\n")
    (folder / "qrels").mkdir()
    lines = ["query-id\tcorpus-id\tscore"] + [
        f"q{q}\td{(q * 5 + j) % n_docs}\t{1 + j % 2}" for q in range(6) for j in range(3)
    ]
    (folder / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")
    return folder


def _config(folder: Path, tmp_path: Path, **changes) -> EvaluateConfig:
    base = EvaluateConfig(
        dataset_path=folder,
        model="hash:64",
        output_dir=tmp_path / "results",
        progress=False,
        cache_dir=tmp_path / "cache",
        k_values=(1, 3, 10),
    )
    return replace(base, **changes)


def _vectors(cache: Path) -> dict[str, np.ndarray]:
    """doc_id → vector over every complete corpus entry under `cache`."""
    vectors = {}
    for folder in (cache / "embeddings").iterdir():
        key = json.loads((folder / "key.json").read_text())
        if key["inputs"]["kind"] != "corpus":
            continue
        entry = embedding_entry(cache, key["inputs"])
        for ids, chunk in entry.chunks():
            vectors.update(zip(ids, chunk))
    return vectors


def test_ray_engine_equals_the_local_engine(cluster, tmp_path):
    folder = _corpus(tmp_path / "data", 37)
    local = evaluate_dataset(_config(folder, tmp_path / "local"))
    distributed = evaluate_dataset(_config(folder, tmp_path / "ray", engine="ray", ray=RaySpec(shards=5)))
    assert distributed.result.metrics == local.result.metrics
    assert distributed.result.per_query == local.result.per_query
    assert distributed.run == local.run
    assert distributed.result.config["engine"] == "ray" and distributed.result.config["shard_size"] == 8
    assert distributed.result.config_hash == local.result.config_hash  # the engine does not change the numbers
    local_vectors, ray_vectors = _vectors(tmp_path / "local" / "cache"), _vectors(tmp_path / "ray" / "cache")
    assert local_vectors.keys() == ray_vectors.keys() and len(ray_vectors) == 37
    for doc_id, vector in local_vectors.items():
        np.testing.assert_allclose(ray_vectors[doc_id], vector, atol=1e-5)
    chunks = sorted(
        p.name
        for p in next((tmp_path / "ray" / "cache" / "embeddings").glob("*/chunk-00004.keys.npy")).parent.glob(
            "chunk-*.keys.npy"  # each shard's texts (their vectors: in the store by text)
        )
    )
    assert len(chunks) == 5  # 37 documents in shards of 8


def test_the_local_cluster_turns_probes_off_for_itself_only(cluster):
    getenv = ray.remote(os.getenv)  # os.getenv is importable on a worker
    user_proxy = os.environ.get("http_proxy") or os.environ.get("HTTP_PROXY") or ""
    assert ray.get(getenv.remote("RAY_USAGE_STATS_ENABLED")) == "0"
    assert ray.get(getenv.remote("http_proxy")) == user_proxy  # workers get the user's proxy back
    assert ray.get_runtime_context().get_node_id() and ray.nodes()[0]["NodeManagerAddress"] == "127.0.0.1"
    # The driver's environment is as it was before the cluster started.
    assert (
        os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER") is None and os.environ.get("http_proxy") != LOOPBACK_PROXY
    )


def test_a_ray_entry_is_a_cache_hit_for_the_local_engine(cluster, tmp_path):
    folder = _corpus(tmp_path / "data", 12)
    first = evaluate_dataset(_config(folder, tmp_path, engine="ray", ray=RaySpec(shards=3)))
    second = evaluate_dataset(_config(folder, tmp_path))
    assert second.result.config["embedding_cache"] == "hit"
    assert second.result.metrics == first.result.metrics


def test_the_real_model_on_ray_matches_local_to_1e5(cluster, tmp_path, tiny_beir):
    local = evaluate_dataset(_config(tiny_beir, tmp_path / "local", model="all-MiniLM-L6-v2"))
    distributed = evaluate_dataset(
        _config(tiny_beir, tmp_path / "ray", model="all-MiniLM-L6-v2", engine="ray", ray=RaySpec(shards=2))
    )
    assert distributed.result.metrics == local.result.metrics
    local_vectors, ray_vectors = _vectors(tmp_path / "local" / "cache"), _vectors(tmp_path / "ray" / "cache")
    for doc_id, vector in local_vectors.items():
        np.testing.assert_allclose(ray_vectors[doc_id], vector, atol=1e-5)


def test_a_failing_shard_is_named_and_the_rerun_encodes_only_what_is_missing(cluster, tmp_path):
    folder = _corpus(tmp_path / "data", 20)
    config = _config(folder, tmp_path, engine="ray", ray=RaySpec(shards=4))
    local = evaluate_dataset(_config(folder, tmp_path / "local"))
    # Shard 2's chunk cannot be written: a directory squats on its file name.
    entry_root = _corpus_entry_root(folder, tmp_path / "cache")
    (entry_root / "chunk-00002.keys.npy").mkdir(parents=True)
    with pytest.raises(HarnessError, match=r"shard 2 \(documents 11-15\) failed on a Ray worker") as failure:
        evaluate_dataset(config)
    assert "finished shard(s) are kept" in str(failure.value) and "rerun to resume" in str(failure.value)
    kept = {p.name: p.stat().st_mtime_ns for p in entry_root.glob("chunk-*.ids.json")}
    # Shards 0 and 1 finish before shard 2 fails; shard 3 is kept too when it was handed out before the
    # failure was seen (a race between workers, so not asserted).
    assert {"chunk-00000.ids.json", "chunk-00001.ids.json"} <= set(kept) and "chunk-00002.ids.json" not in kept
    (entry_root / "chunk-00002.keys.npy").rmdir()
    rerun = evaluate_dataset(config)
    assert rerun.result.metrics == local.result.metrics
    assert all((entry_root / name).stat().st_mtime_ns == mtime for name, mtime in kept.items())  # not re-encoded
    assert not list(entry_root.glob("*.tmp*"))


def _corpus_entry_root(folder: Path, cache: Path) -> Path:
    from harness.io.lines import content_sha256
    from harness.pipeline.evaluate import DOC_TEXT_RULE

    inputs = {
        "kind": "corpus",
        "model": load_encoder("hash:64").fingerprint(),
        "text_rule": DOC_TEXT_RULE,
        "dtype": "float32",
        "corpus_sha256": content_sha256(folder / "corpus.jsonl"),
    }
    return embedding_entry(cache, inputs).root


def test_a_worker_killed_mid_shard_loses_no_finished_shard(cluster, tmp_path):
    folder = _corpus(tmp_path / "data", 24)
    entry_root = _corpus_entry_root(folder, tmp_path / "cache")
    slow = _config(folder, tmp_path, model="hash:64:0.6", engine="ray", ray=RaySpec(shards=6))

    def kill_a_worker():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not list(entry_root.glob("chunk-*.ids.json")):
            time.sleep(0.05)
        pids = subprocess.run(["pgrep", "-f", "ShardEncoder"], capture_output=True, text=True).stdout.split()
        if pids:
            os.kill(int(pids[0]), signal.SIGKILL)

    killer = threading.Thread(target=kill_a_worker)
    killer.start()
    with pytest.raises(HarnessError, match=r"shard \d+ \(documents .*\) failed on a Ray worker: the worker died"):
        evaluate_dataset(slow)
    killer.join()
    kept = {p.name: p.stat().st_mtime_ns for p in entry_root.glob("chunk-*.ids.json")}
    assert 1 <= len(kept) < 6
    rerun = evaluate_dataset(replace(slow, model="hash:64"))  # same fingerprint, no delay
    assert rerun.result.metrics == evaluate_dataset(_config(folder, tmp_path / "local")).result.metrics
    assert all((entry_root / name).stat().st_mtime_ns == mtime for name, mtime in kept.items())


def test_workers_that_cannot_see_the_cache_stop_the_run_before_encoding(cluster, tmp_path):
    folder = _corpus(tmp_path / "data", 5)
    entry = embedding_entry(tmp_path / "elsewhere", {"kind": "corpus"})  # never started: not there for workers
    with pytest.raises(HarnessError, match="cannot see the cache entry .* filesystem every Ray node mounts"):
        list(
            encode_corpus_ray(
                EncodeJob(_hash_loader, {"name": "hash:64"}, entry, 2, 32),
                iter_corpus(folder / "corpus.jsonl"),
                RaySpec(),
                progress=False,
            )
        )
    assert not entry.root.exists()


def test_a_worker_with_another_model_is_refused(cluster, tmp_path):
    folder = _corpus(tmp_path / "data", 5)
    entry = embedding_entry(tmp_path / "cache", {"kind": "corpus"})
    entry.start(2)
    with pytest.raises(HarnessError, match="loaded a different model than the driver"):
        list(
            encode_corpus_ray(
                EncodeJob(_hash_loader, {"name": "hash:64", "scheme": "other"}, entry, 2, 32),
                iter_corpus(folder / "corpus.jsonl"),
                RaySpec(),
                progress=False,
            )
        )
    assert not list(entry.root.glob("chunk-*"))


def test_shard_encoder_checks_the_cache_without_ray(tmp_path):
    entry = embedding_entry(tmp_path, {"kind": "corpus"})
    with pytest.raises(HarnessError, match="cannot see the cache entry"):
        ShardEncoder(_hash_loader, entry, {}).ready()


def test_an_unreachable_address_fails_fast_with_advice(monkeypatch):
    import ray

    joins = []
    monkeypatch.setattr(ray, "init", lambda *args, **kwargs: joins.append(kwargs))  # Ray's own retries: ~minutes
    with pytest.raises(HarnessError, match=r"cannot reach the Ray cluster at 127\.0\.0\.1:1 .*ray start --head"):
        connect(RaySpec(address="127.0.0.1:1"))
    assert joins == []  # refused by the probe, before Ray is asked to join
    with pytest.raises(HarnessError, match="expected HOST:PORT"):
        connect(RaySpec(address="somehost:port"))


def test_shard_size_counts_documents(tmp_path):
    folder = _corpus(tmp_path / "data", 37)
    _, n_lines = content_digest(folder / "corpus.jsonl")
    assert shard_size(n_lines, 5) == 8
    assert shard_size(n_lines, 100) == 1


def test_ray_needs_the_cache_and_leaves_bm25_local(tmp_path, tiny_beir):
    with pytest.raises(HarnessError, match="turn the cache on \\(`cache`\\)"):
        evaluate_dataset(_config(tiny_beir, tmp_path, engine="ray", cache=False))
    bm25 = evaluate_dataset(_config(tiny_beir, tmp_path, engine="ray", model="bm25"))  # runs here, no cluster
    assert bm25.result.model == "bm25"
    with pytest.raises(HarnessError, match="not both"):
        evaluate_dataset(_config(tiny_beir, tmp_path, engine="ray", ray=RaySpec(address="auto", local_cpus=2)))


def test_missing_ray_is_one_line(monkeypatch, tmp_path, tiny_beir):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'beir-harness\[ray\]'"):
        connect(RaySpec())
    result = invoke(
        [
            "evaluate",
            str(tiny_beir),
            "--model",
            "hash:64",
            "--engine",
            "ray",
            "--cache-dir",
            str(tmp_path / "c"),
            "--output-dir",
            str(tmp_path / "r"),
        ],
    )
    assert result.exit_code != 0 and "beir-harness[ray]" in result.output
    assert "Traceback" not in result.output


def test_cli_ray_local_and_option_checks(cluster, tmp_path, tiny_beir):
    ok = invoke(
        [
            "-q",
            "evaluate",
            str(tiny_beir),
            "--model",
            "hash:64",
            "--engine",
            "ray",
            "--shards",
            "2",
            "--cache-dir",
            str(tmp_path / "c"),
            "--output-dir",
            str(tmp_path / "r"),
            "--json",
        ],
    )
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["config"]["engine"] == "ray"
    misuse = invoke(["evaluate", str(tiny_beir), "--shards", "4"])
    assert misuse.exit_code == 2 and "need --engine ray" in misuse.output
    no_gpus = invoke(
        [
            "evaluate",
            str(tiny_beir),
            "--model",
            "hash:64",
            "--engine",
            "ray",
            "--ray-gpus-per-worker",
            "1",
            "--cache-dir",
            str(tmp_path / "c4"),
            "--output-dir",
            str(tmp_path / "r4"),
        ],
    )
    assert no_gpus.exit_code == 1 and "asks for GPUs, but the Ray cluster has 0" in no_gpus.stderr
    assert not (tmp_path / "r4").exists()
    local = invoke(
        [
            "-q",
            "evaluate",
            str(tiny_beir),
            "--model",
            "hash:64",
            "--engine",
            "ray",
            "--ray-local",
            "2",
            "--cache-dir",
            str(tmp_path / "c2"),
            "--output-dir",
            str(tmp_path / "r2"),
        ],
    )
    assert local.exit_code == 0, local.output  # joins this test's running session instead of starting one
    unreachable = invoke(
        [
            "evaluate",
            str(tiny_beir),
            "--model",
            "hash:64",
            "--engine",
            "ray",
            "--ray-address",
            "127.0.0.1:1",
            "--cache-dir",
            str(tmp_path / "c3"),
            "--output-dir",
            str(tmp_path / "r3"),
        ],
    )
    assert unreachable.exit_code == 1 and "cannot reach the Ray cluster at 127.0.0.1:1" in unreachable.stderr
    assert "Traceback" not in unreachable.stderr and not (tmp_path / "r3").exists()
    both = invoke(["evaluate", str(tiny_beir), "--engine", "ray", "--ray-address", "auto", "--ray-local", "2"])
    assert both.exit_code == 1 and "not both" in both.stderr
