"""BM25: the analyzer, Lucene's scoring formula by hand, only matching documents, the pipeline path."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner

from harness.cli import cli
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
    result = CliRunner().invoke(cli, ["-q", "evaluate", str(tiny_beir), "--model", "bm25", "--k", "1,10", "--json",
                                      "--output-dir", str(tmp_path)])
    assert result.exit_code == 0, result.stderr
    import json

    data = json.loads(result.stdout)
    assert data["model"] == "bm25" and data["config"]["retriever"] == "bm25s"
    assert data["config"]["k1"] == 0.9 and data["config"]["b"] == 0.4 and data["config"]["stemmer"] == "porter"
    assert data["per_query"]["q3"]["nDCG@10"] == 0.0  # "zucchini" matches nothing
    assert data["per_query"]["q1"]["Recall@10"] == 1.0  # "banana" finds d1 and d2
    assert (tmp_path / "tiny" / "bm25" / "test.run.trec").is_file()
