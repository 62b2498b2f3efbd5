"""What the embedding cache saves: an edited corpus, a corpus after a team corpus, the lookup cost, a warm rerun.

Usage (from the repository root; the figures need a quiet machine):

    python benchmarks/incremental_cache.py [--scifact ../shared/data/beir/scifact] [--nfcorpus ../shared/data/beir/nfcorpus]
    python benchmarks/incremental_cache.py --cold-warm [--dataset ../shared/data/beir/scifact] [--model all-MiniLM-L6-v2]
    python benchmarks/incremental_cache.py --smoke    # seconds: both parts; the lesson eval set, a synthetic corpus, hash:64

Four measurements, each in a fresh cache folder (docs/cache-and-env.md says how the cache works):

1. SciFact encoded cold (the encode-corpus phase's seconds, as the result records them).
2. SciFact with 1 % of its documents edited and 1 % added: only those are encoded (the result's
   ``cost.vectors``); its encode time over the cold one (target ≤ 3 %).
3. NFCorpus after a team corpus built from half of NFCorpus: NFCorpus encodes only the other half.
4. The lookup overhead on a fully cached corpus of 1M documents (synthetic texts and vectors, stored as a run
   stores them: segments of 16,384): looking every text up, over a flat search of MS MARCO dev's 6,980 queries
   on the same vectors (target ≤ 10 %).

``--cold-warm`` measures instead a cold run against a warm rerun: `beir-harness evaluate` twice as separate
processes (so the warm run pays model loading and interpreter start like a user's rerun), with a fresh cache
folder: the first run encodes and stores, the second reuses. Prints both wall times, their ratio (goal: warm ≤
1/20 of cold) and checks that every metric is identical (exit 1 if not, or if the goal is missed).

A smoke run does both parts: it uses the lesson eval set for SciFact (and for ``--dataset``), a synthetic
300-document corpus for NFCorpus, 2,000 documents for the lookup and the hashing encoder: its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _smoke


def _text(folder: Path, name: str) -> str:
    """A BEIR file's text, plain or gzipped (``corpus.jsonl.gz``, as the shared SciFact folder holds it)."""
    import gzip

    plain = folder / name
    return (
        plain.read_text(encoding="utf-8")
        if plain.is_file()
        else gzip.decompress((folder / f"{name}.gz").read_bytes()).decode("utf-8")
    )


def _read(folder: Path) -> tuple[list[dict], list[str], list[str]]:
    """(documents, query lines, qrels lines without the header) of a BEIR folder."""
    docs = [json.loads(line) for line in _text(folder, "corpus.jsonl").splitlines() if line]
    queries = _text(folder, "queries.jsonl").splitlines()
    qrels = (folder / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]
    return docs, [q for q in queries if q], [r for r in qrels if r]


def _write(folder: Path, docs: list[dict], queries: list[str], qrels: list[str]) -> Path:
    """A BEIR folder of `docs`, with the judgments of documents still in it and the queries they judge."""
    kept = {doc["_id"] for doc in docs}
    qrels = [line for line in qrels if line.split("\t")[1] in kept]
    judged = {line.split("\t")[0] for line in qrels}
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    chosen = [q for q in queries if json.loads(q)["_id"] in judged]
    (folder / "queries.jsonl").write_text("\n".join(chosen) + "\n", encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(qrels) + "\n")
    return folder


def _evaluate(folder: Path, cache: Path, model: str) -> tuple[float, dict]:
    """(Seconds of the encode-corpus phase, the result's ``cost.vectors`` with the run's wall seconds)."""
    import harness

    result = harness.evaluate(folder, model=model, cache_dir=cache, output_dir=None, progress=False)
    return result.timings.get("encode_corpus") or 0.0, dict(result.cost["vectors"], wall=result.timings["total"])


