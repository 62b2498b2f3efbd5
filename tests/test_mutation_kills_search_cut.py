"""The exact top at the cut (`harness.retrieval.index.exact_top`): which candidates FAISS's scores let through,
and how often it searches again — against a brute-force ranking written here.

The vectors are one-dimensional, so every score is a value the test chose. A fake FAISS ranks the float32 scores
plus a chosen error per document (FAISS's own scores differ from the exact ones in the last bits) and counts its
calls. Cases that differ where the rule does: a corpus exactly as deep as the cut, a true top document FAISS
ranks just below the cut by less than the margin (at large, negative and mixed magnitudes, so every term of the
margin matters), all-zero scores (the floor equals the scores), and ties that need exactly one deeper search.
"""

from __future__ import annotations

import numpy as np
import pytest

from harness.retrieval.index import RESCORE_MARGIN, exact_top


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
