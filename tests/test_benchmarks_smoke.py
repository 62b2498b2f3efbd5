"""Every benchmark script still runs: ``python benchmarks/<script> --smoke`` for each file in benchmarks/.

The scripts are found by glob, so a new one without ``--smoke`` (or without its result lines below) fails
here; files whose name starts with ``_`` are helper modules (``benchmarks/_smoke.py``), and a test checks
that none of them is a script. A smoke run takes seconds on tiny data (the lesson eval set, synthetic
corpora, the hashing encoder or a tiny random model; no network, no ../shared data) and must print the
host line and its result lines, exit 0, and write nothing into the repository (its temporary folder,
caches and data folders are the test's). The runs go two at a time, started by a module fixture for the
scripts this session selected, so the file costs about half its summed run time on two cores.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from tracing import check_stayed_home, traced

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = sorted(path.name for path in BENCHMARKS.glob("*.py") if not path.name.startswith("_"))
HELPERS = sorted(path for path in BENCHMARKS.glob("_*.py"))
TIMEOUT_S = 240  # per script: generous for a loaded 2-core machine; a smoke run takes seconds
HOST = r"^host: .+, \d+ cores, kernel class \S+"
NUMBER = r"-?\d+(\.\d+)?"
# What each script's smoke run must print besides the host line: the lines that carry its result.
RESULT_LINES = {
    "bm25_published.py": [
        r"^published scifact: bm25 · pyserini flat 0\.6789",
        rf"^demo +{NUMBER} ",
        r"^largest \|delta\| vs bm25 · pyserini flat: ",
    ],
    "checkpoint.py": [
        rf"^rerun {NUMBER} s = {NUMBER} of the uninterrupted run; metrics identical: True",
        r"^store with checkpoints / without = .*identical bytes: True",
    ],
    "cold_start.py": [
        rf"^\| cold \| {NUMBER} \| {NUMBER} \| {NUMBER} \| {NUMBER} \| {NUMBER} \|",
        r"^\| again \| cached \| cached \| cached \| cached \|",
    ],
    "compression.py": [r"warm sweep of 20 cells", rf"^  64  binary rescore2 +{NUMBER}"],
    "convert_scale.py": [rf"^ +300 +{NUMBER} +{NUMBER}"],
    "endpoint.py": [rf"^  concurrency 16: +{NUMBER} texts/s"],
    "flat_search.py": [
        rf"^GEMM fp32 \(numpy's BLAS\) at \d+ x \d+ x \d+: {NUMBER} GFLOP/s",  # pace
        rf"^  in memory .* {NUMBER}% of the GEMM rate",
        rf"^streamed / in memory = {NUMBER}; identical runs: True$",
        rf"^projected for MS MARCO .*: {NUMBER} s",  # faiss
        rf"^  ray-sharded \(\d+ shards, 2-CPU local cluster\): {NUMBER} s",  # ray
        r"^driver peak RSS: local flat \d+ MiB, ray-sharded \d+ MiB",
        r"^sharded / local = .*identical runs: True$",
    ],
    "fusion.py": [rf"^  dbsf\(bm25, hash:64\) +nDCG@10 {NUMBER}", rf"^  dbsf +fuse +{NUMBER} s +score"],
    "gpu.py": [
        r"^no GPU: smoke on CPU",
        rf"^scifact +fp32 +12 .* {NUMBER}",
        r"^checks: (\d+) of \1 ok; skipped cells: none",
    ],
    "incremental_cache.py": [
        rf"^incremental / cold encode = {NUMBER}",
        r"^nfcorpus after the team corpus: .* as expected: True$",
        rf"^lookup / search = {NUMBER}",
        rf"^warm / cold = {NUMBER}",  # the --cold-warm part
        r"all metrics identical: True$",
    ],
    "index_choices.py": [rf"^synthetic ivfpq .* {NUMBER}", rf"^synthetic sq8 +{NUMBER}"],
    "llm_judge.py": [rf"^  concurrency 16: +{NUMBER} pairs/s", r"^  rerun from the cache: .* 0 requests$"],
    "nanobeir_projection.py": [rf"^  long \(whole\) +{NUMBER} docs/s"],
    "onnx_backend.py": [
        r"^  fused graph, signed, per channel +\d",
        r"^onnx-int8: .* by operator type",
        rf"^  onnx-int8 +{NUMBER} +{NUMBER}x torch",
        rf"^  demo +{NUMBER} ",
    ],
    "pool.py": [
        r"^depth +10: \d+ pairs to judge over \d+ queries",  # cost
        r"^judging page: \d+ pairs .* MB$",
        rf"^\| lesson \| 10% \| depth \| \d+ of \d+ \| {NUMBER} \| {NUMBER} \| {NUMBER}% of \d+ \|",  # budgets
        rf"^\| lesson \| 50% \| rbp \| \d+ of \d+ \| {NUMBER} \| {NUMBER} \| {NUMBER}% of \d+ \|",
    ],
    "rerank.py": [r"^depth +10: +\d+ pairs"],
    "resolution.py": [rf"^  total +{NUMBER} s +peak memory \d+ MB$", r"^  separable pairs: "],
    "train_cross_encoder.py": [rf"trained on \d+ groups of demo test in {NUMBER} s, loss {NUMBER} → {NUMBER}"],
    "scale.py": [
        rf"^ +1,000 +384 +200 ivf +ivf +- +{NUMBER}",
        rf"^ +40,000 +1024 +200 flat +streamed +\d+ +{NUMBER}",
        rf"^onnx-int8 +{NUMBER} docs/s",
        r"^\| nfcorpus \| 3,633 \| 323 \| 0\.01 GiB → in memory",
    ],
    "scifact_reproduction.py": [rf"^nDCG@10 +{NUMBER}", r"^encode throughput: "],
    "sparse_index_scale.py": [
        rf"^bm25 \(strings\): +3,000 +[\d,]+ +{NUMBER}",
        rf"^bm25 \(ids\): +3,000 +[\d,]+ +{NUMBER}",
        rf"^learned \(stacked\): +3,000 +[\d,]+ +{NUMBER}",
        rf"^learned \(in-place\): +3,000 +[\d,]+ +{NUMBER}",
        r"^learned \(in-place\): fitted from",
        rf"^ +2,000 +{NUMBER} +{NUMBER}",  # the --kind learned-search part
    ],
    "suite.py": [
        rf"^\| BEIR's pipeline \| {NUMBER} ",
        rf"^ours / pytrec_eval = {NUMBER}",
        # fastembed ran and agreed with sentence-transformers, or (not installed: CI) said so
        r"^fastembed( \S+ vs sentence-transformers on \d+ texts: .*: ok;|: skipped \(not installed)",
    ],
}
# Files a benchmark must never touch outside its own, explicit full run.
GUARDED = ("BENCHMARKS.md", "benchmarks/suite-latest.md")


def _environment(scratch: Path) -> dict[str, str]:
    for name in ("tmp", "cache", "data", "home"):
        (scratch / name).mkdir(parents=True, exist_ok=True)
    env = {key: value for key, value in os.environ.items() if key != "OUT"}  # gpu.py writes $OUT/gpu.json
    env.update(
        {
            "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
            "TMPDIR": str(scratch / "tmp"),
            "BEIR_HARNESS_CACHE_DIR": str(scratch / "cache"),
            "BEIR_HARNESS_DATA_DIR": str(scratch / "data"),
            "XDG_CACHE_HOME": str(scratch / "home"),
            "HF_HOME": str(scratch / "home" / "hf"),
            "MPLCONFIGDIR": str(scratch / "home"),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "OMP_NUM_THREADS": "1",  # two runs at a time share the cores
        }
    )
    return env


def _smoke(script: str, scratch: Path) -> subprocess.CompletedProcess:
    """The script's smoke run, traced with strace -f (its children too: Chromium, servers, workers) into
    ``scratch/trace.txt``, which `test_smoke_runs_never_leave_loopback` reads."""
    command = traced([sys.executable, str(BENCHMARKS / script), "--smoke"], scratch / "trace.txt")
    # A session of its own, so a timeout also ends the script's children (suite.py's steps, endpoint.py's server).
    with subprocess.Popen(
        command,
        cwd=ROOT,
        env=_environment(scratch),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            out, err = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            err += f"\ntimed out after {TIMEOUT_S} s"
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _repository_state() -> dict[str, str]:
    """The guarded files' digests and, in a git checkout, every changed or untracked path."""
    state = {
        name: hashlib.sha256((ROOT / name).read_bytes()).hexdigest() if (ROOT / name).exists() else "absent"
        for name in GUARDED
    }
    if (ROOT / ".git").exists():
        proc = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT, capture_output=True, text=True
        )
        if proc.returncode == 0:
            state["git status"] = proc.stdout
    return state


