"""Scoring's work and values on 100k run lines: what made it slow once cannot come back unnoticed.

BENCHMARKS.md's scoring figure (1M lines, `benchmarks/suite.py --scoring-only`, ours against pytrec_eval in one
alternated run) regressed 4-5x once: Judged@k ranked every query's documents. No test times anything here (a
busy machine would fail it); this one counts the work instead: documents are ranked only for the queries that need
it (some judgment not relevant, some cutoff below the number retrieved), and only their judged documents. The
values are checked too: against pytrec_eval for the measures it has, and against a brute-force loop written here
for MRR@k and Judged@k.
"""

from __future__ import annotations

import math
import random

import pytest
import pytrec_eval

from harness.evaluation.metrics import evaluate, standard_metrics
from harness.pipeline.config import DEFAULT_DEPTH, DEFAULT_K_VALUES, STANDARD_K
from harness.records import Qrels, Run

N_QUERIES, DEPTH, MISSING = 1000, 100, 10  # about 100k run lines

# What `evaluate` stores by default: every STANDARD_K cutoff up to the default depth, and the shown ones.
K_VALUES = sorted({k for k in STANDARD_K if k <= DEFAULT_DEPTH} | set(DEFAULT_K_VALUES))
TREC_NAMES = {"nDCG": "ndcg_cut", "MAP": "map_cut", "Recall": "recall", "P": "P", "Success": "success"}


def _synthetic(seed: int = 0) -> tuple[dict, dict]:
    """qrels and a run as BEIR-like dicts: graded and grade-0 judgments, unjudged documents, tied scores,
    judged queries the run lacks (they score 0) and run queries nobody judged (ignored)."""
    rng = random.Random(seed)
    qrels = {
        f"q{i}": {f"d{rng.randrange(20_000)}": rng.choice((0, 1, 1, 2)) for _ in range(rng.randint(1, 6))}
        for i in range(N_QUERIES)
    }
    run = {}
    for query_id, judged in list(qrels.items())[MISSING:]:
        # Scores rounded to 2 digits: ties are common, as in BM25 runs.
        docs = {f"d{rng.randrange(20_000)}": round(rng.random(), 2) for _ in range(DEPTH)}
        for doc_id in list(judged)[:2]:  # some judged documents are retrieved
            docs[doc_id] = round(rng.random(), 2)
        run[query_id] = docs
    for i in range(MISSING):
        run[f"unjudged{i}"] = {f"d{j}": 1.0 / (j + 1) for j in range(DEPTH)}
    return qrels, run


def _trec_measures() -> set[str]:
    cutoffs = ",".join(map(str, K_VALUES))
    return {f"{measure}.{cutoffs}" for measure in TREC_NAMES.values()} | {"recip_rank", "Rprec"}


def _brute_force(judged: dict[str, int], scores: dict[str, float]) -> dict[str, float]:
    """MRR@k and Judged@k at every k in trec_eval's order (score, then doc_id, descending), by brute force."""
    ranked = [doc_id for _, doc_id in sorted(((s, d) for d, s in scores.items()), reverse=True)]
    first = next((i + 1 for i, doc_id in enumerate(ranked) if judged.get(doc_id, 0) >= 1), math.inf)
    values = {}
    for k in K_VALUES:
        top = ranked[:k]
        values[f"MRR@{k}"] = 1 / first if first <= k else 0.0
        values[f"Judged@{k}"] = sum(doc_id in judged for doc_id in top) / len(top) if top else 0.0
    return values


def _needs_ranking(judged: dict[str, int], scores: dict[str, float]) -> bool:
    """Whether Judged@k must rank this query's judged documents (by the rule in the module docstring)."""
    retrieved = judged.keys() & scores.keys()
    return bool(retrieved) and min(judged.values()) < 1 and min(K_VALUES) < len(scores)


def test_scoring_ranks_only_what_judged_needs_and_agrees_with_pytrec_eval(monkeypatch):
    import harness.evaluation.metrics as metrics_module

    qrels_dict, run_dict = _synthetic()
    metrics = standard_metrics(K_VALUES)
    n_lines = sum(map(len, run_dict.values()))
    assert {m.name for m in metrics} >= {"Judged", "MRR", "R-Prec"} and n_lines >= 100_000
    ranked = []
    original = metrics_module._ranks

    def counting(scores, doc_ids):
        ranked.append(sorted(doc_ids))
        return original(scores, doc_ids)

    monkeypatch.setattr(metrics_module, "_ranks", counting)

    def ours():
        # As a caller would: qrels and run wrapped (the run adopts the dicts), every default metric.
        return evaluate(Qrels(qrels_dict), Run.adopt(run_dict), metrics)

    def theirs():
        return pytrec_eval.RelevanceEvaluator(qrels_dict, _trec_measures()).evaluate(run_dict)

    evaluation, direct = ours(), theirs()
    expected = {}
    for query_id, judged in qrels_dict.items():
        reference = direct.get(query_id)  # pytrec_eval leaves out the judged queries the run lacks: 0
        values = {"R-Prec": reference["Rprec"] if reference else 0.0}
        values.update(
            {
                f"{name}@{k}": reference[f"{trec_name}_{k}"] if reference else 0.0
                for name, trec_name in TREC_NAMES.items()
                for k in K_VALUES
            }
        )
        values.update(_brute_force(judged, run_dict.get(query_id, {})))
        expected[query_id] = values
    assert set(evaluation.per_query) == set(qrels_dict)
    assert all(row.keys() == expected[q].keys() for q, row in evaluation.per_query.items())
    wrong = [
        (query_id, name, value, expected[query_id][name])
        for query_id, row in evaluation.per_query.items()
        for name, value in row.items()
        if not math.isclose(value, expected[query_id][name], abs_tol=1e-12)
    ]
    assert not wrong, wrong[:5]
    # The mean is over every judged query (the missing ones count as 0), not over the scored ones.
    means = {name: math.fsum(row[name] for row in expected.values()) / N_QUERIES for name in evaluation.means}
    assert evaluation.means == pytest.approx(means, abs=1e-12)
    want = [
        sorted(qrels_dict[q].keys() & run_dict[q].keys())
        for q in qrels_dict
        if q in run_dict and _needs_ranking(qrels_dict[q], run_dict[q])
    ]
    assert sorted(ranked) == sorted(want) and 0 < len(want) < N_QUERIES  # each such query once, its judged hits
