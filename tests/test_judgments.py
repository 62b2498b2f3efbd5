"""`judgments merge` and `judgments agreement`: κ and α against scikit-learn, the `krippendorff` package and
published values; merges checked by reading the written qrels by hand; every bad input refused whole."""

from __future__ import annotations

import itertools
import json
import math
import random
from fractions import Fraction
from pathlib import Path

import krippendorff
import numpy as np
import pytest
from cli_runner import invoke
from sklearn.metrics import cohen_kappa_score

from harness.errors import DatasetError
from harness.judging.agreement import cohen_kappa, krippendorff_alpha
from harness.judging.merge import merge_judgments, parse_scale, resolve

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
    return invoke(["judgments", "merge", *map(str, args)])


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
    result = invoke(["judgments", "agreement", str(alice), str(bob), str(carol), "--weights", "quadratic"])
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
    result = invoke(["validate", str(root), "--run", str(run), "--k", "2", "--json"])
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
    text = invoke(["validate", str(root), "--run", str(run), "--k", "2"]).output
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
            {"q": {"nDCG@10": 0.5, "Judged@10": judged}},  # one query: its values are the means
            1,
            {"top_k": 10},
            {"qrels": "x"},
            {},
            {},
            "2026-12-01T00:00:00+00:00",
        )
        write_result(result, Run.from_scores({"q": {"a": 1.0}}), tmp_path)
    out = invoke(["report", str(tmp_path), "--metric", "Judged@10", "--format", "csv"])
    assert out.exit_code == 0, out.output
    assert "0.9" in out.output and "0.4" in out.output and "bm25" in out.output and "dense" in out.output


def test_agreement_of_a_folder_without_annotations_is_refused(tmp_path):
    root = _folder(tmp_path, "q1\td1\t1\n")
    result = invoke(["judgments", "agreement", str(root)])
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1
    assert "test.annotations.jsonl: no annotations" in result.output and "--split" in result.output


# `judgments merge`'s tie and rounding rules.
#
# The references are written here: every multiset of up to four grades on -1..3 is resolved by a brute-force
# loop (majority: the most votes, a tie to the lowest grade by default; mean: the exact fraction rounded to the
# nearest grade, an exact half settled by the tie rule, low by default; max), and merges are run with ties under
# every policy and tie rule.
# The tests below use no fixture of conftest.py: tools/mutation.py runs them with --noconftest.


def majority_by_hand(grades):
    best, best_votes = None, -1
    for grade in sorted(set(grades)):  # ascending: a later grade wins only with strictly more votes
        votes = sum(1 for g in grades if g == grade)
        if votes > best_votes:
            best, best_votes = grade, votes
    return best


def mean_by_hand(grades, ties="low"):
    """The exact mean rounded to the nearest grade; an exact half goes to the tie rule's side."""
    mean = Fraction(sum(grades), len(grades))
    below = math.floor(mean)
    if mean - below == Fraction(1, 2):
        return below if ties == "low" else below + 1
    return below + (mean - below > Fraction(1, 2))


def majority_high_by_hand(grades):
    counts = {g: grades.count(g) for g in set(grades)}
    return max(g for g, c in counts.items() if c == max(counts.values()))


def all_grade_lists():
    for size in range(1, 5):
        yield from itertools.product(range(-1, 4), repeat=size)


def test_majority_takes_the_lowest_of_the_tied_grades():
    for grades in all_grade_lists():
        assert resolve(list(grades), "majority") == majority_by_hand(grades), grades


def test_mean_rounds_to_the_nearest_and_a_half_by_the_tie_rule():
    for grades in all_grade_lists():
        assert resolve(list(grades), "mean") == mean_by_hand(grades), grades
        assert resolve(list(grades), "mean", "low") == mean_by_hand(grades, "low"), grades
        assert resolve(list(grades), "mean", "high") == mean_by_hand(grades, "high"), grades


