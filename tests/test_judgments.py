"""`judgments merge` and `judgments agreement`: κ and α against scikit-learn, the `krippendorff` package and
published values; merges checked by reading the written qrels by hand; every bad input refused whole."""

from __future__ import annotations

import json
import random
from pathlib import Path

import krippendorff
import numpy as np
import pytest
from click.testing import CliRunner
from sklearn.metrics import cohen_kappa_score

from harness.cli import cli
from harness.judging.agreement import cohen_kappa, krippendorff_alpha

# Krippendorff (2011), "Computing Krippendorff's alpha-reliability", example C: 4 observers, 12 units, missing
# values; the paper gives α = 0.743 (nominal), 0.815 (ordinal), 0.849 (interval).
KRIPPENDORFF_C = [
    [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
    [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
]


def _units(rows):
    return [[row[i] for row in rows if row[i] is not None] for i in range(len(rows[0]))]


def test_cohen_kappa_textbook_example():
    # Wikipedia's "Cohen's kappa" example: 50 proposals, 20 yes/yes, 5 yes/no, 10 no/yes, 15 no/no: κ = 0.4.
    first = [1] * 20 + [1] * 5 + [0] * 10 + [0] * 15
    second = [1] * 20 + [0] * 5 + [1] * 10 + [0] * 15
    assert cohen_kappa(first, second, [0, 1]) == pytest.approx(0.4)


@pytest.mark.parametrize("weights", [None, "linear", "quadratic"])
@pytest.mark.parametrize("seed", range(5))
def test_cohen_kappa_matches_scikit_learn(weights, seed):
    rng = random.Random(seed)
    first = [rng.randint(0, 3) for _ in range(60)]
    second = [min(3, max(0, g + rng.choice([-1, 0, 0, 1, 2]))) for g in first]
    expected = cohen_kappa_score(first, second, labels=[0, 1, 2, 3], weights=weights)
    assert cohen_kappa(first, second, range(4), weights) == pytest.approx(expected)


@pytest.mark.parametrize(("level", "published"), [("nominal", 0.743), ("ordinal", 0.815), ("interval", 0.849)])
def test_krippendorff_alpha_published_example(level, published):
    assert krippendorff_alpha(_units(KRIPPENDORFF_C), [1, 2, 3, 4, 5], level) == pytest.approx(published, abs=5e-4)


@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval"])
@pytest.mark.parametrize("seed", range(5))
def test_krippendorff_alpha_matches_the_krippendorff_package(level, seed):
    rng = random.Random(seed)
    truth = [rng.randint(0, 3) for _ in range(40)]
    rows = [
        [None if rng.random() < 0.3 else min(3, max(0, g + rng.choice([-1, 0, 0, 1]))) for g in truth] for _ in range(3)
    ]
    data = np.array([[np.nan if v is None else v for v in row] for row in rows], dtype=float)
    expected = krippendorff.alpha(reliability_data=data, level_of_measurement=level, value_domain=[0, 1, 2, 3])
    assert krippendorff_alpha(_units(rows), range(4), level) == pytest.approx(expected)


# --- merge -------------------------------------------------------------------------------------------------------


def _folder(tmp_path: Path, qrels: str | None = None) -> Path:
    root = tmp_path / "set"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{i}", "title": "", "text": f"doc {i}"}) + "\n" for i in range(1, 5))
    )
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": f"query {i}"}) + "\n" for i in range(1, 3))
    )
    if qrels is not None:
        (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + qrels)
    return root


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _qrels_by_hand(path: Path) -> dict[tuple[str, str], int]:
    lines = path.read_text().splitlines()
    assert lines[0] == "query-id\tcorpus-id\tscore"
    return {(q, d): int(g) for q, d, g in (line.split("\t") for line in lines[1:])}


