"""Core records: immutability, trec_eval ranking, self-hit removal."""

from __future__ import annotations

import pytest

from harness.records import Qrels, Run, ScoredDoc, rank_scores


def test_rank_scores_orders_by_score_then_doc_id_descending():
    ranked = rank_scores({"a": 1.0, "b": 2.0, "c": 1.0, "B": 1.0})
    assert ranked == (ScoredDoc("b", 2.0), ScoredDoc("c", 1.0), ScoredDoc("a", 1.0), ScoredDoc("B", 1.0))


def test_rank_scores_compares_ids_bytewise():
    # strcmp on UTF-8 bytes: "é" (0xC3..) sorts after "z"; trec_eval ranks it first on a tie.
    assert [h.doc_id for h in rank_scores({"z": 0.0, "é": 0.0})] == ["é", "z"]


def test_qrels_is_read_only():
    source = {"q": {"d": 1}}
    qrels = Qrels(source)
    source["q"]["d"] = 0
    assert qrels["q"]["d"] == 1
    with pytest.raises(TypeError):
        qrels["q"]["d"] = 2  # type: ignore[index]
    assert qrels.doc_ids() == {"d"}
    assert qrels.relevant("missing") == set()
    assert "1 queries, 1 judgments" in repr(qrels)


def test_run_without_self_hits_and_truncated_return_new_runs():
    run = Run.from_scores({"q": {"q": 3.0, "a": 2.0, "b": 1.0}}, name="x", metadata={"m": 1})
    kept = run.without_self_hits()
    assert [h.doc_id for h in kept["q"]] == ["a", "b"]
    assert [h.doc_id for h in run["q"]] == ["q", "a", "b"]
    assert [h.doc_id for h in kept.truncated(1)["q"]] == ["a"]
    assert kept.name == "x" and kept.metadata["m"] == 1
    with pytest.raises(AttributeError):
        run.name = "y"  # type: ignore[misc]


def test_run_from_pairs_and_to_dict():
    run = Run.from_scores({"q": [("a", 1), ("b", 2)]})
    assert run.to_dict() == {"q": {"b": 2.0, "a": 1.0}}
    assert len(run) == 1 and list(run) == ["q"]


@pytest.mark.parametrize("depth", [1, 2, 3, 5], ids=["cut-1", "cut-2", "no-cut-3", "no-cut-5"])
def test_truncated_keeps_the_name_and_metadata_whether_or_not_it_cuts(depth):
    # The pool's run checks name a run's source from its metadata after truncating it.
    metadata = {"source": "x.trec", "format": "trec"}
    run = Run({"q": {"a": 1.0, "b": 2.0, "c": 3.0}}, name="tag", metadata=metadata)
    cut = run.truncated(depth)
    assert [h.doc_id for h in cut["q"]] == ["c", "b", "a"][:depth]
    assert cut.name == "tag"
    assert dict(cut.metadata) == {"source": "x.trec", "format": "trec"}


@pytest.mark.parametrize("stored", [{"label": ""}, {}], ids=["empty-label", "no-label"])
def test_a_result_read_without_a_label_is_labelled_by_its_model(tmp_path, stored):
    import json

    from harness.records import Result

    path = tmp_path / "result.json"
    data = {"dataset": "d", "split": "test", "model": "org/m", "metrics": {}, "per_query": {}, "n_queries": 0}
    path.write_text(json.dumps({**data, **stored}), encoding="utf-8")
    assert Result.from_json(path).label == "org/m"
