"""beir-harness against BEIR's own pipeline and the raw encoder, in one run; ratios are the claim.

Usage (from the repository root):

    python benchmarks/suite.py [--full] [--out benchmarks/suite-latest.md]
    python benchmarks/suite.py --peers-only --datasets nfcorpus --rounds 2   # fastembed beside ours, alone
    python benchmarks/suite.py --smoke     # seconds: every step on the lesson eval set with a tiny random model

On ../shared/data/beir/scifact (and nfcorpus with --full), each step runs in a fresh process so its
peak RSS is its own (`harness.metering.run_measured`):

* raw: ``SentenceTransformer.encode`` of the same document texts (the encoder's own speed: the floor);
* ours cold: ``beir-harness evaluate`` with an empty embedding cache;
* ours warm: the same command again (cache hit);
* ours int8: `evaluate --backend onnx-int8` with an empty cache (export and quantization included);
* ours OpenVINO (when the ``[openvino]`` extra is installed): ``--backend openvino`` and ``openvino-int8`` with an
  empty cache (export, calibration on 300 corpus texts and quantization included; with --smoke int8 only);
* BEIR: ``GenericDataLoader`` + ``SentenceBERT`` + ``DenseRetrievalExactSearch`` + ``EvaluateRetrieval``;
* fastembed (qdrant's, when the ``[peers]`` extra is installed; skipped with a line otherwise): the same model's
  ONNX export loaded as a local custom model, with fastembed's defaults (tokenizer, batch size, threads); its
  vectors checked against sentence-transformers' own on a few texts, then scored with our exact search and
  metrics (``benchmarks/_peers.py``; the export is a step of its own, untimed);
* scoring: a synthetic run of 10,000 queries × 100 documents (1M lines) scored by our metrics (every
  family at 5 cutoffs, Judged@k included), by pytrec_eval directly (the same trec_eval measures) and by
  BEIR's ``EvaluateRetrieval.evaluate``.

Prints a Markdown report (machine, times, ratios, peak RSS) and writes it to --out (with --smoke, only
when --out is given: a smoke report never replaces benchmarks/suite-latest.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

import _smoke

from harness.metering import run_measured

CHILD_PRELUDE = """
import json, os, sys, time
MODEL = os.environ.get("SUITE_MODEL") or None  # None: the default model; --smoke: a tiny one
def done(**values):
    print("RESULT " + json.dumps(values))
"""

RAW = (
    CHILD_PRELUDE
    + """
from harness.retrieval.models import resolve_model_source, DEFAULT_MODEL
from harness.io.formats import iter_corpus, locate_beir_folder
from harness.records import doc_text
from sentence_transformers import SentenceTransformer
folder = locate_beir_folder(sys.argv[1], "test")
texts = [doc_text(d) for d in iter_corpus(folder.corpus)]
model = SentenceTransformer(resolve_model_source(MODEL or DEFAULT_MODEL), device="cpu")
start = time.perf_counter()
model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
seconds = time.perf_counter() - start
done(seconds=seconds, docs=len(texts), docs_per_s=len(texts) / seconds)
"""
)

OURS = (
    CHILD_PRELUDE
    + """
from pathlib import Path
from harness.runtimes.spec import EncoderSpec
from harness.pipeline.evaluate import EvaluateConfig, evaluate_dataset
start = time.perf_counter()
backend = sys.argv[3] if len(sys.argv) > 3 else "torch"
model = os.environ.get("SUITE_TORCH_MODEL") if backend == "torch" else MODEL  # --smoke: hashing, no torch
outcome = evaluate_dataset(EvaluateConfig(dataset_path=Path(sys.argv[1]), output_dir=None, progress=False,
                                          cache_dir=Path(sys.argv[2]), encoder=EncoderSpec(backend=backend),
                                          **({"model": model} if model else {})))
r = outcome.result
done(seconds=time.perf_counter() - start, ndcg10=r.metrics["nDCG@10"], timings=r.timings,
     docs=r.config["n_docs"], cache=r.config["embedding_cache"])
"""
)

BEIR = (
    CHILD_PRELUDE
    + """