@pytest.fixture(scope="module")
def smoke_runs(request, tmp_path_factory):
    """Start the selected scripts' smoke runs, two at a time; script name → Future of its CompletedProcess."""
    mine = [item for item in request.session.items if item.module is request.module]
    selected = {item.callspec.params["script"] for item in mine if hasattr(item, "callspec")}
    everything = any(item.originalname == test_smoke_runs_write_nothing_into_the_repository.__name__ for item in mine)
    chosen = SCRIPTS if everything else [script for script in SCRIPTS if script in selected]
    before = _repository_state()
    pool = ThreadPoolExecutor(max_workers=2)
    # The scripts that load torch take seconds, the others a second: start those first, so neither worker
    # ends up running the longest one alone at the end.
    slow_first = sorted(chosen, key=lambda s: not re.search(r"import torch|tiny_model", (BENCHMARKS / s).read_text()))
    scratches = {script: tmp_path_factory.mktemp(script[:-3]) for script in slow_first}
    futures: dict[str, Future] = {script: pool.submit(_smoke, script, scratches[script]) for script in slow_first}
    for script, future in futures.items():
        future.trace = scratches[script] / "trace.txt"
    yield before, futures
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("script", SCRIPTS)
def test_smoke_run_prints_its_results(smoke_runs, script):
    _, futures = smoke_runs
    assert script in RESULT_LINES, f"benchmarks/{script}: add the lines its --smoke run prints to RESULT_LINES"
    proc = futures[script].result()
    output = f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, f"python benchmarks/{script} --smoke exited {proc.returncode}\n{output}"
    for pattern in [HOST, *RESULT_LINES[script]]:
        assert re.search(pattern, proc.stdout, re.M), f"benchmarks/{script} --smoke did not print {pattern!r}\n{output}"