def _merge(*args):
    return CliRunner().invoke(cli, ["judgments", "merge", *map(str, args)])


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_merge_two_annotators_into_a_new_split(tmp_path):
    root = _folder(tmp_path)
    alice = _write(
        tmp_path, "alice.csv", "query_id,doc_id,grade,annotator\nq1,d1,3,alice\nq1,d2,0,alice\nq2,d3,2,alice\n"
    )
    bob = _write(tmp_path, "bob.qrels", "q1 0 d1 1\nq1 0 d2 0\nq2 0 d4 1\n")
    carol = _write(tmp_path, "carol.csv", "query_id,doc_id,grade,annotator\nq1,d1,1,carol\n")
    result = _merge(root, alice, bob, carol, "--annotator", "bob", "--split", "new", "--resolve", "max")
    assert result.exit_code == 0, result.output
    # max of alice 3, bob 1, carol 1 is 3 for (q1, d1); the rest were graded once or the same.
    assert _qrels_by_hand(root / "qrels" / "new.tsv") == {
        ("q1", "d1"): 3,
        ("q1", "d2"): 0,
        ("q2", "d3"): 2,
        ("q2", "d4"): 1,
    }
    records = [json.loads(line) for line in (root / "qrels" / "new.annotations.jsonl").read_text().splitlines()]
    assert sorted((r["query_id"], r["doc_id"], r["annotator"], r["grade"]) for r in records) == sorted(
        [
            ("q1", "d1", "alice", 3),
            ("q1", "d2", "alice", 0),
            ("q2", "d3", "alice", 2),
            ("q1", "d1", "bob", 1),
            ("q1", "d2", "bob", 0),
            ("q2", "d4", "bob", 1),
            ("q1", "d1", "carol", 1),
        ]
    )
    assert {r["source"] for r in records if r["annotator"] == "bob"} == {str(bob)}
    assert all(r["scale"] == [0, 3] and r["time"] for r in records)
    assert "alice" in result.output and "Krippendorff" in result.output


@pytest.mark.parametrize(("policy", "expected"), [("majority", 1), ("mean", 2), ("max", 3)])
def test_merge_policies_resolve_disagreement(tmp_path, policy, expected):
    root = _folder(tmp_path)
    grades = _write(tmp_path, "g.csv", "query_id,doc_id,grade,annotator\nq1,d1,3,a\nq1,d1,1,b\nq1,d1,1,c\nq1,d1,2,d\n")
    # majority: 1 (two votes); mean: 7/4 = 1.75 rounds to 2; max: 3.
    assert _merge(root, grades, "--resolve", policy).exit_code == 0
    assert _qrels_by_hand(root / "qrels" / "test.tsv") == {("q1", "d1"): expected}


def test_merge_keeps_existing_grades_as_a_vote_and_lists_changes(tmp_path):
    root = _folder(tmp_path, "q1\td1\t0\nq2\td2\t1\n")
    grades = _write(tmp_path, "g.csv", "query_id,doc_id,grade,annotator\nq1,d1,2,a\nq1,d1,2,b\nq2,d3,3,a\n")
    result = _merge(root, grades)
    assert result.exit_code == 0, result.output
    # (q1, d1): the qrels' 0 against a and b's 2: majority 2, and the change is listed; (q2, d2) untouched.
    assert _qrels_by_hand(root / "qrels" / "test.tsv") == {("q1", "d1"): 2, ("q2", "d2"): 1, ("q2", "d3"): 3}
    assert "changed (q1, d1): 0 -> 2" in result.output
    again = _merge(root, grades)  # the same files again: nothing new, nothing changed
    assert again.exit_code == 0 and "0 new, 0 changed" in again.output
    # a's and b's 3 grades, and the qrels' own two votes (qrels:test 0 for (q1, d1), 1 for (q2, d2)), once
    records = [json.loads(line) for line in (root / "qrels" / "test.annotations.jsonl").read_text().splitlines()]
    assert sorted((r["query_id"], r["doc_id"], r["annotator"], r["grade"]) for r in records) == [
        ("q1", "d1", "a", 2),
        ("q1", "d1", "b", 2),
        ("q1", "d1", "qrels:test", 0),
        ("q2", "d2", "qrels:test", 1),
        ("q2", "d3", "a", 3),
    ]


def test_a_merge_killed_between_its_two_renames_completes_on_rerun(tmp_path):
    root = _folder(tmp_path, "q1\td1\t0\n")
    before = (root / "qrels" / "test.tsv").read_bytes()
    grades = _write(tmp_path, "g.csv", "query_id,doc_id,grade,annotator\nq1,d1,2,a\nq1,d1,2,b\nq1,d2,1,a\n")
    assert _merge(root, grades).exit_code == 0
    complete = (root / "qrels" / "test.tsv").read_bytes()
    (root / "qrels" / "test.tsv").write_bytes(before)  # as if killed after the annotations' rename
    assert _merge(root, grades).exit_code == 0
    assert (root / "qrels" / "test.tsv").read_bytes() == complete
    assert _qrels_by_hand(root / "qrels" / "test.tsv") == {("q1", "d1"): 2, ("q1", "d2"): 1}


