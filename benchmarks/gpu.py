"""GPU throughput and correctness of the encoder, in one run of under 8 minutes.

Figures: BENCHMARKS.md, "GPUs and the full BEIR sweep".

Usage (from the repository root):

    python benchmarks/gpu.py --prepare      # here: writes benchmarks/gpu-pack/ (texts + qrels, committed)
                                            #       and .gpu-model/ (fp16 weights, 44 MB, git-ignored)
    python benchmarks/gpu.py                # on the GPU machine, carrying .gpu-model (writes $OUT/gpu.json)
    python benchmarks/gpu.py --cpu          # the reduced CPU mode: the same cells and checks, small
    python benchmarks/gpu.py --smoke        # seconds, CPU, fp32: proves the script runs
    python benchmarks/gpu.py --cpu --smoke  # the smoke's data, every check that needs no CUDA (bf16, two workers)

A bare machine is enough: torch, sentence-transformers, transformers, numpy, and this working tree. The
data travel in the tree (`benchmarks/gpu-pack/`: SciFact and NFCorpus documents, judged test queries
and test qrels, gzipped JSON lines read here with the standard library); no faiss, pytrec_eval, beir or
bm25s: retrieval is an exact top-k by matrix product and nDCG@10 is computed here (`ndcg_at_10`, pinned
against pytrec_eval by `tests/test_gpu_benchmark.py`).

Each cell (dataset × precision) is warmed up first (both encoders, a few batches), then raw
``SentenceTransformer.encode`` and ours (`harness.retrieval.encode.encode_corpus`, pipelined) are timed
alternately (raw-ours, then ours-raw) and the median kept. On a GPU: busy share = the union of the
forward passes' spans, from CUDA events recorded on the compute stream, over wall time (a span still
includes launch gaps inside a forward); useful FLOP/s against the bf16 matmul rate measured here, as
"% of peak" — neither is printed on a CPU. The checks: GPU fp32 vectors vs CPU fp32 (cosine ≥ 0.9999),
fp16/bf16 nDCG@10 within 0.002 of fp32, pipelined == plain, two worker processes == one, and (full
SciFact only) fp32 nDCG@10 within 0.002 of MTEB's 0.64508. The exit status is 1 when a check fails or a
cell was skipped (the time budget ran out), 0 otherwise.

Weights: the fp32 rows compute in fp32 from weights *stored* in fp16 (`.gpu-model`: an fp32 copy, 87 MB,
does not fit what travels to a GPU machine); their rows are labelled ``fp32 (fp16-stored weights)``, and
the fp16/bf16 deltas are deltas of compute precision on those same weights.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PACK = ROOT / "benchmarks" / "gpu-pack"
MODEL = ROOT / ".gpu-model"
DATASETS = ("scifact", "nfcorpus")
MTEB_SCIFACT = 0.64508  # all-MiniLM-L6-v2 nDCG@10 on SciFact test, MTEB's published figure
LIMITS = {"cosine": 0.9999, "ndcg_delta": 0.002, "same": 1e-5, "mteb": 0.002}


def ndcg_at_10(qrels: dict[str, dict[str, int]], run: dict[str, list[tuple[str, float]]]) -> float:
    """Mean nDCG@10 over every judged query (trec_eval ``ndcg_cut.10``: linear gain, log2 discount,
    ideal from all judged documents, ties by score then doc_id descending, a query without results 0)."""
    total = 0.0
    for query_id, judged in qrels.items():
        ranked = sorted(run.get(query_id, []), key=lambda hit: (hit[1], hit[0].encode()), reverse=True)[:10]
        dcg = sum(
            judged.get(doc_id, 0) / math.log2(rank + 2)
            for rank, (doc_id, _) in enumerate(ranked)
            if judged.get(doc_id, 0) > 0
        )
        ideal = sorted((g for g in judged.values() if g > 0), reverse=True)[:10]
        idcg = sum(g / math.log2(rank + 2) for rank, g in enumerate(ideal))
        total += dcg / idcg if idcg else 0.0
    return total / len(qrels) if qrels else 0.0


def flops_per_doc(tokens: int, layers: int, hidden: int, ffn: int) -> float:
    """Forward FLOPs of a BERT encoder on one document of `tokens` tokens (2 FLOPs per multiply-add)."""
    return tokens * layers * (8 * hidden * hidden + 4 * hidden * ffn) + layers * 4 * tokens * tokens * hidden


# --- the pack: written here by --prepare, read on the device machine with the standard library only ---


def prepare_pack(data: Path, target: Path = PACK) -> None:
    """Write SciFact and NFCorpus (documents, judged test queries, test qrels) into `target`, gzipped."""
    from harness.io.formats import iter_corpus, iter_queries, locate_beir_folder, read_qrels

    for name in DATASETS:
        folder = locate_beir_folder(data / name, "test")
        qrels = read_qrels(folder.qrels).to_dict()
        out = target / name
        out.mkdir(parents=True, exist_ok=True)
        _write_lines(
            out / "corpus.jsonl.gz",
            ({"_id": d.doc_id, "title": d.title, "text": d.text} for d in iter_corpus(folder.corpus)),
        )
        _write_lines(
            out / "queries.jsonl.gz",
            ({"_id": q.query_id, "text": q.text} for q in iter_queries(folder.queries) if q.query_id in qrels),
        )
        (out / "qrels.json").write_text(json.dumps(qrels, sort_keys=True))
    size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
    print(f"wrote {target} ({size / 2**20:.1f} MiB)")


def _write_lines(path: Path, rows) -> None:
    """Gzipped JSON lines, byte-identical on every rerun (no timestamp in the gzip header)."""
    import io

    with gzip.GzipFile(path, "wb", mtime=0) as raw, io.TextIOWrapper(raw, encoding="utf-8") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in rows)


def prepare_model(target: Path = MODEL, source: str | None = None) -> None:
    """Write the default model (or the sentence-transformers folder `source`) with fp16 weights (small enough to
    travel to a GPU machine)."""
    import torch
    from sentence_transformers import SentenceTransformer

    from harness.retrieval.encode import resolve_model_source

    model = SentenceTransformer(source or resolve_model_source("all-MiniLM-L6-v2"), device="cpu").to(torch.float16)
    model.save(str(target))
    size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
    print(f"wrote {target} ({size / 2**20:.1f} MiB, fp16 weights)")


def _lines(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def load_pack(name: str, limit: int | None, pack: Path = PACK):
    """(docs, queries, qrels) of one packed dataset; with `limit`, its first documents and the judgments on them."""
    from harness.records import Doc, Query

    folder = pack / name
    if not (folder / "qrels.json").is_file():
        raise SystemExit(
            f"{folder}: no packed data; run `python benchmarks/gpu.py --prepare` where the datasets "
            "are, and commit benchmarks/gpu-pack/"
        )
    docs = [Doc(r["_id"], r.get("title", ""), r["text"]) for r in _lines(folder / "corpus.jsonl.gz")][:limit]
    qrels = json.loads((folder / "qrels.json").read_text())
    if limit:
        kept = {doc.doc_id for doc in docs}
        qrels = {q: {d: g for d, g in judged.items() if d in kept} for q, judged in qrels.items()}
        qrels = {q: judged for q, judged in qrels.items() if any(g > 0 for g in judged.values())}
    queries = [Query(r["_id"], r["text"]) for r in _lines(folder / "queries.jsonl.gz") if r["_id"] in qrels]
    return docs, queries, qrels


def synthetic(docs, count: int, words: int = 60):
    """`count` passages of about `words` words drawn from the vocabulary of `docs`."""
    from harness.records import Doc, doc_text

    vocabulary = sorted({w for doc in docs for w in doc_text(doc).split()})
    rng = random.Random(0)
    return [
        Doc(f"s{i}", "", " ".join(rng.choices(vocabulary, k=rng.randint(words // 2, words * 3 // 2))))
        for i in range(count)
    ]


# --- measuring ---


def matmul_rate(torch, device: str, dtype, size: int, repeats: int) -> float:
    """Measured dense matmul FLOP/s at `dtype` (the device's practical peak), timed by CUDA events."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    start, end = (
        torch.cuda.Event(enable_timing=True, blocking=True),
        torch.cuda.Event(enable_timing=True, blocking=True),
    )
    stream = torch.cuda.current_stream(device)
    start.record(stream)
    for _ in range(repeats):
        a @ b
    end.record(stream)
    end.synchronize()
    return 2 * size**3 * repeats / (start.elapsed_time(end) / 1000)