def incremental(scifact: Path, work: Path, model: str) -> None:
    docs, queries, qrels = _read(scifact)
    cache = work / "cache-scifact"
    cold_s, cold = _evaluate(_write(work / "scifact", docs, queries, qrels), cache, model)
    rng = random.Random(0)
    n = max(1, len(docs) // 100)
    edited = [dict(doc) for doc in docs]
    for i in rng.sample(range(len(docs)), n):
        edited[i]["text"] = edited[i]["text"] + " (edited)"
    edited += [{"_id": f"added-{i}", "title": "", "text": f"an added document {i}"} for i in range(n)]
    warm_s, warm = _evaluate(_write(work / "scifact-edited", edited, queries, qrels), cache, model)
    print(f"scifact cold: {cold['docs_encoded']:,} documents encoded in {cold_s:.3f} s")
    print(
        f"scifact edited ({n} edited, {n} added): {warm['docs_encoded']:,} encoded, {warm['docs_cached']:,} cached, "
        f"{warm_s:.3f} s"
    )
    print(f"incremental / cold encode = {warm_s / cold_s if cold_s else 0.0:.4f} (target <= 0.03)")
    print(f"incremental / cold wall (load, lookup, index, search included) = {warm['wall'] / cold['wall']:.4f}")


def team_first(nfcorpus: Path, work: Path, model: str) -> None:
    docs, queries, qrels = _read(nfcorpus)
    half = sorted(random.Random(1).sample(range(len(docs)), len(docs) // 2))
    cache = work / "cache-nfcorpus"
    _, team = _evaluate(_write(work / "team", [docs[i] for i in half], queries, qrels), cache, model)
    _, full = _evaluate(_write(work / "nfcorpus", docs, queries, qrels), cache, model)

    def text(doc: dict) -> tuple[str, str]:
        return doc.get("title") or "", doc.get("text") or ""

    texts = {text(docs[i]) for i in half}
    lacking = len({text(doc) for doc in docs} - texts)  # distinct texts: a text repeated is encoded once
    print(f"team corpus (half of nfcorpus): {team['docs_encoded']:,} encoded")
    print(
        f"nfcorpus after the team corpus: {full['docs_encoded']:,} encoded of {len(docs):,} "
        f"(distinct texts the team corpus lacked: {lacking:,}); as expected: {full['docs_encoded'] == lacking}"
    )


def lookup_overhead(n_docs: int, n_queries: int, dimension: int, work: Path) -> None:
    import numpy as np

    from harness.io.cache.texts import TextStore
    from harness.retrieval.index import IndexSpec, VectorIndex

    store = TextStore(work / "cache-lookup", {"kind": "doc", "model": {"name": "synthetic"}})
    rng = np.random.default_rng(0)
    chunk, index = 16384, VectorIndex(dimension, IndexSpec(kind="flat"))
    for start in range(0, n_docs, chunk):
        texts = [f"synthetic document {i}" for i in range(start, min(n_docs, start + chunk))]
        vectors = rng.standard_normal((len(texts), dimension), dtype=np.float32)
        store.add(texts, vectors)
        index.add([str(i) for i in range(start, start + len(texts))], vectors)
    store.compact()  # as a run does when its encode finishes
    index.build()
    started = time.perf_counter()
    found = 0
    for start in range(0, n_docs, chunk):
        rows, _ = store.lookup([f"synthetic document {i}" for i in range(start, min(n_docs, start + chunk))], dimension)
        found += len(rows)
    lookup_s = time.perf_counter() - started
    queries = rng.standard_normal((n_queries, dimension), dtype=np.float32)
    started = time.perf_counter()
    index.search([f"q{i}" for i in range(n_queries)], queries, 100)
    search_s = time.perf_counter() - started
    print(f"lookup of {found:,} of {n_docs:,} cached texts: {lookup_s:.3f} s")
    print(f"flat search of {n_queries:,} queries over them: {search_s:.3f} s")
    print(f"lookup / search = {lookup_s / search_s:.4f} (target <= 0.10)")


def _evaluate_process(dataset: str, cache: Path, out: Path, model: str | None) -> tuple[float, dict]:
    """(Wall seconds, the ``--json`` result) of one `beir-harness evaluate` process."""
    started = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "-q",
            "evaluate",
            dataset,
            "--cache-dir",
            str(cache),
            "--output-dir",
            str(out),
            "--json",
            *(["--model", model] if model else []),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return time.perf_counter() - started, json.loads(proc.stdout)


def cold_warm(dataset: str, model: str | None, smoke: bool) -> bool:
    """A cold run, then a warm rerun in the same fresh cache; True when every metric is identical and (unless
    `smoke`) the warm run took at most 1/20 of the cold one."""
    with tempfile.TemporaryDirectory() as tmp:
        cold_s, cold = _evaluate_process(dataset, Path(tmp) / "cache", Path(tmp) / "out", model)
        warm_s, warm = _evaluate_process(dataset, Path(tmp) / "cache", Path(tmp) / "out", model)
    same = cold["metrics"] == warm["metrics"]
    print(f"dataset {cold['dataset']}, model {cold['model']}, {cold['config']['n_docs']} documents")
    print(f"cold  {cold_s:8.1f} s  (cache {cold['config']['embedding_cache']}; stages {cold['timings']})")
    print(f"warm  {warm_s:8.1f} s  (cache {warm['config']['embedding_cache']}; stages {warm['timings']})")
    print(f"warm / cold = {warm_s / cold_s:.4f} (1/{cold_s / warm_s:.0f}); goal <= 1/20")
    print(
        f"nDCG@10 cold {cold['metrics']['nDCG@10']:.5f} warm {warm['metrics']['nDCG@10']:.5f}; "
        f"all metrics identical: {same}"
    )
    return same and (smoke or warm_s * 20 <= cold_s)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scifact", default="../shared/data/beir/scifact")
    parser.add_argument("--nfcorpus", default="../shared/data/beir/nfcorpus")
    parser.add_argument(
        "--model",
        default=None,
        help="any `evaluate --model` [all-MiniLM-L6-v2; with --cold-warm: evaluate's default model]",
    )
    parser.add_argument("--lookup-docs", type=int, default=1_000_000)
    parser.add_argument("--lookup-queries", type=int, default=6980, help="MS MARCO dev's queries [6980]")
    parser.add_argument(
        "--cold-warm",
        action="store_true",
        help="only the cold run vs warm rerun of `evaluate` (two processes) on --dataset",
    )
    parser.add_argument("--dataset", default="../shared/data/beir/scifact", help="the --cold-warm dataset")
    parser.add_argument("--smoke", action="store_true", help="seconds, on tiny data: runs both parts")
    args = parser.parse_args()
    print(_smoke.host_line())
    if args.cold_warm and not args.smoke:
        return 0 if cold_warm(args.dataset, args.model, smoke=False) else 1
    work = _smoke.scratch("incremental")
    scifact, nfcorpus = Path(args.scifact), Path(args.nfcorpus)
    model = args.model or "all-MiniLM-L6-v2"
    if args.smoke:
        print(_smoke.NOTICE)
        scifact, model = _smoke.DEMO, "hash:64"
        nfcorpus = _smoke.synthetic_beir(work / "synthetic", docs=300)
        args.lookup_docs, args.lookup_queries = 2000, 50
    for folder in (scifact, nfcorpus):
        if not any((folder / name).is_file() for name in ("corpus.jsonl", "corpus.jsonl.gz")):
            shutil.rmtree(work, ignore_errors=True)
            print(f"{folder}: not a BEIR folder (give --scifact / --nfcorpus)", file=sys.stderr)
            return 1
    try:
        incremental(scifact, work, model)
        team_first(nfcorpus, work, model)
        lookup_overhead(args.lookup_docs, args.lookup_queries, 384, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.smoke:  # the cold-vs-warm part on the lesson eval set
        return 0 if cold_warm(str(_smoke.DEMO), "hash:64", smoke=True) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
