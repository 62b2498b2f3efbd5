"""The metric table's rules, the refusals a user reads, and what an evaluation counts beside its scores
(mutation testing: docs/mutation-report.md).

Scores are checked against pytrec_eval and counts against a loop written here; refusal texts are the exact
lines a user sees (each names the metric and gives a spelling that works).
"""

from __future__ import annotations

import dataclasses
import re

import pytest
import pytrec_eval

from harness.errors import UnknownMetricError
from harness.evaluation.metrics import (
    MetricSpec,
    alias_table,
    evaluate,
    metric_families,
    parse_k_values,
    parse_metric,
    read_metric_table,
)
from harness.records import Qrels, Run

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
