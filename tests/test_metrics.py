"""Metrics: hand-computed tables, the evaluation rules, and agreement with pytrec_eval and BEIR."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
import pytrec_eval
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.errors import UnknownMetricError
from harness.evaluation.metrics import (
    MetricSpec,
    alias_table,
    evaluate,
    metric_families,
    parse_k_values,
    parse_metric,
    read_metric_table,
    standard_metrics,
)
from harness.records import Qrels, Run, rank_scores

LOG2_3 = math.log2(3)


def _one(qrels: dict, scores: dict, metric: str) -> float:
    return evaluate(Qrels({"q": qrels}), Run.from_scores({"q": scores}), [parse_metric(metric)]).means[metric]


# Rankings below are written best first; scores descend so no tie rule is involved.
@pytest.mark.parametrize(
    ("qrels", "ranking", "metric", "expected"),
    [
        ({"a": 1}, ["a", "b"], "nDCG@10", 1.0),
        ({"a": 1}, ["b", "a"], "nDCG@10", 1 / LOG2_3),
        ({"a": 1}, ["b", "a"], "nDCG@1", 0.0),
        # graded: linear gain 2 and 1; ideal order a(2), b(1)
        ({"a": 2, "b": 1}, ["b", "a"], "nDCG@10", (1 + 2 / LOG2_3) / (2 + 1 / LOG2_3)),
        ({"a": 2, "b": 1}, ["b", "x", "a"], "nDCG@2", 1 / (2 + 1 / LOG2_3)),
        # grade 0 is judged non-relevant: gains nothing, not in the ideal list
        ({"a": 1, "z": 0}, ["z", "a"], "nDCG@10", 1 / LOG2_3),
        ({"a": 1, "b": 1, "c": 1}, ["a", "x", "b"], "Recall@2", 1 / 3),
        ({"a": 1, "b": 1, "c": 1}, ["a", "x", "b"], "Recall@3", 2 / 3),
        ({"a": 1, "z": 0}, ["a", "z"], "Recall@1", 1.0),
        ({"a": 1, "b": 1}, ["x", "a", "y", "b"], "P@2", 1 / 2),
        ({"a": 1}, ["a"], "P@5", 1 / 5),  # P@k divides by k even when fewer are retrieved
        ({"a": 1, "b": 1}, ["x", "a", "y", "b"], "MRR@10", 1 / 2),
        ({"a": 1, "b": 1}, ["x", "y", "a"], "MRR@2", 0.0),
        ({"a": 2}, ["x", "a"], "MRR@10", 1 / 2),
        ({"a": 1, "b": 1}, ["a", "x", "b"], "MAP@10", (1 + 2 / 3) / 2),
        ({"a": 1, "b": 1}, ["a", "x", "b"], "MAP@2", 1 / 2),  # denominator is all relevant docs
        ({"z": 0}, ["z"], "nDCG@10", 0.0),  # a query with no relevant document scores 0
        ({"z": 0}, ["z"], "MRR@10", 0.0),
        ({"z": 0}, ["z"], "Recall@10", 0.0),
    ],
)
def test_hand_computed(qrels, ranking, metric, expected):
    scores = {doc_id: float(len(ranking) - i) for i, doc_id in enumerate(ranking)}
    assert _one(qrels, scores, metric) == pytest.approx(expected, abs=1e-12)


def test_ties_break_by_doc_id_descending_for_every_metric():
    # All four documents tie; trec_eval ranks them d, c, b, a.
    scores = {"a": 0.5, "b": 0.5, "c": 0.5, "d": 0.5}
    assert [hit.doc_id for hit in rank_scores(scores)] == ["d", "c", "b", "a"]
    assert _one({"b": 1}, scores, "MRR@10") == pytest.approx(1 / 3)
    assert _one({"b": 1}, scores, "nDCG@10") == pytest.approx(1 / 2)  # 1/log2(4)
    assert _one({"b": 1}, scores, "P@2") == 0.0
    assert _one({"b": 1}, scores, "P@3") == pytest.approx(1 / 3)
    # Judged counts any grade (a's 0 too) and divides by min(k, retrieved): d, c unjudged, then b, a.
    judged = {"b": 1, "a": 0}
    assert [_one(judged, scores, f"Judged@{k}") for k in (1, 2, 3, 4, 10)] == [0.0, 0.0, 1 / 3, 1 / 2, 1 / 2]


def test_every_judged_query_counts_and_a_missing_one_scores_zero():
    qrels = Qrels({"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 0}})
    run = Run.from_scores({"q1": {"a": 1.0}, "q9": {"a": 1.0}})  # q2, q3 missing; q9 unjudged
    evaluation = evaluate(qrels, run, [parse_metric("nDCG@10"), parse_metric("MRR@10")])
    assert evaluation.n_queries == 3
    assert evaluation.n_missing == 2
    assert evaluation.n_unjudged == 1
    assert evaluation.means["nDCG@10"] == pytest.approx(1 / 3)
    assert evaluation.means["MRR@10"] == pytest.approx(1 / 3)
    assert evaluation.per_query["q2"] == {"nDCG@10": 0.0, "MRR@10": 0.0}
    assert set(evaluation.per_query) == {"q1", "q2", "q3"}


def test_evaluate_does_not_mutate_inputs():
    qrels = Qrels({"q": {"a": 1}})
    run = Run.from_scores({"q": {"q": 9.0, "a": 1.0}})
    before = (qrels.to_dict(), run.to_dict())
    evaluate(qrels, run, standard_metrics([1, 10]))
    assert (qrels.to_dict(), run.to_dict()) == before


def test_parse_metric_and_canonical_names():
    assert str(parse_metric("nDCG@10")) == "nDCG@10"
    assert parse_metric("ndcg@10") == MetricSpec("nDCG", 10)
    assert str(parse_metric("recall@100")) == "Recall@100"
    assert [str(m) for m in standard_metrics([10, 1])] == [
        "nDCG@1",
        "nDCG@10",
        "MAP@1",
        "MAP@10",
        "Recall@1",
        "Recall@10",
        "P@1",
        "P@10",
        "MRR@1",
        "MRR@10",
        "Success@1",
        "Success@10",
        "R-Prec",
        "Judged@1",
        "Judged@10",
    ]
    for bad in ("ndcg_cut", "P", "nDCG@0", "nDCG@x", "BLEU@10", "", "@10", "R-Prec@10", "Judged"):
        with pytest.raises(UnknownMetricError):
            parse_metric(bad)


def test_parse_k_values():
    assert parse_k_values("10, 1,3,10") == [1, 3, 10]
    for bad in ("", "0", "1,,3", "-1", "a", "1.5", "²", "١"):
        with pytest.raises(UnknownMetricError):
            parse_k_values(bad)


def test_metric_table_is_valid():
    families = metric_families()
    assert list(families) == ["nDCG", "MAP", "Recall", "P", "MRR", "Success", "R-Prec", "Judged"]
    for family in families.values():
        assert family.description and family.aliases
        assert family.trec_eval is None or family.trec_eval in pytrec_eval.supported_measures
        assert family.uncut is None or family.uncut in pytrec_eval.supported_measures
    assert [f.name for f in families.values() if f.trec_eval is None] == ["Judged"]  # computed here


@pytest.mark.parametrize(
    "alias, canonical",
    [
        ("ndcg_cut_10", "nDCG@10"),
        ("ndcg_cut.10", "nDCG@10"),
        ("recall_100", "Recall@100"),
        ("map_cut_100", "MAP@100"),
        ("P_10", "P@10"),
        ("success_10", "Success@10"),
        ("Rprec", "R-Prec"),  # trec_eval
        ("nDCG@10", "nDCG@10"),
        ("R@100", "Recall@100"),
        ("RR@10", "MRR@10"),
        ("AP@100", "MAP@100"),
        ("P@10", "P@10"),
        ("Success@10", "Success@10"),
        ("Judged@10", "Judged@10"),  # ir_measures
        ("ndcg_at_10", "nDCG@10"),
        ("recall_at_100", "Recall@100"),
        ("mrr_at_10", "MRR@10"),
        ("hit_rate_at_10", "Success@10"),
        ("map_at_100", "MAP@100"),
        ("precision_at_10", "P@10"),  # MTEB
        ("map", "MAP"),
        ("recip_rank", "MRR"),
        ("ndcg", "nDCG"),  # trec_eval's, over the whole run
        ("AP", "MAP"),
        ("RR", "MRR"),
        ("nDCG", "nDCG"),  # ir_measures', likewise
    ],
)
def test_other_tools_names_are_accepted(alias, canonical):
    assert str(parse_metric(alias)) == canonical


@pytest.mark.parametrize(
    "text, message",
    [
        ("nDGC@10", "did you mean nDCG@10?"),
        ("MRR@1O", "metric 'MRR@1O': cutoff '1O' is not a positive integer"),
        ("P", "needs a cutoff, e.g. P@10"),
        ("map_cut", "needs a cutoff, e.g. MAP@10 (or MAP: the whole run)"),
        ("R-Prec@5", "R-Prec has no cutoff"),
        ("nDCG@1k", "cutoff '1k' is not a positive integer"),
        ("bleu@4", "use one of nDCG@k, MAP@k"),
    ],
)
def test_a_wrong_metric_name_gets_a_suggestion(text, message):
    with pytest.raises(UnknownMetricError, match=re.escape(message)):
        parse_metric(text)


# --- an independent reference of trec_eval's semantics, to pin pytrec_eval's and ours ---


def _reference(judged: dict[str, int], scores: dict[str, float], name: str, k: int) -> float:
    ranked = [doc for _, doc in sorted(((s, d) for d, s in scores.items()), reverse=True)][:k]
    relevant = {d for d, g in judged.items() if g >= 1}
    hits = [d in relevant for d in ranked]
    if not relevant:
        return 0.0
    if name == "Recall":
        return sum(hits) / len(relevant)
    if name == "P":
        return sum(hits) / k
    if name == "MRR":
        return next((1 / (i + 1) for i, h in enumerate(hits) if h), 0.0)
    if name == "MAP":
        found, total = 0, 0.0
        for i, h in enumerate(hits):
            if h:
                found += 1
                total += found / (i + 1)
        return total / len(relevant)
    dcg = sum(max(judged.get(d, 0), 0) / math.log2(i + 2) for i, d in enumerate(ranked))
    ideal = sorted((g for g in judged.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


doc_ids = st.sampled_from([f"d{i}" for i in range(12)] + ["D1", "a", "Z"])
query_ids = st.sampled_from(["q1", "q2", "q3", "Q", "10", "9"])
judgments = st.dictionaries(query_ids, st.dictionaries(doc_ids, st.integers(0, 3), min_size=1), min_size=1)
# Few distinct score values, so ties are frequent.
scores = st.dictionaries(doc_ids, st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0, -1.0]))
runs = st.dictionaries(query_ids, scores)
ks = st.lists(st.integers(1, 15), min_size=1, max_size=4, unique=True)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(judgments, runs, ks)
def test_agrees_with_pytrec_eval_and_the_reference(qrels_dict, run_dict, k_values):
    qrels, run = Qrels(qrels_dict), Run.from_scores(run_dict)
    evaluation = evaluate(qrels, run, standard_metrics(k_values))
    measures = {"ndcg_cut", "map_cut", "recall", "P"}
    direct = pytrec_eval.RelevanceEvaluator(
        qrels_dict, {f"{m}." + ",".join(map(str, k_values)) for m in measures}
    ).evaluate(run_dict)
    trec_names = {"nDCG": "ndcg_cut", "MAP": "map_cut", "Recall": "recall", "P": "P"}
    for query_id, judged in qrels_dict.items():
        query_scores = run_dict.get(query_id, {})
        for k in k_values:
            for name in ("nDCG", "MAP", "Recall", "P", "MRR"):
                ours = evaluation.per_query[query_id][f"{name}@{k}"]
                assert ours == pytest.approx(_reference(judged, query_scores, name, k), abs=1e-9)
                if name == "MRR":
                    cut = {h.doc_id: h.score for h in run.get(query_id, ())[:k]}
                    if cut:
                        rr = pytrec_eval.RelevanceEvaluator({query_id: judged}, {"recip_rank"}).evaluate(
                            {query_id: cut}
                        )[query_id]["recip_rank"]
                        assert ours == pytest.approx(rr, abs=1e-9)
                elif query_id in direct:
                    assert ours == pytest.approx(direct[query_id][f"{trec_names[name]}_{k}"], abs=1e-9)
    direct = pytrec_eval.RelevanceEvaluator(qrels_dict, {"success." + ",".join(map(str, k_values)), "Rprec"}).evaluate(
        run_dict
    )
    for query_id in qrels_dict:
        if query_id in direct:
            assert evaluation.per_query[query_id]["R-Prec"] == pytest.approx(direct[query_id]["Rprec"], abs=1e-9)
            for k in k_values:
                assert evaluation.per_query[query_id][f"Success@{k}"] == direct[query_id][f"success_{k}"]
    for name, mean in evaluation.means.items():
        assert mean == pytest.approx(sum(row[name] for row in evaluation.per_query.values()) / len(qrels_dict))


def _ir_measures_judged(qrels_dict: dict, run_dict: dict, k_values: list[int]) -> dict:
    ir_measures = pytest.importorskip("ir_measures")
    return {
        (m.query_id, str(m.measure)): m.value
        for m in ir_measures.iter_calc(
            [ir_measures.Judged @ k for k in k_values],
            [ir_measures.Qrel(q, d, g) for q, docs in qrels_dict.items() for d, g in docs.items()],
            [ir_measures.ScoredDoc(q, d, s) for q, docs in run_dict.items() for d, s in docs.items()],
        )
    }


def _our_judged(qrels_dict: dict, run_dict: dict, k_values: list[int]) -> list:
    """Judged@k alone and beside every other metric (pytrec_eval then runs too): both agree with the reference."""
    qrels, run = Qrels(qrels_dict), Run.from_scores(run_dict)
    return [
        evaluate(qrels, run, [MetricSpec("Judged", k) for k in k_values]),
        evaluate(qrels, run, standard_metrics(k_values)),
    ]


# Grades below 1 are judged too; the doc_id pool is larger than any query's judgments, so most runs
# retrieve unjudged documents.
any_grade_judgments = st.dictionaries(query_ids, st.dictionaries(doc_ids, st.integers(-1, 3), min_size=1), min_size=1)


def test_judged_ranks_as_pytrec_eval_does_so_its_top_k_is_the_one_ndcg_read():
    # pytrec_eval compares scores as float32: 1e-50 ties with 0.0 there and z (doc_id descending) comes
    # first, so nDCG@1 is 0. Judged@1 reads the same top 1 (z, unjudged): 0, alone or beside the others,
    # where every judgment is relevant (read from P@1) and where one is not (b's 0: ranked here).
    run = Run.from_scores({"q": {"a": 1e-50, "z": 0.0, "b": -1.0}})
    for judgments in ({"q": {"a": 1}}, {"q": {"a": 1, "b": 0}}):
        qrels = Qrels(judgments)
        assert evaluate(qrels, run, [parse_metric("Judged@1")]).means["Judged@1"] == 0.0
        both = evaluate(qrels, run, standard_metrics([1]))
        assert both.means["Judged@1"] == 0.0 and both.means["nDCG@1"] == 0.0
        assert evaluate(qrels, run, [parse_metric("Judged@2")]).means["Judged@2"] == 0.5
    # Scores apart in float32 keep their order: a first.
    close = Run.from_scores({"q": {"a": 1.0000001, "z": 1.0}})
    assert evaluate(Qrels({"q": {"a": 1, "b": 0}}), close, [parse_metric("Judged@1")]).means["Judged@1"] == 1.0


def _float32_judged(judged: dict, scores: dict, k: int) -> float:
    """Brute force: the judged share of the top min(k, n), ranked as pytrec_eval ranks (float32, doc_id desc)."""
    ranked = sorted(scores, key=lambda d: (float(np.float32(scores[d])), d), reverse=True)[:k]
    return sum(d in judged for d in ranked) / min(k, len(scores)) if scores else 0.0


# Values that are distinct as float64 but tie as float32 (0.0 and 1e-50, 1.0 and 1 + 1e-8), with exact ones.
float32_colliding = st.dictionaries(doc_ids, st.sampled_from([0.0, 1e-50, -1e-46, 1.0, 1.00000001, 1.0000001, 0.25]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(any_grade_judgments, st.dictionaries(query_ids, float32_colliding), ks)
def test_judged_agrees_with_a_float32_brute_force(qrels_dict, run_dict, k_values):
    for ours in _our_judged(qrels_dict, run_dict, k_values):
        for query_id, judged in qrels_dict.items():
            for k in k_values:
                expected = _float32_judged(judged, run_dict.get(query_id, {}), k)
                assert ours.per_query[query_id][f"Judged@{k}"] == pytest.approx(expected, abs=1e-12)
        for k in k_values:
            expected_mean = sum(_float32_judged(j, run_dict.get(q, {}), k) for q, j in qrels_dict.items()) / len(
                qrels_dict
            )
            assert ours.means[f"Judged@{k}"] == pytest.approx(expected_mean, abs=1e-12)


# Distinct scores: ir_measures breaks ties its own way; with none, every order agrees. Float32 values, so
# pytrec_eval's float32 order (which Judged@k reads) is ir_measures' float64 order too.
distinct_scores = st.dictionaries(doc_ids, st.floats(-5, 5, allow_nan=False, width=32)).filter(
    lambda d: len(set(d.values())) == len(d)
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(any_grade_judgments, st.dictionaries(query_ids, distinct_scores), ks)
def test_judged_agrees_with_ir_measures(qrels_dict, run_dict, k_values):
    theirs = _ir_measures_judged(qrels_dict, run_dict, k_values)
    for ours in _our_judged(qrels_dict, run_dict, k_values):
        for query_id in qrels_dict:
            for k in k_values:
                expected = theirs.get((query_id, f"Judged@{k}"), 0.0)
                assert ours.per_query[query_id][f"Judged@{k}"] == pytest.approx(expected, abs=1e-12)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(any_grade_judgments, runs, ks)
def test_judged_with_ties_agrees_with_ir_measures_on_trec_eval_order(qrels_dict, run_dict, k_values):
    # Scores from a few values tie often, across every cutoff. ir_measures breaks ties by doc_id
    # ascending, trec_eval (and we) descending: it is given the trec_eval order, sorted here by brute
    # force, as distinct scores, so its Judged@k is computed on our order.
    ordered = {
        q: {d: -i for i, (_, d) in enumerate(sorted(((s, d) for d, s in docs.items()), reverse=True))}
        for q, docs in run_dict.items()
    }
    theirs = _ir_measures_judged(qrels_dict, ordered, k_values)
    for ours in _our_judged(qrels_dict, run_dict, k_values):
        for query_id in qrels_dict:
            for k in k_values:
                expected = theirs.get((query_id, f"Judged@{k}"), 0.0)
                assert ours.per_query[query_id][f"Judged@{k}"] == pytest.approx(expected, abs=1e-12)
        for k in k_values:
            expected_mean = sum(theirs.get((q, f"Judged@{k}"), 0.0) for q in qrels_dict) / len(qrels_dict)
            assert ours.means[f"Judged@{k}"] == pytest.approx(expected_mean, abs=1e-12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(judgments, runs, ks, st.booleans())
def test_agrees_with_beir_evaluate_retrieval(qrels_dict, run_dict, k_values, ignore_identical_ids):
    from beir.retrieval.evaluation import EvaluateRetrieval

    from harness.pipeline.evaluate import apply_self_hit_policy

    # BEIR averages over the queries in the run, we over the judged ones: compare where they coincide.
    run_dict = {q: run_dict.get(q, {}) for q in qrels_dict}
    run = apply_self_hit_policy(Run.from_scores(run_dict), ignore_identical_ids)
    ours = evaluate(Qrels(qrels_dict), run, standard_metrics(k_values)).means
    beir_copy = {q: dict(docs) for q, docs in run_dict.items()}
    ndcg, _map, recall, precision = EvaluateRetrieval.evaluate(
        qrels_dict, beir_copy, k_values, ignore_identical_ids=ignore_identical_ids
    )
    theirs = {**ndcg, **_map, **recall, **precision}
    for k in k_values:
        for ours_name, beir_name in (("nDCG", "NDCG"), ("MAP", "MAP"), ("Recall", "Recall"), ("P", "P")):
            # BEIR rounds its means to 5 decimals.
            assert ours[f"{ours_name}@{k}"] == pytest.approx(theirs[f"{beir_name}@{k}"], abs=5e-6 + 1e-12)


# The metric table's rules, the refusals a user reads, and what an evaluation counts beside its scores.
#
# Scores are checked against pytrec_eval and counts against a loop written here; refusal texts are the exact
# lines a user sees (each names the metric and gives a spelling that works).
# The tests below use no fixture of conftest.py: tools/mutation.py runs them with --noconftest.


TABLE_HEADER = "name,trec_eval,cutoff,uncut,aliases,description\n"


@pytest.mark.parametrize(
    "text, message",
    [
        ("recall", "metric 'recall' needs a cutoff, e.g. Recall@10"),
        ("ndcg_cut", "metric 'ndcg_cut' needs a cutoff, e.g. nDCG@10 (or nDCG: the whole run)"),
        ("ndgc", "unknown metric 'ndgc'; did you mean nDCG@10?"),
        ("ndgc@5", "unknown metric 'ndgc@5'; did you mean nDCG@5?"),
        ("rprc", "unknown metric 'rprc'; did you mean R-Prec?"),
        (
            "zzz",
            "unknown metric 'zzz'; use one of nDCG@k, MAP@k, Recall@k, P@k, MRR@k, Success@k, R-Prec, Judged@k "
            "(e.g. nDCG@10)",
        ),
        ("ndcg@x", "metric 'ndcg@x': cutoff 'x' is not a positive integer (e.g. nDCG@10)"),
        ("nDCG@0", "metric 'nDCG@0': cutoff '0' is not a positive integer (e.g. nDCG@10)"),
        ("rprec@5", "metric 'rprec@5': R-Prec has no cutoff; write R-Prec"),
    ],
)
def test_a_bad_metric_is_refused_with_a_spelling_that_works(text, message):
    with pytest.raises(UnknownMetricError) as caught:
        parse_metric(text)
    assert str(caught.value) == message
    suggested = re.search(r"did you mean (\S+)\?$", message)
    if suggested:  # the suggestion itself parses
        parse_metric(suggested[1])


@pytest.mark.parametrize("text, bad", [("1,x", "x"), ("", ""), ("3,,10", ""), ("10,²", "²")])
def test_a_bad_cutoff_list_is_refused_naming_the_entry(text, bad):
    with pytest.raises(UnknownMetricError) as caught:
        parse_k_values(text)
    assert str(caught.value) == f"cutoff {bad!r} in {text!r} is not a positive integer (e.g. 1,3,10)"


def test_a_metric_table_naming_a_metric_twice_is_refused():
    row = 'P,P,yes,,p,"precision"\n'
    with pytest.raises(ValueError) as caught:
        read_metric_table(TABLE_HEADER + row + row)
    assert str(caught.value) == "metrics.csv: duplicate metric 'P'"


def test_a_metric_table_giving_one_alias_to_two_metrics_is_refused():
    families = read_metric_table(TABLE_HEADER + 'P,P,yes,,p;hit,"precision"\nSuccess,success,yes,,hit,"success"\n')
    with pytest.raises(ValueError) as caught:
        alias_table(families)
    assert str(caught.value) == "metrics.csv: alias 'hit' names two metrics"


def test_the_shipped_table_is_read_once_and_its_records_cannot_change():
    assert metric_families() is metric_families()
    family = metric_families()["nDCG"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        family.cutoff = False
    assert hash(family) == hash(dataclasses.replace(family))


def test_metric_specs_sort_by_name_then_cutoff():
    specs = [MetricSpec("P", 10), MetricSpec("MAP", 100), MetricSpec("P", 1), MetricSpec("MAP", 0)]
    assert sorted(specs) == [MetricSpec("MAP", 0), MetricSpec("MAP", 100), MetricSpec("P", 1), MetricSpec("P", 10)]


def test_an_evaluation_cannot_be_changed_after_it_is_made():
    result = evaluate(Qrels({"q": {"a": 1}}), Run.from_scores({"q": {"a": 1.0}}), [parse_metric("P@1")])
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.n_queries = 2


def test_a_spec_of_no_known_metric_is_refused_before_scoring():
    run = Run.from_scores({"q": {"a": 1.0}})
    for spec, name in [(MetricSpec("Bogus", 10), "Bogus@10"), (MetricSpec("R-Prec", 5), "R-Prec@5")]:
        with pytest.raises(UnknownMetricError) as caught:
            evaluate(Qrels({"q": {"a": 1}}), run, [spec])
        assert str(caught.value) == f"unknown metric {name}"


QRELS = {"q1": {"a": 1, "b": 0, "c": 2}, "q2": {"d": 1}, "q3": {"e": 1}}
RUN = {
    "q1": {"a": 3.0, "x": 2.5, "b": 2.0, "y": 1.0},  # 4 documents, 2 judged
    "q2": {"z": 1.0, "d": 0.5},  # 2 documents
    "q8": {"a": 1.0},  # not judged
    "q9": {"b": 1.0},  # not judged
}  # q3 judged, missing from the run


def _by_hand_counts():
    judged_in_run = [q for q in QRELS if RUN.get(q)]
    return {
        "n_queries": len(QRELS),
        "n_missing": sum(1 for q in QRELS if q not in RUN),
        "n_unjudged": sum(1 for q in RUN if q not in QRELS),
        "depth": max(len(RUN[q]) for q in judged_in_run),
    }


def test_an_evaluation_counts_its_queries_by_hand():
    result = evaluate(Qrels(QRELS), Run.from_scores(RUN), [parse_metric("nDCG@10")])
    counts = _by_hand_counts()
    assert (
        (result.n_queries, result.n_missing, result.n_unjudged)
        == (
            counts["n_queries"],
            counts["n_missing"],
            counts["n_unjudged"],
        )
        == (3, 1, 2)
    )


@pytest.mark.parametrize("metrics", [["nDCG@10"], ["MAP@100", "MRR@10"], ["R-Prec"], ["Judged@10", "P@1"]])
def test_metrics_each_cut_or_without_a_cutoff_read_no_whole_run_depth(metrics):
    result = evaluate(Qrels(QRELS), Run.from_scores(RUN), [parse_metric(m) for m in metrics])
    assert result.depth is None


@pytest.mark.parametrize("metrics", [["nDCG"], ["P@1", "MAP"], ["MRR", "R-Prec"]])
def test_a_whole_run_metric_records_the_depth_it_read(metrics):
    result = evaluate(Qrels(QRELS), Run.from_scores(RUN), [parse_metric(m) for m in metrics])
    assert result.depth == _by_hand_counts()["depth"] == 4


def test_a_run_with_no_judged_query_reads_depth_zero_and_scores_zero():
    run = Run.from_scores({"q8": {"a": 1.0}})
    result = evaluate(Qrels(QRELS), run, [parse_metric("nDCG"), parse_metric("P@1")])
    assert result.depth == 0
    assert result.means == {"nDCG": 0.0, "P@1": 0.0}
    assert result.n_missing == 3 and result.n_unjudged == 1


def test_judged_alone_is_scored_as_ir_measures_and_the_rest_as_pytrec_eval():
    import ir_measures

    run = Run.from_scores(RUN)
    judged = evaluate(Qrels(QRELS), run, [parse_metric("Judged@3")])
    judged_in_run = {q: docs for q, docs in RUN.items() if q in QRELS}
    reference = {m.query_id: m.value for m in ir_measures.iter_calc([ir_measures.Judged @ 3], QRELS, judged_in_run)}
    assert judged.per_query == {q: {"Judged@3": pytest.approx(reference.get(q, 0.0), abs=1e-12)} for q in QRELS}
    ndcg = evaluate(Qrels(QRELS), run, [parse_metric("nDCG@3")])
    trec = pytrec_eval.RelevanceEvaluator(QRELS, {"ndcg_cut.3"}).evaluate(judged_in_run)
    for query_id in QRELS:
        expected = trec[query_id]["ndcg_cut_3"] if query_id in trec else 0.0
        assert ndcg.per_query[query_id]["nDCG@3"] == pytest.approx(expected, abs=1e-12)


def test_qrels_of_no_query_give_means_of_zero():
    result = evaluate(Qrels({}), Run.from_scores({"q": {"a": 1.0}}), [parse_metric("P@1"), parse_metric("nDCG")])
    assert result.means == {"P@1": 0.0, "nDCG": 0.0}
    assert (result.n_queries, result.n_unjudged, result.per_query) == (0, 1, {})


@pytest.mark.parametrize("run, metrics", [({"q8": {"a": 1.0}}, ["nDCG@10", "P@1"]), (RUN, [])])
def test_trec_eval_is_not_run_when_it_has_nothing_to_measure(monkeypatch, run, metrics):
    # no judged query ranked, or no metric asked
    built = []
    original = pytrec_eval.RelevanceEvaluator

    def counting(*args, **kwargs):
        built.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(pytrec_eval, "RelevanceEvaluator", counting)
    evaluate(Qrels(QRELS), Run.from_scores(run), [parse_metric(m) for m in metrics])
    assert built == []
    evaluate(Qrels(QRELS), Run.from_scores(RUN), [parse_metric("nDCG@10")])
    assert len(built) == 1  # and the count does see a run that has something to measure


def test_the_alias_table_is_built_once(monkeypatch):
    import harness.evaluation.metrics as metrics

    parse_metric("nDCG@10")  # built here, if no test before built it
    built = []
    monkeypatch.setattr(metrics, "alias_table", lambda families: built.append(1) or alias_table(families))
    parse_metric("ndcg_cut_10")
    parse_metric("MRR@10")
    assert built == []


@pytest.mark.parametrize("grades, ranked", [((1, 1), False), ((2, 3), False), ((1, 0), True), ((0, 0), True)])
def test_judged_ranks_documents_only_when_some_judgment_is_not_relevant(monkeypatch, grades, ranked):
    # Judged@k of a query whose every judgment is relevant (grade ≥ 1) is trec_eval's P@k: nothing is ranked again.
    import ir_measures

    import harness.evaluation.metrics as metrics

    calls = []
    original = metrics._ranks
    monkeypatch.setattr(metrics, "_ranks", lambda *args: calls.append(args) or original(*args))
    qrels = {"q": {"a": grades[0], "c": grades[1]}}
    scores = {"q": {"a": 3.0, "b": 2.0, "c": 1.0, "d": 0.5}}
    result = evaluate(Qrels(qrels), Run.from_scores(scores), [parse_metric("Judged@2"), parse_metric("Judged@3")])
    reference = {
        str(m.measure): m.value
        for m in ir_measures.iter_calc([ir_measures.Judged @ 2, ir_measures.Judged @ 3], qrels, scores)
    }
    assert result.per_query["q"] == pytest.approx(
        {"Judged@2": reference["Judged@2"], "Judged@3": reference["Judged@3"]}
    )
    assert bool(calls) is ranked


def test_a_query_whose_judgments_are_empty_is_judged_zero_like_ir_measures():
    import ir_measures

    qrels = {"q": {}, "r": {"a": 1}}
    scores = {"q": {"a": 1.0, "b": 0.5}, "r": {"a": 1.0}}
    result = evaluate(Qrels(qrels), Run.from_scores(scores), [parse_metric("Judged@1")])
    reference = {m.query_id: m.value for m in ir_measures.iter_calc([ir_measures.Judged @ 1], qrels, scores)}
    assert result.per_query == {"q": {"Judged@1": reference.get("q", 0.0)}, "r": {"Judged@1": reference["r"]}}


def test_judged_ranks_nothing_when_every_cutoff_reaches_the_whole_ranking(monkeypatch):
    import ir_measures

    import harness.evaluation.metrics as metrics

    calls = []
    original = metrics._ranks
    monkeypatch.setattr(metrics, "_ranks", lambda *args: calls.append(args) or original(*args))
    qrels = {"q": {"a": 1, "c": 0}}
    scores = {"q": {"a": 3.0, "b": 2.0, "c": 1.0, "d": 0.5}}  # 4 retrieved: Judged@4 is the judged share of all
    result = evaluate(Qrels(qrels), Run.from_scores(scores), [parse_metric("Judged@4")])
    reference = next(ir_measures.iter_calc([ir_measures.Judged @ 4], qrels, scores)).value
    assert result.per_query["q"]["Judged@4"] == pytest.approx(reference) and calls == []
