"""Pooling under a judging budget: which strategy finds the relevant documents and keeps the system ranking?

Usage (from the repository root):

    python benchmarks/pool_strategies.py [--data ../shared/data/beir] [--datasets nfcorpus,scifact]
    python benchmarks/pool_strategies.py --smoke    # seconds: the lesson eval set, the hashing encoder

Judging is simulated on fully judged data: the dataset's test qrels are the judge (a pooled pair they do not
grade is judged not relevant). The systems are retrieved by ``beir-harness pool`` itself (``--systems``, so
the runs are the pool's own ``runs/``): BM25, the default dense model (all-MiniLM-L6-v2, from the user's
embedding cache when it is there), fusions of the two (RRF, CombMNZ, a 0.3:0.7 weighted sum) and a rerank of
BM25's top 10 by a cross-encoder. No trained cross-encoder is reachable here, so the rerank uses one with
random weights (the architecture of ``cross-encoder/ms-marco-MiniLM-L-2-v2``, 2 layers, hidden 384): a poor
system, but a different ranking, which is what a pool needs to be tested on. For budgets of 10 %, 25 % and
50 % of the depth-10 pool, each strategy of ``pool --budget N --strategy`` (`harness.judging.budget`) picks the
pairs to judge; the systems are scored (nDCG@10) on the qrels those judgments make, and the table gives
Kendall's τ-b and τ_ap of that ranking against the ranking on the full test qrels, and the share of the depth-10
pool's relevant pairs the budget found. The figures are not timings.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _smoke  # noqa: E402

FRACTIONS = (0.10, 0.25, 0.50)
STRATEGIES = ("depth", "rrf", "rbp")
DEPTH = 10


def cross_encoder(folder: Path, smoke: bool) -> Path:
    """A BERT cross-encoder with random weights (seeded) and the default model's tokenizer."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    from harness.retrieval.models import resolve_model_source

    size = (
        {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
        if smoke
        else {"hidden_size": 384, "num_hidden_layers": 2, "num_attention_heads": 12, "intermediate_size": 1536}
    )
    tokenizer = BertTokenizerFast.from_pretrained(resolve_model_source("all-MiniLM-L6-v2"))
    torch.manual_seed(0)
    BertForSequenceClassification(
        BertConfig(vocab_size=tokenizer.vocab_size, **size, max_position_embeddings=512, num_labels=1)
    ).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def unjudged_copy(source: Path, folder: Path) -> tuple[Path, object]:
    """The dataset's corpus and its test queries in `folder`, without qrels (a pool then drops nothing), and
    the test qrels (the simulated judge)."""
    import json

    from harness.io.formats import iter_queries, locate_beir_folder
    from harness.io.trec import read_qrels

    located = locate_beir_folder(source, "test")
    qrels = read_qrels(located.qrels)
    folder.mkdir(parents=True)
    (folder / located.corpus.name).symlink_to(located.corpus.resolve())
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as handle:
        for query in iter_queries(located.queries):
            if query.query_id in qrels:
                handle.write(json.dumps({"_id": query.query_id, "text": query.text}) + "\n")
    return folder, qrels


def simulate(qrels, runs: dict, fraction: float, strategy: str) -> dict:
    """Judge `fraction` of the depth-10 pool by `strategy` with `qrels` as the judge; τ, τ_ap, relevant found."""
    from harness.evaluation.metrics import evaluate, parse_metric
    from harness.evaluation.rankings import kendall_tau_b, tau_ap
    from harness.judging.budget import budget_pairs, candidate_ranks
    from harness.records import Qrels

    spec = parse_metric("nDCG@10")
    pool = candidate_ranks(list(runs.values()), DEPTH)
    relevant = {pair for pair in pool if qrels.get(pair[0], {}).get(pair[1], 0) >= 1}
    budget = max(1, round(fraction * len(pool)))
    chosen = budget_pairs(list(runs.values()), DEPTH, budget, strategy)
    judged = Qrels({q: {d: qrels.get(q, {}).get(d, 0) for d in docs} for q, docs in chosen.items()})
    full = {name: evaluate(qrels, run, [spec]).means[str(spec)] for name, run in runs.items()}
    partial = {name: evaluate(judged, run, [spec]).means[str(spec)] for name, run in runs.items()}
    names = sorted(runs)
    found = sum(1 for q, docs in chosen.items() for d in docs if (q, d) in relevant)
    return {
        "pairs": budget,
        "pool": len(pool),
        "tau": kendall_tau_b([full[n] for n in names], [partial[n] for n in names]),
        "tau_ap": tau_ap(full, partial),
        "found": found / len(relevant) if relevant else float("nan"),
        "relevant": len(relevant),
    }


def pooled_runs(folder: Path, systems: str, out: Path) -> dict:
    """Retrieve `systems` with ``pool`` and read back the pool's runs, by system name."""
    import json

    from harness.api import pool
    from harness.io.formats import read_run

    pool(folder, out, systems, depth=DEPTH)
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    return {system["name"]: read_run(out / system["run"]) for system in manifest["systems"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data/beir", help="The folder holding the BEIR datasets.")
    parser.add_argument("--datasets", default="nfcorpus,scifact")
    parser.add_argument("--smoke", action="store_true", help="seconds, on the lesson eval set: proves it runs")
    args = parser.parse_args()
    print(_smoke.host_line())
    if args.smoke:
        print(_smoke.NOTICE)
    sources = [("lesson", _smoke.DEMO)] if args.smoke else [(n, Path(args.data) / n) for n in args.datasets.split(",")]
    dense = "hash:64" if args.smoke else "all-MiniLM-L6-v2"
    with tempfile.TemporaryDirectory() as tmp:
        ce = cross_encoder(Path(tmp) / "random-cross-encoder", args.smoke)
        systems = (
            f"bm25, dense={dense}, rrf=rrf(bm25, {dense}), combmnz=combmnz(bm25, {dense}), "
            f"wsum=wsum(bm25, {dense}, weights=0.3:0.7), rerank=bm25 >> {ce}@{DEPTH}"
        )
        print(f"systems: {systems.replace(str(ce), 'random-cross-encoder')}; judge: the test qrels")
        print("| dataset | budget | strategy | pairs judged | τ-b vs full qrels | τ_ap | relevant found |")
        print("|---|---:|---|---:|---:|---:|---:|")
        for name, source in sources:
            folder, qrels = unjudged_copy(source, Path(tmp) / name)
            runs = pooled_runs(folder, systems, Path(tmp) / f"pool-{name}")
            for fraction in FRACTIONS:
                for strategy in STRATEGIES:
                    got = simulate(qrels, runs, fraction, strategy)
                    print(
                        f"| {name} | {fraction:.0%} | {strategy} | {got['pairs']:,} of {got['pool']:,} | "
                        f"{got['tau']:.3f} | {got['tau_ap']:.3f} | {got['found']:.1%} of {got['relevant']:,} |"
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
