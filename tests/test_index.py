"""FAISS indexes: exact scores and trec_eval tie order for flat; every approximate kind builds, searches
and is measured against flat; parameters out of range are clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from harness.errors import HarnessError
from harness.records import Run
from harness.retrieval.index import IndexSpec, VectorIndex, default_nlist, recall_of_exact


def test_flat_index_returns_exact_inner_products_in_trec_order():
    index = VectorIndex(2)
    index.add(["a", "b"], np.array([[1, 0], [0, 1]], dtype=np.float32))
    index.add(["c"], np.array([[1, 0]], dtype=np.float32))  # ties with "a"
    assert len(index) == 3
    run = index.search(["q"], np.array([[1, 0.5]], dtype=np.float32), depth=3, name="t")
    assert [(h.doc_id, h.score) for h in run["q"]] == [("c", 1.0), ("a", 1.0), ("b", 0.5)]
    assert run.name == "t"


def test_depth_larger_than_corpus_and_empty_queries():
    index = VectorIndex(2)
    index.add(["a"], np.array([[1, 0]], dtype=np.float32))
    run = index.search(["q1", "q2"], np.array([[1, 0], [0, 1]], dtype=np.float32), depth=10)
    assert [len(run[q]) for q in ("q1", "q2")] == [1, 1]
    assert len(index.search([], np.zeros((0, 2), np.float32), depth=10)) == 0


def _data(n=3000, d=32, q=50, seed=0):
    rng = np.random.default_rng(seed)
    docs = rng.standard_normal((n, d)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    queries = docs[rng.choice(n, q, replace=False)] + 0.1 * rng.standard_normal((q, d)).astype(np.float32)
    return [f"d{i}" for i in range(n)], docs, [f"q{i}" for i in range(q)], queries


@pytest.mark.parametrize(
    ("spec", "minimum"),
    [
        (IndexSpec("hnsw", hnsw_m=16, ef_search=64), 0.9),
        (IndexSpec("ivf", nlist=32, nprobe=32), 1.0),  # probing every cell is exact
        (IndexSpec("ivf", nlist=32, nprobe=4), 0.4),
        (IndexSpec("sq8"), 0.9),
        (IndexSpec("pq", pq_m=8, pq_nbits=8), 0.2),
        (IndexSpec("ivfpq", nlist=16, nprobe=16, pq_m=8, pq_nbits=8), 0.2),
    ],
)
def test_approximate_kinds_against_flat(spec, minimum):
    doc_ids, docs, query_ids, queries = _data()
    approximate, exact = VectorIndex(32, spec), VectorIndex(32)
    for start in range(0, len(doc_ids), 1000):  # chunk by chunk, as the pipeline adds them
        approximate.add(doc_ids[start : start + 1000], docs[start : start + 1000])
        exact.add(doc_ids[start : start + 1000], docs[start : start + 1000])
    run = approximate.search(query_ids, queries, depth=10)
    reference = exact.search(query_ids, queries, depth=10)
    assert all(len(hits) == 10 for hits in run.values())
    assert minimum <= recall_of_exact(run, reference, 10) <= 1.0


def test_hnsw_returns_full_depth_beyond_ef_search():
    doc_ids, docs, query_ids, queries = _data(n=500)
    index = VectorIndex(32, IndexSpec("hnsw", ef_search=8))
    index.add(doc_ids, docs)
    assert all(len(hits) == 100 for hits in index.search(query_ids, queries, depth=100).values())


def test_recall_of_exact():
    exact = Run.from_scores({"q": {"a": 3, "b": 2, "c": 1}, "r": {}})
    approximate = Run.from_scores({"q": {"a": 3, "x": 2, "c": 1}})
    assert recall_of_exact(approximate, exact, 2) == 0.5
    assert recall_of_exact(approximate, exact, 3) == pytest.approx(2 / 3)


def test_default_nlist():
    assert default_nlist(5183) == 132 and default_nlist(1_000_000) == 4000 and default_nlist(10) == 1


@pytest.mark.parametrize(
    ("spec", "dimension", "message"),
    [
        (IndexSpec("annoy"), 32, "unknown index 'annoy'"),
        (IndexSpec("hnsw", hnsw_m=2), 32, r"`hnsw_m` 2 is out of range \[4, 128\]"),
        (IndexSpec("ivf", nprobe=0), 32, "`nprobe` 0 is out of range"),
        (IndexSpec("ivf", nlist=0), 32, "`nlist` 0 must be at least 1"),
        (IndexSpec("pq", pq_nbits=20), 32, "`pq_nbits` 20 is out of range"),
        (IndexSpec("ivfpq", pq_m=7), 384, "`pq_m` 7 must divide the dimension 384"),
    ],
)
def test_bad_parameters(spec, dimension, message):
    with pytest.raises(HarnessError, match=message):
        spec.check(dimension)


def test_training_needs_enough_documents():
    doc_ids, docs, query_ids, queries = _data(n=100)
    index = VectorIndex(32, IndexSpec("pq", pq_m=8))
    index.add(doc_ids, docs)
    with pytest.raises(HarnessError, match="needs at least 256 documents"):
        index.build()
    index = VectorIndex(32, IndexSpec("ivf", nlist=500))
    index.add(doc_ids, docs)
    with pytest.raises(HarnessError, match="`nlist` 500 exceeds the 100 documents"):
        index.build()


def test_spec_config_lists_only_relevant_parameters():
    assert IndexSpec().to_config() == {"index": "flat"}
    assert IndexSpec("hnsw").to_config() == {"index": "hnsw", "hnsw_m": 32, "ef_construction": 200, "ef_search": 128}
    assert IndexSpec("ivfpq", nlist=64).to_config() == {
        "index": "ivfpq",
        "nlist": 64,
        "nprobe": 16,
        "pq_m": 48,
        "pq_nbits": 8,
    }


@pytest.mark.parametrize(
    "spec",
    [
        IndexSpec("hnsw", hnsw_m=16),
        IndexSpec("ivf", nlist=16),
        IndexSpec("ivfpq", nlist=8, pq_m=8),
        IndexSpec("sq8"),
        IndexSpec("pq", pq_m=8, train_size=500),
    ],
)
def test_exact_search_of_any_kind_equals_flat(spec):
    doc_ids, docs, query_ids, queries = _data(n=2000)
    approximate, flat = VectorIndex(32, spec), VectorIndex(32)
    for start in range(0, 2000, 300):  # uneven chunks, trained on a sample drawn across them
        approximate.add(doc_ids[start : start + 300], docs[start : start + 300])
        flat.add(doc_ids[start : start + 300], docs[start : start + 300])
    exact = approximate.exact_search(query_ids, queries, 20)
    reference = flat.search(query_ids, queries, 20)
    for query_id in query_ids:
        assert [h.doc_id for h in exact[query_id]] == [h.doc_id for h in reference[query_id]]
        np.testing.assert_allclose(
            [h.score for h in exact[query_id]], [h.score for h in reference[query_id]], rtol=1e-5
        )


def test_flat_search_is_the_same_bits_on_any_thread_count_and_corpus_order():
    import faiss

    rng = np.random.default_rng(11)
    docs = rng.standard_normal((30_000, 384)).astype(np.float32)
    docs[20_000:20_050] = docs[:50]  # duplicates: ties at many cuts
    doc_ids = [f"d{i}" for i in range(len(docs))]
    queries = rng.standard_normal((120, 384)).astype(np.float32)
    query_ids = [f"q{i}" for i in range(len(queries))]
    runs = []
    threads = faiss.omp_get_max_threads()
    for count, order in ((threads, np.arange(len(docs))), (1, rng.permutation(len(docs)))):
        index = VectorIndex(384)
        index.add([doc_ids[i] for i in order], docs[order])
        faiss.omp_set_num_threads(count)  # FAISS's own float32 scores change in the last bits with it
        try:
            runs.append(index.search(query_ids, queries, 30))
        finally:
            faiss.omp_set_num_threads(threads)
    assert runs[0] == runs[1]
    reference = queries.astype(np.float64) @ docs.astype(np.float64).T  # a loop of our own: score, then doc_id
    for i, query_id in enumerate(query_ids):
        ranked = sorted(zip(reference[i].astype(np.float32).tolist(), doc_ids), reverse=True)[:30]
        assert [(h.score, h.doc_id) for h in runs[0][query_id]] == ranked
