"""The FAISS flat index: exact scores, doc_id mapping, trec_eval tie order, small corpora."""

from __future__ import annotations

import numpy as np

from harness.index import FlatIndex


def test_flat_index_returns_exact_inner_products_in_trec_order():
    index = FlatIndex(2)
    index.add(["a", "b"], np.array([[1, 0], [0, 1]], dtype=np.float32))
    index.add(["c"], np.array([[1, 0]], dtype=np.float32))  # ties with "a"
    assert len(index) == 3
    run = index.search(["q"], np.array([[1, 0.5]], dtype=np.float32), depth=3, name="t")
    assert [(h.doc_id, h.score) for h in run["q"]] == [("c", 1.0), ("a", 1.0), ("b", 0.5)]
    assert run.name == "t"


def test_depth_larger_than_corpus_and_empty_queries():
    index = FlatIndex(2)
    index.add(["a"], np.array([[1, 0]], dtype=np.float32))
    run = index.search(["q1", "q2"], np.array([[1, 0], [0, 1]], dtype=np.float32), depth=10)
    assert [len(run[q]) for q in ("q1", "q2")] == [1, 1]
    assert len(index.search([], np.zeros((0, 2), np.float32), depth=10)) == 0