@pytest.mark.parametrize("script", SCRIPTS)
def test_smoke_runs_never_leave_loopback(smoke_runs, script):
    """Each smoke run and every process it starts (the pool benchmark's Chromium, the endpoint benchmark's server,
    Ray's daemons, suite.py's steps) made no connect or send outside loopback."""
    _, futures = smoke_runs
    futures[script].result()
    check_stayed_home(
        futures[script].trace.read_text(errors="replace"),
        f"benchmarks/{script} --smoke",
        unreachable_ok=script == "pool.py",
    )  # Chromium's refused IPv6 probe: tests/browser.py


def test_smoke_runs_write_nothing_into_the_repository(smoke_runs):
    before, futures = smoke_runs
    for future in futures.values():
        future.result()
    assert _repository_state() == before, "a --smoke run changed the repository (it must write under $TMPDIR only)"


def test_every_script_has_a_smoke_mode_and_helpers_are_not_scripts():
    assert sorted(RESULT_LINES) == SCRIPTS, "RESULT_LINES must name exactly the scripts in benchmarks/"
    for script in SCRIPTS:
        assert '"--smoke"' in (BENCHMARKS / script).read_text(encoding="utf-8"), f"benchmarks/{script}: no --smoke"
    for helper in HELPERS:
        assert "__main__" not in helper.read_text(encoding="utf-8"), f"{helper.name} is a script: drop the leading _"


def _options(script: str) -> tuple[set[str], set[str]]:
    """(its --options, the choices of its positional arguments), read from its argparse calls."""
    text = (BENCHMARKS / script).read_text(encoding="utf-8")
    options = set(re.findall(r'add_argument\(\s*"(--[\w-]+)"', text)) | {"--help"}
    choices = {
        c
        for group in re.findall(r'add_argument\(\s*"[a-z]\w*",\s*choices=\[([^\]]*)\]', text)
        for c in re.findall(r'"([^"]+)"', group)
    }
    return options, choices


def test_every_benchmark_command_in_the_docs_uses_options_the_script_has():
    commands = []
    for doc in (ROOT / "BENCHMARKS.md", ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))):
        if doc.exists():
            for line in doc.read_text(encoding="utf-8").splitlines():
                commands += [(doc.name, *m) for m in re.findall(r"python benchmarks/(\w+\.py)([^`#)\n]*)", line)]
    assert commands, "no benchmark command found in BENCHMARKS.md"
    for doc, script, arguments in commands:
        assert script in SCRIPTS, f"{doc}: python benchmarks/{script}: no such script"
        options, choices = _options(script)
        tokens = arguments.split()
        for token in tokens:
            if token.startswith("--"):
                assert token.split("=")[0] in options, f"{doc}: benchmarks/{script} has no option {token}"
        if choices and tokens and not tokens[0].startswith("-"):  # a positional part, as checkpoint.py's
            assert tokens[0] in choices, f"{doc}: benchmarks/{script}: {tokens[0]} is not one of {sorted(choices)}"
