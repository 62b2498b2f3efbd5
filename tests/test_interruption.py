"""Kill the real CLI mid-encode (SIGKILL and SIGINT), rerun, and get exactly the uninterrupted result;
two evaluations on the same cache at once; nothing temporary left behind."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

N_DOCS = 600
SLOW_MODEL = "hash:64:0.05"  # 0.05 s per batch: six chunks of two batches ≈ 0.6 s of encoding


@pytest.fixture
def corpus(tmp_path) -> Path:
    folder = tmp_path / "synthetic"
    (folder / "qrels").mkdir(parents=True)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda".split()
    with open(folder / "corpus.jsonl", "w") as handle:
        for i in range(N_DOCS):
            text = " ".join(words[(i * k) % len(words)] for k in range(1, 8)) + f" doc{i}"
            handle.write(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n")
    with open(folder / "queries.jsonl", "w") as handle:
        for i in range(20):
            handle.write(json.dumps({"_id": f"q{i}", "text": f"doc{i * 7} {words[i % len(words)]}"}) + "\n")
    with open(folder / "qrels" / "test.tsv", "w") as handle:
        handle.write("query-id\tcorpus-id\tscore\n")
        handle.writelines(f"q{i}\td{i * 7}\t1\n" for i in range(20))
    return folder


def _command(folder: Path, cache: Path, out: Path, checkpoint: str | None = "0") -> list[str]:
    """The CLI call; interrupted runs and reruns checkpoint after every batch (`--checkpoint-seconds 0`),
    the reference run never does (default 60 s, longer than it takes): results must be identical."""
    return [
        sys.executable,
        "-m",
        "harness",
        "-q",
        "evaluate",
        str(folder),
        "--model",
        SLOW_MODEL,
        "--chunk-size",
        "100",
        "--batch-size",
        "50",
        "--cache-dir",
        str(cache),
        "--output-dir",
        str(out),
        "--k",
        "1,10",
        *(["--checkpoint-seconds", checkpoint] if checkpoint is not None else []),
    ]


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1"}


def _result(out: Path) -> tuple[dict, str]:
    json_path = out / "synthetic" / "hash_64" / "test.json"
    data = json.loads(json_path.read_text())
    return data["metrics"], json_path.with_name("test.run.trec").read_text()


def _corpus_entry(cache: Path) -> tuple[list[str], bytes]:
    """The complete corpus entry's ids and vector bytes, in corpus order."""
    from harness.io.cache import embedding_entry

    for key_file in cache.glob("embeddings/*/key.json"):
        inputs = json.loads(key_file.read_text())["inputs"]
        if inputs["kind"] == "corpus":
            chunks = list(embedding_entry(cache, inputs).chunks())
            return [i for ids, _ in chunks for i in ids], b"".join(v.tobytes() for _, v in chunks)
    raise AssertionError(f"no corpus entry in {cache}")


def _temporary_files(*roots: Path) -> list[Path]:
    return [
        p
        for root in roots
        if root.exists()
        for p in root.rglob("*")
        if p.name.endswith((".tmp", ".part")) or ".extract-" in p.name or ".convert-" in p.name
    ]


