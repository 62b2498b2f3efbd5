"""Learned sparse retrieval with a tiny random-weight SPLADE-style model (2-layer BERT with an MLM head
and max pooling) built here and loaded through sentence-transformers' SparseEncoder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_runner import invoke

WORDS = "apple banana cherry date zucchini fruit stone fig elder grape kiwi lemon query doc".split()


@pytest.fixture(scope="session")
def tiny_sparse_encoder(tmp_path_factory) -> Path:
    from tiny_models import sparse_encoder

    root = tmp_path_factory.mktemp("tiny-sparse")
    return sparse_encoder(root / "model", WORDS, raw=root / "mlm")


def _evaluate(folder, tmp_path, model, *options):
    return invoke(
        [
            "-q",
            "evaluate",
            str(folder),
            "--model",
            str(model),
            "--output-dir",
            str(tmp_path / "r"),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--json",
            *options,
        ],
    )


def test_sparse_retrieval_equals_a_brute_force_dot_product(tiny_sparse_encoder, tiny_beir, tmp_path):
    from sentence_transformers import SparseEncoder

    from harness.io.formats import iter_corpus, iter_queries
    from harness.io.trec import read_qrels
    from harness.records import doc_text

    result = _evaluate(tiny_beir, tmp_path, tiny_sparse_encoder, "--k", "1,3", "--top-k", "3")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    model = SparseEncoder(str(tiny_sparse_encoder), device="cpu")
    docs = list(iter_corpus(tiny_beir / "corpus.jsonl"))
    judged = read_qrels(tiny_beir / "qrels" / "test.tsv")
    queries = [q for q in iter_queries(tiny_beir / "queries.jsonl") if q.query_id in judged]
    doc_vectors = model.encode_document([doc_text(d) for d in docs], convert_to_sparse_tensor=True).to_dense().numpy()
    query_vectors = model.encode_query([q.text for q in queries], convert_to_sparse_tensor=True).to_dense().numpy()
    # The ranking, brute force: every positive dot product, sorted in trec_eval's order (score, then
    # doc_id, descending), the top 3 (--top-k 3: the cut is exercised).
    expected = {}
    for query, q_vector in zip(queries, query_vectors):
        scored = []
        for doc, d_vector in zip(docs, doc_vectors):
            score = float(sum(float(a) * float(b) for a, b in zip(q_vector, d_vector) if a and b))
            if score > 0:
                scored.append((score, doc.doc_id))
        scored.sort(reverse=True)
        expected[query.query_id] = scored[:3]
    got: dict[str, list[tuple[float, str]]] = {}
    (run_file,) = (tmp_path / "r").glob("*/*/test*.run.trec")
    for line in run_file.read_text().splitlines():
        query_id, _, doc_id, rank, score, _ = line.split()
        got.setdefault(query_id, []).append((float(score), doc_id))
        assert int(rank) == len(got[query_id])
    assert set(got) == {q for q, hits in expected.items() if hits}
    for query_id, hits in got.items():
        assert [doc_id for _, doc_id in hits] == [doc_id for _, doc_id in expected[query_id]]
        np.testing.assert_allclose([s for s, _ in hits], [s for s, _ in expected[query_id]], rtol=1e-5)
    assert data["config"]["retriever"] == "learned-sparse"
    active = (doc_vectors > 0).sum(axis=1).mean()
    assert data["config"]["mean_active_dims_doc"] == pytest.approx(active)
    assert data["config"]["expected_flops"] > 0 and data["config"]["mean_active_dims_query"] > 0


def test_sparse_rows_are_cached_without_pickle_and_reused(tiny_sparse_encoder, tiny_beir, tmp_path):
    first = json.loads(_evaluate(tiny_beir, tmp_path, tiny_sparse_encoder).stdout)
    second = json.loads(_evaluate(tiny_beir, tmp_path, tiny_sparse_encoder).stdout)
    assert (first["config"]["embedding_cache"], second["config"]["embedding_cache"]) == ("stored", "hit")
    assert first["metrics"] == second["metrics"]
    (chunk,) = (tmp_path / "cache").glob("embeddings/*/chunk-00000.npz")
    with np.load(chunk, allow_pickle=False) as parts:
        assert parts["data"].dtype == np.float32 and set(parts.files) == {"data", "indices", "indptr", "shape"}


def test_a_sparse_encoder_is_not_a_reranker(tiny_sparse_encoder, tiny_beir, tmp_path):
    result = _evaluate(tiny_beir, tmp_path, "bm25", "--rerank", str(tiny_sparse_encoder))
    assert result.exit_code == 1 and "is a sparse-encoder" in result.stderr


def test_a_sparse_encoders_cost_record_says_its_rows_came_from_the_cache(tiny_sparse_encoder, tiny_beir, tmp_path):
    first = json.loads(_evaluate(tiny_beir, tmp_path, tiny_sparse_encoder).stdout)
    second = json.loads(_evaluate(tiny_beir, tmp_path, tiny_sparse_encoder).stdout)
    assert first["cost"]["cached"] == [] and first["timings"]["encode_corpus"] > 0 and first["cost"]["docs_per_s"]
    assert second["cost"]["cached"] == ["encode_corpus"] and second["timings"]["encode_corpus"] == 0
    assert second["cost"]["cache_bytes"] == sum(
        p.stat().st_size for p in (tmp_path / "cache" / "embeddings").rglob("*") if p.is_file()
    )
    latency = second["cost"]["search_latency"]
    assert latency["queries"] == 3 and latency["p50_ms"] <= latency["p95_ms"] <= latency["p99_ms"]


@pytest.mark.parametrize("sizes", [(1,), (5, 0, 7, 3), (64, 64, 17)])
def test_postings_built_in_place_equal_scipys_stack_and_transpose(sizes):
    """The in-place posting build gives exactly scipy's vstack(chunks).T.tocsr() (uneven and empty chunks)."""
    import numpy as np
    import scipy.sparse

    from harness.retrieval.learned_sparse import postings_from_chunks

    rng = np.random.default_rng(len(sizes))
    chunks = []
    for n in sizes:
        nnz = n * 4
        rows, columns = rng.integers(0, max(n, 1), nnz), rng.integers(0, 9, nnz)
        chunks.append(scipy.sparse.csr_matrix((rng.random(nnz, dtype=np.float32), (rows, columns)), shape=(n, 9)))
    expected = scipy.sparse.vstack(chunks, format="csr").T.tocsr()
    got = postings_from_chunks(list(chunks), 9)
    assert got.shape == expected.shape
    for name in ("indptr", "indices", "data"):
        assert np.array_equal(getattr(got, name), getattr(expected, name)), name
