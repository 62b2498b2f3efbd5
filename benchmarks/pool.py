"""Pooling: what a pool costs (its size, the time to pool, the judging page's load) and, under a judging budget,
which strategy finds the relevant documents and keeps the system ranking.

Figures: BENCHMARKS.md, "Pooling NFCorpus, and the judging page's load" (``cost``) and "Pooling under a judging
budget" (``budgets``).

Usage (from the repository root):

    python benchmarks/pool.py cost [--data ../shared/data/beir] [--datasets nfcorpus] [--depths 10,100] [--page-pairs 5000]
    python benchmarks/pool.py budgets [--data ../shared/data/beir] [--datasets nfcorpus,scifact]
    python benchmarks/pool.py --smoke     # seconds: both parts on the lesson eval set

``cost``: the pool is made for the test queries (323 on NFCorpus), as a team pools the queries of its eval set:
a scratch BEIR folder holds the corpus, those queries and the test qrels, so the pairs already judged there are
not pooled again. The three systems are cheap on purpose (the default dense model encodes a few documents a
second on a loaded 2-core machine): BM25 with its default k1 = 0.9, b = 0.4, BM25 with k1 = 1.2, b = 0.75, and
the hashing encoder hash:256 through the dense pipeline (FAISS, exact). Each is retrieved once at the largest
depth, timed; `build_pool` then pools the saved runs at each depth (the pooling itself: reading runs and corpus,
the union, writing pool.csv, pool.jsonl, manifest and judge.html), best of `--rounds`. The judging page is
rendered for the first `--page-pairs` pairs of the depth-10 pool (by query id) with `render_judge_page`, as
`build_pool` writes it, and opened in Chromium `--rounds` times, each in a fresh browser context: load = from
navigation to the page's ready mark.

``budgets``: judging is simulated on fully judged data: the dataset's test qrels are the judge (a pooled pair they
do not grade is judged not relevant). The systems are retrieved by ``beir-harness pool`` itself (``--systems``,
so the runs are the pool's own ``runs/``): BM25, the default dense model (all-MiniLM-L6-v2, from the user's
embedding cache when it is there), fusions of the two (RRF, CombMNZ, a 0.3:0.7 weighted sum) and a rerank of
BM25's top 10 by a cross-encoder. No trained cross-encoder is reachable here, so the rerank uses one with
random weights (the architecture of ``cross-encoder/ms-marco-MiniLM-L-2-v2``, 2 layers, hidden 384): a poor
system, but a different ranking, which is what a pool needs to be tested on. For budgets of 10 %, 25 % and
50 % of the depth-10 pool, each strategy of ``pool --budget N --strategy`` (`harness.judging.budget`) picks the
pairs to judge; the systems are scored (nDCG@10) on the qrels those judgments make, and the table gives
Kendall's τ-b and τ_ap of that ranking against the ranking on the full test qrels, and the share of the depth-10
pool's relevant pairs the budget found. These figures are not timings.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # tests/browser.py: Chromium kept home

import _smoke  # noqa: E402
from browser import CHROMIUM  # noqa: E402
from browser import launch as browser_launch  # noqa: E402

FRACTIONS = (0.10, 0.25, 0.50)  # budgets: shares of the depth-10 pool
STRATEGIES = ("depth", "rrf", "rbp")
DEPTH = 10
DEFAULT_DATASETS = {"cost": "nfcorpus", "budgets": "nfcorpus,scifact"}


def test_queries_folder(source: Path, out: Path, with_qrels: bool):
    """A BEIR folder in `out` with `source`'s corpus, its queries judged in the test split and, `with_qrels`, that
    split (so a pool leaves its pairs out; without, a pool drops nothing); and the test qrels."""
    from harness.io.formats import iter_queries, locate_beir_folder
    from harness.io.trec import read_qrels

    folder = locate_beir_folder(source, "test")
    qrels = read_qrels(folder.qrels)
    out.mkdir(parents=True)
    shutil.copy(folder.corpus, out / folder.corpus.name)
    if with_qrels:
        (out / "qrels").mkdir()
        shutil.copy(folder.qrels, out / "qrels" / folder.qrels.name)
    with open(out / "queries.jsonl", "w", encoding="utf-8") as handle:
        for query in iter_queries(folder.queries):
            if query.query_id in qrels:
                handle.write(json.dumps({"_id": query.query_id, "text": query.text}) + "\n")
    return out, qrels


def retrieve_systems(folder: Path, depth: int, work: Path) -> list[tuple[str, Path, float]]:
    """(name, run file, seconds) of each system, retrieved at `depth`."""
    from harness.io.formats import iter_corpus, iter_queries, locate_corpus_and_queries
    from harness.io.trec import write_run
    from harness.judging.pool import retrieve_runs
    from harness.judging.pool_systems import check_retrievable, parse_pool_systems
    from harness.retrieval.bm25 import BM25Retriever, BM25Spec

    found = []
    paths = locate_corpus_and_queries(folder)
    for name, spec in (("bm25", BM25Spec()), ("bm25-k1.2-b0.75", BM25Spec(k1=1.2, b=0.75))):
        started = time.perf_counter()
        retriever = BM25Retriever(spec)
        retriever.index(iter_corpus(paths.corpus), progress=False)
        run = retriever.search(list(iter_queries(paths.queries)), depth).renamed(name)
        write_run(run, work / f"{name}.trec")
        found.append((name, work / f"{name}.trec", time.perf_counter() - started))
    started = time.perf_counter()
    plan = parse_pool_systems(["hash:256"])
    ((_, run),) = retrieve_runs(check_retrievable(folder, plan, depth), plan.retrieve, work)
    write_run(run.renamed("hash-256"), work / "hash-256.trec")
    found.append(("hash:256", work / "hash-256.trec", time.perf_counter() - started))
    return found


def pool_at(folder: Path, runs: list[Path], depth: int, work: Path, rounds: int) -> tuple[dict, float, Path]:
    """The manifest, best seconds of `rounds` and the last pool folder of pooling `runs` at `depth`."""
    from harness.judging.pool import PoolSources, PoolSpec, build_pool

    best, manifest, out = float("inf"), {}, work
    for number in range(rounds):
        out = work / f"pool-{depth}-{number}"
        started = time.perf_counter()
        manifest = build_pool(folder, PoolSources(run_files=tuple(runs)), out, PoolSpec(depth=depth))
        best = min(best, time.perf_counter() - started)
    return manifest, best, out


def page_of(pool: Path, pairs: int, out: Path) -> tuple[Path, int]:
    """judge.html for the first `pairs` rows of `pool` (by query and document id, as pool.jsonl has them)."""
    from harness.judging.page import render_judge_page

    with open(pool / "pool.jsonl", encoding="utf-8") as handle:
        rows = [json.loads(line) for _, line in zip(range(pairs), handle)]
    manifest = json.loads((pool / "manifest.json").read_text(encoding="utf-8"))
    manifest["counts"] = {
        **manifest["counts"],
        "pairs": len(rows),
        "queries_pooled": len({row["query_id"] for row in rows}),
    }
    out.write_text(render_judge_page(manifest, rows), encoding="utf-8")
    return out, len(rows)


def load_times(page: Path, rounds: int) -> list[float] | None:
    """Seconds from navigation to the page's ready mark, each round in a fresh context; None without Chromium."""
    if not CHROMIUM.exists():
        return None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    times = []
    with sync_playwright() as manager:
        browser = browser_launch(manager)
        for _ in range(rounds):
            context = browser.new_context()
            tab = context.new_page()
            started = time.perf_counter()
            tab.goto(page.as_uri())
            tab.wait_for_selector("body[data-ready='1']")
            times.append(time.perf_counter() - started)
            shown = tab.inner_text("#progress")
            context.close()
        browser.close()
    print(f"  page's progress line: {shown.splitlines()[0]}")
    return times


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
    from harness.api import pool
    from harness.io.formats import read_run

    pool(folder, out, systems, depth=DEPTH)
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    return {system["name"]: read_run(out / system["run"]) for system in manifest["systems"]}


