"""Peak memory and time per stage of `evaluate` on synthetic corpora, up to MS MARCO's size, in memory or streamed.

Usage (from the repository root):

    python benchmarks/scale.py [--docs 100000,300000,1000000] [--indexes flat,ivfpq] [--workdir /tmp/scale]
    python benchmarks/scale.py --docs 1000000 --dim 384 --queries 6980 --budgets none,2GB
    python benchmarks/scale.py --docs 8841823 --queries 6980 --budgets 3GB --plan   # what it needs, then stop
    python benchmarks/scale.py --encoder-rates [--data ../shared/data/beir]
    python benchmarks/scale.py --smoke     # seconds: 1,000 documents (flat, ivf), a streamed run, encoder rates

The corpus is generated on the fly (about 30 words a document from a 20,000-word vocabulary; `--queries`
queries with one judged document each). Encoding uses the hashing stand-in (``--model hash:DIM``) so the
benchmark measures the harness — reading, hashing, caching, indexing, searching, scoring — not a model.
Each run is a fresh process with an empty embedding cache (as a first run has); its own peak RSS, and its
peak anonymous memory (RSS without the pages of memory-mapped cache files, sampled every 20 ms), both measured by
`harness.metering.run_measured`, are compared with the bytes of its embeddings (n × dim × 4). `--budgets` runs each flat index once per
budget: ``none`` forces the in-memory index; a size (``3GB``; ``+300MB``: that much above the child
process's resident set at its start) is passed as ``--memory-budget``, so that a budget below the
embeddings takes the streamed search (`harness.retrieval.streamed`). Before running, the script prints
what each size needs (disk for the corpus and the cache, memory for the in-memory index) and refuses a
run the free disk cannot hold.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
from pathlib import Path

import _smoke

from harness.metering import run_measured

CHILD = r"""
import json, sys, time
from pathlib import Path
from harness.retrieval.index import IndexSpec
from harness.retrieval.streamed import parse_size, resident_bytes
from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset

folder, kind, cache, dim, budget = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
chunk_size = int(sys.argv[6])
if budget == "none":
    budget = 1 << 60  # no limit: the in-memory index
elif budget.startswith("+"):
    budget = resident_bytes() + parse_size(budget[1:])
else:
    budget = parse_size(budget)
start = time.perf_counter()
spec = IndexSpec(kind, pq_m=48) if kind != "flat" else IndexSpec()
result = evaluate_dataset(EvaluateConfig(dataset_path=folder, model=f"hash:{dim}", output_dir=None, progress=False,
                                         cache_dir=cache, index=spec, k_values=(10, 100), memory_budget=budget,
                                         chunk_size=chunk_size)).result
print("RESULT " + json.dumps({"seconds": time.perf_counter() - start, "timings": result.timings,
      "ndcg10": result.metrics["nDCG@10"], "quality": result.index_quality,
      "search": result.config.get("search", kind), "budget_mb": budget / 2**20}))
