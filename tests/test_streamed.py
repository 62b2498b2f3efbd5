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
from cli_runner import invoke

import harness.retrieval.streamed as streamed
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
                target = self.root / "chunk-00003.keys.npy"  # the search pass: damage a chunk it has not read yet
                data = bytearray(target.read_bytes())
                data[-8:] = bytes(byte ^ 0xFF for byte in data[-8:])
                target.write_bytes(bytes(data))
            yield item

    monkeypatch.setattr(EmbeddingEntry, "chunks", damaging)
    with pytest.raises(
        HarnessError, match=r"chunk-00003\.keys\.npy: content differs from the manifest.*rerun to recompute"
    ):
        evaluate_dataset(config)
    monkeypatch.setattr(EmbeddingEntry, "chunks", original)
    again = evaluate_dataset(config)  # the entry was removed: encoded again, the same run
    assert again.result.config["embedding_cache"] == "stored"
    assert {q: _hits(again.run, q) for q in again.run} == {q: _hits(clean.run, q) for q in clean.run}


def test_cli_memory_budget_too_small_exits_2_naming_the_minimum(tiny_beir, tmp_path):
    result = invoke(
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


# The streamed search's deeper pass keeps the budget its first pass was sized by.
#
# Documents whose scores tie across the cut make `exact_top` search deeper; the deeper pass holds more results
# a query, so a budget that just fits the first pass is below the deeper pass's minimum. A user's (strict)
# budget is checked on the first pass only: the search must go on and return the exact top, which the
# reference computes by brute force (float64 dot products, ties to the greater doc id as trec_eval orders them).
# The tests below use no fixture of conftest.py: tools/mutation.py runs them with --noconftest.


N_DOCS, DIM, DEPTH, CHUNK = 64, 8, 5, 16


def corpus():
    rng = np.random.default_rng(3)
    docs = np.repeat(rng.standard_normal((1, DIM)).astype(np.float32), N_DOCS, axis=0)  # every score ties
    docs[:3] *= 2  # three clear winners above the tie
    queries = np.abs(rng.standard_normal((4, DIM)).astype(np.float32)) * np.sign(docs[0])
    return [f"d{i:02d}" for i in range(N_DOCS)], docs, queries


def brute_force(doc_ids, docs, queries, depth):
    out = []
    for query in queries:
        scores = [float(np.float32(np.dot(query.astype(np.float64), doc.astype(np.float64)))) for doc in docs]
        ranked = sorted(range(len(docs)), key=lambda r: (scores[r], doc_ids[r]), reverse=True)[:depth]
        out.append({doc_ids[r]: scores[r] for r in ranked})
    return out


def index(doc_ids, docs, budget, strict=True):
    chunks = [docs[start : start + CHUNK] for start in range(0, len(docs), CHUNK)]
    return StreamedIndex(lambda: iter(chunks), docs.__getitem__, doc_ids, DIM, budget, CHUNK, strict=strict)


def first_pass_minimum(n_queries):
    k = DEPTH + 1  # exact_top's first search: depth + 1 + depth // 8 results
    return plan_search(1 << 50, 0, n_queries, DIM, k - 1, CHUNK).minimum


@pytest.fixture(autouse=True)
def nothing_resident(monkeypatch):
    monkeypatch.setattr(streamed, "resident_bytes", lambda: 0)


def test_the_ties_do_need_a_deeper_pass_that_the_first_budget_cannot_hold():
    doc_ids, docs, queries = corpus()
    budget = first_pass_minimum(len(queries))
    with pytest.raises(MemoryBudgetError):
        plan_search(budget, 0, len(queries), DIM, 2 * (DEPTH + 1) - 1, CHUNK)
    calls = []
    searcher = index(doc_ids, docs, None)
    searcher.query_block = len(queries)
    original = searcher._search
    searcher._search = lambda q, k: calls.append(k) or original(q, k)
    searcher.search([f"q{i}" for i in range(len(queries))], queries, DEPTH)
    assert calls[0] == DEPTH + 1 and len(calls) > 1 and calls[-1] == N_DOCS
    assert searcher.passes == len(calls)  # each pass over the chunks counted once


def test_a_strict_budget_that_fits_the_first_pass_carries_the_deeper_passes():
    doc_ids, docs, queries = corpus()
    budget = first_pass_minimum(len(queries))
    searcher = index(doc_ids, docs, budget, strict=True)
    run = searcher.search([f"q{i}" for i in range(len(queries))], queries, DEPTH)
    expected = brute_force(doc_ids, docs, queries, DEPTH)
    for i, want in enumerate(expected):
        got = {s.doc_id: s.score for s in run[f"q{i}"]}
        assert got.keys() == want.keys()
        assert got == pytest.approx(want)
    assert searcher.plan is not None and searcher.plan.minimum == budget  # the first pass's plan is kept


def test_a_strict_budget_below_the_first_pass_is_refused():
    doc_ids, docs, queries = corpus()
    budget = first_pass_minimum(len(queries)) - 1
    with pytest.raises(MemoryBudgetError, match="too small for a streamed search"):
        index(doc_ids, docs, budget, strict=True).search([f"q{i}" for i in range(len(queries))], queries, DEPTH)


def test_a_default_budget_below_the_minimum_searches_in_the_smallest_blocks():
    doc_ids, docs, queries = corpus()
    searcher = index(doc_ids, docs, 1, strict=False)
    run = searcher.search([f"q{i}" for i in range(len(queries))], queries, DEPTH)
    for i, want in enumerate(brute_force(doc_ids, docs, queries, DEPTH)):
        assert {s.doc_id for s in run[f"q{i}"]} == set(want)
    assert searcher.plan.query_block == len(queries) and searcher.plan.minimum == 0


def test_each_search_plans_afresh():
    doc_ids, docs, queries = corpus()
    searcher = index(doc_ids, docs, first_pass_minimum(len(queries)), strict=True)
    searcher.search([f"q{i}" for i in range(len(queries))], queries, DEPTH)
    # a second search on one query: its own first pass, its own (smaller) minimum
    searcher.search(["q0"], queries[:1], DEPTH)
    assert searcher.plan.minimum == first_pass_minimum(1)


# The working set plan_search counts, worked out by hand from its documented parts for one search: 100 queries
# of dimension 8, depth 5 (k = 6 with the tie-breaking extra), chunks of 16 rows, 1 MiB held already.
#   fixed     = base 1,048,576 + results 100*6*12 = 7,200 + run 100*5*160 = 80,000 + two chunks 2*16*8*4 = 1,024
#               + slack 48 MiB = 50,331,648                                                   -> 51,468,448
#   per query = 6*64 = 384 + score block min(16, 1024)*4 = 64 + the query 8*4 = 32          -> 480
#   minimum   = fixed + 20 (the smallest block) * 480                                         -> 51,478,048
BASE, FIXED, PER_QUERY, MINIMUM = 1 << 20, 51_468_448, 480, 51_478_048


def test_the_minimum_is_the_fixed_part_and_the_smallest_block():
    plan = plan_search(MINIMUM, BASE, 100, 8, 5, 16)
    assert plan.minimum == MINIMUM and plan.query_block == 20 and plan.budget == MINIMUM
    with pytest.raises(MemoryBudgetError) as caught:
        plan_search(MINIMUM - 1, BASE, 100, 8, 5, 16)
    assert "one block of 20 queries against one 16-document chunk needs at least" in str(caught.value)


@pytest.mark.parametrize("extra_queries, block", [(0, 20), (1, 21), (30, 50), (79, 99), (80, 100), (500, 100)])
def test_the_block_is_what_the_budget_holds_beyond_the_fixed_part(extra_queries, block):
    budget = MINIMUM + extra_queries * PER_QUERY
    assert plan_search(budget, BASE, 100, 8, 5, 16).query_block == block
    assert plan_search(budget + PER_QUERY - 1, BASE, 100, 8, 5, 16).query_block == block  # whole queries only


def test_fewer_queries_than_the_smallest_block_are_one_block():
    # 7 queries: fixed = 1,048,576 + 7*6*12 + 7*5*160 + 1,024 + 50,331,648 = 51,387,352; minimum + 7 * 480
    plan = plan_search(51_387_352 + 7 * 480, BASE, 7, 8, 5, 16)
    assert plan.query_block == 7 and plan.minimum == 51_387_352 + 7 * 480
    with pytest.raises(MemoryBudgetError):
        plan_search(51_387_352 + 7 * 480 - 1, BASE, 7, 8, 5, 16)


def test_a_big_chunk_counts_only_faiss_s_1024_document_tile():
    # chunks of 4096 rows: two chunks 2*4096*8*4 = 262,144 instead of 1,024; per query 384 + 1024*4 + 32 = 4,512
    fixed = FIXED - 1_024 + 262_144
    assert plan_search(fixed + 20 * 4_512, BASE, 100, 8, 5, 4096).minimum == fixed + 20 * 4_512


def test_the_refusals_read_as_written():
    with pytest.raises(MemoryBudgetError) as given:
        plan_search(MINIMUM - 1, BASE, 100, 8, 5, 16, given=True)
    assert str(given.value) == (
        "`memory_budget` 49.09 MiB is too small for a streamed search: one block of 20 queries against one "
        "16-document chunk needs at least 49.09 MiB (1.00 MiB of it held already by this process); "
        "raise it to 49.09 MiB or more"
    )
    with pytest.raises(MemoryBudgetError) as default:
        plan_search(MINIMUM - 1, BASE, 100, 8, 5, 16, given=False)
    assert str(default.value) == (
        "the memory this process may use (49.09 MiB: its size now and half the memory available) is too small for "
        "a streamed search: one block of 20 queries against one 16-document chunk needs at least 49.09 MiB "
        "(1.00 MiB of it held already by this process); free memory, or give `memory_budget` of 49.09 MiB or more"
    )


def test_no_queries_count_as_a_block_of_one():
    # fixed = 1,048,576 + 0 + 0 + 1,024 + 50,331,648 = 51,381,248; one query's 480 on top
    assert plan_search(1 << 40, BASE, 0, 8, 5, 16).minimum == 51_381_248 + 480


def test_a_fixed_query_block_plans_nothing(monkeypatch):
    doc_ids, docs, queries = corpus()
    searcher = index(doc_ids, docs, 1, strict=True)  # a budget no plan could hold: never consulted
    searcher.query_block = 3
    blocks = []
    original = streamed.search_blocks
    monkeypatch.setattr(streamed, "search_blocks", lambda *a, **kw: blocks.append(a[3]) or original(*a, **kw))
    searcher.search([f"q{i}" for i in range(len(queries))], queries, DEPTH)
    assert searcher.plan is None and blocks and set(blocks) == {3}


def test_the_plan_and_a_fallback_are_logged_as_written(caplog):
    doc_ids, docs, queries = corpus()
    with caplog.at_level("INFO", logger="harness.retrieval.streamed"):
        index(doc_ids, docs, 1, strict=False).search([f"q{i}" for i in range(len(queries))], queries, DEPTH)
    messages = [record.getMessage() for record in caplog.records]
    # the first pass (k = 6): 4*6*12 + 4*5*160 + 2*16*8*4 + 48 MiB + 4 queries * 480 = 50,338,080 B = 48.01 MiB
    assert any(
        m.endswith(
            "is too small for a streamed search: one block of 4 queries against one 16-document chunk needs "
            "at least 48.01 MiB (0 B of it held already by this process); free memory, or give `memory_budget` "
            "of 48.01 MiB or more; searching 4 queries in the smallest blocks"
        )
        for m in messages
    ), messages
    assert "streamed exact search: 4 queries a block, budget 1 B" in messages
    caplog.clear()
    with caplog.at_level("INFO", logger="harness.retrieval.streamed"):
        index(doc_ids, docs, 3 << 30, strict=True).search([f"q{i}" for i in range(len(queries))], queries, DEPTH)
    assert "streamed exact search: 4 queries a block, budget 3.00 GiB" in [r.getMessage() for r in caplog.records]


def test_a_budget_is_the_caller_s_unless_told_otherwise():
    with pytest.raises(MemoryBudgetError) as caught:
        plan_search(MINIMUM - 1, BASE, 100, 8, 5, 16)
    assert str(caught.value).startswith("`memory_budget` 49.09 MiB is too small")