def test_majority_ties_go_to_the_tie_rule():
    for grades in all_grade_lists():
        assert resolve(list(grades), "majority", "high") == majority_high_by_hand(list(grades)), grades
        undecided = resolve(list(grades), "majority", "refuse") is None
        assert undecided == (majority_by_hand(grades) != majority_high_by_hand(list(grades))), grades


def test_max_is_the_highest():
    for grades in all_grade_lists():
        assert resolve(list(grades), "max") == max(grades), grades


@pytest.mark.parametrize(
    "grades, majority, mean",
    [
        ([1, 2], 1, 1),
        ([2, 1], 1, 1),
        ([0, 3], 0, 1),
        ([3, 0, 0, 3], 0, 1),
        ([1, 2, 2, 1], 1, 1),
        ([-1, 0], -1, -1),
        ([0, 1, 1, 0], 0, 0),
        ([2, 2, 3], 2, 2),
        ([0, 0, 1], 0, 0),
        ([1, 2, 2], 2, 2),
    ],
)
def test_named_ties_and_halves(grades, majority, mean):
    assert resolve(grades, "majority") == majority
    assert resolve(grades, "mean") == mean


# (q1, d1): a 1-2 tie; (q1, d2): a 0-3 tie (mean 1.5); (q2, d3): 2-2-3-3 (mean 2.5); (q2, d4): agreed 1.
TIES = (
    "query_id,doc_id,grade,annotator\n"
    "q1,d1,1,a\nq1,d1,2,b\n"
    "q1,d2,3,a\nq1,d2,0,b\n"
    "q2,d3,3,a\nq2,d3,2,b\nq2,d3,3,c\nq2,d3,2,d\n"
    "q2,d4,1,a\nq2,d4,1,b\n"
)
VOTES = {("q1", "d1"): [1, 2], ("q1", "d2"): [3, 0], ("q2", "d3"): [3, 2, 3, 2], ("q2", "d4"): [1, 1]}
BY_HAND = {"majority": majority_by_hand, "mean": mean_by_hand, "max": max}


@pytest.mark.parametrize("policy", ["majority", "mean", "max"])
def test_a_merge_with_ties_resolves_each_pair_by_its_policy(tmp_path, policy):
    root = _folder(tmp_path)
    (tmp_path / "g.csv").write_text(TIES)
    report = merge_judgments(root, [tmp_path / "g.csv"], policy=policy)
    expected = {pair: BY_HAND[policy](grades) for pair, grades in VOTES.items()}
    assert expected == {
        ("q1", "d1"): {"majority": 1, "mean": 1, "max": 2}[policy],
        ("q1", "d2"): {"majority": 0, "mean": 1, "max": 3}[policy],
        ("q2", "d3"): {"majority": 2, "mean": 2, "max": 3}[policy],
        ("q2", "d4"): 1,
    }
    assert _qrels_by_hand(root / "qrels" / "test.tsv") == expected
    assert report.n_read == 10 and report.n_pairs == 4 and report.added == 4 and report.changed == []
    assert [(q, d) for q, d, _ in report.conflicts] == [("q1", "d1"), ("q1", "d2"), ("q2", "d3")]


def test_strict_refuses_a_tie_and_writes_nothing(tmp_path):
    root = _folder(tmp_path)
    (tmp_path / "g.csv").write_text(TIES)
    with pytest.raises(DatasetError, match="3 pairs with disagreeing grades"):
        merge_judgments(root, [tmp_path / "g.csv"], policy="strict")
    assert sorted(p.name for p in (root / "qrels").iterdir()) == []


def test_strict_takes_agreeing_grades(tmp_path):
    root = _folder(tmp_path)
    (tmp_path / "g.csv").write_text("query_id,doc_id,grade,annotator\nq1,d1,2,a\nq1,d1,2,b\nq2,d4,0,a\n")
    report = merge_judgments(root, [tmp_path / "g.csv"], policy="strict")
    assert _qrels_by_hand(root / "qrels" / "test.tsv") == {("q1", "d1"): 2, ("q2", "d4"): 0}
    assert report.conflicts == []