@pytest.fixture
def reference(corpus, tmp_path):
    out = tmp_path / "reference-out"
    subprocess.run(
        _command(corpus, tmp_path / "reference-cache", out, checkpoint=None), check=True, env=_env(), timeout=120
    )
    assert not list((tmp_path / "reference-cache").rglob("*.piece-*"))
    return _result(out)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_killed_mid_encode_then_rerun_gives_the_same_result(corpus, tmp_path, reference, sig):
    from conftest import start_paused

    cache, out = tmp_path / "cache", tmp_path / "out"
    # stopped inside the write of the third chunk's ids (two chunks complete, four to come), then signalled there:
    # a state, not a moment, so a busy machine cannot let the run finish first
    cli_args = _command(corpus, cache, out)[3:]
    proc = start_paused(tmp_path / "marker", "write", "chunk-00002.ids.json", 1, cli_args)
    assert len(list(cache.rglob("chunk-0000[01].ids.json"))) == 2
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert not (out / "synthetic").exists()  # no result from the unfinished run
    if sig == signal.SIGINT:
        assert proc.returncode == 130 and "Traceback" not in stderr
        assert stderr.strip().splitlines()[-1].startswith("interrupted: finished work is kept")
    assert _temporary_files(cache, out) == [] or sig == signal.SIGKILL
    rerun = subprocess.run(_command(corpus, cache, out), env=_env(), capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert _result(out) == reference
    assert _temporary_files(cache, out) == []


def test_two_evaluations_on_the_same_cache_at_once(corpus, tmp_path, reference):
    cache = tmp_path / "shared-cache"
    procs = [
        subprocess.Popen(_command(corpus, cache, tmp_path / f"out{i}"), env=_env(), stderr=subprocess.PIPE, text=True)
        for i in range(2)
    ]
    for proc in procs:
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
    assert _result(tmp_path / "out0") == reference == _result(tmp_path / "out1")
    assert _temporary_files(cache) == []
    # And the cache they built together serves a third run.
    third = subprocess.run(
        _command(corpus, cache, tmp_path / "out2"), env=_env(), capture_output=True, text=True, timeout=120
    )
    assert third.returncode == 0 and _result(tmp_path / "out2") == reference


# (name, how the process is stopped there): before the nth call of a function, or inside the nth
# atomic write of a matching file (content written, not yet renamed into place).
KILL_POINTS = {
    "encode, between chunks": ("call", "harness.io.cache:EmbeddingEntry.write_chunk", 2),  # chunk 1 encoded, not stored
    "encode, inside a chunk": (
        "call",
        "harness.retrieval.encode:HashingEncoder.encode_docs",
        4,
    ),  # half of chunk 1 encoded
    "encode, inside a cache write": ("write", "chunk-00002.keys.npy", 1),
    "index build": ("call", "harness.retrieval.index:VectorIndex.build", 1),
    "result write": ("write", "test.json", 1),
    "run-file write": ("write", "test.run.trec", 1),
    # Time-based checkpoints inside a chunk (every batch with --checkpoint-seconds 0):
    "checkpoint, just after a write": (
        "call",
        "harness.retrieval.encode:HashingEncoder.encode_docs",
        2,
    ),  # batch 1's texts stored
    "checkpoint, just before a write": (
        "call",
        "harness.io.cache:EmbeddingEntry.write_piece",
        2,
    ),  # chunk 1's batch 1 not
    "checkpoint, inside a write": ("write", ".vectors.npy", 3),  # a segment by text: chunk 1's checkpoint
}


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_killed_at_each_point_then_rerun_gives_the_same_result(corpus, tmp_path, reference, point, sig):
    from conftest import start_paused

    cache, out = tmp_path / "cache", tmp_path / "out"
    mode, target, nth = KILL_POINTS[point]
    previous = None
    if point in ("result write", "run-file write"):
        # An earlier result is there, marked so that a replacement would show: the interrupted write
        # must leave it whole.
        subprocess.run(_command(corpus, cache, out), check=True, env=_env(), timeout=120)
        result_file = out / "synthetic" / "hash_64" / "test.json"
        result_file.write_text(json.dumps({**json.loads(result_file.read_text()), "earlier": True}))
        previous = {p: p.read_bytes() for p in result_file.parent.iterdir()}
    proc = start_paused(tmp_path / "marker", mode, target, nth, _command(corpus, cache, out)[3:])
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode != 0
    if sig == signal.SIGINT:
        assert proc.returncode == 130 and "Traceback" not in stderr, stderr
        assert stderr.strip().splitlines()[-1].startswith("interrupted: finished work is kept")
        assert _temporary_files(cache, out) == []  # an interrupted write removes its own temporary file
    if previous is None:
        assert not (out / "synthetic").exists()  # no result from the unfinished run
    else:
        # The earlier result is intact, not half-overwritten (the run file may have been replaced by
        # an identical complete one: it is written first).
        assert {p: p.read_bytes() for p in previous} == previous
        assert json.loads(next(p for p in previous if p.name == "test.json").read_text())["earlier"] is True
    rerun = subprocess.run(_command(corpus, cache, out), env=_env(), capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert _result(out) == reference
    # The entry is the uninterrupted run's, bit for bit: same ids, same vectors, in corpus order.
    assert _corpus_entry(cache) == _corpus_entry(tmp_path / "reference-cache")
    assert not list(cache.rglob("*.piece-*"))
    assert _temporary_files(cache, out) == []  # the rerun removed what the killed process left


def test_a_long_chunk_killed_at_60_percent_resumes_from_its_checkpoints(tmp_path):
    """1,000 documents in one chunk (the default chunk size), SIGKILL at 60 %: the rerun reuses the
    checkpointed documents and gives the uninterrupted result."""
    folder = tmp_path / "long"
    (folder / "qrels").mkdir(parents=True)
    with open(folder / "corpus.jsonl", "w") as handle:
        handle.writelines(
            json.dumps({"_id": f"d{i}", "text": f"w{i % 37} w{i % 11} doc{i}"}) + "\n" for i in range(1000)
        )
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": f"doc{i * 9}"}) + "\n" for i in range(10))
    )
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i * 9}\t1\n" for i in range(10))
    )

    def command(cache: Path, out: Path, *extra: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "harness",
            "-v",
            "evaluate",
            str(folder),
            "--model",
            "hash:64:0.02",
            "--batch-size",
            "20",
            "--cache-dir",
            str(cache),
            "--output-dir",
            str(out),
            *extra,
        ]

    subprocess.run(
        command(tmp_path / "ref-cache", tmp_path / "ref"), check=True, env=_env(), capture_output=True, timeout=120
    )
    reference = tmp_path / "ref" / "long" / "hash_64" / "test.json"
    cache, out = tmp_path / "cache", tmp_path / "out"
    proc = subprocess.Popen(
        command(cache, out, "--checkpoint-seconds", "0.2"), env=_env(), stderr=subprocess.PIPE, text=True
    )
    stored = 0
    deadline = time.monotonic() + 60
    while stored < 600 and time.monotonic() < deadline:  # 60 % of the documents are checkpointed
        time.sleep(0.05)
        stored = _stored_texts(cache)
    proc.kill()
    proc.communicate(timeout=30)
    assert stored >= 600 and not (out / "long").exists()
    rerun = subprocess.run(command(cache, out), env=_env(), capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    resumed = re.search(r"(\d+) of the chunk's 1000 documents found in the store by text", rerun.stderr)
    assert resumed and int(resumed[1]) >= 600, rerun.stderr[-2000:]
    ours = json.loads((out / "long" / "hash_64" / "test.json").read_text())
    assert ours["metrics"] == json.loads(reference.read_text())["metrics"]
    assert (out / "long" / "hash_64" / "test.run.trec").read_text() == reference.with_name("test.run.trec").read_text()
    assert not list(cache.rglob("*.piece-*"))  # checkpoints are texts stored, no pieces
    assert _corpus_entry(cache) == _corpus_entry(tmp_path / "ref-cache")


def _stored_texts(cache: Path) -> int:
    """How many document texts the store holds (checkpoints included): its segments' rows."""
    rows = 0
    for manifest in cache.glob("texts/*/*.json"):
        with contextlib.suppress(OSError, ValueError):  # a segment being written: its manifest comes last
            if manifest.name != "inputs.json" and '"doc"' in (manifest.parent / "inputs.json").read_text():
                rows += json.loads(manifest.read_text())["rows"]
    return rows