def cost(name: str, source: Path, args, work: Path) -> None:
    """Pool size and time at each depth, and the judging page's size and load time."""
    depths = sorted(int(d) for d in args.depths.split(","))
    folder, _ = test_queries_folder(source, work / "set", with_qrels=True)
    n_queries = sum(1 for _ in open(folder / "queries.jsonl", encoding="utf-8"))
    print(f"{name}: {n_queries} test queries; systems retrieved once at depth {depths[-1]}:")
    systems = retrieve_systems(folder, depths[-1], work)
    for system, _, seconds in systems:
        print(f"  {system:<16} {seconds:7.2f} s")
    print(f"pooling the 3 saved runs (best of {args.rounds}):")
    pools, pool_sizes = {}, {}
    for depth in depths:
        runs = [path for _, path, _ in systems]
        manifest, seconds, pools[depth] = pool_at(folder, runs, depth, work, args.rounds)
        counts = manifest["counts"]
        pool_sizes[depth] = counts["pairs"]
        size = sum(p.stat().st_size for p in pools[depth].rglob("*") if p.is_file()) / 1e6
        page_mb = (pools[depth] / "judge.html").stat().st_size / 1e6
        print(
            f"depth {depth:>3}: {counts['pairs']} pairs to judge over {counts['queries_pooled']} queries "
            f"({counts['pairs'] / max(counts['queries_pooled'], 1):.1f} a query; {counts['already_judged']} "
            f"pooled pairs already judged), {seconds:.2f} s, folder {size:.1f} MB, judge.html {page_mb:.1f} MB"
        )
    # The shallowest pool that has the pairs asked for (else the deepest), cut to that many.
    source_depth = next((d for d in depths if pool_sizes[d] >= args.page_pairs), depths[-1])
    page, n_pairs = page_of(pools[source_depth], args.page_pairs, work / "judge-page.html")
    print(
        f"judging page: {n_pairs} pairs (the first of the depth-{source_depth} pool), "
        f"{page.stat().st_size / 1e6:.2f} MB"
    )
    times = load_times(page, args.rounds)
    if times is None:
        print("  no Chromium (/usr/bin/chromium with Playwright): load time not measured")
    else:
        rounds = ", ".join(f"{t:.3f}" for t in times)
        print(f"  load in headless Chromium: best {min(times):.3f} s, rounds {rounds}")