def test_a_hand_edited_grade_after_a_merge_still_votes(tmp_path):
    root = _folder(tmp_path)
    grades = _write(tmp_path, "g.csv", "query_id,doc_id,grade,annotator\nq1,d1,2,a\n")
    assert _merge(root, grades).exit_code == 0
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t0\n")  # edited by hand
    output = _refused(tmp_path, root, grades, "--resolve", "strict")
    assert "(q1, d1): a=2, qrels:test=0" in output


def test_agreement_command_prints_kappa_and_confusion(tmp_path):
    a = [0, 1, 2, 3, 3, 2, 1, 0, 2, 2]
    b = [0, 1, 1, 3, 2, 2, 0, 0, 3, 2]
    alice = _write(
        tmp_path,
        "a.csv",
        "query_id,doc_id,grade,annotator\n" + "".join(f"q{i},d{i},{g},alice\n" for i, g in enumerate(a)),
    )
    bob = _write(
        tmp_path,
        "b.csv",
        "query_id,doc_id,grade,annotator\n" + "".join(f"q{i},d{i},{g},bob\n" for i, g in enumerate(b)),
    )
    c = [1, 1, 2, 3, 2, 2, 0, 1]  # carol graded the first 8 only
    carol = _write(
        tmp_path,
        "c.csv",
        "query_id,doc_id,grade,annotator\n" + "".join(f"q{i},d{i},{g},carol\n" for i, g in enumerate(c)),
    )
    result = CliRunner().invoke(
        cli, ["judgments", "agreement", str(alice), str(bob), str(carol), "--weights", "quadratic"]
    )
    assert result.exit_code == 0, result.output
    kappa = cohen_kappa_score(a, b, labels=[0, 1, 2, 3], weights="quadratic")
    row = next(line for line in result.output.splitlines() if line.strip().startswith("alice") and "bob" in line)
    assert row.split()[-1] == f"{kappa:.3f}" and row.split()[2] == "10"
    alpha = krippendorff.alpha(
        reliability_data=[a, b, c + [np.nan, np.nan]], level_of_measurement="ordinal", value_domain=[0, 1, 2, 3]
    )
    assert f"over 10 pairs graded by two or more: {alpha:.3f}" in result.output
    confusion = result.output.split("(columns):\n")[1].splitlines()
    assert confusion[3].split() == ["2", "0", "1", "2", "1"]  # alice gave 2 four times: bob 1, 2, 2, 3


# --- bad input: one refusal, exit 1, nothing written ----------------------------------------------------------


def _refused(tmp_path, root, *args) -> str:
    before = _snapshot(root)
    result = _merge(root, *args)
    assert result.exit_code == 1, result.output
    assert _snapshot(root) == before
    assert "nothing written" in result.output.splitlines()[0]
    return result.output


def test_unknown_queries_and_documents_are_both_listed(tmp_path):
    root = _folder(tmp_path)
    grades = _write(tmp_path, "g.csv", "query_id,doc_id,grade,annotator\nq9,d1,1,a\nq1,d99,2,a\nq1,d1,1,a\n")
    output = _refused(tmp_path, root, grades)
    assert "unknown query 'q9'" in output and "unknown document 'd99'" in output and f"{grades}:2" in output


def test_grades_outside_the_scale_are_refused(tmp_path):
    root = _folder(tmp_path)
    grades = _write(tmp_path, "g.qrels", "q1 0 d1 4\nq1 0 d2 2\n")
    output = _refused(tmp_path, root, grades, "--annotator", "a")
    assert "outside the scale 0-3" in output and f"{grades}:1: grade 4" in output


def test_one_annotator_grading_a_pair_twice_differently_is_refused(tmp_path):
    root = _folder(tmp_path)
    first = _write(tmp_path, "one.csv", "query_id,doc_id,grade,annotator\nq1,d1,1,a\n")
    second = _write(tmp_path, "two.csv", "query_id,doc_id,grade,annotator\nq1,d1,3,a\n")
    output = _refused(tmp_path, root, first, second)
    assert "graded twice differently" in output and f"{first}:2" in output and f"{second}:2" in output


def test_merging_into_a_split_on_another_scale_is_refused(tmp_path):
    root = _folder(tmp_path, "q1\td1\t1\n")
    first = _write(tmp_path, "one.csv", "query_id,doc_id,grade,annotator\nq1,d2,4,a\n")
    assert _merge(root, first, "--scale", "0-4").exit_code == 0  # the split is now on 0-4
    second = _write(tmp_path, "two.csv", "query_id,doc_id,grade,annotator\nq2,d3,1,b\n")
    output = _refused(tmp_path, root, second)
    assert "was merged on the scale 0-4, not 0-3" in output


