"""Peak memory and time of `convert` on large synthetic CSV corpora (100k → 1M documents).

Usage (from the repository root):

    python benchmarks/convert_scale.py [--docs 100000,300000,1000000] [--workdir /tmp/convert-scale]
    python benchmarks/convert_scale.py --smoke     # seconds: 300 documents, in a temporary folder

For each size, writes a CSV corpus (about 200 bytes of text a document, with quoted commas and
line breaks), 1,000 queries and 2,000 judgments, then runs the conversion in a fresh process and
reads that process's own peak RSS (`harness.metering.run_measured`). A baseline process that only imports `harness.datasets.convert` gives the
fixed cost; the claim is that what remains grows with the number of ids, not with text size.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from pathlib import Path

import _smoke

from harness.metering import run_measured

WORDS = (
    "retrieval evaluation dense sparse index query document judgment relevance corpus encoder "
    "benchmark ranking vector cosine gradient protein",
    "café naïve",
    '"quoted, text"',
)

CHILD = r"""
import json, sys, time
from pathlib import Path
from harness.datasets.convert import convert_tables
folder = Path(sys.argv[1])
started = time.perf_counter()
if sys.argv[2] == "convert":
    summary = convert_tables(folder / "docs.csv", folder / "queries.csv", folder / "qrels.csv", folder / "out")
    n = summary.n_docs
else:
    n = 0
print(json.dumps({"seconds": time.perf_counter() - started, "docs": n}))
"""


def make_inputs(folder: Path, n_docs: int, seed: int = 0) -> int:
    rng = random.Random(seed)
    vocab = WORDS[0].split()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "docs.csv", "w", encoding="utf-8", newline="") as handle:
        handle.write("id,title,text,source\n")
        for i in range(n_docs):
            body = " ".join(rng.choice(vocab) for _ in range(24))
            if i % 10 == 0:
                body = f'{body}, {WORDS[1]}\r\nsecond line ""{WORDS[2][1:-1]}""'
            handle.write(f'D{i:08d},Title {i},"{body}",synthetic\n')
    with open(folder / "queries.csv", "w", encoding="utf-8") as handle:
        handle.write("qid,query\n")
        handle.writelines(f"Q{i},{' '.join(rng.choice(vocab) for _ in range(6))}\n" for i in range(1000))
    with open(folder / "qrels.csv", "w", encoding="utf-8") as handle:
        handle.write("qid,docid,score\n")
        for i in range(1000):
            for doc in rng.sample(range(n_docs), 2):
                handle.write(f"Q{i},D{doc:08d},{rng.choice((0, 1, 2))}\n")
    return (folder / "docs.csv").stat().st_size


def run_child(folder: Path, mode: str) -> dict:
    """The conversion (or, `mode` baseline, the imports alone) in a fresh process; its seconds and own peak RSS."""
    proc = run_measured(["-c", CHILD, str(folder), mode])
    if proc.returncode != 0:
        raise SystemExit(f"convert ({mode}) failed:\n{proc.stderr[-2000:]}")
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "peak_rss_kib": proc.peak_bytes / 1024}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", default="100000,300000,1000000")
    parser.add_argument("--workdir", default="/tmp/convert-scale")
    parser.add_argument("--smoke", action="store_true", help="seconds, 300 documents: proves the script runs")
    args = parser.parse_args()
    print(_smoke.host_line())
    if args.smoke:
        print(_smoke.NOTICE)
        args.docs, args.workdir = "300", str(_smoke.scratch("convert"))
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    baseline = run_child(workdir, "baseline")
    rows = []
    for n in (int(x) for x in args.docs.split(",")):
        folder = workdir / str(n)
        shutil.rmtree(folder, ignore_errors=True)
        started = time.perf_counter()
        size = make_inputs(folder, n)
        generate = time.perf_counter() - started
        child = run_child(folder, "convert")
        above = (child["peak_rss_kib"] - baseline["peak_rss_kib"]) * 1024
        rows.append(
            {
                "docs": n,
                "csv_mb": size / 2**20,
                "generate_s": generate,
                "convert_s": child["seconds"],
                "peak_rss_mb": child["peak_rss_kib"] / 1024,
                "above_baseline_mb": above / 2**20,
                "bytes_per_doc_above_baseline": above / n,
                "docs_per_s": n / child["seconds"],
            }
        )
        shutil.rmtree(folder, ignore_errors=True)
    print(f"baseline (python + import harness.datasets.convert): peak RSS {baseline['peak_rss_kib'] / 1024:.1f} MB")
    print(
        f"{'docs':>9} {'CSV MB':>8} {'convert s':>10} {'docs/s':>9} {'peak RSS MB':>12} {'above base MB':>14} "
        f"{'B/doc':>7}"
    )
    for r in rows:
        print(
            f"{r['docs']:>9,} {r['csv_mb']:>8.1f} {r['convert_s']:>10.1f} {r['docs_per_s']:>9,.0f} "
            f"{r['peak_rss_mb']:>12.1f} {r['above_baseline_mb']:>14.1f} {r['bytes_per_doc_above_baseline']:>7.0f}"
        )
    if args.smoke:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