@pytest.mark.parametrize("policy, expected", [("majority", 1), ("mean", 1), ("max", 2)])
def test_an_existing_grade_tied_by_a_new_one_is_a_vote(tmp_path, policy, expected):
    # the qrels' own grade 1 votes against the new annotator's 2: a tie, resolved (and listed as changed) by policy
    root = _folder(tmp_path, "q1\td1\t1\n")
    (tmp_path / "g.csv").write_text("query_id,doc_id,grade,annotator\nq1,d1,2,a\n")
    report = merge_judgments(root, [tmp_path / "g.csv"], policy=policy)
    assert _qrels_by_hand(root / "qrels" / "test.tsv") == {("q1", "d1"): expected}
    assert report.changed == ([] if expected == 1 else [("q1", "d1", 1, expected)])
    assert report.added == 0
    assert report.conflicts == [("q1", "d1", {"qrels:test": 1, "a": 2})]


def test_a_dry_merge_writes_nothing(tmp_path):
    root = _folder(tmp_path)
    (tmp_path / "g.csv").write_text(TIES)
    report = merge_judgments(root, [tmp_path / "g.csv"], write=False)
    assert not report.written and list((root / "qrels").iterdir()) == []


@pytest.mark.parametrize("text, scale", [("0-3", (0, 3)), (" -1 - 2 ", (-1, 2)), ("0-1", (0, 1))])
def test_a_scale_is_read(text, scale):
    assert parse_scale(text) == scale


@pytest.mark.parametrize("text", ["3-3", "3-0", "0", "a-b", "0-3-4"])
def test_a_bad_scale_is_refused(text):
    with pytest.raises(ValueError):
        parse_scale(text)


def _refusal_text(root, files, **options):
    with pytest.raises(DatasetError) as caught:
        merge_judgments(root, files, **options)
    assert list((root / "qrels").iterdir()) == [] or options.get("expect_files")
    return str(caught.value)


def test_one_annotator_grading_a_pair_two_ways_is_refused_naming_both_places(tmp_path):
    root = _folder(tmp_path)
    one, two = tmp_path / "one.csv", tmp_path / "two.csv"
    one.write_text("query_id,doc_id,grade,annotator\nq1,d1,1,a\nq1,d2,2,a\n")
    two.write_text("query_id,doc_id,grade,annotator\nq1,d1,3,a\nq1,d2,2,a\nq1,d1,1,b\n")
    assert _refusal_text(root, [one, two]) == (
        "1 pairs graded twice differently by the same annotator (keep one grade per annotator and pair; nothing "
        f"written):\n  a graded (q1, d1) 1 at {one}:2 and 3 at {two}:2"
    )


def test_grades_off_the_scale_are_refused_each_named(tmp_path):
    root = _folder(tmp_path)
    grades = tmp_path / "g.csv"
    grades.write_text("query_id,doc_id,grade,annotator\nq1,d1,4,a\nq1,d2,3,a\nq2,d3,-1,a\n")
    assert _refusal_text(root, [grades]) == (
        f"2 grades outside the scale 0-3 (fix them or pass `scale`; nothing written):\n"
        f"  {grades}:2: grade 4 for (q1, d1)\n  {grades}:4: grade -1 for (q2, d3)"
    )
    assert merge_judgments(root, [grades], scale=(-1, 4)).n_pairs == 3


def test_the_scale_bounds_are_inclusive(tmp_path):
    root = _folder(tmp_path)
    grades = tmp_path / "g.csv"
    grades.write_text("query_id,doc_id,grade,annotator\nq1,d1,0,a\nq1,d2,3,a\n")
    assert _qrels_after(root, grades) == {("q1", "d1"): 0, ("q1", "d2"): 3}


def _qrels_after(root, grades, **options):
    merge_judgments(root, [grades], **options)
    return _qrels_by_hand(root / "qrels" / "test.tsv")


def test_a_bad_scale_says_what_it_wants():
    with pytest.raises(ValueError) as caught:
        parse_scale("3-0")
    assert str(caught.value) == "grade scale '3-0' is not LOW-HIGH with LOW < HIGH (e.g. 0-3)"


