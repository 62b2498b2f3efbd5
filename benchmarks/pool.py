"""Pool size and time on NFCorpus with 3 systems at depth 10 and 100, and the judging page's size and load
time in headless Chromium for a 5,000-pair pool.

Usage (from the repository root):

    python benchmarks/pool.py [--data ../shared/data/beir/nfcorpus] [--depths 10,100] [--page-pairs 5000]
    python benchmarks/pool.py --smoke     # seconds: the lesson eval set, depths 3 and 10

The pool is made for the test queries (323 on NFCorpus), as a team pools the queries of its eval set: a
scratch BEIR folder holds the corpus, those queries and the test qrels, so the pairs already judged there
are not pooled again. The three systems are cheap on purpose (the default dense model encodes a few
documents a second on a loaded 2-core machine): BM25 with its default k1 = 0.9, b = 0.4, BM25 with
k1 = 1.2, b = 0.75, and the hashing encoder hash:256 through the dense pipeline (FAISS, exact). Each is
retrieved once at the largest depth, timed; `build_pool` then pools the saved runs at each depth (the
pooling itself: reading runs and corpus, the union, writing pool.csv, pool.jsonl, manifest and
judge.html), best of `--rounds`. The judging page is rendered for the first `--page-pairs` pairs of the
depth-10 pool (by query id) with `render_judge_page`, as `build_pool` writes it, and opened in Chromium
`--rounds` times, each in a fresh browser context: load = from navigation to the page's ready mark.
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


def test_queries_folder(source: Path, out: Path) -> Path:
    """A BEIR folder with `source`'s corpus, its queries judged in the test split, and that split."""
    from harness.io.formats import iter_queries, locate_beir_folder
    from harness.io.trec import read_qrels

    folder = locate_beir_folder(source, "test")
    qrels = read_qrels(folder.qrels)
    (out / "qrels").mkdir(parents=True)
    shutil.copy(folder.corpus, out / folder.corpus.name)
    shutil.copy(folder.qrels, out / "qrels" / folder.qrels.name)
    with open(out / "queries.jsonl", "w", encoding="utf-8") as handle:
        for query in iter_queries(folder.queries):
            if query.query_id in qrels:
                handle.write(json.dumps({"_id": query.query_id, "text": query.text}) + "\n")
    return out


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data/beir/nfcorpus")
    parser.add_argument("--depths", default="10,100")
    parser.add_argument("--page-pairs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="seconds, on the lesson eval set: proves the script runs")
    args = parser.parse_args()
    print(_smoke.host_line())
    if args.smoke:
        print(_smoke.NOTICE)
        args.data, args.depths, args.rounds = str(_smoke.DEMO), "3,10", 2
    depths = sorted(int(d) for d in args.depths.split(","))
    work = _smoke.scratch("pool")
    try:
        folder = test_queries_folder(Path(args.data), work / "set")
        n_queries = sum(1 for _ in open(folder / "queries.jsonl", encoding="utf-8"))
        print(f"{Path(args.data).name}: {n_queries} test queries; systems retrieved once at depth {depths[-1]}:")
        systems = retrieve_systems(folder, depths[-1], work)
        for name, _, seconds in systems:
            print(f"  {name:<16} {seconds:7.2f} s")
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
        source = next((d for d in depths if pool_sizes[d] >= args.page_pairs), depths[-1])
        page, n_pairs = page_of(pools[source], args.page_pairs, work / "judge-page.html")
        print(
            f"judging page: {n_pairs} pairs (the first of the depth-{source} pool), {page.stat().st_size / 1e6:.2f} MB"
        )
        times = load_times(page, args.rounds)
        if times is None:
            print("  no Chromium (/usr/bin/chromium with Playwright): load time not measured")
        else:
            rounds = ", ".join(f"{t:.3f}" for t in times)
            print(f"  load in headless Chromium: best {min(times):.3f} s, rounds {rounds}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