"""
BYTES_PER_DOC_TEXT = 260  # corpus.jsonl bytes a generated document takes (30 words of ~6 characters, the JSON)


def make_corpus(folder: Path, n_docs: int, n_queries: int = 1000, seed: int = 0) -> int:
    """Write the synthetic BEIR folder (documents streamed to disk, never held); returns the corpus bytes."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(20_000)]
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    targets = set(rng.sample(range(n_docs), min(n_queries, n_docs)))
    texts = {}
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as handle:
        for i in range(n_docs):
            text = " ".join(rng.choices(vocab, k=30))
            if i in targets:
                texts[i] = text
            handle.write(json.dumps({"_id": f"doc{i}", "title": "", "text": text}) + "\n")
    with (
        open(folder / "queries.jsonl", "w", encoding="utf-8") as q,
        open(folder / "qrels" / "test.tsv", "w", encoding="utf-8") as r,
    ):
        r.write("query-id\tcorpus-id\tscore\n")
        for j, i in enumerate(sorted(texts)):
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

    from harness.io.formats import iter_corpus, locate_beir_folder
    from harness.records import Doc, doc_text
    from harness.retrieval.encode import encode_corpus, load_encoder
    from harness.runtimes.onnx_backend import onnx_encoder

    folder = locate_beir_folder(data, "test")
    docs = [
        Doc(doc.doc_id, "", " ".join(doc_text(doc).split()[:MSMARCO_WORDS]))
        for _, doc in zip(range(sample), iter_corpus(folder.corpus))
    ]
    torch_encoder = load_encoder(*([model] if model else []))
    rates = {}
    with tempfile.TemporaryDirectory() as cache:
        for name, encoder in (
            ("torch", torch_encoder),
            ("onnx-int8", onnx_encoder(torch_encoder, "onnx-int8", Path(cache))),
        ):
            started = time.perf_counter()
            for _ in encode_corpus(encoder, iter(docs), progress=False):
                pass
            rates[name] = len(docs) / (time.perf_counter() - started)
    return rates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", default="100000,300000,1000000")
    parser.add_argument("--dim", type=int, default=384, help="dimension of the hashing encoder's vectors")
    parser.add_argument("--queries", type=int, default=1000, help="queries (MS MARCO dev: 6980)")
    parser.add_argument("--indexes", default="flat,ivfpq")
    parser.add_argument(
        "--budgets",
        default="none",
        help="for flat: none (in memory) and/or memory budgets (3GB, or +300MB above the child's start)",
    )
    parser.add_argument("--chunk-size", type=int, default=16384, help="documents a cache chunk holds")
    parser.add_argument("--workdir", default="/tmp/beir-harness-scale")
    parser.add_argument("--plan", action="store_true", help="print what each size needs, run nothing")
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="instead: which search path each public BEIR dataset takes at 384/768/1024 dimensions",
    )
    parser.add_argument("--machine-gb", type=float, default=24.0, help="with --sweep: the machine's memory")
    parser.add_argument(
        "--encoder-rates",
        action="store_true",
        help="instead: the default model's speed on MS MARCO-length passages, for the projection",
    )
    parser.add_argument("--data", default="../shared/data/beir")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="seconds: 1,000 documents (flat, ivf), a streamed run, the encoder rates of a tiny model",
    )
    args = parser.parse_args()
    print(_smoke.host_line())
    if args.smoke:
        return smoke(args)
    if args.sweep:
        print("\n".join(sweep(args.machine_gb)))
        return 0
    if args.encoder_rates:
        print_rates(encoder_rates(Path(args.data) / "scifact", 1000))
        return 0
    return measure(args)


def print_rates(rates: dict[str, float]) -> None:
    for name, rate in rates.items():
        print(
            f"{name:<10} {rate:7.1f} docs/s on {MSMARCO_WORDS}-word passages -> MS MARCO's "
            f"{MSMARCO_DOCS:,} passages in {MSMARCO_DOCS / rate / 3600:6.1f} h"
        )