class BusyClock:
    """The union of the forward passes' spans on the compute stream (CUDA events), per timed run."""

    def __init__(self, torch, model, device: str):
        self.torch, self.device, self.spans, self.origin = torch, device, [], None
        forward = model.forward

        def timed(*args, **kwargs):
            if self.origin is None:
                return forward(*args, **kwargs)
            stream = torch.cuda.current_stream(device)
            start, end = (
                torch.cuda.Event(enable_timing=True, blocking=True),
                torch.cuda.Event(enable_timing=True, blocking=True),
            )
            start.record(stream)
            out = forward(*args, **kwargs)
            end.record(stream)
            self.spans.append((start, end))
            return out

        model.forward = timed

    def start(self) -> None:
        self.origin = self.torch.cuda.Event(enable_timing=True, blocking=True)
        self.origin.record(self.torch.cuda.current_stream(self.device))
        self.spans = []

    def busy_seconds(self) -> float:
        """Seconds the stream ran a forward pass since `start` (overlapping spans counted once)."""
        self.torch.cuda.synchronize(self.device)
        spans = sorted((self.origin.elapsed_time(s), self.origin.elapsed_time(e)) for s, e in self.spans)
        busy, reach = 0.0, -math.inf
        for begin, end in spans:
            busy += max(0.0, end - max(begin, reach))
            reach = max(reach, end)
        self.origin = None
        return busy / 1000


