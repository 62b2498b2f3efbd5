"""Time-based checkpoints: what a kill costs, and what checkpointing costs.

Figures: BENCHMARKS.md, "Interrupted runs: time-based checkpoints".

Usage (from the repository root):

    python benchmarks/checkpoint.py kill [--docs 3000] [--dataset ../shared/data/beir/scifact]
    python benchmarks/checkpoint.py overhead [--docs 200000] [--dim 384]
    python benchmarks/checkpoint.py --smoke     # seconds: both parts on tiny data, the hashing encoder

``kill``: the default model, default settings (one 16,384-document chunk, checkpoints every 60 s),
on the first DOCS documents of SciFact (every test query kept, qrels cut to those documents).
An uninterrupted run is timed, then a fresh run is killed with SIGKILL at 60 % of that time and
rerun; prints rerun / full (without checkpoints a killed chunk is lost whole: the rerun costs a
full run) and checks that the rerun's metrics equal the uninterrupted run's.

``overhead``: the hashing stand-in encoder over DOCS synthetic documents, stored with no
checkpoint (60 s: none happen) and with a checkpoint after every batch (``0``: the worst case);
prints both encode+store times and the time to read each finished entry back (memory-mapped,
as the index build does), and checks that both entries hold identical bytes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _smoke

from harness.io.formats import find_file


def _subset(dataset: Path, docs: int, target: Path) -> Path:
    """The first `docs` documents of `dataset`, its queries, and the test qrels restricted to them."""
    (target / "qrels").mkdir(parents=True)
    corpus = find_file(dataset / "corpus.jsonl")
    opener = gzip.open if corpus.suffix == ".gz" else open
    kept = set()
    with opener(corpus, "rt", encoding="utf-8") as source, open(target / "corpus.jsonl", "w") as sink:
        for line in source:
            if len(kept) == docs:
                break
            kept.add(json.loads(line)["_id"])
            sink.write(line)
    qrels = (dataset / "qrels" / "test.tsv").read_text().splitlines()
    judged = [line for line in qrels[1:] if line.split("\t")[1] in kept]
    (target / "qrels" / "test.tsv").write_text("\n".join([qrels[0], *judged]) + "\n")
    queries = find_file(dataset / "queries.jsonl")
    with (gzip.open if queries.suffix == ".gz" else open)(queries, "rt", encoding="utf-8") as source:
        (target / "queries.jsonl").write_text(source.read())
    return target


def _command(folder: Path, cache: Path, out: Path, model: str | None) -> list[str]:
    return [
        sys.executable,
        "-m",
        "harness",
        "-q",
        "evaluate",
        str(folder),
        "--cache-dir",
        str(cache),
        "--output-dir",
        str(out),
        "--json",
        *(["--model", model] if model else []),
    ]


def kill(args) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        folder = _subset(Path(args.dataset), args.docs, tmp / "subset")
        started = time.perf_counter()
        full = subprocess.run(
            _command(folder, tmp / "c1", tmp / "o1", args.model), capture_output=True, text=True, check=True
        )
        full_s = time.perf_counter() - started
        proc = subprocess.Popen(
            _command(folder, tmp / "c2", tmp / "o2", args.model), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        time.sleep(0.6 * full_s)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        stored = sum(len(json.loads(p.read_text())) for p in (tmp / "c2").rglob("chunk-*.ids.json"))
        started = time.perf_counter()
        rerun = subprocess.run(
            _command(folder, tmp / "c2", tmp / "o2", args.model), capture_output=True, text=True, check=True
        )
        rerun_s = time.perf_counter() - started
    a, b = json.loads(full.stdout), json.loads(rerun.stdout)
    same = a["metrics"] == b["metrics"]
    print(
        f"{args.docs} documents of {Path(args.dataset).name}, {a['model']}, default settings; host {a['host']['cpu']} "
        f"({a['host']['kernel_class']}, {a['host']['cores_used']} cores)"
    )
    print(f"uninterrupted run {full_s:.1f} s; SIGKILL at {0.6 * full_s:.1f} s with {stored} documents stored")
    print(f"rerun {rerun_s:.1f} s = {rerun_s / full_s:.2f} of the uninterrupted run; metrics identical: {same}")
    return 0 if same else 1


def overhead(args) -> int:
    import numpy as np

    from harness.io.cache import embedding_entry
    from harness.records import Doc
    from harness.retrieval.encode import encode_corpus, load_encoder

    encoder = load_encoder(f"hash:{args.dim}")
    docs = [Doc(f"d{i}", "", f"w{i % 97} w{i % 89} w{i % 83} doc{i}") for i in range(args.docs)]
    tmp = Path(tempfile.mkdtemp())
    results = {}
    try:
        for label, seconds in (("no checkpoint", 60.0), ("checkpoint every batch", 0.0)):
            entry = embedding_entry(tmp / label.replace(" ", "-"), {"kind": "corpus"})
            entry.start(16384)
            started = time.perf_counter()
            n = 0
            for n, (ids, vectors, _) in enumerate(
                encode_corpus(
                    encoder, iter(docs), batch_size=256, progress=False, store=entry, checkpoint_seconds=seconds
                ),
                start=1,
            ):
                entry.write_chunk(n - 1, ids, vectors)
            entry.finish(n, len(docs), args.dim)
            write_s = time.perf_counter() - started
            started = time.perf_counter()
            digest = 0.0
            for _, vectors in entry.chunks(mmap=True):
                digest += float(np.asarray(vectors).sum())
            read_s = time.perf_counter() - started
            files = len(list(entry.root.iterdir()))
            results[label] = (
                write_s,
                read_s,
                files,
                b"".join(p.read_bytes() for p in sorted(entry.root.glob("chunk-*.npy"))),
            )
            print(f"{label:<24} encode+store {write_s:7.2f} s   read back {read_s:6.3f} s   {files} files")
        (w0, r0, _, b0), (w1, r1, _, b1) = results.values()
        print(
            f"store with checkpoints / without = {w1 / w0:.3f}; read / read = {r1 / r0:.3f}; "
            f"identical bytes: {b0 == b1}"
        )
        return 0 if b0 == b1 else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["kill", "overhead"], nargs="?", help="required unless --smoke")
    parser.add_argument("--docs", type=int, default=None)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--dataset", default="../shared/data/beir/scifact")
    parser.add_argument("--model", default=None, help="kill: any `evaluate --model` [the default model]")
    parser.add_argument("--smoke", action="store_true", help="seconds: both parts on tiny data, proves the script runs")
    args = parser.parse_args()
    if args.part is None and not args.smoke:
        parser.error("say which part: kill or overhead (or --smoke)")
    print(_smoke.host_line())
    if args.smoke:
        print(_smoke.NOTICE)
        smoke_kill = argparse.Namespace(docs=12, dataset=str(_smoke.DEMO), model="hash:64")
        return kill(smoke_kill) or overhead(argparse.Namespace(docs=600, dim=32))
    if args.part == "kill":
        args.docs = args.docs or 3000
        return kill(args)
    args.docs = args.docs or 200_000
    return overhead(args)


if __name__ == "__main__":
    sys.exit(main())
