"""Cold run vs warm rerun of `evaluate` with the embedding cache, in one process run.

Usage (from the repository root):

    python benchmarks/cache_warm.py [--dataset ../shared/data/beir/scifact]

Runs `beir-harness evaluate` twice as separate processes (so the warm run pays model loading and
interpreter start like a user's rerun), with a fresh cache folder: the first run encodes and
stores, the second reuses. Prints both wall times, their ratio (goal: warm ≤ 1/20 of cold) and
checks that every metric is identical.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(dataset: str, cache: Path, out: Path) -> tuple[float, dict]:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "-q", "evaluate", dataset, "--cache-dir", str(cache), "--output-dir",
         str(out), "--json"], capture_output=True, text=True, check=True)
    return time.perf_counter() - started, json.loads(proc.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="../shared/data/beir/scifact")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cold_s, cold = run(args.dataset, Path(tmp) / "cache", Path(tmp) / "out")
        warm_s, warm = run(args.dataset, Path(tmp) / "cache", Path(tmp) / "out")
    same = cold["metrics"] == warm["metrics"]
    print(f"dataset {cold['dataset']}, model {cold['model']}, {cold['config']['n_docs']} documents")
    print(f"cold  {cold_s:8.1f} s  (cache {cold['config']['embedding_cache']}; stages {cold['timings']})")
    print(f"warm  {warm_s:8.1f} s  (cache {warm['config']['embedding_cache']}; stages {warm['timings']})")
    print(f"warm / cold = {warm_s / cold_s:.4f} (1/{cold_s / warm_s:.0f}); goal <= 1/20")
    print(f"nDCG@10 cold {cold['metrics']['nDCG@10']:.5f} warm {warm['metrics']['nDCG@10']:.5f}; "
          f"all metrics identical: {same}")
    return 0 if same and warm_s * 20 <= cold_s else 1


if __name__ == "__main__":
    sys.exit(main())
