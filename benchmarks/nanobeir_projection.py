"""A quick BEIR on this machine: NanoBEIR's 13 datasets with the default model, projected.

Figures: BENCHMARKS.md, "NanoBEIR: a quick BEIR on this machine".

Usage (from the repository root):

    python benchmarks/nanobeir_projection.py [--data ../shared/data/beir/scifact] [--texts 1000] [--model NAME]
    python benchmarks/nanobeir_projection.py --smoke     # seconds: the lesson eval set, the hashing encoder

NanoBEIR's files live on Hugging Face, which this machine cannot reach, so the sweep is not run; instead
this measures the default model's encoding rate here on SciFact abstracts cut to 60 words (passage-like:
MS MARCO, NQ, HotpotQA, DBpedia) and whole (long: SciFact, NFCorpus, ArguAna, Touché; the model truncates
at 256 word pieces), and projects the time of NanoBEIR's documents (the registry's counts) at each rate.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _smoke  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data/beir/scifact"))
    parser.add_argument("--texts", type=int, default=1000)
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--smoke", action="store_true", help="seconds, on the lesson eval set: proves the script runs")
    args = parser.parse_args()
    print(_smoke.host_line())
    if args.smoke:
        print(_smoke.NOTICE)
        args.data, args.model, args.texts = _smoke.DEMO, "hash:64", 15
    from itertools import islice

    from harness.datasets import registry
    from harness.io.formats import iter_corpus
    from harness.records import doc_text
    from harness.retrieval.encode import load_encoder

    encoder = load_encoder(args.model)
    texts = [doc_text(doc) for doc in islice(iter_corpus(next(args.data.glob("corpus.jsonl*"))), args.texts)]
    encoder.encode_docs(texts[:32])  # warm-up
    rates = {}
    for kind, batch in (("passage (60 words)", [" ".join(t.split()[:60]) for t in texts]), ("long (whole)", texts)):
        started = time.perf_counter()
        encoder.encode_docs(batch)
        rates[kind] = len(batch) / (time.perf_counter() - started)
    nano = registry.get("nanobeir")
    docs = {name: registry.get(f"nanobeir/{name}").n_docs for name in nano.subsets}
    total = sum(docs.values())
    print(f"NanoBEIR: {len(docs)} datasets, {total:,} documents, {nano.n_queries} queries")
    for kind, rate in rates.items():
        print(f"  {kind:<20} {rate:6.1f} docs/s  → all documents at this rate: {total / rate / 60:5.1f} min")


if __name__ == "__main__":
    main()