def sync(torch, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def timed_pair(torch, device, raw, ours, docs, args, clock, rounds: int):
    """Warm both up, then time raw and ours alternately `rounds` times; returns (raw s, ours s, busy s or None,
    ours' vectors)."""
    import numpy as np

    from harness.records import doc_text
    from harness.retrieval.encode import encode_corpus

    texts = [doc_text(doc) for doc in docs]

    def run_raw(subset):
        raw.encode(
            subset,
            batch_size=args.batch_size,
            convert_to_tensor=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        sync(torch, device)

    def run_ours(subset_docs):
        out = [
            v
            for _, v, _ in encode_corpus(
                ours, iter(subset_docs), batch_size=args.batch_size, progress=False, token_budget=args.token_budget
            )
        ]
        return np.concatenate(out)

    warm = min(len(docs), 2 * args.batch_size)  # two batches: kernels chosen, memory pools grown
    run_raw(texts[:warm])
    run_ours(docs[:warm])
    raw_s, ours_s, busy, vectors = [], [], [], None
    for turn in range(rounds):
        for which in ("raw", "ours") if turn % 2 == 0 else ("ours", "raw"):
            sync(torch, device)
            if which == "ours" and clock is not None:
                clock.start()
            started = time.perf_counter()
            if which == "raw":
                run_raw(texts)
                raw_s.append(time.perf_counter() - started)
            else:
                vectors = run_ours(docs)
                ours_s.append(time.perf_counter() - started)
                if clock is not None:
                    busy.append(clock.busy_seconds())
    return (statistics.median(raw_s), statistics.median(ours_s), statistics.median(busy) if busy else None, vectors)


def retrieval_ndcg(torch, device, encoder, docs, queries, qrels, vectors) -> float:
    """nDCG@10 of exact top-100 search by inner product (on the device)."""
    query_vectors = torch.as_tensor(encoder.encode_queries([q.text for q in queries]), device=device)
    corpus = torch.as_tensor(vectors, device=device)
    scores, rows = torch.topk(query_vectors @ corpus.T, k=min(100, len(docs)), dim=1)
    run = {
        q.query_id: [(docs[r].doc_id, float(s)) for s, r in zip(score_row.tolist(), row_ids.tolist())]
        for q, score_row, row_ids in zip(queries, scores, rows)
    }
    return ndcg_at_10(qrels, run)


def cell(torch, device, precision, name, data, raw, ours, clock, peak, args) -> dict:
    """One timed cell: throughput of raw and ours, busy share and useful FLOP/s (GPU), nDCG@10."""
    docs, queries, qrels = data
    raw_s, ours_s, busy, vectors = timed_pair(torch, device, raw, ours, docs, args, clock, args.rounds)
    from harness.records import doc_text

    lengths = ours.token_lengths([doc_text(doc) for doc in docs])
    config = ours.model[0].auto_model.config
    useful = (
        sum(flops_per_doc(n, config.num_hidden_layers, config.hidden_size, config.intermediate_size) for n in lengths)
        / ours_s
    )
    row = {
        "dataset": name,
        "precision": precision,
        "docs": len(docs),
        "raw_docs_per_s": len(docs) / raw_s,
        "ours_docs_per_s": len(docs) / ours_s,
        "speedup": raw_s / ours_s,
        "mean_tokens": statistics.mean(lengths),
        "busy_share": busy / ours_s if busy is not None else None,
        "useful_flops": useful,
        "of_bf16_peak": useful / peak if peak else None,
        "weights": "fp16-stored" if args.fp16_weights else "as loaded",
    }
    if qrels is not None:
        row["ndcg@10"] = retrieval_ndcg(torch, device, ours, docs, queries, qrels, vectors)
    return row


# --- the correctness checks ---


def check(report: dict, name: str, value: float, limit: float, ok: bool) -> None:
    report["checks"].append({"check": name, "value": value, "limit": limit, "ok": bool(ok)})
    print(f"check {'ok  ' if ok else 'FAIL'} {name}: {value:.6g} (limit {limit:g})", flush=True)


def check_against_cpu(report, model_path, device, docs, args) -> None:
    """Ours on the device in fp32 vs raw sentence-transformers on the CPU in fp32: cosine per document."""
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    from harness.records import doc_text
    from harness.retrieval.encode import encode_corpus, load_encoder

    texts = [doc_text(doc) for doc in docs]
    raw = SentenceTransformer(str(model_path), device="cpu").to(torch.float32)
    raw.max_seq_length = args.max_seq_length or raw.max_seq_length
    reference = raw.encode(texts, batch_size=args.batch_size, normalize_embeddings=True, convert_to_numpy=True)
    ours = load_encoder(
        str(model_path), batch_size=args.batch_size, device=device, precision="fp32", max_seq_length=args.max_seq_length
    )
    ours.pipelined = True
    mine = np.concatenate(
        [
            v
            for _, v, _ in encode_corpus(
                ours, iter(docs), batch_size=args.batch_size, progress=False, token_budget=args.token_budget
            )
        ]
    )
    cosine = float((mine * reference).sum(axis=1).min())
    check(
        report,
        f"{device} fp32 (ours, pipelined) vs cpu fp32 (raw ST): min cosine over {len(docs)} docs",
        cosine,
        LIMITS["cosine"],
        cosine >= LIMITS["cosine"],
    )


def check_pipelined(report, ours, docs, args) -> None:
    """The pipelined path equals the plain one (`encode_docs` per batch) on the same batches."""
    import numpy as np

    from harness.retrieval.encode import encode_corpus

    def vectors(pipelined: bool):
        ours.pipelined = pipelined
        return np.concatenate(
            [
                v
                for _, v, _ in encode_corpus(
                    ours, iter(docs), batch_size=args.batch_size, progress=False, token_budget=args.token_budget
                )
            ]
        )

    plain, piped = vectors(False), vectors(True)
    difference = float(np.abs(plain - piped).max())
    check(
        report,
        f"pipelined == plain ({ours.precision}, {len(docs)} docs): max |difference|",
        difference,
        LIMITS["same"],
        difference <= LIMITS["same"],
    )


def load_for_worker(model: str, batch_size: int, precision: str, max_seq_length: int | None, device: str):
    """The several-devices engine's loader (module level: a spawned worker imports it)."""
    from harness.retrieval.encode import load_encoder

    return load_encoder(model, batch_size=batch_size, device=device, precision=precision, max_seq_length=max_seq_length)


def check_two_workers(report, ours, model_path, device, docs, args) -> None:
    """Two worker processes on one device (the several-devices engine) give the one-process vectors."""
    from functools import partial

    import numpy as np

    from harness.engines.multi_device import encode_corpus_devices
    from harness.engines.shards import EncodeJob
    from harness.io.cache import embedding_entry
    from harness.retrieval.encode import encode_corpus

    ours.pipelined = None
    chunk = max(1, len(docs) // 4)
    one = np.concatenate(
        [v for _, v, _ in encode_corpus(ours, iter(docs), chunk_size=chunk, batch_size=args.batch_size, progress=False)]
    )
    with tempfile.TemporaryDirectory() as cache:
        entry = embedding_entry(Path(cache), {"kind": "gpu-benchmark"})
        entry.start(chunk)
        load = partial(load_for_worker, str(model_path), args.batch_size, "fp32", args.max_seq_length)
        job = EncodeJob(load, ours.fingerprint(), entry, chunk, args.batch_size)
        two = np.concatenate(
            [np.asarray(v) for _, v, _ in encode_corpus_devices(job, iter(docs), [device, device], progress=False)]
        )
    difference = float(np.abs(one - two).max())
    check(
        report,
        f"two worker processes on {device} == one ({len(docs)} docs): max |difference|",
        difference,
        LIMITS["same"],
        difference <= LIMITS["same"],
    )


def check_precisions(report, rows, full: bool, judged: bool = True) -> None:
    """fp16/bf16 nDCG@10 within 0.002 of fp32; on the full SciFact, fp32 within 0.002 of MTEB's figure.

    Not `judged` (the smoke's 12 documents, where one swapped pair moves nDCG@10 by more than the bound): the
    deltas are computed and shown in the rows, and no check is made of them."""
    fp32 = {r["dataset"]: r["ndcg@10"] for r in rows if r["precision"] == "fp32" and "ndcg@10" in r}
    for row in rows:
        if "ndcg@10" in row and row["precision"] != "fp32" and row["dataset"] in fp32:
            delta = row["ndcg@10"] - fp32[row["dataset"]]
            row["ndcg_delta_vs_fp32"] = delta
            if judged:
                check(
                    report,
                    f"{row['dataset']} {row['precision']} nDCG@10 - fp32",
                    delta,
                    LIMITS["ndcg_delta"],
                    abs(delta) <= LIMITS["ndcg_delta"],
                )
    if full and "scifact" in fp32:
        delta = fp32["scifact"] - MTEB_SCIFACT
        check(report, "scifact fp32 nDCG@10 - MTEB 0.64508", delta, LIMITS["mteb"], abs(delta) <= LIMITS["mteb"])


# --- the run ---


def settings(args) -> tuple[str, tuple[str, ...], int | None, int]:
    """(device, precisions, documents per dataset, synthetic passages) of the mode."""
    if args.smoke and args.cpu:  # every check that needs no CUDA, on the smoke's data
        return "cpu", ("fp32", "bf16"), 12, 24
    if args.smoke:
        return "cpu", ("fp32",), 12, 24
    if args.cpu:
        return "cpu", ("fp32", "bf16"), args.limit or 100, args.synthetic or 200
    return "cuda:0", ("fp32", "fp16", "bf16"), args.limit, args.synthetic or 100_000


def run(args) -> dict:
    import torch
    from sentence_transformers import SentenceTransformer

    from harness.host import host_info
    from harness.retrieval.encode import load_encoder

    device, precisions, limit, n_synthetic = settings(args)
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("torch sees no GPU: use --cpu (or --smoke) on this machine")
    on_gpu = device.startswith("cuda")
    peak = matmul_rate(torch, device, torch.bfloat16, 8192, 50) if on_gpu else None
    report = {
        "device": torch.cuda.get_device_name(device) if on_gpu else "cpu",
        "torch": torch.__version__,
        "model": str(args.model),
        "host": host_info(),
        "bf16_matmul_flops": peak,
        "rows": [],
        "checks": [],
        "skipped": [],
        "mode": "smoke" if args.smoke else "cpu" if args.cpu else "gpu",
    }
    print(
        f"device {report['device']}" + (f"; measured bf16 matmul {peak / 1e12:.1f} TFLOP/s" if peak else ""), flush=True
    )
    host = report["host"]
    print(f"host: {host['cpu']}, {host['cores_used']} cores, kernel class {host['kernel_class']}", flush=True)
    if not on_gpu:
        print("no GPU: " + ("smoke" if args.smoke else "checks") + " on CPU", flush=True)
    data = {name: load_pack(name, limit) for name in DATASETS}
    data["synthetic"] = (synthetic(data["scifact"][0], n_synthetic), None, None)
    deadline = time.monotonic() + args.budget_seconds
    for precision in precisions:
        raw = SentenceTransformer(str(args.model), device=device).to(
            {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
        )
        raw.max_seq_length = args.max_seq_length or raw.max_seq_length
        ours = load_encoder(
            str(args.model),
            batch_size=args.batch_size,
            device=device,
            precision=precision,
            max_seq_length=args.max_seq_length,
        )
        ours.pipelined = True
        clock = BusyClock(torch, ours.model, device) if on_gpu else None
        for name, cell_data in data.items():
            if time.monotonic() > deadline:
                report["skipped"].append(f"{name} {precision}")
                print(f"time budget spent: skipping {name} at {precision}", flush=True)
                continue
            row = cell(torch, device, precision, name, cell_data, raw, ours, clock, peak, args)
            report["rows"].append(row)
            print(json.dumps(row), flush=True)
            write_report(report)  # each row kept as it is measured: a later failure loses none
        if precision == "fp32":
            small = data["scifact"][0][: 64 if device == "cpu" else 1024]
            check_pipelined(report, ours, small, args)
            if not args.smoke or args.cpu:  # two spawned processes each load the model: not seconds
                check_two_workers(report, ours, args.model, device, small, args)
            check_against_cpu(report, args.model, device, small, args)
            write_report(report)
        del raw, ours
        if on_gpu:
            torch.cuda.empty_cache()
    check_precisions(report, report["rows"], full=limit is None, judged=not args.smoke)
    return report


def write_report(report: dict) -> None:
    """``$OUT/gpu.json`` (when ``$OUT`` is set) as it stands: written to a sibling, then renamed into place."""
    if not os.environ.get("OUT"):
        return
    target = Path(os.environ["OUT"], "gpu.json")
    partial = target.with_name(f".gpu.json.{os.getpid()}")
    partial.write_text(json.dumps(report, indent=2, default=str))
    os.replace(partial, target)


def print_table(report: dict) -> None:
    peak = report["bf16_matmul_flops"]
    print(f"\n{report['device']}" + (f" (bf16 matmul {peak / 1e12:.1f} TFLOP/s measured)" if peak else ""))
    print(
        f"{'dataset':<10} {'prec':<5} {'docs':>7} {'raw/s':>9} {'ours/s':>9} {'ours/raw':>8} {'busy':>6} "
        f"{'useful TFLOP/s':>14} {'of peak':>8} {'nDCG@10':>8} {'Δ fp32':>8}"
    )
    for r in report["rows"]:
        ndcg = f"{r['ndcg@10']:.5f}" if "ndcg@10" in r else "-"
        delta = f"{r['ndcg_delta_vs_fp32']:+.5f}" if "ndcg_delta_vs_fp32" in r else "-"
        busy = f"{r['busy_share']:>6.1%}" if r["busy_share"] is not None else f"{'-':>6}"
        of_peak = f"{r['of_bf16_peak']:>8.1%}" if r["of_bf16_peak"] is not None else f"{'-':>8}"
        print(
            f"{r['dataset']:<10} {r['precision']:<5} {r['docs']:>7} {r['raw_docs_per_s']:>9.1f} "
            f"{r['ours_docs_per_s']:>9.1f} {r['speedup']:>7.2f}x {busy} "
            f"{r['useful_flops'] / 1e12:>14.2f} {of_peak} {ndcg:>8} {delta:>8}"
        )
    if report["rows"] and report["rows"][0]["weights"] == "fp16-stored":
        print("fp32 rows: fp32 compute on weights stored in fp16 (.gpu-model)")
    failed = [c["check"] for c in report["checks"] if not c["ok"]]
    print(
        f"checks: {len(report['checks']) - len(failed)} of {len(report['checks'])} ok; skipped cells: "
        f"{', '.join(report['skipped']) or 'none'}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prepare", action="store_true", help="write benchmarks/gpu-pack/ and .gpu-model, stop")
    parser.add_argument(
        "--data",
        type=Path,
        default=ROOT.parent / "shared" / "data" / "beir",
        help="BEIR folders --prepare reads [../shared/data/beir]",
    )
    parser.add_argument("--model", type=Path, default=None, help="sentence-transformers folder [.gpu-model]")
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="the reduced CPU mode (fp32, bf16; 100 documents, batches of 32, 1800 s budget)",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="seconds on a CPU: fp32, 12 documents, 64 tokens, no worker processes"
    )
    parser.add_argument("--limit", type=int, default=None, help="documents per dataset [all; 100 with --cpu]")
    parser.add_argument("--synthetic", type=int, default=None, help="synthetic passages [100,000; 200 --cpu]")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--max-seq-length", type=int, default=None, help="truncate texts [the model's; 64 --smoke]")
    parser.add_argument("--token-budget", type=int, default=65536)
    parser.add_argument("--rounds", type=int, default=None, help="timed runs of each encoder [2; 1 --smoke]")
    parser.add_argument(
        "--budget-seconds", type=float, default=420, help="stop starting new cells after this [420; 1800 --cpu]"
    )
    args = parser.parse_args()
    if args.prepare:
        prepare_pack(args.data)
        prepare_model()
        return 0
    if args.rounds is None:
        args.rounds = 1 if args.smoke else 2
    if args.smoke:
        args.batch_size, args.token_budget = min(args.batch_size, 8), min(args.token_budget, 512)
        args.max_seq_length = args.max_seq_length or 64
    elif args.cpu:  # a CPU gains nothing from big batches, and two cores take minutes per cell as it is
        args.batch_size, args.token_budget = min(args.batch_size, 32), min(args.token_budget, 8192)
        args.budget_seconds = max(args.budget_seconds, 1800)
    if args.model is None and not MODEL.is_dir() and (args.cpu or args.smoke):
        from harness.retrieval.encode import resolve_model_source

        args.model = Path(resolve_model_source("all-MiniLM-L6-v2"))  # here, the installed fp32 weights
    args.model = args.model or MODEL
    args.fp16_weights = Path(args.model).resolve() == MODEL.resolve()
    if not Path(args.model).is_dir():
        raise SystemExit(
            f"{args.model}: no model folder; run `python benchmarks/gpu.py --prepare` (and carry "
            ".gpu-model to the GPU machine)"
        )
    report = run(args)
    print_table(report)
    write_report(report)
    return 1 if report["skipped"] or not all(c["ok"] for c in report["checks"]) else 0


if __name__ == "__main__":
    sys.exit(main())