import gzip, shutil, tempfile
from pathlib import Path
start = time.perf_counter()
from beir.datasets.data_loader import GenericDataLoader
from beir.retrieval.evaluation import EvaluateRetrieval
from beir.retrieval.models import SentenceBERT
from beir.retrieval.search.dense import DenseRetrievalExactSearch
from harness.retrieval.models import resolve_model_source, DEFAULT_MODEL
source = Path(sys.argv[1])
with tempfile.TemporaryDirectory() as tmp:
    # BEIR reads plain files only; decompressing is part of what a BEIR user has to do.
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        src = source / name if (source / name).exists() else source / (name + ".gz")
        dst = Path(tmp) / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        with (gzip.open(src, "rb") if src.name.endswith(".gz") else open(src, "rb")) as f, open(dst, "wb") as g:
            shutil.copyfileobj(f, g)
    corpus, queries, qrels = GenericDataLoader(data_folder=tmp).load(split="test")
    model = DenseRetrievalExactSearch(SentenceBERT(resolve_model_source(MODEL or DEFAULT_MODEL)), batch_size=32)
    retriever = EvaluateRetrieval(model, score_function="cos_sim", k_values=[1, 3, 5, 10, 100])
    results = retriever.retrieve(corpus, queries)
    ndcg, _map, recall, precision = retriever.evaluate(qrels, results, retriever.k_values)
    retriever.evaluate_custom(qrels, results, retriever.k_values, metric="mrr")
done(seconds=time.perf_counter() - start, ndcg10=ndcg["NDCG@10"])
"""
)

FASTEMBED_EXPORT = (
    CHILD_PRELUDE
    + """
sys.path.insert(0, os.environ["SUITE_HELPERS"])
import _peers
from harness.retrieval.models import resolve_model_source, DEFAULT_MODEL
done(**_peers.prepare_fastembed(resolve_model_source(MODEL or DEFAULT_MODEL), sys.argv[1], sys.argv[2]))
"""
)

FASTEMBED = (
    CHILD_PRELUDE
    + """
sys.path.insert(0, os.environ["SUITE_HELPERS"])
import _peers
done(**_peers.run_fastembed(sys.argv[1], sys.argv[2], sys.argv[3]))
"""
)

SCORING = (
    CHILD_PRELUDE
    + """
import random
which = sys.argv[1]
rng = random.Random(0)
n_queries = int(os.environ.get("SUITE_SCORING_QUERIES", 10000))
qrels = {f"q{i}": {f"d{rng.randrange(100000)}": rng.choice((1, 2)) for _ in range(3)} for i in range(n_queries)}
run = {q: {f"d{rng.randrange(100000)}": rng.random() for _ in range(100)} for q in qrels}
for q in run:  # make sure some relevant documents are retrieved
    for d in list(qrels[q])[:1]:
        run[q][d] = rng.random()
ks = [1, 3, 5, 10, 100]
start, cpu = time.perf_counter(), time.process_time()
if which == "ours":
    from harness.evaluation.metrics import evaluate, standard_metrics
    from harness.records import Qrels, Run
    value = evaluate(Qrels(qrels), Run.adopt(run), standard_metrics(ks)).means["nDCG@10"]
elif which == "pytrec_eval":
    import pytrec_eval
    measures = {"ndcg_cut." + ",".join(map(str, ks)), "map_cut." + ",".join(map(str, ks)),
                "recall." + ",".join(map(str, ks)), "P." + ",".join(map(str, ks)), "recip_rank",
                "success." + ",".join(map(str, ks)), "Rprec"}  # every trec_eval measure ours asks for
    scores = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    value = sum(s["ndcg_cut_10"] for s in scores.values()) / len(scores)
else:
    from beir.retrieval.evaluation import EvaluateRetrieval
    ndcg, *_ = EvaluateRetrieval.evaluate(qrels, run, ks, ignore_identical_ids=False)
    EvaluateRetrieval.evaluate_custom(qrels, run, ks, metric="mrr")
    value = ndcg["NDCG@10"]