def test_strict_refuses_every_conflict_and_lists_them(tmp_path):
    root = _folder(tmp_path, "q2\td2\t1\n")
    grades = _write(
        tmp_path, "g.csv", "query_id,doc_id,grade,annotator\nq1,d1,3,a\nq1,d1,1,b\nq2,d2,2,a\nq1,d3,1,a\nq1,d3,1,b\n"
    )
    output = _refused(tmp_path, root, grades, "--resolve", "strict")
    lines = output.splitlines()
    assert lines[0].startswith("Error: 2 pairs with disagreeing grades")
    assert "(q1, d1): a=3, b=1" in lines[1] and "(q2, d2): a=2, qrels:test=1" in lines[2]


# --- coverage: validate --run ------------------------------------------------------------------------------------


def test_validate_run_shows_judged_at_k_and_unjudged_count(tmp_path):
    import ir_measures

    root = _folder(tmp_path, "q1\td1\t2\nq1\td2\t0\nq2\td3\t1\n")
    lines = [
        "q1 Q0 d1 1 0.9 s",
        "q1 Q0 d3 2 0.8 s",
        "q1 Q0 d2 3 0.7 s",
        "q1 Q0 d4 4 0.6 s",
        "q2 Q0 d4 1 0.9 s",
        "q2 Q0 d1 2 0.8 s",
        "q2 Q0 d2 3 0.7 s",
    ]
    run = _write(tmp_path, "run.trec", "\n".join(lines) + "\n")
    result = CliRunner().invoke(cli, ["validate", str(root), "--run", str(run), "--k", "2", "--json"])
    assert result.exit_code == 0, result.output
    (coverage,) = json.loads(result.output)["coverage"]
    qrels = [ir_measures.Qrel("q1", "d1", 2), ir_measures.Qrel("q1", "d2", 0), ir_measures.Qrel("q2", "d3", 1)]
    scored = [ir_measures.ScoredDoc(q, d, float(s)) for q, _, d, _, s, _ in (line.split() for line in lines)]
    expected = ir_measures.calc_aggregate([ir_measures.Judged @ 2], qrels, scored)[ir_measures.Judged @ 2]
    assert coverage["Judged@2"] == pytest.approx(expected)
    judged = {("q1", "d1"), ("q1", "d2"), ("q2", "d3")}
    # by hand: q1's top 2 is d1 (judged), d3 (not); q2's is d4, d1 (neither): 3 unjudged.
    assert (
        coverage["unjudged_in_top_k"]
        == sum(
            1
            for q in ("q1", "q2")
            for d in [d for qq, _, d, *_ in map(str.split, lines) if qq == q][:2]
            if (q, d) not in judged
        )
        == 3
    )
    text = CliRunner().invoke(cli, ["validate", str(root), "--run", str(run), "--k", "2"]).output
    assert f"{run}: Judged@2 {expected:.3f}, 3 unjudged documents in the top 2 of 2 judged queries" in text


def test_report_tabulates_each_systems_judged_at_10(tmp_path):
    from harness.records import Run
    from harness.reporting.report import Result, write_result

    for model, judged in (("bm25", 0.9), ("dense", 0.4)):
        result = Result(
            "d",
            "test",
            model,
            {"nDCG@10": 0.5, "Judged@10": judged},
            {"q": {"Judged@10": judged}},
            1,
            {"top_k": 10},
            {"qrels": "x"},
            {},
            {},
            "2026-12-01T00:00:00+00:00",
        )
        write_result(result, Run.from_scores({"q": {"a": 1.0}}), tmp_path)
    out = CliRunner().invoke(cli, ["report", str(tmp_path), "--metric", "Judged@10", "--format", "csv"])
    assert out.exit_code == 0, out.output
    assert "0.9" in out.output and "0.4" in out.output and "bm25" in out.output and "dense" in out.output


def test_agreement_of_a_folder_without_annotations_is_refused(tmp_path):
    root = _folder(tmp_path, "q1\td1\t1\n")
    result = CliRunner().invoke(cli, ["judgments", "agreement", str(root)])
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1
    assert "test.annotations.jsonl: no annotations" in result.output and "--split" in result.output
