"""The cold start of the int8/OpenVINO model: its preparation per step, and a cold evaluate against BEIR's pipeline.

Usage (from the repository root):

    python benchmarks/cold_start.py [--data ../shared/data/beir] [--backends auto,openvino-int8] [--rounds 1]
    python benchmarks/cold_start.py --prepare-only   # the preparation alone: minutes
    python benchmarks/cold_start.py --smoke     # a minute: the lesson eval set alone and a tiny random model

Each step runs in a fresh process (the suite's `benchmarks/suite.py` children, reused here):

* preparation: the default model loaded, then ``--backend openvino-int8`` prepared on the shipped calibration sample
  (`harness.runtimes.calibration.shipped_calibration`) with an empty cache, step by step as the result records it
  (export, calibration, quantize, compile) and the first batch of 32 SciFact documents; then the same model loaded
  again from that cache (what a second run, or a second corpus, pays);
* evaluate: a cold ``evaluate`` of SciFact with each of ``--backends`` (empty cache), alternated round by round
  with BEIR's own pipeline (`suite.BEIR`), then NFCorpus in the same cache (a sweep: the export, auto's decision and
  the int8 model are paid once per machine, not per corpus); ratios to BEIR's wall time, auto's decision seconds
  (``backend probe s``: the CPU class table's pick confirmed, or the full probe) in every row.

Prints the host first. The figures go to BENCHMARKS.md, "Cold start of the int8/OpenVINO model".
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

import _smoke
import suite

PREPARE = (
    suite.CHILD_PRELUDE
    + """
from pathlib import Path
from harness.io.formats import iter_corpus, locate_beir_folder
from harness.records import doc_text
from harness.retrieval.encode import load_encoder
from harness.retrieval.models import DEFAULT_MODEL, resolve_model_source
from harness.runtimes.openvino_backend import openvino_encoder
folder = locate_beir_folder(sys.argv[1], "test")
started = time.perf_counter()
torch_encoder = load_encoder(resolve_model_source(MODEL or DEFAULT_MODEL), batch_size=32)
loaded = time.perf_counter() - started
first = [doc_text(doc) for _, doc in zip(range(32), iter_corpus(folder.corpus))]
runs = []
for _ in range(2):  # cold, then again from the cache the first filled
    started = time.perf_counter()
    encoder = openvino_encoder(torch_encoder, "openvino-int8", Path(sys.argv[2]))  # the shipped sample
    prepared = time.perf_counter() - started
    started = time.perf_counter()
    encoder.encode_docs(first)
    runs.append({**encoder.preparation, "wall": prepared, "first_batch": time.perf_counter() - started})
done(load_torch=loaded, cold=runs[0], again=runs[1])
"""
)
STEPS = ("export", "calibration", "quantize", "compile")


def preparation_lines(folder: str) -> list[str]:
    with tempfile.TemporaryDirectory() as cache:
        measured = suite.child(PREPARE, folder, cache)
    rows = []
    for name in ("cold", "again"):
        run = measured[name]
        cells = ["cached" if step in run["cached"] else f"{run['steps'].get(step, 0.0):.1f}" for step in STEPS]
        rows.append(f"| {name} | {' | '.join(cells)} | {run['seconds']:.1f} | {run['first_batch']:.2f} |")
    return [
        f"torch model loaded in {measured['load_torch']:.1f} s (not part of the preparation)",
        "",
        "| load | export s | calibration s | quantize s | compile s | preparation s | first batch s |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def evaluate_lines(data: Path, names: list[str], backends: list[str], rounds: int) -> list[str]:
    """Each backend's cold evaluate of the first dataset (an empty cache), BEIR's pipeline alternated with them
    round by round (the best round of each kept), then every later dataset in the same cache, once."""
    lines = [
        "| dataset | run | wall s | backend probe s | model preparation s | encode s | nDCG@10 | / BEIR |",
        "|---|---|---|---|---|---|---|---|",
    ]
    scratch = tempfile.mkdtemp(prefix="cold-start-")  # every cache of these runs, removed at the end
    caches: dict[str, str] = {}
    for position, name in enumerate(names):
        folder = str(data / name)
        best: dict[str, dict] = {}
        for _ in range(rounds if position == 0 else 1):
            for backend in backends:
                cache = caches[backend] if position else tempfile.mkdtemp(dir=scratch)
                run = suite.child(suite.OURS, folder, cache, backend)
                if position == 0:
                    caches[backend] = cache  # the later datasets follow this run's cache
                if backend not in best or run["seconds"] < best[backend]["seconds"]:
                    best[backend] = run
            beir = suite.child(suite.BEIR, folder)
            if "beir" not in best or beir["seconds"] < best["beir"]["seconds"]:
                best["beir"] = beir
        for backend in backends:
            run, timings = best[backend], best[backend]["timings"]
            lines.append(
                f"| {name} | ours `--backend {backend}` | {run['seconds']:.1f} | {timings.get('probe_backend', 0):.1f} "
                f"| {timings.get('prepare_model', 0):.1f} "
                f"| {timings['encode']:.1f} | {run['ndcg10']:.5f} | {run['seconds'] / best['beir']['seconds']:.3f} |"
            )
        lines.append(
            f"| {name} | BEIR's pipeline | {best['beir']['seconds']:.1f} | | | | {best['beir']['ndcg10']:.5f} | 1 |"
        )
    shutil.rmtree(scratch, ignore_errors=True)
    return [*lines, ""]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data/beir", help="folder holding scifact and nfcorpus")
    parser.add_argument("--backends", default="auto,openvino-int8", help="comma-separated backends to evaluate")
    parser.add_argument("--rounds", type=int, default=1, help="alternated rounds on the first dataset (best kept)")
    parser.add_argument(
        "--prepare-only", action="store_true", help="only the preparation (minutes), no evaluate against BEIR"
    )
    parser.add_argument("--smoke", action="store_true", help="seconds: the lesson eval set, a tiny random model")
    args = parser.parse_args()
    print(_smoke.host_line())
    data, names = Path(args.data), ["scifact", "nfcorpus"]
    work = _smoke.scratch("cold-start") if args.smoke else None
    if work is not None:
        print(_smoke.NOTICE)
        # One dataset: each step is a process that loads torch (10-20 s on two cores); a later dataset's
        # evaluate is the same step with the first one's cache.
        data, names = work, [_smoke.DEMO.name]
        os.symlink(_smoke.DEMO, work / _smoke.DEMO.name)
        os.environ["SUITE_MODEL"] = str(_smoke.tiny_model(work))  # read by the child steps
        args.backends = "openvino-int8"  # auto's probe is the suite's and auto's own tests' to smoke
    if not suite.openvino_backends(args.smoke):
        raise SystemExit("needs the [openvino] extra: pip install 'beir-harness[openvino]'")
    lines = ["### Preparing `--backend openvino-int8` (empty cache, then again)", ""]
    lines += preparation_lines(str(data / names[0]))
    if not args.prepare_only:
        lines += [f"### Cold evaluate: {', then '.join(names)} in one cache per backend", ""]
        lines += evaluate_lines(data, names, args.backends.split(","), args.rounds)
    print("\n".join(lines))
    if work is not None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
