"""Cold run vs warm rerun of `evaluate` with the embedding cache, in one process run.

Usage (from the repository root):

    python benchmarks/cache_warm.py [--dataset ../shared/data/beir/scifact] [--model all-MiniLM-L6-v2]
    python benchmarks/cache_warm.py --smoke     # seconds: the lesson eval set, the hashing encoder

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

import _smoke


def run(dataset: str, cache: Path, out: Path, model: str | None) -> tuple[float, dict]:
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="../shared/data/beir/scifact")
    parser.add_argument("--model", default=None, help="any `evaluate --model` [the default model]")
    parser.add_argument("--smoke", action="store_true", help="seconds, on the lesson eval set: proves the script runs")
    args = parser.parse_args()
    print(_smoke.host_line())
    if args.smoke:
        print(_smoke.NOTICE)
        args.dataset, args.model = str(_smoke.DEMO), "hash:64"
    with tempfile.TemporaryDirectory() as tmp:
        cold_s, cold = run(args.dataset, Path(tmp) / "cache", Path(tmp) / "out", args.model)
        warm_s, warm = run(args.dataset, Path(tmp) / "cache", Path(tmp) / "out", args.model)
    same = cold["metrics"] == warm["metrics"]
    print(f"dataset {cold['dataset']}, model {cold['model']}, {cold['config']['n_docs']} documents")
    print(f"cold  {cold_s:8.1f} s  (cache {cold['config']['embedding_cache']}; stages {cold['timings']})")
    print(f"warm  {warm_s:8.1f} s  (cache {warm['config']['embedding_cache']}; stages {warm['timings']})")
    print(f"warm / cold = {warm_s / cold_s:.4f} (1/{cold_s / warm_s:.0f}); goal <= 1/20")
    print(
        f"nDCG@10 cold {cold['metrics']['nDCG@10']:.5f} warm {warm['metrics']['nDCG@10']:.5f}; "
        f"all metrics identical: {same}"
    )
    return 0 if same and (args.smoke or warm_s * 20 <= cold_s) else 1


if __name__ == "__main__":
    sys.exit(main())
