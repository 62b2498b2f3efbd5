"""Peak memory and time per stage of `evaluate` on synthetic corpora of 100k → 1M documents.

Usage (from the repository root):

    python benchmarks/scale.py [--docs 100000,300000,1000000] [--indexes flat,ivfpq] [--workdir /tmp/scale]
    python benchmarks/scale.py --encoder-rates [--data ../shared/data/beir]
    python benchmarks/scale.py --smoke     # seconds: 1,000 documents, flat and IVF, and the encoder rates

The corpus is generated on the fly (about 30 words a document from a 20,000-word vocabulary; 1,000
queries with one judged document each). Encoding uses the hashing stand-in (`--model hash:384`) so the
benchmark measures the harness — reading, hashing, indexing, searching, scoring — not a model. Each
run is a fresh process with an empty embedding cache (as a first run has); its peak RSS, and its peak
anonymous memory (RSS without the pages of memory-mapped cache files, sampled every 20 ms), are
compared with the bytes of its embeddings (n × 384 × 4).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import _smoke

DIM = 384
CHILD = r"""
import json, resource, sys, threading, time
from pathlib import Path
from harness.retrieval.index import IndexSpec
from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset

peak_anon = 0
def sample_anonymous_memory():
    # Peak RSS counts the pages of memory-mapped files too (which the kernel can drop and re-read);
    # the process's own, anonymous memory is what bounds the corpus a machine can take.
    global peak_anon
    while True:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("RssAnon:"):
                    peak_anon = max(peak_anon, int(line.split()[1]))
        time.sleep(0.02)
threading.Thread(target=sample_anonymous_memory, daemon=True).start()
start = time.perf_counter()
spec = IndexSpec(sys.argv[2], pq_m=48) if sys.argv[2] != "flat" else IndexSpec()
result = evaluate_dataset(EvaluateConfig(dataset_path=Path(sys.argv[1]), model="hash:%d", output_dir=None,
                                         progress=False, cache_dir=Path(sys.argv[3]), index=spec,
                                         k_values=(10, 100))).result
print("RESULT " + json.dumps({"seconds": time.perf_counter() - start, "timings": result.timings,
      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "peak_anon_mb": peak_anon / 1024,
      "ndcg10": result.metrics["nDCG@10"], "quality": result.index_quality}))
""" % DIM


def make_corpus(folder: Path, n_docs: int, seed: int = 0) -> int:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(20_000)]
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    targets = rng.sample(range(n_docs), 1000)
    texts = {}
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as handle:
        for i in range(n_docs):
            text = " ".join(rng.choices(vocab, k=30))
            if i in targets:
                texts[i] = text
            handle.write(json.dumps({"_id": f"doc{i}", "title": "", "text": text}) + "\n")
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as q, \
            open(folder / "qrels" / "test.tsv", "w", encoding="utf-8") as r:
        r.write("query-id\tcorpus-id\tscore\n")
        for j, i in enumerate(targets):
            words = texts[i].split()
            q.write(json.dumps({"_id": f"q{j}", "text": " ".join(rng.sample(words, 8))}) + "\n")
            r.write(f"q{j}\tdoc{i}\t1\n")
    return (folder / "corpus.jsonl").stat().st_size


MSMARCO_DOCS = 8_841_823
MSMARCO_WORDS = 56  # mean passage length in words (BEIR paper, table 1)


def encoder_rates(data: Path, sample: int, model: str | None = None) -> dict[str, float]:
    """The default model's documents/s on MS MARCO-length passages (texts of the BEIR folder `data`, cut
    to 56 words; SciFact's in BENCHMARKS.md)."""
    import tempfile
    import time

    from harness.retrieval.encode import encode_corpus, load_encoder
    from harness.io.formats import iter_corpus, locate_beir_folder
    from harness.retrieval.onnx_backend import onnx_encoder
    from harness.records import Doc, doc_text

    folder = locate_beir_folder(data, "test")
    docs = [Doc(doc.doc_id, "", " ".join(doc_text(doc).split()[:MSMARCO_WORDS]))
            for _, doc in zip(range(sample), iter_corpus(folder.corpus))]
    torch_encoder = load_encoder(*([model] if model else []))
    rates = {}
    with tempfile.TemporaryDirectory() as cache:
        for name, encoder in (("torch", torch_encoder), ("onnx-int8", onnx_encoder(torch_encoder, "onnx-int8",
                                                                                  Path(cache)))):
            started = time.perf_counter()
            for _ in encode_corpus(encoder, iter(docs), progress=False):
                pass
            rates[name] = len(docs) / (time.perf_counter() - started)
    return rates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", default="100000,300000,1000000")
    parser.add_argument("--indexes", default="flat,ivfpq")
    parser.add_argument("--workdir", default="/tmp/beir-harness-scale")
    parser.add_argument("--encoder-rates", action="store_true",
                        help="instead: the default model's speed on MS MARCO-length passages, for the projection")
    parser.add_argument("--data", default="../shared/data/beir")
    parser.add_argument("--smoke", action="store_true",
                        help="seconds: 1,000 documents (flat, ivf), then the encoder rates of a tiny random model")
    args = parser.parse_args()
    print(_smoke.host_line())
    if args.smoke:
        return smoke(args)
    if args.encoder_rates:
        print_rates(encoder_rates(Path(args.data) / "scifact", 1000))
        return 0
    return measure(args)


