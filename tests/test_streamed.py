"""Exact search in bounded memory (docs/evaluate.md, `--memory-budget`): the streamed search ranks exactly as
the in-memory flat index, both as a brute-force loop in this file ranks (score, then doc_id descending: trec_eval's order, ties at the cut
included; float64 scores, as `harness.retrieval.index.exact_top` rescores), keeps its peak RSS under the budget on a corpus larger than it, and refuses a budget too small
or a chunk damaged mid-stream."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from harness.cli import cli
from harness.errors import HarnessError
from harness.io.cache import EmbeddingEntry
from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset
from harness.retrieval.index import VectorIndex
from harness.retrieval.streamed import MemoryBudgetError, StreamedIndex, merge_topk, parse_size, plan_search

ROOT = Path(__file__).resolve().parents[1]


def _tied_data(n=2000, d=6, q=45, seed=0):
    """Vectors of -1/0/1: a few hundred distinct scores for thousands of documents, so ties straddle every cut."""
    rng = np.random.default_rng(seed)
    docs = rng.integers(-1, 2, (n, d)).astype(np.float32)
    queries = rng.integers(-1, 2, (q, d)).astype(np.float32)
    # doc_ids whose order differs from row order, so a rule by row and the rule by doc_id disagree
    doc_ids = [f"{'ab'[i % 2]}{(i * 7919) % n:05d}" for i in range(n)]
    return doc_ids, docs, [f"q{i}" for i in range(q)], queries


def _brute_force(doc_ids, docs, queries, depth):
    """Every score (exact in float64 for small integers), ranked by score then doc_id, both descending."""
    scores = queries.astype(np.float64) @ docs.astype(np.float64).T
    return [sorted(zip(row.tolist(), doc_ids), reverse=True)[:depth] for row in scores]


def _hits(run, query_id):
    return [(hit.score, hit.doc_id) for hit in run[query_id]]


@pytest.mark.parametrize("depth", [1, 10, 100, 700])
@pytest.mark.parametrize(
    ("chunk", "doc_block", "query_block"), [(500, None, 20), (333, 7, 25), (2000, 100, 1000), (64, 64, 44)]
)
def test_streamed_and_in_memory_flat_rank_as_brute_force_ties_included(depth, chunk, doc_block, query_block):
    doc_ids, docs, query_ids, queries = _tied_data()
    chunks = [docs[start : start + chunk] for start in range(0, len(docs), chunk)]
    in_memory = VectorIndex(docs.shape[1])
    for start in range(0, len(docs), chunk):
        in_memory.add(doc_ids[start : start + chunk], docs[start : start + chunk])
    streamed = StreamedIndex(
        lambda: iter(chunks), docs.__getitem__, doc_ids, docs.shape[1], None, chunk, doc_block, query_block
    )
    expected = _brute_force(doc_ids, docs, queries, depth)
    for run in (in_memory.search(query_ids, queries, depth), streamed.search(query_ids, queries, depth)):
        assert [_hits(run, query_id) for query_id in query_ids] == expected


@pytest.mark.parametrize(("chunk", "doc_block", "query_block"), [(1000, None, 20), (777, 50, 33), (3000, None, 4096)])
def test_streamed_equals_in_memory_on_real_valued_vectors(chunk, doc_block, query_block):
    rng = np.random.default_rng(3)
    docs = rng.standard_normal((3000, 48)).astype(np.float32)
    docs[1500:1600] = docs[:100]  # duplicated documents: exactly tied scores
    queries = rng.standard_normal((70, 48)).astype(np.float32)
    doc_ids, query_ids = [f"d{i}" for i in range(len(docs))], [f"q{i}" for i in range(len(queries))]
    in_memory = VectorIndex(48)
    in_memory.add(doc_ids, docs)
    chunks = [docs[start : start + chunk] for start in range(0, len(docs), chunk)]
    streamed = StreamedIndex(lambda: iter(chunks), docs.__getitem__, doc_ids, 48, None, chunk, doc_block, query_block)
    reference = np.sort(queries.astype(np.float64) @ docs.astype(np.float64).T, axis=1)[:, ::-1][:, :100]
    expected, got = in_memory.search(query_ids, queries, 100), streamed.search(query_ids, queries, 100)
    for position, query_id in enumerate(query_ids):
        assert _hits(got, query_id) == _hits(expected, query_id)  # same float32 scores, same order
        np.testing.assert_allclose(
            [score for score, _ in _hits(got, query_id)], reference[position], rtol=1e-5, atol=1e-5
        )


def test_merge_topk_keeps_the_best_scores_of_all_partials():
    rng = np.random.default_rng(1)
    scores = rng.integers(0, 5, (4, 30)).astype(np.float32)
    rows = np.tile(np.arange(30), (4, 1))
    partials = [(scores[:, start : start + 10], rows[:, start : start + 10]) for start in (0, 10, 20)]
    merged_scores, merged_rows = merge_topk(partials, 7)
    for query in range(4):
        assert merged_scores[query].tolist() == sorted(scores[query].tolist(), reverse=True)[:7]
        assert all(scores[query, row] == value for row, value in zip(merged_rows[query], merged_scores[query]))


PEAK = textwrap.dedent("""
    import json, resource, sys
    from pathlib import Path
    import numpy as np
    from harness.metering import high_water_bytes  # VmHWM: ru_maxrss counts the parent's size at fork
    from harness.retrieval.streamed import StreamedIndex, rows_from_chunks
    folder, budget = Path(sys.argv[1]), int(sys.argv[2])
    files = sorted(folder.glob("chunk-*.npy"))
    lengths = [len(np.load(path, mmap_mode="r")) for path in files]
    queries = np.load(folder / "queries.npy")
    index = StreamedIndex(lambda: (np.load(path, mmap_mode="r") for path in files),
                          rows_from_chunks(lambda i: np.load(files[i], mmap_mode="r"), lengths),
                          [f"d{i}" for i in range(sum(lengths))], queries.shape[1], budget, max(lengths))
    run = index.search([f"q{i}" for i in range(len(queries))], queries, 100)
    print(json.dumps({"peak": high_water_bytes(), "hits": len(run["q0"]),
                      "block": index.plan.query_block}))
