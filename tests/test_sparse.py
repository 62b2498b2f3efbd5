"""BM25: the analyzer, Lucene's scoring formula by hand, only matching documents, the pipeline path."""

from __future__ import annotations

import math

import pytest
from cli_runner import invoke

from harness.records import Doc, Query
from harness.retrieval.bm25 import LUCENE_STOPWORDS, Analyzer, BM25Retriever, BM25Spec


def test_analyzer_is_lucene_english_like():
    analyze = Analyzer()
    assert analyze("The Dog's RUNNING into the gardens, and it jumped!") == ["dog", "run", "garden", "jump"]
    assert analyze("") == [] and analyze("the and of") == []
    assert len(LUCENE_STOPWORDS) == 33


def test_scores_follow_lucene_bm25_by_hand():
    docs = [Doc("a", "", "apple banana apple"), Doc("b", "", "banana cherry"), Doc("c", "", "cherry date fig")]
    retriever = BM25Retriever(BM25Spec(k1=0.9, b=0.4))
    retriever.index(iter(docs), progress=False)
    run = retriever.search([Query("q", "apple")], depth=10)
    n, df, tf, dl, avgdl = 3, 1, 2, 3, (3 + 2 + 3) / 3
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    expected = idf * tf / (tf + 0.9 * (1 - 0.4 + 0.4 * dl / avgdl))
    assert [hit.doc_id for hit in run["q"]] == ["a"]  # b and c match nothing and are not returned
    assert run["q"][0].score == pytest.approx(expected, rel=1e-5)


def test_queries_without_terms_get_no_results():
    retriever = BM25Retriever()
    retriever.index(iter([Doc("a", "", "apple")]), progress=False)
    run = retriever.search([Query("q1", "the of and"), Query("q2", "zucchini"), Query("q3", "apples")], depth=5)
    assert run["q1"] == () and run["q2"] == () and [h.doc_id for h in run["q3"]] == ["a"]


def test_bm25_through_the_cli(tiny_beir, tmp_path):
    result = invoke(
        ["-q", "evaluate", str(tiny_beir), "--model", "bm25", "--k", "1,10", "--json", "--output-dir", str(tmp_path)],
    )
    assert result.exit_code == 0, result.stderr
    import json

    data = json.loads(result.stdout)
    assert data["model"] == "bm25" and data["config"]["retriever"] == "bm25s"
    assert data["config"]["k1"] == 0.9 and data["config"]["b"] == 0.4 and data["config"]["stemmer"] == "porter"
    assert data["per_query"]["q3"]["nDCG@10"] == 0.0  # "zucchini" matches nothing
    assert data["per_query"]["q1"]["Recall@10"] == 1.0  # "banana" finds d1 and d2
    assert (tmp_path / "tiny" / "bm25" / "test.run.trec").is_file()


def _bm25s_on_string_tokens(docs, queries, depth):
    """The reference: bm25s indexing the analyzed terms as lists of str (the harness's path before the term-ids build)."""
    import bm25s

    spec, analyze = BM25Spec(), Analyzer()
    model = bm25s.BM25(k1=spec.k1, b=spec.b, method=spec.method)
    model.index([analyze(f"{doc.title} {doc.text}".strip()) for doc in docs], show_progress=False)
    expected = {query.query_id: [] for query in queries}
    searchable = [(query.query_id, analyze(query.text)) for query in queries if analyze(query.text)]
    for query_id, tokens in searchable:
        # Every document's score, then the ranking rule by hand (float32 score, then doc_id bytes, descending):
        # bm25s's own top-k keeps whichever of the documents tied at the cut its heap met, the rule the greater ids.
        scores = model.get_scores(tokens).tolist()
        ranked = sorted(
            ((s, docs[r].doc_id.encode(), docs[r].doc_id) for r, s in enumerate(scores) if s > 0), reverse=True
        )
        expected[query_id] = [(doc_id, s) for s, _, doc_id in ranked[:depth]]
    return expected


def _jsonl(path):
    import json

    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _corpora():
    import random
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    for folder in (root / "harness" / "data" / "demo", root / "tests" / "data" / "tiny"):
        docs = [Doc(d["_id"], d.get("title", ""), d["text"]) for d in _jsonl(folder / "corpus.jsonl")]
        queries = [Query(q["_id"], q["text"]) for q in _jsonl(folder / "queries.jsonl")]
        yield folder.name, docs, queries
    rng = random.Random(7)  # a small vocabulary and repeated documents: many tied scores
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "the", "of"]
    texts = [" ".join(rng.choices(words, k=rng.randint(0, 9))) for _ in range(150)]
    docs = [Doc(f"d{i}", "", texts[i % 90]) for i in range(150)]
    yield "ties", docs, [Query(f"q{i}", " ".join(rng.choices(words, k=3))) for i in range(40)]


@pytest.mark.parametrize("name,docs,queries", list(_corpora()), ids=lambda v: v if isinstance(v, str) else "")
def test_term_ids_index_ranks_and_scores_as_bm25s_on_strings(name, docs, queries):
    """Terms kept as 4-byte ids give exactly the documents and scores of bm25s on the term strings."""
    retriever = BM25Retriever()
    retriever.index(iter(docs), progress=False)
    for depth in (3, 100):
        run = retriever.search(queries, depth)
        expected = _bm25s_on_string_tokens(docs, queries, depth)
        # Documents and their scores, bit for bit; the run orders them by its own tie rule (score, doc id).
        assert {q: {h.doc_id: h.score for h in run[q]} for q in expected} == {
            q: dict(hits) for q, hits in expected.items()
        }, name
