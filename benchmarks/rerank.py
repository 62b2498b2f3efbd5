"""Reranking cost on this CPU, and what the score cache saves in a depth sweep.

Usage (from the repository root):

    python benchmarks/rerank.py [--queries 30] [--depths 10,50,100]
    python benchmarks/rerank.py --queries 300 --depths 100 --backends torch,onnx-int8,openvino-int8
    python benchmarks/rerank.py --trained --queries 300 --depths 100 --backends torch,onnx-int8,openvino-int8
    python benchmarks/rerank.py --smoke     # seconds: the lesson eval set, a 2-layer cross-encoder

The cross-encoder has the architecture of ``cross-encoder/ms-marco-MiniLM-L-6-v2`` (BERT, 6 layers,
hidden 384, 12 heads, FFN 1536, max length 512) with random weights: throughput depends on the
architecture and the text lengths, not on the weights, and no model hub is reachable here. The first
stage is BM25 on SciFact (the first `--queries` test queries); the depths are reranked in order with
one score cache, as a user's sweep would be, and each depth's wall time and new pairs are printed
next to what it would cost without the cache (one depth with ``--backends``: no sweep, the torch row is it).

With ``--backends``, the deepest depth is then reranked once per backend (`harness.runtimes.heads`, no score cache;
``openvino-int8`` calibrated on a seeded sample of these pairs): pairs/s, nDCG@10 of the reranked run and its
difference to torch fp32's, and the correlation of the scores with torch's. With random weights the nDCG@10 is no
reranker's quality, only how far a backend moves a ranking. With ``--trained`` the cross-encoder is the one
`benchmarks/train_cross_encoder.py` builds from the packaged MiniLM on the dataset's *train* split (cached; trained
first when not), so the nDCG@10 and its move under int8 are a trained reranker's, on the test queries.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _smoke  # noqa: E402


def main() -> int:
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    from harness.io.formats import iter_corpus, locate_beir_folder
    from harness.records import doc_text
    from harness.retrieval.bm25 import BM25Retriever, BM25Spec
    from harness.retrieval.models import resolve_model_source
    from harness.retrieval.rerank import Reranker, RerankSpec, ScoreCache, rerank

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--depths", default="10,50,100")
    parser.add_argument("--data", default="../shared/data/beir/scifact")
    parser.add_argument(
        "--backends", default="", help="e.g. torch,onnx-int8,openvino-int8 (the first is the reference)"
    )
    parser.add_argument(
        "--trained",
        action="store_true",
        help="the cross-encoder benchmarks/train_cross_encoder.py trains on the train split (cached), not random weights",
    )
    parser.add_argument("--cache-dir", default=None, help="where the trained cross-encoder is cached [the harness's]")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="seconds, on the lesson eval set, a 2-layer cross-encoder: proves the script runs",
    )
    args = parser.parse_args()
    print(_smoke.host_line())
    if args.smoke:
        print(_smoke.NOTICE)
        args.data, args.queries, args.depths = str(_smoke.DEMO), 5, "3,10"
        args.backends = args.backends or "torch,onnx-int8,openvino-int8"
    size = (
        {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
        if args.smoke
        else {"hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12, "intermediate_size": 1536}
    )
    depths = [int(d) for d in args.depths.split(",")]
    folder = locate_beir_folder(args.data, "test")
    queries, qrels = reranked_queries(folder, args.queries)
    retriever = BM25Retriever(BM25Spec())
    retriever.index(iter_corpus(folder.corpus), progress=False)
    first = retriever.search(queries, max(depths))
    documents = {doc.doc_id: doc_text(doc) for doc in iter_corpus(folder.corpus)}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "minilm-l6-cross-encoder"
        tokenizer = BertTokenizerFast.from_pretrained(resolve_model_source("all-MiniLM-L6-v2"))
        torch.manual_seed(0)
        BertForSequenceClassification(
            BertConfig(vocab_size=tokenizer.vocab_size, **size, max_position_embeddings=512, num_labels=1)
        ).save_pretrained(model_dir)
        tokenizer.save_pretrained(model_dir)
        if args.trained:
            model_dir = _trained(args, model_dir)
        texts = {q.query_id: q.text for q in queries}
        print(
            f"BM25 top {max(depths)} for {len(queries)} {Path(args.data).name} queries; "
            f"{size['num_hidden_layers']}-layer, hidden-{size['hidden_size']} cross-encoder, "
            f"{torch.get_num_threads()} threads"
        )
        cache_root = Path(tmp) / "cache"
        fingerprint = None
        sweep = depths if len(depths) > 1 or not args.backends else []  # one depth: the backends' torch row is it
        for depth in sweep:
            reranker = Reranker(RerankSpec(str(model_dir), depth=depth))
            fingerprint = fingerprint or reranker.fingerprint()
            cache = ScoreCache(cache_root, {**fingerprint, "name": "bench"})
            started = time.perf_counter()
            _, counts = rerank(first, texts, documents, reranker, cache, progress=False)
            seconds = time.perf_counter() - started
            new = counts["pairs"] - counts["cached"]
            rate = new / seconds if new else float("nan")
            print(
                f"depth {depth:>4}: {counts['pairs']:>6} pairs, {new:>6} scored ({counts['cached']} cached) in "
                f"{seconds:6.1f} s = {rate:5.1f} pairs/s; without the cache {counts['pairs'] / rate:6.1f} s"
            )
        if args.backends:
            compare_backends(
                args.backends.split(","), model_dir, max(depths), first, texts, documents, qrels, cache_root
            )
    return 0


def reranked_queries(folder, count: int):
    """The first `count` judged test queries of `folder`, and their judgments alone: the queries reranked are every
    mean's denominator (the split's other judged queries would count as zeros)."""
    from harness.io.formats import iter_queries
    from harness.io.trec import read_qrels
    from harness.records import Qrels

    qrels = read_qrels(folder.qrels)
    queries = [q for q in iter_queries(folder.queries) if q.query_id in qrels][:count]
    return queries, Qrels({q.query_id: qrels[q.query_id] for q in queries})


def _trained(args, tiny: Path) -> Path:
    """The cross-encoder trained on the dataset's train split (the smoke run: the tiny one, on its test split)."""
    from train_cross_encoder import SMOKE_SETTINGS, trained_cross_encoder

    from harness.io.cache import cache_dir

    if args.smoke:
        return trained_cross_encoder(Path(args.data), tiny.parent / "cache", "test", str(tiny), SMOKE_SETTINGS)
    folder = trained_cross_encoder(Path(args.data), cache_dir(args.cache_dir))
    record = json.loads((folder / "training.json").read_text(encoding="utf-8"))
    print(f"trained cross-encoder: {folder} ({record['groups']} groups of the {record['split']} split, seed 0)")
    return folder