def budgets(sources: list[tuple[str, Path]], smoke: bool, work: Path) -> None:
    """Per dataset, budget and strategy: τ-b and τ_ap against the full qrels' ranking, the relevant pairs found."""
    dense = "hash:64" if smoke else "all-MiniLM-L6-v2"
    ce = cross_encoder(work / "random-cross-encoder", smoke)
    systems = (
        f"bm25, dense={dense}, rrf=rrf(bm25, {dense}), combmnz=combmnz(bm25, {dense}), "
        f"wsum=wsum(bm25, {dense}, weights=0.3:0.7), rerank=bm25 >> {ce}@{DEPTH}"
    )
    print(f"systems: {systems.replace(str(ce), 'random-cross-encoder')}; judge: the test qrels")
    print("| dataset | budget | strategy | pairs judged | τ-b vs full qrels | τ_ap | relevant found |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for name, source in sources:
        folder, qrels = test_queries_folder(source, work / name, with_qrels=False)
        runs = pooled_runs(folder, systems, work / f"pool-{name}")
        for fraction in FRACTIONS:
            for strategy in STRATEGIES:
                got = simulate(qrels, runs, fraction, strategy)
                print(
                    f"| {name} | {fraction:.0%} | {strategy} | {got['pairs']:,} of {got['pool']:,} | "
                    f"{got['tau']:.3f} | {got['tau_ap']:.3f} | {got['found']:.1%} of {got['relevant']:,} |"
                )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["cost", "budgets"], nargs="?", help="what to measure (see above)")
    parser.add_argument("--data", default="../shared/data/beir", help="the folder holding the BEIR datasets")
    parser.add_argument("--datasets", help="[cost: nfcorpus; budgets: nfcorpus,scifact]")
    parser.add_argument("--depths", default="10,100", help="cost: the pool depths")
    parser.add_argument("--page-pairs", type=int, default=5000, help="cost: the judging page's pairs")
    parser.add_argument("--rounds", type=int, default=3, help="cost: rounds (best reported)")
    parser.add_argument("--smoke", action="store_true", help="seconds, on the lesson eval set: both parts")
    args = parser.parse_args()
    print(_smoke.host_line())
    if args.smoke:
        print(_smoke.NOTICE)
        args.depths, args.rounds = "3,10", 2
    elif args.part is None:
        parser.error("name a part: cost or budgets (or --smoke)")
    work = _smoke.scratch("pool")
    try:
        for part in ("cost", "budgets") if args.smoke else (args.part,):
            names = (args.datasets or DEFAULT_DATASETS[part]).split(",")
            sources = [("lesson", _smoke.DEMO)] if args.smoke else [(n, Path(args.data) / n) for n in names]
            if part == "cost":
                cost(*sources[0], args, work / "cost")
            else:
                budgets(sources, args.smoke, work / "budgets")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
