"""How long ``report --resolution`` takes for many systems on many datasets.

Figures: BENCHMARKS.md, "Rank resolution".

Usage (from the repository root):

    python benchmarks/resolution.py [--systems 100] [--datasets 18] [--queries 300] [--rounds 1000] [--test randomization]
    python benchmarks/resolution.py --smoke     # seconds: 8 systems, 2 datasets, 40 queries, 200 rounds

Synthetic per-query scores (the resolution's cost does not depend on their values, only on their number): on each
dataset each query has a difficulty drawn from Beta(2, 3), each system a quality step of 0.002 above the one before
and per-query noise N(0, 0.15), clipped to [0, 1]; ``--queries`` per dataset, ±30 % from one dataset to the next.
Timed: what ``report --resolution`` computes after reading the results, `harness.evaluation.resolution.resolve`
on every dataset (every pair tested, p-values adjusted, letters, rank intervals) and
`harness.evaluation.resolution.resolve_across` on the mean over datasets, with the peak memory Python allocated
(tracemalloc, numpy's arrays included).
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc

import _smoke


def synthetic(systems: int, datasets: int, queries: int, seed: int):
    """One systems × queries array per dataset."""
    import numpy as np

    rng = np.random.default_rng(seed)
    blocks = []
    for _ in range(datasets):
        n = int(queries * rng.uniform(0.7, 1.3))
        difficulty = rng.beta(2, 3, size=n)
        quality = 0.002 * np.arange(systems)[:, None]
        blocks.append(np.clip(difficulty + quality + rng.normal(0, 0.15, size=(systems, n)), 0, 1))
    return blocks


def run(systems: int, datasets: int, queries: int, rounds: int, test: str, seed: int) -> dict:
    from harness.evaluation.resolution import Settings, resolve, resolve_across

    blocks = synthetic(systems, datasets, queries, seed)
    names = [f"system-{k:03d}" for k in range(systems)]
    settings = Settings(test=test, rounds=rounds, seed=seed)
    tracemalloc.start()
    start = time.perf_counter()
    per_dataset = [resolve(names, block, settings=settings, dataset=f"d{k}") for k, block in enumerate(blocks)]
    middle = time.perf_counter()
    across = resolve_across(names, blocks, settings=settings, datasets=[f"d{k}" for k in range(datasets)])
    end = time.perf_counter()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    pairs = systems * (systems - 1) // 2
    return {
        "queries": sum(b.shape[1] for b in blocks),
        "per_dataset_s": middle - start,
        "across_s": end - middle,
        "total_s": end - start,
        "peak_mb": peak / 2**20,
        "separable": sum(p.separable for r in per_dataset for p in r.pairs) / (pairs * datasets),
        "separable_across": sum(p.separable for p in across.pairs) / pairs,
        "letters": len({letter for s in across.standings for letter in s.letters}),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", type=int, default=100)
    parser.add_argument("--datasets", type=int, default=18)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--test", choices=("randomization", "t", "bootstrap"), default="randomization")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="8 systems, 2 datasets, 40 queries, 200 rounds")
    args = parser.parse_args(argv)
    if args.smoke:
        args.systems, args.datasets, args.queries, args.rounds = 8, 2, 40, 200
        print(_smoke.NOTICE)
    import os

    print(_smoke.host_line() + f" (numpy on {os.cpu_count()} CPUs)")
    figures = run(args.systems, args.datasets, args.queries, args.rounds, args.test, args.seed)
    print(
        f"{args.systems} systems × {args.datasets} datasets × ~{args.queries} queries ({figures['queries']:,} in all), "
        f"{args.rounds:,} rounds, {args.test} test, Holm across {args.systems * (args.systems - 1) // 2:,} pairs"
    )
    print(f"  every dataset     {figures['per_dataset_s']:8.1f} s")
    print(f"  across datasets   {figures['across_s']:8.1f} s")
    print(f"  total             {figures['total_s']:8.1f} s   peak memory {figures['peak_mb']:.0f} MB")
    print(
        f"  separable pairs: {figures['separable']:.1%} per dataset, {figures['separable_across']:.1%} across "
        f"datasets ({figures['letters']} letters)"
    )


if __name__ == "__main__":
    sys.exit(main())
