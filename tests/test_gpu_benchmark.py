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
    run = {q: [(d, float(rng.choice([0.5, 1.0, 1.5]))) for d in rng.sample(docs, rng.randint(1, 20))]
           for q in list(qrels)[:-2]}  # two judged queries have no results
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"})
    values = evaluator.evaluate({q: dict(hits) for q, hits in run.items()})
    expected = sum(values.get(q, {}).get("ndcg_cut_10", 0.0) for q in qrels) / len(qrels)
    assert gpu_script.ndcg_at_10(qrels, run) == pytest.approx(expected, abs=1e-12)


def test_its_flop_count_matches_the_issue_figure(gpu_script):
    # all-MiniLM-L6-v2: 6 layers, hidden 384, FFN 1536: about 6 GFLOP per 256-token document.
    assert 5.5e9 < gpu_script.flops_per_doc(256, 6, 384, 1536) < 6.5e9