""")


def test_peak_rss_stays_under_the_budget_on_a_corpus_larger_than_it(tmp_path):
    rng = np.random.default_rng(0)
    rows, dimension, chunks = 8192, 256, 28  # 8 MB chunks, 224 MB of vectors
    for index in range(chunks):
        np.save(tmp_path / f"chunk-{index:05d}.npy", rng.standard_normal((rows, dimension), dtype=np.float32))
    np.save(tmp_path / "queries.npy", rng.standard_normal((500, dimension), dtype=np.float32))
    budget = 150 << 20
    assert rows * dimension * 4 * chunks > 1.4 * budget
    proc = subprocess.run(
        [sys.executable, "-c", PEAK, str(tmp_path), str(budget)], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    measured = json.loads(proc.stdout.splitlines()[-1])
    assert measured["hits"] == 100
    assert measured["peak"] <= budget, f"peak RSS {measured['peak'] >> 20} MB over the {budget >> 20} MB budget"


def test_a_budget_below_one_query_block_against_one_chunk_names_the_minimum():
    with pytest.raises(
        MemoryBudgetError,
        match=r"one block of 20 queries against one 16384-document chunk needs "
        r"at least (\d+\.\d\d) MiB",
    ) as raised:
        plan_search(100 << 20, 50 << 20, 1000, 768, 100, 16384)
    named = float(re.search(r"at least (\d+\.\d\d) MiB", str(raised.value)).group(1))
    assert named > 50 + 2 * 16384 * 768 * 4 / 2**20  # what the process holds, and the mapped chunks
    assert plan_search(int((named + 0.01) * 2**20), 50 << 20, 1000, 768, 100, 16384).query_block == 20
    with pytest.raises(MemoryBudgetError):
        plan_search(int((named - 0.01) * 2**20), 50 << 20, 1000, 768, 100, 16384)
    assert 20 < plan_search(1 << 30, 50 << 20, 1000, 768, 100, 16384).query_block <= 1000
    assert parse_size("3GB") == 3 << 30 and parse_size("1.5g") == 3 << 29 and parse_size("2048") == 2048


def _folder(root: Path, n_docs: int) -> Path:
    """A BEIR folder of `n_docs` short documents and 30 queries, one judged document each."""
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(300)]
    (root / "qrels").mkdir(parents=True)
    texts = [" ".join(rng.choice(words, 12)) for _ in range(n_docs)]
    with open(root / "corpus.jsonl", "w", encoding="utf-8") as handle:
        for i, text in enumerate(texts):
            handle.write(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n")
    with (
        open(root / "queries.jsonl", "w", encoding="utf-8") as queries,
        open(root / "qrels" / "test.tsv", "w", encoding="utf-8") as qrels,
    ):
        qrels.write("query-id\tcorpus-id\tscore\n")
        for j in range(30):
            target = int(rng.integers(n_docs))
            queries.write(json.dumps({"_id": f"q{j}", "text": " ".join(texts[target].split()[:5])}) + "\n")
            qrels.write(f"q{j}\td{target}\t1\n")
    return root


def _config(folder: Path, cache: Path, budget: int | None) -> EvaluateConfig:
    return EvaluateConfig(
        dataset_path=folder,
        model="hash:1024",
        output_dir=None,
        progress=False,
        cache_dir=cache,
        chunk_size=1000,
        memory_budget=budget,
        k_values=(10, 100),
    )


def test_evaluate_streams_when_the_vectors_exceed_the_budget_with_the_same_run(tmp_path):
    from harness.retrieval.streamed import resident_bytes

    folder = _folder(tmp_path / "data", 30000)  # 123 MB of 1,024-d vectors
    in_memory = evaluate_dataset(_config(folder, tmp_path / "cache-a", None))
    streamed = evaluate_dataset(_config(folder, tmp_path / "cache-b", resident_bytes() + (100 << 20)))
    assert in_memory.result.config["search"] == "in-memory"
    assert streamed.result.config["search"] == "streamed"
    assert any(note.startswith("streamed exact search") for note in streamed.result.notes)
    assert streamed.result.config_hash == in_memory.result.config_hash
    assert {q: _hits(streamed.run, q) for q in streamed.run} == {q: _hits(in_memory.run, q) for q in in_memory.run}
    assert streamed.result.metrics == in_memory.result.metrics


def test_a_chunk_damaged_mid_stream_is_named_and_refused_then_recomputed(tmp_path, monkeypatch):
    from harness.retrieval.streamed import resident_bytes

    folder = _folder(tmp_path / "data", 30000)
    config = _config(folder, tmp_path / "cache", resident_bytes() + (100 << 20))
    clean = evaluate_dataset(config)  # encodes and stores every chunk
    passes = []
    original = EmbeddingEntry.chunks

    def damaging(self, mmap=False):
        passes.append(self.inputs.get("kind"))
        for index, item in enumerate(original(self, mmap)):
            if passes.count("corpus") == 2 and passes[-1] == "corpus" and index == 0:
                target = self.root / "chunk-00003.npy"  # the search pass: damage a chunk it has not read yet
                data = bytearray(target.read_bytes())
                data[-8:] = bytes(byte ^ 0xFF for byte in data[-8:])
                target.write_bytes(bytes(data))
            yield item

    monkeypatch.setattr(EmbeddingEntry, "chunks", damaging)
    with pytest.raises(HarnessError, match=r"chunk-00003\.npy: content differs from the manifest.*rerun to recompute"):
        evaluate_dataset(config)
    monkeypatch.setattr(EmbeddingEntry, "chunks", original)
    again = evaluate_dataset(config)  # the entry was removed: encoded again, the same run
    assert again.result.config["embedding_cache"] == "stored"
    assert {q: _hits(again.run, q) for q in again.run} == {q: _hits(clean.run, q) for q in clean.run}


def test_cli_memory_budget_too_small_exits_2_naming_the_minimum(tiny_beir, tmp_path):
    result = CliRunner().invoke(
        cli,
        [
            "-q",
            "evaluate",
            str(tiny_beir),
            "--model",
            "hash:64",
            "--memory-budget",
            "1MB",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--output-dir",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 2, result.output
    assert "--memory-budget 1.00 MiB is too small" in result.output and "raise it to" in result.output
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.json"))


RESERVE = textwrap.dedent("""
    import json, resource, sys
    import numpy as np
    from harness.retrieval.index import VectorIndex
    from harness.metering import high_water_bytes  # VmHWM: ru_maxrss counts the parent's size at fork
    from harness.retrieval.streamed import resident_bytes
    rows, chunk, dimension = int(sys.argv[1]), 16384, 128
    vectors = np.ones((chunk, dimension), np.float32)
    index = VectorIndex(dimension)
    base = resident_bytes()  # before the storage is reserved: the reserve counts
    if sys.argv[2] == "reserve":
        index.reserve(rows)
    for start in range(0, rows, chunk):
        index.add([str(i) for i in range(start, start + chunk)], vectors)
    print(json.dumps((high_water_bytes() - base, len(index))))
""")


def test_a_reserved_flat_index_holds_its_vectors_once_while_it_grows():
    rows = 16384 * 17  # just past a doubling of FAISS's storage: growing would copy 16 of the 17 chunks
    emb = rows * 128 * 4
    grown = {}
    for mode in ("grow", "reserve"):
        proc = subprocess.run(
            [sys.executable, "-c", RESERVE, str(rows), mode], capture_output=True, text=True, cwd=ROOT, timeout=300
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        grown[mode], count = json.loads(proc.stdout)
        assert count == rows
    ratios = {mode: round(value / emb, 3) for mode, value in grown.items()}
    assert grown["grow"] > 1.7 * emb, ratios  # what reserving avoids (measured here, so the test shows it matters)
    assert grown["reserve"] < 1.3 * emb, ratios
