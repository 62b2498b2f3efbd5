"""FAISS indexes: exact scores and trec_eval tie order for flat; every approximate kind builds, searches
and is measured against flat; parameters out of range are clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from harness.errors import HarnessError
from harness.records import Run
from harness.retrieval.index import RESCORE_MARGIN, IndexSpec, VectorIndex, default_nlist, exact_top, recall_of_exact


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


# The exact top at the cut (`harness.retrieval.index.exact_top`): which candidates FAISS's scores let through,
# and how often it searches again — against a brute-force ranking written here.
#
# The vectors are one-dimensional, so every score is a value the test chose. A fake FAISS ranks the float32 scores
# plus a chosen error per document (FAISS's own scores differ from the exact ones in the last bits) and counts its
# calls. Cases that differ where the rule does: a corpus exactly as deep as the cut, a true top document FAISS
# ranks just below the cut by less than the margin (at large, negative and mixed magnitudes, so every term of the
# margin matters), all-zero scores (the floor equals the scores), and ties that need exactly one deeper search.
# The tests below use no fixture of conftest.py: tools/mutation.py runs them with --noconftest.


class FakeFaiss:
    """A flat inner-product search over 1-d vectors, off by `error[row]` per document, that counts its calls."""

    def __init__(self, values, error=None):
        self.vectors = np.asarray(values, dtype=np.float32).reshape(-1, 1)
        self.error = np.zeros(len(values), dtype=np.float32) if error is None else np.asarray(error, np.float32)
        self.calls: list[int] = []

    def search(self, queries, k):
        self.calls.append(k)
        scores = queries @ self.vectors.T + self.error
        order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(scores, order, axis=1), order.astype(np.int64)

    def rows(self, rows):
        return self.vectors[np.asarray(rows)]


def _doc_id(row: int) -> str:
    return f"d{(row * 7) % 101:03d}"  # not in row order: the tie rule (greater doc_id first) is not FAISS's order


def _expected(values, query: float, depth: int):
    """The top `depth` by (float64 score rounded to float32, doc_id) descending, by brute force."""
    scores = [np.float32(np.float64(np.float32(v)) * np.float64(np.float32(query))) for v in values]
    ranked = sorted(range(len(values)), key=lambda row: (scores[row], _doc_id(row)), reverse=True)[:depth]
    return sorted(ranked), sorted(float(scores[row]) for row in ranked)


def _top(faiss: FakeFaiss, query: float, depth: int):
    scores, rows = exact_top(
        faiss.search, np.array([[query]], dtype=np.float32), len(faiss.vectors), depth, _doc_id, faiss.rows
    )
    return sorted(rows[0].tolist()), sorted(scores[0].tolist())


def test_a_corpus_exactly_as_deep_as_the_cut_is_returned_whole():
    faiss = FakeFaiss([0.3, 0.9, 0.1, 0.7, 0.5])
    assert _top(faiss, 1.0, 5) == _expected(faiss.vectors[:, 0], 1.0, 5)


@pytest.mark.parametrize("depth", [1, 4, 16])
def test_well_separated_scores_need_one_search(depth):
    values = np.random.default_rng(depth).permutation(np.linspace(0.0, 1.0, 100))
    faiss = FakeFaiss(values)
    assert _top(faiss, 1.0, depth) == _expected(values, 1.0, depth)
    assert faiss.calls == [depth + 1 + depth // 8]  # a little deeper than kept, and never again


def test_a_search_that_already_holds_the_whole_corpus_is_not_repeated():
    values = [0.9, 0.8, 0.7, 0.5, 0.5]  # depth 4: the first search asks for 5 of 5, and the cut ties
    faiss = FakeFaiss(values)
    assert _top(faiss, 1.0, 4) == _expected(values, 1.0, 4)
    assert faiss.calls == [5]


# A true top-3 document A that FAISS scores just below the cut's document B: within the margin the exact rule
# allows (RESCORE_MARGIN × (|cut| + |top|)), outside the margin of any other reading of it.
MARGIN_CASES = {
    # large magnitudes: the margin is the product, not the quotient
    "large": ([1000.0, 800.0, 500.0, 499.97, 10.0, 9.0, 8.0, 7.0], {2: -0.02, 3: +0.02}),
    # negative scores: |cut| (-100) is far greater than |the score above it| (-1)
    "negative": ([-0.5, -1.0, -100.0, -100.003, -200.0, -201.0, -202.0, -203.0], {2: -0.0008, 3: +0.0028}),
    # the top score (1000) is far greater than the second (1): the margin uses the top one
    "top": ([1000.0, 1.0, 0.5, 0.4999, 0.1, 0.09, 0.08, 0.07], {2: -0.00005, 3: +0.00015}),
}


@pytest.mark.parametrize("case", sorted(MARGIN_CASES))
def test_a_top_document_faiss_ranks_just_below_the_cut_is_rescored_in(case):
    values, errors = MARGIN_CASES[case]
    error = np.zeros(len(values))
    for row, delta in errors.items():
        error[row] = delta
    faiss = FakeFaiss(values, error)
    reported, _ = faiss.search(np.array([[1.0]], dtype=np.float32), 4)
    cut, top = float(reported[0, 2]), float(reported[0, 0])
    below = cut - float(reported[0, 3])
    assert faiss.calls.pop() == 4 and reported[0, 2] > reported[0, 3]  # FAISS puts B above A...
    assert 0 < below < RESCORE_MARGIN * (abs(cut) + abs(top))  # ...by less than the margin
    assert _top(faiss, 1.0, 3) == _expected(values, 1.0, 3)
    assert 2 in _top(faiss, 1.0, 3)[0] and 3 not in _top(faiss, 1.0, 3)[0]


def test_all_zero_scores_keep_the_greatest_doc_ids_from_the_whole_corpus():
    values = np.random.default_rng(0).random(64)
    faiss = FakeFaiss(values)
    assert _top(faiss, 0.0, 4) == _expected(values, 0.0, 4)  # every score 0: the tie rule alone decides


def test_ties_that_end_inside_the_first_deeper_search_need_exactly_one_more():
    # depth 4: the first search returns 5, all tied from the 4th on; the second returns 10, the last one below
    # the cut but the one before it tied (ties fill ranks 4-9 of 1-based ranks 1-10)
    values = [0.9, 0.8, 0.7] + [0.5] * 6 + [0.2 - 0.001 * i for i in range(31)]
    faiss = FakeFaiss(values)
    assert _top(faiss, 1.0, 4) == _expected(values, 1.0, 4)
    assert faiss.calls == [5, 10]