done(seconds=time.perf_counter() - start, cpu_seconds=time.process_time() - cpu, ndcg10=value)
"""
)


def child(code: str, *args: str) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env["SUITE_HELPERS"] = str(Path(__file__).resolve().parent)  # benchmarks/_peers.py, for the fastembed steps
    proc = run_measured(["-c", code, *args], env=env)  # the step's own peak, not its parent's
    if proc.returncode != 0:
        raise SystemExit(f"step failed:\n{proc.stderr[-3000:]}")
    line = next(line for line in reversed(proc.stdout.splitlines()) if line.startswith("RESULT "))
    return {**json.loads(line.removeprefix("RESULT ")), "peak_rss_mb": proc.peak_bytes / 2**20}


def best_of(rounds: int, code: str, which: tuple[str, ...]) -> dict[str, dict]:
    """Each of `which` run `rounds` times, alternated (a, b, c, a, b, c, ...): the best wall and CPU time of each.

    Alternating spreads any load on the machine over every scorer alike; the best round is the one least
    disturbed by it.
    """
    runs: dict[str, list[dict]] = {name: [] for name in which}
    for _ in range(rounds):
        for name in which:
            runs[name].append(child(code, name))
    return {
        name: {
            **results[0],
            "seconds": min(r["seconds"] for r in results),
            "cpu_seconds": min(r["cpu_seconds"] for r in results),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in results),
        }
        for name, results in runs.items()
    }


def machine() -> str:
    cpu = "unknown CPU"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    import torch

    return (
        f"{cpu}, {os.cpu_count()} cores, {platform.system()}; python {platform.python_version()}, "
        f"torch {torch.__version__} ({torch.get_num_threads()} threads)"
    )


def openvino_backends(smoke: bool) -> list[str]:
    """The OpenVINO backends to time: none without the extra; int8 alone in a smoke run (it covers both runtimes)."""
    import importlib.util

    if importlib.util.find_spec("openvino") is None or importlib.util.find_spec("nncf") is None:
        return []
    return ["openvino-int8"] if smoke else ["openvino", "openvino-int8"]


def fastembed_step(folder: str) -> tuple[dict | None, str]:
    """fastembed on `folder` (after the export, a step of its own), and its check line; None without fastembed."""
    import _peers

    missing = _peers.fastembed_missing()
    if missing is not None:
        return None, missing
    with tempfile.TemporaryDirectory() as work:
        prepared = child(FASTEMBED_EXPORT, folder, f"{work}/model")
        result = child(FASTEMBED, folder, f"{work}/model", f"{work}/cache")
    line = (
        f"fastembed {result['version']} vs sentence-transformers on {result['check_texts']} texts: min cosine "
        f"{result['min_cosine']:.5f}, largest norm gap {result['max_norm_gap']:.1e} (need ≥ {_peers.MIN_COSINE} and "
        f"≤ {_peers.MAX_NORM_GAP}): ok; fastembed truncates at {result['max_tokens']} tokens, sentence-transformers "
        f"at {prepared['st_max_tokens']} ({prepared['over_st_limit']:,} of {prepared['docs']:,} documents are longer)"
    )
    return result, line


def fastembed_rows(fastembed: dict | None, cold: dict, raw: dict) -> tuple[list[str], list[str]]:
    """(its row in the steps table, its rows in the ratio table); none without fastembed."""
    if fastembed is None:
        return [], []
    ours_rate, rate = cold["docs"] / cold["timings"]["encode"], fastembed["docs_per_s"]
    step = (
        f"| fastembed {fastembed['version']} (our ONNX export, its defaults"
        f"{'' if fastembed.get('batch_size') is None else ' but batch size ' + str(fastembed['batch_size'])}; "
        f"encode {fastembed['encode_seconds']:.1f} s) "
        f"| {fastembed['seconds']:.1f} | {fastembed['peak_rss_mb']:.0f} | {fastembed['ndcg10']:.5f} |"
    )
    ratios = [
        f"| fastembed encode throughput / ours | {rate / ours_rate:.3f} ({rate:.1f} vs {ours_rate:.1f} docs/s; "
        f"{rate / raw['docs_per_s']:.3f} of raw) | |",
        f"| fastembed wall / ours cold | {fastembed['seconds'] / cold['seconds']:.3f} "
        f"(nDCG@10 {fastembed['ndcg10'] - cold['ndcg10']:+.5f} vs ours) | |",
    ]
    return [step], ratios


def peer_lines(folder: str, rounds: int) -> list[str]:
    """fastembed beside ours alone (`--peers-only`): the raw encoder, our cold evaluate (torch, an empty cache) and
    fastembed, alternated round by round in fresh processes (the best round of each kept), and the ratios."""
    best: dict[str, dict] = {}
    fastembed_line = ""
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as cache:
            measured = {"raw": child(RAW, folder), "cold": child(OURS, folder, cache)}
        measured["fastembed"], fastembed_line = fastembed_step(folder)
        if measured["fastembed"] is None:
            return [fastembed_line, ""]
        for name, run in measured.items():
            if name not in best or run["seconds"] < best[name]["seconds"]:
                best[name] = run
    return peer_table(folder, rounds, best, fastembed_line)


def peer_table(folder: str, rounds: int, best: dict[str, dict], fastembed_line: str) -> list[str]:
    """`--peers-only`'s report from the best "raw", "cold" and "fastembed" runs (the smoke passes its own)."""
    raw, cold = best["raw"], best["cold"]
    step_rows, ratio_rows = fastembed_rows(best["fastembed"], cold, raw)
    return [
        f"### fastembed beside ours on {Path(folder).name} ({cold['docs']:,} documents), default model, "
        f"best of {rounds} alternated round(s)",
        "",
        "| step | wall s | peak RSS MB | nDCG@10 |",
        "|---|---|---|---|",
        f"| raw `SentenceTransformer.encode` (documents only; {raw['docs_per_s']:.1f} docs/s) | {raw['seconds']:.1f} "
        f"| {raw['peak_rss_mb']:.0f} | |",
        f"| ours, cold cache (encode {cold['timings']['encode']:.1f} s, queries included) | {cold['seconds']:.1f} "
        f"| {cold['peak_rss_mb']:.0f} | {cold['ndcg10']:.5f} |",
        *step_rows,
        "",
        "| ratio | measured | target |",
        "|---|---|---|",
        *ratio_rows,
        "",
        fastembed_line,
        "",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="also nfcorpus")
    parser.add_argument("--data", default="../shared/data/beir")
    parser.add_argument("--out", default=None, help="[benchmarks/suite-latest.md; with --smoke: none]")
    parser.add_argument("--scoring-only", action="store_true", help="only the 1M-line scoring step")
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds of the scoring step (best kept)")
    parser.add_argument(
        "--peers-only",
        action="store_true",
        help="only fastembed beside the raw encoder and our cold run, alternated --rounds times (prints; --out optional)",
    )
    parser.add_argument(
        "--fastembed-batch",
        type=int,
        default=None,
        help="fastembed's batch size [its default, 256: at 512 tokens it ran out of 24 GiB on NFCorpus]",
    )
    parser.add_argument(
        "--fastembed-max-tokens",
        type=int,
        default=None,
        help="fastembed's truncation (its tokenizer_config's model_max_length) [the tokenizer's: 512 for MiniLM]",
    )
    parser.add_argument("--datasets", default=None, help="comma-separated, in --data [scifact; --full: and nfcorpus]")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="seconds: every step on the lesson eval set, a tiny random model, 200 scoring queries",
    )
    args = parser.parse_args()
    print(_smoke.host_line())
    if args.fastembed_batch is not None:
        os.environ["SUITE_FASTEMBED_BATCH"] = str(args.fastembed_batch)  # read by the fastembed step
    if args.fastembed_max_tokens is not None:
        os.environ["SUITE_FASTEMBED_MAX_TOKENS"] = str(args.fastembed_max_tokens)  # read as its model folder is made
    datasets = [] if args.scoring_only else ["scifact", "nfcorpus"] if args.full else ["scifact"]
    datasets = args.datasets.split(",") if args.datasets and not args.scoring_only else datasets
    lines = [f"Machine: {machine()}", ""]
    work = _smoke.scratch("suite") if args.smoke else None
    if work is not None:
        lines = [f"{_smoke.NOTICE} (ours cold and warm: the hashing encoder)", "", *lines]
        args.data, datasets = str(_smoke.DEMO.parent), [] if args.scoring_only else [_smoke.DEMO.name]
        os.environ.update(
            {
                "SUITE_MODEL": str(_smoke.tiny_model(work)),
                "SUITE_TORCH_MODEL": "hash:32",
                "SUITE_SCORING_QUERIES": "200",
            }
        )  # read by the child steps
        args.rounds = 1
    elif args.out is None and not args.peers_only:
        args.out = "benchmarks/suite-latest.md"
    if args.peers_only:
        for name in datasets:
            lines += peer_lines(str(Path(args.data) / name), args.rounds)
        return report(lines, args.out, work)
    for name in datasets:
        folder = str(Path(args.data) / name)
        with tempfile.TemporaryDirectory() as cache:
            raw = child(RAW, folder)
            cold = child(OURS, folder, cache)
            warm = child(OURS, folder, cache)
        with tempfile.TemporaryDirectory() as cache:  # cold: the export and its int8 quantization included
            int8 = child(OURS, folder, cache, "onnx-int8")
        openvino = {}
        for backend in openvino_backends(args.smoke):
            with tempfile.TemporaryDirectory() as cache:  # cold: export, calibration, quantization included
                openvino[backend] = child(OURS, folder, cache, backend)
        beir = child(BEIR, folder)
        fastembed, fastembed_line = fastembed_step(folder)
        fastembed_step_rows, fastembed_ratio_rows = fastembed_rows(fastembed, cold, raw)
        encode_rate = cold["docs"] / cold["timings"]["encode"]
        lines += [
            f"### {name} ({cold['docs']:,} documents), default model, one run",
            "",
            "| step | wall s | peak RSS MB | nDCG@10 |",
            "|---|---|---|---|",
            f"| raw `SentenceTransformer.encode` (documents only) | {raw['seconds']:.1f} | {raw['peak_rss_mb']:.0f} | |",
            f"| ours, cold cache | {cold['seconds']:.1f} | {cold['peak_rss_mb']:.0f} | {cold['ndcg10']:.5f} |",
            f"| ours, warm cache | {warm['seconds']:.1f} | {warm['peak_rss_mb']:.0f} | {warm['ndcg10']:.5f} |",
            f"| ours, cold cache, `--backend onnx-int8` | {int8['seconds']:.1f} | {int8['peak_rss_mb']:.0f} | "
            f"{int8['ndcg10']:.5f} |",
            *(
                f"| ours, cold cache, `--backend {backend}` | {r['seconds']:.1f} | {r['peak_rss_mb']:.0f} | "
                f"{r['ndcg10']:.5f} |"
                for backend, r in openvino.items()
            ),
            f"| BEIR's pipeline | {beir['seconds']:.1f} | {beir['peak_rss_mb']:.0f} | {beir['ndcg10']:.5f} |",
            *fastembed_step_rows,
            "",
            "| ratio | measured | target |",
            "|---|---|---|",
            f"| ours cold / BEIR wall time | {cold['seconds'] / beir['seconds']:.3f} | ≤ 0.8 |",
            f"| ours cold with onnx-int8 / BEIR wall time | {int8['seconds'] / beir['seconds']:.3f} "
            f"(nDCG@10 {int8['ndcg10'] - cold['ndcg10']:+.5f} vs torch) | ≤ 0.8 |",
            *(
                f"| ours cold with {backend} / BEIR wall time | {r['seconds'] / beir['seconds']:.3f} "
                f"(nDCG@10 {r['ndcg10'] - cold['ndcg10']:+.5f} vs torch) | ≤ 0.35 |"
                for backend, r in openvino.items()
            ),
            f"| our encode throughput / raw encode throughput | {encode_rate / raw['docs_per_s']:.3f} "
            f"({encode_rate:.1f} vs {raw['docs_per_s']:.1f} docs/s; our encode stage includes the 300 queries) | ≥ 0.95 |",
            f"| ours warm / ours cold | {warm['seconds'] / cold['seconds']:.4f} | ≤ 0.05 |",
            f"| ours cold peak RSS / BEIR peak RSS | {cold['peak_rss_mb'] / beir['peak_rss_mb']:.2f} | |",
            *fastembed_ratio_rows,
            "",
            fastembed_line,
            "",
            f"Our stages (cold): {', '.join(f'{k} {v:.1f} s' for k, v in cold['timings'].items())}.",
            "",
        ]
    if work is not None and datasets and fastembed is not None:  # the smoke prints --peers-only's report too,
        # from the runs above: the same steps in fresh processes, measured once
        lines += peer_table(folder, 1, {"raw": raw, "cold": cold, "fastembed": fastembed}, fastembed_line)
    scoring = best_of(args.rounds, SCORING, ("ours", "pytrec_eval", "beir"))
    ratio = {clock: scoring["ours"][clock] / scoring["pytrec_eval"][clock] for clock in ("seconds", "cpu_seconds")}
    lines += [
        "### Scoring a synthetic run of 10,000 queries × 100 documents (1M lines)",
        "",
        f"Best of {args.rounds} alternated rounds, each scorer in a fresh process (imports included).",
        "",
        "| scorer | wall s | CPU s | peak RSS MB | nDCG@10 |",
        "|---|---|---|---|---|",
        *(
            f"| {which} | {r['seconds']:.3f} | {r['cpu_seconds']:.3f} | {r['peak_rss_mb']:.0f} | {r['ndcg10']:.6f} |"
            for which, r in scoring.items()
        ),
        "",
        f"ours / pytrec_eval = {ratio['seconds']:.2f} wall, {ratio['cpu_seconds']:.2f} CPU (target ≤ 1.3); "
        f"ours / BEIR = {scoring['ours']['seconds'] / scoring['beir']['seconds']:.2f} wall. Ours computes the same "
        "26 trec_eval measures plus MRR@k and Judged@k at 5 cutoffs, keeps per-query values, and scores every "
        "judged query.",
    ]
    return report(lines, args.out, work)


def report(lines: list[str], out: str | None, work: Path | None) -> int:
    """Print the report, write it to `out` (when given) and remove the smoke's scratch folder."""
    text = "\n".join(lines)
    print(text)
    if out:
        Path(out).write_text(text + "\n", encoding="utf-8")
    if work is not None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
