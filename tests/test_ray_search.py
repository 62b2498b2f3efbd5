"""Sharded exact search on Ray workers equals local flat search (on a local 2-CPU cluster on 127.0.0.1)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import threading
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from cli_runner import invoke

from harness.engines.ray_engine import RaySpec, connect
from harness.engines.ray_search import lose_worker_once, plan_shards, query_blocks, search_sharded
from harness.errors import HarnessError
from harness.io.cache import embedding_entry
from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset
from harness.records import Run
from harness.retrieval.index import VectorIndex, merge_top

ray = pytest.importorskip("ray")

UNEVEN = [7, 300, 1, 50, 123, 2]  # chunk sizes: a 1-vector chunk, shards smaller than the deepest k


@pytest.fixture(scope="module")
def cluster():
    """One local cluster for the module, started as ``--ray-local 2`` starts one (127.0.0.1, no probes)."""
    started = connect(RaySpec(local_cpus=2))
    yield
    if started:
        ray.shutdown()


def _entry(root: Path, chunks: list[np.ndarray], seed: int = 0):
    """A complete corpus entry holding `chunks`, with doc_ids in shuffled order (so row order and doc_id
    order disagree, and the tie rule at the cut is seen)."""
    names = [f"d{i}" for i in range(sum(map(len, chunks)))]
    random.Random(seed).shuffle(names)
    entry = embedding_entry(root, {"kind": "corpus", "test": seed})
    entry.start(max(map(len, chunks)))
    start = 0
    for index, vectors in enumerate(chunks):
        entry.write_chunk(index, names[start : start + len(vectors)], vectors)
        start += len(vectors)
    entry.finish(len(chunks), start, chunks[0].shape[1])
    return entry, names


def _brute_force(queries: np.ndarray, corpus: np.ndarray, doc_ids: list[str], depth: int) -> Run:
    """The first `depth` of the complete ranking, by a loop: score, then doc_id, descending (trec_eval)."""
    scores = queries.astype(np.float64) @ corpus.astype(np.float64).T  # exact for the small integers used
    results = {}
    for i, row in enumerate(scores):
        ranked = sorted(((float(score), doc_id) for score, doc_id in zip(row, doc_ids)), reverse=True)[:depth]
        results[f"q{i}"] = {doc_id: score for score, doc_id in ranked}
    return Run.from_scores(results)


def _local_flat(chunks: list[np.ndarray], doc_ids: list[str], queries: np.ndarray, depth: int) -> Run:
    index = VectorIndex(chunks[0].shape[1])
    start = 0
    for vectors in chunks:
        index.add(doc_ids[start : start + len(vectors)], vectors)
        start += len(vectors)
    return index.search([f"q{i}" for i in range(len(queries))], queries, depth)


def _tied_chunks(rng, sizes=UNEVEN, dimension=6):
    """Vectors of -1/0/1: scores are small integers, so nearly every cut falls inside a run of ties."""
    return [rng.integers(-1, 2, size=(n, dimension)).astype(np.float32) for n in sizes]


@pytest.mark.parametrize("n_queries", [45, 7])  # FAISS scores >= 20 queries with BLAS, fewer with its own loop
def test_sharded_search_equals_local_flat_search_with_many_ties(cluster, tmp_path, n_queries):
    rng = np.random.default_rng(n_queries)
    chunks = _tied_chunks(rng)
    entry, doc_ids = _entry(tmp_path, chunks)
    queries = rng.integers(-1, 2, size=(n_queries, 6)).astype(np.float32)
    query_ids = [f"q{i}" for i in range(n_queries)]
    corpus = np.concatenate(chunks)
    for depth in (1, 5, 100, 600):  # 100 > most shards, 600 > the corpus (483)
        expected = _brute_force(queries, corpus, doc_ids, depth)
        assert _local_flat(chunks, doc_ids, queries, depth) == expected
        for shards in (3, 6):
            run, facts = search_sharded(entry, UNEVEN, doc_ids, query_ids, queries, depth, shards=shards)
            assert run == expected, (depth, shards)
            assert facts["search_path"] == "ray-sharded" and facts["search_shards"] == shards


def test_sharded_search_equals_local_flat_search_on_float_vectors(cluster, tmp_path):
    # One thread per Ray task, all cores locally: FAISS's own float32 scores differ in the last bits
    # between the two (and between a shard and the whole corpus); the recomputed ones must not.
    rng = np.random.default_rng(7)
    chunks = [rng.standard_normal((n, 384)).astype(np.float32) for n in (9000, 37, 15000, 640)]
    chunks[2][:40] = chunks[0][:40]  # duplicated documents: exact ties across shards
    entry, doc_ids = _entry(tmp_path, chunks, seed=3)
    queries = rng.standard_normal((300, 384)).astype(np.float32)
    local = _local_flat(chunks, doc_ids, queries, 50)
    run, _ = search_sharded(
        entry, [len(c) for c in chunks], doc_ids, [f"q{i}" for i in range(300)], queries, 50, shards=4
    )
    assert run == local  # bit for bit
    reference = queries.astype(np.float64) @ np.concatenate(chunks).astype(np.float64).T
    for i, hits in enumerate(run.to_dict().values()):
        top = np.sort(reference[i])[::-1][:50].astype(np.float32)
        assert sorted(hits.values(), reverse=True) == top.tolist()  # float64 dot products rounded to float32


def test_shards_are_whole_chunks_in_order_and_cover_all_of_them():
    for shards in (1, 2, 3, 6, 9):
        plan = plan_shards(UNEVEN, shards)
        assert len(plan) == min(shards, len(UNEVEN))
        assert [c for shard in plan for c in shard.chunks] == list(range(len(UNEVEN)))
        assert [shard.start for shard in plan] == list(np.cumsum([0] + [sum(s.rows) for s in plan])[:-1])


def test_a_worker_lost_mid_search_has_its_shard_searched_again(cluster, tmp_path):
    rng = np.random.default_rng(1)
    chunks = _tied_chunks(rng)
    entry, doc_ids = _entry(tmp_path / "cache", chunks)
    queries = rng.integers(-1, 2, size=(25, 6)).astype(np.float32)
    marker = tmp_path / "lost"
    run, _ = search_sharded(
        entry,
        UNEVEN,
        doc_ids,
        [f"q{i}" for i in range(25)],
        queries,
        20,
        shards=3,
        before=partial(lose_worker_once, str(marker), 1),
    )
    assert marker.exists()  # the worker searching shard 1 did die
    assert run == _brute_force(queries, np.concatenate(chunks), doc_ids, 20)


def test_a_worker_lost_on_every_try_fails_the_run_naming_its_shard(cluster, tmp_path):
    rng = np.random.default_rng(2)
    chunks = _tied_chunks(rng)
    entry, doc_ids = _entry(tmp_path / "cache", chunks)
    queries = rng.integers(-1, 2, size=(5, 6)).astype(np.float32)
    with pytest.raises(
        HarnessError,
        match=r"^shard 1 of 3 \(cache chunks 2-3, documents 308-358\) failed during "
        r"sharded search: its Ray worker was lost \(WorkerCrashedError\) on its only try; "
        r"rerun, or search on the driver \(`ray_search` driver\)$",
    ):
        search_sharded(
            entry,
            UNEVEN,
            doc_ids,
            [f"q{i}" for i in range(5)],
            queries,
            10,
            shards=3,
            retries=0,
            before=partial(lose_worker_once, str(tmp_path / "lost"), 1),
        )


def _corpus(folder: Path, n_docs: int) -> Path:
    """A BEIR folder of short texts with many repeated words (hash:64 scores tie often) and 6 queries."""
    folder.mkdir()
    words = "apple banana cherry date elder fig grape".split()
    with open(folder / "corpus.jsonl", "w") as handle:
        for i in range(n_docs):
            handle.write(
                json.dumps(
                    {"_id": f"d{i}", "title": "", "text": " ".join(words[(i * 3 + j) % 7] for j in range(1 + i % 3))}
                )
                + "\n"
            )
    with open(folder / "queries.jsonl", "w") as handle:
        for q in range(6):
            handle.write(json.dumps({"_id": f"q{q}", "text": words[q]}) + "\n")
    (folder / "qrels").mkdir()
    lines = ["query-id\tcorpus-id\tscore"] + [f"q{q}\td{(q * 5 + j) % n_docs}\t1" for q in range(6) for j in range(3)]
    (folder / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")
    return folder


def test_evaluate_on_ray_searches_sharded_and_equals_the_local_engine(cluster, tmp_path):
    folder = _corpus(tmp_path / "data", 41)
    base = EvaluateConfig(
        dataset_path=folder,
        model="hash:64",
        output_dir=tmp_path / "results",
        progress=False,
        cache_dir=tmp_path / "cache",
        k_values=(1, 3, 10),
        top_k=10,
    )
    local = evaluate_dataset(base)
    on_ray = replace(base, engine="ray", cache_dir=tmp_path / "ray-cache")  # 5 chunks, not the local run's one
    sharded = evaluate_dataset(replace(on_ray, ray=RaySpec(shards=5)))
    driver = evaluate_dataset(replace(on_ray, ray=RaySpec(shards=5, search="driver")))
    assert sharded.result.config["search_path"] == "ray-sharded" and sharded.result.config["search_shards"] == 2
    assert driver.result.config["search_path"] == "driver" and "search_shards" not in driver.result.config
    assert sharded.run == local.run == driver.run
    assert sharded.result.metrics == local.result.metrics
    assert sharded.result.config["bytes_per_doc"] == local.result.config["bytes_per_doc"]


def test_a_worker_killed_from_outside_mid_search_loses_nothing(cluster, tmp_path):
    rng = np.random.default_rng(4)
    chunks = [rng.standard_normal((n, 64)).astype(np.float32) for n in (60_000, 50_000, 70_000)]
    entry, doc_ids = _entry(tmp_path / "cache", chunks, seed=4)
    queries = rng.standard_normal((1500, 64)).astype(np.float32)
    killed = []

    def kill_a_searching_worker():  # SIGKILL, as a lost node: no exception, no cleanup in the worker
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            pids = subprocess.run(["pgrep", "-f", "ray::search_shard"], capture_output=True, text=True).stdout.split()
            if pids:
                os.kill(int(pids[0]), signal.SIGKILL)
                killed.append(int(pids[0]))
            time.sleep(0.05)

    killer = threading.Thread(target=kill_a_searching_worker)
    killer.start()
    run, _ = search_sharded(
        entry, [len(c) for c in chunks], doc_ids, [f"q{i}" for i in range(1500)], queries, 20, shards=3
    )
    killer.join()
    assert killed, "no searching worker was found to kill"
    assert run == _local_flat(chunks, doc_ids, queries, 20)


def test_cli_ray_search_needs_the_ray_engine_and_is_recorded(cluster, tmp_path):

    folder = _corpus(tmp_path / "data", 12)
    common = [str(folder), "--model", "hash:64", "--cache-dir", str(tmp_path / "cache"), "-q"]
    refused = invoke(["evaluate", *common, "--ray-search", "driver"])
    assert refused.exit_code == 2 and "--ray-search need --engine ray" in refused.output
    ran = invoke(
        ["evaluate", *common, "--engine", "ray", "--shards", "4", "--output-dir", str(tmp_path / "out"), "--json"]
    )
    assert ran.exit_code == 0, ran.output
    config = json.loads(next((tmp_path / "out").rglob("test*.json")).read_text())["config"]
    assert config["search_path"] == "ray-sharded" and config["search_shards"] == 2


# The sharded search's cut: merging shards' tops, and cutting chunks and queries into shards and blocks.
#
# Scores are drawn from a few values so that ties straddle the cut in most queries; the reference is a
# brute-force ranking of every row (score descending, then doc id descending: trec_eval's order) written here.
# The tests below use no fixture of conftest.py: tools/mutation.py runs them with --noconftest.


def doc_id(row):
    return f"d{row:03d}"


def ranked_by_hand(scores, rows, depth):
    pairs = sorted(zip(scores.tolist(), rows.tolist()), key=lambda p: (p[0], doc_id(p[1])), reverse=True)
    return pairs[:depth]


def parts_of(rng, n_queries, sizes, depth, values):
    """Disjoint row sets (one per shard), each with its own exact top `depth`, and the full score table."""
    total = sum(sizes)
    table = rng.choice(values, size=(n_queries, total)).astype(np.float32)
    parts, start = [], 0
    for size in sizes:
        rows = np.arange(start, start + size)
        keep = min(depth, size)
        top_scores = np.empty((n_queries, keep), np.float32)
        top_rows = np.empty((n_queries, keep), np.int64)
        for q in range(n_queries):
            pairs = ranked_by_hand(table[q, rows], rows, keep)
            order = rng.permutation(keep)  # rows in no particular order within a query, as exact_top gives them
            top_scores[q] = [pairs[i][0] for i in order]
            top_rows[q] = [pairs[i][1] for i in order]
        parts.append((top_scores, top_rows))
        start += size
    return parts, table


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("depth", [1, 3, 5, 8])
@pytest.mark.parametrize("sizes", [(4, 4), (2, 7, 3), (10, 1, 1, 5), (1, 1)])
def test_merged_shards_are_the_top_of_every_row(seed, depth, sizes):
    rng = np.random.default_rng(seed)
    parts, table = parts_of(rng, 5, sizes, depth, values=[0.5, 1.0, 1.5])
    scores, rows = merge_top(parts, depth, doc_id)
    keep = min(depth, sum(min(depth, s) for s in sizes))
    assert scores.shape == rows.shape == (5, keep)
    for q in range(5):
        want = ranked_by_hand(table[q], np.arange(table.shape[1]), keep)
        got = sorted(zip(scores[q].tolist(), rows[q].tolist()), key=lambda p: (p[0], doc_id(p[1])), reverse=True)
        assert got == want


@pytest.mark.parametrize("chunks", [[5], [3, 3, 3], [10, 1, 1, 1, 10], [1] * 7, [4, 8, 2, 6, 5]])
@pytest.mark.parametrize("shards", [1, 2, 3, 4, 8])
def test_shards_cover_every_chunk_once_in_order(chunks, shards):
    plan = plan_shards(chunks, shards)
    assert len(plan) == min(shards, len(chunks))
    assert [index for shard in plan for index in shard.chunks] == list(range(len(chunks)))
    start = 0
    for number, shard in enumerate(plan):
        assert shard.number == number and shard.chunks
        assert shard.rows == tuple(chunks[i] for i in shard.chunks)
        assert shard.start == start
        start += sum(shard.rows)
    assert start == sum(chunks)


def test_shards_share_the_rows_about_evenly():
    plan = plan_shards([1] * 12, 3)
    assert [sum(shard.rows) for shard in plan] == [4, 4, 4]
    plan = plan_shards([6, 1, 1, 1, 1, 1, 1], 2)
    assert [sum(shard.rows) for shard in plan] == [6, 6]
    assert plan_shards([], 4) == []


@pytest.mark.parametrize("n", [0, 1, 5, 9, 10, 11, 19, 20, 21, 35])
@pytest.mark.parametrize("block", [1, 4, 10])
def test_query_blocks_cover_the_queries_with_the_remainder_in_the_last(n, block):
    blocks = query_blocks(n, block)
    assert [i for low, high in blocks for i in range(low, high)] == list(range(n))
    if n:
        assert all(high - low == block for low, high in blocks[:-1])
        last = blocks[-1][1] - blocks[-1][0]
        assert last == n if n < block else block <= last < 2 * block
    assert query_blocks(3, 0) == [(0, 1), (1, 2), (2, 3)]


@pytest.mark.parametrize("chunks", [[3, 2, 0], [4, 0, 0], [0, 5, 0], [2, 2, 0, 0, 0], [1, 0, 1, 0], [0, 0, 0]])
@pytest.mark.parametrize("shards", [1, 2, 3])
def test_empty_chunks_never_make_more_shards_than_asked(chunks, shards):
    # a chunk of no rows (plan_shards takes any row counts) joins a shard: the plan is still at most `shards`
    # shards, covering every chunk once, in order (checked by hand)
    plan = plan_shards(chunks, shards)
    assert 1 <= len(plan) <= min(shards, len(chunks))
    assert [index for shard in plan for index in shard.chunks] == list(range(len(chunks)))
    assert [shard.number for shard in plan] == list(range(len(plan)))