def print_rates(rates: dict[str, float]) -> None:
    for name, rate in rates.items():
        print(f"{name:<10} {rate:7.1f} docs/s on {MSMARCO_WORDS}-word passages -> MS MARCO's "
              f"{MSMARCO_DOCS:,} passages in {MSMARCO_DOCS / rate / 3600:6.1f} h")


def smoke(args) -> int:
    """Both modes on tiny inputs, in a temporary folder."""
    print(_smoke.NOTICE)
    work = _smoke.scratch("scale")
    try:
        args.docs, args.indexes, args.workdir = "1000", "flat,ivf", str(work)
        status = measure(args)
        print_rates(encoder_rates(_smoke.DEMO, 15, str(_smoke.tiny_model(work))))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return status


def measure(args) -> int:
    """Peak memory and stage times of `evaluate` per corpus size and index."""
    baseline = json.loads(subprocess.run(
        [sys.executable, "-c", "import json, resource; import harness.pipeline.evaluate, numpy, faiss, pytrec_eval; "
         "print(json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))"],
        capture_output=True, text=True, check=True).stdout)
    print(f"baseline (python + harness + numpy + faiss + pytrec_eval imported): {baseline:.0f} MB")
    print(f"{'docs':>9} {'corpus MB':>9} {'index':<6} {'wall s':>7} {'peak MB':>8} {'anon MB':>8} {'emb MB':>7} "
          f"{'peak-base-emb MB':>16}  stages (s)                                     nDCG@10  recall-of-exact@100")
    for n in (int(x) for x in args.docs.split(",")):
        folder = Path(args.workdir) / f"n{n}"
        shutil.rmtree(folder, ignore_errors=True)
        size = make_corpus(folder, n)
        for kind in args.indexes.split(","):
            cache = folder / f"cache-{kind}"  # a cold cache per run: embeddings are written, then mapped
            proc = subprocess.run([sys.executable, "-c", CHILD, str(folder), kind, str(cache)], capture_output=True,
                                  text=True)
            shutil.rmtree(cache, ignore_errors=True)
            if proc.returncode != 0:
                print(proc.stderr[-2000:])
                return 1
            r = json.loads(next(l for l in proc.stdout.splitlines() if l.startswith("RESULT "))[7:])
            emb = n * DIM * 4 / 2**20
            stages = ", ".join(f"{k} {v:.1f}" for k, v in r["timings"].items() if k != "total")
            print(f"{n:>9,} {size / 2**20:>9.0f} {kind:<6} {r['seconds']:>7.1f} {r['peak_rss_mb']:>8.0f} "
                  f"{r['peak_anon_mb']:>8.0f} {emb:>7.0f} "
                  f"{r['peak_rss_mb'] - baseline - emb:>16.0f}  {stages:<46} {r['ndcg10']:.4f}  "
                  f"{r['quality'].get('recall_of_exact@100', 1.0):.4f}", flush=True)
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