def smoke(args) -> int:
    """Every mode on tiny inputs, in a temporary folder: 1,000 documents in memory (flat, ivf), 40,000 1,024-d
    vectors (156 MB, chunks of 1,000) streamed under a budget of 130 MB above the process's start, then the
    encoder rates."""
    print(_smoke.NOTICE)
    work = _smoke.scratch("scale")
    try:
        args.docs, args.indexes, args.workdir, args.queries = "1000", "flat,ivf", str(work), 200
        status = measure(args)
        args.docs, args.indexes, args.dim, args.budgets, args.chunk_size = "40000", "flat", 1024, "+130MB", 1000
        status = status or measure(args)
        print_rates(encoder_rates(_smoke.DEMO, 15, str(_smoke.tiny_model(work))))
        print("\n".join(sweep(24.0)[-3:]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return status


def sweep(machine_gb: float, dims: tuple[int, ...] = (384, 768, 1024)) -> list[str]:
    """A Markdown table: for each public BEIR dataset of the registry, its vectors' size at each dimension and the
    path `evaluate` takes with the default budget (half the memory available; available = the machine less 1 GiB
    for the OS; a process of 0.25 GiB before the corpus), by the rule `harness.pipeline.dense` applies."""
    from harness.datasets.registry import datasets
    from harness.retrieval.streamed import DEFAULT_BUDGET_FRACTION, in_memory_bytes

    budget = (machine_gb - 1) * 2**30 * DEFAULT_BUDGET_FRACTION
    lines = [
        f"default budget on a {machine_gb:g} GB machine: {budget / 2**30:.1f} GiB "
        f"({DEFAULT_BUDGET_FRACTION:.0%} of {machine_gb - 1:g} GiB available)",
        "",
        "| dataset | docs | queries | " + " | ".join(f"{dim}-d vectors → path" for dim in dims) + " |",
        "|---|---:|---:|" + "---|" * len(dims),
    ]
    for spec in sorted((s for s in datasets().values() if s.public), key=lambda s: -s.n_docs):
        cells = []
        for dim in dims:
            needed = 0.25 * 2**30 + in_memory_bytes(spec.n_docs, dim, spec.n_queries, 100)
            path = "in memory" if needed <= budget else "**streamed**"
            cells.append(f"{spec.n_docs * dim * 4 / 2**30:.2f} GiB → {path}")
        lines.append(f"| {spec.name} | {spec.n_docs:,} | {spec.n_queries:,} | " + " | ".join(cells) + " |")
    return lines


def needs(n: int, dim: int, queries: int, budgets: list[str], baseline_mb: float, chunk: int) -> list[str]:
    """What a run of `n` documents needs: disk (corpus, cache) and memory (in memory; streamed, its minimum)."""
    from harness.presentation import size_text
    from harness.retrieval.streamed import in_memory_bytes, plan_search

    emb = n * dim * 4
    base = int(baseline_mb * 2**20) + n * 24 + queries * dim * 4  # the process, the doc ids, the query vectors
    minimum = plan_search(1 << 62, base, queries, dim, 100, chunk).minimum
    lines = [
        f"{n:,} docs × {dim}: disk {size_text(n * BYTES_PER_DOC_TEXT, places=2)} corpus + {size_text(emb, places=2)} cache; "
        f"in memory ~{size_text(base + in_memory_bytes(n, dim, queries, 100, chunk), places=2)}; streamed: at least "
        f"{size_text(minimum, places=2)}"
    ]
    for budget in budgets:
        if budget not in ("none",) and not budget.startswith("+"):
            from harness.retrieval.streamed import parse_size

            size = parse_size(budget)
            path = "streamed" if size < base + in_memory_bytes(n, dim, queries, 100, chunk) else "in memory"
            lines.append(f"  budget {budget}: {path}" + (" — below the minimum: refused" if size < minimum else ""))
    return lines


def measure(args) -> int:
    """Peak memory and stage times of `evaluate` per corpus size, index and budget."""
    baseline = run_measured(["-c", "import harness.pipeline.evaluate, numpy, faiss, pytrec_eval"]).peak_bytes / 2**20
    print(f"baseline (python + harness + numpy + faiss + pytrec_eval imported): {baseline:.0f} MB")
    sizes, budgets = [int(x) for x in args.docs.split(",")], args.budgets.split(",")
    for n in sizes:
        print("\n".join(needs(n, args.dim, args.queries, budgets, baseline, args.chunk_size)))
    if args.plan:
        return 0
    print(
        f"{'docs':>9} {'dim':>4} {'queries':>7} {'index':<6} {'search':<9} {'budget MB':>9} {'wall s':>7} "
        f"{'peak MB':>8} {'anon MB':>8} {'emb MB':>7}  stages (s)                                        nDCG@10"
    )
    for n in sizes:
        folder = Path(args.workdir) / f"n{n}"
        shutil.rmtree(folder, ignore_errors=True)
        free = shutil.disk_usage(Path(args.workdir).parent if not Path(args.workdir).exists() else args.workdir).free
        if free < n * (BYTES_PER_DOC_TEXT + args.dim * 4) * 1.1:
            print(f"{n:,} docs: {free / 2**30:.1f} GB free on disk, not enough for the corpus and the cache")
            return 1
        make_corpus(folder, n, args.queries)
        for kind in args.indexes.split(","):
            for budget in budgets if kind == "flat" else ["none"]:
                status = run_child(folder, kind, args.dim, budget, n, args.queries, args.chunk_size)
                if status:
                    return status
        shutil.rmtree(folder, ignore_errors=True)
    return 0


def run_child(folder: Path, kind: str, dim: int, budget: str, n: int, queries: int, chunk_size: int) -> int:
    cache = folder / f"cache-{kind}"  # a cold cache per run: embeddings are written, then mapped
    proc = run_measured(["-c", CHILD, str(folder), kind, str(cache), str(dim), budget, str(chunk_size)])
    shutil.rmtree(cache, ignore_errors=True)
    if proc.returncode != 0:
        print(proc.stderr[-2000:])
        return 1
    r = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    r["peak_rss_mb"], r["peak_anon_mb"] = proc.peak_bytes / 2**20, proc.peak_anon_bytes / 2**20
    stages = ", ".join(f"{k} {v:.1f}" for k, v in r["timings"].items() if k != "total")
    shown = "-" if budget == "none" else f"{r['budget_mb']:.0f}"
    print(
        f"{n:>9,} {dim:>4} {queries:>7} {kind:<6} {r['search']:<9} {shown:>9} {r['seconds']:>7.1f} "
        f"{r['peak_rss_mb']:>8.0f} {r['peak_anon_mb']:>8.0f} {n * dim * 4 / 2**20:>7.0f}  {stages:<49} "
        f"{r['ndcg10']:.4f}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