def test_a_split_on_another_scale_is_refused_naming_it(tmp_path):
    root = _folder(tmp_path, "q1\td1\t1\n")
    grades = tmp_path / "g.csv"
    grades.write_text("query_id,doc_id,grade,annotator\nq1,d2,4,a\n")
    merge_judgments(root, [grades], scale=(0, 4))
    other = tmp_path / "o.csv"
    other.write_text("query_id,doc_id,grade,annotator\nq2,d3,1,b\n")
    with pytest.raises(DatasetError) as caught:
        merge_judgments(root, [other])
    assert str(caught.value) == (
        f"{root / 'qrels' / 'test.tsv'}: split 'test' was merged on the scale 0-4, not 0-3 "
        "(pass that `scale`, or merge into a new split; nothing written)"
    )


def test_a_split_holding_grades_off_the_scale_is_refused_naming_them(tmp_path):
    root = _folder(tmp_path, "q1\td1\t5\nq1\td2\t4\nq2\td3\t1\n")
    grades = tmp_path / "g.csv"
    grades.write_text("query_id,doc_id,grade,annotator\nq2,d4,1,b\n")
    with pytest.raises(DatasetError) as caught:
        merge_judgments(root, [grades])
    assert str(caught.value) == (
        f"{root / 'qrels' / 'test.tsv'}: split 'test' holds grades 4, 5, not 0-3 "
        "(pass that `scale`, or merge into a new split; nothing written)"
    )


def test_strict_lists_each_conflict_with_every_vote(tmp_path):
    root = _folder(tmp_path, "q2\td3\t1\n")
    (tmp_path / "g.csv").write_text(TIES)
    with pytest.raises(DatasetError) as caught:
        merge_judgments(root, [tmp_path / "g.csv"], policy="strict")
    assert str(caught.value) == (
        "3 pairs with disagreeing grades under the strict policy (resolve by majority, mean or max, or settle them; "
        "nothing written):\n  (q1, d1): a=1, b=2\n  (q1, d2): a=3, b=0\n  (q2, d3): a=3, b=2, c=3, d=2, qrels:test=1"
    )


def test_an_unknown_policy_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"^unknown policy 'vote' \(majority, mean, max, strict\)$"):
        merge_judgments(_folder(tmp_path), [], policy="vote")


def test_a_rerun_of_the_same_merge_changes_nothing(tmp_path):
    root = _folder(tmp_path)
    (tmp_path / "g.csv").write_text(TIES)
    merge_judgments(root, [tmp_path / "g.csv"], policy="mean")
    first = (root / "qrels" / "test.tsv").read_text()
    report = merge_judgments(root, [tmp_path / "g.csv"], policy="mean")
    assert (root / "qrels" / "test.tsv").read_text() == first
    assert report.added == 0 and report.changed == [] and report.n_read == 10 and report.n_pairs == 4
    annotations = (root / "qrels" / "test.annotations.jsonl").read_text().splitlines()
    assert len(annotations) == 10  # recorded once, not again


def test_a_later_merge_adds_its_votes_to_the_recorded_ones(tmp_path):
    root = _folder(tmp_path)
    (tmp_path / "g.csv").write_text(TIES)
    merge_judgments(root, [tmp_path / "g.csv"], policy="majority")
    (tmp_path / "more.csv").write_text("query_id,doc_id,grade,annotator\nq1,d1,2,c\nq1,d3,0,a\n")
    report = merge_judgments(root, [tmp_path / "more.csv"], policy="majority")
    # (q1, d1): a=1, b=2, c=2 -> 2 (was the 1-2 tie's 1); (q1, d3) is new
    assert _qrels_by_hand(root / "qrels" / "test.tsv") == {
        ("q1", "d1"): 2,
        ("q1", "d2"): 0,
        ("q2", "d3"): 2,
        ("q2", "d4"): 1,
        ("q1", "d3"): 0,
    }
    assert report.changed == [("q1", "d1", 1, 2)] and report.added == 1 and report.n_read == 2