def compare_backends(backends, model_dir, depth, first, texts, documents, qrels, cache_root) -> None:
    """Rerank `first` at `depth` once per backend: pairs/s, nDCG@10 (and its move from the first backend's), the
    scores' correlation with the first backend's."""
    import numpy as np

    from harness.evaluation.metrics import evaluate, parse_metric
    from harness.retrieval.rerank import Reranker, RerankSpec, ScoreCache, rerank
    from harness.runtimes.calibration import pair_calibration
    from harness.runtimes.heads import wrap_reranker
    from harness.runtimes.registry import runtime

    pairs = [(texts[q], documents[hit.doc_id]) for q in first for hit in first[q][:depth]]
    print(f"first stage (BM25) nDCG@10 {evaluate(qrels, first, [parse_metric('nDCG@10')]).means['nDCG@10']:.4f}")
    torch_reranker = Reranker(RerankSpec(str(model_dir), depth=depth))
    reference = None
    for backend in backends:
        model = wrap_reranker(runtime(backend), torch_reranker, cache_root, pair_calibration(pairs))
        started = time.perf_counter()
        run, counts = rerank(first, texts, documents, model, ScoreCache(None, {}), progress=False)
        seconds = time.perf_counter() - started
        ndcg = evaluate(qrels, run, [parse_metric("nDCG@10")]).means["nDCG@10"]
        scores = np.array([run.scores[q][hit.doc_id] for q in first for hit in first[q][:depth]], dtype=np.float64)
        reference = reference or (ndcg, scores)
        print(
            f"{backend:>14}: {counts['pairs']} pairs in {seconds:6.1f} s = {counts['pairs'] / seconds:6.1f} pairs/s; "
            f"nDCG@10 {ndcg:.4f} ({ndcg - reference[0]:+.4f}); score correlation "
            f"{np.corrcoef(scores, reference[1])[0, 1]:.4f}"
        )


if __name__ == "__main__":
    sys.exit(main())
