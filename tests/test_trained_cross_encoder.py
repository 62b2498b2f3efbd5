"""The trained cross-encoder behind the reranker's figures (`benchmarks/train_cross_encoder.py`) and the queries its
benchmark reranks (`benchmarks/rerank.py`): each group holds a judged document and unjudged ones from BM25's top
`pool`, drawn and shuffled by the seed; the listwise loss puts the judged document first; the saved tokenizer keeps
the training's length; the benchmark's means are over the queries it reranks. Expected values come from loops
written here over the files the test wrote."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import _smoke  # noqa: E402
import train_cross_encoder  # noqa: E402


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Path:
    return _smoke.synthetic_beir(tmp_path_factory.mktemp("beir"), docs=120, queries=12, seed=3)


def _files(folder: Path) -> tuple[dict[str, str], dict[str, str], dict[str, set[str]]]:
    """(doc_id → text, query_id → text, query_id → judged doc ids), read here from the files."""
    docs = {}
    for line in (folder / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        docs[row["_id"]] = f"{row['title']} {row['text']}".strip()
    queries = {row["_id"]: row["text"] for row in map(json.loads, (folder / "queries.jsonl").read_text().splitlines())}
    judged: dict[str, set[str]] = {}
    for line in (folder / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        query, doc, grade = line.split("\t")
        if int(grade) >= 1:
            judged.setdefault(query, set()).add(doc)
    return docs, queries, judged


def _bm25_top(folder: Path, depth: int) -> dict[str, list[str]]:
    """BM25's ranking of each query (the first stage the groups are drawn from, not what is tested here)."""
    from harness.io.formats import iter_corpus, iter_queries, locate_beir_folder
    from harness.retrieval.bm25 import BM25Retriever, BM25Spec

    beir = locate_beir_folder(str(folder), "test")
    retriever = BM25Retriever(BM25Spec())
    retriever.index(iter_corpus(beir.corpus), progress=False)
    run = retriever.search(list(iter_queries(beir.queries)), depth)
    return {query: [hit.doc_id for hit in hits] for query, hits in run.items()}


@pytest.mark.parametrize("pool", [2, 4, 9])  # 2: exactly the negatives drawn, every query still kept
def test_each_group_is_a_judged_document_and_unjudged_ones_from_bm25_s_top_pool(synthetic, pool):
    docs, queries, judged = _files(synthetic)
    top = _bm25_top(synthetic, pool + 10)
    by_text = {text: doc_id for doc_id, text in docs.items()}
    groups = train_cross_encoder.training_groups(synthetic, "test", 2, pool, 0)
    expected = sorted((query, doc) for query in judged for doc in judged[query])
    query_of = {text: query for query, text in queries.items()}
    assert sorted((query_of[q], by_text[positive]) for q, positive, _ in groups) == expected
    for query_text, _, negatives in groups:
        query = query_of[query_text]
        unjudged = [doc for doc in top[query] if doc not in judged[query]][:pool]
        drawn = [by_text[text] for text in negatives]
        assert len(drawn) == 2 and len(set(drawn)) == 2 and set(drawn) <= set(unjudged), (query, drawn, unjudged)


def test_the_draws_and_their_order_follow_the_seed(synthetic):
    first = train_cross_encoder.training_groups(synthetic, "test", 2, 9, 0)
    assert train_cross_encoder.training_groups(synthetic, "test", 2, 9, 0) == first
    other = train_cross_encoder.training_groups(synthetic, "test", 2, 9, 1)
    assert sorted(map(str, other)) != sorted(map(str, first))  # other draws, not only another order
    _, queries, _ = _files(synthetic)
    in_files = {text: index for index, text in enumerate(queries.values())}
    assert [in_files[q] for q, _, _ in first] != sorted(in_files[q] for q, _, _ in first)  # shuffled


def test_training_ranks_each_judged_document_above_its_negatives_and_keeps_the_length(synthetic, tmp_path):
    """A few hundred steps on three groups of a tiny model: the listwise loss must lift each group's first
    document (the judged one) above the others it was trained against, and the saved tokenizer truncates at the
    training's length."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    groups = train_cross_encoder.training_groups(synthetic, "test", 2, 9, 0)[:3]
    base = _smoke.tiny_model(tmp_path / "base")
    settings = {**train_cross_encoder.SETTINGS, "max_length": 48, "groups_per_batch": 2, "epochs": 40, "lr": 3e-3}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: one thread, so parallel test workers do not oversubscribe the cores
    try:
        record = train_cross_encoder.train(groups, str(base), tmp_path / "out", settings)
    finally:
        torch.set_num_threads(threads)
    # 3 groups in batches of 2: two steps an epoch (the last one partial), the warm-up a tenth of them.
    assert record["steps"] == record["planned_steps"] == 80 and record["warmup_steps"] == 8 and record["groups"] == 3
    losses = record["losses"]
    assert len(losses) == 80 and record["first_loss"] == pytest.approx(losses[0], abs=1e-6)
    assert record["last_tenth_loss"] == pytest.approx(sum(losses[-8:]) / 8, abs=1e-5)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert tokenizer.model_max_length == 48
    model = AutoModelForSequenceClassification.from_pretrained(tmp_path / "out").eval()
    for query, positive, negatives in groups:
        features = tokenizer([query] * 3, [positive, *negatives], truncation=True, padding=True, return_tensors="pt")
        with torch.no_grad():
            scores = model(**features).logits.squeeze(-1).tolist()
        assert scores[0] > max(scores[1:]), scores


def test_the_rerank_benchmark_s_means_are_over_the_queries_it_reranks(synthetic, tmp_path):
    import shutil

    import rerank

    from harness.io.formats import locate_beir_folder

    folder = tmp_path / "beir"
    shutil.copytree(synthetic, folder)
    unjudged = "".join(json.dumps({"_id": f"u{i}", "text": f"unjudged {i}"}) + "\n" for i in range(3))
    (folder / "queries.jsonl").write_text(unjudged + (synthetic / "queries.jsonl").read_text(), encoding="utf-8")
    _, queries, judged = _files(folder)
    chosen, qrels = rerank.reranked_queries(locate_beir_folder(str(folder), "test"), 5)
    assert [q.query_id for q in chosen] == [q for q in queries if q in judged][:5]
    assert sorted(qrels) == sorted(q.query_id for q in chosen)
    assert all(set(qrels[q]) == judged[q] for q in qrels)
